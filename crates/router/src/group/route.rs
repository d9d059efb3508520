//! A group session's id tables and the routing of each message: the client's requests to the
//! member that runs them (by name or URI, through the catalog) and their responses back; a
//! member's requests to the client under ids of the group's own, and the client's answers
//! back to that member; cancels both ways; notifications.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;
use tokio::sync::oneshot;

use super::GroupSession;
use super::catalog::{List, Routed, Unrouted};
use super::member::State;
use crate::peer::Out;
use switchyard_core::codec;

/// Who waits for the response to a request the group sent a member.
pub(super) enum Waiter {
    /// The client, under its own id.
    Client(Value),
    /// The group itself (initialize, a page of a list).
    Internal(oneshot::Sender<Value>),
}

/// The id tables of a group session.
#[derive(Default)]
pub(super) struct Routes {
    /// (member, id sent to it) -> who waits for its response.
    pending: HashMap<(usize, u64), Waiter>,
    /// A client's request in flight (its id as JSON text) -> (member, id sent to it).
    by_client: HashMap<String, (usize, u64)>,
    /// Requests of a member to the client, by the id the client sees -> (member, its own id).
    outbound: HashMap<u64, (usize, Value)>,
    next_out: u64,
}

impl GroupSession {
    /// One message of the client.
    pub(super) fn on_client_line(self: &Arc<Self>, line: String) {
        let msg: Value = match serde_json::from_str(&line) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return self.error(&Value::Null, codec::INVALID_REQUEST, "a message must be a JSON object"),
            Err(e) => return self.error(&Value::Null, codec::PARSE_ERROR, &format!("Parse error: {e}")),
        };
        let method = msg.get("method").and_then(Value::as_str).map(str::to_string);
        match (method, msg.get("id").cloned()) {
            (Some(method), Some(id)) => self.request(&method, id, msg),
            (Some(method), None) => self.notification(&method, msg),
            (None, Some(id)) => self.answer(id, msg),
            (None, None) => self.error(&Value::Null, codec::INVALID_REQUEST, "a message needs a method or an id"),
        }
    }

    /// A request of the client.
    fn request(self: &Arc<Self>, method: &str, id: Value, msg: Value) {
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let route = match method {
            "initialize" => return self.clone().initialize(id, params),
            "ping" => return self.reply(&id, serde_json::json!({})),
            "logging/setLevel" => {
                for i in 0..self.members.len() {
                    if self.members[i].declares("logging") {
                        drop(self.ask(i, method, params.clone()));
                    }
                }
                return self.reply(&id, serde_json::json!({}));
            }
            // Search mode: two tools in place of the list (group/search.rs).
            "tools/list" if self.searching() => return self.clone().search_list(id),
            "tools/call" if self.searching() && super::search::is_search_tool(str_at(&params, &["name"])) => {
                return self.clone().search_tools_call(id, msg);
            }
            m if let Some(list) = List::of_method(m) => return self.clone().list(id, list),
            "tools/call" => self.catalog().route_name(List::Tools, str_at(&params, &["name"])),
            "prompts/get" => self.catalog().route_name(List::Prompts, str_at(&params, &["name"])),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                self.catalog().route_uri(str_at(&params, &["uri"]))
            }
            "completion/complete" => match str_at(&params, &["ref", "type"]) {
                "ref/prompt" => self.catalog().route_name(List::Prompts, str_at(&params, &["ref", "name"])),
                _ => self.catalog().route_uri(str_at(&params, &["ref", "uri"])),
            },
            _ => {
                return self.error(
                    &id,
                    codec::METHOD_NOT_FOUND,
                    &format!("`{}` is not served through a group (group `{}`); connect to one server (switchyard connect NAME) for it", method.chars().take(64).collect::<String>(), self.group),
                );
            }
        };
        match route {
            Ok(r) => self.forward(method, id, msg, r),
            Err(Unrouted::Unknown(why)) => self.error(&id, codec::INVALID_PARAMS, &why),
        }
    }

    /// Sends a client's request on to the member `r` names, under an id of the group's, with
    /// the name or URI its server knows.
    pub(super) fn forward(&self, method: &str, id: Value, mut msg: Value, r: Routed) {
        let member = &self.members[r.member];
        if let Some(why) = member.unusable() {
            return self.error(
                &id,
                codec::SERVER_UNAVAILABLE,
                &format!(
                    "server `{}` of group `{}` is not available: {why}; the group's other servers still work",
                    member.server, self.group
                ),
            );
        }
        let params = &mut msg["params"];
        match method {
            "tools/call" | "prompts/get" => params["name"] = Value::String(r.original),
            "completion/complete" if params["ref"]["type"] == "ref/prompt" => {
                params["ref"]["name"] = Value::String(r.original)
            }
            _ => {}
        }
        let n = member.next_id();
        msg["id"] = Value::from(n);
        {
            let mut routes = self.routes.lock().expect("lock");
            routes.pending.insert((r.member, n), Waiter::Client(id.clone()));
            routes.by_client.insert(id.to_string(), (r.member, n));
        }
        if !member.send(msg.to_string()) {
            self.take_pending(r.member, n);
            self.error(
                &id,
                codec::SERVER_UNAVAILABLE,
                &format!("server `{}` of group `{}` is not available: its session ended", member.server, self.group),
            );
        }
    }

    /// Sends member `i` a request of the group's own; the receiver gets its response.
    pub(super) fn ask(&self, i: usize, method: &str, params: Value) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        let member = &self.members[i];
        let n = member.next_id();
        let mut msg = serde_json::json!({"jsonrpc": "2.0", "id": n, "method": method});
        if !params.is_null() {
            msg["params"] = params;
        }
        self.routes.lock().expect("lock").pending.insert((i, n), Waiter::Internal(tx));
        if !member.send(msg.to_string()) {
            // The sender goes with it: the receiver hears that no answer comes.
            self.take_pending(i, n);
        }
        rx
    }

    fn take_pending(&self, i: usize, n: u64) -> Option<Waiter> {
        let mut routes = self.routes.lock().expect("lock");
        let w = routes.pending.remove(&(i, n));
        if let Some(Waiter::Client(id)) = &w {
            routes.by_client.remove(&id.to_string());
        }
        w
    }

    /// A notification of the client.
    fn notification(&self, method: &str, mut msg: Value) {
        match method {
            "notifications/cancelled" => {
                let id = msg["params"]["requestId"].to_string();
                let Some((i, n)) = self.routes.lock().expect("lock").by_client.remove(&id) else { return };
                self.routes.lock().expect("lock").pending.remove(&(i, n));
                msg["params"]["requestId"] = Value::from(n);
                self.members[i].send(msg.to_string());
            }
            // Progress of a request of the client's own: no member sent it.
            "notifications/progress" => {}
            _ => {
                if method == "notifications/initialized" {
                    self.initialised.store(true, Ordering::SeqCst);
                }
                let line = msg.to_string();
                for m in &self.members {
                    m.send(line.clone());
                }
            }
        }
    }

    /// The client's answer to a member's request: back to that member, under its own id.
    fn answer(&self, id: Value, mut msg: Value) {
        let Some(k) = id.as_u64() else { return };
        let Some((i, theirs)) = self.routes.lock().expect("lock").outbound.remove(&k) else {
            tracing::debug!(session = %self.label, "an answer to no request of a server; dropped");
            return;
        };
        msg["id"] = theirs;
        self.members[i].send(msg.to_string());
    }

    /// One message member `i`'s session wrote for its client (the group).
    pub(super) fn on_member_line(self: &Arc<Self>, i: usize, out: Out) {
        if crate::control::is_control(&out.line) {
            return;
        }
        let Ok(mut msg) = serde_json::from_str::<Value>(&out.line) else { return };
        let method = msg.get("method").and_then(Value::as_str).map(str::to_string);
        let id = msg.get("id").cloned();
        // The client's request it is about, under the client's id.
        let related = out.related.as_deref().and_then(|r| r.parse::<u64>().ok()).and_then(|n| {
            match self.routes.lock().expect("lock").pending.get(&(i, n)) {
                Some(Waiter::Client(id)) => Some(id.to_string()),
                _ => None,
            }
        });
        match (method, id) {
            (None, Some(id)) => {
                let Some(n) = id.as_u64() else { return };
                match self.take_pending(i, n) {
                    Some(Waiter::Client(theirs)) => {
                        msg["id"] = theirs;
                        self.send(&msg);
                    }
                    Some(Waiter::Internal(tx)) => {
                        let _ = tx.send(msg);
                    }
                    None => {
                        tracing::debug!(session = %self.label, "a response to a request no longer waited for; dropped")
                    }
                }
            }
            (Some(_), Some(theirs)) => {
                let k = {
                    let mut routes = self.routes.lock().expect("lock");
                    routes.next_out += 1;
                    let k = routes.next_out;
                    routes.outbound.insert(k, (i, theirs));
                    k
                };
                msg["id"] = Value::from(k);
                self.send_related(&msg, related);
            }
            (Some(method), None) => {
                // Said to the client only if the list it sees changed (see `list_may_have_changed`).
                if method == "notifications/tools/list_changed" {
                    return self.list_may_have_changed(List::Tools);
                }
                if method == "notifications/cancelled" {
                    let theirs = msg["params"]["requestId"].clone();
                    let mut routes = self.routes.lock().expect("lock");
                    let k = routes.outbound.iter().find(|(_, (m, id))| *m == i && *id == theirs).map(|(k, _)| *k);
                    let Some(k) = k else { return };
                    routes.outbound.remove(&k);
                    drop(routes);
                    msg["params"]["requestId"] = Value::from(k);
                }
                self.send_related(&msg, related);
            }
            (None, None) => {}
        }
    }

    fn send_related(&self, msg: &Value, related: Option<String>) {
        match related {
            Some(id) => self.peer.send_for(&id, msg.to_string()),
            None => self.send(msg),
        }
    }

    /// Member `i`'s session ended: it is down, and what waited for it is answered.
    pub(super) fn member_ended(&self, i: usize, why: &str) {
        let member = &self.members[i];
        member.close_input();
        {
            let mut state = member.state.lock().expect("lock");
            if !matches!(*state, State::Down(_)) {
                *state = State::Down(why.to_string());
            }
        }
        self.fail_member(i, &format!("server `{}` of group `{}`: {why}", member.server, self.group));
    }

    /// Answers the client's requests that wait for member `i` with `why`; the group's own
    /// waiters hear that no answer comes.
    fn fail_member(&self, i: usize, why: &str) {
        let waiting: Vec<Waiter> = {
            let mut routes = self.routes.lock().expect("lock");
            let keys: Vec<(usize, u64)> = routes.pending.keys().filter(|(m, _)| *m == i).copied().collect();
            let gone: Vec<Waiter> = keys.iter().filter_map(|k| routes.pending.remove(k)).collect();
            for w in &gone {
                if let Waiter::Client(id) = w {
                    routes.by_client.remove(&id.to_string());
                }
            }
            routes.outbound.retain(|_, (m, _)| *m != i);
            gone
        };
        for w in waiting {
            if let Waiter::Client(id) = w {
                self.error(&id, codec::SERVER_UNAVAILABLE, why);
            }
        }
    }

    /// The session ends: whatever still waits is dropped, and answered when `listening`.
    pub(super) fn fail_all(&self, listening: bool) {
        let waiting: Vec<Waiter> = self.routes.lock().expect("lock").pending.drain().map(|(_, w)| w).collect();
        for w in waiting {
            if let (Waiter::Client(id), true) = (w, listening) {
                self.error(
                    &id,
                    codec::SERVER_UNAVAILABLE,
                    &format!("group `{}`: the session ended before the server answered", self.group),
                );
            }
        }
    }

    pub(super) fn catalog(&self) -> std::sync::MutexGuard<'_, super::Catalog> {
        self.catalog.lock().expect("lock")
    }
}

/// The string at `path` in `v`, or "" (then nothing matches it, and the error says so).
fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(v, |v, k| v.get(*k)).and_then(Value::as_str).unwrap_or("")
}
