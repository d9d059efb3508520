//! One upstream server: its pools, gate, initialisation, crash-loop guard, and the hub that
//! routes its server-to-client traffic to the right sessions.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use tokio::sync::{OnceCell, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::codec::{self, Envelope};
use crate::config::{Config, Limits};
use crate::decision::Hints;
use crate::error::{CallError, Death};
use crate::gate::Gate;
use crate::ids::SessionId;
use crate::policy::Policy;
use crate::pool::{Pool, Spawner};
use crate::upstream::{Instance, Owners, Spec};

/// A piece of per-instance set-up done on behalf of sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Setup {
    Level,
    Subscribe(String),
    Unsubscribe(String),
}

/// The first failure of the kind a client asked about, as its error.
fn first_failure(failures: Vec<(Setup, String)>, mine: impl Fn(&Setup) -> bool) -> Result<(), String> {
    failures.into_iter().find(|(op, _)| mine(op)).map_or(Ok(()), |(_, e)| Err(e))
}

/// Consecutive start-up failures after which the server is marked down.
const CRASH_LOOP_FAILURES: u32 = 5;

/// What the hub knows of one client session.
pub struct SessionLink {
    pub id: SessionId,
    /// Lines to the client. Unbounded so one slow client cannot stall an instance's reader
    /// (and with it every other session's replies); `backlog` bounds it instead.
    out: mpsc::UnboundedSender<String>,
    /// What is queued for the client and not yet written (shared with the writer, which must
    /// not hold the link itself: the channel closes when the last link goes).
    backlog: Arc<Backlog>,
    /// Fired when the queue overflows: the session ends (its calls are cancelled).
    pub overflow: tokio_util::sync::CancellationToken,
    /// Requests and notifications from servers wait here until the client has finished its
    /// initialisation (`None` from then on). switchyard initialises a server once, on the
    /// first client's behalf, so the server may call back (roots/list, say) before this client
    /// has even seen its initialize result; MCP lets a server do that only after `initialized`.
    held: Mutex<Option<Vec<String>>>,
    /// Requests from a server to this client, by the id this session sees: (instance, server's id).
    outbound: Mutex<HashMap<u64, (Weak<Instance>, String)>>,
    next_out: AtomicU64,
    /// The level this client asked for with logging/setLevel (RFC 5424 severity, 7 = debug).
    log_level: Mutex<Option<u8>>,
    /// The `capabilities` the client declared in its initialize (`None`: it sent none yet, as a
    /// 2026-07-28 client never does). MCP lets a server ask a client only for what it declared.
    capabilities: Mutex<Option<serde_json::Value>>,
}

impl SessionLink {
    pub fn new(
        id: SessionId,
        out: mpsc::UnboundedSender<String>,
        queue_limit: usize,
        buffered: Arc<Buffered>,
    ) -> Arc<SessionLink> {
        Arc::new(SessionLink {
            id,
            out,
            backlog: Arc::new(Backlog::new(queue_limit, buffered)),
            overflow: tokio_util::sync::CancellationToken::new(),
            held: Mutex::new(Some(Vec::new())),
            outbound: Mutex::new(HashMap::new()),
            next_out: AtomicU64::new(1),
            log_level: Mutex::new(None),
            capabilities: Mutex::new(None),
        })
    }

    /// Records the capabilities in this client's initialize params (none declared when absent).
    pub fn declare_capabilities(&self, initialize_params: &str) {
        let declared = serde_json::from_str::<serde_json::Value>(initialize_params)
            .ok()
            .and_then(|mut v| v.get_mut("capabilities").map(serde_json::Value::take))
            .unwrap_or_else(|| serde_json::json!({}));
        *self.capabilities.lock().expect("lock") = Some(declared);
    }

    /// The capability a server-to-client request needs that this client did not declare.
    /// Unknown (no initialize seen) counts as declared: switchyard refuses only what it knows.
    fn lacks_capability_for(&self, method: &str) -> Option<&'static str> {
        let needed = match method {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => return None,
        };
        let caps = self.capabilities.lock().expect("lock");
        let declared = caps.as_ref().is_none_or(|c| c.get(needed).is_some_and(|v| !v.is_null()));
        (!declared).then_some(needed)
    }

    pub fn send(&self, line: String) {
        if self.overflow.is_cancelled() {
            return;
        }
        match self.backlog.add(line.len() + 1) {
            Over::No => {}
            Over::Began(run) => {
                // Over the limit from now: while it stays so, the client must keep reading.
                let (backlog, overflow, id) = (self.backlog.clone(), self.overflow.clone(), self.id);
                tokio::spawn(async move {
                    let mut seen = backlog.written();
                    loop {
                        tokio::time::sleep(BACKLOG_STALL).await;
                        if !backlog.still_over(run) {
                            return;
                        }
                        let now = backlog.written();
                        if now == seen {
                            tracing::warn!(
                                session = id,
                                "the client is not reading its messages: more than {} bytes wait for it and it took none for {} s; closing its session",
                                backlog.limit,
                                BACKLOG_STALL.as_secs()
                            );
                            overflow.cancel();
                            return;
                        }
                        seen = now;
                    }
                });
            }
            Over::Far => {
                tracing::warn!(
                    session = self.id,
                    "the client is not reading its messages fast enough: more than {} bytes wait for it; closing its session",
                    self.backlog.limit * BACKLOG_CAP
                );
                self.overflow.cancel();
                return;
            }
            Over::Budget(total) => {
                tracing::warn!(
                    session = self.id,
                    "switchyard holds {total} bytes of output for its clients, more than limits.max_buffered_bytes ({}); closing this session, whose client is more than {} bytes behind",
                    self.backlog.shared.budget,
                    self.backlog.limit
                );
                self.overflow.cancel();
                return;
            }
        }
        let _ = self.out.send(line);
    }

    /// A request or notification that a server started: held until the client is initialised.
    pub fn send_from_server(&self, line: String) {
        {
            let mut held = self.held.lock().expect("lock");
            if let Some(queue) = held.as_mut() {
                if queue.len() < HELD_MAX {
                    queue.push(line);
                } else {
                    tracing::warn!(
                        session = self.id,
                        "dropped a server message: the client has not finished initialising"
                    );
                }
                return;
            }
        }
        self.send(line);
    }

    /// The client finished initialising: what servers sent meanwhile goes out, in order.
    pub fn open(&self) {
        let held = self.held.lock().expect("lock").take();
        for line in held.into_iter().flatten() {
            self.send(line);
        }
    }

    /// Takes this session's pending requests from `inst` (only the one the server knows as
    /// `upstream_id`, when given) and returns the ids this session knows them by.
    fn take_outbound(&self, inst: &Instance, upstream_id: Option<&str>) -> Vec<u64> {
        let mut out = self.outbound.lock().expect("lock");
        let ids: Vec<u64> = out
            .iter()
            .filter(|(_, (w, id))| std::ptr::eq(w.as_ptr(), inst) && upstream_id.is_none_or(|u| u == id))
            .map(|(n, _)| *n)
            .collect();
        for n in &ids {
            out.remove(n);
        }
        ids
    }

    /// The backlog the writer lowers as it writes queued output to the client.
    pub fn backlog(&self) -> Arc<Backlog> {
        self.backlog.clone()
    }
}

/// How long a client whose output is over its limit may take nothing before it is taken to
/// have stopped reading. A client that reads takes something well within this.
pub const BACKLOG_STALL: Duration = Duration::from_secs(5);
/// Past this many times its limit, a backlog closes the session at once, even if the client
/// still reads: a slow reader must not let a fast server fill memory.
const BACKLOG_CAP: usize = 16;

/// Output queued for one client. Memory is bounded by what the client fails to read over time,
/// not by the size of one answer: over `limit`, the session is closed when the client takes
/// nothing for `BACKLOG_STALL`, or when the backlog reaches `BACKLOG_CAP` times the limit.
pub struct Backlog {
    limit: usize,
    queued: std::sync::atomic::AtomicUsize,
    /// The most that was ever queued (whether memory is worth giving back when it goes).
    peak: std::sync::atomic::AtomicUsize,
    /// What all sessions hold together.
    shared: Arc<Buffered>,
    /// Bytes written to the client so far (progress, for the stall check).
    written: AtomicU64,
    /// The current run of being over `limit` (None: under it), numbered so a check of an earlier
    /// run never closes the session for a later one.
    over: Mutex<Option<u64>>,
    runs: AtomicU64,
}

/// What one more line did to a backlog.
enum Over {
    No,
    /// It went over the limit (this run of being over).
    Began(u64),
    /// It went past the hard cap.
    Far,
    /// All sessions together hold more than the budget (this total), and this one is behind.
    Budget(usize),
}

/// Output queued for every client of the process together, against `limits.max_buffered_bytes`:
/// each session's own bound still lets many slow clients add up to too much.
pub struct Buffered {
    budget: usize,
    total: std::sync::atomic::AtomicUsize,
}

impl Buffered {
    pub fn new(budget: usize) -> Arc<Buffered> {
        Arc::new(Buffered { budget, total: Default::default() })
    }

    /// Bytes queued for all clients now.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

/// Backlogs at least this large leave enough freed memory behind to be worth returning.
pub const GIVE_BACK_AFTER: usize = 4 * 1024 * 1024;

/// Returns freed heap memory to the system. glibc keeps what a large backlog freed (hundreds of
/// MiB after a few clients stopped reading) for reuse; a long-lived router should not.
pub fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and trims the allocator's own free lists; it takes no
    // pointers and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl Backlog {
    fn new(limit: usize, shared: Arc<Buffered>) -> Backlog {
        Backlog {
            limit,
            queued: Default::default(),
            peak: Default::default(),
            shared,
            written: AtomicU64::new(0),
            over: Mutex::new(None),
            runs: AtomicU64::new(0),
        }
    }

    fn add(&self, bytes: usize) -> Over {
        let queued = self.queued.fetch_add(bytes, Ordering::AcqRel) + bytes;
        let total = self.shared.total.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(queued, Ordering::Relaxed);
        if queued <= self.limit {
            return Over::No;
        }
        if queued > self.limit.saturating_mul(BACKLOG_CAP) {
            return Over::Far;
        }
        if total > self.shared.budget {
            return Over::Budget(total);
        }
        let mut over = self.over.lock().expect("lock");
        if over.is_some() {
            return Over::No;
        }
        let run = self.runs.fetch_add(1, Ordering::Relaxed);
        *over = Some(run);
        Over::Began(run)
    }

    fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    fn still_over(&self, run: u64) -> bool {
        *self.over.lock().expect("lock") == Some(run)
    }

    /// The most that was ever queued for this client.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// The writer wrote `bytes` to the client.
    pub fn wrote(&self, bytes: usize) {
        self.written.fetch_add(bytes as u64, Ordering::AcqRel);
        self.shared.total.fetch_sub(bytes, Ordering::AcqRel);
        let queued = self.queued.fetch_sub(bytes, Ordering::AcqRel) - bytes;
        if queued <= self.limit {
            self.over.lock().expect("lock").take();
        }
    }
}

impl Drop for Backlog {
    /// What was never written leaves the shared total with the session.
    fn drop(&mut self) {
        self.shared.total.fetch_sub(*self.queued.get_mut(), Ordering::AcqRel);
    }
}

/// Names the 2026-07-28 counterpart of a pool (`default` -> `default@2026-07-28`).
const MODERN_POOL_SUFFIX: &str = "@2026-07-28";
/// The newest protocol version of the era without initialize, until a client names another.
const LATEST_MODERN_VERSION: &str = "2026-07-28";

/// Server messages held for a client that has not finished initialising, at most.
const HELD_MAX: usize = 1024;

/// MCP logging levels, most verbose first; index = how verbose (0 = emergency ... 7 = debug).
const LEVELS: [&str; 8] = ["emergency", "alert", "critical", "error", "warning", "notice", "info", "debug"];

pub fn level_rank(level: &str) -> Option<u8> {
    LEVELS.iter().position(|l| *l == level).map(|i| i as u8)
}

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
fn elicitation_id(line: &str, params: Option<&std::ops::Range<usize>>) -> Option<String> {
    let text = &line[params?.clone()];
    if !text.contains("elicitationId") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("elicitationId")?.as_str().map(str::to_string)
}

/// Puts a list's items in one order (by name, else URI), so that lists compare by content.
fn sort_list(items: &mut [serde_json::Value]) {
    items.sort_by_cached_key(|v| v.get("name").or_else(|| v.get("uri")).map(|k| k.to_string()));
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

/// Routes a server's notifications and requests to sessions; tracks subscriptions.
pub struct Hub {
    server: String,
    /// The server this hub belongs to (for fetching lists and reaching instances).
    owner: Weak<Server>,
    /// How long a call whose client stopped waiting still counts as an owner of what the
    /// server sends (it may still be running there): one call timeout.
    linger: Duration,
    sessions: RwLock<BTreeMap<SessionId, Arc<SessionLink>>>,
    subscriptions: Mutex<HashMap<String, BTreeSet<SessionId>>>,
    roots: Mutex<HashMap<SessionId, RootsState>>,
    /// roots/list requests of servers handed to clients: (session, id the session sees).
    roots_asked: Mutex<BTreeSet<(SessionId, u64)>>,
    /// switchyard's own roots/list requests to clients, by id text: the session, and who waits.
    own_asks: Mutex<HashMap<String, (SessionId, tokio::sync::oneshot::Sender<()>)>>,
    next_ask: AtomicU64,
    /// Each list kind as clients were last shown it (sorted): a tools/list that passed through,
    /// or what switchyard fetched when it passed a list_changed on (clients then fetch it too).
    lists: Mutex<HashMap<&'static str, Vec<serde_json::Value>>>,
    list_watch: Mutex<HashMap<&'static str, ListWatch>>,
    /// Log messages that belonged to no one session and so went to nobody.
    withheld_logs: AtomicU64,
    /// list_changed notices that changed nothing clients were shown.
    absorbed: AtomicU64,
    /// URL-mode elicitations handed to a session, by (instance number, elicitationId): their
    /// `notifications/elicitation/complete` goes to that session only.
    elicitations: Mutex<HashMap<(u64, String), SessionId>>,
}

impl Hub {
    pub fn new(server: &str, linger: Duration, owner: Weak<Server>) -> Arc<Hub> {
        Arc::new(Hub {
            server: server.to_string(),
            owner,
            linger,
            sessions: RwLock::new(BTreeMap::new()),
            subscriptions: Mutex::new(HashMap::new()),
            roots: Mutex::new(HashMap::new()),
            roots_asked: Mutex::new(BTreeSet::new()),
            own_asks: Mutex::new(HashMap::new()),
            next_ask: AtomicU64::new(1),
            lists: Mutex::new(HashMap::new()),
            list_watch: Mutex::new(HashMap::new()),
            withheld_logs: AtomicU64::new(0),
            absorbed: AtomicU64::new(0),
            elicitations: Mutex::new(HashMap::new()),
        })
    }

    /// How long an abandoned call still owns what its instance sends.
    pub fn linger(&self) -> Duration {
        self.linger
    }

    pub fn attach(&self, link: Arc<SessionLink>) {
        self.sessions.write().expect("lock").insert(link.id, link);
    }

    /// Removes a session, its subscriptions and what it told of its roots.
    pub fn detach(&self, id: SessionId) {
        self.sessions.write().expect("lock").remove(&id);
        let mut subs = self.subscriptions.lock().expect("lock");
        subs.retain(|_, set| {
            set.remove(&id);
            !set.is_empty()
        });
        self.roots.lock().expect("lock").remove(&id);
        self.roots_asked.lock().expect("lock").retain(|(s, _)| *s != id);
        self.own_asks.lock().expect("lock").retain(|_, (s, _)| *s != id);
        self.elicitations.lock().expect("lock").retain(|_, s| *s != id);
    }

    pub fn session(&self, id: SessionId) -> Option<Arc<SessionLink>> {
        self.sessions.read().expect("lock").get(&id).cloned()
    }

    pub fn session_count(&self) -> usize {
        self.sessions.read().expect("lock").len()
    }

    /// Sends a line to every session.
    pub fn broadcast(&self, line: &str) {
        for s in self.sessions.read().expect("lock").values() {
            s.send_from_server(line.to_string());
        }
    }

    /// Sessions that may see traffic of `inst`: its owner only, for affinity instances.
    fn audience(&self, inst: &Instance) -> Vec<Arc<SessionLink>> {
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
    /// so an abandoned call's log may still go to its own session: only a stranger must not see it.
    fn attribute_log(&self, inst: &Instance) -> Attribution {
        let attached: Vec<SessionId> = self.sessions.read().expect("lock").keys().copied().collect();
        let owners = inst.owners(self.linger);
        let mut live: Vec<SessionId> = owners.live.iter().chain(&owners.abandoned).copied().collect();
        live.sort_unstable();
        live.dedup();
        attribute(inst.owner, &Owners { live, abandoned: Vec::new() }, &attached)
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
        self.subscriptions.lock().expect("lock").entry(uri.to_string()).or_default().insert(id);
    }

    pub fn unsubscribe(&self, id: SessionId, uri: &str) {
        let mut subs = self.subscriptions.lock().expect("lock");
        if let Some(set) = subs.get_mut(uri) {
            set.remove(&id);
            if set.is_empty() {
                subs.remove(uri);
            }
        }
    }

    /// URIs some session subscribed to (`Some(id)`: that session only).
    pub fn uris(&self, of: Option<SessionId>) -> BTreeSet<String> {
        let subs = self.subscriptions.lock().expect("lock");
        subs.iter().filter(|(_, set)| of.is_none_or(|id| set.contains(&id))).map(|(u, _)| u.clone()).collect()
    }

    /// Writes a line to an instance without waiting (the hub runs on the instance's reader).
    fn reply_to(inst: &Arc<Instance>, line: String) {
        let inst = inst.clone();
        tokio::spawn(async move {
            let _ = inst.write(line).await;
        });
    }

    /// A request from the server to a client (sampling, elicitation, roots, ...): to the session
    /// whose call caused it, never to another one. roots/list is answered from the roots the
    /// clients gave when they agree, so a starting instance does not show.
    pub fn server_request(&self, inst: &Arc<Instance>, line: String, env: Envelope) {
        let method = env.method.clone().unwrap_or_default();
        let id_span = env.id.clone().expect("requests have ids");
        let attribution = self.attribute(inst);
        if method == "roots/list"
            && let Some(result) = self.cached_roots(&attribution)
        {
            Self::reply_to(inst, codec::response_ok(&line[id_span], &result));
            return;
        }
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

    /// A client said its roots changed. When switchyard keeps roots of this client, it asks for
    /// the new ones before telling the servers this session may use (which then ask again and
    /// are answered from them); otherwise the change goes on at once, as it came.
    pub fn roots_list_changed(self: &Arc<Self>, link: &Arc<SessionLink>, line: String) {
        let (hub, session) = (self.clone(), link.id);
        let asked = {
            let mut roots = self.roots.lock().expect("lock");
            roots.get(&session).is_some().then(|| {
                roots.insert(session, RootsState::Refreshing);
                let id = format!("\"switchyard-roots-{}\"", self.next_ask.fetch_add(1, Ordering::Relaxed));
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.own_asks.lock().expect("lock").insert(id.clone(), (session, tx));
                link.send_from_server(codec::request(&id, "roots/list", "{}"));
                (id, rx)
            })
        };
        tokio::spawn(async move {
            if let Some((id, rx)) = asked
                && !matches!(tokio::time::timeout(ROOTS_REFRESH_WAIT, rx).await, Ok(Ok(())))
            {
                tracing::info!(
                    session,
                    "the client did not answer switchyard's roots/list within {ROOTS_REFRESH_WAIT:?}; servers will ask it themselves"
                );
                hub.own_asks.lock().expect("lock").remove(&id);
                let mut roots = hub.roots.lock().expect("lock");
                if roots.get(&session) == Some(&RootsState::Refreshing) {
                    roots.remove(&session);
                }
            }
            let Some(server) = hub.owner.upgrade() else { return };
            let targets =
                server.all_instances().into_iter().filter(|i| i.is_ready() && i.owner.is_none_or(|o| o == session));
            for inst in targets {
                let _ = inst.write(line.clone()).await;
            }
        });
    }

    /// Records a client's answer to roots/list (`None`: it answered with an error).
    fn learn_roots(&self, session: SessionId, line: &str, env: &Envelope) {
        let result = env.result.as_ref().and_then(|r| serde_json::from_str::<serde_json::Value>(&line[r.clone()]).ok());
        let mut roots = self.roots.lock().expect("lock");
        match result {
            Some(v) => roots.insert(session, RootsState::Known(v)),
            None => roots.remove(&session),
        };
    }

    /// An instance ended: its requests that clients still hold are withdrawn, so no client
    /// keeps a sampling or elicitation dialog open for a server that is gone.
    pub fn instance_gone(&self, inst: &Instance) {
        self.elicitations.lock().expect("lock").retain(|(n, _), _| *n != inst.number());
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
    pub fn client_response(&self, link: &SessionLink, line: &str, env: &Envelope) {
        let Some(span) = env.id.clone() else {
            tracing::warn!(session = link.id, "dropped an error response with id null from the client");
            return;
        };
        let own = {
            let mut asks = self.own_asks.lock().expect("lock");
            let mine = asks.get(&line[span.clone()]).is_some_and(|(s, _)| *s == link.id);
            if mine { asks.remove(&line[span.clone()]) } else { None }
        };
        if let Some((session, done)) = own {
            self.learn_roots(session, line, env);
            let _ = done.send(());
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
            self.learn_roots(link.id, line, env);
        }
        let Some(inst) = inst.upgrade() else { return };
        let rewritten = codec::splice(line, span, &upstream_id);
        tokio::spawn(async move {
            let _ = inst.write(rewritten).await;
        });
    }

    /// A notification from the server: fan it out by the rules of its method.
    pub fn server_notification(self: &Arc<Self>, inst: &Arc<Instance>, line: String, env: Envelope) {
        let method = env.method.as_deref().unwrap_or_default();
        let fields = env.params.as_ref().map(|p| codec::param_fields(&line, p)).unwrap_or_default();
        match method {
            "notifications/message" => self.server_log(inst, line, fields.level.as_deref()),
            "notifications/resources/updated" => {
                let Some(uri) = fields.uri else { return };
                let subs = self.subscriptions.lock().expect("lock").get(&uri).cloned().unwrap_or_default();
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

    /// A log message: to the session whose call it belongs to, at the level that session asked
    /// for. When no one session can be named, nobody gets it (counted): a log may carry one
    /// client's data. A pool instance starting up logs to nobody either: clients never see it start.
    fn server_log(&self, inst: &Instance, line: String, level: Option<&str>) {
        let starting = inst.owner.is_none() && !inst.is_ready() && inst.number() > 1;
        let target = match self.attribute_log(inst) {
            _ if starting => Err("a pool instance is starting".to_string()),
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

/// The crash-loop guard: backoff between failed starts, and "down" after too many in a row.
#[derive(Default)]
struct StartHealth {
    failures: u32,
    next_allowed: Option<Instant>,
    down_until: Option<Instant>,
    last_failure: String,
}

impl StartHealth {
    /// 100 ms after the first failure, doubling, at most 10 s.
    fn backoff(&self) -> Duration {
        let exp = self.failures.saturating_sub(1).min(10);
        Duration::from_millis(100u64 << exp).min(Duration::from_secs(10))
    }

    /// Records a failed start; returns how long the server is now down, if it is.
    fn failure(&mut self, now: Instant, what: String) -> Option<Duration> {
        self.failures += 1;
        self.last_failure = what;
        self.next_allowed = Some(now + self.backoff());
        if self.failures < CRASH_LOOP_FAILURES {
            return None;
        }
        // Down for 1 s, then 2, 4, ... at most 30 s: retried "half-open" after each period.
        let exp = (self.failures - CRASH_LOOP_FAILURES).min(5);
        let down = Duration::from_secs(1u64 << exp).min(Duration::from_secs(30));
        self.down_until = Some(now + down);
        Some(down)
    }

    /// Err(reason) while down; otherwise when the next start may begin (None: now).
    fn check(&self, now: Instant) -> Result<Option<Instant>, String> {
        if let Some(until) = self.down_until.filter(|u| *u > now) {
            return Err(format!(
                "it failed to start {} times in a row (last: {}); switchyard tries again in {:.1} s. Check the command and its stderr above",
                self.failures,
                self.last_failure,
                (until - now).as_secs_f64()
            ));
        }
        Ok(self.next_allowed.filter(|t| *t > now))
    }
}

/// A tools/list result as the server declared it, for hints and annotation diffs.
#[derive(Default)]
struct ToolCache {
    declared: HashMap<String, Hints>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InitState {
    NotStarted,
    Running,
    Done,
}

/// Settles the initialisation state when an `initialize` ends, however it ends.
struct InitSettle<'a>(&'a Server);

impl Drop for InitSettle<'_> {
    fn drop(&mut self) {
        let s = self.0;
        if !s.init_result.initialized() {
            s.init_params.lock().expect("lock").take();
        }
        s.init_state.send_replace(if s.init_result.initialized() { InitState::Done } else { InitState::NotStarted });
    }
}

/// One upstream server and everything that serves it.
pub struct Server {
    pub name: String,
    pub hub: Arc<Hub>,
    pub limits: Limits,
    /// Output queued for all clients of this server together (`limits.max_buffered_bytes`).
    pub buffered: Arc<Buffered>,
    pub gate: Gate,
    pub policy: Policy,
    spec: Spec,
    pools: BTreeMap<String, Arc<Pool>>,
    /// Instances for requests of the 2026-07-28 era, one pool per configured pool (none kept
    /// running). A server of both eras fixes each connection's era by its first request (the
    /// Python SDK does), so an instance switchyard initialised cannot serve them, nor the other
    /// way round. They are never initialised: each request carries its own envelope.
    modern_pools: BTreeMap<String, Arc<Pool>>,
    /// The protocol version the latest 2026-07-28-era request carried (for health probes).
    modern_version: Mutex<String>,
    /// The server answered server/discover with -32601: it is of the initialize era only.
    discover_refused: std::sync::atomic::AtomicBool,
    /// The first client's initialize params, used to initialise every instance.
    /// Cleared again if that initialize fails, so the next client's params are used instead.
    init_params: Mutex<Option<String>>,
    /// The first instance's initialize result, given to every client.
    init_result: OnceCell<String>,
    init_state: watch::Sender<InitState>,
    /// Why the latest `initialize` failed (cleared when one succeeds), so later requests say
    /// that rather than asking for an initialize the client already sent.
    init_failure: Mutex<Option<String>>,
    next_instance: AtomicU64,
    health: Mutex<StartHealth>,
    tools: RwLock<ToolCache>,
    /// One reconciliation of levels and subscriptions at a time per instance, by instance
    /// number. Per instance, so a request stuck on a busy instance holds up only that instance,
    /// never the set-up of a new one.
    reconciling: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    pub shutdown: CancellationToken,
    pub tasks: TaskTracker,
}

impl Server {
    pub fn new(config: &Config, spec: Spec, policy: Policy, shutdown: CancellationToken) -> Arc<Server> {
        let name = spec.server.clone();
        Arc::new_cyclic(|weak: &Weak<Server>| {
            let pools_of = |modern: bool| -> BTreeMap<String, Arc<Pool>> {
                config
                    .pools
                    .iter()
                    .map(|(pname, pc)| {
                        let w = weak.clone();
                        let spawner: Spawner = Arc::new(move |pool, owner| {
                            let w = w.clone();
                            Box::pin(async move {
                                match w.upgrade() {
                                    Some(server) => server.start_instance(&pool, owner, modern).await,
                                    None => Err(CallError::ShuttingDown),
                                }
                            })
                        });
                        let (pool_name, mut pc) = (pname.clone(), pc.clone());
                        if modern {
                            pc.min = 0;
                            return (pool_name, Pool::new(&format!("{pname}{MODERN_POOL_SUFFIX}"), &name, pc, spawner));
                        }
                        (pool_name, Pool::new(pname, &name, pc, spawner))
                    })
                    .collect()
            };
            let (pools, modern_pools) = (pools_of(false), pools_of(true));
            Server {
                name: name.clone(),
                hub: Hub::new(&name, Duration::from_millis(config.limits.call_timeout_ms), weak.clone()),
                limits: config.limits.clone(),
                buffered: Buffered::new(config.limits.max_buffered_bytes),
                gate: Gate::new(),
                policy,
                spec,
                pools,
                modern_pools,
                modern_version: Mutex::new(LATEST_MODERN_VERSION.to_string()),
                discover_refused: Default::default(),
                init_params: Mutex::new(None),
                init_result: OnceCell::new(),
                init_state: watch::channel(InitState::NotStarted).0,
                init_failure: Mutex::new(None),
                next_instance: AtomicU64::new(1),
                health: Mutex::new(StartHealth::default()),
                tools: RwLock::new(ToolCache::default()),
                reconciling: Mutex::new(HashMap::new()),
                shutdown,
                tasks: TaskTracker::new(),
            }
        })
    }

    pub fn pool(&self, name: &str) -> Option<&Arc<Pool>> {
        self.pools.get(name)
    }

    pub fn default_pool(&self) -> &Arc<Pool> {
        self.pools.get("default").expect("validated config always has a default pool")
    }

    pub fn all_instances(&self) -> Vec<Arc<Instance>> {
        self.every_pool().flat_map(|p| p.instances()).collect()
    }

    /// The configured pools and their 2026-07-28 counterparts.
    fn every_pool(&self) -> impl Iterator<Item = &Arc<Pool>> {
        self.pools.values().chain(self.modern_pools.values())
    }

    /// The pool an instance belongs to.
    fn pool_of(&self, inst: &Instance) -> Option<&Arc<Pool>> {
        self.pools.get(&inst.pool).or_else(|| self.modern_pools.get(inst.pool.strip_suffix(MODERN_POOL_SUFFIX)?))
    }

    /// The 2026-07-28 counterpart of a configured pool.
    pub fn modern_pool<'a>(&'a self, pool: &'a Arc<Pool>) -> &'a Arc<Pool> {
        self.modern_pools.get(&pool.name).unwrap_or(pool)
    }

    /// True for an instance serving 2026-07-28-era requests (never initialised).
    pub fn is_modern(&self, inst: &Instance) -> bool {
        inst.pool.ends_with(MODERN_POOL_SUFFIX)
    }

    pub fn saw_modern_version(&self, version: &str) {
        let mut v = self.modern_version.lock().expect("lock");
        if *v != version {
            *v = version.to_string();
        }
    }

    pub fn discover_refused(&self) -> bool {
        self.discover_refused.load(Ordering::Relaxed)
    }

    /// The server answered server/discover with -32601: later probes are answered at once, and
    /// the instances started for that era (it has none) are stopped.
    pub fn refuse_discover(&self) {
        if self.discover_refused.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::info!(server = %self.name, "the server does not know server/discover: 2026-07-28 clients fall back to initialize");
        for inst in self.modern_pools.values().flat_map(|p| p.close_with(self.not_modern())) {
            self.tasks.spawn(async move { inst.shutdown().await });
        }
    }

    /// True once initialised; waits while a client's initialize is still under way (requests
    /// pipelined right behind initialize are served, not refused). False if it never started.
    pub async fn wait_initialized(&self) -> bool {
        let mut rx = self.init_state.subscribe();
        loop {
            match *rx.borrow_and_update() {
                InitState::Done => return true,
                InitState::NotStarted => return false,
                InitState::Running => {}
            }
            if rx.changed().await.is_err() {
                return false;
            }
        }
    }

    /// Answers a client's `initialize`: the first one starts the server with its params.
    /// Marks initialisation as under way, in message order (called by the session's reader
    /// before anything async runs), so requests right behind it wait instead of failing.
    pub fn begin_initialize(&self, params: &str) {
        self.init_params.lock().expect("lock").get_or_insert_with(|| params.to_string());
        self.init_state.send_if_modified(|s| {
            let start = *s == InitState::NotStarted;
            if start {
                *s = InitState::Running;
            }
            start
        });
    }

    pub async fn initialize(self: &Arc<Self>, session: SessionId, params: &str) -> Result<String, CallError> {
        self.begin_initialize(params);
        if let Some(link) = self.hub.session(session) {
            link.declare_capabilities(params);
        }
        // Whatever happens, also when the client cancels this initialize and the future is
        // dropped, waiters must not wait forever: Done, or back to NotStarted.
        let settle = InitSettle(self);
        if let Some(r) = self.init_result.get() {
            return Ok(r.clone());
        }
        // The params are known: every pool starts its `min` instances now, all at once. The
        // client waits for the first instance of the default pool (its result is the answer).
        for p in self.pools.values() {
            let p = p.clone();
            self.tasks.spawn(async move {
                if let Err(e) = p.warm_up().await {
                    tracing::warn!("pool `{}` could not start its minimum instances: {e}", p.name);
                }
            });
        }
        let pool = self.default_pool().clone();
        let lease = pool.acquire(session).await;
        let result = match &lease {
            Err(e) => Err(e.clone()),
            Ok(_) => self.init_result.get().cloned().ok_or_else(|| CallError::Down {
                server: self.name.clone(),
                reason: "no instance finished initialising".into(),
            }),
        };
        // Before waiters wake (settle), so they see why.
        *self.init_failure.lock().expect("lock") = result.as_ref().err().map(|e| e.to_string());
        drop(settle);
        drop(lease);
        result
    }

    /// The error for a request that needs an initialised server when there is none: why the
    /// last initialize failed, if one was sent, or that none was.
    pub fn not_initialized(&self) -> CallError {
        match self.init_failure.lock().expect("lock").clone() {
            Some(reason) => CallError::InitFailed { server: self.name.clone(), reason },
            None => CallError::NotInitialized { server: self.name.clone() },
        }
    }

    /// Whether the server declared the `logging` capability in its initialize result, which is
    /// what clients see: MCP lets switchyard send them notifications/message only then.
    pub fn declares_logging(&self) -> bool {
        let Some(result) = self.init_result.get() else { return false };
        serde_json::from_str::<serde_json::Value>(result)
            .is_ok_and(|v| v.pointer("/capabilities/logging").is_some_and(serde_json::Value::is_object))
    }

    fn check_start_allowed(&self) -> Result<Option<Instant>, CallError> {
        let h = self.health.lock().expect("lock");
        h.check(Instant::now()).map_err(|reason| CallError::Down { server: self.name.clone(), reason })
    }

    fn record_start_failure(&self, what: String) {
        let mut h = self.health.lock().expect("lock");
        if let Some(down) = h.failure(Instant::now(), what) {
            tracing::error!(
                server = %self.name,
                "server is down: {} failed starts in a row (last: {}); next try in {:.0} s",
                h.failures, h.last_failure, down.as_secs_f64()
            );
        }
    }

    /// A call got an answer: the server works, forget past start failures.
    pub fn record_success(&self) {
        let mut h = self.health.lock().expect("lock");
        if h.failures > 0 {
            *h = StartHealth::default();
        }
    }

    /// Spawns and initialises one instance for `pool` (the pools' spawner).
    async fn start_instance(
        self: Arc<Self>,
        pool: &str,
        owner: Option<SessionId>,
        modern: bool,
    ) -> Result<Arc<Instance>, CallError> {
        if self.shutdown.is_cancelled() {
            return Err(CallError::ShuttingDown);
        }
        if let Some(at) = self.check_start_allowed()? {
            tokio::time::sleep_until(at).await;
        }
        let params = self.init_params.lock().expect("lock").clone();
        if params.is_none() && !modern {
            return Err(self.not_initialized());
        }
        if modern && self.discover_refused() {
            return Err(self.not_modern());
        }
        let number = self.next_instance.fetch_add(1, Ordering::Relaxed);
        let inst = Instance::spawn(&self.spec, number, pool, owner, self.hub.clone()).map_err(|reason| {
            self.record_start_failure(reason.clone());
            CallError::Down { server: self.name.clone(), reason }
        })?;
        let handshake = match modern {
            true => self.modern_handshake(&inst).await,
            false => self.handshake(&inst, params.as_deref().unwrap_or("{}")).await,
        };
        match handshake {
            Ok(()) => {
                inst.mark_ready();
                tracing::info!(instance = %inst.label(), pid = inst.pid(), pool, "instance ready");
                let server = self.clone();
                let watched = inst.clone();
                self.tasks.spawn(async move {
                    watched.dead().await;
                    server.on_death(watched).await;
                });
                Ok(inst)
            }
            Err(e) => {
                // A server that does not speak 2026-07-28 started fine: not a start failure.
                if !(modern && self.discover_refused()) {
                    self.record_start_failure(e.to_string());
                }
                inst.kill().await;
                Err(e)
            }
        }
    }

    async fn handshake(self: &Arc<Self>, inst: &Arc<Instance>, params: &str) -> Result<(), CallError> {
        let what = "initialize".to_string();
        let timeout = Duration::from_millis(self.limits.init_timeout_ms);
        let result = self.own_request(inst, "initialize", params, timeout, &what).await?;
        let _ = self.init_result.set(result);
        let _ = inst.write(codec::notification("notifications/initialized", "{}")).await;
        // A new instance gets what its sessions already set up on the others.
        let _guard = self.reconcile_lock(inst).lock_owned().await;
        let holder = self.subscription_holder(Some(inst));
        self.reconcile_instance(inst, holder, timeout).await;
        Ok(())
    }

    /// An instance of the 2026-07-28 era has no initialize: switchyard's own server/discover (with
    /// its envelope, which also fixes the era of a server that speaks both) shows that it is up,
    /// bounded by init_timeout_ms like an initialize; clients' own probes then get fast answers.
    async fn modern_handshake(&self, inst: &Arc<Instance>) -> Result<(), CallError> {
        let timeout = Duration::from_millis(self.limits.init_timeout_ms);
        let reply =
            self.own_reply(inst, "server/discover", &self.modern_envelope(), timeout, "server/discover").await?;
        let code = serde_json::from_str::<serde_json::Value>(&reply.line)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e["code"].as_i64()));
        if code != Some(codec::METHOD_NOT_FOUND) {
            // Any other answer (even -32022, another version) shows a server of that era, up.
            return Ok(());
        }
        tracing::debug!(server = %self.name, "server/discover answered {}", reply.line);
        self.refuse_discover();
        Err(self.not_modern())
    }

    /// The answer to a 2026-07-28 request for a server of the initialize era only.
    fn not_modern(&self) -> CallError {
        CallError::WrongEra { server: self.name.clone(), supported: "2025-11-25".to_string() }
    }

    /// Sends a request of the router's own and returns its `result` JSON.
    pub async fn own_request(
        &self,
        inst: &Instance,
        method: &str,
        params: &str,
        timeout: Duration,
        what: &str,
    ) -> Result<String, CallError> {
        let reply = self.own_reply(inst, method, params, timeout, what).await?;
        match reply.env.result {
            Some(r) => Ok(reply.line[r].to_string()),
            None => Err(CallError::Down {
                server: self.name.clone(),
                reason: format!("it answered {method} with an error: {}", reply.line),
            }),
        }
    }

    /// Sends a request of the router's own and returns the server's reply, result or error.
    async fn own_reply(
        &self,
        inst: &Instance,
        method: &str,
        params: &str,
        timeout: Duration,
        what: &str,
    ) -> Result<crate::upstream::Reply, CallError> {
        let died = |death: Death| CallError::Died { server: self.name.clone(), what: what.to_string(), death };
        let sent = inst.send_own(method, params).await.map_err(died)?;
        let started = Instant::now();
        let reply = match tokio::time::timeout(timeout, sent.reply).await {
            Ok(Ok(r)) => r.map_err(died)?,
            Ok(Err(_)) => return Err(CallError::ShuttingDown),
            Err(_) => {
                inst.cancel(sent.upstream_id, "switchyard: timed out").await;
                return Err(CallError::Timeout {
                    server: self.name.clone(),
                    what: format!("{method} (by switchyard, on {})", inst.label()),
                    elapsed: started.elapsed(),
                    attempts: 1,
                    waiting: None,
                });
            }
        };
        Ok(reply)
    }

    async fn on_death(self: Arc<Self>, inst: Arc<Instance>) {
        self.hub.instance_gone(&inst);
        let Some(pool) = self.pool_of(&inst).cloned() else { return };
        pool.forget(&inst);
        if inst.is_closing() || self.shutdown.is_cancelled() {
            return;
        }
        let death = inst.death().cloned();
        if !inst.has_answered() {
            let status = death.map(|d| d.status).unwrap_or_default();
            self.record_start_failure(format!("{} {status} before answering any call", inst.label()));
        }
        // Back to `min`, with the start backoff applied inside start_instance. First: moving the
        // subscriptions below may wait behind a long call on another instance.
        if pool.missing() > 0 {
            let p = pool.clone();
            self.tasks.spawn(async move {
                if let Err(e) = p.warm_up().await {
                    tracing::warn!("pool `{}`: respawn failed: {e}", p.name);
                }
            });
        }
        if !inst.applied().uris.is_empty() {
            // It held the subscriptions: another shared instance takes them over.
            self.reconcile(Duration::from_millis(self.limits.call_timeout_ms)).await;
        }
    }

    /// Records declared hints from a tools/list result that passed through.
    pub fn learn_tools(&self, result_json: &str) {
        #[derive(serde::Deserialize)]
        struct ToolsResult {
            #[serde(default)]
            tools: Vec<serde_json::Value>,
        }
        #[derive(serde::Deserialize)]
        struct Cursor {
            #[serde(default, rename = "nextCursor")]
            next_cursor: Option<serde_json::Value>,
        }
        let Ok(r) = serde_json::from_str::<ToolsResult>(result_json) else { return };
        self.learn_tool_values(&r.tools);
        // A whole list (no further page) is what this client now shows; a last page of several
        // is taken for the whole too, which can only make one list_changed too many pass.
        if serde_json::from_str::<Cursor>(result_json).is_ok_and(|c| c.next_cursor.is_none()) {
            self.hub.shown_list("tools", r.tools);
        }
    }

    fn learn_tool_values(&self, tools: &[serde_json::Value]) {
        let mut cache = self.tools.write().expect("lock");
        for t in tools {
            if let Some(name) = t.get("name").and_then(|n| n.as_str()) {
                let hints = crate::policy::annotate::declared_hints(t.get("annotations"));
                cache.declared.insert(name.to_string(), hints);
            }
        }
    }

    pub fn declared_hints(&self, tool: &str) -> Hints {
        self.tools.read().expect("lock").declared.get(tool).cloned().unwrap_or_default()
    }

    pub fn known_tools(&self) -> Vec<(String, Hints)> {
        let cache = self.tools.read().expect("lock");
        cache.declared.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Fetches every page of tools/list from one instance into the hints cache.
    pub async fn refresh_tools(self: &Arc<Self>) {
        let Some(inst) = self.all_instances().into_iter().find(|i| i.is_ready() && !self.is_modern(i)) else {
            return;
        };
        if let Some(tools) = self.fetch_list(&inst, "tools").await {
            self.learn_tool_values(&tools);
        }
    }

    /// Every page of `<kind>/list` from one instance, sorted by name (or URI); None on any error.
    pub async fn fetch_list(&self, inst: &Instance, kind: &'static str) -> Option<Vec<serde_json::Value>> {
        let method = format!("{kind}/list");
        let timeout = Duration::from_millis(self.limits.init_timeout_ms);
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => format!(r#"{{"cursor":{}}}"#, codec::json_string(c)),
                None => "{}".to_string(),
            };
            let result = self.own_request(inst, &method, &params, timeout, &method).await.ok()?;
            let mut page: serde_json::Value = serde_json::from_str(&result).ok()?;
            items.extend(page.get_mut(kind).and_then(|v| v.as_array_mut()).map(std::mem::take).unwrap_or_default());
            cursor = page.get("nextCursor").and_then(|c| c.as_str()).map(str::to_string);
            if cursor.is_none() {
                sort_list(&mut items);
                return Some(items);
            }
        }
        None
    }

    /// A client's logging/setLevel. A session's own (affinity) instances get its level; shared
    /// instances get the most verbose level any session asked for; the router filters per session.
    pub async fn set_log_level(&self, session: SessionId, level: &str) -> Result<(), String> {
        let Some(rank) = level_rank(level) else {
            return Err(format!("unknown logging level `{level}`"));
        };
        self.hub.set_session_level(session, rank);
        let failures = self.reconcile(Duration::from_millis(self.limits.call_timeout_ms)).await;
        first_failure(failures, |op| matches!(op, Setup::Level))
    }

    /// resources/subscribe: held on one shared instance (so one change is one update) and on the
    /// session's own instances; `resources/updated` goes to subscribers only.
    pub async fn subscribe(&self, session: SessionId, uri: &str) -> Result<(), String> {
        self.hub.subscribe(session, uri);
        let failures = self.reconcile(Duration::from_millis(self.limits.call_timeout_ms)).await;
        let r = first_failure(failures, |op| matches!(op, Setup::Subscribe(u) if u == uri));
        if r.is_err() {
            self.hub.unsubscribe(session, uri);
        }
        r
    }

    pub async fn unsubscribe(&self, session: SessionId, uri: &str) -> Result<(), String> {
        self.hub.unsubscribe(session, uri);
        let failures = self.reconcile(Duration::from_millis(self.limits.call_timeout_ms)).await;
        first_failure(failures, |op| matches!(op, Setup::Unsubscribe(u) if u == uri))
    }

    /// The shared instance that holds subscriptions: the lowest-numbered ready one (or `extra`,
    /// an instance being set up, when it is lower or the only one).
    fn subscription_holder(&self, extra: Option<&Arc<Instance>>) -> Option<u64> {
        self.all_instances()
            .iter()
            .filter(|i| i.is_ready() && !self.is_modern(i))
            .chain(extra)
            .filter(|i| i.owner.is_none())
            .map(|i| i.number())
            .min()
    }

    /// Brings every ready instance's level and subscriptions to what its sessions want.
    async fn reconcile(&self, timeout: Duration) -> Vec<(Setup, String)> {
        let mut failures = Vec::new();
        // Levels and subscriptions are of the initialize era (2026-07-28 has neither request).
        for inst in self.all_instances().into_iter().filter(|i| i.is_ready() && !self.is_modern(i)) {
            let _guard = self.reconcile_lock(&inst).lock_owned().await;
            // Who holds the subscriptions is decided under the lock: it may have changed meanwhile.
            let holder = self.subscription_holder(None);
            failures.extend(self.reconcile_instance(&inst, holder, timeout).await);
        }
        failures
    }

    /// The lock that keeps reconciliations of one instance apart (made on first use; locks of
    /// instances that are gone are dropped here too).
    fn reconcile_lock(&self, inst: &Instance) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.reconciling.lock().expect("lock");
        if locks.len() > 8 {
            let live: BTreeSet<u64> = self.all_instances().iter().map(|i| i.number()).collect();
            locks.retain(|n, _| live.contains(n) || *n == inst.number());
        }
        locks.entry(inst.number()).or_default().clone()
    }

    async fn reconcile_instance(
        &self,
        inst: &Instance,
        holder: Option<u64>,
        timeout: Duration,
    ) -> Vec<(Setup, String)> {
        let (level, uris) = match inst.owner {
            Some(owner) => (self.hub.session_level(owner), self.hub.uris(Some(owner))),
            None if holder == Some(inst.number()) => (self.hub.wanted_level(), self.hub.uris(None)),
            None => (self.hub.wanted_level(), BTreeSet::new()),
        };
        let applied = inst.applied();
        let mut failures = Vec::new();
        let mut step = |op: Setup, r: Result<String, CallError>| match r {
            Ok(_) => true,
            Err(e) => {
                failures.push((op, e.to_string()));
                false
            }
        };
        if let Some(rank) = level.filter(|l| applied.level != Some(*l)) {
            let p = format!(r#"{{"level":"{}"}}"#, LEVELS[rank as usize]);
            if step(Setup::Level, self.own_request(inst, "logging/setLevel", &p, timeout, "logging/setLevel").await) {
                inst.update_applied(|a| a.level = Some(rank));
            }
        }
        for uri in uris.difference(&applied.uris) {
            let p = format!(r#"{{"uri":{}}}"#, codec::json_string(uri));
            let r = self.own_request(inst, "resources/subscribe", &p, timeout, "resources/subscribe").await;
            if step(Setup::Subscribe(uri.clone()), r) {
                inst.update_applied(|a| {
                    a.uris.insert(uri.clone());
                });
            }
        }
        for uri in applied.uris.difference(&uris) {
            let p = format!(r#"{{"uri":{}}}"#, codec::json_string(uri));
            let r = self.own_request(inst, "resources/unsubscribe", &p, timeout, "resources/unsubscribe").await;
            step(Setup::Unsubscribe(uri.clone()), r);
            // Either way the router no longer relays updates for it to anyone who did not ask.
            inst.update_applied(|a| {
                a.uris.remove(uri);
            });
        }
        failures
    }

    /// A session ended: drop its subscriptions and log level, stop its affinity instances.
    /// The upstream housekeeping is bounded tightly: a hung server must not hold a departing
    /// client (or the router's shutdown) for long.
    pub async fn detach(&self, session: SessionId) {
        self.hub.detach(session);
        let mut own = Vec::new();
        for pool in self.every_pool() {
            own.extend(pool.take_session(session));
        }
        if !self.shutdown.is_cancelled() {
            self.reconcile(Duration::from_millis(1000)).await;
        }
        for inst in own {
            inst.shutdown().await;
        }
    }

    /// Params carrying switchyard's own 2026-07-28 envelope (for its probes of such instances).
    fn modern_envelope(&self) -> String {
        let version = codec::json_string(&self.modern_version.lock().expect("lock"));
        format!(
            r#"{{"_meta":{{"{}":{version},"io.modelcontextprotocol/clientInfo":{{"name":"switchyard","version":"{}"}},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}"#,
            codec::PROTOCOL_VERSION_META,
            env!("CARGO_PKG_VERSION")
        )
    }

    /// Shuts every instance down (close stdin, wait, SIGTERM, wait, SIGKILL), all at once.
    pub async fn stop(&self) {
        let all: Vec<Arc<Instance>> = self.every_pool().flat_map(|p| p.take_all()).collect();
        let mut set = tokio::task::JoinSet::new();
        for inst in all {
            set.spawn(async move { inst.shutdown().await });
        }
        while set.join_next().await.is_some() {}
    }

    /// Background upkeep: reap idle instances, ping idle ones and recycle those that do not answer.
    pub async fn maintain(self: Arc<Self>) {
        let interval = Duration::from_millis(self.limits.health_interval_ms.clamp(100, 1000));
        let mut pinging: BTreeSet<u64> = BTreeSet::new();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<u64>();
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
            while let Ok(n) = done_rx.try_recv() {
                pinging.remove(&n);
            }
            for pool in self.every_pool() {
                for inst in pool.take_idle() {
                    tracing::info!(instance = %inst.label(), "idle past idle_timeout_ms; shutting it down");
                    self.tasks.spawn(async move { inst.shutdown().await });
                }
            }
            if self.limits.health_interval_ms == 0 {
                continue;
            }
            let every = Duration::from_millis(self.limits.health_interval_ms);
            for inst in self.all_instances() {
                if inst.is_ready()
                    && inst.inflight() == 0
                    && inst.idle_for() >= every
                    && !pinging.contains(&inst.number())
                {
                    pinging.insert(inst.number());
                    let (server, done) = (self.clone(), done_tx.clone());
                    self.tasks.spawn(async move {
                        server.health_check(&inst).await;
                        let _ = done.send(inst.number());
                    });
                }
            }
        }
    }

    /// When the plugin set changes, tells clients to re-fetch tools/list if any tool's effective
    /// annotations changed (and only then).
    pub async fn watch_policy(self: Arc<Self>) {
        let mut changes = self.policy.changes();
        let mut last = self.policy.current();
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                r = changes.changed() => if r.is_err() { return },
            }
            let now = self.policy.current();
            let known = self.known_tools();
            let differs = !known.is_empty()
                && last.annotate_async("", &self.name, known.clone()).await
                    != now.annotate_async("", &self.name, known).await;
            last = now;
            if differs {
                tracing::info!(server = %self.name, "plugins changed tool annotations; sending tools/list_changed");
                let note = codec::notification("notifications/tools/list_changed", "{}");
                self.hub.broadcast(&note);
            }
        }
    }

    /// Pings an instance; one that does not answer in time is killed (and respawned to `min`).
    pub async fn health_check(&self, inst: &Arc<Instance>) {
        let timeout = Duration::from_millis(self.limits.health_timeout_ms);
        // The 2026-07-28 protocol has no ping: its instances are probed with server/discover.
        let probe = match self.is_modern(inst) {
            true => self.own_request(inst, "server/discover", &self.modern_envelope(), timeout, "health probe").await,
            false => self.own_request(inst, "ping", "{}", timeout, "health ping").await,
        };
        match probe {
            Ok(_) => inst.touch(),
            Err(CallError::Timeout { .. }) => {
                tracing::warn!(
                    instance = %inst.label(),
                    "did not answer a health ping within {} ms; recycling it",
                    timeout.as_millis()
                );
                if let Some(pool) = self.pool_of(inst) {
                    pool.forget(inst);
                }
                inst.kill().await;
                if let Some(pool) = self.pool_of(inst).cloned()
                    && pool.missing() > 0
                {
                    let _ = pool.warm_up().await;
                }
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failed_starts_back_off_then_mark_the_server_down_until_it_recovers() {
        let mut h = StartHealth::default();
        let t0 = Instant::now();
        assert_eq!(h.check(t0), Ok(None));
        for (i, wait_ms) in [100u64, 200, 400, 800].into_iter().enumerate() {
            assert_eq!(h.failure(Instant::now(), format!("exit status {i}")), None);
            assert_eq!(h.check(Instant::now()), Ok(Some(Instant::now() + Duration::from_millis(wait_ms))));
            tokio::time::advance(Duration::from_millis(wait_ms)).await;
            assert_eq!(h.check(Instant::now()), Ok(None));
        }
        assert_eq!(h.failure(Instant::now(), "exit status 7".into()), Some(Duration::from_secs(1)));
        let reason = h.check(Instant::now()).unwrap_err();
        assert!(reason.contains("5 times") && reason.contains("exit status 7"), "{reason}");
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(h.check(Instant::now()).is_err());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(h.check(Instant::now()).is_ok(), "a half-open try is allowed after the down period");
        assert_eq!(h.failure(Instant::now(), "again".into()), Some(Duration::from_secs(2)));
        for _ in 0..10 {
            h.failure(Instant::now(), "again".into());
        }
        assert_eq!(h.failure(Instant::now(), "again".into()), Some(Duration::from_secs(30)));
    }

    fn owners(live: &[SessionId], abandoned: &[SessionId]) -> Owners {
        Owners { live: live.to_vec(), abandoned: abandoned.to_vec() }
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

    #[tokio::test(start_paused = true)]
    async fn a_large_answer_to_a_reading_client_passes_and_a_client_that_stops_reading_is_closed() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let link = SessionLink::new(1, tx, 1000, Buffered::new(usize::MAX));
        let backlog = link.backlog();
        // One answer four times the limit, read slowly (a tenth every second): never closed.
        link.send("x".repeat(4000));
        let l = rx.try_recv().unwrap();
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            backlog.wrote((l.len() + 1) / 10);
        }
        backlog.wrote((l.len() + 1) % 10);
        tokio::time::sleep(BACKLOG_STALL * 2).await;
        assert!(!link.overflow.is_cancelled(), "a large answer to a client that reads is not a stall");
        // Then it reads nothing more: once it took nothing for BACKLOG_STALL, its session closes.
        link.send("y".repeat(4000));
        tokio::time::sleep(BACKLOG_STALL - Duration::from_secs(1)).await;
        link.send("z".repeat(10));
        assert!(!link.overflow.is_cancelled(), "not stalled long enough yet");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(link.overflow.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_slower_than_its_server_is_closed_at_the_cap() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let link = SessionLink::new(1, tx, 1000, Buffered::new(usize::MAX));
        for _ in 0..15 {
            link.send("x".repeat(999));
        }
        assert!(!link.overflow.is_cancelled());
        link.send("x".repeat(2000));
        assert!(link.overflow.is_cancelled(), "past BACKLOG_CAP times the limit");
    }

    #[test]
    fn a_client_is_asked_only_for_what_it_declared() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let link = SessionLink::new(1, tx, 1000, Buffered::new(usize::MAX));
        // Before any initialize nothing is known, so nothing is refused.
        assert_eq!(link.lacks_capability_for("sampling/createMessage"), None);
        link.declare_capabilities(r#"{"capabilities":{"sampling":{},"roots":null},"clientInfo":{}}"#);
        assert_eq!(link.lacks_capability_for("sampling/createMessage"), None);
        assert_eq!(link.lacks_capability_for("elicitation/create"), Some("elicitation"));
        assert_eq!(link.lacks_capability_for("roots/list"), Some("roots"));
        assert_eq!(link.lacks_capability_for("ping"), None);
        // No capabilities at all: none declared.
        link.declare_capabilities(r#"{"protocolVersion":"2025-06-18"}"#);
        assert_eq!(link.lacks_capability_for("sampling/createMessage"), Some("sampling"));
    }

    #[test]
    fn levels_rank_from_emergency_to_debug() {
        assert_eq!(level_rank("emergency"), Some(0));
        assert_eq!(level_rank("warning"), Some(4));
        assert_eq!(level_rank("debug"), Some(7));
        assert_eq!(level_rank("loud"), None);
    }
}
