//! One message from the client, as the read loop hands it on: a request registered in flight
//! and run, a batch, a response to a server, or a notification acted on or passed to the servers.

use std::collections::hash_map::Entry;
use std::sync::Arc;

use tokio_util::task::TaskTracker;

use super::Session;
use crate::call::Cancel;
use switchyard_core::call::{Call, Incoming, Refused};
use switchyard_core::codec::{self, Envelope};

/// What the reader loop does with one message before anything async runs.
// `Run` is the large one: the request's `Call` (its ranges) is moved, once, into the task that
// runs it; boxing it would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
enum Step {
    /// A request, registered in flight; run it.
    Run(Call, Arc<Cancel>),
    /// Answer this at once.
    Reply(String),
    /// Handled (a notification or a response) or nothing to do.
    Done,
}

impl Session {
    pub(super) fn on_line(self: &Arc<Self>, line: String, tasks: &TaskTracker) {
        if line.trim().is_empty() {
            return;
        }
        if codec::is_batch(&line) {
            return self.on_batch(&line, tasks);
        }
        let step = self.step(line);
        self.take(step, tasks);
    }

    /// A request its input parsed already (see [`super::Message::Request`]).
    pub(super) fn on_request(self: &Arc<Self>, call: Box<Call>, tasks: &TaskTracker) {
        let step = self.step_request(*call);
        self.take(step, tasks);
    }

    /// Does what `step` says: runs a request in a task of its own, or answers at once.
    fn take(self: &Arc<Self>, step: Step, tasks: &TaskTracker) {
        match step {
            // Boxed where it is made: a call's future holds every stage it may wait in
            // (kilobytes), and the spawn would copy it whole through each of its layers.
            Step::Run(call, token) => {
                tasks.spawn(Box::pin(self.clone().respond(call, token)));
            }
            Step::Reply(r) => self.link.send(r),
            Step::Done => {}
        }
    }

    /// A JSON-RPC batch: its requests run concurrently and are answered together, as an array.
    fn on_batch(self: &Arc<Self>, line: &str, tasks: &TaskTracker) {
        let items = match codec::split_batch(line) {
            Ok(items) => items,
            Err(e) => return self.link.send(codec::response_error("null", e.code(), &e.message(), None)),
        };
        if items.is_empty() {
            return self.link.send(codec::response_error(
                "null",
                codec::INVALID_REQUEST,
                "Invalid Request: empty batch",
                None,
            ));
        }
        let steps: Vec<Step> = items.into_iter().map(|i| self.step(i.to_string())).collect();
        let me = self.clone();
        tasks.spawn(async move {
            let mut replies = Vec::new();
            let mut running = Vec::new();
            for s in steps {
                match s {
                    Step::Run(call, token) => running.push(me.clone().run(call, token)),
                    Step::Reply(r) => replies.push(r),
                    Step::Done => {}
                }
            }
            let mut set = tokio::task::JoinSet::new();
            for f in running {
                set.spawn(f);
            }
            while let Some(r) = set.join_next().await {
                if let Ok(Some(r)) = r {
                    replies.push(r);
                }
            }
            if !replies.is_empty() {
                me.link.send(format!("[{}]", replies.join(",")));
            }
        });
    }

    fn step(self: &Arc<Self>, line: String) -> Step {
        match Incoming::read(line) {
            // Its params were read there, once: every later stage reads the `Call`.
            Incoming::Request(call) => self.step_request(call),
            Incoming::Response(line, env) => {
                self.server().hub.client_response(&self.link, &line, &env);
                Step::Done
            }
            Incoming::Notification(line, env) => {
                self.on_notification(&line, &env);
                Step::Done
            }
            Incoming::Refused(e) => {
                tracing::debug!(session = %self.label, "bad message from client: {}", e.message());
                Step::Reply(e.answer())
            }
            Incoming::Dropped(e) => {
                tracing::info!(session = %self.label, "dropped a notification from the client: {}", e.message());
                Step::Done
            }
        }
    }

    /// A request: registered in flight (unless its id is), and its session opened or placed.
    fn step_request(self: &Arc<Self>, call: Call) -> Step {
        let token = Arc::new(Cancel::default());
        let admitted = call.admit(|id| match self.inflight.lock().expect("lock").entry(id.to_string()) {
            Entry::Occupied(_) => false,
            Entry::Vacant(v) => {
                v.insert(token.clone());
                true
            }
        });
        match admitted {
            Ok(()) => {}
            // Parsers disagree on which of two values counts: refused before any policy
            // judges one of them while the server runs the other.
            Err(Refused::Unread(answer)) => {
                tracing::info!(session = %self.label, "refused a {} whose params give a key twice", call.method());
                return Step::Reply(answer);
            }
            Err(refused) => return Step::Reply(refused.into_answer()),
        }
        // `initialize` is the handshake of its era even when it carries the envelope.
        let modern = call.method() != "initialize" && call.fields().protocol_version.is_some();
        match call.method() {
            // A 2026-07-28 client never initialises: its first request opens its session.
            _ if modern => self.link.open(),
            "initialize" => {
                let params = call.params().unwrap_or("{}");
                self.place_at_initialize(params);
                self.server().begin_initialize(params);
            }
            "ping" | "server/discover" => {}
            // A client that skips `initialized` is taken as initialised by its first call.
            _ => {
                self.link.open();
                self.settle_roots();
            }
        }
        Step::Run(call, token)
    }

    fn on_notification(self: &Arc<Self>, line: &str, env: &Envelope) {
        let method = env.method.as_deref().unwrap_or_default();
        match method {
            // switchyard initialised the server itself; the client's ack opens its session to
            // what servers send on their own.
            "notifications/initialized" => {
                self.link.open();
                self.settle_roots();
            }
            "notifications/cancelled" => {
                let fields = env.params.as_ref().map(|p| codec::param_fields(line, p)).unwrap_or_default();
                let Some(span) = fields.request_id else { return };
                let id = &line[span];
                // Out of the table at once: no response is owed, and the client may reuse the id
                // right away (the call's task finds its entry gone and leaves a new one alone).
                match self.inflight.lock().expect("lock").remove(id) {
                    Some(c) => c.cancel(fields.reason),
                    None => tracing::debug!(session = %self.label, "cancel for id {id}, which is not in flight"),
                }
            }
            // A request's method without an id is no request (JSON-RPC: a notification), and
            // MCP has no such notification: no server would answer it, a policy would judge it
            // without its tool, and it would go to every instance. Dropped, as JSON-RPC wants
            // a notification it cannot take to be (no reply).
            _ if !method.starts_with("notifications/") => {
                let server = self.server();
                if let Some(n) = server.repeats.request_without_id.hit() {
                    tracing::warn!(
                        session = %self.label,
                        server = %server.name,
                        "dropped a `{method}` without an id from the client: a request needs an id to be answered, and this one was neither sent to the server nor judged by the policy{}",
                        switchyard_core::logging::times(n)
                    );
                }
            }
            _ => {
                let me = self.clone();
                let (method, line) = (method.to_string(), line.to_string());
                tokio::spawn(async move { me.forward_notification(&method, line).await });
            }
        }
    }

    /// A client notification for the servers (roots/list_changed and anything else). Like
    /// every message that reaches a server, it passes the policy first (on a plugin worker).
    async fn forward_notification(self: Arc<Self>, method: &str, line: String) {
        let server = self.server();
        let call = switchyard_core::decision::CallInfo {
            server: server.metric_name.clone(),
            session: self.label.clone(),
            caller: self.link.caller(),
            method: method.to_string().into(),
            tool: None,
            arguments: None,
            declared: Default::default(),
            attempt: 0,
            task: None,
        };
        if let Err(r) = server.policy.current().decide_async(&call).await {
            server.log_refusal(&self.label, method, &r);
            return;
        }
        if method == "notifications/roots/list_changed" {
            // switchyard keeps the client's roots (it answers servers from them): it asks for
            // the new ones, then passes the change on.
            return self.roots_changed(line).await;
        }
        // To every instance of the initialize era this session may use (the 2026-07-28
        // protocol has no such notifications).
        let targets: Vec<_> = server
            .all_instances()
            .into_iter()
            .filter(|i| i.is_ready() && i.owner.is_none_or(|o| o == self.id) && !server.is_modern(i))
            .collect();
        for inst in targets {
            // Counted against the same unread budget as calls: a server that stopped reading
            // must not make switchyard hold every notification a client keeps sending.
            if !inst.is_writable() {
                if let Some(n) = server.repeats.notification_unread.hit() {
                    tracing::warn!(
                        session = %self.label,
                        instance = %inst.label(),
                        "dropped a client's {method}: the server has not read the last {} bytes sent to it{}",
                        inst.backlog(),
                        switchyard_core::logging::times(n)
                    );
                }
                continue;
            }
            let _ = inst.write(line.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};
    use tokio::io::AsyncWriteExt;
    use tokio_util::sync::CancellationToken;

    use switchyard_core::codec;

    /// JSON-RPC 2.0: a request whose id is no string and no integer is answered with
    /// `"id": null` (the id could not be read), saying what is wrong, and reaches no server; an
    /// integer however written (`1e3`, `-0`) comes back as written. An id still in flight is
    /// refused under it.
    #[tokio::test(start_paused = true)]
    async fn an_id_that_is_no_string_or_integer_is_answered_under_null() {
        let (server, fake) = crate::call_path_tests::start("", false);
        let (mut out, mut inbox) = crate::test_session::open(&server, CancellationToken::new());
        let mut next = async || tokio::time::timeout(Duration::from_secs(60), inbox.recv()).await.unwrap().unwrap();
        let call = |id: &str, tool: &str| {
            let args = if tool == "sleep" { r#"{"ms":60000}"# } else { r#"{"text":"x"}"# };
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#
            ) + "\n"
        };
        let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
        out.write_all(format!("{init}\n{}\n", r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).as_bytes())
            .await
            .unwrap();
        assert!(next().await.get("result").is_some());
        for (id, what) in [
            (r#"{"o":1}"#, "an object"),
            ("true", "a boolean"),
            ("false", "a boolean"),
            ("[]", "an array"),
            ("1.5", "a fractional part"),
        ] {
            out.write_all(call(id, "echo").as_bytes()).await.unwrap();
            let got: Value = next().await;
            assert_eq!(
                (&got["id"], &got["error"]["code"]),
                (&Value::Null, &json!(codec::INVALID_REQUEST)),
                "{id}: {got}"
            );
            assert!(got["error"]["message"].as_str().unwrap().contains(what), "{id}: {got}");
        }
        for id in ["1e3", "-0"] {
            out.write_all(call(id, "echo").as_bytes()).await.unwrap();
            let got: Value = next().await;
            assert!(got.get("result").is_some(), "{id}: {got}");
        }
        let echoed = fake.link(0).lines().iter().filter(|l| l.contains(r#""name":"echo""#)).count();
        assert_eq!(echoed, 2, "only the calls under a valid id reached the server");
        out.write_all(call("7", "sleep").as_bytes()).await.unwrap();
        out.write_all(call("7", "echo").as_bytes()).await.unwrap();
        let got: Value = next().await;
        assert_eq!(got["id"], 7, "{got}");
        let why = got["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains("id 7 is already in use by a request still in flight"), "{got}");
    }
}
