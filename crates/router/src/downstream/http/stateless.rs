//! Requests of the 2026-07-28 era over HTTP: no session, no GET. Each POST is checked against
//! its headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`), then runs as one ephemeral
//! router session of its own (the same policy, engine and pools as any client's), answered as
//! `application/json` when its response comes first, else as an SSE stream of what relates to
//! it. Closing that stream cancels the request upstream.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use base64::Engine as _;
use http::StatusCode;
use http::header::{self, HeaderMap, HeaderValue};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::events::Taken;
use super::post::Parsed;
use super::session::{Inbox, canonical};
use super::{Front, Mode, event_stream, rpc_error, rpc_error_data};
use crate::peer::Backlog;
use crate::server::Server;
use crate::session::{Message, Output};
use switchyard_core::call::Call;
use switchyard_core::codec::{self, Frame, Kind};
use switchyard_mcp as mcp;

/// JSON-RPC error of the 2026-07-28 transport: headers missing or not matching the body.
pub const HEADER_MISMATCH: i64 = -32020;

/// How long the response headers wait for the request's first message before the answer
/// becomes an SSE stream (with keep-alives) anyway.
const FIRST_WAIT: Duration = Duration::from_secs(10);

/// 400 with -32022 for a version not served; `id` the raw request id. `data.supported` names
/// the versions a request may carry in `_meta` (the stateless era's, as `server/discover` says:
/// a client retries with one of them); the initialize era's are reached by `initialize`, which
/// the message names too.
pub fn unsupported(version: &str, id: &str) -> Response {
    let shown: String = version.chars().take(40).collect();
    let modern = mcp::version::STATELESS;
    rpc_error_data(
        StatusCode::BAD_REQUEST,
        id,
        codec::UNSUPPORTED_PROTOCOL_VERSION,
        &format!(
            "protocol version {shown:?} is not served over HTTP by this switchyard; it serves {} per request, and {} after initialize",
            modern.join(", "),
            mcp::version::SESSION_ERA.join(", ")
        ),
        Some(&serde_json::json!({ "supported": modern, "requested": shown })),
    )
}

/// Decodes a header value that may be in the `=?base64?...?=` form.
fn decoded(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    match s.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?=")) {
        Some(b64) => String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64).ok()?).ok(),
        None => Some(s.to_string()),
    }
}

/// The 2026-07-28 Server Validation of a request's headers against its body.
fn validate(headers: &HeaderMap, call: &Call) -> Result<(), Box<Response>> {
    let (id, method, fields) = (call.id(), call.method(), call.fields());
    let mismatch = |why: String| {
        Box::new(rpc_error(StatusCode::BAD_REQUEST, id, HEADER_MISMATCH, &format!("Header mismatch: {why}")))
    };
    let body_version = call.protocol_version();
    let Some(header_version) = headers.get(mcp::header::PROTOCOL_VERSION) else {
        return Err(mismatch("the MCP-Protocol-Version header is missing".into()));
    };
    let header_version = header_version.to_str().unwrap_or("(not ASCII)");
    // A request of this era without its `_meta` is malformed (invalid params), not a mismatch:
    // there is nothing in the body to disagree with the header.
    let invalid = |why: String| Box::new(rpc_error(StatusCode::BAD_REQUEST, id, codec::INVALID_PARAMS, &why));
    let Some(body_version) = body_version else {
        return Err(invalid(format!(
            "Invalid params: a {header_version} request carries its protocol version in params._meta[\"{}\"]",
            codec::PROTOCOL_VERSION_META
        )));
    };
    if header_version != body_version.as_ref() {
        return Err(mismatch(format!(
            "MCP-Protocol-Version header value {header_version:?} does not match body value {body_version:?}"
        )));
    }
    if !mcp::version::STATELESS.contains(&header_version) {
        return Err(Box::new(unsupported(header_version, id)));
    }
    match headers.get(mcp::header::METHOD).map(|v| v.to_str().unwrap_or("(not ASCII)")) {
        None => return Err(mismatch("the Mcp-Method header is missing".into())),
        Some(m) if m != method => {
            return Err(mismatch(format!("Mcp-Method header value {m:?} does not match body value {method:?}")));
        }
        Some(_) => {}
    }
    if !call.text(&fields.client_capabilities).is_some_and(|c| c.starts_with('{')) {
        return Err(invalid(format!(
            "Invalid params: a {header_version} request carries the client's capabilities in params._meta[\"{}\"] (an object)",
            mcp::meta::CLIENT_CAPABILITIES
        )));
    }
    let (field, at) = match method {
        "tools/call" | "prompts/get" => ("name", &fields.name),
        "resources/read" => ("uri", &fields.uri),
        // The tasks extension: the client names the task, so intermediaries route by it.
        "tasks/get" | "tasks/update" | "tasks/cancel" => ("taskId", &fields.task_id),
        _ => return Ok(()),
    };
    let Some(body) = call.string(at) else {
        return Err(invalid(format!("Invalid params: {method} needs params.{field}, a string")));
    };
    match headers.get(mcp::header::NAME) {
        None => Err(mismatch(format!("the Mcp-Name header is missing (required for {method})"))),
        Some(v) => match decoded(v) {
            None => Err(mismatch("the Mcp-Name header is not valid (base64 of UTF-8 in =?base64?...?=)".into())),
            Some(name) if name != body => Err(mismatch(format!(
                "Mcp-Name header value {name:?} does not match body value {body:?} (params.{field})"
            ))),
            Some(_) => Ok(()),
        },
    }
}

/// The HTTP status of a final response: what the 2026-07-28 transport maps its error to.
fn status_of(line: &str) -> StatusCode {
    let code = serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| v["error"]["code"].as_i64());
    match code {
        Some(codec::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(codec::INVALID_PARAMS | HEADER_MISMATCH | -32021 | codec::UNSUPPORTED_PROTOCOL_VERSION) => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::OK,
    }
}

impl Front {
    /// A POST of the stateless era (one message, parsed).
    pub(super) async fn stateless(
        &self,
        server: Arc<Server>,
        headers: &HeaderMap,
        token: Option<Arc<str>>,
        parsed: Parsed,
        mode: Mode,
    ) -> Response {
        let call = match parsed {
            Parsed::Request(call) => call,
            // This revision defines no client notifications over HTTP (cancelling is closing
            // the stream); one is taken and has nothing to reach.
            Parsed::Other(_, env) if env.kind == Kind::Notification => return super::empty(StatusCode::ACCEPTED),
            Parsed::Other(..) => {
                return rpc_error(
                    StatusCode::BAD_REQUEST,
                    "null",
                    codec::INVALID_REQUEST,
                    "Invalid Request: a 2026-07-28 client sends no responses (server requests come as input requests in results)",
                );
            }
        };
        let id = call.id().to_string();
        if let Err(r) = validate(headers, &call) {
            return *r;
        }
        // The stateless era has no initialize (a server of both eras answers it so); a client of
        // the initialize era sends it without this era's version header and envelope.
        if call.method() == "initialize" {
            return rpc_error(
                StatusCode::NOT_FOUND,
                &id,
                codec::METHOD_NOT_FOUND,
                "Method not found: initialize is no method of protocol 2026-07-28 (each request carries its version and capabilities in _meta); a client of 2025-11-25 sends initialize without MCP-Protocol-Version 2026-07-28 and without the _meta envelope",
            );
        }
        let progress = call.text(&call.fields().progress_token).map(canonical);
        let listen = call.method() == "subscriptions/listen";
        let (inbox, rx) = mpsc::unbounded_channel();
        inbox.send(Message::Request(call)).expect("the receiver is here");
        let (to_client, mut from_session) = mpsc::unbounded_channel();
        // Fired when the client is gone (the handler or the body was dropped): the session
        // ends, and its request is cancelled upstream.
        let abort = CancellationToken::new();
        let opening = crate::session::Opening {
            transport: "http",
            sessions: self.router.sessions.clone(),
            speaks_control: false,
            client_dir: None,
            client_token: token.map(|t| t.to_string()),
        };
        let output = Catch { id: canonical(&id), progress, to_client, inbox: Some(inbox) };
        // The ephemeral session's input: the one request (and answers to server requests),
        // ended once it is answered, or at once when the client left.
        let why = "the client closed its HTTP stream (2026-07-28: that cancels the request)";
        let input = Inbox { rx, abort: abort.clone(), why };
        let ends = server.shutdown.clone();
        tokio::spawn(crate::session::serve_with(server, input, output, opening, ends));
        let guard = abort.drop_guard();
        // A listen request is a stream by nature: its headers go at once, its events as they come.
        if mode != Mode::Json && listen {
            return self.stateless_sse(None, from_session, guard);
        }
        let first = if mode == Mode::Json {
            // Only the response goes to a client that takes JSON alone.
            loop {
                match from_session.recv().await {
                    Some(t) if is_response(&t.line) => break Some(t),
                    Some(_) => {}
                    None => break None,
                }
            }
        } else {
            tokio::select! {
                m = from_session.recv() => m,
                _ = tokio::time::sleep(FIRST_WAIT) => {
                    return self.stateless_sse(None, from_session, guard);
                }
            }
        };
        match first {
            Some(t) if is_response(&t.line) => {
                guard.disarm();
                let mut r = Response::new(Body::from(t.line.clone()));
                *r.status_mut() = status_of(&t.line);
                r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                r
            }
            Some(t) => self.stateless_sse(Some(t), from_session, guard),
            None => rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                &id,
                codec::INTERNAL_ERROR,
                "no response: switchyard is shutting down",
            ),
        }
    }

    /// The request's SSE stream: what relates to it, then its response, which ends it. No event
    /// ids (the era has no resuming); dropping the body (the client closed it) cancels.
    fn stateless_sse(
        &self,
        first: Option<Taken>,
        rx: mpsc::UnboundedReceiver<Taken>,
        guard: tokio_util::sync::DropGuard,
    ) -> Response {
        let tick = self.keepalive();
        // The guard goes with the body: dropped before the response (the client closed the
        // stream), it cancels the request; after it, it is disarmed and the stream ends.
        let state = (first, rx, tick, Some(guard));
        let events = futures_util::stream::unfold(state, |(mut first, mut rx, mut tick, mut guard)| async move {
            guard.as_ref()?;
            let t = match first.take() {
                Some(t) => Some(t),
                None => tokio::select! {
                    m = rx.recv() => Some(m?),
                    _ = tick.tick() => None,
                },
            };
            let bytes = match t {
                Some(t) => {
                    if is_response(&t.line)
                        && let Some(g) = guard.take()
                    {
                        g.disarm();
                    }
                    Bytes::from(format!("event: message\ndata: {}\n\n", t.line))
                }
                None => Bytes::from_static(b":\n\n"),
            };
            Some((Ok::<_, std::convert::Infallible>(bytes), (first, rx, tick, guard)))
        });
        event_stream(Body::from_stream(events))
    }
}

fn is_response(line: &str) -> bool {
    codec::parse(line).is_ok_and(|e| e.kind == Kind::Response)
}

/// The ephemeral session's output: the request's response and what relates to it go to the
/// client; a server's request is refused at once (this era has none on streams); the rest
/// (list changes, other notices) has no stream to go on and is dropped.
struct Catch {
    /// The request's id and progress token, canonical.
    id: String,
    progress: Option<String>,
    to_client: mpsc::UnboundedSender<Taken>,
    /// Dropped once the response is out: the session's input ends.
    inbox: Option<mpsc::UnboundedSender<Message>>,
}

impl Output for Catch {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<crate::peer::Out>, backlog: Arc<Backlog>, _label: String) {
        while let Some(out) = rx.recv().await {
            let t = Taken { line: out.line, related: out.related, backlog: backlog.clone() };
            let Ok(env) = codec::parse(&t.line) else { continue };
            match env.kind {
                Kind::Response => {
                    let id = env.id.as_ref().map(|r| canonical(&t.line[r.clone()]));
                    if id.as_deref() == Some(self.id.as_str()) && self.inbox.is_some() {
                        let _ = self.to_client.send(t);
                        self.inbox = None;
                    }
                }
                Kind::Request => {
                    if let (Some(inbox), Some(r)) = (&self.inbox, env.id.as_ref()) {
                        let method = env.method.as_deref().unwrap_or_default();
                        let _ = inbox.send(Message::Frame(Frame::Line(codec::response_error(
                            &t.line[r.clone()],
                            codec::METHOD_NOT_FOUND,
                            &format!(
                                "{method} is not available to a 2026-07-28 HTTP client (it takes no server requests)"
                            ),
                            None,
                        ))));
                    }
                }
                Kind::Notification => {
                    let ours = t.related.as_deref().is_some_and(|r| canonical(r) == self.id)
                        || match env.method.as_deref() {
                            Some("notifications/progress") => {
                                let f =
                                    env.params.as_ref().map(|p| codec::param_fields(&t.line, p)).unwrap_or_default();
                                let token = f.progress_token.map(|r| canonical(&t.line[r]));
                                token.is_some() && token == self.progress
                            }
                            // Logs of an ephemeral session are its one request's.
                            Some("notifications/message") => true,
                            _ => false,
                        };
                    if ours && self.inbox.is_some() {
                        let _ = self.to_client.send(t);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::downstream::http::tests::headers;

    fn code(r: Result<(), Box<Response>>) -> Option<i64> {
        let r = *r.err()?;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let body = futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(r.into_body()))
            .unwrap()
            .unwrap()
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], 1, "{v}");
        v["error"]["code"].as_i64()
    }

    #[test]
    fn headers_must_match_the_body() {
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"héllo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let call = |line: &str| Call::parse(line.to_string()).unwrap();
        let parsed = call(line);
        let check = |h: &[(&'static str, &str)]| code(validate(&headers(h), &parsed));
        let v = ("mcp-protocol-version", "2026-07-28");
        let m = ("mcp-method", "tools/call");
        let encoded = format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode("héllo"));
        let n = ("mcp-name", encoded.as_str());
        assert_eq!(check(&[v, m, n]), None);
        assert_eq!(check(&[m, n]), Some(HEADER_MISMATCH), "no version header");
        assert_eq!(check(&[("mcp-protocol-version", "2027-01-01"), m, n]), Some(HEADER_MISMATCH));
        assert_eq!(check(&[v, n]), Some(HEADER_MISMATCH), "no Mcp-Method");
        assert_eq!(check(&[v, ("mcp-method", "tools/list"), n]), Some(HEADER_MISMATCH));
        assert_eq!(check(&[v, m]), Some(HEADER_MISMATCH), "no Mcp-Name");
        assert_eq!(check(&[v, m, ("mcp-name", "hello")]), Some(HEADER_MISMATCH));
        assert_eq!(check(&[v, m, ("mcp-name", "=?base64?!!?=")]), Some(HEADER_MISMATCH));
        // A body without what the era requires in `_meta`, or with a name that is no string, is
        // invalid, whatever the headers say.
        for bare in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"héllo"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"héllo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"héllo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":7}}}"#,
        ] {
            assert_eq!(code(validate(&headers(&[v, m, n]), &call(bare))), Some(codec::INVALID_PARAMS), "{bare}");
        }
        let later = line.replace("2026-07-28", "2027-01-01");
        let h = headers(&[("mcp-protocol-version", "2027-01-01"), m, n]);
        assert_eq!(code(validate(&h, &call(&later))), Some(codec::UNSUPPORTED_PROTOCOL_VERSION));
        // The tasks extension: a task request names its task in Mcp-Name.
        let poll = r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"sy-task.x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let poll = call(poll);
        let get = ("mcp-method", "tasks/get");
        let check = |h: &[(&'static str, &str)]| code(validate(&headers(h), &poll));
        assert_eq!(check(&[v, get, ("mcp-name", "sy-task.x")]), None);
        assert_eq!(check(&[v, get]), Some(HEADER_MISMATCH), "no Mcp-Name");
        assert_eq!(check(&[v, get, ("mcp-name", "other")]), Some(HEADER_MISMATCH));
    }

    #[test]
    fn final_errors_map_to_http_statuses() {
        let err = |c: i64| format!(r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":{c},"message":"x"}}}}"#);
        assert_eq!(status_of(&err(-32601)), StatusCode::NOT_FOUND);
        for c in [-32602, -32020, -32021, -32022] {
            assert_eq!(status_of(&err(c)), StatusCode::BAD_REQUEST, "{c}");
        }
        assert_eq!(status_of(&err(-32603)), StatusCode::OK);
        assert_eq!(status_of(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#), StatusCode::OK);
        assert!(
            mcp::version::is_stateless("2026-07-28")
                && mcp::version::is_stateless("2027-01-01")
                && !mcp::version::is_stateless("2025-11-25")
                && !mcp::version::is_stateless("x")
        );
    }
}
