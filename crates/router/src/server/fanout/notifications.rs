//! A server's notifications: logs to the session they belong to, task and elicitation notices to
//! the session that was handed them, list changes checked, the rest to the instance's audience.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::lists::LIST_KINDS;
use super::requests::elicitation_id;
use super::{Attribution, Fanout};
use crate::peer::level_rank;
use crate::server::tasks;
use crate::upstream::Instance;
use switchyard_core::codec::{self, Envelope};

impl Fanout {
    /// Whether `inst` is an additional instance still starting: the first instance of the server
    /// is the one its first client waits for, any later one (a pool growing, a session's own
    /// instance, a replacement) starts unseen, its start-up chatter (logs, list changes) to nobody.
    fn starting_unseen(inst: &Instance) -> bool {
        !inst.is_ready() && inst.number() > 1
    }

    /// Whether another instance of `inst`'s pool speaks for it: with no call of any session on
    /// it, what a shared instance says on its own (a log after a roots change every instance
    /// heard) is said by each instance of the pool; only the lowest-numbered ready one of the
    /// same scope (the shared instances, or one client's or key's) is heard.
    fn spoken_for(&self, inst: &Instance) -> bool {
        if inst.owner.is_some() || !inst.sessions_in_flight().is_empty() || inst.ended_calls_lately() {
            return false;
        }
        let Some(server) = self.owner.upgrade() else { return false };
        server
            .instances()
            .iter()
            .any(|o| o.scope == inst.scope && o.pool() == inst.pool() && o.is_ready() && o.number() < inst.number())
    }

    /// A notification from the server: fan it out by the rules of its method.
    pub(super) fn on_server_notification(self: &Arc<Self>, inst: &Arc<Instance>, line: String, env: Envelope) {
        let method = env.method.as_deref().unwrap_or_default();
        let fields = env.params.as_ref().map(|p| codec::param_fields(&line, p)).unwrap_or_default();
        let chatter = method == "notifications/message" || method.ends_with("/list_changed");
        if chatter && Self::starting_unseen(inst) {
            tracing::debug!(instance = %inst.label(), "withheld {method} of an instance still starting");
            return;
        }
        match method {
            "notifications/message" => self.server_log(inst, line, fields.level.as_deref()),
            "notifications/resources/updated" => {
                let Some(uri) = fields.uri else { return };
                let by_calls = !inst.sessions_in_flight().is_empty() || inst.ended_calls_lately();
                let subs = self.subscriptions.updated(&uri, inst.number(), by_calls);
                for s in self.audience(inst) {
                    if subs.contains(&s.id) {
                        s.send_from_server(line.clone());
                    }
                }
            }
            "notifications/cancelled" => {
                // The server gave up on one of its own requests to a client.
                let Some(span) = fields.request_id else { return };
                let upstream_id = &line[span.clone()];
                for s in self.audience(inst) {
                    if let Some(n) = s.take_outbound(inst, Some(upstream_id)).first() {
                        self.roots_asked.lock().expect("lock").remove(&(s.id, *n));
                        s.send_from_server(codec::splice(&line, span, &n.to_string()));
                        return;
                    }
                }
            }
            // A task's status (2025-11-25), or the tasks extension's notice: to the session that
            // was handed the task, under the id it knows, and nobody else.
            "notifications/tasks/status" | "notifications/tasks" => self.task_notification(inst, line, &env),
            "notifications/elicitation/complete" => {
                // Only the session that was asked may hear that the user finished.
                let key = elicitation_id(&line, env.params.as_ref()).map(|id| (inst.number(), id));
                let to = key.and_then(|k| self.elicitations.lock().expect("lock").remove(&k));
                match to.and_then(|s| self.session(s)) {
                    Some(s) => s.send_from_server(line),
                    None => {
                        tracing::debug!(instance = %inst.label(), "dropped elicitation/complete for an elicitation no connected session was given")
                    }
                }
            }
            _ => {
                let kind = method.strip_prefix("notifications/").and_then(|m| m.strip_suffix("/list_changed"));
                // An affinity instance's lists are its session's own (a stateful server may add
                // tools per session): its notices go to that session as they come.
                if let Some(kind) = kind.and_then(|k| LIST_KINDS.into_iter().find(|l| *l == k))
                    && inst.owner.is_none()
                {
                    return self.list_changed(inst, kind, line);
                }
                for s in self.audience(inst) {
                    s.send_from_server(line.clone());
                }
            }
        }
    }

    /// A notification about one task: to the session that was handed it, under the id that
    /// session knows it by. A task no session was handed (or whose session left) is nobody's.
    fn task_notification(&self, inst: &Instance, line: String, env: &Envelope) {
        let Some(params) = env.params.as_ref() else { return };
        let fields = codec::param_fields(&line, params);
        let Some(upstream) = fields.task_id.and_then(|s| serde_json::from_str::<String>(&line[s]).ok()) else {
            return;
        };
        let Some(session) = self.tasks.session_of(inst.number(), &upstream) else {
            tracing::debug!(instance = %inst.label(), "dropped a notice about task {upstream}, which no session was handed");
            return;
        };
        let p = &line[params.clone()];
        if let Some(status) = tasks::status_in(p) {
            self.tasks.saw_status(inst.number(), &upstream, &status);
        }
        let client_id =
            tasks::seal(&self.server, &tasks::Route { instance: inst.number(), session, upstream: upstream.clone() });
        let rewritten = match tasks::replace_task_id(p, &upstream, &client_id) {
            Some(new) => codec::splice(&line, params.clone(), &new),
            None => line,
        };
        // A task of the 2026-07-28 era belongs to no session: its notices travel on the listen
        // stream that asked for them, never to whoever is connected.
        match self.session(session).filter(|_| session != tasks::NO_SESSION) {
            Some(s) => s.send_from_server(rewritten),
            None => {
                tracing::debug!(instance = %inst.label(), "dropped a notice about task {upstream}: its session is not connected")
            }
        }
    }

    /// A log message: to the session whose call it belongs to, at the level that session asked
    /// for. When no one session can be named, nobody gets it (counted): a log may carry one
    /// client's data. A pool instance starting up logs to nobody either: clients never see it start.
    fn server_log(&self, inst: &Instance, line: String, level: Option<&str>) {
        if self.spoken_for(inst) {
            tracing::debug!(instance = %inst.label(), "withheld a log message another instance of the pool speaks for");
            return;
        }
        let target = match self.attribute_log(inst) {
            Attribution::Session(id) => self.session(id).ok_or_else(|| "its session has disconnected".to_string()),
            Attribution::Unclear(why) => Err(why),
        };
        match target {
            Ok(s) => {
                let rank = level.and_then(level_rank).unwrap_or(7);
                let wanted = *s.log_level.lock().expect("lock");
                if wanted.is_none_or(|w| rank <= w) {
                    s.send_from_server(line);
                }
            }
            Err(why) => {
                let n = self.withheld_logs.fetch_add(1, Ordering::Relaxed) + 1;
                // Once, then now and then: a chatty server must not flood the router's log.
                if n == 1 || n.is_multiple_of(100) {
                    tracing::info!(
                        server = %self.server, instance = %inst.label(),
                        "withheld a log message of the server from every client ({n} so far): {why}. For a server that logs during calls, affinity = \"session\" delivers every message to its session"
                    );
                } else {
                    tracing::debug!(instance = %inst.label(), "withheld a log message: {why}");
                }
            }
        }
    }
}
