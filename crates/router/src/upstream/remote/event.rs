//! A Server-Sent Events parser that never holds more than `limit` bytes of one event.
//!
//! Written here rather than taken from a crate: the parsers on crates.io (sse-stream 0.3,
//! eventsource-stream 0.2) keep a whole event in memory however large it is, so a server
//! could make the router buffer without bound; the router promises `max_message_bytes` and
//! wants the two ends of a skipped event to read its id from (as `codec::LineReader` does for
//! stdio). Field rules follow the WHATWG "event stream interpretation".

use std::collections::VecDeque;
use std::time::Duration;

/// How many bytes of each end of a skipped event are kept, to read its id from.
const ENDS_KEPT: usize = 256;
/// Longest value kept for the `event`, `id` and `retry` fields (longer ones are cut).
const FIELD_LIMIT: usize = 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An event whose data fitted: its type (`None` = the default `message`) and data.
    Data { kind: Option<String>, data: String },
    /// An event whose data was longer than the limit: its size and the two ends of its data.
    TooLong { bytes: usize, head: Vec<u8>, tail: Vec<u8> },
    /// An event whose data is not UTF-8.
    NotUtf8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Data,
    Event,
    Id,
    Retry,
    Ignored,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a line.
    LineStart,
    /// Reading a field name.
    Name,
    /// Just after the colon: one leading space is dropped.
    ValueStart(Field),
    Value(Field),
    Comment,
}

/// Feeds on byte chunks, yields events.
pub struct Parser {
    limit: usize,
    state: State,
    /// A CR ended the last line: a LF right after it belongs to the same line end.
    after_cr: bool,
    bom_checked: bool,
    name: Vec<u8>,
    value: Vec<u8>,
    data: Vec<u8>,
    /// Bytes of data in the current event (with the LFs between its lines), kept or not.
    data_len: usize,
    has_data: bool,
    head: Vec<u8>,
    tail: Vec<u8>,
    kind: Option<String>,
    last_id: String,
    retry: Option<Duration>,
    ready: VecDeque<Event>,
}

impl Parser {
    pub fn new(limit: usize) -> Parser {
        Parser {
            limit,
            state: State::LineStart,
            after_cr: false,
            bom_checked: false,
            name: Vec::new(),
            value: Vec::new(),
            data: Vec::new(),
            data_len: 0,
            has_data: false,
            head: Vec::new(),
            tail: Vec::new(),
            kind: None,
            last_id: String::new(),
            retry: None,
            ready: VecDeque::new(),
        }
    }

    /// The last event id seen on the stream (empty: none, or reset by the server).
    pub fn last_id(&self) -> &str {
        &self.last_id
    }

    /// The reconnection time the server asked for with `retry:`.
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// The next complete event, if any.
    pub fn next_event(&mut self) -> Option<Event> {
        self.ready.pop_front()
    }

    pub fn feed(&mut self, mut bytes: &[u8]) {
        if !self.bom_checked {
            // The stream may open with a UTF-8 BOM; it may even be split across chunks.
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            let seen = self.name.len();
            let want = &BOM[seen..];
            let n = want.len().min(bytes.len());
            if bytes[..n] == want[..n] {
                if n < want.len() {
                    self.name.extend_from_slice(&bytes[..n]);
                    return;
                }
                bytes = &bytes[n..];
                self.name.clear();
            } else {
                // Not a BOM after all: what was held back is the start of a field name.
                let held = std::mem::take(&mut self.name);
                self.bom_checked = true;
                self.feed(&held);
                self.feed(bytes);
                return;
            }
            self.bom_checked = true;
        }
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    i += 1;
                    continue;
                }
            }
            if b == b'\r' || b == b'\n' {
                self.after_cr = b == b'\r';
                self.end_line();
                i += 1;
                continue;
            }
            match self.state {
                State::LineStart => {
                    if b == b':' {
                        self.state = State::Comment;
                    } else {
                        self.state = State::Name;
                        self.name.clear();
                        self.name.push(b);
                    }
                    i += 1;
                }
                State::Name => {
                    if b == b':' {
                        let field = self.field();
                        self.begin_value(field);
                        self.state = State::ValueStart(field);
                    } else if self.name.len() < 16 {
                        self.name.push(b);
                    } else {
                        // No field has a name this long: whatever it is, it is ignored.
                        self.name.clear();
                        self.name.extend_from_slice(b"-ignored-");
                    }
                    i += 1;
                }
                State::ValueStart(field) => {
                    self.state = State::Value(field);
                    if b == b' ' {
                        i += 1;
                    }
                }
                State::Value(field) => {
                    // Take the run of bytes up to the next line end at once.
                    let end = memchr::memchr2(b'\r', b'\n', &bytes[i..]).map_or(bytes.len(), |p| i + p);
                    self.take_value(field, &bytes[i..end]);
                    i = end;
                }
                State::Comment => {
                    i = memchr::memchr2(b'\r', b'\n', &bytes[i..]).map_or(bytes.len(), |p| i + p);
                }
            }
        }
    }

    fn field(&self) -> Field {
        match self.name.as_slice() {
            b"data" => Field::Data,
            b"event" => Field::Event,
            b"id" => Field::Id,
            b"retry" => Field::Retry,
            _ => Field::Ignored,
        }
    }

    fn begin_value(&mut self, field: Field) {
        self.value.clear();
        if field == Field::Data {
            if self.has_data {
                self.take_value(Field::Data, b"\n");
            }
            self.has_data = true;
        }
    }

    fn take_value(&mut self, field: Field, part: &[u8]) {
        match field {
            Field::Data => {
                let before = self.data_len;
                self.data_len += part.len();
                if self.data_len <= self.limit {
                    self.data.extend_from_slice(part);
                    return;
                }
                if before <= self.limit {
                    // Just went over: keep the head, drop the rest.
                    let mut head = std::mem::take(&mut self.data);
                    head.extend_from_slice(part);
                    head.truncate(ENDS_KEPT);
                    self.head = head;
                    self.tail.clear();
                }
                let from = part.len().saturating_sub(ENDS_KEPT);
                self.tail.extend_from_slice(&part[from..]);
                let excess = self.tail.len().saturating_sub(ENDS_KEPT);
                self.tail.drain(..excess);
            }
            Field::Ignored => {}
            _ => {
                let room = FIELD_LIMIT.saturating_sub(self.value.len());
                self.value.extend_from_slice(&part[..part.len().min(room)]);
            }
        }
    }

    fn end_line(&mut self) {
        match self.state {
            State::LineStart => self.dispatch(),
            State::Name => {
                // A field name alone: its value is empty.
                let field = self.field();
                self.begin_value(field);
                self.finish_field(field);
            }
            State::ValueStart(field) | State::Value(field) => self.finish_field(field),
            State::Comment => {}
        }
        self.state = State::LineStart;
    }

    fn finish_field(&mut self, field: Field) {
        match field {
            Field::Event => self.kind = Some(String::from_utf8_lossy(&self.value).into_owned()),
            Field::Id => {
                if !self.value.contains(&0) {
                    self.last_id = String::from_utf8_lossy(&self.value).into_owned();
                }
            }
            Field::Retry => {
                if !self.value.is_empty()
                    && self.value.iter().all(u8::is_ascii_digit)
                    && let Ok(ms) = std::str::from_utf8(&self.value).unwrap_or("").parse::<u64>()
                {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            Field::Data | Field::Ignored => {}
        }
    }

    fn dispatch(&mut self) {
        let kind = self.kind.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        let bytes = std::mem::take(&mut self.data_len);
        let event = if bytes > self.limit {
            Event::TooLong { bytes, head: std::mem::take(&mut self.head), tail: std::mem::take(&mut self.tail) }
        } else {
            match String::from_utf8(std::mem::take(&mut self.data)) {
                Ok(data) => Event::Data { kind, data },
                Err(_) => Event::NotUtf8,
            }
        };
        self.data.clear();
        self.ready.push_back(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &mut Parser) -> Vec<Event> {
        std::iter::from_fn(|| p.next_event()).collect()
    }

    fn data(s: &str) -> Event {
        Event::Data { kind: None, data: s.to_string() }
    }

    #[test]
    fn fields_comments_and_line_ends() {
        let mut p = Parser::new(1024);
        p.feed(b"\xEF\xBB\xBF: comment\r\nid: 7\r\nevent: message\r\ndata: {\"a\":1}\r\n\r\n");
        p.feed(b"data:x\rdata: y\r\rdata\n\n");
        assert_eq!(
            all(&mut p),
            vec![Event::Data { kind: Some("message".into()), data: "{\"a\":1}".into() }, data("x\ny"), data(""),]
        );
        assert_eq!(p.last_id(), "7");
    }

    #[test]
    fn split_anywhere_gives_the_same_events() {
        let text: &[u8] = b"\xEF\xBB\xBFretry: 1500\r\nid: a\r\ndata: one\r\ndata: two\r\n\r\nevent: endpoint\ndata: /m?s=1\n\n: ping\n\nid\ndata: z\n\n";
        let mut whole = Parser::new(1024);
        whole.feed(text);
        let expect = all(&mut whole);
        assert_eq!(expect.len(), 3);
        for cut in 0..text.len() {
            let mut p = Parser::new(1024);
            p.feed(&text[..cut]);
            p.feed(&text[cut..]);
            assert_eq!(all(&mut p), expect, "cut at {cut}");
            assert_eq!(p.last_id(), "", "an empty id resets the last event id");
            assert_eq!(p.retry(), Some(Duration::from_millis(1500)));
        }
        // CRLF split between chunks counts as one line end.
        let mut p = Parser::new(1024);
        p.feed(b"data: a\r");
        p.feed(b"\ndata: b\r\n\r\n");
        assert_eq!(all(&mut p), vec![data("a\nb")]);
    }

    #[test]
    fn an_event_without_data_only_moves_the_id_and_an_unfinished_one_is_dropped() {
        let mut p = Parser::new(1024);
        p.feed(b"id: 42\n\nevent: x\n\ndata: partial");
        assert_eq!(all(&mut p), vec![]);
        assert_eq!(p.last_id(), "42");
    }

    #[test]
    fn an_over_long_event_is_skipped_with_its_ends_and_the_next_one_is_read() {
        let mut p = Parser::new(64);
        let big = format!("{{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{{\"x\":\"{}\"}}}}", "a".repeat(10_000));
        let text = format!("data: {big}\n\ndata: small\n\n");
        for chunk in text.as_bytes().chunks(100) {
            p.feed(chunk);
        }
        let events = all(&mut p);
        match &events[0] {
            Event::TooLong { bytes, head, tail } => {
                assert_eq!(*bytes, big.len());
                assert!(head.starts_with(b"{\"jsonrpc\":\"2.0\",\"id\":9"));
                assert!(tail.ends_with(b"\"}}"));
                assert!(head.len() <= ENDS_KEPT && tail.len() <= ENDS_KEPT);
            }
            other => panic!("expected TooLong, got {other:?}"),
        }
        assert_eq!(events[1], data("small"));
        assert!(p.data.capacity() < 4096, "the skipped event was not held");
    }

    #[test]
    fn not_utf8_data_is_reported() {
        let mut p = Parser::new(64);
        p.feed(b"data: \xff\xfe\n\n");
        assert_eq!(all(&mut p), vec![Event::NotUtf8]);
    }
}
