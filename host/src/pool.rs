//! Pools of server instances: pick the least loaded, spawn on demand, queue fairly across sessions.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use crate::config::{Affinity, PoolConfig};
use crate::error::CallError;
use crate::session::SessionId;
use crate::upstream::Instance;

/// A counting semaphore that hands out freed slots round-robin across sessions, FIFO within one.
///
/// A plain FIFO would let one session's burst of a thousand calls delay another session's
/// single call behind all of them; round-robin bounds that delay by the number of sessions.
pub struct FairQueue {
    state: Mutex<FqState>,
}

struct FqState {
    free: usize,
    /// Sessions with waiters, in the order they will be served.
    turn: VecDeque<SessionId>,
    waiters: HashMap<SessionId, VecDeque<(u64, oneshot::Sender<()>)>>,
    waiting: usize,
    next_ticket: u64,
}

/// One slot of a [`FairQueue`]; dropping it hands the slot on.
pub struct Slot {
    queue: Arc<FairQueue>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.queue.release();
    }
}

impl FairQueue {
    pub fn new(slots: usize) -> Arc<FairQueue> {
        Arc::new(FairQueue {
            state: Mutex::new(FqState {
                free: slots,
                turn: VecDeque::new(),
                waiters: HashMap::new(),
                waiting: 0,
                next_ticket: 0,
            }),
        })
    }

    /// Calls waiting for a slot now.
    pub fn waiting(&self) -> usize {
        self.state.lock().expect("queue lock").waiting
    }

    /// Takes a slot, waiting fairly. `Err(queued)` at once when `max_queue` calls already wait.
    pub async fn acquire(self: &Arc<Self>, session: SessionId, max_queue: usize) -> Result<Slot, usize> {
        let (rx, ticket) = {
            let mut st = self.state.lock().expect("queue lock");
            if st.free > 0 && st.waiting == 0 {
                st.free -= 1;
                return Ok(Slot { queue: self.clone() });
            }
            if st.waiting >= max_queue {
                return Err(st.waiting);
            }
            let (tx, rx) = oneshot::channel();
            st.next_ticket += 1;
            let ticket = st.next_ticket;
            let q = st.waiters.entry(session).or_default();
            if q.is_empty() {
                st.turn.push_back(session);
            }
            st.waiters.get_mut(&session).expect("just inserted").push_back((ticket, tx));
            st.waiting += 1;
            (rx, ticket)
        };
        let mut guard = FqWait { queue: self, session, ticket, granted: false, rx };
        let _ = (&mut guard.rx).await;
        guard.granted = true;
        Ok(Slot { queue: self.clone() })
    }

    fn release(&self) {
        let mut st = self.state.lock().expect("queue lock");
        st.free += 1;
        st.grant();
    }
}

impl FqState {
    fn grant(&mut self) {
        while self.free > 0 {
            let Some(session) = self.turn.pop_front() else { return };
            let q = self.waiters.get_mut(&session).expect("turn lists sessions with waiters");
            let (_, tx) = q.pop_front().expect("non-empty while in turn");
            let more = !q.is_empty();
            if more {
                self.turn.push_back(session);
            } else {
                self.waiters.remove(&session);
            }
            self.waiting -= 1;
            if tx.send(()).is_ok() {
                self.free -= 1;
            }
        }
    }
}

/// Owns the receiver, so it cannot close before `drop` has settled the wait under the lock
/// (see `gate::WaitGuard`): otherwise a grant racing the drop skipped the waiter without using
/// the slot, and the guard then handed the slot back a second time.
struct FqWait<'a> {
    queue: &'a Arc<FairQueue>,
    session: SessionId,
    ticket: u64,
    granted: bool,
    rx: oneshot::Receiver<()>,
}

impl Drop for FqWait<'_> {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let mut st = self.queue.state.lock().expect("queue lock");
        let mut found = false;
        if let Some(q) = st.waiters.get_mut(&self.session)
            && let Some(i) = q.iter().position(|(t, _)| *t == self.ticket)
        {
            q.remove(i);
            found = true;
            if q.is_empty() {
                st.waiters.remove(&self.session);
                st.turn.retain(|s| *s != self.session);
            }
        }
        if found {
            st.waiting -= 1;
        } else {
            // Granted after the caller stopped waiting: hand the slot on.
            st.free += 1;
            st.grant();
        }
    }
}

/// Starts an instance for a pool: `(pool name, owning session for affinity pools)`.
pub type Spawner = Arc<
    dyn Fn(String, Option<SessionId>) -> Pin<Box<dyn Future<Output = Result<Arc<Instance>, CallError>> + Send>>
        + Send
        + Sync,
>;

/// The instances serving one session (affinity = session) or everyone (affinity = none).
struct Scope {
    instances: Vec<Arc<Instance>>,
    /// Spawns under way, counted against `max`.
    starting: usize,
    queue: Option<Arc<FairQueue>>,
}

/// A named pool of instances of one server.
pub struct Pool {
    pub name: String,
    pub config: PoolConfig,
    server: String,
    scopes: Mutex<HashMap<Option<SessionId>, Scope>>,
    /// Woken when an instance becomes ready, dies, or frees a call slot.
    changed: Notify,
    spawner: Spawner,
}

/// The right to send one call to one instance; dropping it frees the instance's slot.
pub struct Lease {
    pub instance: Arc<Instance>,
    _slot: Option<Slot>,
    pool: Arc<Pool>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.instance.end_call();
        self.pool.changed.notify_waiters();
    }
}

impl Pool {
    pub fn new(name: &str, server: &str, config: PoolConfig, spawner: Spawner) -> Arc<Pool> {
        Arc::new(Pool {
            name: name.to_string(),
            config,
            server: server.to_string(),
            scopes: Mutex::new(HashMap::new()),
            changed: Notify::new(),
            spawner,
        })
    }

    fn scope_key(&self, session: SessionId) -> Option<SessionId> {
        match self.config.affinity {
            Affinity::None => None,
            Affinity::Session => Some(session),
        }
    }

    fn new_scope(&self) -> Scope {
        let queue = (self.config.max_inflight > 0).then(|| FairQueue::new(self.config.max * self.config.max_inflight));
        Scope { instances: Vec::new(), starting: 0, queue }
    }

    /// Instances alive now, across scopes.
    pub fn instances(&self) -> Vec<Arc<Instance>> {
        let scopes = self.scopes.lock().expect("pool lock");
        scopes.values().flat_map(|s| s.instances.iter().cloned()).collect()
    }

    /// Starts the `min` instances of a shared pool (affinity pools start on demand).
    pub async fn warm_up(self: &Arc<Self>) -> Result<(), CallError> {
        if self.config.affinity != Affinity::None {
            return Ok(());
        }
        loop {
            let need = {
                let mut scopes = self.scopes.lock().expect("pool lock");
                let scope = scopes.entry(None).or_insert_with(|| self.new_scope());
                let have = scope.instances.len() + scope.starting;
                if have >= self.config.min {
                    return Ok(());
                }
                scope.starting += 1;
                true
            };
            if need {
                self.spawn_into(None).await?;
            }
        }
    }

    /// Runs the spawn as a task of its own: a caller that stops waiting (its call was cancelled
    /// or timed out) must not abandon it half-way, which would leak `starting` (the pool could
    /// never grow to `max` again) and leave a started child outside the pool.
    async fn spawn_into(self: &Arc<Self>, key: Option<SessionId>) -> Result<Arc<Instance>, CallError> {
        let me = self.clone();
        let task = tokio::spawn(async move {
            let result = (me.spawner)(me.name.clone(), key).await;
            let mut scopes = me.scopes.lock().expect("pool lock");
            let Some(scope) = scopes.get_mut(&key) else {
                // The scope went while the instance started (its session ended, or shutdown).
                drop(scopes);
                if let Ok(inst) = &result {
                    let inst = inst.clone();
                    tokio::spawn(async move { inst.shutdown().await });
                }
                return result.and(Err(CallError::ShuttingDown));
            };
            scope.starting -= 1;
            if let Ok(inst) = &result {
                scope.instances.push(inst.clone());
            }
            drop(scopes);
            me.changed.notify_waiters();
            result
        });
        task.await.unwrap_or(Err(CallError::ShuttingDown))
    }

    /// Gets an instance for one call: waits for a slot (fair across sessions, bounded by
    /// `max_queue`), then picks the least-loaded ready instance or spawns one.
    /// The caller bounds the wait with the call's deadline.
    pub async fn acquire(self: &Arc<Self>, session: SessionId) -> Result<Lease, CallError> {
        let key = self.scope_key(session);
        let queue = {
            let mut scopes = self.scopes.lock().expect("pool lock");
            scopes.entry(key).or_insert_with(|| self.new_scope()).queue.clone()
        };
        let slot = match queue {
            Some(q) => Some(q.acquire(session, self.config.max_queue).await.map_err(|queued| CallError::Busy {
                server: self.server.clone(),
                reason: format!(
                    "pool `{}` has {} calls queued already (max_queue = {})",
                    self.name, queued, self.config.max_queue
                ),
            })?),
            None => None,
        };
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            enum Next {
                Use(Arc<Instance>),
                Spawn,
                Wait,
            }
            let next = {
                let mut scopes = self.scopes.lock().expect("pool lock");
                let scope = scopes.entry(key).or_insert_with(|| self.new_scope());
                scope.instances.retain(|i| !i.is_dead());
                let limit = self.config.max_inflight;
                let best = scope
                    .instances
                    .iter()
                    .filter(|i| i.is_ready() && (limit == 0 || i.inflight() < limit))
                    .min_by_key(|i| i.inflight())
                    .cloned();
                let room = scope.instances.len() + scope.starting < self.config.max;
                match best {
                    // Unlimited pipelining: spread onto a new instance only when every one is busy.
                    Some(i) if limit == 0 && i.inflight() > 0 && room && scope.starting == 0 => {
                        scope.starting += 1;
                        Next::Spawn
                    }
                    Some(i) => {
                        i.begin_call();
                        Next::Use(i)
                    }
                    None if room => {
                        scope.starting += 1;
                        Next::Spawn
                    }
                    None => Next::Wait,
                }
            };
            match next {
                Next::Use(instance) => return Ok(Lease { instance, _slot: slot, pool: self.clone() }),
                Next::Spawn => {
                    // A failed spawn is final for this call; a slow one is bounded by the caller.
                    self.spawn_into(key).await?;
                }
                Next::Wait => changed.await,
            }
        }
    }

    /// Removes a dead instance and wakes waiters so they pick another or spawn.
    pub fn forget(&self, instance: &Instance) {
        let mut scopes = self.scopes.lock().expect("pool lock");
        for scope in scopes.values_mut() {
            scope.instances.retain(|i| i.number() != instance.number());
        }
        drop(scopes);
        self.changed.notify_waiters();
    }

    /// Instances needed to get back to `min` (shared pools only).
    pub fn missing(&self) -> usize {
        if self.config.affinity != Affinity::None {
            return 0;
        }
        let scopes = self.scopes.lock().expect("pool lock");
        let have = scopes.get(&None).map(|s| s.instances.len() + s.starting).unwrap_or(0);
        self.config.min.saturating_sub(have)
    }

    /// Takes the instances of a session that ended (affinity pools), for shutdown.
    pub fn take_session(&self, session: SessionId) -> Vec<Arc<Instance>> {
        if self.config.affinity != Affinity::Session {
            return Vec::new();
        }
        let mut scopes = self.scopes.lock().expect("pool lock");
        scopes.remove(&Some(session)).map(|s| s.instances).unwrap_or_default()
    }

    /// Takes idle instances above `min` that have been idle for `idle_timeout_ms`, for shutdown.
    pub fn take_idle(&self) -> Vec<Arc<Instance>> {
        if self.config.idle_timeout_ms == 0 {
            return Vec::new();
        }
        let idle_for = Duration::from_millis(self.config.idle_timeout_ms);
        let mut scopes = self.scopes.lock().expect("pool lock");
        let mut out = Vec::new();
        for (key, scope) in scopes.iter_mut() {
            let keep = if key.is_none() { self.config.min } else { 1 };
            while scope.instances.len() > keep {
                let Some(i) = scope.instances.iter().position(|i| i.inflight() == 0 && i.idle_for() >= idle_for) else {
                    break;
                };
                out.push(scope.instances.remove(i));
            }
        }
        out
    }

    /// Takes every instance, for shutdown.
    pub fn take_all(&self) -> Vec<Arc<Instance>> {
        let mut scopes = self.scopes.lock().expect("pool lock");
        scopes.drain().flat_map(|(_, s)| s.instances).collect()
    }

    /// Calls waiting for a slot in this pool.
    pub fn queued(&self) -> usize {
        let scopes = self.scopes.lock().expect("pool lock");
        scopes.values().filter_map(|s| s.queue.as_ref()).map(|q| q.waiting()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn slots_are_handed_round_robin_across_sessions() {
        let q = FairQueue::new(1);
        let held = q.acquire(1, 100).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = vec![];
        // Session 1 queues a burst of four, then session 2 queues one.
        for (i, s) in [(10, 1), (11, 1), (12, 1), (13, 1), (20, 2)] {
            let (q, order) = (q.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _slot = q.acquire(s, 100).await.unwrap();
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        // Session 2's call goes second, not behind the whole burst.
        assert_eq!(*order.lock().unwrap(), vec![10, 20, 11, 12, 13]);
    }

    #[tokio::test(start_paused = true)]
    async fn full_queue_answers_at_once_and_abandoned_waits_free_their_place() {
        let q = FairQueue::new(1);
        let held = q.acquire(1, 1).await.unwrap();
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.acquire(2, 1).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(q.acquire(3, 1).await.err(), Some(1));
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(q.waiting(), 0);
        drop(held);
        let again = tokio::time::timeout(Duration::from_millis(5), q.acquire(3, 1)).await;
        assert!(again.is_ok(), "the slot must be free again");
    }

    /// A slot wait abandoned on one thread while another frees a slot: dropping the waiting
    /// future drops the receiver before the FqWait guard, and the release can run in between.
    #[tokio::test]
    async fn a_wait_abandoned_while_a_slot_is_freed_does_not_mint_a_slot() {
        let q = FairQueue::new(1);
        let held = q.acquire(1, 10).await.unwrap();
        let (tx, rx) = oneshot::channel();
        let ticket = {
            let mut st = q.state.lock().unwrap();
            st.next_ticket += 1;
            let ticket = st.next_ticket;
            st.turn.push_back(2);
            st.waiters.entry(2).or_default().push_back((ticket, tx));
            st.waiting += 1;
            ticket
        };
        let guard = FqWait { queue: &q, session: 2, ticket, granted: false, rx };
        // The receiver used to be dropped (thread A) before the guard, with the release
        // (thread B) in between; now it lives in the guard, so the release comes before it...
        drop(held);
        // ...or after the guard has taken the waiter out of the queue.
        drop(guard);
        let st = q.state.lock().unwrap();
        assert_eq!((st.free, st.waiting), (1, 0), "a queue of one slot now has {} free", st.free);
    }
}
