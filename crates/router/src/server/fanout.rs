//! Routes a server's own requests and notifications to the right sessions; tracks roots and subscriptions.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use crate::peer::{ClientPeer, level_rank};
use crate::upstream::{Instance, Owners};
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

/// `params.elicitationId` of a URL-mode elicitation or its completion notice.
/// The task a server's request is made for (`_meta` related-task), if it names one.
fn related_task(line: &str, params: Option<&std::ops::Range<usize>>) -> Option<String> {
    let p = &line[params?.clone()];
    if !p.contains(super::tasks::RELATED_TASK) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(p).ok()?;
    v["_meta"][super::tasks::RELATED_TASK]["taskId"].as_str().map(str::to_string)
}

fn elicitation_id(line: &str, params: Option<&std::ops::Range<usize>>) -> Option<String> {
    let text = &line[params?.clone()];
    if !text.contains("elicitationId") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("elicitationId")?.as_str().map(str::to_string)
}

/// Puts a list's items in one order (by name, else URI), so that lists compare by content.
pub(crate) fn sort_list(items: &mut [serde_json::Value]) {
    items.sort_by_cached_key(|v| v.get("name").or_else(|| v.get("uri")).map(|k| k.to_string()));
}

/// Where the answer to switchyard's own roots/list goes (None: the client answered an error).
type RootsAnswer = tokio::sync::oneshot::Sender<Option<serde_json::Value>>;

/// An instance's roots/list waiting for a client's roots: the instance, its request id, and the
/// session it belongs to (None: unclear, answered when the server's clients agree).
struct Parked {
    inst: Weak<Instance>,
    id: String,
    session: Option<SessionId>,
}

/// What switchyard knows of one client's roots.
#[derive(Debug, Clone, PartialEq)]
enum RootsState {
    /// The `result` of the client's last answer to roots/list.
    Known(serde_json::Value),
    /// The client said its roots changed; switchyard has asked it and waits for the answer.
    Refreshing,
}

/// How long a client's roots/list_changed waits for switchyard to learn its new roots before the
/// change is passed on to the servers anyway.
const ROOTS_REFRESH_WAIT: Duration = Duration::from_secs(5);

/// The list kinds whose `notifications/<kind>/list_changed` is checked before clients hear of it.
const LIST_KINDS: [&str; 3] = ["tools", "prompts", "resources"];

/// One kind's list_changed check: whether a check runs, and the newest notice behind it.
#[derive(Default)]
struct ListWatch {
    running: bool,
    next: Option<(Arc<Instance>, String)>,
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
    /// The roots of the profile the server serves, as a roots/list result, once known: every
    /// client on its instances has them.
    fn profile_roots(&self) -> Option<String>;
    /// The whole `{kind}/list` of an instance (None: it could not be fetched).
    fn fetch_list<'a>(
        &'a self,
        inst: &'a Instance,
        kind: &'static str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Vec<serde_json::Value>>> + Send + 'a>>;
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

    /// Sends a line to every session.
    /// Who the connected clients are, as the policy is told.
    pub fn callers(&self) -> Vec<Caller> {
        self.sessions.read().expect("lock").values().map(|s| s.caller()).collect()
    }

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
    /// a call just answered (within [`crate::upstream::instance::LOG_TRAIL`]): only a stranger
    /// must not see it.
    fn attribute_log(&self, inst: &Instance) -> Attribution {
        let attached: Vec<SessionId> = self.sessions.read().expect("lock").keys().copied().collect();
        let owners = inst.owners(self.linger);
        let mut live: Vec<SessionId> =
            owners.live.iter().chain(&owners.abandoned).chain(&owners.lately).copied().collect();
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

    /// A request from the server to a client (sampling, elicitation, roots, ...): to the session
    /// whose call caused it, never to another one. roots/list is answered from the roots the
    /// clients gave when they agree, so a starting instance does not show.
    fn on_server_request(self: &Arc<Self>, inst: &Arc<Instance>, line: String, env: Envelope) {
        let method = env.method.clone().unwrap_or_default();
        // A request on behalf of a task (elicitation while it waits for input) is for the session
        // that was handed the task, whoever else has calls on the instance.
        let task = related_task(&line, env.params.as_ref())
            .and_then(|up| self.tasks.session_of(inst.number(), &up).map(|s| (up, s)))
            .filter(|(_, s)| *s != super::tasks::NO_SESSION);
        let attribution = match &task {
            Some((_, session)) => Attribution::Session(*session),
            None => self.attribute(inst),
        };
        // The task's id as the session knows it (the params change length: the id's place is
        // found again by parsing the new line).
        let sealed = task.as_ref().zip(env.params.as_ref()).and_then(|((upstream, session), params)| {
            let route = super::tasks::Route { instance: inst.number(), session: *session, upstream: upstream.clone() };
            let new = super::tasks::replace_task_id(
                &line[params.clone()],
                upstream,
                &super::tasks::seal(&self.server, &route),
            )?;
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
    fn route_server_request(&self, inst: &Arc<Instance>, line: String, env: Envelope, attribution: Attribution) {
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

    /// The roots to answer a roots/list with, when switchyard knows them: those of the session it
    /// belongs to; when that is unclear (an instance starting, say), those every connected
    /// session has, if they all agree. Never one session's roots for another's call.
    fn cached_roots(&self, attribution: &Attribution) -> Option<String> {
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
    fn roots_pending(&self) -> bool {
        self.roots.lock().expect("lock").values().any(|r| *r == RootsState::Refreshing)
    }

    /// An instance's roots/list waits while a client's roots are being asked for: it is
    /// answered when they are known (see [`Fanout::answer_parked_roots`]), or after
    /// [`ROOTS_REFRESH_WAIT`] goes the way it would have gone.
    fn park_roots_ask(self: &Arc<Self>, inst: &Arc<Instance>, line: String, env: Envelope, attribution: Attribution) {
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
    fn answer_parked_roots(&self) {
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
    fn roots_in(line: &str, env: &Envelope) -> Option<serde_json::Value> {
        env.result.as_ref().and_then(|r| serde_json::from_str::<serde_json::Value>(&line[r.clone()]).ok())
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

    /// A notification from the server: fan it out by the rules of its method.
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

    fn on_server_notification(self: &Arc<Self>, inst: &Arc<Instance>, line: String, env: Envelope) {
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
        if let Some(status) = super::tasks::status_in(p) {
            self.tasks.saw_status(inst.number(), &upstream, &status);
        }
        let client_id = super::tasks::seal(
            &self.server,
            &super::tasks::Route { instance: inst.number(), session, upstream: upstream.clone() },
        );
        let rewritten = match super::tasks::replace_task_id(p, &upstream, &client_id) {
            Some(new) => codec::splice(&line, params.clone(), &new),
            None => line,
        };
        // A task of the 2026-07-28 era belongs to no session: its notices travel on the listen
        // stream that asked for them, never to whoever is connected.
        match self.session(session).filter(|_| session != super::tasks::NO_SESSION) {
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

    /// `notifications/<kind>/list_changed` from an instance: clients hear of it only when the list
    /// differs from what they were shown (a starting instance registering its tools changes
    /// nothing). Notices during a check are coalesced: the newest one is checked next.
    fn list_changed(self: &Arc<Self>, inst: &Arc<Instance>, kind: &'static str, line: String) {
        {
            let mut watch = self.list_watch.lock().expect("lock");
            let w = watch.entry(kind).or_default();
            w.next = Some((inst.clone(), line));
            if w.running {
                return;
            }
            w.running = true;
        }
        let hub = self.clone();
        tokio::spawn(async move {
            loop {
                let next = {
                    let mut watch = hub.list_watch.lock().expect("lock");
                    let w = watch.entry(kind).or_default();
                    match w.next.take() {
                        Some(n) => n,
                        None => {
                            w.running = false;
                            return;
                        }
                    }
                };
                hub.check_list(kind, next.0, next.1).await;
            }
        });
    }

    async fn check_list(&self, kind: &'static str, inst: Arc<Instance>, line: String) {
        let fetched = match self.owner.upgrade() {
            Some(server) => server.fetch_list(&inst, kind).await,
            None => return,
        };
        let changed = match fetched {
            // Unknown: better one notice too many than a client with a stale list.
            None => true,
            Some(items) => {
                let mut lists = self.lists.lock().expect("lock");
                let changed = lists.get(kind) != Some(&items);
                if changed {
                    lists.insert(kind, items);
                }
                changed
            }
        };
        if changed {
            for s in self.audience(&inst) {
                s.send_from_server(line.clone());
            }
        } else {
            let n = self.absorbed.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::debug!(instance = %inst.label(), "{kind}/list_changed changed nothing clients were shown; not passed on ({n} so far)");
        }
    }

    /// Records a list as a client was just shown it.
    pub fn shown_list(&self, kind: &'static str, mut items: Vec<serde_json::Value>) {
        sort_list(&mut items);
        self.lists.lock().expect("lock").insert(kind, items);
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

    #[test]
    fn lists_compare_by_content_not_order() {
        let mut x = vec![serde_json::json!({"name": "b", "d": 1}), serde_json::json!({"name": "a"})];
        let mut y = vec![serde_json::json!({"name": "a"}), serde_json::json!({"d": 1, "name": "b"})];
        sort_list(&mut x);
        sort_list(&mut y);
        assert_eq!(x, y);
        let mut r = vec![serde_json::json!({"uri": "z://2"}), serde_json::json!({"uri": "z://1"})];
        sort_list(&mut r);
        assert_eq!(r[0]["uri"], "z://1");
    }
}
