//! JSON with comments and trailing commas, read with the byte span of every value, so a writer
//! can replace one value and keep the rest of the file byte for byte.

use std::ops::Range;

use serde_json::Value;
use switchyard_config::line_col;

/// A document: the file's text, and a copy in which comments, trailing commas and a byte-order
/// mark are spaces (newlines kept), so offsets, lines and columns are the same in both.
#[derive(Debug, Clone)]
pub struct Doc {
    pub text: String,
    plain: String,
    pub root: Node,
}

/// One value and where it is: `span` covers exactly its text (`"…"`, `{…}`, `[…]`, `12`, `true`).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub span: Range<usize>,
    pub tree: Tree,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Tree {
    /// Members in file order.
    Object(Vec<Member>),
    Array(Vec<Node>),
    /// A string, number, `true`, `false` or `null`.
    Scalar,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub key: String,
    /// The bytes of the key, quotes included: a writer that removes a member starts there.
    pub key_span: Range<usize>,
    pub value: Node,
}

/// What a client's JSON allows beyond JSON itself: each one it refuses is an error where it is,
/// since such a file does not load in the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// `//` and `/* */` comments.
    pub comments: bool,
    /// A comma before `]` or `}`.
    pub trailing_commas: bool,
    /// A leading byte-order mark.
    pub bom: bool,
}

impl Dialect {
    /// Comments, trailing commas and a byte-order mark (VS Code's JSONC, and what Cursor and
    /// Claude Desktop read).
    pub const LENIENT: Dialect = Dialect { comments: true, trailing_commas: true, bom: true };
}

/// Where a document stops being JSON with comments: 1-based line and column (in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl Doc {
    pub fn parse(text: &str) -> Result<Doc, SyntaxError> {
        Doc::parse_with(text, Dialect::LENIENT)
    }

    /// [`Doc::parse`], with what `dialect` does not allow an error at its place.
    pub fn parse_with(text: &str, dialect: Dialect) -> Result<Doc, SyntaxError> {
        let plain = blank(text, dialect)?;
        // serde_json judges the whole document first: its errors carry line and column, and
        // once it accepts the text the span scanner below can trust the structure.
        // Read into values, not skipped: a number out of range (`1e400`) is an error here, not
        // later when a node is read; so is nesting past serde_json's limit of 128.
        if let Err(e) = serde_json::from_str::<Value>(&plain) {
            let message = e.to_string();
            let message = message.split(" at line ").next().unwrap_or(&message).to_string();
            return Err(SyntaxError { line: e.line().max(1), column: e.column().max(1), message });
        }
        let mut scan = Scanner { bytes: plain.as_bytes(), at: 0, plain: &plain };
        let root = scan.value();
        Ok(Doc { text: text.to_string(), plain, root })
    }

    /// The value at `node`, comments and trailing commas ignored.
    pub fn value(&self, node: &Node) -> Value {
        serde_json::from_str(&self.plain[node.span.clone()]).expect("a node of a checked document is JSON")
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn position(&self, offset: usize) -> (usize, usize) {
        line_col(&self.text, offset)
    }
}

impl Node {
    /// The member `key` of an object (the last one when a key repeats, as JSON parsers do).
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.tree {
            Tree::Object(members) => members.iter().rev().find(|m| m.key == key).map(|m| &m.value),
            _ => None,
        }
    }
}

/// The text with comments, trailing commas and a leading byte-order mark replaced by spaces.
fn blank(text: &str, dialect: Dialect) -> Result<String, SyntaxError> {
    let Dialect { comments, trailing_commas, bom } = dialect;
    let mut out = text.as_bytes().to_vec();
    let b = text.as_bytes();
    let fail = |at: usize, message: &str| {
        let (line, column) = line_col(text, at);
        Err(SyntaxError { line, column, message: message.to_string() })
    };
    let mut i = 0;
    if b.starts_with("\u{feff}".as_bytes()) {
        if !bom {
            return fail(
                0,
                "a byte-order mark, which this client does not read either (its file does not load): save the file without it",
            );
        }
        out[..3].fill(b' ');
        i = 3;
    }
    // The last comma outside strings, not yet followed by anything but space and comments.
    let mut comma: Option<usize> = None;
    // The last byte that is not space or comment: a comma right after `{`, `[` or `,` is an
    // error for serde_json to report, not a trailing comma.
    let mut last = b' ';
    while i < b.len() {
        let here = b[i];
        let comment = here == b'/' && matches!(b.get(i + 1), Some(b'/' | b'*'));
        match here {
            b'"' => {
                comma = None;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'/' if matches!(b.get(i + 1), Some(b'/' | b'*')) && !comments => {
                return fail(i, "a comment, which this client does not read (its file does not load): remove it");
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let start = i;
                let Some(len) = text[i + 2..].find("*/") else {
                    return fail(start, "a /* comment is never closed");
                };
                for byte in &mut out[i..i + 2 + len + 2] {
                    // Newlines stay, so serde_json counts lines as the file does; other bytes
                    // (also those of multi-byte characters) become single spaces.
                    if *byte != b'\n' {
                        *byte = b' ';
                    }
                }
                i += 2 + len + 2;
            }
            b',' => {
                comma = (!matches!(last, b'{' | b'[' | b',')).then_some(i);
                i += 1;
            }
            b'}' | b']' => {
                if let Some(c) = comma.take() {
                    if !trailing_commas {
                        return fail(
                            c,
                            "a trailing comma, which this client does not read either (its file does not load): remove it",
                        );
                    }
                    out[c] = b' ';
                }
                i += 1;
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                comma = None;
                i += 1;
            }
        }
        if !here.is_ascii_whitespace() && !comment {
            last = here;
        }
    }
    // Only ASCII bytes were written, each over a whole character or a byte of a comment, and
    // comment bytes were all replaced, so the text is still UTF-8.
    Ok(String::from_utf8(out).expect("blanking keeps UTF-8"))
}

/// Spans of a document serde_json has already accepted.
struct Scanner<'a> {
    bytes: &'a [u8],
    plain: &'a str,
    at: usize,
}

impl Scanner<'_> {
    fn skip_space(&mut self) {
        while self.at < self.bytes.len() && self.bytes[self.at].is_ascii_whitespace() {
            self.at += 1;
        }
    }

    fn value(&mut self) -> Node {
        self.skip_space();
        let start = self.at;
        let tree = match self.bytes[self.at] {
            b'{' => {
                self.at += 1;
                let mut members = Vec::new();
                loop {
                    self.skip_space();
                    match self.bytes[self.at] {
                        b'}' => break,
                        b',' => self.at += 1,
                        _ => {
                            let key_span = self.string();
                            let key = serde_json::from_str(&self.plain[key_span.clone()]).expect("a checked key");
                            self.skip_space();
                            self.at += 1; // ':'
                            let value = self.value();
                            members.push(Member { key, key_span, value });
                        }
                    }
                }
                self.at += 1;
                Tree::Object(members)
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                loop {
                    self.skip_space();
                    match self.bytes[self.at] {
                        b']' => break,
                        b',' => self.at += 1,
                        _ => items.push(self.value()),
                    }
                }
                self.at += 1;
                Tree::Array(items)
            }
            b'"' => {
                self.string();
                Tree::Scalar
            }
            _ => {
                while self.at < self.bytes.len() && !b",}] \t\r\n".contains(&self.bytes[self.at]) {
                    self.at += 1;
                }
                Tree::Scalar
            }
        };
        Node { span: start..self.at, tree }
    }

    fn string(&mut self) -> Range<usize> {
        let start = self.at;
        self.at += 1;
        while self.bytes[self.at] != b'"' {
            self.at += if self.bytes[self.at] == b'\\' { 2 } else { 1 };
        }
        self.at += 1;
        start..self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_keep_offsets() {
        let text = "\u{feff}{ // a\n  \"a\": [1, 2,], /* b\n c */ \"é/*\": {\"x\": \"//\",},\n}\n";
        let doc = Doc::parse(text).unwrap();
        let a = doc.root.get("a").unwrap();
        assert_eq!(&text[a.span.clone()], "[1, 2,]");
        assert_eq!(doc.value(a), serde_json::json!([1, 2]));
        let e = doc.root.get("é/*").unwrap();
        assert_eq!(&text[e.span.clone()], "{\"x\": \"//\",}");
        assert_eq!(doc.value(e), serde_json::json!({"x": "//"}));
        assert_eq!(doc.position(e.span.start), (3, 14));
    }

    #[test]
    fn errors_name_line_and_column() {
        let err = Doc::parse("{\n  \"a\": 1\n  \"b\": 2\n}").unwrap_err();
        assert_eq!((err.line, err.column), (3, 3), "{err:?}");
        let err = Doc::parse("{\n /* open\n}").unwrap_err();
        assert_eq!((err.line, err.column), (2, 2), "{err:?}");
        let err = Doc::parse("{\"a\": \"x\\ny").unwrap_err();
        assert_eq!(err.line, 1, "{err:?}");
        assert!(Doc::parse("").is_err());
        // Only a comma after a value is trailing; these stay errors.
        for text in ["[,]", "{,}", "[1,,]", "{\"a\": 1,,}", "[1] // x\n,"] {
            assert!(Doc::parse(text).is_err(), "{text}");
        }
        // Valid JSON serde_json cannot hold: an error with its place, never a panic later.
        let err = Doc::parse("{\n  \"t\": 1e400}").unwrap_err();
        assert_eq!(err.line, 2, "{err:?}");
        let deep = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
        assert!(Doc::parse(&deep).is_err());
    }

    #[test]
    fn comment_marks_inside_strings_are_text() {
        let text = r#"{"a\"//": "/* not */", "b": "\\" /* yes */ }"#;
        let doc = Doc::parse(text).unwrap();
        assert_eq!(doc.value(&doc.root), serde_json::json!({"a\"//": "/* not */", "b": "\\"}));
    }

    use proptest::prelude::*;

    /// JSON with comments, blank space and trailing commas placed by `rng` around `v`.
    fn decorate(v: &Value, rng: &mut fastrand::Rng, out: &mut String) {
        const GAPS: &[&str] = &["", " ", "\n  ", "// c é /*\n", "/* x */", "/*\n // */"];
        let gap = |rng: &mut fastrand::Rng, out: &mut String| out.push_str(GAPS[rng.usize(..GAPS.len())]);
        let close = |rng: &mut fastrand::Rng, out: &mut String, any: bool, end: char| {
            if any && rng.bool() {
                out.push(',');
            }
            gap(rng, out);
            out.push(end);
        };
        match v {
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    gap(rng, out);
                    decorate(item, rng, out);
                    gap(rng, out);
                }
                close(rng, out, !items.is_empty(), ']');
            }
            Value::Object(map) => {
                out.push('{');
                for (i, (k, item)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    gap(rng, out);
                    out.push_str(&serde_json::to_string(k).unwrap());
                    gap(rng, out);
                    out.push(':');
                    gap(rng, out);
                    decorate(item, rng, out);
                    gap(rng, out);
                }
                close(rng, out, !map.is_empty(), '}');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }

    /// Every node's value is `v`'s, and its span alone reads as that value.
    fn check(doc: &Doc, node: &Node, v: &Value) {
        assert_eq!(&doc.value(node), v);
        let alone = &doc.text[node.span.clone()];
        assert_eq!(&Doc::parse(alone).unwrap().value(&Doc::parse(alone).unwrap().root), v, "{alone}");
        match (&node.tree, v) {
            (Tree::Object(members), Value::Object(map)) => {
                assert_eq!(members.len(), map.len());
                members.iter().for_each(|m| check(doc, &m.value, &map[&m.key]));
            }
            (Tree::Array(items), Value::Array(values)) => {
                assert_eq!(items.len(), values.len());
                items.iter().zip(values).for_each(|(n, v)| check(doc, n, v));
            }
            (Tree::Scalar, _) => {}
            (tree, v) => panic!("{tree:?} for {v}"),
        }
    }

    fn values() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-z/*\"\\\\é ,\\]}]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z/\" ]{0,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_decorated_json_reads_back_with_exact_spans(v in values(), seed in any::<u64>()) {
            let mut text = String::new();
            decorate(&v, &mut fastrand::Rng::with_seed(seed), &mut text);
            let doc = Doc::parse(&text).map_err(|e| TestCaseError::fail(format!("{e:?} in {text}")))?;
            check(&doc, &doc.root, &v);
        }
    }
}
