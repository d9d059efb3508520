//! Line framing and the JSON-RPC envelope: parse only what routing needs, rewrite ids in place.
//!
//! A message stays the text it arrived as. Parsing records byte ranges of the id, the params and
//! the few nested fields the router rewrites (progress tokens, cancelled request ids), so a
//! rewrite is a splice of the original line, never a re-serialisation of the payload.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// The code the TypeScript SDK uses for "Request timed out"; clients already know it.
pub const REQUEST_TIMEOUT: i64 = -32001;
/// Router-specific: the server or its pool cannot take the call now.
pub const SERVER_BUSY: i64 = -32002;
/// Router-specific: the server instance died or is down.
pub const SERVER_UNAVAILABLE: i64 = -32003;
/// Router-specific: a policy plugin rejected the call.
pub const POLICY_REJECTED: i64 = -32004;
/// MCP 2026-07-28: the protocol version a request carries is not served (`data.supported` lists
/// what is); auto-negotiating clients fall back on it.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

mod reader;
mod scan;
mod twice;

pub use reader::{ENDS_KEPT, Frame, LineReader, keep_tail, skipped_request_id, skipped_response_id};
pub use twice::key_given_twice;

/// What kind of JSON-RPC message a line holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
}

/// The routing-relevant parts of one message, as byte ranges into its line.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub kind: Kind,
    /// The raw id (e.g. `7` or `"abc"`), for requests and responses.
    pub id: Option<Range<usize>>,
    /// The method; a method of MCP's own is borrowed from [`METHODS`], so that reading it
    /// allocates nothing.
    pub method: Option<Cow<'static, str>>,
    pub params: Option<Range<usize>>,
    /// Responses only: true when the message carries `error` rather than `result`.
    pub is_error: bool,
    /// Responses only: the range of `result`.
    pub result: Option<Range<usize>>,
}

/// Why a line is not a JSON-RPC message the router can route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON at all: answer -32700 with id null.
    Json(String),
    /// JSON, but not a valid JSON-RPC 2.0 message: answer -32600 (with the id when one was readable).
    Invalid { reason: String, id: Option<String> },
    /// A notification (a method, no id) with invalid params: JSON-RPC allows no reply to a
    /// notification, so it is dropped (and logged).
    BadNotification { method: String, reason: String },
}

impl ParseError {
    pub fn code(&self) -> i64 {
        match self {
            ParseError::Json(_) => PARSE_ERROR,
            ParseError::Invalid { .. } | ParseError::BadNotification { .. } => INVALID_REQUEST,
        }
    }
    pub fn message(&self) -> String {
        match self {
            ParseError::Json(e) => format!("Parse error: {e}"),
            ParseError::Invalid { reason, .. } => format!("Invalid Request: {reason}"),
            ParseError::BadNotification { method, reason } => format!("Invalid notification {method}: {reason}"),
        }
    }
    /// The answer to the message that did not read: an error under [`ParseError::reply_id`].
    pub fn answer(&self) -> String {
        response_error(self.reply_id(), self.code(), &self.message(), None)
    }

    /// The id to answer with (`null` when none could be read).
    pub fn reply_id(&self) -> &str {
        match self {
            ParseError::Invalid { id: Some(id), .. } => id,
            _ => "null",
        }
    }
}

#[derive(Deserialize)]
struct RawEnvelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<Cow<'a, str>>,
    // `present`: a member that is there but `null` is Some("null"), not None. `"id": null`
    // makes an invalid request, never a notification; `"params": null` is not an object.
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// A member that is present, whatever its value (also `null`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Byte range of `inner` inside `outer`; `inner` must be a sub-slice of `outer`.
pub fn span(outer: &str, inner: &str) -> Range<usize> {
    let start = inner.as_ptr() as usize - outer.as_ptr() as usize;
    debug_assert!(start + inner.len() <= outer.len());
    start..start + inner.len()
}

/// Parses one message (not a batch) and classifies it.
pub fn parse(line: &str) -> Result<Envelope, ParseError> {
    let trimmed = line.trim_start();
    if !trimmed.starts_with('{') {
        // Valid JSON that is not an object is an invalid request, garbage is a parse error.
        return Err(match serde_json::from_str::<&RawValue>(line) {
            Ok(_) => ParseError::Invalid { reason: "a message must be a JSON object".into(), id: None },
            Err(e) => ParseError::Json(e.to_string()),
        });
    }
    let raw = match scan::members(line) {
        Some(members) => members,
        None => read_members(line)?,
    };
    // Only an error response may carry id null (it answers a request it could not read).
    let null_ok = raw.method.is_none() && raw.result.is_none() && raw.error.is_some();
    let id_fault = raw.id.and_then(|id| id_fault(id, null_ok));
    // The id's text is copied only for an error (not for every message), and only when it reads
    // as an id: JSON-RPC answers a request whose id it could not read under `null`.
    let reply_id = raw.id.filter(|_| id_fault.is_none());
    let invalid = |reason: &str| ParseError::Invalid { reason: reason.to_string(), id: reply_id.map(str::to_string) };
    if raw.jsonrpc.as_deref() != Some("2.0") {
        return Err(invalid("`jsonrpc` must be \"2.0\""));
    }
    if let Some(fault) = id_fault {
        return Err(invalid(&format!("`id` must be a string or an integer, not {fault}")));
    }
    let id = raw.id.map(|r| span(line, r));
    if let Some(m) = raw.method {
        let method = method(m).ok_or_else(|| invalid("`method` must be a string"))?;
        if raw.result.is_some() || raw.error.is_some() {
            return Err(invalid("a message cannot have both `method` and `result`/`error`"));
        }
        if let Some(p) = raw.params {
            let t = p.as_bytes()[0];
            if t != b'{' && t != b'[' {
                let reason = "`params` must be an object or an array";
                return Err(match id {
                    Some(_) => invalid(reason),
                    None => ParseError::BadNotification { method: method.into_owned(), reason: reason.to_string() },
                });
            }
        }
        return Ok(Envelope {
            kind: if id.is_some() { Kind::Request } else { Kind::Notification },
            id,
            method: Some(method),
            params: raw.params.map(|r| span(line, r)),
            is_error: false,
            result: None,
        });
    }
    match (raw.result, raw.error) {
        (Some(_), None) if raw.id == Some("null") => Err(invalid("a result needs an id that is not null")),
        (Some(r), None) if id.is_some() => Ok(Envelope {
            kind: Kind::Response,
            id,
            method: None,
            params: None,
            is_error: false,
            result: Some(span(line, r)),
        }),
        (None, Some(_)) => Ok(Envelope {
            kind: Kind::Response,
            // An error response may carry id null (e.g. to a request that could not be parsed).
            id: id.filter(|r| &line[r.clone()] != "null"),
            method: None,
            params: None,
            is_error: true,
            result: None,
        }),
        (Some(_), Some(_)) => Err(invalid("a response cannot have both `result` and `error`")),
        _ => Err(invalid("a message needs `method`, `result` or `error`")),
    }
}

/// The methods of MCP (requests and notifications, both ways) that a message's `method` is
/// read as without a copy.
pub const METHODS: &[&str] = &[
    "tools/call",
    "tools/list",
    "notifications/progress",
    "notifications/cancelled",
    "notifications/message",
    "notifications/initialized",
    "initialize",
    "ping",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "roots/list",
    "sampling/createMessage",
    "elicitation/create",
    "tasks/get",
    "tasks/result",
    "tasks/cancel",
    "tasks/list",
    "tasks/update",
    "subscriptions/listen",
    "server/discover",
    "notifications/tools/list_changed",
    "notifications/resources/list_changed",
    "notifications/resources/updated",
    "notifications/prompts/list_changed",
    "notifications/roots/list_changed",
    "notifications/tasks/status",
    "notifications/elicitation/complete",
    "notifications/subscriptions/acknowledged",
];

/// What is wrong with `id` (a member's JSON text) as a message's id, None when nothing is: it is
/// a string, or a number without a fractional part (MCP wants an integer; `1e3` and `-0` are
/// integers however written, and come back as written), or `null` where `null_ok`.
fn id_fault(id: &str, null_ok: bool) -> Option<&'static str> {
    match id.as_bytes()[0] {
        b'"' => None,
        b'-' | b'0'..=b'9' if !id.contains(['.', 'e', 'E']) || integral(id) => None,
        b'-' | b'0'..=b'9' => Some("a number with a fractional part"),
        b'n' if null_ok => None,
        b'n' => Some("null"),
        b't' | b'f' => Some("a boolean"),
        b'[' => Some("an array"),
        _ => Some("an object"),
    }
}

/// Whether the JSON number `n` (a fraction or an exponent in it) has an integer value: its
/// digits times ten to the exponent, less the fraction's length, leave no digit after the point.
fn integral(n: &str) -> bool {
    let n = n.trim_start_matches('-');
    let (mantissa, exp) = n.split_once(['e', 'E']).unwrap_or((n, "0"));
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = || int.bytes().chain(frac.bytes());
    let zeros = digits().rev().take_while(|b| *b == b'0').count();
    if zeros == int.len() + frac.len() {
        return true; // zero
    }
    // An exponent past what an i64 holds is far more than any number's digits.
    let exp: i64 =
        exp.trim_start_matches('+').parse().unwrap_or(if exp.starts_with('-') { i64::MIN } else { i64::MAX });
    exp.saturating_add(zeros as i64) >= frac.len() as i64
}

/// The string a raw `method` value holds (None: it is no string). A plain string (no escape)
/// naming one of [`METHODS`] is that entry; any other is read as JSON into a copy.
fn method(raw: &str) -> Option<Cow<'static, str>> {
    let plain = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')).filter(|m| !m.contains('\\'));
    if let Some(known) = plain.and_then(|m| METHODS.iter().find(|k| **k == m)) {
        return Some(Cow::Borrowed(known));
    }
    serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
}

/// The members of `line`'s object as serde_json reads them: the reference the fast path
/// ([`scan::members`]) leaves to whatever it is unsure of, and the errors.
fn read_members(line: &str) -> Result<scan::Members<'_>, ParseError> {
    let raw: RawEnvelope = match serde_json::from_str(line) {
        Ok(r) => r,
        Err(e) if e.is_syntax() || e.is_eof() => return Err(ParseError::Json(e.to_string())),
        Err(e) => return Err(ParseError::Invalid { reason: e.to_string(), id: None }),
    };
    Ok(scan::Members {
        jsonrpc: raw.jsonrpc,
        id: raw.id.map(RawValue::get),
        method: raw.method.map(RawValue::get),
        params: raw.params.map(RawValue::get),
        result: raw.result.map(RawValue::get),
        error: raw.error.map(RawValue::get),
    })
}

/// Splits a batch (a JSON array) into the text of its elements. Err when the array is not JSON.
pub fn split_batch(line: &str) -> Result<Vec<&str>, ParseError> {
    let items: Vec<&RawValue> = serde_json::from_str(line).map_err(|e| ParseError::Json(e.to_string()))?;
    Ok(items.into_iter().map(|r| r.get()).collect())
}

/// True when the line (after leading white space) is a JSON array.
pub fn is_batch(line: &str) -> bool {
    line.trim_start().starts_with('[')
}

/// Replaces the bytes in `range` with `with`.
pub fn splice(line: &str, range: Range<usize>, with: &str) -> String {
    let mut out = String::with_capacity(line.len() + with.len());
    out.push_str(&line[..range.start]);
    out.push_str(with);
    out.push_str(&line[range.end..]);
    out
}

/// [`splice`] of a line that is not needed after: in its own buffer, so that no new one is
/// allocated unless `with` is longer than what it replaces (an id put back, say).
pub fn splice_owned(mut line: String, range: Range<usize>, with: &str) -> String {
    line.replace_range(range, with);
    line
}

/// Applies several non-overlapping replacements at once (in any order).
pub fn splice_many(line: &str, mut edits: Vec<(Range<usize>, &str)>) -> String {
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = String::with_capacity(line.len() + 32);
    let mut at = 0;
    for (r, with) in edits {
        out.push_str(&line[at..r.start]);
        out.push_str(with);
        at = r.end;
    }
    out.push_str(&line[at..]);
    out
}

/// How many times this thread read the fields of a params object (`count-parses` builds only,
/// for the test that holds a request's params to one read on its way through the router).
#[cfg(feature = "count-parses")]
pub fn params_reads() -> usize {
    PARAMS_READS.with(|n| n.get())
}

#[cfg(feature = "count-parses")]
thread_local! {
    static PARAMS_READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Deserialises the fields of a params object: every read of one goes through here, so that
/// the reads can be counted.
pub(crate) fn read_params<'a, T: Deserialize<'a>>(params: &'a str) -> serde_json::Result<T> {
    #[cfg(feature = "count-parses")]
    PARAMS_READS.with(|n| n.set(n.get() + 1));
    serde_json::from_str(params)
}

#[derive(Deserialize)]
struct MetaHolder<'a> {
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<ProgressMeta<'a>>,
}
#[derive(Deserialize)]
struct ProgressMeta<'a> {
    #[serde(borrow, default, rename = "progressToken")]
    progress_token: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "io.modelcontextprotocol/protocolVersion")]
    protocol_version: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "io.modelcontextprotocol/subscriptionId")]
    subscription_id: Option<&'a RawValue>,
}

/// The key of the per-request envelope of the 2026-07-28 protocol: only such requests carry it.
pub const PROTOCOL_VERSION_META: &str = switchyard_mcp::meta::PROTOCOL_VERSION;

/// The protocol version a 2026-07-28-era request carries in `params._meta` (such a request
/// needs no `initialize`), or None for a request of the initialize era.
pub fn envelope_version(line: &str, params: &Range<usize>) -> Option<String> {
    let p = &line[params.clone()];
    if !p.contains(PROTOCOL_VERSION_META) {
        return None;
    }
    let holder: MetaHolder = read_params(p).ok()?;
    raw_string(holder.meta?.protocol_version)
}

/// Range of `params._meta["io.modelcontextprotocol/subscriptionId"]` in `line`: the id of the
/// `subscriptions/listen` request a notification belongs to.
pub fn subscription_id(line: &str, params: &Range<usize>) -> Option<Range<usize>> {
    let p = &line[params.clone()];
    if !p.contains(switchyard_mcp::meta::SUBSCRIPTION_ID) {
        return None;
    }
    let holder: MetaHolder = read_params(p).ok()?;
    let id = holder.meta?.subscription_id?;
    Some(span(line, id.get()))
}

/// Range of `params._meta.progressToken` in `line`, if the request asks for progress.
pub fn progress_token_in_request(line: &str, params: &Range<usize>) -> Option<Range<usize>> {
    let p = &line[params.clone()];
    if !p.contains("progressToken") {
        return None;
    }
    let holder: MetaHolder = read_params(p).ok()?;
    let tok = holder.meta?.progress_token?;
    Some(span(line, tok.get()))
}

#[derive(Deserialize)]
struct TokenHolder<'a> {
    #[serde(borrow, default, rename = "progressToken")]
    progress_token: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "requestId")]
    request_id: Option<&'a RawValue>,
    // Strings are taken raw and read one by one: one field of an unexpected type (say a
    // numeric `reason`) must not hide the others.
    #[serde(borrow, default)]
    uri: Option<&'a RawValue>,
    #[serde(borrow, default)]
    level: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default)]
    reason: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "taskId")]
    task_id: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "requestState")]
    request_state: Option<&'a RawValue>,
}

fn raw_string(raw: Option<&RawValue>) -> Option<String> {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

/// The fields of `params` the router routes on, as ranges into `line` (or owned strings).
#[derive(Debug, Default, Clone)]
pub struct ParamFields {
    /// `progressToken` (notifications/progress).
    pub progress_token: Option<Range<usize>>,
    /// `requestId` (notifications/cancelled).
    pub request_id: Option<Range<usize>>,
    /// `uri` (resources/subscribe, resources/updated).
    pub uri: Option<String>,
    /// `level` (logging/setLevel, notifications/message).
    pub level: Option<String>,
    /// `name` (tools/call, prompts/get).
    pub name: Option<String>,
    /// `arguments` (tools/call).
    pub arguments: Option<Range<usize>>,
    /// `reason` (notifications/cancelled).
    pub reason: Option<String>,
    /// `taskId` (tasks/get, tasks/result, tasks/cancel, tasks/update, task notifications): the
    /// span of its JSON string, quotes included.
    pub task_id: Option<Range<usize>>,
    /// `requestState` (a 2026-07-28 retry of a request the server answered `input_required`):
    /// the span of its JSON string, quotes included.
    pub request_state: Option<Range<usize>>,
}

/// Reads the routing fields of a params object; missing or malformed fields are `None`.
pub fn param_fields(line: &str, params: &Range<usize>) -> ParamFields {
    let p = &line[params.clone()];
    match read_params::<TokenHolder>(p) {
        Ok(h) => ParamFields {
            progress_token: h.progress_token.map(|r| span(line, r.get())),
            request_id: h.request_id.map(|r| span(line, r.get())),
            uri: raw_string(h.uri),
            level: raw_string(h.level),
            name: raw_string(h.name),
            arguments: h.arguments.map(|r| span(line, r.get())),
            reason: raw_string(h.reason),
            task_id: h.task_id.filter(|r| r.get().starts_with('"')).map(|r| span(line, r.get())),
            request_state: h.request_state.filter(|r| r.get().starts_with('"')).map(|r| span(line, r.get())),
        },
        Err(_) => ParamFields::default(),
    }
}

/// JSON text of a string.
pub fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("strings always serialise")
}

pub fn response_ok(id: &str, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

pub fn response_error(id: &str, code: i64, message: &str, data: Option<&serde_json::Value>) -> String {
    let message = json_string(message);
    match data {
        Some(d) => format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message},"data":{d}}}}}"#),
        None => format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message}}}}}"#),
    }
}

pub fn notification(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":{},"params":{params}}}"#, json_string(method))
}

pub fn request(id: &str, method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{},"params":{params}}}"#, json_string(method))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_envelope_keeps_payload_raw() {
        let line = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a\"b"},"_meta":{"progressToken":7}}}"#;
        let env = parse(line).unwrap();
        assert_eq!(env.kind, Kind::Request);
        assert_eq!(&line[env.id.clone().unwrap()], "7");
        assert_eq!(env.method.as_deref(), Some("tools/call"));
        let params = env.params.clone().unwrap();
        let tok = progress_token_in_request(line, &params).unwrap();
        assert_eq!(&line[tok.clone()], "7");
        let out = splice_many(line, vec![(env.id.unwrap(), "1001"), (tok, "1001")]);
        let id = parse(&out).unwrap().id.unwrap();
        assert_eq!(splice_owned(out.clone(), id.clone(), "7"), splice(&out, id.clone(), "7"));
        assert_eq!(&splice_owned(out.clone(), id, "\"a b\"")[..40], r#"{"jsonrpc":"2.0","id":"a b","method":"to"#);
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":1001,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a\"b"},"_meta":{"progressToken":1001}}}"#
        );
        let f = param_fields(line, &params);
        assert_eq!(f.name.as_deref(), Some("echo"));
        assert_eq!(&line[f.arguments.unwrap()], r#"{"text":"a\"b"}"#);
        let odd = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x","reason":5}}"#;
        let p = parse(odd).unwrap().params.unwrap();
        let f = param_fields(odd, &p);
        assert_eq!((&odd[f.request_id.unwrap()], f.reason), ("\"x\"", None), "a numeric reason hides nothing");
    }

    #[test]
    fn a_method_of_mcp_is_read_without_a_copy() {
        let method = |line: &str| parse(line).unwrap().method.unwrap();
        let known = method(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#);
        assert!(matches!(known, Cow::Borrowed("tools/call")), "{known:?}");
        let other = method(r#"{"jsonrpc":"2.0","id":1,"method":"x/y"}"#);
        assert!(matches!(other, Cow::Owned(ref m) if m == "x/y"), "{other:?}");
        // An escape is read as JSON all the same.
        assert_eq!(method(r#"{"jsonrpc":"2.0","method":"tools\/list"}"#), "tools/list");
        assert_eq!(method(r#"{"jsonrpc":"2.0","method":"a\"b"}"#), "a\"b");
        assert!(METHODS.iter().all(|m| parse(&notification(m, "{}")).unwrap().method.as_deref() == Some(*m)));
    }

    #[test]
    fn classifies_notifications_and_responses() {
        let n =
            parse(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x","reason":"r"}}"#)
                .unwrap();
        assert_eq!(n.kind, Kind::Notification);
        let r = parse(r#"{"id":"a b","jsonrpc":"2.0","result":{"x":[1,2]}}"#).unwrap();
        assert_eq!(r.kind, Kind::Response);
        assert!(!r.is_error);
        let e = parse(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}"#).unwrap();
        assert!(e.is_error && e.id.is_none());
    }

    #[test]
    fn bad_messages_get_the_right_code() {
        assert_eq!(parse("{not json").unwrap_err().code(), PARSE_ERROR);
        assert_eq!(parse("hello").unwrap_err().code(), PARSE_ERROR);
        assert_eq!(parse("42").unwrap_err().code(), INVALID_REQUEST);
        let e = parse(r#"{"jsonrpc":"1.0","id":3,"method":"x"}"#).unwrap_err();
        assert_eq!((e.code(), e.reply_id()), (INVALID_REQUEST, "3"));
        assert_eq!(parse(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#).unwrap_err().code(), INVALID_REQUEST);
        assert_eq!(parse(r#"{"jsonrpc":"2.0","id":1,"method":5}"#).unwrap_err().code(), INVALID_REQUEST);
        assert_eq!(parse(r#"{"jsonrpc":"2.0","id":1}"#).unwrap_err().code(), INVALID_REQUEST);
        assert_eq!(parse(r#"{"jsonrpc":"2.0","method":"m","params":3}"#).unwrap_err().code(), INVALID_REQUEST);
    }

    /// JSON-RPC 2.0: an id is a string, a number (MCP: an integer) or null; an answer to a
    /// request whose id cannot be read as one carries `"id": null`, never the id as written.
    #[test]
    fn an_id_that_is_no_string_or_integer_is_answered_under_null_and_said() {
        let request = |id: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        for (id, what) in [
            (r#"{"o":1}"#, "an object"),
            ("true", "a boolean"),
            ("false", "a boolean"),
            ("[]", "an array"),
            ("[1]", "an array"),
            ("1.5", "a fractional part"),
            ("-0.25", "a fractional part"),
            ("15e-1", "a fractional part"),
        ] {
            let e = parse(&request(id)).unwrap_err();
            assert_eq!((e.code(), e.reply_id()), (INVALID_REQUEST, "null"), "{id}");
            assert!(e.message().contains(what), "{id}: {}", e.message());
        }
        // Numbers without a fractional part are integers, however written: echoed as written.
        for id in ["-0", "1e3", "1.0", "1.50e1", "2E+2", "0.0", "1180591620717411303424", r#""a""#] {
            let env = parse(&request(id)).unwrap_or_else(|e| panic!("{id}: {e:?}"));
            assert_eq!(&request(id)[env.id.unwrap()], id);
        }
        // An envelope wrong otherwise, whose id is wrong too, is answered under null as well.
        let e = parse(r#"{"jsonrpc":"1.0","id":true,"method":"x"}"#).unwrap_err();
        assert_eq!(e.reply_id(), "null");
        // A response from a server may still carry `null` when it answers an error.
        assert!(parse(r#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}"#).is_ok());
    }

    #[test]
    fn batches_split_into_elements() {
        let items =
            split_batch(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}, {"jsonrpc":"2.0","method":"n"}]"#).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(parse(items[1]).unwrap().kind, Kind::Notification);
        assert!(split_batch("[1,").is_err());
    }

    #[test]
    fn builders_make_valid_json() {
        let e = response_error("\"q\"", -32001, "timed \"out\"", Some(&serde_json::json!({"server":"s"})));
        let v: serde_json::Value = serde_json::from_str(&e).unwrap();
        assert_eq!(v["error"]["message"], "timed \"out\"");
        assert_eq!(v["id"], "q");
        let n: serde_json::Value = serde_json::from_str(&notification("a/b", "{}")).unwrap();
        assert_eq!(n["method"], "a/b");
    }

    #[test]
    fn null_ids_and_null_params_are_invalid_requests_not_notifications() {
        let e = parse(r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{}}"#).unwrap_err();
        assert_eq!((e.code(), e.reply_id()), (INVALID_REQUEST, "null"));
        let e = parse(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":null}"#).unwrap_err();
        assert_eq!((e.code(), e.reply_id()), (INVALID_REQUEST, "1"));
        // A notification is never answered, not even with an error.
        let e = parse(r#"{"jsonrpc":"2.0","method":"n","params":null}"#).unwrap_err();
        assert!(matches!(e, ParseError::BadNotification { .. }), "{e:?}");
        assert!(parse(r#"{"jsonrpc":"2.0","id":null,"result":{}}"#).is_err());
        let e = parse(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}"#).unwrap();
        assert!(e.is_error && e.id.is_none(), "an error may still answer with id null");
    }

    #[test]
    fn the_2026_envelope_version_is_read_from_meta() {
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":1,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let p = parse(line).unwrap().params.unwrap();
        assert_eq!(envelope_version(line, &p).as_deref(), Some("2026-07-28"));
        let old = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":1}}}"#;
        assert_eq!(envelope_version(old, &parse(old).unwrap().params.unwrap()), None);
    }
}
