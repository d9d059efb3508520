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
use crate::policy::Policy;
use crate::pool::{Pool, Spawner};
use crate::session::SessionId;
use crate::upstream::{Instance, Spec};

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
}

impl SessionLink {
    pub fn new(id: SessionId, out: mpsc::UnboundedSender<String>, queue_limit: usize) -> Arc<SessionLink> {
        Arc::new(SessionLink {
            id,
            out,
            backlog: Arc::new(Backlog::new(queue_limit)),
            overflow: tokio_util::sync::CancellationToken::new(),
            held: Mutex::new(Some(Vec::new())),
            outbound: Mutex::new(HashMap::new()),
            next_out: AtomicU64::new(1),
            log_level: Mutex::new(None),
        })
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
}

impl Backlog {
    fn new(limit: usize) -> Backlog {
        Backlog {
            limit,
            queued: Default::default(),
            written: AtomicU64::new(0),
            over: Mutex::new(None),
            runs: AtomicU64::new(0),
        }
    }

    fn add(&self, bytes: usize) -> Over {
        let queued = self.queued.fetch_add(bytes, Ordering::AcqRel) + bytes;
        if queued <= self.limit {
            return Over::No;
        }
        if queued > self.limit.saturating_mul(BACKLOG_CAP) {
            return Over::Far;
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

    /// The writer wrote `bytes` to the client.
    pub fn wrote(&self, bytes: usize) {
        self.written.fetch_add(bytes as u64, Ordering::AcqRel);
        let queued = self.queued.fetch_sub(bytes, Ordering::AcqRel) - bytes;
        if queued <= self.limit {
            self.over.lock().expect("lock").take();
        }
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

/// Routes a server's notifications and requests to sessions; tracks subscriptions.
pub struct Hub {
    server: String,
    sessions: RwLock<BTreeMap<SessionId, Arc<SessionLink>>>,
    subscriptions: Mutex<HashMap<String, BTreeSet<SessionId>>>,
}

impl Hub {
    pub fn new(server: &str) -> Arc<Hub> {
        Arc::new(Hub {
            server: server.to_string(),
            sessions: RwLock::new(BTreeMap::new()),
            subscriptions: Mutex::new(HashMap::new()),
        })
    }

    pub fn attach(&self, link: Arc<SessionLink>) {
        self.sessions.write().expect("lock").insert(link.id, link);
    }

    /// Removes a session and its subscriptions.
    pub fn detach(&self, id: SessionId) {
        self.sessions.write().expect("lock").remove(&id);
        let mut subs = self.subscriptions.lock().expect("lock");
        subs.retain(|_, set| {
            set.remove(&id);
            !set.is_empty()
        });
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

    /// A request from the server to a client (sampling, elicitation, roots, ...).
    pub fn server_request(&self, inst: &Arc<Instance>, line: String, env: Envelope) {
        let method = env.method.clone().unwrap_or_default();
        let id_span = env.id.clone().expect("requests have ids");
        let target = match inst.owner {
            Some(owner) => self.session(owner),
            None => {
                let busy = inst.sessions_in_flight();
                let busy: Vec<_> = busy.into_iter().filter(|s| *s != 0).collect();
                match busy.as_slice() {
                    [one] => self.session(*one),
                    [] => {
                        let sessions = self.sessions.read().expect("lock");
                        if sessions.len() == 1 { sessions.values().next().cloned() } else { None }
                    }
                    _ => None,
                }
            }
        };
        let Some(link) = target else {
            let why = format!(
                "switchyard cannot tell which client `{method}` from server `{}` ({}) is for: {} sessions are connected and none or several have calls in flight on it. Use a pool with affinity = \"session\" for servers that call back into clients",
                self.server,
                inst.label(),
                self.session_count()
            );
            tracing::warn!("{why}");
            let reply = codec::response_error(&line[id_span], codec::INTERNAL_ERROR, &why, None);
            let inst = inst.clone();
            tokio::spawn(async move {
                let _ = inst.write(reply).await;
            });
            return;
        };
        let n = link.next_out.fetch_add(1, Ordering::Relaxed);
        link.outbound.lock().expect("lock").insert(n, (Arc::downgrade(inst), line[id_span.clone()].to_string()));
        link.send_from_server(codec::splice(&line, id_span, &n.to_string()));
    }

    /// An instance ended: its requests that clients still hold are withdrawn, so no client
    /// keeps a sampling or elicitation dialog open for a server that is gone.
    pub fn instance_gone(&self, inst: &Instance) {
        for s in self.sessions.read().expect("lock").values() {
            for n in s.take_outbound(inst, None) {
                let reason = codec::json_string(&format!("server instance {} ended", inst.label()));
                s.send_from_server(codec::notification(
                    "notifications/cancelled",
                    &format!(r#"{{"requestId":{n},"reason":{reason}}}"#),
                ));
            }
        }
    }

    /// A client's response to a server-to-client request: back to the instance that asked.
    pub fn client_response(&self, link: &SessionLink, line: &str, env: &Envelope) {
        let Some(span) = env.id.clone() else {
            tracing::warn!(session = link.id, "dropped an error response with id null from the client");
            return;
        };
        let entry = line[span.clone()].parse::<u64>().ok().and_then(|n| link.outbound.lock().expect("lock").remove(&n));
        let Some((inst, upstream_id)) = entry else {
            tracing::warn!(session = link.id, id = &line[span], "dropped a response to an unknown request id");
            return;
        };
        let Some(inst) = inst.upgrade() else { return };
        let rewritten = codec::splice(line, span, &upstream_id);
        tokio::spawn(async move {
            let _ = inst.write(rewritten).await;
        });
    }

    /// A notification from the server: fan it out by the rules of its method.
    pub fn server_notification(&self, inst: &Arc<Instance>, line: String, env: Envelope) {
        let method = env.method.as_deref().unwrap_or_default();
        let fields = env.params.as_ref().map(|p| codec::param_fields(&line, p)).unwrap_or_default();
        match method {
            "notifications/message" => {
                let rank = fields.level.as_deref().and_then(level_rank).unwrap_or(7);
                for s in self.audience(inst) {
                    let wanted = *s.log_level.lock().expect("lock");
                    if wanted.is_none_or(|w| rank <= w) {
                        s.send_from_server(line.clone());
                    }
                }
            }
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
                        s.send_from_server(codec::splice(&line, span, &n.to_string()));
                        return;
                    }
                }
            }
            _ => {
                for s in self.audience(inst) {
                    s.send_from_server(line.clone());
                }
            }
        }
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
    next_instance: AtomicU64,
    health: Mutex<StartHealth>,
    tools: RwLock<ToolCache>,
    /// One reconciliation of levels and subscriptions at a time.
    reconciling: tokio::sync::Mutex<()>,
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
                hub: Hub::new(&name),
                limits: config.limits.clone(),
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
                next_instance: AtomicU64::new(1),
                health: Mutex::new(StartHealth::default()),
                tools: RwLock::new(ToolCache::default()),
                reconciling: tokio::sync::Mutex::new(()),
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
        for inst in self.modern_pools.values().flat_map(|p| p.take_all()) {
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
        // Whatever happens, also when the client cancels this initialize and the future is
        // dropped, waiters must not wait forever: Done, or back to NotStarted.
        let settle = InitSettle(self);
        if let Some(r) = self.init_result.get() {
            return Ok(r.clone());
        }
        let pool = self.default_pool().clone();
        let lease = pool.acquire(session).await;
        drop(settle);
        drop(lease?);
        // Instances of other pools with `min` start in the background.
        for p in self.pools.values() {
            let p = p.clone();
            self.tasks.spawn(async move {
                if let Err(e) = p.warm_up().await {
                    tracing::warn!("pool `{}` could not start its minimum instances: {e}", p.name);
                }
            });
        }
        self.init_result.get().cloned().ok_or_else(|| CallError::Down {
            server: self.name.clone(),
            reason: "no instance finished initialising".into(),
        })
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
            return Err(CallError::NotInitialized { server: self.name.clone() });
        }
        if modern && self.discover_refused() {
            return Err(CallError::Down {
                server: self.name.clone(),
                reason: "it does not serve the 2026-07-28 protocol (it answered server/discover with an error); connect with initialize".into(),
            });
        }
        let number = self.next_instance.fetch_add(1, Ordering::Relaxed);
        let inst = Instance::spawn(&self.spec, number, pool, owner, self.hub.clone()).map_err(|e| {
            let reason = format!(
                "cannot start `{}`: {e}. Check the command after `--` (or [server] command) and that it is on PATH",
                self.spec.command
            );
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
        let _guard = self.reconciling.lock().await;
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
        self.refuse_discover();
        Err(CallError::Down {
            server: self.name.clone(),
            reason: format!(
                "it does not serve the 2026-07-28 protocol (it answered server/discover with {}); its clients fall back to initialize",
                reply.line
            ),
        })
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
        if !inst.applied().uris.is_empty() {
            // It held the subscriptions: another shared instance takes them over.
            self.reconcile(Duration::from_millis(self.limits.call_timeout_ms)).await;
        }
        let death = inst.death().cloned();
        if !inst.has_answered() {
            let status = death.map(|d| d.status).unwrap_or_default();
            self.record_start_failure(format!("{} {status} before answering any call", inst.label()));
        }
        // Back to `min`, with the start backoff applied inside start_instance.
        if pool.missing() > 0 {
            let p = pool.clone();
            self.tasks.spawn(async move {
                if let Err(e) = p.warm_up().await {
                    tracing::warn!("pool `{}`: respawn failed: {e}", p.name);
                }
            });
        }
    }

    /// Records declared hints from a tools/list result that passed through.
    pub fn learn_tools(&self, result_json: &str) {
        #[derive(serde::Deserialize)]
        struct ToolsResult {
            #[serde(default)]
            tools: Vec<serde_json::Value>,
        }
        let Ok(r) = serde_json::from_str::<ToolsResult>(result_json) else { return };
        let mut cache = self.tools.write().expect("lock");
        for t in r.tools {
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
        let mut cursor: Option<String> = None;
        let timeout = Duration::from_millis(self.limits.init_timeout_ms);
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => format!(r#"{{"cursor":{}}}"#, codec::json_string(c)),
                None => "{}".to_string(),
            };
            let Ok(result) = self.own_request(&inst, "tools/list", &params, timeout, "tools/list").await else {
                return;
            };
            self.learn_tools(&result);
            cursor = serde_json::from_str::<serde_json::Value>(&result)
                .ok()
                .and_then(|v| v.get("nextCursor").and_then(|c| c.as_str()).map(str::to_string));
            if cursor.is_none() {
                return;
            }
        }
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
        let _guard = self.reconciling.lock().await;
        let holder = self.subscription_holder(None);
        let mut failures = Vec::new();
        // Levels and subscriptions are of the initialize era (2026-07-28 has neither request).
        for inst in self.all_instances().into_iter().filter(|i| i.is_ready() && !self.is_modern(i)) {
            failures.extend(self.reconcile_instance(&inst, holder, timeout).await);
        }
        failures
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
            let differs = self.known_tools().iter().any(|(tool, declared)| {
                last.annotate(&self.name, tool, declared) != now.annotate(&self.name, tool, declared)
            });
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

    #[tokio::test(start_paused = true)]
    async fn a_large_answer_to_a_reading_client_passes_and_a_client_that_stops_reading_is_closed() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let link = SessionLink::new(1, tx, 1000);
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
        let link = SessionLink::new(1, tx, 1000);
        for _ in 0..15 {
            link.send("x".repeat(999));
        }
        assert!(!link.overflow.is_cancelled());
        link.send("x".repeat(2000));
        assert!(link.overflow.is_cancelled(), "past BACKLOG_CAP times the limit");
    }

    #[test]
    fn levels_rank_from_emergency_to_debug() {
        assert_eq!(level_rank("emergency"), Some(0));
        assert_eq!(level_rank("warning"), Some(4));
        assert_eq!(level_rank("debug"), Some(7));
        assert_eq!(level_rank("loud"), None);
    }
}
