//! A client's `initialize` params read as far as they can be: a string that is not valid Unicode
//! (a lone surrogate escape such as `\ud800`, which JSON's grammar allows and Rust's strings
//! cannot hold) costs that string, written U+FFFD, not the whole params. Otherwise one bad
//! `clientInfo.name` would lose the client's version, protocol version and capabilities with it.

use serde_json::Value;

/// `text` parsed as JSON, each lone surrogate escape in it read as U+FFFD (as the audit log
/// names a tool whose name holds one); None when it is not JSON for another reason.
pub fn parse(text: &str) -> Option<Value> {
    match serde_json::from_str(text) {
        Ok(v) => Some(v),
        // Rewritten only when it failed: well-formed params are parsed once, as they were.
        Err(_) => serde_json::from_str(&lone_surrogates_replaced(text)?).ok(),
    }
}

/// `text` with every `\uXXXX` escape of a lone surrogate (a high half with no low half right
/// after it, or a low half alone) written `\ufffd`; None when it holds none (nothing to retry).
fn lone_surrogates_replaced(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let unit = |at: usize| -> Option<u32> {
        let hex = bytes.get(at..at + 6)?;
        if hex[0] != b'\\' || hex[1] != b'u' {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
    };
    let (mut out, mut copied, mut in_string, mut i) = (String::new(), 0, false, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                let Some(u) = unit(i) else {
                    // Any other escape: its character is skipped with it (`\"` ends no string).
                    i += 2;
                    continue;
                };
                let paired =
                    (0xD800..0xDC00).contains(&u) && unit(i + 6).is_some_and(|l| (0xDC00..0xE000).contains(&l));
                if paired {
                    i += 12;
                    continue;
                }
                if (0xD800..0xE000).contains(&u) {
                    out.push_str(&text[copied..i]);
                    out.push_str("\\ufffd");
                    copied = i + 6;
                }
                i += 6;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if copied == 0 {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_surrogate_is_read_as_a_replacement_character_and_nothing_else_changes() {
        let v = parse(r#"{"a":"\ud800x","b":"\udc00","c":"\ud83d\ude00","d":"\\ud800","e\"":"\"\ud800"}"#).unwrap();
        assert_eq!(v["a"], "\u{fffd}x");
        assert_eq!(v["b"], "\u{fffd}");
        assert_eq!(v["c"], "\u{1f600}", "a pair is one character");
        assert_eq!(v["d"], "\\ud800", "an escaped backslash starts no escape");
        assert_eq!(v["e\""], "\"\u{fffd}");
        // A high half followed by another high half: both alone.
        assert_eq!(parse(r#"["\ud800\ud800"]"#).unwrap()[0], "\u{fffd}\u{fffd}");
        // Outside strings, and for JSON broken otherwise, nothing is made up.
        assert_eq!(parse(r#"{"a":"\ud800"#), None);
        assert_eq!(parse("not json"), None);
        assert_eq!(parse(r#"{"ü":"\ud800é"}"#).unwrap()["ü"], "\u{fffd}é");
    }
}
