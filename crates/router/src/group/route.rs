//! A group session's id tables and the routing of each message: the client's requests to the
//! member that runs them (by name or URI, through the catalog) and their responses back; a
//! member's requests to the client under ids of the group's own, and the client's answers
//! back to that member; cancels both ways; notifications.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;
use tokio::sync::oneshot;

use super::GroupSession;
use super::catalog::{List, Routed, Unrouted};
use super::member::State;
use crate::peer::Out;
use switchyard_core::call::Call;
use switchyard_core::codec;

/// Who waits for the response to a request the group sent a member.
pub(super) enum Waiter {
    /// The client, under its own id (its raw JSON text, as it came).
    Client(String),
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
    /// A request of the client, booked as open (its envelope and params read once: `id` is its
    /// raw text): routed from what its `Call` read, never from a second read of its params.
    pub(super) fn request(self: &Arc<Self>, call: Call) {
        let id = call.id().to_string();
        if call.params().is_some_and(|p| !p.starts_with('{')) {
            let why = format!("Invalid params: the `params` of `{}` must be an object", shown(call.method()));
            return self.error(&id, codec::INVALID_PARAMS, &why);
        }
        let (route, named) = match call.method() {
            "initialize" => return self.clone().initialize(id, params_of(&call)),
            "ping" => return self.reply(&id, serde_json::json!({})),
            "logging/setLevel" => {
                let params = params_of(&call);
                for i in 0..self.members.len() {
                    if self.members[i].declares("logging") {
                        drop(self.ask(i, "logging/setLevel", params.clone()));
                    }
                }
                return self.reply(&id, serde_json::json!({}));
            }
            // Search mode: two tools in place of the list (group/search.rs).
            "tools/list" if self.searching() => return self.clone().search_list(id),
            "tools/call" if self.searching() && call.name().is_some_and(|n| super::search::is_search_tool(&n)) => {
                return self.clone().search_tools_call(id, call);
            }
            m if let Some(list) = List::of_method(m) => return self.clone().list(id, list),
            // Routed by name: the range of the name, where the server's own goes.
            m @ ("tools/call" | "prompts/get") => match call.name() {
                Some(name) => {
                    let list = if m == "tools/call" { List::Tools } else { List::Prompts };
                    (self.catalog().route_name(list, &name), call.fields().name.clone())
                }
                None => return self.error(&id, codec::INVALID_PARAMS, &no_string(&call, &["name"])),
            },
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                match call.string(&call.fields().uri) {
                    Some(uri) => (self.catalog().route_uri(&uri), None),
                    None => return self.error(&id, codec::INVALID_PARAMS, &no_string(&call, &["uri"])),
                }
            }
            "completion/complete" => {
                let reference = call.reference().unwrap_or_default();
                match call.string(&reference.kind).as_deref() {
                    Some("ref/prompt") => match call.string(&reference.name) {
                        Some(name) => (self.catalog().route_name(List::Prompts, &name), reference.name.clone()),
                        None => return self.error(&id, codec::INVALID_PARAMS, &no_string(&call, &["ref", "name"])),
                    },
                    _ => match call.string(&reference.uri) {
                        Some(uri) => (self.catalog().route_uri(&uri), None),
                        None => return self.error(&id, codec::INVALID_PARAMS, &no_string(&call, &["ref", "uri"])),
                    },
                }
            }
            m => {
                return self.error(
                    &id,
                    codec::METHOD_NOT_FOUND,
                    &format!("`{}` is not served through a group (group `{}`); connect to one server (switchyard connect NAME) for it", shown(m), self.group),
                );
            }
        };
        match route {
            Ok(r) => self.forward(id, call, r, named),
            Err(Unrouted::Unknown(why)) => self.error(&id, codec::INVALID_PARAMS, &why),
        }
    }

    /// Sends a client's request (`id`: its raw id) on to the member `r` names, under an id of
    /// the group's, with the name its server knows at `named` (the range of the name the client
    /// gave): spliced into the line as it came, so the rest of it (its arguments) reaches the
    /// server byte for byte. The member's session is handed the `Call` with its ranges moved by
    /// the splices: it does not read it again.
    pub(super) fn forward(&self, id: String, mut call: Call, r: Routed, named: Option<Range<usize>>) {
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
        if let Some(at) = named {
            call = call.into_spliced(at, &codec::json_string(&r.original));
        }
        let n = member.next_id();
        let at = call.id_range();
        let call = call.into_spliced(at, &n.to_string());
        {
            let mut routes = self.routes.lock().expect("lock");
            routes.by_client.insert(id.clone(), (r.member, n));
            routes.pending.insert((r.member, n), Waiter::Client(id.clone()));
        }
        if !member.send_request(call) {
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
            routes.by_client.remove(id);
        }
        w
    }

    /// A notification of the client (`env`: its envelope in `line`).
    pub(super) fn notification(&self, line: String, env: &codec::Envelope) {
        let method = env.method.as_deref().unwrap_or_default();
        match method {
            "notifications/cancelled" => {
                let fields = env.params.as_ref().map(|p| codec::param_fields(&line, p)).unwrap_or_default();
                let Some(at) = fields.request_id else { return };
                let id = &line[at.clone()];
                // No answer is owed for it now, whatever answers it (a member, or a list the
                // group merges).
                let forwarded = self.routes.lock().expect("lock").by_client.remove(id);
                self.unowed(id, forwarded.is_some());
                let Some((i, n)) = forwarded else { return };
                self.routes.lock().expect("lock").pending.remove(&(i, n));
                self.members[i].send(codec::splice(&line, at, &n.to_string()));
            }
            // Progress of a request of the client's own: no member sent it.
            "notifications/progress" => {}
            _ => {
                if method == "notifications/initialized" {
                    self.initialised.store(true, Ordering::SeqCst);
                }
                for m in &self.members {
                    m.send(line.clone());
                }
            }
        }
    }

    /// The client's answer (`line`, envelope `env`) to a member's request: back to that
    /// member, under its own id.
    pub(super) fn answer(&self, line: String, env: &codec::Envelope) {
        let Some(at) = env.id.clone() else { return };
        let Ok(k) = line[at.clone()].parse::<u64>() else { return };
        let Some((i, theirs)) = self.routes.lock().expect("lock").outbound.remove(&k) else {
            tracing::debug!(session = %self.label, "an answer to no request of a server; dropped");
            return;
        };
        self.members[i].send(codec::splice_owned(line, at, &theirs.to_string()));
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
                Some(Waiter::Client(id)) => Some(id.clone()),
                _ => None,
            }
        });
        match (method, id) {
            (None, Some(id)) => {
                let Some(n) = id.as_u64() else { return };
                match self.take_pending(i, n) {
                    Some(Waiter::Client(theirs)) => {
                        // The client's id put back as the text it sent (a number past f64's
                        // precision, say), in the line as the member wrote it.
                        let at = codec::parse(&out.line).ok().and_then(|env| env.id);
                        match at {
                            Some(at) => self.to_client(&theirs, codec::splice_owned(out.line, at, &theirs)),
                            None => self.error(
                                &theirs,
                                codec::INTERNAL_ERROR,
                                &format!(
                                    "group `{}`: the answer of server `{}` could not be read",
                                    self.group, self.members[i].server
                                ),
                            ),
                        }
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
                    routes.by_client.remove(id);
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

/// The params of `call` as a tree, for the few requests the group answers from them itself
/// (initialize, logging/setLevel); Null when there are none.
fn params_of(call: &Call) -> Value {
    call.params().and_then(|p| serde_json::from_str(p).ok()).unwrap_or(Value::Null)
}

/// Why `call` has no string at `path` in its params: read again only for this error's words.
fn no_string(call: &Call, path: &[&str]) -> String {
    let method = call.method();
    let key = format!("params.{}", path.join("."));
    let params = params_of(call);
    match path.iter().try_fold(&params, |v, k| v.get(*k)) {
        Some(other) => {
            let shown_value: String = other.to_string().chars().take(64).collect();
            format!("Invalid params: `{key}` of `{}` must be a string, not {shown_value}", shown(method))
        }
        None => format!("Invalid params: `{}` needs `{key}`", shown(method)),
    }
}

/// A method as errors show it (the first 64 characters).
fn shown(method: &str) -> String {
    method.chars().take(64).collect()
}
