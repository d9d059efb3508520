//! The Streamable HTTP transport: one POST per message, answered with JSON or an SSE stream;
//! the session id and protocol version headers; the standalone GET stream; resumption of a
//! broken response stream; transparent re-initialisation when the server lost the session;
//! and, for `auto`, the switch to legacy SSE when the first POST is refused.
//!
//! Both protocol eras are served: 2025-11-25 (`initialize`, sessions, resumable streams) and
//! 2026-07-28 (requests carry their protocol version in `_meta`, no session, no GET stream,
//! no resumption, closing a request's stream cancels it).

mod auto;
mod listen;
mod params;
mod post;
mod session;

pub use params::ToolHeaders;

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use reqwest::Method;
use reqwest::header::HeaderValue;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::liveness::{Probe, ProbeKind};
use super::{Core, describe, not_delivered};
use crate::upstream::transport::{BoxFuture, Closed, Outbound, RemoteKind, Transport};
use switchyard_core::call::Call;
use switchyard_core::codec::{self, Kind};

use auto::Mode;
use switchyard_mcp as mcp;

/// How long the DELETE that ends a session may take at close (best effort).
const DELETE_TIMEOUT: Duration = Duration::from_secs(2);

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
#[derive(Debug, Clone, Default, PartialEq)]
struct Info {
    method: Option<String>,
    /// 2026-07-28 era: the protocol version the request carries in `_meta`.
    envelope_version: Option<String>,
    /// `params.name`, `params.uri` or `params.taskId`, for the `Mcp-Name` header.
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
        // The tasks extension: the task id, so a balancer sends the request to the server
        // instance holding the task (the server's own id: switchyard's was mapped already).
        (Some("tasks/get" | "tasks/update" | "tasks/cancel"), Some(p)) => {
            codec::param_fields(line, p).task_id.and_then(|s| serde_json::from_str::<String>(&line[s]).ok())
        }
        _ => None,
    };
    Info { method: env.method.map(Cow::into_owned), envelope_version, name }
}

/// [`classify`] of a client's request, from its `Call` (no second parse): what was spliced into
/// the line since (the id, the progress token, the trace context) changes none of it.
fn of_call(call: &Call) -> Info {
    let envelope_version = call.protocol_version().map(String::from);
    let fields = call.fields();
    let name = match call.method() {
        _ if envelope_version.is_none() => None,
        "tools/call" | "prompts/get" => call.name(),
        "resources/read" => call.string(&fields.uri),
        "tasks/get" | "tasks/update" | "tasks/cancel" => call.string(&fields.task_id),
        _ => None,
    };
    Info { method: Some(call.method().to_string()), envelope_version, name: name.map(String::from) }
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

/// The numeric ids of the responses in `line` (a message or a batch).
pub(in crate::upstream::remote) fn response_ids(line: &str) -> Vec<u64> {
    if codec::is_batch(line) {
        return codec::split_batch(line)
            .map(|items| items.iter().filter_map(|m| response_id(m)).collect())
            .unwrap_or_default();
    }
    response_id(line).into_iter().collect()
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

impl Streamable {
    pub(super) fn new(core: Arc<Core>, probe: Option<Arc<Mutex<Option<RemoteKind>>>>) -> Arc<Streamable> {
        let mode = if probe.is_some() { Mode::Unknown } else { Mode::Http };
        let inner = Arc::new(Inner {
            core: core.clone(),
            probe,
            mode: watch::channel(mode).0,
            state: Mutex::new(State::default()),
            renewing: tokio::sync::Mutex::new(()),
        });
        let weak = Arc::downgrade(&inner);
        let probe: Probe = Arc::new(move || match weak.upgrade() {
            Some(inner) => inner.probe(),
            None => Box::pin(async { Ok(()) }),
        });
        core.watch_with(probe, ProbeKind(PROBE));
        Arc::new(Streamable { inner })
    }
}

/// What the probe is, for the message when it fails.
const PROBE: &str = "a HEAD request on a fresh connection";

impl Inner {
    /// Asks for the URL's headers on a fresh connection: any answer, whatever its status, shows
    /// the server reachable. Carries the configured headers (a gateway in front may want them)
    /// but no session, so it changes nothing on the server. `auto` turned legacy probes its way.
    fn probe(&self) -> BoxFuture<'static, Result<(), String>> {
        if let Mode::Legacy(l) = &*self.mode.borrow() {
            return l.probe();
        }
        let core = self.core.clone();
        Box::pin(async move {
            let client = core.fresh_client()?.clone();
            match client.head(core.url.clone()).headers(core.headers.clone()).send().await {
                Ok(_) => Ok(()),
                Err(e) => Err(format!("failed: {}", describe(&e))),
            }
        })
    }
}

impl Streamable {
    /// Sends `msg`, of which the transport knows `info`.
    fn send_with(&self, msg: Outbound, info: Info) -> Result<(), Closed> {
        let inner = &self.inner;
        if inner.core.is_closed() {
            return Err(Closed);
        }
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
                inner.core.watch.sent(id);
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
                    me.core.watch.settled(id);
                });
            }
            None => inner.core.spawn(work),
        }
        Ok(())
    }
}

impl Transport for Streamable {
    fn send(&self, msg: Outbound) -> Result<(), Closed> {
        let info = classify(&msg.line);
        self.send_with(msg, info)
    }

    fn send_call(&self, msg: Outbound, call: &Call) -> Result<(), Closed> {
        self.send_with(msg, of_call(call))
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
                    req = req.header(mcp::header::PROTOCOL_VERSION, v);
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

    fn silent_for(&self, id: u64) -> Option<Duration> {
        // `auto` turned legacy: the legacy transport shares this core, and so its watch.
        self.inner.core.watch.silent_for(id)
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
        let poll = r#"{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"t-7","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert_eq!(classify(poll).name.as_deref(), Some("t-7"), "SEP-2663: Mcp-Name is the task id");
        // A client's request is known from its `Call` as its line would be classified.
        let prompt = r#"{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"name":"a\"b","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        for line in [modern, read, old, poll, prompt, r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#] {
            assert_eq!(of_call(&Call::parse(line.to_string()).unwrap()), classify(line), "{line}");
        }
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
