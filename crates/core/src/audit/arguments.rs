//! A call's arguments as its audit line can hold them, and why they cannot be when they cannot:
//! every line the log writes must be one `switchyard calls` reads back.

use serde_json::Value;

use super::MAX_LINE;

/// How deep a call's arguments may nest (`[[1]]` is 2) to be written. The line holds them one
/// level down, and `switchyard calls` reads lines nested up to 127 levels (serde_json's limit,
/// which keeps a hand-made file from overflowing its stack); a few levels are kept spare.
pub const ARGUMENTS_DEPTH: usize = 120;

/// The arguments `text` (the client's own JSON) as a line holds them, or why they are left out.
/// How deep they nest is not looked at here: the writer thread does, for every record it writes
/// (see [`ARGUMENTS_DEPTH`]), off the call's task.
///
/// Arguments that give a key twice in one object are left out: parsed, they keep one of the two
/// values (serde_json the last), and a server that takes the other would act on what the line
/// does not show.
pub fn arguments_of(text: &str) -> Result<Value, LeftOut> {
    let value = serde_json::from_str(text).map_err(|e| LeftOut::of(&e))?;
    match crate::codec::key_given_twice(text) {
        Some(_) => Err(LeftOut::KeyTwice),
        None => Ok(value),
    }
}

/// Why a call's arguments are left out of its line (its `arguments_sha256` stays). Each reason
/// is told in the daemon log on its own: one kind does not hide another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftOut {
    /// They nest deeper than [`ARGUMENTS_DEPTH`].
    TooDeep,
    /// They hold a lone surrogate escape.
    NotUnicode,
    /// They hold a number no 64-bit float holds.
    OutOfRange,
    /// They would make the line longer than [`MAX_LINE`].
    TooLong,
    /// They give a key twice in one object (which key is not said: keys are the client's).
    KeyTwice,
    /// serde_json could not read them otherwise: its words.
    Unreadable(String),
}

impl LeftOut {
    /// How many kinds there are, for one rate limit each.
    pub(super) const KINDS: usize = 6;

    /// Which kind this is, below [`LeftOut::KINDS`].
    pub(super) fn kind(&self) -> usize {
        match self {
            LeftOut::TooDeep => 0,
            LeftOut::NotUnicode => 1,
            LeftOut::OutOfRange => 2,
            LeftOut::TooLong => 3,
            LeftOut::Unreadable(_) => 4,
            LeftOut::KeyTwice => 5,
        }
    }

    /// Why JSON the codec took cannot be held as a value: serde_json's error, in the log's words.
    fn of(e: &serde_json::Error) -> LeftOut {
        let text = e.to_string();
        if text.contains("recursion limit") {
            LeftOut::TooDeep
        } else if text.contains("surrogate") || text.contains("hex escape") {
            LeftOut::NotUnicode
        } else if text.contains("number out of range") {
            LeftOut::OutOfRange
        } else {
            LeftOut::Unreadable(text)
        }
    }
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeftOut::TooDeep => {
                write!(f, "they nest deeper than {ARGUMENTS_DEPTH} levels, more than `switchyard calls` reads back")
            }
            LeftOut::NotUnicode => {
                f.write_str("they hold a string that is not valid Unicode (a lone surrogate escape such as \\ud800)")
            }
            LeftOut::OutOfRange => f.write_str("they hold a number too large for a 64-bit float (such as 1e400)"),
            LeftOut::TooLong => write!(f, "they would make the line longer than {} MiB", MAX_LINE >> 20),
            LeftOut::KeyTwice => f.write_str(
                "they give a key twice in one object: parsed, one of the two values would be written, and the server may act on the other",
            ),
            LeftOut::Unreadable(text) => write!(f, "they could not be read as JSON ({text})"),
        }
    }
}

/// How deep `value` nests: 0 for a scalar, 1 for `[]` or `{}`. Walked without recursion.
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|c| (c, d + 1))),
            _ => continue,
        }
        deepest = deepest.max(d + 1);
    }
    deepest
}

/// The JSON string `raw` (with its quotes, as the client sent it) decoded, what cannot be
/// decoded (a lone surrogate escape) as U+FFFD: a line names what a client sent even when it is
/// not valid Unicode, as it names a directory that is not UTF-8.
pub fn lossy(raw: &str) -> String {
    if let Ok(text) = serde_json::from_str::<String>(raw) {
        return text;
    }
    let inner = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(raw);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('u') => out.push(unicode_escape(&mut chars)),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some(other) => out.push(other),
            None => out.push(char::REPLACEMENT_CHARACTER),
        }
    }
    out
}

/// The character of a `\uXXXX` escape (its `\u` read), with the low half of a surrogate pair
/// when one follows; U+FFFD for a lone surrogate or a broken escape.
fn unicode_escape(chars: &mut std::str::Chars<'_>) -> char {
    let Some(high) = hex4(chars) else { return char::REPLACEMENT_CHARACTER };
    if !(0xD800..0xDC00).contains(&high) {
        return char::from_u32(high).unwrap_or(char::REPLACEMENT_CHARACTER);
    }
    let mut ahead = chars.clone();
    if let (Some('\\'), Some('u'), Some(low)) = (ahead.next(), ahead.next(), hex4(&mut ahead))
        && (0xDC00..0xE000).contains(&low)
    {
        *chars = ahead;
        return char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
            .unwrap_or(char::REPLACEMENT_CHARACTER);
    }
    char::REPLACEMENT_CHARACTER
}

fn hex4(chars: &mut std::str::Chars<'_>) -> Option<u32> {
    (0..4).try_fold(0, |n, _| Some(n * 16 + chars.next()?.to_digit(16)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(n: usize) -> String {
        format!("{{\"d\":{}{}}}", "[".repeat(n - 1), "]".repeat(n - 1))
    }

    #[test]
    fn arguments_a_value_cannot_hold_are_refused_with_why() {
        assert_eq!(arguments_of(r#"{"a":[1,{"b":2}]}"#).unwrap(), serde_json::json!({"a":[1,{"b":2}]}));
        // Deeper than a line may hold, but a value: the writer leaves them out (see its tests).
        assert_eq!(depth(&arguments_of(&nested(ARGUMENTS_DEPTH + 1)).unwrap()), ARGUMENTS_DEPTH + 1);
        for (text, why, said) in [
            (r#"{"s":"\ud800"}"#, LeftOut::NotUnicode, "lone surrogate"),
            (r#"{"s":"\udc00x"}"#, LeftOut::NotUnicode, "lone surrogate"),
            (r#"{"n":1e400}"#, LeftOut::OutOfRange, "too large"),
            (r#"{"n":-1e400}"#, LeftOut::OutOfRange, "too large"),
            (&nested(200), LeftOut::TooDeep, "nest deeper than 120"),
        ] {
            let got = arguments_of(text).unwrap_err();
            assert_eq!(got, why, "{text}");
            assert!(got.to_string().contains(said), "{text}: {got}");
        }
        // A key given twice, at any depth, however escaped: neither of its values is written.
        for text in [
            r#"{"path":"/etc/passwd","path":"/tmp/ok"}"#,
            r#"{"l":[{"z":1},{"z":1,"z":2}]}"#,
            r#"{"p\u0061th":"/etc/passwd","path":"/tmp/ok"}"#,
        ] {
            let got = arguments_of(text).unwrap_err();
            assert_eq!(got, LeftOut::KeyTwice, "{text}");
            let said = got.to_string();
            assert!(said.contains("a key twice") && !said.contains("path") && !said.contains('z'), "{said}");
        }
        assert_eq!(
            arguments_of(r#"{"z":1,"l":[{"z":1},{"z":2}]}"#).unwrap(),
            serde_json::json!({"z":1,"l":[{"z":1},{"z":2}]})
        );
        let Err(LeftOut::Unreadable(why)) = arguments_of("{") else { panic!("an unended object is not read") };
        assert!(why.contains("EOF"), "{why}");
    }

    #[test]
    fn depth_counts_containers_without_recursion() {
        assert_eq!(depth(&serde_json::json!(1)), 0);
        assert_eq!(depth(&serde_json::json!([])), 1);
        assert_eq!(depth(&serde_json::json!({"a":[1,[2]],"b":{}})), 3);
        let mut v = serde_json::json!(0);
        for _ in 0..100_000 {
            v = serde_json::Value::Array(vec![v]);
        }
        assert_eq!(depth(&v), 100_000);
        // Let go without recursion too.
        let mut v = Some(v);
        while let Some(serde_json::Value::Array(mut a)) = v.take() {
            v = a.pop();
        }
    }

    #[test]
    fn lossy_keeps_what_decodes_and_marks_what_does_not() {
        assert_eq!(lossy(r#""echo""#), "echo");
        assert_eq!(lossy(r#""ec\udc00ho""#), "ec\u{fffd}ho");
        assert_eq!(lossy(r#""\ud800""#), "\u{fffd}");
        assert_eq!(lossy(r#""a\ud800\u0041\n\"\\\/\ud83d\ude00""#), "a\u{fffd}A\n\"\\/\u{1f600}");
        assert_eq!(lossy(r#""ctl\u0000\u001f\u007f""#), "ctl\u{0}\u{1f}\u{7f}");
        assert_eq!(lossy(r#""\u12""#), "\u{fffd}");
    }
}
