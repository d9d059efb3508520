//! The first lists of a client answered from memory while its server starts: a client whose
//! initialize was answered from the server's earlier answer (a new project's profile, a daemon
//! started again) gets its first `tools/list` and `prompts/list` as the server last gave them
//! to clients like it, shaped by the policy as any list is, instead of waiting for the start
//! (Claude Code gives up on a server whose tools take seconds to list). Once the server is up,
//! its own list is fetched; where it differs, the client is told the list changed (and where it
//! does not, the server's own notice at its start passes to no one).

use std::sync::Arc;

use super::Session;
use crate::call;
use crate::server::Server;
use switchyard_core::call::Call;
use switchyard_core::codec;
use switchyard_core::metrics::{self, Outcome};
use switchyard_policy::Kind;

impl Session {
    /// The list `method` asks for as remembered, when it may be answered so: the server is not
    /// up yet, the client was promised a server that says when that list changes (so it hears
    /// if the server's own differs), the request asks for the first page, and a whole list of
    /// it is remembered for clients like this one.
    pub(super) fn remembered_list(&self, server: &Server, method: &str, call: &Call) -> Option<Vec<serde_json::Value>> {
        if server.is_initialized() {
            return None;
        }
        let capability = method.strip_suffix("/list")?;
        let promised: serde_json::Value = serde_json::from_str(self.promised.get()?).ok()?;
        if promised["capabilities"][capability]["listChanged"] != serde_json::Value::Bool(true) {
            return None;
        }
        if call.fields().cursor.is_some() {
            return None;
        }
        server.remembered_list(method)
    }

    /// Answers `req`, the client's request for the remembered list `method`, with `items`,
    /// through the same policy as a live list: the chain's verdict on the request (a required
    /// plugin that does not load refuses it, as it refuses the live one), then its list hooks.
    /// The server's own list, once it is up, decides whether the client hears that the list
    /// changed.
    pub(super) async fn answer_from_memory(
        self: &Arc<Self>,
        server: &Arc<Server>,
        method: &'static str,
        req: call::Request<'_>,
        items: Vec<serde_json::Value>,
    ) -> String {
        let (id, started) = (req.call.id(), tokio::time::Instant::now());
        let set = server.policy.current();
        // A refusal is counted (and written) there; an answer from memory is counted below.
        if let Err(refused) = call::judge(server, &set, &req).await {
            return refused;
        }
        if method == "tools/list" {
            server.declare_listed_tools(&items);
        }
        let field = method.strip_suffix("/list").unwrap_or(method);
        let mut result = serde_json::json!({ field: items }).to_string();
        if let Some(kind) = Kind::of_list_method(method) {
            let caller = self.link.caller();
            if let Some(new) = server.list_for_client(&set, &self.label, &caller, &self.link, kind, &result).await {
                result = new;
            }
        }
        tracing::info!(session = %self.label, server = %server.name, "{method} answered from the server's earlier list while it starts");
        // Counted and timed as the server's own list would be, and with the same labels: no
        // label says where an answer came from (the log above does).
        server.metrics.call(metrics::Call {
            server: &server.metric_name,
            method,
            tool: None,
            outcome: Outcome::Ok,
            code: None,
            session_label: &self.label,
            elapsed: started.elapsed(),
        });
        let (me, server) = (self.clone(), server.clone());
        let mut given = items;
        crate::server::fanout::sort_list(&mut given);
        // What the client was shown, as a live list would be recorded: a starting server that
        // announces its unchanged list (as one registering its tools does) then tells no one.
        server.hub.shown_list(field, given.clone());
        server.clone().tasks.spawn(async move { me.check_remembered(&server, field, given).await });
        codec::response_ok(id, &result)
    }

    /// Once the server is up: its own list of `kind`, and a list_changed to this client where
    /// it differs from the remembered one it was given (both sorted).
    async fn check_remembered(&self, server: &Server, kind: &'static str, given: Vec<serde_json::Value>) {
        if !server.wait_initialized().await {
            return;
        }
        let Some(inst) = server.all_instances().into_iter().find(|i| i.is_ready() && !server.is_modern(i)) else {
            return;
        };
        let Some(now) = server.fetch_list(&inst, kind).await else { return };
        if now != given {
            tracing::info!(session = %self.label, server = %server.name, "the server's {kind} differ from those remembered; telling the client its list changed");
            self.link.send_from_server(codec::notification(&format!("notifications/{kind}/list_changed"), "{}"));
        }
    }
}
