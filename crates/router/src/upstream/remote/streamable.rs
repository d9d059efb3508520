//! The Streamable HTTP transport: one POST per message, answered with JSON or an SSE stream;
//! the session id and protocol version headers; the standalone GET stream; resumption of a
//! broken response stream; transparent re-initialisation when the server lost the session;
//! and, for `auto`, the switch to legacy SSE when the first POST is refused.
//!
//! Both protocol eras are served: 2025-11-25 (`initialize`, sessions, resumable streams) and
//! 2026-07-28 (requests carry their protocol version in `_meta`, no session, no GET stream,
//! no resumption, closing a request's stream cancels it).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use reqwest::{Method, Response, StatusCode};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::event::{Event, Parser};
use super::legacy::Legacy;
use super::retry::Reconnect;
use super::{
    Core, describe, is_event_stream, maybe_delivered, never_sent, next_event, not_delivered, read_body, snippet_of,
};
use crate::upstream::transport::{BoxFuture, Closed, Outbound, RemoteKind, Transport};
use switchyard_core::codec::{self, Kind};

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
const LAST_EVENT_HEADER: &str = "last-event-id";
/// How long the DELETE that ends a session may take at close (best effort).
const DELETE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long each step of a re-initialisation may take.
const REINIT_TIMEOUT: Duration = Duration::from_secs(30);

/// A Streamable HTTP connection (or, for `auto`, the legacy SSE one it turned into).
pub struct Streamable {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    /// `auto` only: where the connector keeps what the server was found to speak.
    probe: Option<Arc<Mutex<Option<RemoteKind>>>>,
    mode: watch::Sender<Mode>,
    state: Mutex<State>,
    /// Held while the session is re-established: requests that hit the loss together wait
    /// for the same renewal.
    renewing: tokio::sync::Mutex<()>,
}

#[derive(Clone)]
enum Mode {
    /// `auto`, nothing sent yet: the first request is the probe.
    Unknown,
    /// `auto`: the probe is on its way; other messages wait for its outcome.
    Probing,
    Http,
    /// `auto` found a legacy server: everything goes there.
    Legacy(Arc<Legacy>),
}

#[derive(Default)]
struct State {
    session: Option<String>,
    /// The negotiated protocol version (from the initialize result).
    version: Option<String>,
    /// The initialize request as the instance sent it, for re-initialisation.
    init_line: Option<String>,
    /// Bumped by each re-initialisation; a request remembers the one it was sent in.
    generation: u64,
    /// The standalone GET stream task runs.
    listening: bool,
    /// The server answered the GET with 405: it has no standalone stream.
    no_listen: bool,
    /// Each request's task, to close its stream when the router abandons it.
    streams: HashMap<u64, CancellationToken>,
}

/// What the transport needs to know of an outbound message.
#[derive(Debug, Clone, Default)]
struct Info {
    method: Option<String>,
    /// 2026-07-28 era: the protocol version the request carries in `_meta`.
    envelope_version: Option<String>,
    /// `params.name` or `params.uri`, for the `Mcp-Name` header.
    name: Option<String>,
}

fn classify(line: &str) -> Info {
    let Ok(env) = codec::parse(line) else {
        return Info::default();
    };
    let params: Option<&Range<usize>> = env.params.as_ref();
    let envelope_version = params.and_then(|p| codec::envelope_version(line, p));
    // Only the 2026-07-28 era sends `Mcp-Name`: the params are read for it only then.
    let name = match (env.method.as_deref(), params) {
        _ if envelope_version.is_none() => None,
        (Some("tools/call" | "prompts/get"), Some(p)) => codec::param_fields(line, p).name,
        (Some("resources/read"), Some(p)) => codec::param_fields(line, p).uri,
        _ => None,
    };
    Info { method: env.method, envelope_version, name }
}

/// A header value as the 2026-07-28 spec wants it: as is when it is plain visible ASCII,
/// otherwise (or when it looks like the sentinel) Base64 in `=?base64?…?=`.
fn header_value(raw: &str) -> String {
    let sentinel = raw.starts_with("=?base64?") && raw.ends_with("?=");
    let plain = !raw.is_empty()
        && raw.bytes().all(|b| (0x20..=0x7e).contains(&b) || b == b'\t')
        && !raw.starts_with([' ', '\t'])
        && !raw.ends_with([' ', '\t'])
        && !sentinel;
    if plain {
        raw.to_string()
    } else {
        format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(raw))
    }
}

/// The numeric id a server message answers, when it is a response.
fn response_id(line: &str) -> Option<u64> {
    let env = codec::parse(line).ok()?;
    if env.kind != Kind::Response {
        return None;
    }
    line[env.id?].parse().ok()
}

/// Whether `line` (a message or a batch) holds the response to request `id`.
fn answers(line: &str, id: u64) -> bool {
    if codec::is_batch(line) {
        return codec::split_batch(line).is_ok_and(|items| items.iter().any(|m| response_id(m) == Some(id)));
    }
    response_id(line) == Some(id)
}

/// `result.protocolVersion` of an initialize response.
fn negotiated_version(line: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct InitResult {
        #[serde(rename = "protocolVersion")]
        protocol_version: Option<String>,
    }
    let env = codec::parse(line).ok()?;
    let result: InitResult = serde_json::from_str(&line[env.result?]).ok()?;
    result.protocol_version
}

/// Whether a 400 body says the session id is not (or no longer) valid, as the reference SDK
/// servers word it ("Bad Request: No valid session ID provided", "Session not found",
/// "Server not initialized" from a restarted single-session server).
fn says_session_lost(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    (b.contains("session")
        && ["no valid", "not valid", "invalid", "unknown", "not found", "expired", "terminated"]
            .iter()
            .any(|w| b.contains(w)))
        || b.contains("not initialized")
}

/// How one POST ended, for the caller that decides what follows.
enum Outcome {
    /// Done: answered, accepted, or reported as lost.
    Done,
    /// The server no longer knows the session: re-initialise and replay.
    SessionLost(String),
    /// `auto`'s probe was refused the way legacy servers refuse it.
    Legacy(String),
}

impl Streamable {
    pub(super) fn new(core: Arc<Core>, probe: Option<Arc<Mutex<Option<RemoteKind>>>>) -> Arc<Streamable> {
        let mode = if probe.is_some() { Mode::Unknown } else { Mode::Http };
        Arc::new(Streamable {
            inner: Arc::new(Inner {
                core,
                probe,
                mode: watch::channel(mode).0,
                state: Mutex::new(State::default()),
                renewing: tokio::sync::Mutex::new(()),
            }),
        })
    }
}

impl Transport for Streamable {
    fn send(&self, msg: Outbound) -> Result<(), Closed> {
        let inner = &self.inner;
        if inner.core.is_closed() {
            return Err(Closed);
        }
        let info = classify(&msg.line);
        // Decide the path under the mode's lock, so exactly one message is the probe.
        let mut probe = false;
        let mut legacy = None;
        let mut waits = false;
        inner.mode.send_if_modified(|mode| match mode {
            Mode::Unknown if msg.request.is_some() => {
                *mode = Mode::Probing;
                probe = true;
                true
            }
            Mode::Unknown | Mode::Http => false,
            Mode::Probing => {
                waits = true;
                false
            }
            Mode::Legacy(l) => {
                legacy = Some(l.clone());
                false
            }
        });
        if let Some(l) = legacy {
            return l.send(msg);
        }
        {
            let mut st = inner.state.lock().unwrap();
            if info.method.as_deref() == Some("initialize") {
                st.init_line = Some(msg.line.clone());
            }
            // 2026-07-28: closing the request's stream is the cancellation; there is no
            // notification for it over HTTP.
            if st.init_line.is_none() && info.method.as_deref() == Some("notifications/cancelled") {
                return Ok(());
            }
        }
        let task = inner.clone();
        let token = match msg.request {
            Some(id) => {
                let token = inner.core.cancel.child_token();
                inner.state.lock().unwrap().streams.insert(id, token.clone());
                Some((id, token))
            }
            None => None,
        };
        let work = async move {
            if waits {
                let mut rx = task.mode.subscribe();
                let _ = rx.wait_for(|m| !matches!(m, Mode::Probing)).await;
                let mode = rx.borrow().clone();
                if let Mode::Legacy(l) = mode {
                    if l.send(msg.clone()).is_err()
                        && let Some(id) = msg.request
                    {
                        task.core.lost(id, not_delivered("the connection closed before the message was sent".into()));
                    }
                    return;
                }
            }
            task.deliver(msg, info, probe).await;
        };
        match token {
            Some((id, token)) => {
                let me = inner.clone();
                inner.core.spawn(async move {
                    token.run_until_cancelled(work).await;
                    me.state.lock().unwrap().streams.remove(&id);
                });
            }
            None => inner.core.spawn(work),
        }
        Ok(())
    }

    fn abandon(&self, id: u64) {
        let legacy = match &*self.inner.mode.borrow() {
            Mode::Legacy(l) => Some(l.clone()),
            _ => None,
        };
        if let Some(l) = legacy {
            return l.abandon(id);
        }
        // Dropping the response closes its stream: in the 2026-07-28 era that is the
        // cancellation, in the earlier one it only stops the reading.
        if let Some(token) = self.inner.state.lock().unwrap().streams.remove(&id) {
            token.cancel();
        }
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let inner = &self.inner;
            let legacy = match &*inner.mode.borrow() {
                Mode::Legacy(l) => Some(l.clone()),
                _ => None,
            };
            if let Some(l) = legacy {
                return l.close().await;
            }
            let session = inner.state.lock().unwrap().session.clone();
            if let Some(session) = session.filter(|_| !inner.core.is_closed()) {
                // Best effort: a server that is gone or slow must not hold the shutdown up.
                let mut req = inner.with_session(inner.core.request(Method::DELETE, inner.core.url.clone()), &session);
                let version = inner.state.lock().unwrap().version.clone();
                if let Some(v) = version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                    req = req.header(VERSION_HEADER, v);
                }
                match tokio::time::timeout(DELETE_TIMEOUT, req.send()).await {
                    Ok(Ok(r)) => {
                        tracing::debug!(instance = %inner.core.label, "session deleted (HTTP {})", r.status().as_u16())
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(instance = %inner.core.label, "DELETE of the session failed: {}", describe(&e))
                    }
                    Err(_) => tracing::debug!(instance = %inner.core.label, "DELETE of the session timed out"),
                }
            }
            inner.core.finish("closed".into()).await
        })
    }

    fn kill(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.inner.core.finish("killed".into()))
    }

    fn endpoint(&self) -> String {
        let url = self.inner.core.shown_url();
        match &self.inner.state.lock().unwrap().session {
            Some(s) => format!("{url} (session {s})"),
            None => url,
        }
    }
}

impl Drop for Streamable {
    fn drop(&mut self) {
        self.inner.core.cancel.cancel();
    }
}

impl Inner {
    fn with_session(&self, req: reqwest::RequestBuilder, session: &str) -> reqwest::RequestBuilder {
        match HeaderValue::from_str(session) {
            Ok(v) => req.header(SESSION_HEADER, v),
            Err(_) => req,
        }
    }

    /// Sends one message, re-initialising and replaying it once if the session was lost, and
    /// falling back to legacy SSE if it is `auto`'s refused probe.
    async fn deliver(self: Arc<Self>, msg: Outbound, info: Info, probe: bool) {
        let generation = self.state.lock().unwrap().generation;
        let outcome = self.post(&msg, &info, probe).await;
        if probe && !matches!(outcome, Outcome::Legacy(_)) {
            // The probe neither settled it (it failed otherwise) nor was refused: the next
            // request probes again, and what waited goes over Streamable HTTP meanwhile.
            self.mode.send_if_modified(|m| {
                let was = matches!(m, Mode::Probing);
                if was {
                    *m = Mode::Unknown;
                }
                was
            });
        }
        match outcome {
            Outcome::Done => {}
            Outcome::Legacy(why) => self.fall_back(msg, why).await,
            Outcome::SessionLost(why) => {
                if let Err(e) = self.renew(generation, &why).await {
                    if let Some(id) = msg.request {
                        self.core.lost(id, not_delivered(e.clone()));
                    }
                    self.core.end(e);
                    return;
                }
                match self.post(&msg, &info, false).await {
                    Outcome::Done => {}
                    Outcome::SessionLost(again) | Outcome::Legacy(again) => {
                        let cause =
                            format!("{} refused the replay on its new session as well: {again}", self.core.shown_url());
                        if let Some(id) = msg.request {
                            self.core.lost(id, not_delivered(cause));
                        }
                    }
                }
            }
        }
    }

    /// One POST of one message, and the reading of its answer.
    async fn post(self: &Arc<Self>, msg: &Outbound, info: &Info, probe: bool) -> Outcome {
        let core = &self.core;
        let url = core.shown_url();
        let (session, version, modern) = {
            let st = self.state.lock().unwrap();
            let modern = st.init_line.is_none() && info.envelope_version.is_some();
            (st.session.clone().filter(|_| !modern), st.version.clone(), modern)
        };
        let mut req = core
            .request(Method::POST, core.url.clone())
            .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(msg.line.clone());
        if let Some(s) = &session {
            req = self.with_session(req, s);
        }
        let version = if modern { info.envelope_version.clone() } else { version };
        if let Some(v) = version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            req = req.header(VERSION_HEADER, v);
        }
        if modern {
            if let Some(m) = info.method.as_deref().and_then(|m| HeaderValue::from_str(&header_value(m)).ok()) {
                req = req.header(METHOD_HEADER, m);
            }
            if let Some(n) = info.name.as_deref().and_then(|n| HeaderValue::from_str(&header_value(n)).ok()) {
                req = req.header(NAME_HEADER, n);
            }
        }
        // A request waits as long as the router waits for it (it abandons it at its deadline);
        // anything else gets the short deadline.
        let sent = if msg.request.is_some() {
            req.send().await
        } else {
            match tokio::time::timeout(core.post_timeout, req.send()).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(instance = %core.label, "{url} did not accept a {} within {} ms",
                        info.method.as_deref().unwrap_or("reply"), core.post_timeout.as_millis());
                    return Outcome::Done;
                }
            }
        };
        let mut resp = match sent {
            Ok(r) => r,
            Err(e) if never_sent(&e) => {
                let cause = format!("could not reach {url}: {}", describe(&e));
                if let Some(id) = msg.request {
                    core.lost(id, not_delivered(cause.clone()));
                }
                // Unreachable: the pool's start backoff decides when to try again.
                core.end(cause);
                return Outcome::Done;
            }
            Err(e) => {
                let cause = format!("the request to {url} failed: {}", describe(&e));
                match msg.request {
                    Some(id) => core.lost(id, maybe_delivered(cause)),
                    None => tracing::warn!(instance = %core.label, "{cause}"),
                }
                return Outcome::Done;
            }
        };
        let status = resp.status();
        if status.is_success() {
            if probe {
                self.resolved(RemoteKind::StreamableHttp, "");
            }
            if info.method.as_deref() == Some("initialize")
                && let Some(sid) = resp.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok())
            {
                self.state.lock().unwrap().session = Some(sid.to_string());
            }
            self.read_answer(&mut resp, msg, info, modern).await;
            return Outcome::Done;
        }
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            let cause = core.refused(status);
            if let Some(id) = msg.request {
                core.lost(id, not_delivered(cause.clone()));
            }
            core.end(cause);
            return Outcome::Done;
        }
        let body = match read_body(&mut resp, 4096).await {
            Ok(Ok(b)) => b,
            _ => Vec::new(),
        };
        let text = String::from_utf8_lossy(&body).into_owned();
        let shown = snippet_of(&body);
        let code = status.as_u16();
        if probe && matches!(code, 400 | 404 | 405) && !looks_like_jsonrpc_error(&text) {
            return Outcome::Legacy(format!("the POST was refused with HTTP {code}"));
        }
        if session.is_some()
            && (status == StatusCode::NOT_FOUND || (status == StatusCode::BAD_REQUEST && says_session_lost(&text)))
        {
            return Outcome::SessionLost(format!("HTTP {code}: {shown}"));
        }
        let cause = format!("{url} answered HTTP {code}: {shown}");
        match msg.request {
            Some(id) => core.lost(id, maybe_delivered(cause)),
            None => {
                tracing::warn!(instance = %core.label, "{} was refused: {cause}", info.method.as_deref().unwrap_or("a reply"))
            }
        }
        Outcome::Done
    }

    /// Reads a 2xx answer: a JSON body, an SSE stream, or nothing (accepted).
    async fn read_answer(self: &Arc<Self>, resp: &mut Response, msg: &Outbound, info: &Info, modern: bool) {
        let core = &self.core;
        let url = core.shown_url();
        let Some(id) = msg.request else {
            // A notification or a reply: accepted (202, or any 2xx), and a body means nothing.
            if info.method.as_deref() == Some("notifications/initialized") && !modern {
                self.listen();
            }
            return;
        };
        let is_init = info.method.as_deref() == Some("initialize");
        if is_event_stream(resp) {
            return self.read_request_stream(resp, id, is_init, modern).await;
        }
        let body = match read_body(resp, core.limit).await {
            Ok(Ok(b)) => b,
            Ok(Err(bytes)) => return core.too_long(bytes, Some(id)),
            Err(e) => {
                let cause = format!("the answer from {url} broke off: {}", describe(&e));
                return core.lost(id, maybe_delivered(cause));
            }
        };
        let text = String::from_utf8_lossy(&body);
        let text = text.trim();
        if text.is_empty() {
            let status = resp.status().as_u16();
            return core
                .lost(id, maybe_delivered(format!("{url} accepted the request without answering it (HTTP {status})")));
        }
        if is_init && let Some(v) = negotiated_version(text) {
            self.state.lock().unwrap().version = Some(v);
        }
        core.message(text.to_string());
        if !answers(text, id) {
            core.lost(id, maybe_delivered(format!("the answer from {url} did not hold the response to the request")));
        }
    }

    /// Reads a request's SSE stream to its response, resuming it where the server allows.
    async fn read_request_stream(&self, resp: &mut Response, id: u64, is_init: bool, modern: bool) {
        let core = &self.core;
        let url = core.shown_url();
        let mut parser = Parser::new(core.limit);
        let mut reconnect = Reconnect::resume();
        let mut answered = Some(id);
        // The last resume could not connect: the next one waits its own backoff, not the
        // server's `retry:` (meant for a server that closed the stream on purpose).
        let mut unreachable = false;
        let mut cause = match self.read_stream(resp, Some(&mut reconnect), &mut parser, &mut answered, is_init).await {
            Ok(()) => "the server closed it".to_string(),
            Err(e) => describe(&e),
        };
        loop {
            if answered.is_none() {
                return;
            }
            // Resumable only in the 2025 era, and only when the server numbered its events.
            if modern || parser.last_id().is_empty() {
                core.lost(
                    id,
                    maybe_delivered(format!("the response stream from {url} ended before the response ({cause})")),
                );
                return;
            }
            match parser.retry() {
                Some(retry) if !unreachable => reconnect.hint(retry),
                _ if unreachable => reconnect.clear_hint(),
                _ => {}
            }
            if !reconnect.wait().await {
                core.lost(
                    id,
                    maybe_delivered(format!(
                        "the response stream from {url} ended before the response and could not be resumed ({cause})"
                    )),
                );
                return;
            }
            let (session, version) = {
                let st = self.state.lock().unwrap();
                (st.session.clone(), st.version.clone())
            };
            let mut req = core.get_stream(core.url.clone()).header(LAST_EVENT_HEADER, parser.last_id());
            if let Some(s) = &session {
                req = self.with_session(req, s);
            }
            if let Some(v) = version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                req = req.header(VERSION_HEADER, v);
            }
            let sent = req.send().await;
            unreachable = matches!(&sent, Err(e) if never_sent(e));
            match sent {
                Ok(mut r) if r.status().is_success() && is_event_stream(&r) => {
                    tracing::debug!(instance = %core.label, "resumed the response stream of request {id}");
                    core.reconnected("resume");
                    cause =
                        match self.read_stream(&mut r, Some(&mut reconnect), &mut parser, &mut answered, is_init).await
                        {
                            Ok(()) => "the server closed it".to_string(),
                            Err(e) => describe(&e),
                        };
                }
                // Refused (the session or its events are gone): trying again
                // soon will not help, and the call must not wait for nothing.
                Ok(r) if r.status().is_client_error() => {
                    let why = format!("{cause}; resuming it was refused with HTTP {}", r.status().as_u16());
                    core.lost(
                        id,
                        maybe_delivered(format!("the response stream from {url} ended before the response ({why})")),
                    );
                    return;
                }
                // Unreachable for now (a link that dropped, a server restarting): the next of the
                // capped attempts may get through; the count runs out otherwise.
                Err(e) if never_sent(&e) => {
                    let first = cause.split("; resuming").next().unwrap_or_default().to_string();
                    cause = format!("{first}; resuming it failed: {}", describe(&e));
                }
                Ok(r) => cause = format!("resuming it answered HTTP {}", r.status().as_u16()),
                Err(e) => cause = format!("resuming it failed: {}", describe(&e)),
            }
        }
    }

    /// Passes on the messages of one SSE body until it ends. `answered` holds the request id
    /// still waiting for its response, and is cleared when it arrives (reading stops there).
    async fn read_stream(
        &self,
        resp: &mut Response,
        mut reconnect: Option<&mut Reconnect>,
        parser: &mut Parser,
        answered: &mut Option<u64>,
        is_init: bool,
    ) -> Result<(), reqwest::Error> {
        let core = &self.core;
        loop {
            let event = next_event(resp, parser).await?;
            let Some(event) = event else { return Ok(()) };
            match event {
                Event::Data { kind, data } => {
                    if !matches!(kind.as_deref(), None | Some("message")) || data.trim().is_empty() {
                        // Priming events (an id and no data) and other event types carry no
                        // message, and do not count as progress: a server that only primes and
                        // closes must not be resumed for ever.
                        continue;
                    }
                    if let Some(r) = reconnect.as_deref_mut() {
                        r.progress();
                    }
                    let done = answered.is_some_and(|id| answers(&data, id));
                    if done
                        && is_init
                        && let Some(v) = negotiated_version(&data)
                    {
                        self.state.lock().unwrap().version = Some(v);
                    }
                    core.message(data);
                    if done {
                        *answered = None;
                        return Ok(());
                    }
                }
                Event::TooLong { bytes, head, tail } => {
                    // On a request's stream an over-long event that is not a request or a
                    // notification is that request's response.
                    let id = codec::skipped_response_id(&head, &tail).or_else(|| {
                        let shows_method = String::from_utf8_lossy(&head).contains("\"method\"");
                        answered.filter(|_| !shows_method)
                    });
                    core.too_long(bytes, id);
                    if id.is_some() && id == *answered {
                        *answered = None;
                        return Ok(());
                    }
                }
                Event::NotUtf8 => tracing::warn!(instance = %core.label, "skipped an SSE event that is not UTF-8"),
            }
        }
    }

    /// Opens the standalone GET stream for server-initiated messages, once.
    fn listen(self: &Arc<Self>) {
        {
            let mut st = self.state.lock().unwrap();
            if st.listening || st.no_listen || self.core.is_closed() {
                return;
            }
            st.listening = true;
        }
        let me = self.clone();
        self.core.spawn(async move { me.run_listen().await });
    }

    async fn run_listen(self: Arc<Self>) {
        let core = &self.core;
        let mut reconnect = Reconnect::listen();
        let mut parser = Parser::new(core.limit);
        let mut opened_before = false;
        loop {
            let (session, version) = {
                let st = self.state.lock().unwrap();
                (st.session.clone(), st.version.clone())
            };
            let mut req = core.get_stream(core.url.clone());
            if let Some(s) = &session {
                req = self.with_session(req, s);
            }
            if let Some(v) = version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                req = req.header(VERSION_HEADER, v);
            }
            if !parser.last_id().is_empty() {
                req = req.header(LAST_EVENT_HEADER, parser.last_id());
            }
            match req.send().await {
                Ok(mut r) if r.status().is_success() && is_event_stream(&r) => {
                    if std::mem::replace(&mut opened_before, true) {
                        core.reconnected("reconnect");
                    }
                    let result = self.read_stream(&mut r, Some(&mut reconnect), &mut parser, &mut None, false).await;
                    tracing::debug!(instance = %core.label, "the GET stream ended ({})",
                        result.err().map_or("closed by the server".to_string(), |e| describe(&e)));
                }
                Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {
                    tracing::debug!(instance = %core.label, "the server offers no GET stream (HTTP 405)");
                    let mut st = self.state.lock().unwrap();
                    st.no_listen = true;
                    st.listening = false;
                    return;
                }
                Ok(r) if r.status().is_client_error() => {
                    // The session is gone or the server has no GET here: a request finds out
                    // which, and a re-initialisation opens the stream again.
                    tracing::debug!(instance = %core.label, "the GET stream was refused (HTTP {})", r.status().as_u16());
                    self.state.lock().unwrap().listening = false;
                    return;
                }
                Ok(r) => {
                    tracing::debug!(instance = %core.label, "the GET stream answered HTTP {}", r.status().as_u16())
                }
                Err(e) => tracing::debug!(instance = %core.label, "the GET stream failed: {}", describe(&e)),
            }
            if let Some(retry) = parser.retry() {
                reconnect.hint(retry);
            }
            reconnect.wait().await;
        }
    }

    /// Starts a new session in place of a lost one (once for all the requests that found it
    /// lost together): the stored initialize again, under an id of the transport's own, then
    /// `notifications/initialized`.
    async fn renew(self: &Arc<Self>, failed: u64, why: &str) -> Result<(), String> {
        let _one = self.renewing.lock().await;
        let init = {
            let st = self.state.lock().unwrap();
            if st.generation != failed {
                return Ok(());
            }
            st.init_line.clone()
        };
        let core = &self.core;
        let url = core.shown_url();
        let fail =
            |what: String| format!("the session at {url} was lost ({why}) and could not be re-established: {what}");
        let init = init.ok_or_else(|| fail("no initialize was sent on this connection".into()))?;
        let env = codec::parse(&init).map_err(|e| fail(e.message()))?;
        let id_range = env.id.ok_or_else(|| fail("the initialize has no id".into()))?;
        let own_id = format!("\"switchyard-reinit-{}\"", failed + 1);
        let line = codec::splice(&init, id_range, &own_id);
        let req = core
            .request(Method::POST, core.url.clone())
            .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(line);
        let mut resp = match tokio::time::timeout(REINIT_TIMEOUT, req.send()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(fail(describe(&e))),
            Err(_) => return Err(fail("the initialize timed out".into())),
        };
        if !resp.status().is_success() {
            let code = resp.status().as_u16();
            let body = match read_body(&mut resp, 4096).await {
                Ok(Ok(b)) => b,
                _ => Vec::new(),
            };
            return Err(fail(format!("the initialize was answered HTTP {code}: {}", snippet_of(&body))));
        }
        let session = resp.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
        let answer = tokio::time::timeout(REINIT_TIMEOUT, own_answer(&mut resp, &own_id, core.limit))
            .await
            .map_err(|_| fail("the initialize got no answer in time".into()))?
            .map_err(fail)?;
        let env = codec::parse(&answer).map_err(|e| fail(e.message()))?;
        if env.is_error {
            return Err(fail(format!("the initialize was refused: {}", snippet_of(answer.as_bytes()))));
        }
        let version = negotiated_version(&answer);
        let mut note = core
            .request(Method::POST, core.url.clone())
            .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(codec::notification("notifications/initialized", "{}"));
        if let Some(s) = &session {
            note = self.with_session(note, s);
        }
        if let Some(v) = version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            note = note.header(VERSION_HEADER, v);
        }
        match tokio::time::timeout(REINIT_TIMEOUT, note.send()).await {
            Ok(Ok(r)) if r.status().is_success() => {}
            Ok(Ok(r)) => {
                return Err(fail(format!("notifications/initialized was answered HTTP {}", r.status().as_u16())));
            }
            Ok(Err(e)) => return Err(fail(describe(&e))),
            Err(_) => return Err(fail("notifications/initialized timed out".into())),
        }
        {
            let mut st = self.state.lock().unwrap();
            st.session = session;
            if version.is_some() {
                st.version = version;
            }
            st.generation += 1;
        }
        tracing::info!(instance = %core.label, "the session at {url} was lost ({why}); re-initialised a new one and replaying");
        core.renewed();
        core.reconnected("reinit_404");
        self.listen();
        Ok(())
    }

    /// `auto`: the server refused the probe as a legacy server does; reach it over legacy SSE
    /// at the same URL and send the probe again there.
    async fn fall_back(self: &Arc<Self>, msg: Outbound, why: String) {
        let core = &self.core;
        match Legacy::open(core.clone()).await {
            Ok(legacy) => {
                self.resolved(RemoteKind::Sse, &why);
                self.mode.send_replace(Mode::Legacy(legacy.clone()));
                if legacy.send(msg.clone()).is_err()
                    && let Some(id) = msg.request
                {
                    core.lost(id, not_delivered("the connection closed before the message was sent".into()));
                }
            }
            Err(f) => {
                let cause = format!(
                    "{} refused Streamable HTTP ({why}) and legacy SSE did not work either: {}",
                    core.shown_url(),
                    f.reason
                );
                if let Some(id) = msg.request {
                    core.lost(id, not_delivered(cause.clone()));
                }
                core.end(cause);
            }
        }
    }

    /// `auto`: records what the server speaks (logged once per connector).
    fn resolved(&self, kind: RemoteKind, why: &str) {
        if !matches!(&*self.mode.borrow(), Mode::Probing) {
            return;
        }
        if let Some(probe) = &self.probe {
            let mut known = probe.lock().unwrap();
            if known.as_ref() != Some(&kind) {
                match kind {
                    RemoteKind::Sse => tracing::info!(
                        "server {}: {} speaks legacy SSE ({why}); using it",
                        self.core.server,
                        self.core.shown_url()
                    ),
                    _ => {
                        tracing::info!("server {}: {} speaks Streamable HTTP", self.core.server, self.core.shown_url())
                    }
                }
                *known = Some(kind.clone());
            }
        }
        if kind == RemoteKind::StreamableHttp {
            self.mode.send_replace(Mode::Http);
        }
    }
}

/// Whether a body is a JSON-RPC error: a server that speaks Streamable HTTP refused the
/// request itself (unsupported version, unknown method, bad headers), so no fallback.
fn looks_like_jsonrpc_error(body: &str) -> bool {
    super::jsonrpc_error_message(body.trim()).is_some()
}

/// The response with id `own_id` from a JSON or SSE answer (other messages are dropped: they
/// belong to no call of the router's).
async fn own_answer(resp: &mut Response, own_id: &str, limit: usize) -> Result<String, String> {
    let is_own = |line: &str| codec::parse(line).ok().and_then(|e| e.id.map(|r| &line[r] == own_id)).unwrap_or(false);
    if is_event_stream(resp) {
        let mut parser = Parser::new(limit);
        loop {
            match next_event(resp, &mut parser).await {
                Ok(Some(Event::Data { data, .. })) if is_own(&data) => return Ok(data),
                Ok(Some(_)) => {}
                Ok(None) => return Err("the initialize's stream ended before its response".into()),
                Err(e) => return Err(describe(&e)),
            }
        }
    }
    match read_body(resp, limit).await {
        Ok(Ok(body)) => {
            let text = String::from_utf8_lossy(&body).trim().to_string();
            if is_own(&text) { Ok(text) } else { Err("the initialize was answered with something else".into()) }
        }
        Ok(Err(bytes)) => Err(format!("the initialize's answer is {bytes} bytes, over the limit")),
        Err(e) => Err(describe(&e)),
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn classify_reads_method_era_and_name() {
        let modern = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_weather","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let i = classify(modern);
        assert_eq!(i.method.as_deref(), Some("tools/call"));
        assert_eq!(i.envelope_version.as_deref(), Some("2026-07-28"));
        assert_eq!(i.name.as_deref(), Some("get_weather"));
        let read = r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a b","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert_eq!(classify(read).name.as_deref(), Some("file:///a b"));
        let old = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}"#;
        assert_eq!(classify(old).envelope_version, None);
        assert_eq!(classify(old).name, None, "no Mcp-Name before the 2026 era");
    }

    #[test]
    fn header_values_are_plain_or_base64() {
        assert_eq!(header_value("get_weather"), "get_weather");
        assert_eq!(header_value("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert_eq!(header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(header_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(header_value("=?base64?literal?="), "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=");
    }

    #[test]
    fn session_loss_wordings_of_the_reference_servers() {
        assert!(says_session_lost(
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#
        ));
        assert!(says_session_lost(r#"{"error":{"code":-32001,"message":"Session not found"}}"#));
        assert!(says_session_lost("Bad Request: Server not initialized"));
        assert!(!says_session_lost(r#"{"error":{"code":-32602,"message":"Invalid params"}}"#));
    }

    #[test]
    fn answers_finds_the_response_also_in_a_batch() {
        assert!(answers(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#, 7));
        assert!(!answers(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#, 7));
        assert!(answers(
            r#"[{"jsonrpc":"2.0","method":"x"},{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"m"}}]"#,
            7
        ));
        assert_eq!(
            negotiated_version(
                r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#
            )
            .as_deref(),
            Some("2025-11-25")
        );
    }
}
