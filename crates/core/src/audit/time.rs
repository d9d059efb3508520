//! Wall-clock times as the audit log writes them (RFC 3339, UTC, milliseconds) and reads them
//! back, without a date library: the civil calendar from days since the epoch and back.

use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `t` as `2026-11-29T14:03:07.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let mut out = String::with_capacity(24);
    write_rfc3339(&mut out, t);
    out
}

/// Appends `t` as [`rfc3339`] writes it to `out` (the audit writer reuses one buffer for it).
pub fn write_rfc3339(out: &mut String, t: SystemTime) {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    let (h, mi, s, ms) = (rest / 3600, rest / 60 % 60, rest % 60, since.subsec_millis());
    write!(out, "{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z").expect("a String takes any text");
}

/// Appends `t` as [`rfc3339`] writes it to `out`, digit by digit (the audit writer's line
/// buffer; no formatting machinery per line).
pub fn push_rfc3339(out: &mut Vec<u8>, t: SystemTime) {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    if y > 9999 {
        // Past the four digits the fixed layout has room for: as `write!` pads it.
        let mut text = String::new();
        write_rfc3339(&mut text, t);
        out.extend_from_slice(text.as_bytes());
        return;
    }
    let mut b = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            b[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, y as u64);
    put(5, 2, m as u64);
    put(8, 2, d as u64);
    put(11, 2, rest / 3600);
    put(14, 2, rest / 60 % 60);
    put(17, 2, rest % 60);
    put(20, 3, u64::from(since.subsec_millis()));
    out.extend_from_slice(&b);
}

/// An RFC 3339 time (`2026-11-29T14:03:07Z`, `...07.5+01:00`, a date alone as its midnight UTC).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let t = text.trim();
    let b = t.as_bytes();
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| t.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let mut secs = days_from_civil(y, m, d) * 86_400;
    let mut nanos = 0u32;
    if b.len() > 10 {
        if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 19 || b[13] != b':' || b[16] != b':' {
            return None;
        }
        let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if h > 23 || mi > 59 || s > 60 {
            return None;
        }
        secs += h * 3600 + mi * 60 + s;
        let mut rest = &t[19..];
        if let Some(frac) = rest.strip_prefix('.') {
            let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            let padded = format!("{:0<9}", &frac[..digits.min(9)]);
            nanos = padded.parse().ok()?;
            rest = &frac[digits..];
        }
        secs -= match rest {
            "Z" | "z" => 0,
            _ if rest.len() == 6 && matches!(&rest[..1], "+" | "-") && &rest[3..4] == ":" => {
                let off = rest[1..3].parse::<i64>().ok()? * 3600 + rest[4..6].parse::<i64>().ok()? * 60;
                if &rest[..1] == "+" { off } else { -off }
            }
            _ => return None,
        };
    }
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::new(secs, nanos))
}

/// (year, month, day) of a day counted from 1970-01-01 (the proleptic Gregorian calendar).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days from 1970-01-01 to (y, m, d).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_and_read_back() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_960_987_123);
        let text = rfc3339(t);
        assert_eq!(text, "2026-11-29T14:03:07.123Z");
        assert_eq!(parse_rfc3339(&text), Some(t));
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000Z");
        // The audit writer's digits are the formatter's, past year 9999 too.
        for ms in [0, 5, 951_782_400_000, 1_795_960_987_123, 253_402_300_799_999, 253_402_300_800_000, 1 << 60] {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            let mut bytes = Vec::new();
            push_rfc3339(&mut bytes, t);
            assert_eq!(String::from_utf8(bytes).unwrap(), rfc3339(t), "{ms}");
        }
        // Offsets move the instant; a date alone is its midnight UTC.
        let plus = parse_rfc3339("2026-11-29T15:03:07.123+01:00").unwrap();
        assert_eq!(plus, t);
        assert_eq!(parse_rfc3339("2026-11-29").map(rfc3339).as_deref(), Some("2026-11-29T00:00:00.000Z"));
        for bad in
            ["", "yesterday", "2026-13-01", "2026-11-29T25:00:00Z", "2026-11-29T10:00:00", "2026-11-29T10:00:00.Z"]
        {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
