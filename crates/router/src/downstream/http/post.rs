//! A POST to an MCP endpoint, step by step: its headers, its session and server, its message, its delivery.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use http::header::{self, HeaderMap, HeaderValue};

use super::body::{Bodies, content_length, read_body, too_large};
use super::session::{Feed, HttpSession, Refused};
use super::{Front, Mode, accepts, empty, media, plain, rpc_error, stateless};
use crate::server::Server;
use switchyard_core::call::{Call, Incoming};
use switchyard_core::codec::{self, Envelope, Kind};
use switchyard_mcp as mcp;

impl Front {
    /// A POST to an MCP endpoint: one JSON-RPC message, for a session of the initialize era or
    /// (of the stateless era) for none.
    /// `token`: the name of the named token the request carried, if it did.
    pub(super) async fn post(
        &self,
        name: Option<&str>,
        headers: &HeaderMap,
        token: Option<Arc<str>>,
        body: Body,
    ) -> Response {
        match self.try_post(name, headers, token, body).await {
            Ok(r) => r,
            Err(refusal) => refusal.into(),
        }
    }

    /// A POST, step by step; any step may refuse it, with the response it gets instead.
    async fn try_post(
        &self,
        name: Option<&str>,
        headers: &HeaderMap,
        token: Option<Arc<str>>,
        body: Body,
    ) -> Result<Response, Refusal> {
        let posted = check_request(headers)?;
        let (existing, server) = self.session_for(name, headers, token.as_deref(), posted.modern)?;
        let limit = server.limits.max_message_bytes;
        // A declared length over the limit is refused before a byte of the body is read.
        let declared = content_length(headers);
        if declared.is_some_and(|d| d > limit as u64) {
            return Err(too_large(limit).into());
        }
        let parsed = with_header_trace(read_message(body, limit, declared, &self.bodies).await?, headers);
        let env = parsed.envelope();
        let method = env.method.as_deref().unwrap_or_default();
        let raw_id = env.id.as_ref().map(|r| parsed.line()[r.clone()].to_string());
        let enveloped = match &parsed {
            Parsed::Request(call) => call.fields().protocol_version.is_some(),
            Parsed::Other(line, env) => env.params.as_ref().is_some_and(|p| codec::envelope_version(line, p).is_some()),
        };
        // `initialize` in the stateless era's form (its version header, or the envelope) is a
        // request of that era, which has no such method: answered as such there, never a session.
        if posted.modern || enveloped {
            return Ok(self.stateless(server, headers, token, parsed, posted.mode).await);
        }
        let id = raw_id.as_deref();
        let (session, new_sid) =
            in_session(&posted, method, existing, id, |id| self.open_session(&server, env, token, id))?;
        Ok(self.deliver_new(&session, new_sid, parsed, raw_id, posted.mode).await)
    }

    /// [`Self::deliver`], and the id of the session when it is new (the response carries it).
    async fn deliver_new(
        &self,
        session: &HttpSession,
        new_sid: Option<String>,
        parsed: Parsed,
        raw_id: Option<String>,
        mode: Mode,
    ) -> Response {
        let mut resp = self.deliver(session, parsed, raw_id, mode).await;
        if let Some(sid) = new_sid {
            resp.headers_mut()
                .insert(mcp::header::SESSION_ID, HeaderValue::from_str(&sid).expect("hex is a header value"));
        }
        resp
    }

    /// The session a POST names, if any (one of the stateless era names none), and the server
    /// it goes to.
    fn session_for(
        &self,
        name: Option<&str>,
        headers: &HeaderMap,
        token: Option<&str>,
        modern: bool,
    ) -> Result<(Option<Arc<HttpSession>>, Arc<Server>), Refusal> {
        // An existing session stays on the server it began with (a config edit does not move it).
        let existing = match headers.get(mcp::header::SESSION_ID).filter(|_| !modern) {
            Some(v) => Some(self.session(super::Endpoint::Server(name), v.to_str().unwrap_or(""), token)?),
            None => None,
        };
        let server = match &existing {
            Some(s) => s.server.clone(),
            None => self.router.lookup(name, &BTreeMap::new()).map_err(|why| {
                let why = self.hidden(why);
                let why = if name.is_none() { format!("{why} (over HTTP: /mcp/NAME)") } else { why };
                Refusal::rpc(StatusCode::NOT_FOUND, "null", codec::INVALID_REQUEST, why)
            })?,
        };
        Ok((existing, server))
    }

    /// A new session on `server` for a POST that names none: only `initialize` begins one.
    /// Returns it with its id (`id`: the request's raw id, for errors).
    fn open_session(
        &self,
        server: &Arc<Server>,
        env: &Envelope,
        token: Option<Arc<str>>,
        id: &str,
    ) -> Result<(Arc<HttpSession>, String), Refusal> {
        if env.kind != Kind::Request || env.method.as_deref() != Some("initialize") {
            return Err(Refusal::rpc(
                StatusCode::BAD_REQUEST,
                id,
                codec::INVALID_REQUEST,
                "Bad Request: no Mcp-Session-Id header; begin a session with initialize",
            ));
        }
        let start = || {
            // The server's own token: it fires when the daemon stops and when the server
            // is removed from the config (its sessions end, as `connect` ones do).
            let (sessions, shutdown) = (self.router.sessions.clone(), server.shutdown.clone());
            HttpSession::start(server.clone(), sessions, shutdown, self.http.event_store_bytes, token.clone())
        };
        self.open_in_table(start, id)
    }

    /// A session `start` makes, in the front's table under a new id, unless it is full.
    fn open_in_table(
        &self,
        start: impl FnOnce() -> Arc<HttpSession>,
        id: &str,
    ) -> Result<(Arc<HttpSession>, String), Refusal> {
        match self.table.open(self.http.max_sessions, start) {
            Ok(Some(opened)) => Ok(opened),
            Ok(None) => Err(Refusal::rpc(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                codec::SERVER_BUSY,
                format!(
                    "the HTTP front has {} sessions, its maximum ([http] max_sessions); try again later",
                    self.http.max_sessions
                ),
            )),
            Err(e) => Err(Refusal::rpc(
                StatusCode::INTERNAL_SERVER_ERROR,
                id,
                codec::INTERNAL_ERROR,
                format!("cannot make a session id (getrandom failed: {e})"),
            )),
        }
    }

    /// A POST to a group (`/groups/NAME/mcp`): as [`Front::post`], for sessions of the
    /// initialize era only (a group session is a session: it has members to keep).
    pub(super) async fn post_group(
        &self,
        group: &str,
        headers: &HeaderMap,
        token: Option<Arc<str>>,
        body: Body,
    ) -> Response {
        match self.try_post_group(group, headers, token, body).await {
            Ok(r) => r,
            Err(refusal) => refusal.into(),
        }
    }

    async fn try_post_group(
        &self,
        group: &str,
        headers: &HeaderMap,
        token: Option<Arc<str>>,
        body: Body,
    ) -> Result<Response, Refusal> {
        let posted = check_request(headers)?;
        // A 2026-07-28 request has no session: it is read (for its id) and refused below.
        let existing = match headers.get(mcp::header::SESSION_ID).filter(|_| !posted.modern) {
            Some(v) => Some(self.session(super::Endpoint::Group(group), v.to_str().unwrap_or(""), token.as_deref())?),
            None => None,
        };
        // A group the config does not have is 404 before the body is read, whatever it holds.
        if existing.is_none()
            && let Some(r) = self.unknown(super::Endpoint::Group(group))
        {
            return Err(r.into());
        }
        let limit = existing.as_ref().map_or_else(
            || switchyard_config::Limits::default().max_message_bytes,
            |s| s.server.limits.max_message_bytes,
        );
        let declared = content_length(headers);
        if declared.is_some_and(|d| d > limit as u64) {
            return Err(too_large(limit).into());
        }
        let parsed = with_header_trace(read_message(body, limit, declared, &self.bodies).await?, headers);
        let env = parsed.envelope();
        let raw_id = env.id.as_ref().map(|r| parsed.line()[r.clone()].to_string());
        if posted.modern {
            return Err(Refusal::rpc(
                StatusCode::BAD_REQUEST,
                raw_id.as_deref().unwrap_or("null"),
                codec::INVALID_REQUEST,
                format!(
                    "group `{group}` is served to clients of the initialize era (up to 2025-11-25, with Mcp-Session-Id); a 2026-07-28 client reaches each of its servers at /mcp/NAME"
                ),
            ));
        }
        let (method, id) = (env.method.as_deref().unwrap_or_default(), raw_id.as_deref());
        let (session, new_sid) =
            in_session(&posted, method, existing, id, |id| self.open_group_session(group, env, token, id))?;
        Ok(self.deliver_new(&session, new_sid, parsed, raw_id, posted.mode).await)
    }

    /// A new session of group `name` for a POST that names none (an initialize).
    fn open_group_session(
        &self,
        name: &str,
        env: &Envelope,
        token: Option<Arc<str>>,
        id: &str,
    ) -> Result<(Arc<HttpSession>, String), Refusal> {
        if env.kind != Kind::Request || env.method.as_deref() != Some("initialize") {
            return Err(Refusal::rpc(
                StatusCode::BAD_REQUEST,
                id,
                codec::INVALID_REQUEST,
                "Bad Request: no Mcp-Session-Id header; begin a session with initialize",
            ));
        }
        let group = self
            .router
            .group(name)
            .map_err(|why| Refusal::rpc(StatusCode::NOT_FOUND, id, codec::INVALID_REQUEST, self.hidden(why)))?;
        let joined = crate::group::join(&self.router, &group, &BTreeMap::new());
        let Some(server) = joined.iter().flatten().next().cloned() else {
            let why: Vec<String> = joined.iter().filter_map(|j| j.as_ref().err()).cloned().collect();
            return Err(Refusal::rpc(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                codec::SERVER_UNAVAILABLE,
                self.hidden(format!("no server of group `{name}` can be used: {}", why.join("; "))),
            ));
        };
        let start = || {
            let (router, shutdown) = (self.router.clone(), self.shutdown.clone());
            HttpSession::start_group(
                router,
                group,
                joined,
                server,
                shutdown,
                self.http.event_store_bytes,
                token.clone(),
            )
        };
        self.open_in_table(start, id)
    }

    /// Gives a POSTed message to its session: a request is answered as the client takes it
    /// (`mode`), anything else with 202.
    async fn deliver(&self, session: &HttpSession, parsed: Parsed, raw_id: Option<String>, mode: Mode) -> Response {
        let gone = || {
            rpc_error(
                StatusCode::NOT_FOUND,
                "null",
                codec::INVALID_REQUEST,
                "session not found: it ended; send initialize without Mcp-Session-Id for a new one",
            )
        };
        match parsed {
            Parsed::Request(call) => {
                let id = raw_id.expect("requests have ids");
                match session.request(call, mode == Mode::Json) {
                    Ok(feed) => self.answer(feed, mode, &id).await,
                    Err(Refused::Duplicate(_)) => rpc_error(
                        StatusCode::BAD_REQUEST,
                        &id,
                        codec::INVALID_REQUEST,
                        &switchyard_core::call::in_use(&id),
                    ),
                    Err(Refused::Gone) => gone(),
                }
            }
            Parsed::Other(line, env) => {
                let cancelled = (env.method.as_deref() == Some("notifications/cancelled"))
                    .then(|| env.params.as_ref().map(|p| codec::param_fields(&line, p)))
                    .flatten()
                    .and_then(|f| f.request_id)
                    .map(|r| line[r].to_string());
                match session.message(line, cancelled.as_deref()) {
                    Ok(()) => empty(StatusCode::ACCEPTED),
                    Err(_) => gone(),
                }
            }
        }
    }

    /// The answer to a POSTed request: its stream, or (JSON only) its response alone.
    async fn answer(&self, mut feed: Feed, mode: Mode, id: &str) -> Response {
        if mode == Mode::Sse {
            return self.sse(feed);
        }
        match feed.next().await {
            Some(line) => {
                let mut r = Response::new(Body::from(line));
                r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                r
            }
            None => rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                codec::INTERNAL_ERROR,
                "no response: the request was cancelled, or its session ended first",
            ),
        }
    }
}

/// A POST answered before it reaches a session, with what it is answered instead: mostly a
/// JSON-RPC error (status, id, code, message). The steps of `Front::post` chain with `?`.
enum Refusal {
    Rpc {
        status: StatusCode,
        id: String,
        code: i64,
        message: String,
    },
    /// A response made otherwise (plain text, or by [`stateless`]).
    Other(Box<Response>),
}

impl Refusal {
    fn rpc(status: StatusCode, id: &str, code: i64, message: impl Into<String>) -> Refusal {
        Refusal::Rpc { status, id: id.to_string(), code, message: message.into() }
    }
}

impl From<Response> for Refusal {
    fn from(r: Response) -> Refusal {
        Refusal::Other(Box::new(r))
    }
}

impl From<Box<Response>> for Refusal {
    fn from(r: Box<Response>) -> Refusal {
        Refusal::Other(r)
    }
}

impl From<Refusal> for Response {
    fn from(refusal: Refusal) -> Response {
        match refusal {
            Refusal::Rpc { status, id, code, message } => rpc_error(status, &id, code, &message),
            Refusal::Other(r) => *r,
        }
    }
}

/// What a POST's headers say, once they pass: how the client takes the answer, and the
/// protocol version it names.
struct Posted<'h> {
    mode: Mode,
    /// `MCP-Protocol-Version`, as given.
    version: Option<&'h str>,
    /// That version is of the stateless era: the request ignores Mcp-Session-Id.
    modern: bool,
}

/// Checks a POST's media type and Accept, and reads the protocol version it names.
/// The session a POST of the initialize era goes to: `existing`, or the one `open` makes for it
/// (given the request's raw id), with its new id. A version neither era serves is refused first
/// (spec: 400); initialize names its version in the body.
fn in_session(
    posted: &Posted<'_>,
    method: &str,
    existing: Option<Arc<HttpSession>>,
    raw_id: Option<&str>,
    open: impl FnOnce(&str) -> Result<(Arc<HttpSession>, String), Refusal>,
) -> Result<(Arc<HttpSession>, Option<String>), Refusal> {
    if let Some(v) = posted.version
        && method != "initialize"
        && !mcp::version::SESSION_ERA.contains(&v)
    {
        return Err(stateless::unsupported(v, raw_id.unwrap_or("null")).into());
    }
    match existing {
        Some(s) => Ok((s, None)),
        None => open(raw_id.unwrap_or("null")).map(|(s, sid)| (s, Some(sid))),
    }
}

fn check_request(headers: &HeaderMap) -> Result<Posted<'_>, Refusal> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE)
        && !ct.to_str().is_ok_and(|c| media(c) == "application/json")
    {
        return Err(
            plain(StatusCode::UNSUPPORTED_MEDIA_TYPE, "a POST to an MCP endpoint carries application/json").into()
        );
    }
    let Some(mode) = accepts(headers) else {
        return Err(plain(
            StatusCode::NOT_ACCEPTABLE,
            "Accept must list application/json and text/event-stream (MCP Streamable HTTP)",
        )
        .into());
    };
    let version = headers.get(mcp::header::PROTOCOL_VERSION).map(|v| v.to_str().unwrap_or("(not ASCII)"));
    let modern = version.is_some_and(mcp::version::is_stateless);
    Ok(Posted { mode, version, modern })
}

/// A POSTed message, parsed once: a request as the `Call` its session runs (not parsed again
/// there; boxed, as its session's input takes it), anything else as it came, with its envelope.
pub(super) enum Parsed {
    Request(Box<Call>),
    Other(String, Envelope),
}

impl Parsed {
    fn envelope(&self) -> &Envelope {
        match self {
            Parsed::Request(call) => call.envelope(),
            Parsed::Other(_, env) => env,
        }
    }

    fn line(&self) -> &str {
        match self {
            Parsed::Request(call) => call.line(),
            Parsed::Other(line, _) => line,
        }
    }
}

/// A request whose `_meta` has no `traceparent` takes the W3C `traceparent` (and `tracestate`)
/// of the POST's headers into its `_meta`, when traces are on: the client's trace context,
/// wherever the client put it, is what the call's span continues. Read again for it (only then).
fn with_header_trace(parsed: Parsed, headers: &HeaderMap) -> Parsed {
    use switchyard_telemetry::{TraceParent, context};
    let Parsed::Request(call) = &parsed else { return parsed };
    if !switchyard_telemetry::on() || meta_has_traceparent(call) {
        return parsed;
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(parent) = header(mcp::meta::TRACEPARENT).and_then(TraceParent::parse) else { return parsed };
    let state = header_tracestate(headers);
    let edits = context::edits(call, &parent, state.as_deref());
    let line = codec::splice_many(call.line(), edits.iter().map(|(r, s)| (r.clone(), s.as_str())).collect());
    match Call::parse(line) {
        Ok(traced) => Parsed::Request(Box::new(traced)),
        Err(_) => parsed,
    }
}

/// Whether the request's `_meta` holds a `traceparent` of its own, valid or not, a string or not:
/// then the header's trace context is not put in its place (the call starts a trace of its own
/// when the client's is malformed).
fn meta_has_traceparent(call: &Call) -> bool {
    let f = call.fields();
    f.traceparent.is_some() || (f.odd_meta && call.text(&f.meta).is_some_and(|m| m.contains(r#""traceparent""#)))
}

/// The W3C `tracestate` of the POST's headers: several are one list, their values joined by
/// commas, as W3C says, and passed on as they were. A list over its limits (512 bytes, 32
/// entries) is cut by whole entries as W3C says (see `switchyard_telemetry::context::fitted`);
/// None when there is none, or no entry fits: never an empty value the client did not send.
fn header_tracestate(headers: &HeaderMap) -> Option<String> {
    let values: Vec<&str> = headers.get_all(mcp::meta::TRACESTATE).iter().filter_map(|v| v.to_str().ok()).collect();
    switchyard_telemetry::context::fitted(&values.join(",")).map(std::borrow::Cow::into_owned)
}

/// Reads a POSTed body (at most `limit` bytes) as one JSON-RPC message on one line, parsed.
async fn read_message(body: Body, limit: usize, declared: Option<u64>, bodies: &Bodies) -> Result<Parsed, Refusal> {
    // The body's share of the front's budget is given back once its bytes are a message.
    let (bytes, _share) = read_body(body, limit, declared, bodies).await?;
    let Ok(text) = String::from_utf8(bytes) else {
        return Err(Refusal::rpc(
            StatusCode::BAD_REQUEST,
            "null",
            codec::PARSE_ERROR,
            "Parse error: the body is not UTF-8",
        ));
    };
    // One message per line for the servers behind: outside strings (where JSON allows no raw
    // control characters) a pretty-printed body's line breaks are only whitespace.
    let line = if text.contains(['\n', '\r']) { text.replace(['\n', '\r'], " ") } else { text };
    if codec::is_batch(&line) {
        // Only JSON is a batch: text that is none (a batch cut short, say) is a parse error.
        if let Err(e) = codec::split_batch(&line) {
            return Err(Refusal::rpc(StatusCode::BAD_REQUEST, e.reply_id(), e.code(), e.message()));
        }
        return Err(Refusal::rpc(
            StatusCode::BAD_REQUEST,
            "null",
            codec::INVALID_REQUEST,
            "JSON-RPC batches are not served over HTTP by switchyard; POST one message at a time",
        ));
    }
    // Read as a session and a group read a line. A notification that does not read is said
    // to the client here, in the POST's answer, where a stream's would only be logged.
    match Incoming::read(line) {
        Incoming::Request(call) => Ok(Parsed::Request(Box::new(call))),
        Incoming::Notification(line, env) | Incoming::Response(line, env) => Ok(Parsed::Other(line, env)),
        Incoming::Refused(e) | Incoming::Dropped(e) => {
            Err(Refusal::rpc(StatusCode::BAD_REQUEST, e.reply_id(), e.code(), e.message()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_in_meta_of_any_kind_keeps_the_header_s_out() {
        let call = |meta: &str| {
            Call::parse(codec::request("1", "tools/call", &format!(r#"{{"name":"echo","_meta":{meta}}}"#))).unwrap()
        };
        for meta in [
            r#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#,
            r#"{"traceparent":"not one"}"#,
            r#"{"traceparent":12345}"#,
            r#"{"traceparent":null}"#,
            r#"{"traceparent":{"a":1}}"#,
            r#"{"traceparent":"a","traceparent":"b"}"#,
        ] {
            assert!(meta_has_traceparent(&call(meta)), "{meta}");
        }
        for meta in [r#"{}"#, r#"{"progressToken":1}"#, r#"{"tracestate":5}"#, r#""a string""#] {
            assert!(!meta_has_traceparent(&call(meta)), "{meta}");
        }
    }

    /// A POSTed request whose id is no string and no integer is answered under `"id": null`
    /// (JSON-RPC: its id could not be read), saying what is wrong; an integer however written
    /// is read as the request's id, as written.
    #[tokio::test]
    async fn a_posted_id_that_is_no_string_or_integer_is_answered_under_null() {
        let bodies = Bodies::new(1 << 20);
        let post = |id: &str| Body::from(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        for (id, what) in
            [(r#"{"o":1}"#, "an object"), ("true", "a boolean"), ("[]", "an array"), ("1.5", "a fractional part")]
        {
            match read_message(post(id), 4096, None, &bodies).await {
                Err(Refusal::Rpc { status, id: answered, code, message }) => {
                    assert_eq!(
                        (status, answered.as_str(), code),
                        (StatusCode::BAD_REQUEST, "null", codec::INVALID_REQUEST),
                        "{id}"
                    );
                    assert!(message.contains(what), "{id}: {message}");
                }
                _ => panic!("{id}: not refused as JSON-RPC"),
            }
        }
        for id in ["1e3", "-0", r#""s""#] {
            let Ok(Parsed::Request(call)) = read_message(post(id), 4096, None, &bodies).await else { panic!("{id}") };
            assert_eq!(call.id(), id);
        }
        // A notification that does not read is said in the POST's answer (no stream to log it).
        let bad = Body::from(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":3}"#);
        let Err(Refusal::Rpc { status, id, .. }) = read_message(bad, 4096, None, &bodies).await else { panic!("read") };
        assert_eq!((status, id.as_str()), (StatusCode::BAD_REQUEST, "null"));
    }

    /// A body that begins as a batch but is no JSON is a parse error, as any other body that
    /// is none; an array that is JSON is refused as a batch.
    #[tokio::test]
    async fn a_body_that_is_no_json_is_a_parse_error_even_when_it_begins_as_a_batch() {
        let bodies = &Bodies::new(1 << 20);
        let refused = |body: &'static str| async move {
            match read_message(Body::from(body), 4096, None, bodies).await {
                Err(Refusal::Rpc { status, id, code, .. }) => (status, id, code),
                _ => panic!("{body}: not refused as JSON-RPC"),
            }
        };
        let parse_error = (StatusCode::BAD_REQUEST, "null".to_string(), codec::PARSE_ERROR);
        for body in [r#"[{"jsonrpc":"2.0","id":1,"method":"ping""#, "[", " [1,", "[1] x", "[1]]"] {
            assert_eq!(refused(body).await, parse_error, "{body}");
        }
        let batch = (StatusCode::BAD_REQUEST, "null".to_string(), codec::INVALID_REQUEST);
        assert_eq!(refused(r#" [{"jsonrpc":"2.0","id":1,"method":"ping"}] "#).await, batch);
        assert_eq!(refused("[]").await, batch);
    }

    #[test]
    fn the_headers_tracestate_is_one_list_never_an_empty_value() {
        let of = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append("tracestate", HeaderValue::from_str(v).unwrap());
            }
            header_tracestate(&h)
        };
        assert_eq!(of(&[]), None);
        assert_eq!(of(&["a=1"]).as_deref(), Some("a=1"));
        assert_eq!(of(&["a=1, b=2", "c=3"]).as_deref(), Some("a=1, b=2,c=3"), "two headers are one list");
        // Within its limits, as it was: empty entries and spaces stay.
        assert_eq!(of(&["a=1,,, ,b=2"]).as_deref(), Some("a=1,,, ,b=2"));
        assert_eq!(of(&["", " , "]), None, "no entry: none, never an empty value");
        // One member of 10 KB: too long to pass on, and dropped rather than sent empty.
        let big = format!("k={}", "v".repeat(10_000));
        assert_eq!(of(&[&big]), None);
        // A long list keeps its first members, whole.
        let many: Vec<String> = (0..100).map(|i| format!("vendor{i:02}=value")).collect();
        let kept = of(&[&many.join(",")]).unwrap();
        assert!(kept.len() <= 512 && kept.starts_with("vendor00=value,vendor01=value,"), "{kept}");
        assert!(kept.split(',').all(|m| m.starts_with("vendor") && m.ends_with("=value")), "{kept}");
        assert_eq!(of(&["a=1", &big]).as_deref(), Some("a=1"));
        // A long entry first goes alone: the ones after it that fit stay.
        assert_eq!(of(&[&big, "a=1", "b=2"]).as_deref(), Some("a=1,b=2"));
    }
}
