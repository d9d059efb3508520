//! The fast path of [`super::parse`]: one pass over a message's top-level object that finds the
//! text of its members without allocating (serde_json allocates a stack to skip a value nested
//! two deep, as every call's params and result are). It is stricter than serde_json, never
//! looser: whatever it is unsure of (an escape in a member's name, a member given twice, a
//! `jsonrpc` that is no plain string, JSON it does not accept) it leaves to serde_json, whose
//! reading, and errors, stay the reference.

/// The members of a message's object, as texts of the line: what serde reads into
/// `RawEnvelope` (`null` reads as absent, but for `id` and `params`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Members<'a> {
    /// The string of `jsonrpc` (read, without its quotes).
    pub(super) jsonrpc: Option<Cow<'a, str>>,
    pub(super) id: Option<&'a str>,
    pub(super) method: Option<&'a str>,
    pub(super) params: Option<&'a str>,
    pub(super) result: Option<&'a str>,
    pub(super) error: Option<&'a str>,
}

use std::borrow::Cow;

/// Deeper values are left to serde_json (its own skipping has no limit).
const MAX_DEPTH: u32 = 64;

/// The members of `line`'s object; None: the line is left to serde_json.
pub(super) fn members(line: &str) -> Option<Members<'_>> {
    let mut s = Scanner { b: line.as_bytes(), at: 0 };
    let mut m = Members::default();
    let mut jsonrpc = None;
    // Which of the members above were given.
    let mut seen = 0u8;
    s.ws();
    s.eat(b'{')?;
    s.ws();
    if !s.eat_if(b'}') {
        loop {
            let key = s.string()?;
            if key.contains(&b'\\') {
                return None;
            }
            s.ws();
            s.eat(b':')?;
            s.ws();
            let start = s.at;
            s.value()?;
            let text = &line[start..s.at];
            let (slot, bit) = match key {
                b"jsonrpc" => (&mut jsonrpc, 1),
                b"id" => (&mut m.id, 2),
                b"method" => (&mut m.method, 4),
                b"params" => (&mut m.params, 8),
                b"result" => (&mut m.result, 16),
                b"error" => (&mut m.error, 32),
                _ => (&mut None, 0),
            };
            // A member given twice (even null the first time) is an error of serde's.
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            let present = matches!(key, b"id" | b"params");
            *slot = (present || text != "null").then_some(text);
            s.ws();
            if s.eat_if(b'}') {
                break;
            }
            s.eat(b',')?;
            s.ws();
        }
    }
    s.ws();
    if s.at != s.b.len() {
        return None;
    }
    // A `jsonrpc` other than a plain string (or null, read as absent) is serde's to judge.
    if let Some(v) = jsonrpc {
        let inner = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
        m.jsonrpc = Some(Cow::Borrowed(inner.filter(|v| !v.contains('\\'))?));
    }
    Some(m)
}

/// A reader of JSON's tokens, at a byte of a text (the key reader of [`super::twice`] walks
/// with it too).
pub(super) struct Scanner<'a> {
    pub(super) b: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Scanner<'a> {
    pub(super) fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    pub(super) fn eat_if(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.at += usize::from(hit);
        hit
    }

    pub(super) fn eat(&mut self, c: u8) -> Option<()> {
        self.eat_if(c).then_some(())
    }

    /// JSON's white space (as serde_json reads it).
    pub(super) fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.at += 1;
        }
    }

    /// A string (at its `"`): its bytes between the quotes, escapes as written.
    pub(super) fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.at;
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' => {
                    self.at += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            let hex = self.b.get(self.at + 1..self.at + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.at += 5;
                        }
                        _ => return None,
                    }
                }
                0..0x20 => return None,
                _ => self.at += 1,
            }
        }
        let text = &self.b[start..self.at];
        self.at += 1;
        Some(text)
    }

    /// A number: `-`, no leading zero, a fraction and an exponent each with digits.
    pub(super) fn number(&mut self) -> Option<()> {
        self.eat_if(b'-');
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat_if(b'.') {
            self.some_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    pub(super) fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        if self.b.get(self.at..end)? != word {
            return None;
        }
        self.at = end;
        Some(())
    }

    /// One value of any kind, nested ones included.
    fn value(&mut self) -> Option<()> {
        self.value_at(0)
    }

    fn value_at(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'[' if depth < MAX_DEPTH => self.items(depth + 1),
            b'{' if depth < MAX_DEPTH => self.object(depth + 1),
            _ => None,
        }
    }

    /// An array (at its `[`).
    fn items(&mut self, depth: u32) -> Option<()> {
        self.at += 1;
        self.ws();
        if self.eat_if(b']') {
            return Some(());
        }
        loop {
            self.value_at(depth)?;
            self.ws();
            if self.eat_if(b']') {
                return Some(());
            }
            self.eat(b',')?;
            self.ws();
        }
    }

    /// An object (at its `{`).
    fn object(&mut self, depth: u32) -> Option<()> {
        self.at += 1;
        self.ws();
        if self.eat_if(b'}') {
            return Some(());
        }
        loop {
            self.string()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            self.value_at(depth)?;
            self.ws();
            if self.eat_if(b'}') {
                return Some(());
            }
            self.eat(b',')?;
            self.ws();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The fast path reads a line as serde_json does, whenever it reads it at all.
    fn agrees(line: &str) -> bool {
        let Some(fast) = members(line) else { return false };
        match super::super::read_members(line) {
            Ok(slow) => assert_eq!(fast, slow, "{line}"),
            Err(e) => panic!("the fast path took {line:?}, which serde refuses: {e:?}"),
        }
        true
    }

    #[test]
    fn messages_are_read_as_serde_reads_them() {
        for line in [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"a":[1,-2.5e+3,true,null,{"b":"\u00e9\n"}]}}}"#,
            r#" { "id" : "a b" , "jsonrpc" : "2.0", "result" : {"content":[{"type":"text","text":"hi"}]} } "#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","method":null,"result":null,"error":null,"params":null,"id":null,"x":{}}"#,
            r#"{"jsonrpc":null,"x":1,"x":2}"#,
            r#"{}"#,
        ] {
            assert!(agrees(line), "the fast path leaves {line} to serde");
        }
    }

    #[test]
    fn what_the_fast_path_is_unsure_of_is_left_to_serde() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"id":2}"#,
            r#"{"jsonrpc":"2.0","method":null,"method":"m"}"#,
            r#"{"jsonrpc":"2\u002e0","id":1,"method":"m"}"#,
            r#"{"jsonrpc":2,"id":1,"method":"m"}"#,
            r#"{"json\u0072pc":"2.0","id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":01}"#,
            r#"{"jsonrpc":"2.0","id":1,}"#,
            r#"{"jsonrpc":"2.0","id":1} x"#,
            r#"{"jsonrpc":"2.0","id":1.}"#,
            r#"{"jsonrpc":"2.0","id":"\x"}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":\"\t\"}",
            r#"{"jsonrpc":"2.0","id":tru}"#,
            r#"{"jsonrpc":"2.0","id":1"#,
        ] {
            assert_eq!(members(line), None, "{line}");
        }
        let deep = format!(r#"{{"params":{}1{}}}"#, "[".repeat(100), "]".repeat(100));
        assert_eq!(members(&deep), None, "a value deeper than MAX_DEPTH");
        assert!(super::super::read_members(&deep).is_ok());
    }

    /// JSON-like text, some of it broken: what a fuzzing client might send.
    fn jsonish() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            2 => Just("null".to_string()),
            2 => Just("true".to_string()),
            4 => "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
            4 => "\"([a-z /]|\\\\[\"n]|\\\\u00[0-9a-f]{2}|é){0,6}\"",
            // Broken ones, now and then.
            1 => "[-+.0-9eE]{1,4}|nul|\"\\\\q\"",
        ];
        leaf.prop_recursive(5, 48, 6, |inner| {
            let key = prop_oneof![
                Just("\"jsonrpc\"".to_string()),
                Just("\"id\"".to_string()),
                Just("\"method\"".to_string()),
                Just("\"params\"".to_string()),
                Just("\"result\"".to_string()),
                Just("\"error\"".to_string()),
                "\"[a-z]{1,3}\"",
            ];
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
                proptest::collection::vec((key, inner, " ?", separator()), 0..5).prop_map(|members| {
                    let body: Vec<String> = members.iter().map(|(k, v, ws, sep)| format!("{k}{ws}:{v}{sep}")).collect();
                    format!("{{{}}}", body.concat().trim_end_matches([',', ' ']))
                }),
            ]
        })
    }

    /// Between members: a comma, with white space, or now and then two.
    fn separator() -> impl Strategy<Value = &'static str> {
        prop_oneof![8 => Just(","), 1 => Just(" ,\n"), 1 => Just(",,")]
    }

    proptest! {
        #[test]
        fn the_fast_path_never_reads_a_line_serde_reads_otherwise(line in jsonish(), cut in 0usize..4) {
            agrees(&line);
            // And broken ones: the line cut short.
            let end = line.len().saturating_sub(cut);
            if line.is_char_boundary(end) {
                agrees(&line[..end]);
            }
        }
    }
}
