//! A key given twice in any object of a JSON text. Parsers disagree on which of the two values
//! counts (serde_json and JavaScript take the last, some take the first), so a value a policy
//! plugin judged may not be the one the server acts on.
//!
//! The text is walked here, token by token, rather than read through serde: serde_json stops at
//! values a server's parser may well take (a number past f64, an escaped lone surrogate, a value
//! nested past 128 deep), and a key given twice after one would go unseen.

use std::borrow::Cow;
use std::collections::HashSet;

use super::scan::Scanner;

/// The first key given twice in one object of `json` (compared as decoded, so `"a"` and
/// `"\u0061"` are the same key), at any depth, in the order of the text. None when there is
/// none before the text ends or stops being JSON.
pub fn key_given_twice(json: &str) -> Option<String> {
    let mut walk = Walk { s: Scanner { b: json.as_bytes(), at: 0 }, keys: Vec::new(), open: Vec::new() };
    walk.value().err().flatten().map(|key| shown(&key))
}

/// A key as decoded: UTF-8, but for an escaped lone surrogate, kept as the code point it names
/// (as WTF-8 does), so that two keys are the same only when their code points are.
type Key<'a> = Cow<'a, [u8]>;

/// Why a walk stopped early: `Some(key)`, a key given twice; None, the text is no JSON there.
type Stop<'a> = Option<Key<'a>>;

/// Past this many keys, an object's keys are looked up in a set, not one by one (a hostile
/// object of a million keys would take a trillion comparisons).
const FEW: usize = 16;

/// The walk through a text; objects and arrays open at the point it is at, innermost last.
struct Walk<'a> {
    s: Scanner<'a>,
    /// The keys of the open objects so far, each object's after those of the one it is in.
    keys: Vec<Key<'a>>,
    open: Vec<Open<'a>>,
}

enum Open<'a> {
    Array,
    /// An object whose keys so far are `keys[from..]`, or, past [`FEW`] of them, `many`.
    Object {
        from: usize,
        many: Option<HashSet<Key<'a>>>,
    },
}

impl<'a> Walk<'a> {
    /// The text's first value, to its end (a stack of what is open, never recursion: any depth).
    fn value(&mut self) -> Result<(), Stop<'a>> {
        loop {
            if self.opens()? {
                continue;
            }
            // A value ended: close what ends with it, then on to the next value, if any.
            loop {
                self.s.ws();
                let Some(open) = self.open.last() else { return Ok(()) };
                match (open, self.s.peek().ok_or(None)?) {
                    (Open::Array, b',') => {
                        self.s.at += 1;
                        break;
                    }
                    (Open::Object { .. }, b',') => {
                        self.s.at += 1;
                        self.member()?;
                        break;
                    }
                    (Open::Array, b']') => {}
                    (Open::Object { from, .. }, b'}') => self.keys.truncate(*from),
                    _ => return Err(None),
                }
                self.s.at += 1;
                self.open.pop();
            }
        }
    }

    /// One value at the point, or the start of an object or array: true when a value inside
    /// it comes next (an empty one is left for its closing bracket).
    fn opens(&mut self) -> Result<bool, Stop<'a>> {
        let s = &mut self.s;
        s.ws();
        match s.peek().ok_or(None)? {
            b'{' => {
                s.at += 1;
                s.ws();
                self.open.push(Open::Object { from: self.keys.len(), many: None });
                if self.s.peek() == Some(b'}') {
                    return Ok(false);
                }
                self.member()?;
                Ok(true)
            }
            b'[' => {
                s.at += 1;
                s.ws();
                self.open.push(Open::Array);
                Ok(self.s.peek() != Some(b']'))
            }
            b'"' => s.string().map(|_| false).ok_or(None),
            b'-' | b'0'..=b'9' => s.number().map(|_| false).ok_or(None),
            b't' => s.literal(b"true").map(|_| false).ok_or(None),
            b'f' => s.literal(b"false").map(|_| false).ok_or(None),
            b'n' => s.literal(b"null").map(|_| false).ok_or(None),
            _ => Err(None),
        }
    }

    /// A member's key and colon, in the innermost object; a key it gave before stops the walk.
    fn member(&mut self) -> Result<(), Stop<'a>> {
        self.s.ws();
        let text = self.s.string().ok_or(None)?;
        let key = if text.contains(&b'\\') { Cow::Owned(decoded(text)) } else { Cow::Borrowed(text) };
        if let Some(Open::Object { from, many }) = self.open.last_mut() {
            if let Some(set) = many {
                if set.contains(&key) {
                    return Err(Some(key));
                }
                set.insert(key);
            } else if self.keys[*from..].contains(&key) {
                return Err(Some(key));
            } else {
                self.keys.push(key);
                if self.keys.len() - *from > FEW {
                    *many = Some(self.keys.drain(*from..).collect());
                }
            }
        }
        self.s.ws();
        self.s.eat(b':').ok_or(None)
    }
}

/// A string's text as written (its escapes checked by [`Scanner::string`]), decoded.
fn decoded(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    while let Some(&c) = text.get(at) {
        at += 1;
        if c != b'\\' {
            out.push(c);
            continue;
        }
        let e = text[at];
        at += 1;
        let unit = match e {
            b'u' => hex(&text[at..at + 4]),
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => u32::from(b'\n'),
            b'r' => u32::from(b'\r'),
            b't' => u32::from(b'\t'),
            other => u32::from(other), // `"`, `\`, `/`
        };
        if e != b'u' {
            out.push(unit as u8);
            continue;
        }
        at += 4;
        // A leading surrogate escaped, then a trailing one: one character, as written plainly.
        let trailing = text.get(at..at + 6).filter(|t| t.starts_with(b"\\u")).map(|t| hex(&t[2..]));
        let code = match trailing {
            Some(low @ 0xDC00..=0xDFFF) if (0xD800..0xDC00).contains(&unit) => {
                at += 6;
                0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
            }
            _ => unit,
        };
        match char::from_u32(code) {
            Some(ch) => out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes()),
            // A lone surrogate, in the three bytes UTF-8 would give it.
            None => out.extend_from_slice(&[
                0xE0 | (code >> 12) as u8,
                0x80 | (code >> 6 & 0x3F) as u8,
                0x80 | (code & 0x3F) as u8,
            ]),
        }
    }
    out
}

/// A key as text, a lone surrogate in it as the escape it was written as.
fn shown(mut key: &[u8]) -> String {
    let mut out = String::with_capacity(key.len());
    loop {
        match std::str::from_utf8(key) {
            Ok(rest) => return out + rest,
            Err(e) => {
                let (valid, lone) = key.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                // Only a lone surrogate, in the three bytes `decoded` gave it, is no UTF-8 here.
                let code = u32::from(lone[0] & 0x0F) << 12 | u32::from(lone[1] & 0x3F) << 6 | u32::from(lone[2] & 0x3F);
                out.push_str(&format!("\\u{code:04x}"));
                key = &lone[3..];
            }
        }
    }
}

/// The value of four hex digits.
fn hex(digits: &[u8]) -> u32 {
    digits.iter().fold(0, |n, d| n * 16 + char::from(*d).to_digit(16).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashSet;
    use std::fmt;

    use proptest::prelude::*;
    use serde::Deserializer;
    use serde::de::{DeserializeSeed, Error, MapAccess, SeqAccess, Visitor};

    use super::key_given_twice;

    #[test]
    fn a_key_given_twice_at_any_depth_is_found_as_decoded() {
        assert_eq!(key_given_twice(r#"{"path":"/etc/passwd","path":"/tmp/ok"}"#).as_deref(), Some("path"));
        assert_eq!(key_given_twice(r#"{"a":[1,{"b":{"c":1,"c":2}}]}"#).as_deref(), Some("c"));
        assert_eq!(key_given_twice(r#"{"path":1,"p\u0061th":2}"#).as_deref(), Some("path"));
        // A key with " at line " in it is still named whole.
        assert_eq!(key_given_twice(r#"{"x at line y":1,"x at line y":2}"#).as_deref(), Some("x at line y"));
    }

    #[test]
    fn keys_given_once_or_text_that_is_no_json_find_nothing() {
        assert_eq!(key_given_twice(r#"{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}"#), None);
        assert_eq!(key_given_twice(r#"[1,"two",null,true,1.5,{}]"#), None);
        assert_eq!(key_given_twice(r#"{"a":"#), None);
        assert_eq!(key_given_twice(&format!("{}1{}", "[".repeat(200), "]".repeat(200))), None);
    }

    /// What serde_json stops at (a number past f64, an escaped lone surrogate, a value nested
    /// past 128) a server's parser may take, and a request's envelope takes: a key given twice
    /// after it is found all the same.
    #[test]
    fn a_key_given_twice_after_what_serde_stops_at_is_found() {
        let deep = format!(r#"{}{{"path":1,"path":2}}{}"#, "[".repeat(200), "]".repeat(200));
        for arguments in [
            r#"{"path":"/etc/passwd","n":1e400,"path":"/ok"}"#,
            r#"{"path":"/etc/passwd","s":"\ud800","path":"/ok"}"#,
            &deep,
        ] {
            assert_eq!(key_given_twice(arguments).as_deref(), Some("path"), "{arguments}");
            let line = super::super::request("1", "tools/call", &format!(r#"{{"name":"w","arguments":{arguments}}}"#));
            let params = super::super::parse(&line).unwrap().params.unwrap();
            let taken = super::super::param_fields(&line, &params).arguments.map(|r| &line[r]);
            assert_eq!(taken, Some(arguments), "the envelope takes {arguments}");
        }
    }

    /// Keys are the same when their code points are: an escaped pair is the character, a lone
    /// surrogate only itself (never the replacement character it would print as).
    #[test]
    fn escaped_surrogates_are_compared_as_code_points() {
        assert_eq!(key_given_twice(r#"{"\ud83d\ude00":1,"😀":2}"#).as_deref(), Some("😀"));
        assert_eq!(key_given_twice(r#"{"\ud800":1,"\ud800":2}"#).as_deref(), Some(r"\ud800"));
        assert_eq!(key_given_twice(r#"{"\ud800":1,"\udc00":2}"#), None);
        assert_eq!(key_given_twice(r#"{"\ud83d":1,"\ud83d\ude00":2,"\ude00":3,"\\ud83d":4}"#), None);
        assert_eq!(
            key_given_twice(r#"{"\n\t\"\\\/\b\f\r":1,"\u000a\u0009\u0022\u005c/\u0008\u000C\u000d":2}"#).as_deref(),
            Some("\n\t\"\\/\u{8}\u{c}\r")
        );
    }

    /// An object of many keys: each is looked up once (in a set, past a few), its inner
    /// objects keep keys of their own.
    #[test]
    fn an_object_of_many_keys_is_checked_whole() {
        let keys: Vec<String> = (0..1000).map(|i| format!(r#""k{i}":{{"k{i}":[{{"k{i}":1}}]}}"#)).collect();
        let once = format!("{{{}}}", keys.join(","));
        assert_eq!(key_given_twice(&once), None);
        let twice = format!(r#"{{{},"k\u0035":1}}"#, keys.join(","));
        assert_eq!(key_given_twice(&twice).as_deref(), Some("k5"));
        let inner = format!(r#"[{once},{{"a":{once},"a":1}}]"#);
        assert_eq!(key_given_twice(&inner).as_deref(), Some("a"));
    }

    /// The reference: serde_json reads the text through maps that each keep their keys in a
    /// set; the first key a set had already is put aside, and stops the read.
    fn reference(json: &str) -> Option<String> {
        let twice = RefCell::new(None);
        let _ = Checked(&twice).deserialize(&mut serde_json::Deserializer::from_str(json));
        twice.into_inner()
    }

    #[derive(Clone, Copy)]
    struct Checked<'r>(&'r RefCell<Option<String>>);

    impl<'de> DeserializeSeed<'de> for Checked<'_> {
        type Value = ();

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Checked<'_> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(self)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key.clone()) {
                    *self.0.borrow_mut() = Some(key);
                    return Err(A::Error::custom("a key given twice"));
                }
                map.next_value_seed(self)?;
            }
            Ok(())
        }
    }

    /// `c` inside a JSON string: as itself (escaped where it must be), or as `\u` escapes.
    fn written(c: char, escaped: bool) -> String {
        match (c, escaped) {
            ('"', false) => r#"\""#.to_string(),
            ('\\', false) => r"\\".to_string(),
            ('\n', false) => r"\n".to_string(),
            (c, false) => c.to_string(),
            (c, true) => c.encode_utf16(&mut [0; 2]).iter().map(|u| format!(r"\u{u:04x}")).collect(),
        }
    }

    /// A JSON string of characters of `chars`, each written one way or the other.
    fn string(chars: &'static [char], len: std::ops::Range<usize>) -> impl Strategy<Value = String> {
        proptest::collection::vec((proptest::sample::select(chars), any::<bool>()), len)
            .prop_map(|cs| format!("\"{}\"", cs.into_iter().map(|(c, e)| written(c, e)).collect::<String>()))
    }

    /// JSON values whose objects often give a key twice, written differently: keys of few
    /// characters, strings with quotes, brackets and escapes in them, white space between.
    fn json() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
            string(&['x', '"', '{', '}', '[', ']', ':', ',', '\\', '\n', 'é', '😀'], 0..6),
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            let key = string(&['a', '"', '}', '\\', '😀'], 0..3);
            let ws = proptest::sample::select(&["", " ", "\n\t "][..]);
            prop_oneof![
                proptest::collection::vec((inner.clone(), ws.clone()), 0..4).prop_map(|items| {
                    let items: Vec<String> = items.into_iter().map(|(v, ws)| format!("{ws}{v}{ws}")).collect();
                    format!("[{}]", items.join(","))
                }),
                proptest::collection::vec((key, ws, inner), 0..6).prop_map(|members| {
                    let members: Vec<String> =
                        members.into_iter().map(|(k, ws, v)| format!("{ws}{k}{ws}:{ws}{v}")).collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    proptest! {
        #[test]
        fn the_reader_finds_the_key_a_map_that_notices_a_repeat_finds(json in json(), cut in any::<prop::sample::Index>()) {
            prop_assert_eq!(key_given_twice(&json), reference(&json), "{}", json);
            // Cut short, as a hostile client's may be: the same, up to where the text breaks.
            let mut end = cut.index(json.len() + 1);
            while !json.is_char_boundary(end) {
                end -= 1;
            }
            let cut = &json[..end];
            prop_assert_eq!(key_given_twice(cut), reference(cut), "{}", cut);
        }
    }
}
