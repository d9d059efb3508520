//! A client's request run to its one response: what the session answers itself (from the
//! server's state), and the rest through the policy and the engine ([`crate::call`]).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

mod initialize;
mod remembered;
mod tools;

use super::Session;
use crate::call::Cancel;
use crate::placement::ScopeKey;
use switchyard_core::call::Call;
use switchyard_core::codec;
use switchyard_core::metrics::{self, Outcome};

/// The methods a session answers itself (from the server's state), never through the engine.
const ANSWERED_HERE: &[&str] =
    &["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"];

impl Session {
    /// Why a call switchyard stopped at shutdown (or at its server's removal) ends unanswered:
    /// one that was with the server may have run, and the client is told so.
    fn ended_for(&self, token: &Cancel) -> switchyard_core::error::CallError {
        let server = self.server();
        match server.ended() {
            switchyard_core::error::CallError::ShuttingDown if token.was_sent() => {
                switchyard_core::error::CallError::ShutDownInFlight { server: server.name.clone() }
            }
            other => other,
        }
    }

    /// Runs one request to its single response (None: the client cancelled it).
    // A block, not an `async fn`: an async fn's body moves its arguments into locals of their
    // own, and the request (over 500 bytes) would be held twice in every request's future.
    #[allow(clippy::manual_async_fn)]
    pub(super) fn run(self: Arc<Self>, call: Call, token: Arc<Cancel>) -> impl Future<Output = Option<String>> {
        async move { self.answer(&call, &token).await }
    }

    /// [`Session::run`] for a request of its own task: the response, if any, goes to the client.
    /// A block for the same reason as `run`, and awaiting `run` inside it would hold the request
    /// once more in the spawned future.
    #[allow(clippy::manual_async_fn)]
    pub(super) fn respond(self: Arc<Self>, call: Call, token: Arc<Cancel>) -> impl Future<Output = ()> {
        async move {
            if let Some(resp) = self.answer(&call, &token).await {
                self.link.send(resp);
            }
        }
    }

    /// [`Session::run`]'s body, on its request and cancel where `run` holds them.
    async fn answer(self: &Arc<Self>, call: &Call, token: &Arc<Cancel>) -> Option<String> {
        let (id, method) = (call.id(), call.method());
        // What the engine forwards it counts (and times) itself; what the session answers is
        // counted here, from now.
        let started = ANSWERED_HERE.contains(&method).then(tokio::time::Instant::now);
        // A tool list and a tool's call as the client's budget and search mode make them. Each
        // future awaited on its own line: one held in a `match` on its output would stay in
        // this future beside the next.
        let shaped = self.shape_request(call, token).await;
        let resp = match shaped {
            tools::Shaped::Answered(resp) => resp,
            shaped => {
                let to = match &shaped {
                    tools::Shaped::Rewritten(shaped) => shaped,
                    _ => call,
                };
                self.dispatch(to, id, token).await
            }
        }
        .or_else(|| token.owes_answer().then(|| self.ended_for(token).to_response(id)));
        let resp = resp.map(|r| self.shape_response(method, r));
        if let Some(started) = started {
            let server = self.server();
            let (outcome, code) = resp.as_deref().map_or((Outcome::Cancelled, None), metrics::answer_outcome);
            server.metrics.call(metrics::Call {
                server: &server.metric_name,
                method,
                tool: None,
                outcome,
                code,
                session_label: &self.label,
                elapsed: started.elapsed(),
            });
        }
        // Out of the in-flight table before the response leaves, so the id may be reused at once
        // (unless a cancel took it out already and a new request reuses it).
        let mut inflight = self.inflight.lock().expect("lock");
        if inflight.get(id).is_some_and(|c| Arc::ptr_eq(c, token)) {
            inflight.remove(id);
        }
        drop(inflight);
        resp
    }

    /// For a client whose initialize was answered from the server's earlier answer while the
    /// server's start then failed: starts it again, once per request, and says whether it is
    /// up now. That client was told the server is up and will not initialize again, and the
    /// cause may be gone since (a sign-in done meanwhile, a server back up); repeating the old
    /// failure for ever would leave it no way but a restart. Another client gets the failure.
    async fn start_again(&self, server: &Arc<crate::server::Server>) -> bool {
        if self.promised.get().is_none() {
            return false;
        }
        let Some(params) = self.placement.init_params.lock().expect("lock").clone() else { return false };
        match server.initialize(self.id, &params).await {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(session = %self.label, server = %server.name, "the server's start failed again: {e}");
                false
            }
        }
    }

    /// None when the server is initialised, at once or once a start under way ends, or started
    /// again for this client (in message order); else how long the start tried again took before
    /// it failed too (the request is then refused). The clock is read only on that way.
    async fn unstarted(&self, server: &Arc<crate::server::Server>) -> Option<std::time::Duration> {
        let _turn = self.in_order.lock().await;
        if server.wait_initialized().await {
            return None;
        }
        let since = tokio::time::Instant::now();
        (!Box::pin(self.start_again(server)).await).then(|| since.elapsed())
    }

    /// A request to its answer: by the session itself, or forwarded. What is not a plain call
    /// (its handshake, tasks, search, lists from memory, subscriptions, discovery) is boxed where
    /// it is awaited, so the future every request carries holds the forwarding alone.
    async fn dispatch(self: &Arc<Self>, call: &Call, id: &str, cancel: &Cancel) -> Option<String> {
        let token = &cancel.token;
        let method = call.method();
        // A request waits while the session is being placed (its roots asked for); what it may
        // send before it is initialised does not.
        if !matches!(method, "initialize" | "ping" | "server/discover") {
            or_cancelled(token, self.placed()).await?;
        }
        let server = &self.server();
        let fields = call.fields();
        let local_error = |code, msg: String| Some(codec::response_error(id, code, &msg, None));
        let modern = match self.era(server, call, id) {
            Ok(modern) => modern,
            Err(refusal) => return Some(refusal),
        };
        if method == "server/discover" {
            return Box::pin(self.discover(call, cancel)).await;
        }
        if modern {
            if crate::server::tasks::ABOUT_ONE_TASK_2026.contains(&method) {
                return Box::pin(self.about_task(call, cancel, true)).await;
            }
            if fields.request_state.is_some() {
                return Box::pin(self.resume(call, cancel)).await;
            }
            return self.forward(call, cancel, true).await;
        }
        match method {
            "initialize" => Box::pin(self.initialize(server, call.params().unwrap_or("{}"), id, token)).await,
            "ping" => Some(codec::response_ok(id, "{}")),
            // The server's instances were set up for clients that did initialize: a session that
            // did not is served by none of them, as a server of its own would serve it nothing.
            _ if !self.sent_initialize() => local_error(
                codec::INVALID_REQUEST,
                format!(
                    "{method}: this session has not sent initialize to server `{}`. A client sends initialize (then notifications/initialized) before any other request",
                    server.name
                ),
            ),
            // Before the wait for the server's start: answered from memory while it starts.
            m @ ("tools/list" | "prompts/list") if let Some(items) = self.remembered_list(server, m, call) => {
                let method = if m == "tools/list" { "tools/list" } else { "prompts/list" };
                let answered = self.answer_from_memory(server, method, self.request(call, cancel, false, None), items);
                Some(Box::pin(answered).await)
            }
            _ if let Some(spent) = or_cancelled(token, self.unstarted(server)).await? => {
                let req = self.request(call, cancel, false, None);
                Some(crate::call::refuse(server, &req, &server.not_initialized(), spent))
            }
            m if let Some(capability) = self.withdrawn(server, m) => local_error(
                codec::METHOD_NOT_FOUND,
                format!(
                    "{m}: server `{}` does not offer `{capability}` as it runs now. This client was told it did: switchyard answered its initialize from the server's earlier answer while the server started, and the server's own answer differs. Restart the client (or reconnect it) to get what the server offers now",
                    server.name
                ),
            ),
            "logging/setLevel" => match call.string(&fields.level) {
                Some(level) => match Box::pin(or_cancelled(token, server.set_log_level(self.id, &level))).await? {
                    Ok(()) => Some(codec::response_ok(id, "{}")),
                    Err(e) => local_error(codec::INVALID_PARAMS, e),
                },
                None => local_error(codec::INVALID_PARAMS, "logging/setLevel needs params.level".into()),
            },
            "resources/subscribe" | "resources/unsubscribe" => Box::pin(self.subscription(server, call, token)).await,
            m if crate::server::tasks::ABOUT_ONE_TASK.contains(&m) => {
                Box::pin(self.about_task(call, cancel, false)).await
            }
            "tasks/list" => Box::pin(self.list_tasks(call, cancel)).await,
            _ => self.forward(call, cancel, false).await,
        }
    }

    /// resources/subscribe or resources/unsubscribe, answered here: switchyard holds one
    /// subscription per instance for every session that asked (see `Server::subscribe`). Traced
    /// by its SERVER span alone: the server is sent a request only when the first session
    /// subscribes or the last one leaves, on behalf of them all, so no CLIENT span is the child
    /// of one client's request.
    async fn subscription(
        &self,
        server: &crate::server::Server,
        call: &Call,
        token: &CancellationToken,
    ) -> Option<String> {
        let (id, method) = (call.id(), call.method());
        let span = self.call_span(call);
        let failed = |code: i64, message: String| {
            span.ended(Some(&code.to_string()), Some(code), Vec::new());
            Some(codec::response_error(id, code, &message, None))
        };
        let Some(uri) = call.string(&call.fields().uri) else {
            return failed(codec::INVALID_PARAMS, format!("{method} needs params.uri"));
        };
        let subscribe = method == "resources/subscribe";
        let done = or_cancelled(token, async {
            if subscribe { server.subscribe(self.id, &uri).await } else { server.unsubscribe(self.id, &uri).await }
        });
        let Some(r) = done.await else {
            let cancelled = switchyard_telemetry::KeyValue::new(switchyard_telemetry::keys::SWITCHYARD_CANCELLED, true);
            span.ended(Some(Outcome::Cancelled.label()), None, vec![cancelled]);
            return None;
        };
        match r {
            Ok(()) => Some(codec::response_ok(id, "{}")),
            Err(e) => failed(codec::INTERNAL_ERROR, e),
        }
    }

    /// Through the policy and the engine to an instance (`modern`: one of the 2026-07-28 era).
    /// What `forward_to` does for a request about no task, with the call's span boxed, and made
    /// only when calls are traced: a span is hundreds of bytes, and this future is in every
    /// request's. The span ends when the call does: here, or where the call is dropped.
    async fn forward(&self, call: &Call, cancel: &Cancel, modern: bool) -> Option<String> {
        let traced = switchyard_telemetry::on().then(|| Box::new(self.call_span(call)));
        let span = traced.as_deref().unwrap_or(switchyard_telemetry::Span::none_ref());
        crate::call::forward(&self.server(), crate::call::Request { span, ..self.request(call, cancel, modern, None) })
            .await
    }

    /// `server/discover`, the 2026-07-28 client's first request (it sends no initialize). It
    /// goes, through the policy, to an instance of that era, started if needed: a server of
    /// that era answers it as it would directly; a 2025-11-25-only server answers -32601 and the
    /// client falls back to initialize. Clients fall back after a timeout too, so an instance
    /// that is up but does not answer within `limits.discover_timeout_ms` gets -32601 fast.
    async fn discover(&self, call: &Call, cancel: &Cancel) -> Option<String> {
        let server = &self.server();
        let id = call.id();
        let not_found = |why: &str| {
            Some(codec::response_error(
                id,
                codec::METHOD_NOT_FOUND,
                &format!("Method not found: server/discover ({why})"),
                None,
            ))
        };
        // The server's own answer, as a client connected to it directly gets it.
        let refused = || {
            let error = server.discover_refusal()?;
            Some(format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#))
        };
        if server.discover_refused() {
            return refused().or_else(|| not_found("the server does not support it; use initialize"));
        }
        // Starting the instance is bounded by init_timeout_ms (a client connected directly waits
        // for the server's start as well); the answer by discover_timeout_ms.
        let pool = server.modern_pool(server.default_pool());
        let started = tokio::select! {
            r = pool.acquire(self.id, &ScopeKey::Shared) => r.map(drop),
            _ = cancel.token.cancelled() => return None,
        };
        if let Err(e) = started {
            // The instance started and answered -32601: that answer is the client's.
            if server.discover_refused()
                && let Some(r) = refused()
            {
                return Some(r);
            }
            tracing::info!(server = %server.name, "server/discover: no instance for it: {e}");
            return not_found(&format!("no instance of server `{}` could start: {e}", server.name));
        }
        let limit = Duration::from_millis(server.limits.discover_timeout_ms);
        match tokio::time::timeout(limit, self.forward(call, cancel, true)).await {
            Ok(Some(reply)) => {
                if !crate::server::is_modern_answer(&reply) {
                    server.refuse_discover(&reply);
                }
                Some(served_versions_only(reply))
            }
            Ok(None) => None,
            Err(_) => {
                tracing::info!(server = %server.name, "server/discover not answered within {} ms (limits.discover_timeout_ms)", limit.as_millis());
                not_found(&format!("not answered within {} ms; use initialize", limit.as_millis()))
            }
        }
    }
}

/// A server/discover answer with `supportedVersions` cut to the versions switchyard serves: per
/// request (2026-07-28) or through initialize (the session era). A client picks one of them;
/// a version switchyard serves neither way would send the client into its refusal (-32022).
fn served_versions_only(reply: String) -> String {
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&reply) else { return reply };
    let Some(versions) = v.pointer_mut("/result/supportedVersions").and_then(|s| s.as_array_mut()) else {
        return reply;
    };
    let before = versions.len();
    use switchyard_mcp::version::{SESSION_ERA, STATELESS};
    versions.retain(|x| x.as_str().is_some_and(|x| STATELESS.contains(&x) || SESSION_ERA.contains(&x)));
    if versions.len() == before {
        return reply;
    }
    v.to_string()
}

/// Runs `f` unless the call is cancelled first (by its client, or because the session ended):
/// then `None`, and no response is owed.
async fn or_cancelled<T>(token: &CancellationToken, f: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        v = f => Some(v),
        _ = token.cancelled() => None,
    }
}

/// Whether two initialize results tell a client the same: the server, its capabilities, its
/// protocol version and instructions (in any key order).
fn same_answer(a: &str, b: &str) -> bool {
    let parse = |t: &str| serde_json::from_str::<serde_json::Value>(t).ok();
    parse(a) == parse(b)
}

/// The capability a server must declare for a client to send `method` (None: none is needed).
fn capability_of(method: &str) -> Option<&'static str> {
    let (family, _) = method.split_once('/')?;
    Some(match family {
        "tools" => "tools",
        "prompts" => "prompts",
        "resources" => "resources",
        "logging" => "logging",
        "completion" => "completions",
        _ => return None,
    })
}

impl Session {
    /// The capability `method` needs when this client was promised it (answered initialize from
    /// the server's earlier answer) and the server as it runs now does not declare it. Worked out
    /// once, at the session's first request after the server is initialised.
    fn withdrawn(&self, server: &crate::server::Server, method: &str) -> Option<&'static str> {
        let promised = self.promised.get()?;
        let capability = capability_of(method)?;
        let gone = self.withdrawn.get_or_init(|| {
            let v: serde_json::Value = serde_json::from_str(promised).unwrap_or_default();
            ["tools", "prompts", "resources", "logging", "completions"]
                .into_iter()
                .filter(|c| v["capabilities"].get(c).is_some_and(|x| !x.is_null()) && server.lacks_capability(c))
                .collect()
        });
        gone.contains(&capability).then_some(capability)
    }

    /// The client was answered initialize from an earlier answer that differs from the server's
    /// own now: it is told each list the server says may change did, so it fetches them again.
    fn tell_lists_changed(&self, result: &str) {
        let v: serde_json::Value = serde_json::from_str(result).unwrap_or_default();
        tracing::info!(session = %self.label, "the server's initialize differs from its earlier answer the client got; telling it its lists changed");
        // Only for lists the server says may change (a client is told of changes to no other).
        for kind in ["tools", "prompts", "resources"] {
            if v["capabilities"][kind]["listChanged"] == serde_json::Value::Bool(true) {
                self.link.send_from_server(codec::notification(&format!("notifications/{kind}/list_changed"), "{}"));
            }
        }
    }
}

// Last in the file: the layering test reads a file up to its first test item.
#[cfg(test)]
mod sizes;
