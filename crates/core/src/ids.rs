//! Identifiers shared by every stage, defined below all of them so no stage imports upward.

/// Identifies a session inside the router (never sent to anyone).
pub type SessionId = u64;

pub use switchyard_os::random::random;

/// `bytes` in lowercase hex, two digits each (a hash, a trace id), from a table: this runs per
/// call, where a formatter per byte would cost more than the hash.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    write_hex(&mut out, bytes);
    out
}

/// Appends `bytes` to `out` as [`hex`] writes them.
pub fn write_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}
