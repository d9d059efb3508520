//! Line framing: reading a byte stream one message line at a time within a size limit, and
//! finding the id of a line too large to keep, so it can still be answered.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// One frame read from a byte stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete line without its terminator (`\n` or `\r\n`); may be empty.
    Line(String),
    /// A line longer than the limit; its bytes were skipped with bounded memory.
    TooLong { bytes: usize },
    /// A line that is not UTF-8.
    NotUtf8,
}

/// Reads newline-delimited frames, never holding more than `limit` bytes of one line.
pub struct LineReader<R> {
    inner: R,
    limit: usize,
    buf: Vec<u8>,
    /// The first and last bytes of the last over-long line, so its id may still be read.
    head: Vec<u8>,
    tail: Vec<u8>,
}

/// How many bytes of each end of a skipped line are kept.
pub const ENDS_KEPT: usize = 256;

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(inner: R, limit: usize) -> Self {
        LineReader { inner, limit, buf: Vec::with_capacity(INITIAL_CAPACITY), head: Vec::new(), tail: Vec::new() }
    }

    /// The next frame, or `None` at end of stream. A final line without `\n` is still a frame.
    pub async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        if self.buf.capacity() > KEEP_CAPACITY {
            self.buf = Vec::with_capacity(INITIAL_CAPACITY);
        }
        self.buf.clear();
        let mut skipped: Option<usize> = None;
        loop {
            let chunk = self.inner.fill_buf().await?;
            if chunk.is_empty() {
                return Ok(match skipped {
                    Some(bytes) => Some(Frame::TooLong { bytes }),
                    None if self.buf.is_empty() => None,
                    None => Some(self.take_line()),
                });
            }
            let (take, done) = match memchr(chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            match skipped.as_mut() {
                Some(n) => {
                    *n += take;
                    keep_tail(&mut self.tail, &chunk[..take]);
                }
                None if self.buf.len() + take > self.limit + 2 => {
                    // Over the limit: stop keeping bytes, only count them to the end of the line
                    // (and keep both ends of it, where a response's id is usually found).
                    skipped = Some(self.buf.len() + take);
                    self.buf.extend_from_slice(&chunk[..take]);
                    self.head = self.buf[..self.buf.len().min(ENDS_KEPT)].to_vec();
                    self.tail.clear();
                    keep_tail(&mut self.tail, &self.buf);
                    self.buf = Vec::new();
                }
                None => self.buf.extend_from_slice(&chunk[..take]),
            }
            self.inner.consume(take);
            if done {
                return Ok(Some(match skipped {
                    Some(bytes) => Frame::TooLong { bytes },
                    None => self.take_line(),
                }));
            }
        }
    }

    /// The first and last bytes (at most 256 each) of the last line skipped as too long.
    pub fn skipped_ends(&self) -> (&[u8], &[u8]) {
        (&self.head, &self.tail)
    }

    fn take_line(&mut self) -> Frame {
        let mut end = self.buf.len();
        if end > 0 && self.buf[end - 1] == b'\n' {
            end -= 1;
        }
        if end > 0 && self.buf[end - 1] == b'\r' {
            end -= 1;
        }
        if end > self.limit {
            self.head = self.buf[..end.min(ENDS_KEPT)].to_vec();
            self.tail = self.buf[end.saturating_sub(ENDS_KEPT)..end].to_vec();
            return Frame::TooLong { bytes: end };
        }
        if self.buf.capacity() > KEEP_CAPACITY {
            // A large line leaves with its buffer, whose memory goes when the message does; the
            // reader starts small again instead of holding the largest line it ever read.
            let mut line = std::mem::replace(&mut self.buf, Vec::with_capacity(INITIAL_CAPACITY));
            line.truncate(end);
            return match String::from_utf8(line) {
                Ok(s) => Frame::Line(s),
                Err(_) => Frame::NotUtf8,
            };
        }
        match std::str::from_utf8(&self.buf[..end]) {
            Ok(s) => Frame::Line(s.to_string()),
            Err(_) => Frame::NotUtf8,
        }
    }
}

/// A reader's buffer to begin with.
const INITIAL_CAPACITY: usize = 8 * 1024;
/// A buffer grown past this for a line goes with the line: each long-lived connection keeps at
/// most this much between messages.
const KEEP_CAPACITY: usize = 64 * 1024;

/// Appends to `tail`, keeping only its last ENDS_KEPT bytes.
pub fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    let from = bytes.len().saturating_sub(ENDS_KEPT);
    tail.extend_from_slice(&bytes[from..]);
    let excess = tail.len().saturating_sub(ENDS_KEPT);
    tail.drain(..excess);
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// The numeric id of a response known only by the two ends of its line (it was too long to
/// keep): SDKs write the envelope either first (`{"jsonrpc":"2.0","id":7,...`) or last
/// (`...,"jsonrpc":"2.0","id":7}`). None when neither end shows it unambiguously, or when the
/// line is a request (it shows a `method`).
pub fn skipped_response_id(head: &[u8], tail: &[u8]) -> Option<u64> {
    let (id, method) = plain_members(head);
    if method {
        return None;
    }
    id.or_else(|| from_tail(tail))?.parse().ok()
}

/// The raw id of a request known only by the two ends of its line (it was too long to keep),
/// so that the error for it goes to that request. The head is read member by member while the
/// members are plain values (`"jsonrpc"`, `"id"`, `"method"` usually come before `params`); the
/// tail may end with `"id":X}`. Only a line whose head shows a `method` counts: a response of the
/// client's carries an id of the server's, which must never be answered. None when unsure.
pub fn skipped_request_id(head: &[u8], tail: &[u8]) -> Option<String> {
    let (id, method) = plain_members(head);
    if !method {
        return None;
    }
    id.or_else(|| from_tail(tail))
}

/// The id among the leading plain members of a line's head, and whether `method` is among them.
fn plain_members(head: &[u8]) -> (Option<String>, bool) {
    // The head may end inside a character.
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default(),
    };
    let (mut id, mut method) = (None, false);
    let Some(mut rest) = text.trim_start().strip_prefix('{') else { return (None, false) };
    loop {
        rest = rest.trim_start();
        let Some(key_len) = json_string_len(rest) else { break };
        let key = &rest[..key_len];
        let Some(after) = rest[key_len..].trim_start().strip_prefix(':') else { break };
        rest = after.trim_start();
        let value_len = if rest.starts_with('"') {
            match json_string_len(rest) {
                Some(n) => n,
                None => break,
            }
        } else {
            // A number or a literal; anything else (an object, an array) ends the plain members.
            match rest.find(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c))) {
                Some(n) if n > 0 => n,
                _ => break,
            }
        };
        match key {
            r#""id""# => id = id_value(&rest[..value_len]),
            r#""method""# => method = true,
            _ => {}
        }
        match rest[value_len..].trim_start().strip_prefix(',') {
            Some(r) => rest = r,
            None => break,
        }
    }
    (id, method)
}

fn from_tail(tail: &[u8]) -> Option<String> {
    // The tail may start inside a character.
    let first = tail.iter().position(|b| b & 0xC0 != 0x80).unwrap_or(tail.len());
    let text = std::str::from_utf8(&tail[first..]).ok()?;
    let body = text.trim_end().strip_suffix('}')?.trim_end();
    // A number id only: a string's start cannot be told from the end without its whole line.
    let start = body.rfind(|c: char| !(c.is_ascii_digit() || c == '-'))? + 1;
    let before = body[..start].trim_end().strip_suffix(':')?.trim_end();
    if before.strip_suffix(r#""id""#)?.trim_end().ends_with(',') { id_value(&body[start..]) } else { None }
}

/// A valid JSON-RPC id (a string or a number), as raw JSON.
fn id_value(raw: &str) -> Option<String> {
    match serde_json::from_str::<serde_json::Value>(raw).ok()? {
        serde_json::Value::String(_) | serde_json::Value::Number(_) => Some(raw.to_string()),
        _ => None,
    }
}

/// The length of the JSON string `s` starts with, quotes included; None if it is cut off.
fn json_string_len(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    if bytes.first() != Some(&b'"') {
        return None;
    }
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    async fn frames(bytes: &[u8], chunks: &[usize], limit: usize) -> Vec<Frame> {
        // A reader that hands out the stream in the given chunk sizes.
        let mut builder = tokio_test_reader(bytes, chunks);
        let mut r = LineReader::new(tokio::io::BufReader::with_capacity(3, &mut builder), limit);
        let mut out = vec![];
        while let Some(f) = r.next().await.unwrap() {
            out.push(f);
        }
        out
    }

    fn tokio_test_reader(bytes: &[u8], chunks: &[usize]) -> impl tokio::io::AsyncRead + Unpin {
        let mut parts = vec![];
        let mut at = 0;
        for &c in chunks {
            if at >= bytes.len() {
                break;
            }
            let end = (at + c.max(1)).min(bytes.len());
            parts.push(bytes[at..end].to_vec());
            at = end;
        }
        if at < bytes.len() {
            parts.push(bytes[at..].to_vec());
        }
        ChunkReader { parts: parts.into() }
    }

    struct ChunkReader {
        parts: std::collections::VecDeque<Vec<u8>>,
    }
    impl tokio::io::AsyncRead for ChunkReader {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some(mut p) = self.parts.pop_front() {
                let n = p.len().min(buf.remaining());
                buf.put_slice(&p[..n]);
                if n < p.len() {
                    p.drain(..n);
                    self.parts.push_front(p);
                }
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn over_long_lines_are_skipped_and_reading_goes_on() {
        let mut data = Vec::new();
        data.extend_from_slice(b"{\"a\":1}\n");
        data.extend_from_slice(&vec![b'x'; 5000]);
        data.extend_from_slice(b"\n{\"b\":2}\r\nlast");
        let got = frames(&data, &[7, 100, 3000], 1024).await;
        assert_eq!(
            got,
            vec![
                Frame::Line("{\"a\":1}".into()),
                Frame::TooLong { bytes: 5001 },
                Frame::Line("{\"b\":2}".into()),
                Frame::Line("last".into()),
            ]
        );
    }

    #[tokio::test]
    async fn both_ends_of_a_skipped_line_are_kept_for_its_id() {
        let mut first = br#"{"jsonrpc":"2.0","id":42,"result":{"text":""#.to_vec();
        first.extend(vec![b'x'; 3000]);
        first.extend_from_slice(b"\"}}\n");
        let mut last = br#"{"result":{"text":""#.to_vec();
        last.extend(vec![b'y'; 3000]);
        last.extend_from_slice(br#""},"jsonrpc":"2.0","id":7}"#);
        last.extend_from_slice(b"\r\n");
        let data = [first, last].concat();
        let mut src = tokio_test_reader(&data, &[5, 700, 13, 2000]);
        let mut r = LineReader::new(tokio::io::BufReader::with_capacity(3, &mut src), 1024);
        assert!(matches!(r.next().await.unwrap(), Some(Frame::TooLong { .. })));
        let (h, t) = r.skipped_ends();
        assert_eq!(skipped_response_id(h, t), Some(42));
        assert!(matches!(r.next().await.unwrap(), Some(Frame::TooLong { .. })));
        let (h, t) = r.skipped_ends();
        assert!(h.len() <= 256 && t.len() <= 256);
        assert_eq!(skipped_response_id(h, t), Some(7));
        assert_eq!(skipped_response_id(br#"{"result":{"id":3,"#, br#"{"id":9}]}}"#), None, "nested ids are not it");
    }

    proptest! {
        #[test]
        fn any_split_of_the_stream_gives_the_same_frames(
            lines in proptest::collection::vec("[a-z{}\":, é]{0,40}", 0..12),
            chunks in proptest::collection::vec(1usize..17, 0..64),
        ) {
            let mut data = String::new();
            for l in &lines { data.push_str(l); data.push('\n'); }
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let whole = rt.block_on(frames(data.as_bytes(), &[], 64));
            let split = rt.block_on(frames(data.as_bytes(), &chunks, 64));
            let expected: Vec<Frame> = lines.iter().map(|l| Frame::Line(l.clone())).collect();
            prop_assert_eq!(&whole, &expected);
            prop_assert_eq!(split, expected);
        }
    }

    #[test]
    fn the_id_of_a_skipped_request_is_read_from_either_end() {
        let id = |head: &str, tail: &str| skipped_request_id(head.as_bytes(), tail.as_bytes());
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"#, "}}"), Some("7".into()));
        assert_eq!(id(r#" { "id" : "a\"b", "method": "x", "params": {"#, "x"), Some(r#""a\"b""#.into()));
        assert_eq!(id("{\"method\":\"x\",\"params\":{\"t\":\"\u{e9}", "\u{e9}\"}}"), None);
        assert_eq!(id("{\"method\":\"x\",\"params\":{\"t\":\"\u{e9}", "\"},\"id\":8}"), Some("8".into()));
        // Ends cut inside a character.
        let head = "{\"method\":\"x\",\"id\":3,\"params\":{\"t\":\"\u{e9}";
        assert_eq!(skipped_request_id(&head.as_bytes()[..head.len() - 1], b""), Some("3".into()));
        let tail = "\u{e9}\"},\"id\":9}";
        assert_eq!(skipped_request_id(br#"{"method":"x","params":{"#, &tail.as_bytes()[1..]), Some("9".into()));
        // A response of the client's (to a server request) is never taken for a request.
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":5,"result":{"content":["#, "]}}"), None);
        assert_eq!(id(r#"{"result":{"content":["#, r#"]},"jsonrpc":"2.0","id":5}"#), None);
        assert_eq!(
            id(r#"{"method":"tools/call","params":{"id":3,"#, r#"},"jsonrpc":"2.0","id":12}"#),
            Some("12".into())
        );
        assert_eq!(id(r#"{"method":"x","params":{"#, r#""x":1,"id":-4 }"#), Some("-4".into()));
        // Not shown for sure, or not a valid id: the error goes to null.
        assert_eq!(id(r#"{"params":{"id":3,"#, r#"{"id":5}}"#), None);
        assert_eq!(id(r#"{"id":null,"method":"x"}"#, ""), None);
        assert_eq!(id(r#"{"id":"cut"#, ""), None);
        assert_eq!(id("not json", "xx"), None);
    }

    #[tokio::test]
    async fn a_large_line_leaves_no_large_buffer_behind() {
        let big = "x".repeat(4 << 20);
        let input = format!("{big}\n{{}}\n");
        let mut r = LineReader::new(tokio::io::BufReader::new(input.as_bytes()), 8 << 20);
        match r.next().await.unwrap() {
            Some(Frame::Line(l)) => assert_eq!(l.len(), big.len()),
            _ => panic!("the large line"),
        }
        assert!(r.buf.capacity() <= KEEP_CAPACITY, "kept {} bytes after the large line", r.buf.capacity());
        assert!(matches!(r.next().await.unwrap(), Some(Frame::Line(l)) if l == "{}"));
        assert!(r.buf.capacity() <= KEEP_CAPACITY);
    }
}
