//! Pools of server instances: pick the least loaded, spawn on demand, queue fairly across sessions.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::placement::{LINGER, ScopeKey};
use crate::upstream::Instance;
use switchyard_config::{Affinity, PoolConfig};
use switchyard_core::error::CallError;
use switchyard_core::ids::SessionId;

/// Names the 2026-07-28 counterpart of a pool (`default` -> `default@2026-07-28`).
pub const MODERN_POOL_SUFFIX: &str = "@2026-07-28";

/// Calls waiting for an instance: served round-robin across sessions, FIFO within one.
///
/// A plain FIFO would let one session's burst of a thousand calls delay another session's
/// single call behind all of them; round-robin bounds that delay by the number of sessions.
#[derive(Default)]
struct Waiters {
    /// Sessions with waiters, in the order they will be served.
    turn: VecDeque<SessionId>,
    by_session: HashMap<SessionId, VecDeque<(u64, Grant)>>,
    len: usize,
}

/// How a waiting call is handed an instance (already counted in its `inflight`), or the error
/// that ended its wait.
type Grant = oneshot::Sender<Result<Arc<Instance>, CallError>>;

impl Waiters {
    fn push(&mut self, session: SessionId, grant: Grant) -> u64 {
        // Unique across scopes: a wait abandoned after its scope was replaced must not take out
        // a waiter of the new one.
        static TICKETS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let ticket = TICKETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let q = self.by_session.entry(session).or_default();
        if q.is_empty() {
            self.turn.push_back(session);
        }
        q.push_back((ticket, grant));
        self.len += 1;
        ticket
    }

    /// The next waiter in round-robin order.
    fn pop(&mut self) -> Option<Grant> {
        let session = *self.turn.front()?;
        self.pop_of(session)
    }

    /// The next waiter of `session` (which has waiters), which then waits its turn again.
    fn pop_of(&mut self, session: SessionId) -> Option<Grant> {
        let q = self.by_session.get_mut(&session)?;
        let (_, grant) = q.pop_front()?;
        self.turn.retain(|s| *s != session);
        if q.is_empty() {
            self.by_session.remove(&session);
        } else {
            self.turn.push_back(session);
        }
        self.len -= 1;
        Some(grant)
    }

    /// Takes out a waiter that stopped waiting; false if it was already served.
    fn remove(&mut self, session: SessionId, ticket: u64) -> bool {
        let Some(q) = self.by_session.get_mut(&session) else { return false };
        let Some(i) = q.iter().position(|(t, _)| *t == ticket) else { return false };
        q.remove(i);
        if q.is_empty() {
            self.by_session.remove(&session);
            self.turn.retain(|s| *s != session);
        }
        self.len -= 1;
        true
    }

    fn drain(&mut self) -> Vec<Grant> {
        self.turn.clear();
        self.len = 0;
        self.by_session.drain().flat_map(|(_, q)| q.into_iter().map(|(_, g)| g)).collect()
    }
}

/// Starts an instance for a pool: `(pool name, the scope it will serve)`.
pub type Spawner = Arc<
    dyn Fn(String, ScopeKey) -> Pin<Box<dyn Future<Output = Result<Arc<Instance>, CallError>> + Send>> + Send + Sync,
>;

/// The instances of one scope: everyone's (shared), one session's, one client's or one key's.
#[derive(Default)]
struct Scope {
    instances: Vec<Arc<Instance>>,
    /// Spawns under way, counted against `max`.
    starting: usize,
    waiters: Waiters,
    /// A spawn failed since an instance last became ready: only new demand may try again, so a
    /// server that cannot start is not respawned in a loop for calls that already wait.
    failing: bool,
    /// Which scope this is: one taken away (session ended, pool closed) and made anew under the
    /// same key is another, and a spawn of the old one must not count itself against it.
    epoch: u64,
    /// Per instance (by number): the session whose calls it has, and how many (see
    /// [`Pool::keep_sessions_apart`]).
    held: HashMap<u64, (SessionId, usize)>,
}

impl Scope {
    /// `inst` takes a call of `session`.
    fn hold(&mut self, inst: &Instance, session: SessionId) {
        let held = self.held.entry(inst.number()).or_insert((session, 0));
        if held.1 == 0 {
            held.0 = session;
        }
        held.1 += 1;
    }

    /// A call of `inst` ended.
    fn release(&mut self, inst: &Instance) {
        if let Some(held) = self.held.get_mut(&inst.number()) {
            held.1 = held.1.saturating_sub(1);
            if held.1 == 0 {
                self.held.remove(&inst.number());
            }
        }
    }

    /// Whether `inst` has calls of a session other than `session`.
    fn held_by_other(&self, inst: &Instance, session: SessionId) -> bool {
        self.held.get(&inst.number()).is_some_and(|(s, n)| *n > 0 && *s != session)
    }

    fn fresh() -> Scope {
        static EPOCHS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Scope { epoch: EPOCHS.fetch_add(1, std::sync::atomic::Ordering::Relaxed), ..Scope::default() }
    }
}

/// The shared instances of one pool across a server and its siblings (`NAME~N`, clients of other
/// profiles): the pool's `max` bounds them all. A sibling with no instance may always start one,
/// else a client of another profile could not be served at all while the others are at `max`.
/// Locked only under a pool's lock, never the other way round.
#[derive(Default)]
pub struct Budget {
    inner: Mutex<BudgetInner>,
}

#[derive(Default)]
struct BudgetInner {
    live: Vec<Weak<Instance>>,
    starting: usize,
}

impl BudgetInner {
    /// Instances alive or starting (the ended ones are forgotten here).
    fn in_use(&mut self) -> usize {
        self.live.retain(|w| w.upgrade().is_some_and(|i| !i.is_dead()));
        self.live.len() + self.starting
    }
}

impl Budget {
    /// Instances alive or starting, across the family.
    pub fn in_use(&self) -> usize {
        self.inner.lock().expect("budget lock").in_use()
    }

    /// Takes a place for one start: under `max`, or the first of a pool that has none.
    fn take(&self, max: usize, first: bool) -> bool {
        let mut inner = self.inner.lock().expect("budget lock");
        if first || inner.in_use() < max {
            inner.starting += 1;
            return true;
        }
        false
    }

    /// A start taken with [`Budget::take`] ended: with an instance, or not.
    fn settle(&self, started: Option<&Arc<Instance>>) {
        let mut inner = self.inner.lock().expect("budget lock");
        inner.starting = inner.starting.saturating_sub(1);
        if let Some(inst) = started {
            inner.live.push(Arc::downgrade(inst));
        }
    }
}

/// A named pool of instances of one server.
///
/// Calls never wait for a particular spawn: a call that finds no free instance queues, the pool
/// starts instances for the calls queued (capacity, up to `max`), and each queued call takes
/// whichever comes first, a slot freed on a running instance or a new instance.
pub struct Pool {
    pub name: String,
    pub config: PoolConfig,
    server: String,
    scopes: Mutex<HashMap<ScopeKey, Scope>>,
    spawner: Spawner,
    /// Its shared instances and those of the same pool of the server's siblings.
    budget: Mutex<Arc<Budget>>,
    /// Set once the server asked a client something (sampling, elicitation): see
    /// [`Pool::keep_sessions_apart`].
    apart: std::sync::OnceLock<Arc<AtomicBool>>,
}

/// The right to send one call to one instance; dropping it frees the instance's slot.
pub struct Lease {
    pub instance: Arc<Instance>,
    key: ScopeKey,
    pool: Arc<Pool>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.instance.end_call();
        let mut scopes = self.pool.scopes.lock().expect("pool lock");
        if let Some(scope) = scopes.get_mut(&self.key) {
            scope.release(&self.instance);
            self.pool.dispatch(scope, &self.key);
        }
    }
}

/// A queued call's place; dropping it before it was served takes it out of the queue, and
/// hands on an instance that was granted to it after it stopped waiting.
struct Wait<'a> {
    pool: &'a Arc<Pool>,
    key: ScopeKey,
    session: SessionId,
    ticket: u64,
    done: bool,
    /// Owned here, so it cannot close before `drop` has settled the wait under the lock.
    rx: oneshot::Receiver<Result<Arc<Instance>, CallError>>,
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut scopes = self.pool.scopes.lock().expect("pool lock");
        if let Some(scope) = scopes.get_mut(&self.key)
            && scope.waiters.remove(self.session, self.ticket)
        {
            return;
        }
        // Served after the caller stopped waiting: give the slot back.
        if let Ok(Ok(inst)) = self.rx.try_recv() {
            inst.end_call();
            if let Some(scope) = scopes.get_mut(&self.key) {
                scope.release(&inst);
                self.pool.dispatch(scope, &self.key);
            }
        }
    }
}

impl Pool {
    pub fn new(name: &str, server: &str, config: PoolConfig, spawner: Spawner) -> Arc<Pool> {
        Arc::new(Pool {
            name: name.to_string(),
            config,
            server: server.to_string(),
            scopes: Mutex::new(HashMap::new()),
            spawner,
            budget: Mutex::new(Arc::default()),
            apart: std::sync::OnceLock::new(),
        })
    }

    /// From when `flag` is set, calls of different sessions go to different instances where the
    /// pool can have them: a server's request to a client (sampling, elicitation) names no call,
    /// and reaches the right client only when the instance that sent it has one client's calls.
    /// An instance with another session's calls is passed over while the pool may start one
    /// more; at `max` they share, as before (the request is refused when it cannot be told).
    /// Given once, as the pool is made (a second flag is ignored).
    pub fn keep_sessions_apart(&self, flag: Arc<AtomicBool>) {
        let _ = self.apart.set(flag);
    }

    fn apart(&self) -> bool {
        self.apart.get().is_some_and(|a| a.load(Ordering::Relaxed))
    }

    /// The count of shared instances this pool's `max` bounds (its own and its siblings').
    pub fn budget(&self) -> Arc<Budget> {
        self.budget.lock().expect("budget lock").clone()
    }

    /// Counts this pool's shared instances in `budget` (a sibling's pool, in its base's), before
    /// it starts any.
    pub fn share_budget(&self, budget: Arc<Budget>) {
        *self.budget.lock().expect("budget lock") = budget;
    }

    /// The scope of a call of `session` that asks for `wanted` (its placement): a placement
    /// narrows what the pool shares, never widens it, so a pool of `affinity = "session"` keeps
    /// every call on its session's own instances.
    fn scope_key(&self, session: SessionId, wanted: &ScopeKey) -> ScopeKey {
        match self.config.affinity {
            Affinity::None => wanted.clone(),
            Affinity::Session => ScopeKey::Session(session),
        }
    }

    /// Whether a scope of this pool is a placement's (a policy chose it), which
    /// `max_placements` bounds. A pool of `affinity = "session"` has no placed scopes: its
    /// sessions' own are its affinity's.
    fn is_placed(&self, key: &ScopeKey) -> bool {
        self.config.affinity == Affinity::None && *key != ScopeKey::Shared
    }

    /// Why a call that needs instances of placed scope `key` is refused: this pool has none of
    /// that scope yet, and runs those of `max_placements` scopes already (None: it may go on).
    /// Scopes left with nothing (their instances stopped or ended) are let go here first.
    fn placement_refusal(&self, scopes: &mut HashMap<ScopeKey, Scope>, key: &ScopeKey) -> Option<CallError> {
        if !self.is_placed(key) || scopes.contains_key(key) {
            return None;
        }
        scopes.retain(|k, s| {
            !self.is_placed(k) || !s.instances.iter().all(|i| i.is_dead()) || s.starting > 0 || s.waiters.len > 0
        });
        let live = scopes.keys().filter(|k| self.is_placed(k)).count();
        let max = self.config.max_placements;
        if live < max {
            return None;
        }
        Some(CallError::Busy {
            server: self.server.clone(),
            reason: format!(
                "the policy placed it on instances of their own ({}), and pool `{}` runs instances for {live} placements already (max_placements = {max}). Raise it ([servers.{server}.pools.{pool}] max_placements = {}), or have the policy place calls under fewer keys; a client's or key's instances stop once idle for the pool's idle_timeout_ms",
                key.describe(),
                self.name,
                max * 2,
                // A sibling (`NAME~2`) has its base's config.
                server = self.server.split('~').next().unwrap_or(&self.server),
                pool = self.config_name(),
            ),
        })
    }

    /// The pool's name in the config (a 2026-07-28 counterpart's without its suffix).
    fn config_name(&self) -> &str {
        self.name.strip_suffix(MODERN_POOL_SUFFIX).unwrap_or(&self.name)
    }

    /// Instances alive now, across scopes.
    pub fn instances(&self) -> Vec<Arc<Instance>> {
        let scopes = self.scopes.lock().expect("pool lock");
        scopes.values().flat_map(|s| s.instances.iter().cloned()).collect()
    }

    /// The least-loaded ready instance that may take another call of `session`: under
    /// `max_inflight`, and reading its stdin (its write backlog under the limit); while sessions
    /// are kept apart, one without another session's calls, unless none can come (nothing
    /// starting, no room to start one: see [`Pool::keep_sessions_apart`]).
    fn pick(&self, scope: &Scope, key: &ScopeKey, session: SessionId) -> Option<Arc<Instance>> {
        let limit = self.config.max_inflight;
        let free = |i: &&Arc<Instance>| i.is_ready() && (limit == 0 || i.inflight() < limit) && i.is_writable();
        let least = |apart: bool| {
            scope
                .instances
                .iter()
                .filter(free)
                .filter(|i| !apart || !scope.held_by_other(i, session))
                .min_by_key(|i| i.inflight())
                .cloned()
        };
        if !self.apart() {
            return least(false);
        }
        // Shared only when no instance of its own can come: none starting, no room for one.
        let own_may_come = scope.starting > 0 || self.has_room(scope, key);
        least(true).or_else(|| (!own_may_come).then(|| least(false)).flatten())
    }

    /// Whether `scope` could start one more instance now (without taking the place).
    fn has_room(&self, scope: &Scope, key: &ScopeKey) -> bool {
        scope.instances.len() + scope.starting < self.config.max
            && (*key != ScopeKey::Shared || self.budget().in_use() < self.config.max)
    }

    /// Whether `scope` may start one more instance, and if so, its place taken in the family's
    /// budget (shared scopes only: a session's own instances are bounded per session).
    fn take_room(&self, scope: &Scope, key: &ScopeKey) -> bool {
        if scope.instances.len() + scope.starting >= self.config.max {
            return false;
        }
        *key != ScopeKey::Shared
            || self.budget().take(self.config.max, scope.instances.is_empty() && scope.starting == 0)
    }

    /// Hands free instances to queued calls, in fair order, then starts instances for the calls
    /// still queued. Runs under the pool lock whenever capacity may have changed.
    fn dispatch(self: &Arc<Self>, scope: &mut Scope, key: &ScopeKey) {
        scope.instances.retain(|i| !i.is_dead());
        while scope.waiters.len > 0 {
            // In turn, the first session with a waiter that an instance may take now.
            let next = scope.waiters.turn.iter().find_map(|s| self.pick(scope, key, *s).map(|i| (*s, i)));
            let Some((session, inst)) = next else { break };
            let grant = scope.waiters.pop_of(session).expect("a session in turn has waiters");
            inst.begin_call();
            scope.hold(&inst, session);
            if grant.send(Ok(inst.clone())).is_err() {
                // Cannot happen while `Wait` owns the receiver; keep the count right regardless.
                inst.end_call();
                scope.release(&inst);
            }
        }
        self.grow(scope, key, false);
    }

    fn dispatch_key(self: &Arc<Self>, key: &ScopeKey) {
        let mut scopes = self.scopes.lock().expect("pool lock");
        if let Some(scope) = scopes.get_mut(key) {
            self.dispatch(scope, key);
        }
    }

    /// Starts instances for queued calls not covered by the spawns under way (up to `max`).
    /// `fresh`: a new call asks, which may try again after a failed spawn. So may calls that
    /// nothing else could serve (their instances died): a failure then ends their wait.
    fn grow(self: &Arc<Self>, scope: &mut Scope, key: &ScopeKey, fresh: bool) {
        let stranded = scope.instances.is_empty() && scope.starting == 0;
        if scope.failing && !fresh && !stranded {
            return;
        }
        let per_instance = match self.config.max_inflight {
            0 => usize::MAX,
            n => n,
        };
        while scope.waiters.len > scope.starting.saturating_mul(per_instance) && self.take_room(scope, key) {
            scope.starting += 1;
            drop(self.start(key.clone(), scope.epoch));
            if fresh {
                // One new call is worth one try.
                break;
            }
        }
    }

    /// Spawns one instance as a task of its own (the caller has counted it in `starting`): no
    /// caller waits for it in particular, and a caller that stops waiting cannot abandon it
    /// half-way, which would leak `starting` or leave a started child outside the pool.
    fn start(self: &Arc<Self>, key: ScopeKey, epoch: u64) -> tokio::task::JoinHandle<Result<Arc<Instance>, CallError>> {
        let me = self.clone();
        tokio::spawn(async move {
            let result = (me.spawner)(me.name.clone(), key.clone()).await;
            if key == ScopeKey::Shared {
                me.budget().settle(result.as_ref().ok());
            }
            let mut scopes = me.scopes.lock().expect("pool lock");
            let Some(scope) = scopes.get_mut(&key).filter(|s| s.epoch == epoch) else {
                // The scope went while the instance started (its session ended, or shutdown).
                drop(scopes);
                if let Ok(inst) = &result {
                    let inst = inst.clone();
                    tokio::spawn(async move { inst.shutdown().await });
                }
                return result.and(Err(CallError::ShuttingDown));
            };
            scope.starting -= 1;
            match &result {
                Ok(inst) => {
                    let pool = Arc::downgrade(&me);
                    let drained = key.clone();
                    inst.on_drain(Box::new(move || {
                        if let Some(pool) = pool.upgrade() {
                            pool.dispatch_key(&drained);
                        }
                    }));
                    scope.instances.push(inst.clone());
                    scope.failing = false;
                    me.dispatch(scope, &key);
                }
                Err(e) => {
                    scope.failing = true;
                    scope.instances.retain(|i| !i.is_dead());
                    if scope.instances.is_empty() && scope.starting == 0 {
                        // Nothing left that could serve the queued calls: they get the reason.
                        for grant in scope.waiters.drain() {
                            let _ = grant.send(Err(e.clone()));
                        }
                    }
                }
            }
            result
        })
    }

    /// Starts the `min` instances of a shared pool, all at once, and waits for them (affinity
    /// pools start on demand). The first failure, if any, is returned.
    pub async fn warm_up(self: &Arc<Self>) -> Result<(), CallError> {
        if self.config.affinity != Affinity::None {
            return Ok(());
        }
        let starts: Vec<_> = {
            let mut scopes = self.scopes.lock().expect("pool lock");
            let scope = scopes.entry(ScopeKey::Shared).or_insert_with(Scope::fresh);
            scope.instances.retain(|i| !i.is_dead());
            let need = self.config.min.saturating_sub(scope.instances.len() + scope.starting);
            let mut starts = Vec::with_capacity(need);
            for _ in 0..need {
                if !self.take_room(scope, &ScopeKey::Shared) {
                    break;
                }
                scope.starting += 1;
                starts.push(self.start(ScopeKey::Shared, scope.epoch));
            }
            starts
        };
        let mut first = Ok(());
        for s in starts {
            if let Err(e) = s.await.unwrap_or(Err(CallError::ShuttingDown))
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    /// Gets an instance for one call: the least-loaded free one at once, else a place in the
    /// queue (fair across sessions, bounded by `max_queue`) until an instance frees up or a new
    /// one is ready, whichever comes first. The caller bounds the wait with the call's deadline.
    /// `wanted`: the instances the call's placement asks for (see [`Pool::scope_key`]).
    pub async fn acquire(self: &Arc<Self>, session: SessionId, wanted: &ScopeKey) -> Result<Lease, CallError> {
        let key = self.scope_key(session, wanted);
        let (rx, ticket) = {
            let mut scopes = self.scopes.lock().expect("pool lock");
            if let Some(busy) = self.placement_refusal(&mut scopes, &key) {
                return Err(busy);
            }
            let scope = scopes.entry(key.clone()).or_insert_with(Scope::fresh);
            scope.instances.retain(|i| !i.is_dead());
            if scope.waiters.len == 0
                && let Some(instance) = self.pick(scope, &key, session)
            {
                // Pipelining: a busy instance serves at once, and a spare one starts for later calls.
                if self.config.max_inflight == 0
                    && instance.inflight() > 0
                    && scope.starting == 0
                    && !scope.failing
                    && self.take_room(scope, &key)
                {
                    scope.starting += 1;
                    drop(self.start(key.clone(), scope.epoch));
                }
                instance.begin_call();
                scope.hold(&instance, session);
                return Ok(Lease { instance, key, pool: self.clone() });
            }
            if scope.waiters.len >= self.config.max_queue {
                return Err(CallError::Busy {
                    server: self.server.clone(),
                    reason: format!(
                        "pool `{}` has {} calls queued already (max_queue = {}){}; try again shortly or raise `max_queue`/`max` of the pool",
                        self.name,
                        scope.waiters.len,
                        self.config.max_queue,
                        self.stalled(scope)
                    ),
                });
            }
            let (tx, rx) = oneshot::channel();
            let ticket = scope.waiters.push(session, tx);
            self.grow(scope, &key, true);
            (rx, ticket)
        };
        let mut wait = Wait { pool: self, key, session, ticket, done: false, rx };
        let granted = (&mut wait.rx).await;
        wait.done = true;
        match granted {
            Ok(Ok(instance)) => Ok(Lease { instance, key: wait.key.clone(), pool: self.clone() }),
            Ok(Err(e)) => Err(e),
            // The scope went (its session ended, or shutdown).
            Err(_) => Err(CallError::ShuttingDown),
        }
    }

    /// Instances that stopped reading their stdin, as a clause for messages ("" when none).
    fn stalled(&self, scope: &Scope) -> String {
        let stalled: Vec<String> = scope
            .instances
            .iter()
            .filter(|i| !i.is_writable())
            .map(|i| format!("{} ({} KiB unread)", i.label(), i.backlog() / 1024))
            .collect();
        match stalled.len() {
            0 => String::new(),
            _ => format!("; not reading its stdin: {}", stalled.join(", ")),
        }
    }

    /// What a call of `session` placed on `wanted` waits for, for the "waiting" notice and
    /// timeout errors.
    pub fn wait_status(&self, session: SessionId, wanted: &ScopeKey) -> String {
        let key = self.scope_key(session, wanted);
        let of = match self.is_placed(&key) {
            true => format!(" placed {}", key.describe()),
            false => String::new(),
        };
        let scopes = self.scopes.lock().expect("pool lock");
        let Some(scope) = scopes.get(&key) else {
            return format!("an instance of pool `{}`{of}", self.name);
        };
        let limit = self.config.max_inflight;
        let busy = scope.instances.iter().filter(|i| i.is_ready() && limit > 0 && i.inflight() >= limit).count();
        format!(
            "an instance of pool `{}`{of} ({} calls queued, this one included; {} of {} instances busy, {} starting{})",
            self.name,
            scope.waiters.len,
            busy,
            scope.instances.len(),
            scope.starting,
            self.stalled(scope)
        )
    }

    /// Removes a dead instance; queued calls go to another or get a new one.
    pub fn forget(self: &Arc<Self>, instance: &Instance) {
        let mut scopes = self.scopes.lock().expect("pool lock");
        for (key, scope) in scopes.iter_mut() {
            scope.instances.retain(|i| i.number() != instance.number());
            self.dispatch(scope, key);
        }
    }

    /// Instances needed to get back to `min` (shared pools only).
    pub fn missing(&self) -> usize {
        if self.config.affinity != Affinity::None {
            return 0;
        }
        let scopes = self.scopes.lock().expect("pool lock");
        let have = scopes.get(&ScopeKey::Shared).map(|s| s.instances.len() + s.starting).unwrap_or(0);
        self.config.min.saturating_sub(have)
    }

    /// Takes the instances of a session that ended (its affinity's, and those of calls placed
    /// on it), for shutdown.
    pub fn take_session(&self, session: SessionId) -> Vec<Arc<Instance>> {
        let mut scopes = self.scopes.lock().expect("pool lock");
        scopes.remove(&ScopeKey::Session(session)).map(|s| s.instances).unwrap_or_default()
    }

    /// Takes idle instances for shutdown: shared ones above `min` and a session's beyond its
    /// first, idle for `idle_timeout_ms` (0: never); every instance of a client's or a key's
    /// (which outlive their sessions) idle that long, or [`LINGER`] when it is 0. A
    /// placement left with nothing is let go, and no longer counts against `max_placements`.
    pub fn take_idle(&self) -> Vec<Arc<Instance>> {
        let mut scopes = self.scopes.lock().expect("pool lock");
        let mut out = Vec::new();
        for (key, scope) in scopes.iter_mut() {
            let (keep, idle_for) = self.reaping(key);
            if idle_for.is_zero() {
                continue;
            }
            while scope.instances.len() > keep {
                let Some(i) = scope.instances.iter().position(|i| i.inflight() == 0 && i.idle_for() >= idle_for) else {
                    break;
                };
                out.push(scope.instances.remove(i));
            }
        }
        scopes.retain(|k, s| !k.lingers() || !s.instances.is_empty() || s.starting > 0 || s.waiters.len > 0);
        out
    }

    /// How many instances of a scope stay however idle, and how long the others may be idle
    /// (zero: for ever).
    fn reaping(&self, key: &ScopeKey) -> (usize, Duration) {
        let configured = Duration::from_millis(self.config.idle_timeout_ms);
        match key {
            ScopeKey::Shared => (self.config.min, configured),
            ScopeKey::Session(_) => (1, configured),
            ScopeKey::Client(_) | ScopeKey::Key(_) if configured.is_zero() => (0, LINGER),
            ScopeKey::Client(_) | ScopeKey::Key(_) => (0, configured),
        }
    }

    /// When [`Pool::take_idle`] may next find something to take: the soonest an idle instance
    /// that may be stopped passes its limit, or, for one that is busy or not there yet, the
    /// shortest limit (it starts counting no earlier than now). `None` when nothing is ever taken.
    pub fn next_reap(&self) -> Option<Duration> {
        let scopes = self.scopes.lock().expect("pool lock");
        // The limits of every kind of scope: a scope that appears later has one of them.
        let mut soonest = [ScopeKey::Shared, ScopeKey::Session(0), ScopeKey::Key("".into())]
            .iter()
            .map(|k| self.reaping(k).1)
            .filter(|d| !d.is_zero())
            .min();
        for (key, scope) in scopes.iter() {
            let (keep, idle_for) = self.reaping(key);
            if idle_for.is_zero() || scope.instances.len() <= keep {
                continue;
            }
            for i in scope.instances.iter().filter(|i| i.inflight() == 0) {
                let left = idle_for.saturating_sub(i.idle_for());
                soonest = Some(soonest.map_or(left, |s| s.min(left)));
            }
        }
        soonest
    }

    /// Takes every instance, for shutdown.
    pub fn take_all(&self) -> Vec<Arc<Instance>> {
        let mut scopes = self.scopes.lock().expect("pool lock");
        scopes.drain().flat_map(|(_, s)| s.instances).collect()
    }

    /// Takes every instance because the pool cannot serve (`why`), and answers every call
    /// waiting for one with `why` instead of leaving it to read as a shutdown.
    pub fn close_with(&self, why: CallError) -> Vec<Arc<Instance>> {
        let mut scopes = self.scopes.lock().expect("pool lock");
        let mut out = Vec::new();
        for (_, mut scope) in scopes.drain() {
            while let Some(grant) = scope.waiters.pop() {
                let _ = grant.send(Err(why.clone()));
            }
            out.append(&mut scope.instances);
        }
        out
    }

    /// Calls waiting for an instance of this pool.
    pub fn queued(&self) -> usize {
        let scopes = self.scopes.lock().expect("pool lock");
        scopes.values().map(|s| s.waiters.len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

    use tokio::time::Instant;

    use crate::upstream::fake::{CountEvents, FakeConnector, answer_all};

    /// Instances run over the in-memory transport; the cold start is a sleep, so paused time drives it.
    fn spawner(cold_start: Duration, fail: bool, spawned: Arc<AtomicUsize>) -> Spawner {
        failing_spawner(cold_start, Arc::new(AtomicBool::new(fail)), spawned)
    }

    fn failing_spawner(cold_start: Duration, fail: Arc<AtomicBool>, spawned: Arc<AtomicUsize>) -> Spawner {
        let next = Arc::new(AtomicU64::new(1));
        Arc::new(move |pool, owner| {
            let (spawned, next, fail) = (spawned.clone(), next.clone(), fail.clone());
            Box::pin(async move {
                spawned.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(cold_start).await;
                if fail.load(Ordering::SeqCst) {
                    return Err(CallError::Down { server: "t".into(), reason: "it exited at once".into() });
                }
                let n = next.fetch_add(1, Ordering::SeqCst);
                let events: Arc<dyn crate::upstream::Events> = Arc::new(CountEvents::default());
                let connector = FakeConnector::new(answer_all());
                let inst = Instance::start(&*connector, "t", n, &pool, owner, events).await.expect("fake connect");
                inst.mark_ready();
                Ok(inst)
            })
        })
    }

    fn pool(min: usize, max: usize, max_inflight: usize, max_queue: usize, spawner: Spawner) -> Arc<Pool> {
        let config = PoolConfig { min, max, max_inflight, max_queue, ..PoolConfig::default() };
        Pool::new("default", "t", config, spawner)
    }

    fn starting(p: &Pool) -> usize {
        p.scopes.lock().unwrap().values().map(|s| s.starting).sum()
    }

    fn key(k: &str) -> ScopeKey {
        ScopeKey::Key(Arc::from(k))
    }

    fn client(name: &str, dir: &str) -> ScopeKey {
        let id = crate::placement::ClientId { name: name.into(), dir: Some(dir.into()), token: None };
        ScopeKey::Client(Arc::new(id))
    }

    /// Once sessions are kept apart, a call of a second session passes over an instance with the
    /// first's calls and gets one of its own while the pool has room; at `max` they share. Calls
    /// of one session still share its instance.
    #[tokio::test(start_paused = true)]
    async fn sessions_kept_apart_get_instances_of_their_own_while_there_is_room() {
        let spawned = Arc::new(AtomicUsize::new(0));
        let p = pool(0, 2, 0, 16, spawner(Duration::from_millis(10), false, spawned.clone()));
        let apart = Arc::new(AtomicBool::new(false));
        p.keep_sessions_apart(apart.clone());
        let a1 = p.acquire(1, &ScopeKey::Shared).await.unwrap();
        // Not yet apart: session 2 shares the first instance (pipelining).
        let shared = p.acquire(2, &ScopeKey::Shared).await.unwrap();
        assert_eq!(shared.instance.number(), a1.instance.number());
        drop(shared);
        apart.store(true, Ordering::Relaxed);
        let a2 = p.acquire(1, &ScopeKey::Shared).await.unwrap();
        assert_eq!(a2.instance.number(), a1.instance.number(), "one session's calls share its instance");
        let b = p.acquire(2, &ScopeKey::Shared).await.unwrap();
        assert_ne!(b.instance.number(), a1.instance.number(), "session 2 got session 1's instance");
        // At max (2): a third session shares the least loaded.
        let c = p.acquire(3, &ScopeKey::Shared).await.unwrap();
        assert_eq!(c.instance.number(), b.instance.number());
        assert_eq!(spawned.load(Ordering::SeqCst), 2);
        // Once session 1's calls end, its instance is anyone's again.
        drop((a1, a2));
        let d = p.acquire(4, &ScopeKey::Shared).await.unwrap();
        assert_ne!(d.instance.number(), b.instance.number(), "session 4 was put with others' calls");
    }

    /// Each placement has instances of its own, shared by the calls placed alike whoever makes
    /// them: a session's are that session's (its owner, as affinity's are), a client's are its
    /// sessions' together, a key's are every caller's; unplaced calls keep the shared ones.
    #[tokio::test(start_paused = true)]
    async fn placed_calls_run_on_instances_of_their_placement_only() {
        let p = pool(1, 4, 0, 100, spawner(Duration::from_millis(10), false, Arc::default()));
        p.warm_up().await.unwrap();
        let on = |session: SessionId, wanted: ScopeKey| {
            let p = p.clone();
            async move { p.acquire(session, &wanted).await.unwrap().instance.clone() }
        };
        let shared = on(1, ScopeKey::Shared).await;
        assert_eq!(on(2, ScopeKey::Shared).await.number(), shared.number());
        let s1 = on(1, ScopeKey::Session(1)).await;
        let s2 = on(2, ScopeKey::Session(2)).await;
        assert_eq!((s1.owner, s2.owner), (Some(1), Some(2)));
        assert_eq!(on(1, ScopeKey::Session(1)).await.number(), s1.number());
        let cursor = on(1, client("cursor", "/p")).await;
        assert_eq!(on(2, client("cursor", "/p")).await.number(), cursor.number(), "one client, two sessions");
        let elsewhere = on(1, client("cursor", "/q")).await;
        let docs = on(1, key("docs")).await;
        assert_eq!(on(2, key("docs")).await.number(), docs.number(), "a key is every caller's");
        let other = on(2, key("other")).await;
        let numbers: std::collections::BTreeSet<u64> =
            [&shared, &s1, &s2, &cursor, &elsewhere, &docs, &other].iter().map(|i| i.number()).collect();
        assert_eq!(numbers.len(), 7, "every placement has an instance of its own");
        // A client's and a key's serve several sessions: attributed by their calls, as shared ones.
        assert_eq!((cursor.owner, docs.owner), (None, None));
        assert_eq!((cursor.scope.clone(), docs.scope.clone()), (client("cursor", "/p"), key("docs")));
        // A pool of affinity = "session" keeps every call on the session's own instances.
        let config = PoolConfig { min: 0, max: 2, affinity: Affinity::Session, ..PoolConfig::default() };
        let a = Pool::new("default", "t", config, spawner(Duration::from_millis(10), false, Arc::default()));
        let mine = a.acquire(5, &ScopeKey::Session(5)).await.unwrap().instance.number();
        assert_eq!(a.acquire(5, &key("docs")).await.unwrap().instance.number(), mine);
        assert_eq!(a.acquire(5, &client("cursor", "/p")).await.unwrap().instance.owner, Some(5));
    }

    /// A client's instances outlive its session and stop once idle for `idle_timeout_ms` (for
    /// a pool that never stops idle instances, after [`LINGER`]); a session's stop with it.
    #[tokio::test(start_paused = true)]
    async fn a_clients_instances_outlive_its_sessions_and_stop_once_idle() {
        for (idle_timeout_ms, idle) in [(0, LINGER), (5_000, Duration::from_secs(5))] {
            let config = PoolConfig { min: 0, max: 2, idle_timeout_ms, ..PoolConfig::default() };
            let p = Pool::new("default", "t", config, spawner(Duration::from_millis(10), false, Arc::default()));
            drop(p.acquire(1, &client("cursor", "/p")).await.unwrap());
            drop(p.acquire(1, &ScopeKey::Session(1)).await.unwrap());
            let ended = p.take_session(1);
            assert_eq!(ended.iter().map(|i| i.scope.clone()).collect::<Vec<_>>(), [ScopeKey::Session(1)]);
            assert_eq!(p.instances().len(), 1, "the client's instance outlives its session");
            tokio::time::sleep(idle - Duration::from_millis(100)).await;
            assert!(p.take_idle().is_empty(), "stopped before it was idle for {idle:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
            let stopped = p.take_idle();
            assert_eq!(stopped.len(), 1, "idle_timeout_ms = {idle_timeout_ms}");
            assert_eq!(stopped[0].scope, client("cursor", "/p"));
            assert!(p.scopes.lock().unwrap().is_empty(), "the placement is let go with its instances");
        }
    }

    /// A pool runs instances for `max_placements` placements at most: one more is refused at
    /// once, saying what the limit is and how to raise it; a placement let go makes room.
    #[tokio::test(start_paused = true)]
    async fn a_placement_past_max_placements_is_refused_with_the_limit_and_the_way_out() {
        let config = PoolConfig { min: 0, max: 2, max_placements: 2, idle_timeout_ms: 1000, ..PoolConfig::default() };
        let spawned = Arc::new(AtomicUsize::new(0));
        let p = Pool::new("search", "t", config, spawner(Duration::from_millis(10), false, spawned.clone()));
        drop(p.acquire(1, &key("a")).await.unwrap());
        drop(p.acquire(1, &ScopeKey::Session(1)).await.unwrap());
        let e = p.acquire(2, &key("b")).await.err().expect("a third placement");
        let msg = e.to_string();
        assert!(matches!(e, CallError::Busy { .. }), "{e:?}");
        for part in [
            "(key b)",
            "pool `search`",
            "2 placements already (max_placements = 2)",
            "[servers.t.pools.search] max_placements = 4",
        ] {
            assert!(msg.contains(part), "{part:?} missing from: {msg}");
        }
        assert_eq!(spawned.load(Ordering::SeqCst), 2, "nothing started for the refused call");
        // The placements it runs, and unplaced calls, are still served.
        drop(p.acquire(2, &key("a")).await.unwrap());
        drop(p.acquire(2, &ScopeKey::Shared).await.unwrap());
        // Key `a` idles out: its place goes to `b`.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(p.take_idle().len(), 2, "key a's instance and the shared one above min");
        assert_eq!(p.acquire(2, &key("b")).await.unwrap().instance.scope, key("b"));
        // A session's end lets its placement go too.
        p.take_session(1);
        drop(p.acquire(2, &key("c")).await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_call_takes_a_freed_instance_instead_of_waiting_for_a_cold_start() {
        let spawned = Arc::new(AtomicUsize::new(0));
        let p = pool(1, 4, 1, 100, spawner(Duration::from_secs(3), false, spawned.clone()));
        p.warm_up().await.unwrap();
        let held = p.acquire(1, &ScopeKey::Shared).await.unwrap();
        let started = Instant::now();
        let p2 = p.clone();
        let waiter = tokio::spawn(async move { p2.acquire(2, &ScopeKey::Shared).await.map(|l| l.instance.number()) });
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(starting(&p), 1, "a queued call starts an instance for capacity");
        drop(held);
        assert_eq!(waiter.await.unwrap().unwrap(), 1, "it takes the freed instance");
        assert!(started.elapsed() < Duration::from_millis(10), "it waited {:?}", started.elapsed());
        // The new instance still joins the pool.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!((p.instances().len(), starting(&p), spawned.load(Ordering::SeqCst)), (2, 0, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_call_takes_a_new_instance_when_that_comes_first() {
        let p = pool(1, 2, 1, 100, spawner(Duration::from_secs(3), false, Arc::default()));
        p.warm_up().await.unwrap();
        let _held = p.acquire(1, &ScopeKey::Shared).await.unwrap();
        let started = Instant::now();
        let lease = p.acquire(2, &ScopeKey::Shared).await.unwrap();
        assert_eq!(lease.instance.number(), 2);
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }

    /// A pool's `max` counts the shared instances of the same pool of the server's siblings
    /// (clients of other profiles) too: at `max`, a sibling that has an instance queues its
    /// calls for it, and one that has none still starts one.
    #[tokio::test(start_paused = true)]
    async fn max_counts_the_instances_of_every_profile() {
        let spawned = Arc::new(AtomicUsize::new(0));
        let base = pool(0, 2, 1, 100, spawner(Duration::from_millis(100), false, spawned.clone()));
        let sibling = pool(0, 2, 1, 100, spawner(Duration::from_millis(100), false, spawned.clone()));
        sibling.share_budget(base.budget());
        let (_a, _b) =
            (base.acquire(1, &ScopeKey::Shared).await.unwrap(), base.acquire(2, &ScopeKey::Shared).await.unwrap());
        assert_eq!(base.instances().len(), 2);
        let first = sibling.acquire(3, &ScopeKey::Shared).await.expect("a profile with no instance gets one");
        assert_eq!((sibling.instances().len(), base.budget().in_use()), (1, 3));
        let s2 = sibling.clone();
        let waiter = tokio::spawn(async move { s2.acquire(4, &ScopeKey::Shared).await.map(|l| l.instance.number()) });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished(), "the second call did not wait");
        assert_eq!(spawned.load(Ordering::SeqCst), 3, "an instance started beyond max");
        let number = first.instance.number();
        drop(first);
        assert_eq!(waiter.await.unwrap().unwrap(), number, "it takes the sibling's instance");
        // A pool of its own (no sibling) still grows to its max.
        let alone = pool(0, 2, 1, 100, spawner(Duration::from_millis(100), false, Arc::default()));
        let (_c, _d) =
            (alone.acquire(1, &ScopeKey::Shared).await.unwrap(), alone.acquire(2, &ScopeKey::Shared).await.unwrap());
        assert_eq!(alone.instances().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn min_instances_start_at_once() {
        let p = pool(3, 3, 1, 100, spawner(Duration::from_secs(3), false, Arc::default()));
        let started = Instant::now();
        p.warm_up().await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert_eq!(p.instances().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_stops_waiting_leaves_the_spawn_to_finish_into_the_pool() {
        let p = pool(0, 2, 1, 100, spawner(Duration::from_secs(3), false, Arc::default()));
        let gave_up = tokio::time::timeout(Duration::from_secs(1), p.acquire(1, &ScopeKey::Shared)).await;
        assert!(gave_up.is_err());
        assert_eq!((p.queued(), starting(&p)), (0, 1));
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!((p.instances().len(), starting(&p)), (1, 0));
        assert_eq!(p.instances()[0].inflight(), 0, "nobody holds the instance");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_start_fails_the_calls_nothing_else_can_serve_and_is_not_retried_in_a_loop() {
        let spawned = Arc::new(AtomicUsize::new(0));
        let p = pool(0, 2, 1, 100, spawner(Duration::from_millis(50), true, spawned.clone()));
        let e = p.acquire(1, &ScopeKey::Shared).await.err().expect("no instance can start");
        assert!(e.to_string().contains("exited at once"), "{e}");
        assert_eq!(spawned.load(Ordering::SeqCst), 1);

        // With a busy instance, a failed start for capacity leaves queued calls waiting for it.
        let good = pool(1, 2, 1, 100, spawner(Duration::from_millis(50), false, Arc::default()));
        good.warm_up().await.unwrap();
        let held = good.acquire(1, &ScopeKey::Shared).await.unwrap();
        let spawned = Arc::new(AtomicUsize::new(0));
        let p =
            Pool::new("default", "t", good.config.clone(), spawner(Duration::from_millis(50), true, spawned.clone()));
        p.scopes.lock().unwrap().insert(ScopeKey::Shared, Scope { instances: good.instances(), ..Scope::fresh() });
        let p2 = p.clone();
        let waiter = tokio::spawn(async move { p2.acquire(2, &ScopeKey::Shared).await.map(|l| l.instance.number()) });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiter.is_finished());
        assert_eq!(spawned.load(Ordering::SeqCst), 1, "a failing start was retried for the same call");
        // The busy instance frees up (its lease belongs to the other pool object: hand it over).
        drop(held);
        p.dispatch_key(&ScopeKey::Shared);
        assert_eq!(waiter.await.unwrap().unwrap(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_stranded_by_a_dead_instance_get_a_new_one_even_after_a_failed_start() {
        let fail = Arc::new(AtomicBool::new(false));
        let p = pool(1, 2, 1, 100, failing_spawner(Duration::from_millis(50), fail.clone(), Arc::default()));
        p.warm_up().await.unwrap();
        let held = p.acquire(1, &ScopeKey::Shared).await.unwrap();
        fail.store(true, Ordering::SeqCst);
        let p2 = p.clone();
        let waiter = tokio::spawn(async move { p2.acquire(2, &ScopeKey::Shared).await.map(|l| l.instance.number()) });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished(), "the busy instance may still free up");
        // The server works again, but the busy instance dies: nothing is left for the waiter.
        fail.store(false, Ordering::SeqCst);
        held.instance.kill().await;
        p.forget(&held.instance);
        drop(held);
        let got = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        assert_eq!(got.expect("the stranded call waited on").unwrap().unwrap(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn queued_calls_are_served_round_robin_across_sessions() {
        let p = pool(1, 1, 1, 100, spawner(Duration::from_millis(10), false, Arc::default()));
        p.warm_up().await.unwrap();
        let held = p.acquire(1, &ScopeKey::Shared).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = vec![];
        // Session 1 queues a burst of four, then session 2 queues one.
        for (i, s) in [(10, 1), (11, 1), (12, 1), (13, 1), (20, 2)] {
            let (p, order) = (p.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _lease = p.acquire(s, &ScopeKey::Shared).await.unwrap();
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(p.queued(), 5);
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        // Session 2's call goes second, not behind the whole burst.
        assert_eq!(*order.lock().unwrap(), vec![10, 20, 11, 12, 13]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_answers_busy_at_once_and_abandoned_waits_free_their_place() {
        let p = pool(1, 1, 1, 1, spawner(Duration::from_millis(10), false, Arc::default()));
        p.warm_up().await.unwrap();
        let held = p.acquire(1, &ScopeKey::Shared).await.unwrap();
        let p2 = p.clone();
        let waiter = tokio::spawn(async move { p2.acquire(2, &ScopeKey::Shared).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(1)).await;
        let busy = p.acquire(3, &ScopeKey::Shared).await.err().expect("the queue is full");
        assert!(busy.to_string().contains("1 calls queued already (max_queue = 1)"), "{busy}");
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(p.queued(), 0);
        drop(held);
        let again = tokio::time::timeout(Duration::from_millis(5), p.acquire(3, &ScopeKey::Shared)).await;
        assert!(again.is_ok(), "the instance must be free again");
    }

    /// A wait abandoned after the pool handed it an instance (the grant and the drop race on
    /// two threads): the instance's slot must come back.
    #[tokio::test(start_paused = true)]
    async fn a_wait_abandoned_after_it_was_served_gives_the_slot_back() {
        let p = pool(1, 1, 1, 10, spawner(Duration::from_millis(10), false, Arc::default()));
        p.warm_up().await.unwrap();
        let held = p.acquire(1, &ScopeKey::Shared).await.unwrap();
        let (tx, rx) = oneshot::channel();
        let ticket = p.scopes.lock().unwrap().get_mut(&ScopeKey::Shared).unwrap().waiters.push(2, tx);
        let wait = Wait { pool: &p, key: ScopeKey::Shared, session: 2, ticket, done: false, rx };
        // The holder finishes and the pool serves the waiter...
        drop(held);
        assert_eq!(p.instances()[0].inflight(), 1);
        // ...whose caller has stopped waiting.
        drop(wait);
        assert_eq!((p.instances()[0].inflight(), p.queued()), (0, 0));
    }
}
