//! A server's own requests to a client (sampling, elicitation, roots, ...): to the session whose
//! call caused them, and the client's responses back to the instance that asked.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::roots::RootsState;
use super::{Attribution, Fanout};
use crate::peer::ClientPeer;
use crate::server::tasks;
use crate::upstream::Instance;
use switchyard_core::codec::{self, Envelope};

/// The task a server's request is made for (`_meta` related-task), if it names one.
fn related_task(line: &str, params: Option<&std::ops::Range<usize>>) -> Option<String> {
    let p = &line[params?.clone()];
    if !p.contains(tasks::RELATED_TASK) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(p).ok()?;
    v["_meta"][tasks::RELATED_TASK]["taskId"].as_str().map(str::to_string)
}

/// `params.elicitationId` of a URL-mode elicitation or its completion notice.
pub(super) fn elicitation_id(line: &str, params: Option<&std::ops::Range<usize>>) -> Option<String> {
    let text = &line[params?.clone()];
    if !text.contains("elicitationId") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("elicitationId")?.as_str().map(str::to_string)
}

impl Fanout {
    /// A request from the server to a client (sampling, elicitation, roots, ...): to the session
    /// whose call caused it, never to another one. roots/list is answered from the roots the
    /// clients gave when they agree, so a starting instance does not show.
    pub(super) fn on_server_request(self: &Arc<Self>, inst: &Arc<Instance>, line: String, env: Envelope) {
        let method = env.method.clone().unwrap_or_default().into_owned();
        // A request on behalf of a task (elicitation while it waits for input) is for the session
        // that was handed the task, whoever else has calls on the instance.
        let task = related_task(&line, env.params.as_ref())
            .and_then(|up| self.tasks.session_of(inst.number(), &up).map(|s| (up, s)))
            .filter(|(_, s)| *s != tasks::NO_SESSION);
        let attribution = match &task {
            Some((_, session)) => Attribution::Session(*session),
            None => self.attribute(inst),
        };
        // The task's id as the session knows it (the params change length: the id's place is
        // found again by parsing the new line).
        let sealed = task.as_ref().zip(env.params.as_ref()).and_then(|((upstream, session), params)| {
            let route = tasks::Route { instance: inst.number(), session: *session, upstream: upstream.clone() };
            let new = tasks::replace_task_id(&line[params.clone()], upstream, &tasks::seal(&self.server, &route))?;
            let rewritten = codec::splice(&line, params.clone(), &new);
            codec::parse(&rewritten).ok().map(|e| (rewritten, e))
        });
        let (line, env) = sealed.unwrap_or((line, env));
        self.deliver_request(inst, line, env, attribution, method)
    }

    /// A server's request to the session `attribution` names, or refused when none is.
    fn deliver_request(
        self: &Arc<Self>,
        inst: &Arc<Instance>,
        line: String,
        env: Envelope,
        attribution: Attribution,
        method: String,
    ) {
        let id_span = env.id.clone().expect("requests have ids");
        if method == "roots/list"
            && let Some(why) = self.owner.upgrade().and_then(|s| s.roots_unshared())
        {
            let why =
                format!("switchyard refused `roots/list` from server `{}` ({}): {why}", self.server, inst.label());
            tracing::warn!("{why}");
            Self::reply_to(inst, codec::response_error(&line[id_span], codec::INTERNAL_ERROR, &why, None));
            return;
        }
        if method == "roots/list"
            && let Some(result) = self.cached_roots(&attribution)
        {
            Self::reply_to(inst, codec::response_ok(&line[id_span], &result));
            return;
        }
        if method == "roots/list" {
            let waits = match &attribution {
                Attribution::Session(id) => self.roots.lock().expect("lock").get(id) == Some(&RootsState::Refreshing),
                Attribution::Unclear(_) => self.roots_pending(),
            };
            if waits {
                return self.park_roots_ask(inst, line, env, attribution);
            }
        }
        self.route_server_request(inst, line, env, attribution);
    }

    /// [`Fanout::deliver_request`] past the roots switchyard answers itself.
    pub(super) fn route_server_request(
        &self,
        inst: &Arc<Instance>,
        line: String,
        env: Envelope,
        attribution: Attribution,
    ) {
        let method = env.method.clone().unwrap_or_default();
        let id_span = env.id.clone().expect("requests have ids");
        let target = match attribution {
            Attribution::Session(id) => {
                self.session(id).ok_or_else(|| "the session it belongs to has disconnected".to_string())
            }
            Attribution::Unclear(why) => Err(why),
        };
        let link = match target {
            Ok(link) => link,
            Err(why) => {
                let why = format!(
                    "switchyard refused `{method}` from server `{}` ({}): it cannot tell which client it is for, because {why}. It is never sent to another client. For servers that call back into clients, use a pool with affinity = \"session\"",
                    self.server,
                    inst.label(),
                );
                tracing::warn!("{why}");
                Self::reply_to(inst, codec::response_error(&line[id_span], codec::INTERNAL_ERROR, &why, None));
                return;
            }
        };
        if let Some(needed) = link.lacks_capability_for(&method) {
            let why = format!(
                "switchyard refused `{method}` from server `{}` ({}): the client of session {} did not declare the `{needed}` capability in its initialize, so it cannot be asked",
                self.server,
                inst.label(),
                link.id,
            );
            tracing::debug!("{why}");
            Self::reply_to(inst, codec::response_error(&line[id_span], codec::METHOD_NOT_FOUND, &why, None));
            return;
        }
        let n = link.next_out.fetch_add(1, Ordering::Relaxed);
        link.outbound.lock().expect("lock").insert(n, (Arc::downgrade(inst), line[id_span.clone()].to_string()));
        if method == "roots/list" {
            self.roots_asked.lock().expect("lock").insert((link.id, n));
        }
        if method == "elicitation/create"
            && let Some(id) = elicitation_id(&line, env.params.as_ref())
        {
            self.elicitations.lock().expect("lock").insert((inst.number(), id), link.id);
        }
        link.send_from_server(codec::splice(&line, id_span, &n.to_string()));
    }

    /// A client's response to a server-to-client request: back to the instance that asked (or,
    /// for switchyard's own roots/list, into the roots it keeps).
    pub fn client_response(&self, link: &ClientPeer, line: &str, env: &Envelope) {
        let Some(span) = env.id.clone() else {
            tracing::warn!(session = link.id, "dropped an error response with id null from the client");
            return;
        };
        let own = {
            let mut asks = self.own_asks.lock().expect("lock");
            let mine = asks.get(&line[span.clone()]).is_some_and(|(s, _)| *s == link.id);
            if mine { asks.remove(&line[span.clone()]) } else { None }
        };
        if let Some((_, done)) = own {
            let _ = done.send(Self::roots_in(line, env));
            return;
        }
        let n = line[span.clone()].parse::<u64>().ok();
        let entry = n.and_then(|n| link.outbound.lock().expect("lock").remove(&n));
        let Some((inst, upstream_id)) = entry else {
            tracing::warn!(session = link.id, id = &line[span], "dropped a response to an unknown request id");
            return;
        };
        if let Some(n) = n
            && self.roots_asked.lock().expect("lock").remove(&(link.id, n))
        {
            let roots = Self::roots_in(line, env);
            if let (Some(r), Some(server)) = (&roots, self.owner.upgrade()) {
                server.roots_learned(link.id, r);
            }
            self.set_roots(link.id, roots);
        }
        let Some(inst) = inst.upgrade() else { return };
        let rewritten = codec::splice(line, span, &upstream_id);
        let _ = inst.write(rewritten);
    }
}
