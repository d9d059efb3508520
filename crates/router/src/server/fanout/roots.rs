//! The roots of a server's clients: what switchyard knows of each, its own roots/list to them,
//! and the instances' roots/list it answers from them (or parks until it can).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Attribution, Fanout};
use crate::peer::ClientPeer;
use crate::upstream::Instance;
use switchyard_core::codec::{self, Envelope};
use switchyard_core::ids::SessionId;

/// Roots a server may be answered with on behalf of all these sessions: when switchyard knows
/// every one's roots (none unknown, none being asked again) and they are the same.
fn agreed_roots<'a>(states: impl IntoIterator<Item = Option<&'a RootsState>>) -> Option<&'a serde_json::Value> {
    let mut agreed: Option<&serde_json::Value> = None;
    for state in states {
        let Some(RootsState::Known(v)) = state else { return None };
        match agreed {
            None => agreed = Some(v),
            Some(a) if a == v => {}
            Some(_) => return None,
        }
    }
    agreed
}

/// Where the answer to switchyard's own roots/list goes (None: the client answered an error).
pub(super) type RootsAnswer = tokio::sync::oneshot::Sender<Option<serde_json::Value>>;

/// An instance's roots/list waiting for a client's roots: the instance, its request id, and the
/// session it belongs to (None: unclear, answered when the server's clients agree).
pub(super) struct Parked {
    inst: Weak<Instance>,
    id: String,
    session: Option<SessionId>,
}

/// What switchyard knows of one client's roots.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum RootsState {
    /// The `result` of the client's last answer to roots/list.
    Known(serde_json::Value),
    /// The client said its roots changed; switchyard has asked it and waits for the answer.
    Refreshing,
}

/// How long a client's roots/list_changed waits for switchyard to learn its new roots before the
/// change is passed on to the servers anyway.
const ROOTS_REFRESH_WAIT: Duration = Duration::from_secs(5);

impl Fanout {
    /// The roots to answer a roots/list with, when switchyard knows them: those of the session it
    /// belongs to; when that is unclear (an instance starting, say), those every connected
    /// session has, if they all agree. Never one session's roots for another's call.
    pub(super) fn cached_roots(&self, attribution: &Attribution) -> Option<String> {
        // The instance serves one profile, and so one set of roots, whichever of its clients it
        // asks for (one of them may be on its way to other instances).
        if matches!(attribution, Attribution::Unclear(_))
            && let Some(result) = self.owner.upgrade().and_then(|s| s.profile_roots())
        {
            return Some(result);
        }
        let roots = self.roots.lock().expect("lock");
        let agreed = match attribution {
            Attribution::Session(id) => agreed_roots([roots.get(id)]),
            Attribution::Unclear(_) => {
                let sessions = self.sessions.read().expect("lock");
                if sessions.is_empty() {
                    return None;
                }
                agreed_roots(sessions.keys().map(|id| roots.get(id)))
            }
        };
        agreed.map(|v| v.to_string())
    }

    /// Asks the client for its roots (switchyard's own roots/list) and waits for them, at most
    /// `wait`: what it answered (None: an error, or no answer in time). Meanwhile instances that
    /// ask for roots wait too. The answer is kept as the session's roots unless `keep` is false
    /// (the session is about to move to another server, which is told them instead).
    pub async fn fetch_roots(&self, link: &Arc<ClientPeer>, wait: Duration) -> Option<serde_json::Value> {
        let session = link.id;
        let id = format!("\"switchyard-roots-{}\"", self.next_ask.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.roots.lock().expect("lock").insert(session, RootsState::Refreshing);
        self.own_asks.lock().expect("lock").insert(id.clone(), (session, tx));
        link.send_from_server(codec::request(&id, "roots/list", "{}"));
        let got = match tokio::time::timeout(wait, rx).await {
            Ok(Ok(v)) => v,
            _ => {
                tracing::info!(
                    session,
                    "the client did not answer switchyard's roots/list within {wait:?}; servers will ask it themselves"
                );
                self.own_asks.lock().expect("lock").remove(&id);
                None
            }
        };
        self.set_roots(session, got.clone());
        got
    }

    /// The session's client declared roots and will be asked for them (once it is initialised):
    /// until then, instances that ask for roots wait rather than be refused. A client that is
    /// not asked within [`ROOTS_REFRESH_WAIT`] twice over counts as one whose roots are unknown.
    pub fn expect_roots(self: &Arc<Self>, session: SessionId) {
        self.roots.lock().expect("lock").insert(session, RootsState::Refreshing);
        let hub = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ROOTS_REFRESH_WAIT * 2).await;
            let asking = hub.own_asks.lock().expect("lock").values().any(|(s, _)| *s == session);
            let pending = hub.roots.lock().expect("lock").get(&session) == Some(&RootsState::Refreshing);
            if pending && !asking {
                hub.set_roots(session, None);
            }
        });
    }

    /// Records `roots` as the session's (None: unknown), and answers instances that waited.
    pub fn set_roots(&self, session: SessionId, roots: Option<serde_json::Value>) {
        {
            let mut known = self.roots.lock().expect("lock");
            match roots {
                Some(v) => known.insert(session, RootsState::Known(v)),
                None => known.remove(&session),
            };
        }
        self.answer_parked_roots();
    }

    /// Whether switchyard is asking a client of this server for its roots now.
    pub(super) fn roots_pending(&self) -> bool {
        self.roots.lock().expect("lock").values().any(|r| *r == RootsState::Refreshing)
    }

    /// An instance's roots/list waits while a client's roots are being asked for: it is
    /// answered when they are known (see [`Fanout::answer_parked_roots`]), or after
    /// [`ROOTS_REFRESH_WAIT`] goes the way it would have gone.
    pub(super) fn park_roots_ask(
        self: &Arc<Self>,
        inst: &Arc<Instance>,
        line: String,
        env: Envelope,
        attribution: Attribution,
    ) {
        let session = match attribution {
            Attribution::Session(id) => Some(id),
            Attribution::Unclear(_) => None,
        };
        let id = line[env.id.clone().expect("requests have ids")].to_string();
        self.parked_roots.lock().expect("lock").push(Parked { inst: Arc::downgrade(inst), id: id.clone(), session });
        let (hub, inst) = (self.clone(), inst.clone());
        tokio::spawn(async move {
            tokio::time::sleep(ROOTS_REFRESH_WAIT).await;
            let mut parked = hub.parked_roots.lock().expect("lock");
            let before = parked.len();
            parked.retain(|p| !(p.inst.as_ptr() == Arc::as_ptr(&inst) && p.id == id));
            let still = parked.len() != before;
            drop(parked);
            if still {
                hub.route_server_request(&inst, line, env, attribution);
            }
        });
    }

    /// Answers the instances' parked roots/list whose roots are known now: a session's own, or
    /// (for one whose session is unclear or gone) those the server's clients agree on.
    pub(super) fn answer_parked_roots(&self) {
        let parked = std::mem::take(&mut *self.parked_roots.lock().expect("lock"));
        if parked.is_empty() {
            return;
        }
        let mut kept = Vec::new();
        for p in parked {
            let attached = p.session.filter(|s| self.sessions.read().expect("lock").contains_key(s));
            let answer = match attached {
                Some(s) => self.cached_roots(&Attribution::Session(s)),
                None if self.roots_pending() => None,
                None => self.cached_roots(&Attribution::Unclear(String::new())),
            };
            match (answer, p.inst.upgrade()) {
                (Some(result), Some(inst)) => Self::reply_to(&inst, codec::response_ok(&p.id, &result)),
                (None, Some(_)) => kept.push(p),
                (_, None) => {}
            }
        }
        self.parked_roots.lock().expect("lock").extend(kept);
    }

    /// A client said its roots changed: switchyard asks for the new ones (when it keeps this
    /// client's roots) and returns them; the change is then passed on by
    /// [`Fanout::pass_roots_changed`], or the session moves to a server for its new roots.
    pub async fn refresh_roots(&self, link: &Arc<ClientPeer>) -> Option<serde_json::Value> {
        let known = self.roots.lock().expect("lock").get(&link.id).is_some();
        if !known {
            return None;
        }
        self.fetch_roots(link, ROOTS_REFRESH_WAIT).await
    }

    /// Passes a client's roots/list_changed on to the instances its session may use (which then
    /// ask again and are answered from the roots switchyard keeps).
    pub fn pass_roots_changed(&self, session: SessionId, line: String) {
        let Some(server) = self.owner.upgrade() else { return };
        let targets = server.instances().into_iter().filter(|i| i.is_ready() && i.owner.is_none_or(|o| o == session));
        for inst in targets {
            // Counted against the same unread budget as calls: a client that keeps saying its
            // roots changed to a server that stopped reading must not grow switchyard's memory.
            if !inst.is_writable() {
                let n = self.dropped_roots_notices.fetch_add(1, Ordering::Relaxed) + 1;
                if n == 1 || n.is_multiple_of(100) {
                    tracing::warn!(
                        instance = %inst.label(),
                        "dropped a client's roots/list_changed ({n} so far): the server has not read the last {} bytes sent to it",
                        inst.backlog()
                    );
                }
                continue;
            }
            let _ = inst.write(line.clone());
        }
    }

    /// A client's answer to roots/list, as JSON (`None`: it answered with an error).
    pub(super) fn roots_in(line: &str, env: &Envelope) -> Option<serde_json::Value> {
        env.result.as_ref().and_then(|r| serde_json::from_str::<serde_json::Value>(&line[r.clone()]).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_answered_by_switchyard_only_when_every_session_agrees() {
        let a = RootsState::Known(serde_json::json!({"roots": [{"uri": "file:///a"}]}));
        let a2 = RootsState::Known(serde_json::json!({"roots": [{"uri": "file:///a"}]}));
        let b = RootsState::Known(serde_json::json!({"roots": [{"uri": "file:///b"}]}));
        let want = serde_json::json!({"roots": [{"uri": "file:///a"}]});
        assert_eq!(agreed_roots([Some(&a)]), Some(&want));
        assert_eq!(agreed_roots([Some(&a), Some(&a2)]), Some(&want));
        assert_eq!(agreed_roots([Some(&a), None]), None, "a session whose roots are unknown may differ");
        assert_eq!(agreed_roots([Some(&a), Some(&b)]), None, "disagreement: ask a client");
        assert_eq!(agreed_roots([Some(&a), Some(&RootsState::Refreshing)]), None, "a change is being fetched");
        assert_eq!(agreed_roots([None, None]), None, "nothing known yet: ask a client");
    }
}
