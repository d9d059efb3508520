//! Identifiers shared by every stage, defined below all of them so no stage imports upward.

/// Identifies a session inside the router (never sent to anyone).
pub type SessionId = u64;

/// `N` bytes from the kernel's random source (getrandom), for tokens, session ids and keys.
pub fn random<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    let mut filled = 0;
    while filled < N {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(bytes)
}
