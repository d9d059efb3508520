//! Routes a server's own requests and notifications to the right sessions; tracks roots and subscriptions.
//!
//! Here: the sessions on a server, whom what an instance sends belongs to, their log levels and
//! subscriptions. The children hold the rest: `requests` (a server's requests to clients and
//! their responses), `notifications`, `roots` (the clients' roots) and `lists` (list_changed).

mod lists;
mod notifications;
mod requests;
mod roots;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use crate::peer::ClientPeer;
use crate::upstream::{Instance, Owners};
use lists::ListWatch;
pub(crate) use lists::sort_list;
use roots::{Parked, RootsAnswer, RootsState};
use switchyard_core::codec::{self, Envelope};
use switchyard_core::decision::Caller;
use switchyard_core::ids::SessionId;

/// Whom a message that an instance sent on its own (a request to a client, a log) belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribution {
    Session(SessionId),
    /// No one session can be named: why (for the error to the server, or the log line).
    Unclear(String),
}

/// The attribution rule for what an instance sends on its own. Its own session for an affinity
/// instance; else the one session whose calls may have caused it, as long as one of them is still
/// live (an abandoned call's client has stopped listening: refusing beats asking someone else);
/// with nothing in flight at all, the only session connected, if there is just one.
pub fn attribute(owner: Option<SessionId>, owners: &Owners, attached: &[SessionId]) -> Attribution {
    if let Some(o) = owner {
        return Attribution::Session(o);
    }
    let mut candidates: Vec<SessionId> = owners.live.iter().chain(&owners.abandoned).copied().collect();
    candidates.sort_unstable();
    candidates.dedup();
    match candidates.as_slice() {
        [one] if !owners.live.is_empty() => Attribution::Session(*one),
        [] => match attached {
            [only] => Attribution::Session(*only),
            _ => Attribution::Unclear(format!("no call is in flight on it and {} sessions are connected", attached.len())),
        },
        _ if owners.live.is_empty() => Attribution::Unclear(
            "the call that caused it is no longer waiting for it (it was cancelled or timed out, or its client disconnected) while the server kept working"
                .into(),
        ),
        _ => Attribution::Unclear(format!(
            "calls of {} sessions are on it{}",
            candidates.len(),
            if owners.abandoned.is_empty() { "" } else { ", some cancelled or timed out but still running on the server" }
        )),
    }
}

/// What the hub needs of the server it belongs to (implemented by `server::Server`; a trait so
/// the hub, which comes before the server in the module order, does not name it).
pub trait Upstreams: Send + Sync + 'static {
    /// Every instance alive now.
    fn instances(&self) -> Vec<Arc<Instance>>;
    /// An instance seems to answer one request at a time (see [`crate::upstream::Events`]).
    fn answers_one_at_a_time(&self, inst: &Instance, waited: Duration);
    /// A client's roots, learned from its answer to the server's own roots/list.
    fn roots_learned(&self, session: SessionId, roots: &serde_json::Value);
    /// Why the server's instances may not be told one client's roots now (see
    /// `Server::roots_unshared`); None: they may.
    fn roots_unshared(&self) -> Option<String>;
    /// The roots of the profile the server serves, as a roots/list result, once known: every
    /// client on its instances has them.
    fn profile_roots(&self) -> Option<String>;
    /// The whole `{kind}/list` of an instance (None: it could not be fetched).
    fn fetch_list<'a>(
        &'a self,
        inst: &'a Instance,
        kind: &'static str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Vec<serde_json::Value>>> + Send + 'a>>;
    /// Whether the tool list the client of `link` is shown (after the plugins, its budget, its
    /// search mode) differs from the one it was last shown, now that the server lists `items`.
    fn tools_differ_for<'a>(
        &'a self,
        link: &'a Arc<ClientPeer>,
        items: &'a [serde_json::Value],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>>;
}

/// Routes a server's notifications and requests to sessions; tracks subscriptions.
pub struct Fanout {
    server: String,
    /// The server this hub belongs to (for fetching lists and reaching instances).
    owner: Weak<dyn Upstreams>,
    /// How long a call whose client stopped waiting still counts as an owner of what the
    /// server sends (it may still be running there): one call timeout.
    linger: Duration,
    sessions: RwLock<BTreeMap<SessionId, Arc<ClientPeer>>>,
    subscriptions: super::subscriptions::Subscriptions,
    roots: Mutex<HashMap<SessionId, RootsState>>,
    /// roots/list requests of servers handed to clients: (session, id the session sees).
    roots_asked: Mutex<BTreeSet<(SessionId, u64)>>,
    /// switchyard's own roots/list requests to clients, by id text: the session, and who waits.
    own_asks: Mutex<HashMap<String, (SessionId, RootsAnswer)>>,
    /// roots/list requests of instances that wait while switchyard asks its clients for their
    /// roots (so a starting instance is answered with the roots of its clients, not refused).
    parked_roots: Mutex<Vec<Parked>>,
    next_ask: AtomicU64,
    /// Each list kind as clients were last shown it (sorted): a tools/list that passed through,
    /// or what switchyard fetched when it passed a list_changed on (clients then fetch it too).
    lists: Mutex<HashMap<&'static str, Vec<serde_json::Value>>>,
    list_watch: Mutex<HashMap<&'static str, ListWatch>>,
    /// Log messages that belonged to no one session and so went to nobody.
    withheld_logs: AtomicU64,
    /// list_changed notices that changed nothing clients were shown.
    absorbed: AtomicU64,
    /// Clients' roots/list_changed not passed to an instance that stopped reading.
    dropped_roots_notices: AtomicU64,
    /// URL-mode elicitations handed to a session, by (instance number, elicitationId): their
    /// `notifications/elicitation/complete` goes to that session only.
    elicitations: Mutex<HashMap<(u64, String), SessionId>>,
    /// The tasks clients were handed: their instance and session (their notifications go to
    /// that session only) and the gates their creating calls still hold.
    pub tasks: Arc<super::tasks::Tasks>,
}

impl crate::upstream::Events for Fanout {
    fn server_request(self: Arc<Self>, from: &Arc<Instance>, line: String, env: Envelope) {
        self.on_server_request(from, line, env);
    }
    fn server_notification(self: Arc<Self>, from: &Arc<Instance>, line: String, env: Envelope) {
        self.on_server_notification(from, line, env);
    }
    fn linger(&self) -> Duration {
        self.linger
    }
    fn answers_one_at_a_time(&self, from: &Instance, waited: Duration) {
        if let Some(server) = self.owner.upgrade() {
            server.answers_one_at_a_time(from, waited);
        }
    }
}

impl Fanout {
    pub fn new(server: &str, linger: Duration, owner: Weak<dyn Upstreams>) -> Arc<Fanout> {
        Arc::new(Fanout {
            server: server.to_string(),
            owner,
            linger,
            sessions: RwLock::new(BTreeMap::new()),
            subscriptions: Default::default(),
            roots: Mutex::new(HashMap::new()),
            roots_asked: Mutex::new(BTreeSet::new()),
            own_asks: Mutex::new(HashMap::new()),
            parked_roots: Mutex::new(Vec::new()),
            next_ask: AtomicU64::new(1),
            lists: Mutex::new(HashMap::new()),
            list_watch: Mutex::new(HashMap::new()),
            withheld_logs: AtomicU64::new(0),
            absorbed: AtomicU64::new(0),
            dropped_roots_notices: AtomicU64::new(0),
            elicitations: Mutex::new(HashMap::new()),
            tasks: Arc::default(),
        })
    }

    /// How long an abandoned call still owns what its instance sends.
    pub fn linger(&self) -> Duration {
        self.linger
    }

    pub fn attach(&self, link: Arc<ClientPeer>) {
        self.sessions.write().expect("lock").insert(link.id, link);
    }

    /// Removes a session, its subscriptions and what it told of its roots.
    pub fn detach(&self, id: SessionId) {
        self.sessions.write().expect("lock").remove(&id);
        self.subscriptions.remove_session(id);
        self.roots.lock().expect("lock").remove(&id);
        self.roots_asked.lock().expect("lock").retain(|(s, _)| *s != id);
        self.own_asks.lock().expect("lock").retain(|_, (s, _)| *s != id);
        self.elicitations.lock().expect("lock").retain(|_, s| *s != id);
        self.answer_parked_roots();
    }

    pub fn session(&self, id: SessionId) -> Option<Arc<ClientPeer>> {
        self.sessions.read().expect("lock").get(&id).cloned()
    }

    /// The sessions on this server now.
    pub fn session_ids(&self) -> Vec<SessionId> {
        self.sessions.read().expect("lock").keys().copied().collect()
    }

    pub fn session_count(&self) -> usize {
        self.sessions.read().expect("lock").len()
    }

    /// Who the connected clients are, as the policy is told.
    pub fn callers(&self) -> Vec<Caller> {
        self.sessions.read().expect("lock").values().map(|s| s.caller()).collect()
    }

    /// Sends a line to every session.
    pub fn broadcast(&self, line: &str) {
        for s in self.sessions.read().expect("lock").values() {
            s.send_from_server(line.to_string());
        }
    }

    /// Sessions that may see traffic of `inst`: its owner only, for affinity instances.
    fn audience(&self, inst: &Instance) -> Vec<Arc<ClientPeer>> {
        let sessions = self.sessions.read().expect("lock");
        match inst.owner {
            Some(owner) => sessions.get(&owner).cloned().into_iter().collect(),
            None => sessions.values().cloned().collect(),
        }
    }

    /// The session something `inst` sent on its own belongs to, by [`attribute`].
    fn attribute(&self, inst: &Instance) -> Attribution {
        let attached: Vec<SessionId> = self.sessions.read().expect("lock").keys().copied().collect();
        attribute(inst.owner, &inst.owners(self.linger), &attached)
    }

    /// The session a log message of `inst` belongs to. Unlike a request, a log needs no answer,
    /// so an abandoned call's log may still go to its own session, and so may a log that trails
    /// a call just answered (within [`crate::upstream::instance::LOG_TRAIL`], when no call is on
    /// the instance): only a stranger must not see it.
    fn attribute_log(&self, inst: &Instance) -> Attribution {
        let attached: Vec<SessionId> = self.sessions.read().expect("lock").keys().copied().collect();
        let owners = inst.owners(self.linger);
        let mut live: Vec<SessionId> = owners.live.iter().chain(&owners.abandoned).copied().collect();
        // Calls that ended lately count only when none is on it: a log during a call is that
        // call's far more often than the tail of one that ended.
        if live.is_empty() {
            live = owners.lately;
        }
        live.sort_unstable();
        live.dedup();
        attribute(inst.owner, &Owners { live, ..Owners::default() }, &attached)
    }

    /// The most verbose level any session asked for.
    pub fn wanted_level(&self) -> Option<u8> {
        let sessions = self.sessions.read().expect("lock");
        sessions.values().filter_map(|s| *s.log_level.lock().expect("lock")).max()
    }

    pub fn set_session_level(&self, id: SessionId, level: u8) {
        if let Some(s) = self.session(id) {
            *s.log_level.lock().expect("lock") = Some(level);
        }
    }

    /// The level one session asked for.
    pub fn session_level(&self, id: SessionId) -> Option<u8> {
        self.session(id).and_then(|s| *s.log_level.lock().expect("lock"))
    }

    pub fn subscribe(&self, id: SessionId, uri: &str) {
        self.subscriptions.subscribe(id, uri);
    }

    pub fn unsubscribe(&self, id: SessionId, uri: &str) {
        self.subscriptions.unsubscribe(id, uri);
    }

    /// URIs some session subscribed to (`Some(id)`: that session only).
    pub fn uris(&self, of: Option<SessionId>) -> BTreeSet<String> {
        self.subscriptions.uris(of)
    }

    /// Writes a line to an instance (queued: never waits).
    fn reply_to(inst: &Arc<Instance>, line: String) {
        let _ = inst.write(line);
    }

    /// An instance ended: its requests that clients still hold are withdrawn, so no client
    /// keeps a sampling or elicitation dialog open for a server that is gone.
    pub fn instance_gone(&self, inst: &Instance) {
        self.elicitations.lock().expect("lock").retain(|(n, _), _| *n != inst.number());
        self.tasks.instance_gone(inst.number());
        for s in self.sessions.read().expect("lock").values() {
            for n in s.take_outbound(inst, None) {
                self.roots_asked.lock().expect("lock").remove(&(s.id, n));
                let reason = codec::json_string(&format!("server instance {} ended", inst.label()));
                s.send_from_server(codec::notification(
                    "notifications/cancelled",
                    &format!(r#"{{"requestId":{n},"reason":{reason}}}"#),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(live: &[SessionId], abandoned: &[SessionId]) -> Owners {
        Owners { live: live.to_vec(), abandoned: abandoned.to_vec(), lately: Vec::new() }
    }

    fn unclear(a: Attribution) -> String {
        match a {
            Attribution::Unclear(why) => why,
            other => panic!("expected no session, got {other:?}"),
        }
    }

    #[test]
    fn a_message_belongs_to_the_one_session_with_live_calls() {
        use Attribution::Session;
        assert_eq!(attribute(None, &owners(&[2], &[]), &[1, 2, 3]), Session(2));
        // Its own abandoned calls do not make it ambiguous: no other session can be meant.
        assert_eq!(attribute(None, &owners(&[2], &[2]), &[1, 2]), Session(2));
        // An affinity instance's messages are its session's.
        assert_eq!(attribute(Some(3), &owners(&[], &[1]), &[1, 3]), Session(3));
        // Nothing in flight and one session connected: there is no stranger to leak to.
        assert_eq!(attribute(None, &owners(&[], &[]), &[4]), Session(4));
    }

    #[test]
    fn an_abandoned_call_is_never_attributed_to_another_session() {
        // A cancelled; B has a call in flight: the server may be working for either.
        let why = unclear(attribute(None, &owners(&[2], &[1]), &[1, 2]));
        assert!(why.contains("cancelled or timed out"), "{why}");
        // Only the abandoned call is there: its client no longer waits, nobody else is meant.
        let why = unclear(attribute(None, &owners(&[], &[1]), &[1]));
        assert!(why.contains("no longer waiting"), "{why}");
        // A disconnected session's abandoned call, B idle and alone.
        unclear(attribute(None, &owners(&[], &[7]), &[2]));
        // Two live sessions, or none and two connected.
        assert!(unclear(attribute(None, &owners(&[1, 2], &[]), &[1, 2])).contains("2 sessions"));
        assert!(unclear(attribute(None, &owners(&[], &[]), &[1, 2])).contains("no call is in flight"));
        unclear(attribute(None, &owners(&[], &[]), &[]));
    }
}
