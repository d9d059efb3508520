//! W3C trace context across the MCP hop: a `traceparent` read (from a request's
//! `params._meta` or the HTTP front's header) and written back into the line a server gets.
//!
//! MCP reserves `traceparent` and `tracestate` in `_meta` (2026-07-28); a server of either era
//! may read them there. Only these two keys are touched: the rest of the line stays as the client
//! wrote it.

use std::borrow::Cow;
use std::ops::Range;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use switchyard_core::call::Call;
use switchyard_mcp::meta::{TRACEPARENT, TRACESTATE};

/// `tracestate` is cut at this many bytes rather than carried whole (W3C: 512 is enough).
const MAX_TRACESTATE: usize = 512;

/// One W3C `traceparent`: `00-{trace id}-{parent id}-{flags}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` value. Version `00` exactly; a later version is read by its first
    /// four fields, as W3C asks. None for anything else, an all-zero id included: the caller
    /// then starts a new trace.
    pub fn parse(text: &str) -> Option<TraceParent> {
        let t = text.trim_matches([' ', '\t']);
        let b = t.as_bytes();
        if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let version = hex_byte(&b[0..2])?;
        // ff is forbidden; 00 has exactly four fields; a later version may add some after a dash.
        if version == 0xff || (version == 0 && b.len() != 55) || (version > 0 && b.len() > 55 && b[55] != b'-') {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, out) in trace_id.iter_mut().enumerate() {
            *out = hex_byte(&b[3 + 2 * i..5 + 2 * i])?;
        }
        let mut parent_id = [0u8; 8];
        for (i, out) in parent_id.iter_mut().enumerate() {
            *out = hex_byte(&b[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&b[53..55])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent { trace_id, parent_id, flags })
    }

    /// The trace id in lowercase hex, as `traceparent` and the audit log write it.
    pub fn trace_id_hex(&self) -> String {
        switchyard_core::ids::hex(&self.trace_id)
    }

    /// Whether the caller recorded its span (the `sampled` flag).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

impl std::fmt::Display for TraceParent {
    /// Written at once from a buffer: a traceparent goes out with every traced request.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [b'-'; 55];
        out[..2].copy_from_slice(b"00");
        let bytes = self.trace_id.iter().chain(&self.parent_id).chain([&self.flags]);
        // The hex digits of each byte, skipping the dashes at 2, 35 and 52.
        for (i, b) in bytes.enumerate() {
            let at = 3 + 2 * i + usize::from(i >= 16) + usize::from(i >= 24);
            out[at] = DIGITS[usize::from(b >> 4)];
            out[at + 1] = DIGITS[usize::from(b & 0xf)];
        }
        f.write_str(std::str::from_utf8(&out).expect("ASCII"))
    }
}

/// Lowercase hex only (W3C: uppercase is invalid).
fn hex_byte(two: &[u8]) -> Option<u8> {
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(nibble(two[0])? << 4 | nibble(two[1])?)
}

/// The trace context the client sent in `call`'s `_meta`: its `traceparent`, when it is one,
/// and its `tracestate`.
pub fn sent(call: &Call) -> Option<(TraceParent, Option<String>)> {
    let f = call.fields();
    let parent = TraceParent::parse(&call.string(&f.traceparent)?)?;
    Some((parent, call.string(&f.tracestate).map(String::from)))
}

/// The edits that put `parent` (and `state`, when the call has none of its own) into `call`'s
/// `params._meta`, for `switchyard_core::codec::splice_many` beside the id's: a `traceparent`
/// already there is replaced, a missing one (or `_meta`, or `params`) is added. Empty when
/// params are not an object (no place for `_meta`). Params a splice cannot trace safely (a key
/// twice, a `traceparent` that is no string: see `Fields::odd_meta`) are read again, and each
/// `_meta` object of theirs rewritten ([`rewritten`]); a `_meta` that is no object is left.
pub fn edits(call: &Call, parent: &TraceParent, state: Option<&str>) -> Vec<(Range<usize>, String)> {
    let (line, f) = (call.line(), call.fields());
    if f.odd_meta {
        return rewritten(call, parent, state);
    }
    let state = state.filter(|_| f.tracestate.is_none()).and_then(fitted);
    let value = format!("\"{parent}\"");
    if let Some(r) = &f.traceparent {
        let mut edits = vec![(r.clone(), value)];
        if let (Some(state), Some(meta)) = (&state, &f.meta) {
            let at = meta.start + 1;
            edits.push((at..at, format!("\"{TRACESTATE}\":{},", json_string(state))));
        }
        return edits;
    }
    let mut members = format!("\"{TRACEPARENT}\":{value}");
    if let Some(state) = &state {
        members.push_str(&format!(",\"{TRACESTATE}\":{}", json_string(state)));
    }
    if let Some(meta) = &f.meta {
        return vec![insert_first(line, meta, &members)];
    }
    match &call.envelope().params {
        Some(p) if line[p.clone()].starts_with('{') => vec![insert_first(line, p, &format!("\"_meta\":{{{members}}}"))],
        Some(_) => Vec::new(),
        // First in the message, which has `jsonrpc` after it.
        None => match line.find('{') {
            Some(open) => vec![(open + 1..open + 1, format!("\"params\":{{\"_meta\":{{{members}}}}},"))],
            None => Vec::new(),
        },
    }
}

/// [`edits`] for params a splice cannot trace safely, by a second read. In each `_meta` object
/// of theirs (a server's parser may take the first or the last), every `traceparent` gets
/// `parent` (one is added first when there is none) and every `tracestate` one value: the last
/// one's when it is a string, else `state`, else `null`. Only these values change, so the other
/// members (the progress token the id's splice replaces among them) stay where they are. A
/// `_meta` that is no object is left as it is; params with none get one, first.
fn rewritten(call: &Call, parent: &TraceParent, state: Option<&str>) -> Vec<(Range<usize>, String)> {
    let line = call.line();
    let Some(p) = &call.envelope().params else { return Vec::new() };
    let Ok(Members(params)) = serde_json::from_str::<Members>(&line[p.clone()]) else { return Vec::new() };
    let value = format!("\"{parent}\"");
    let state = state.and_then(fitted).map(|s| json_string(&s));
    let metas: Vec<&RawValue> = params.iter().filter(|(k, _)| k == "_meta").map(|(_, v)| *v).collect();
    if metas.is_empty() {
        let mut members = format!("\"{TRACEPARENT}\":{value}");
        if let Some(s) = &state {
            members.push_str(&format!(",\"{TRACESTATE}\":{s}"));
        }
        return vec![insert_first(line, p, &format!("\"_meta\":{{{members}}}"))];
    }
    let mut edits = Vec::new();
    for raw in metas {
        let Ok(Members(meta)) = serde_json::from_str::<Members>(raw.get()) else { continue };
        let of = |key: &'static str| meta.iter().filter(move |(k, _)| k == key).map(|(_, v)| *v);
        let theirs = of(TRACESTATE).next_back().map(RawValue::get).filter(|v| v.starts_with('"'));
        let chosen = theirs.or(state.as_deref());
        for v in of(TRACEPARENT) {
            edits.push((switchyard_core::codec::span(line, v.get()), value.clone()));
        }
        for v in of(TRACESTATE).filter(|v| Some(v.get()) != chosen) {
            edits.push((switchyard_core::codec::span(line, v.get()), chosen.unwrap_or("null").to_string()));
        }
        let mut first = Vec::new();
        if of(TRACEPARENT).next().is_none() {
            first.push(format!("\"{TRACEPARENT}\":{value}"));
        }
        if let (None, Some(s)) = (of(TRACESTATE).next(), chosen) {
            first.push(format!("\"{TRACESTATE}\":{s}"));
        }
        if !first.is_empty() {
            edits.push(insert_first(line, &switchyard_core::codec::span(line, raw.get()), &first.join(",")));
        }
    }
    edits
}

/// An object's members in order, keys given twice included (their escapes undone), each value
/// raw; Err for anything but an object.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Each;
        impl<'de> Visitor<'de> for Each {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut all = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    all.push(member);
                }
                Ok(Members(all))
            }
        }
        d.deserialize_map(Each)
    }
}

/// An insertion of `members` as the first members of the object at `object` in `line`.
fn insert_first(line: &str, object: &Range<usize>, members: &str) -> (Range<usize>, String) {
    let at = object.start + 1;
    let empty = line[at..object.end - 1].trim().is_empty();
    (at..at, if empty { members.to_string() } else { format!("{members},") })
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("strings always serialise")
}

/// A `tracestate` entry longer than this is the first to go when the list is cut (W3C).
const LONG_ENTRY: usize = 128;

/// A `tracestate` of more entries than this is cut to this many (W3C).
const MAX_ENTRIES: usize = 32;

/// `state` as switchyard passes it on: exactly as it was (spaces and empty entries included) when
/// it is at most [`MAX_TRACESTATE`] bytes of at most [`MAX_ENTRIES`] entries, else cut as W3C says,
/// by whole entries: past the first [`MAX_ENTRIES`] go, then those over 128 characters (from the
/// end), then entries from the end, until the rest fit; the entries kept keep their order. None
/// when no entry fits, or it has none (the server is never sent an empty `tracestate`). Several
/// headers' values joined by commas are one list; a cut list is rewritten without empty entries
/// or the spaces around entries.
pub fn fitted(state: &str) -> Option<Cow<'_, str>> {
    fit(state, MAX_TRACESTATE)
}

fn fit(state: &str, max: usize) -> Option<Cow<'_, str>> {
    let mut entries: Vec<&str> =
        state.split(',').map(|e| e.trim_matches([' ', '\t'])).filter(|e| !e.is_empty()).collect();
    if entries.is_empty() {
        return None;
    }
    if state.len() <= max && entries.len() <= MAX_ENTRIES {
        return Some(Cow::Borrowed(state));
    }
    entries.truncate(MAX_ENTRIES);
    // The length of the entries joined by commas.
    let joined = |e: &[&str]| e.iter().map(|e| e.len()).sum::<usize>() + e.len().saturating_sub(1);
    while joined(&entries) > max {
        match entries.iter().rposition(|e| e.len() > LONG_ENTRY) {
            Some(long) => entries.remove(long),
            None => entries.pop().expect("a list over its limit has an entry"),
        };
    }
    (!entries.is_empty()).then(|| Cow::Owned(entries.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn call(line: &str) -> Call {
        Call::parse(line.to_string()).expect("a request")
    }

    /// `line` with `parent` (and `state`) put in, as the server gets it; checked to be JSON with
    /// no `traceparent` added beside one already there.
    fn inject(line: &str, parent: &TraceParent, state: Option<&str>) -> serde_json::Value {
        let edits = edits(&call(line), parent, state);
        let out =
            switchyard_core::codec::splice_many(line, edits.iter().map(|(r, s)| (r.clone(), s.as_str())).collect());
        let count = |s: &str| s.matches("\"traceparent\":").count();
        assert_eq!(count(&out), count(line).max(1), "{out}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{out} is not JSON: {e}"))
    }

    #[test]
    fn a_traceparent_reads_and_writes_back_the_same() {
        let p = TraceParent::parse(TP).unwrap();
        assert_eq!(p.to_string(), TP);
        assert!(p.sampled());
        assert_eq!(p.parent_id, [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31]);
    }

    #[test]
    fn a_bad_traceparent_is_none() {
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
        // A later version is read by its first four fields.
        let later = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00-whatever";
        assert!(TraceParent::parse(later).is_some_and(|p| !p.sampled()));
    }

    #[test]
    fn the_clients_trace_context_is_read_from_the_call() {
        let c = call(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","_meta":{{"progressToken":3,"traceparent":"{TP}","tracestate":"a=1"}}}}}}"#
        ));
        assert_eq!(sent(&c), Some((TraceParent::parse(TP).unwrap(), Some("a=1".to_string()))));
        // Nothing else is taken for it: a name, an argument, a value that is no traceparent.
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"traceparent","arguments":{"traceparent":"x"},"_meta":{"traceparent":"00-x"}}}"#;
        assert_eq!(sent(&call(line)), None);
    }

    #[test]
    fn a_traceparent_is_spliced_in_wherever_the_line_has_room() {
        let ours = TraceParent { trace_id: [7; 16], parent_id: [9; 8], flags: 1 };
        let cases = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list" } "#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"a":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"progressToken":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","progressToken":1},"name":"echo"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"traceparent","arguments":{"traceparent":"x"},"_meta":{"traceparent":"00-x"}}}"#,
        ];
        for line in cases {
            let v = inject(line, &ours, None);
            assert_eq!(v["params"]["_meta"]["traceparent"], ours.to_string(), "{line}");
            assert_eq!(v["id"], 1);
            assert!(v["params"]["_meta"].get("tracestate").is_none());
        }
        let v = inject(cases[5], &ours, None);
        assert_eq!(
            (v["params"]["name"].as_str(), v["params"]["_meta"]["progressToken"].as_i64()),
            (Some("echo"), Some(1))
        );
        assert_eq!(inject(cases[7], &ours, None)["params"]["arguments"]["traceparent"], "x");
    }

    #[test]
    fn a_tracestate_from_the_front_is_added_but_the_clients_own_is_kept() {
        let ours = TraceParent { trace_id: [7; 16], parent_id: [9; 8], flags: 0 };
        let line = r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#;
        assert_eq!(inject(line, &ours, Some("vendor=x"))["params"]["_meta"]["tracestate"], "vendor=x");
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":"a","method":"ping","params":{{"_meta":{{"traceparent":"{TP}"}}}}}}"#);
        let v = inject(&line, &ours, Some("vendor=x"));
        let ours_text = ours.to_string();
        assert_eq!(
            (v["params"]["_meta"]["traceparent"].as_str(), v["params"]["_meta"]["tracestate"].as_str()),
            (Some(ours_text.as_str()), Some("vendor=x"))
        );
        let line = r#"{"jsonrpc":"2.0","id":"a","method":"ping","params":{"_meta":{"tracestate":"mine=1"}}}"#;
        assert_eq!(inject(line, &ours, Some("vendor=x"))["params"]["_meta"]["tracestate"], "mine=1");
    }

    #[test]
    fn nothing_is_put_where_no_parser_would_find_it() {
        let ours = TraceParent { trace_id: [7; 16], parent_id: [9; 8], flags: 1 };
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":["traceparent"]}}"#,
        ] {
            assert!(edits(&call(line), &ours, None).is_empty(), "{line}");
        }
    }

    /// `line` with `parent` (and `state`) put in beside the splices `send_traced` makes with them
    /// (the id, the progress token), and the `traceparent` and `tracestate` members of each
    /// `_meta` of its params as they are written, in order.
    fn odd(line: &str, parent: &TraceParent, state: Option<&str>) -> (serde_json::Value, Vec<Vec<(String, String)>>) {
        let c = call(line);
        assert!(c.fields().odd_meta, "{line}");
        let mut all: Vec<(Range<usize>, String)> = vec![(c.id_range(), "99".to_string())];
        all.extend(c.fields().progress_token.clone().map(|r| (r, "17".to_string())));
        all.extend(edits(&c, parent, state));
        let out = switchyard_core::codec::splice_many(line, all.iter().map(|(r, s)| (r.clone(), s.as_str())).collect());
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{out} is not JSON: {e}"));
        assert_eq!(v["id"], 99, "{out}");
        let params = &out[call(&out).envelope().params.clone().unwrap()];
        let Members(members) = serde_json::from_str(params).unwrap();
        let metas = members.iter().filter(|(k, _)| k == "_meta").map(|(_, m)| {
            let Members(meta) = serde_json::from_str(m.get()).unwrap_or(Members(Vec::new()));
            meta.into_iter()
                .filter(|(k, _)| k == TRACEPARENT || k == TRACESTATE)
                .map(|(k, v)| (k, v.get().to_string()))
                .collect()
        });
        (v, metas.collect())
    }

    /// `(key, value)` as [`odd`] gives them.
    fn kv(key: &str, value: &str) -> (String, String) {
        (key.to_string(), value.to_string())
    }

    #[test]
    fn an_odd_meta_gets_switchyard_s_traceparent_and_no_other() {
        let ours = TraceParent { trace_id: [7; 16], parent_id: [9; 8], flags: 1 };
        let tp = format!("\"{ours}\"");
        let one = "00-11111111111111111111111111111111-1111111111111111-01";
        let two = "00-22222222222222222222222222222222-2222222222222222-01";
        // Whichever of keys given twice a parser takes (JS and Python: the last), it is ours.
        for (value, got) in [
            ("12345", vec![kv(TRACEPARENT, &tp)]),
            (r#"{"a":1}"#, vec![kv(TRACEPARENT, &tp)]),
            ("null", vec![kv(TRACEPARENT, &tp)]),
            (r#"["x"]"#, vec![kv(TRACEPARENT, &tp)]),
            (&format!(r#""{one}","traceparent":"{two}""#), vec![kv(TRACEPARENT, &tp), kv(TRACEPARENT, &tp)]),
        ] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","_meta":{{"progressToken":"p","traceparent":{value}}},"arguments":{{"n":1.50}}}}}}"#
            );
            let (v, metas) = odd(&line, &ours, None);
            assert_eq!(metas, [got], "{line}");
            assert_eq!(v["params"]["_meta"]["traceparent"], ours.to_string(), "{line}");
            assert_eq!(v["params"]["name"], "echo");
        }
        // The progress token, spliced beside it, where a parser reads it.
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"traceparent":7,"progressToken":5}}}"#;
        assert_eq!(odd(line, &ours, None).0["params"]["_meta"]["progressToken"], 17);
        // `_meta` twice: each object gets it, whichever a parser reads.
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"_meta":{{"traceparent":"{one}"}},"name":"echo","_meta":{{"x":1}}}}}}"#
        );
        let (v, metas) = odd(&line, &ours, Some("front=1"));
        let state = kv(TRACESTATE, r#""front=1""#);
        assert_eq!(metas, [vec![state.clone(), kv(TRACEPARENT, &tp)], vec![kv(TRACEPARENT, &tp), state.clone()]]);
        assert_eq!((v["params"]["_meta"]["x"].as_i64(), v["params"]["name"].as_str()), (Some(1), Some("echo")));
        // An escaped key is the same key; a `null` one is a key all the same.
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"_meta":{{"trace\u0070arent":"{one}","traceparent":null}}}}}}"#
        );
        assert_eq!(odd(&line, &ours, None).1, [vec![kv(TRACEPARENT, &tp), kv(TRACEPARENT, &tp)]]);
        // A `tracestate`: its last when it is a string, else the front's, else none (`null`).
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"tracestate":"a=1","tracestate":"b=2","traceparent":1}}}"#;
        let b2 = kv(TRACESTATE, r#""b=2""#);
        assert_eq!(odd(line, &ours, Some("front=1")).1, [vec![b2.clone(), b2, kv(TRACEPARENT, &tp)]]);
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"tracestate":{"a":1}}}}"#;
        assert_eq!(odd(line, &ours, Some("front=1")).1, [vec![kv(TRACEPARENT, &tp), state]]);
        assert_eq!(odd(line, &ours, None).1, [vec![kv(TRACEPARENT, &tp), kv(TRACESTATE, "null")]]);
        // `_meta` twice, the last no object: the object gets it, the other is left (it carries none).
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{},"_meta":"s"}}"#;
        assert_eq!(odd(line, &ours, None).1, [vec![kv(TRACEPARENT, &tp)], vec![]]);
        // A key twice elsewhere, no `_meta`: one is added.
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"name":"a","name":"b"}}"#;
        assert_eq!(odd(line, &ours, None).1, [vec![kv(TRACEPARENT, &tp)]]);
    }

    #[test]
    fn a_plain_meta_is_spliced_not_read_again() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"traceparent":"00-x","tracestate":"a=1"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"progressToken":null}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#,
        ] {
            assert!(!call(line).fields().odd_meta, "{line}");
        }
    }

    #[test]
    fn a_long_tracestate_loses_whole_entries_from_its_end() {
        let long = (0..100).map(|i| format!("k{i}=v{i}")).collect::<Vec<_>>().join(",");
        let c = fitted(&long).unwrap();
        assert!(c.len() <= MAX_TRACESTATE && long.starts_with(&*c) && long[c.len()..].starts_with(','), "{c}");
        assert!(matches!(fitted("a=1,b=2"), Some(Cow::Borrowed("a=1,b=2"))));
        assert_eq!(fitted(""), None);
        assert_eq!(fitted(" , "), None);
    }

    #[test]
    fn a_tracestate_over_its_limit_keeps_the_legal_entries_that_fit() {
        // One entry alone over 512 bytes: it goes, the others stay.
        let big = format!("big={}", "v".repeat(600));
        assert_eq!(fitted(&big), None, "nothing fits: no empty tracestate");
        assert_eq!(fitted(&format!("a=1,{big},b=2")).as_deref(), Some("a=1,b=2"));
        assert_eq!(fitted(&format!("{big},a=1")).as_deref(), Some("a=1"));
        // Entries over 128 characters go before short ones, from the end; then from the end.
        let e = |k: &str, n: usize| format!("{k}={}", "x".repeat(n - k.len() - 1));
        let (l1, l2) = (e("l1", 200), e("l2", 200));
        let shorts: Vec<String> = (0..5).map(|i| e(&format!("s{i}"), 40)).collect();
        let list = format!("{l1},{},{l2}", shorts.join(","));
        // 200 + 5 * 41 + 201 = 606 > 512: l2 going is enough, l1 (which fits) stays.
        assert_eq!(fitted(&list).as_deref(), Some(format!("{l1},{}", shorts.join(",")).as_str()));
        let more: Vec<String> = (0..12).map(|i| e(&format!("m{i}"), 40)).collect();
        let list = format!("{l1},{}", more.join(","));
        // 12 * 41 - 1 = 491 fits without l1; the long one goes, every short one stays.
        assert_eq!(fitted(&list).as_deref(), Some(more.join(",").as_str()));
        let list = format!("{},{l1}", (0..20).map(|i| e(&format!("n{i}"), 40)).collect::<Vec<_>>().join(","));
        let kept = fitted(&list).unwrap();
        assert!(!kept.contains("l1=") && kept.len() <= MAX_TRACESTATE && list.starts_with(&*kept), "{kept}");
        assert_eq!(kept.split(',').count(), 12, "{kept}");
        // Whitespace and empty entries of a list that is cut are left out.
        let spaced = format!("a=1 , ,\tb=2,{big}");
        assert_eq!(fitted(&spaced).as_deref(), Some("a=1,b=2"));
    }

    /// Within its limits a `tracestate` is passed on as it was, empty entries and spaces
    /// included; past 32 entries (however short) it keeps its first 32, rewritten.
    #[test]
    fn a_tracestate_within_its_limits_is_passed_on_as_it_was() {
        for state in ["a=1,,, ,b=2", " a=1", "a=1 ,\tb=2,", ",x=y"] {
            assert!(matches!(fitted(state), Some(Cow::Borrowed(s)) if s == state), "{state}");
        }
        let entries: Vec<String> = (0..40).map(|i| format!("k{i}=v")).collect();
        let at_limit = entries[..32].join(",,");
        assert!(matches!(fitted(&at_limit), Some(Cow::Borrowed(_))), "32 entries with empty ones between fit");
        assert_eq!(fitted(&entries[..33].join(", ")).as_deref(), Some(entries[..32].join(",").as_str()));
        assert_eq!(fitted(&entries.join(",")).as_deref(), Some(entries[..32].join(",").as_str()));
    }
}
