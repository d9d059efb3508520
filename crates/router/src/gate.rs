//! The concurrency gate of a server: shared, exclusive and keyed calls, admitted in fair FIFO order.
//!
//! A call starts when it conflicts with no running call and with no call that arrived before it
//! and is still waiting. So shared calls flow past each other freely, but once an exclusive call
//! waits, later shared calls queue behind it: a stream of readers cannot starve a writer.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use switchyard_core::decision::Concurrency;

#[derive(Default)]
struct State {
    shared: usize,
    exclusive: bool,
    /// Running keyed calls per key.
    keys: BTreeMap<String, usize>,
    waiting: VecDeque<Waiter>,
    next_ticket: u64,
}

struct Waiter {
    ticket: u64,
    mode: Concurrency,
    wake: oneshot::Sender<()>,
}

fn conflicts(a: &Concurrency, b: &Concurrency) -> bool {
    match (a, b) {
        (Concurrency::Exclusive, _) | (_, Concurrency::Exclusive) => true,
        (Concurrency::Shared, _) | (_, Concurrency::Shared) => false,
        (Concurrency::Keyed(x), Concurrency::Keyed(y)) => x.iter().any(|k| y.contains(k)),
    }
}

impl State {
    fn fits_running(&self, mode: &Concurrency) -> bool {
        if self.exclusive {
            return false;
        }
        match mode {
            Concurrency::Shared => true,
            Concurrency::Exclusive => self.shared == 0 && self.keys.is_empty(),
            Concurrency::Keyed(ks) => ks.iter().all(|k| !self.keys.contains_key(k)),
        }
    }

    fn enter(&mut self, mode: &Concurrency) {
        match mode {
            Concurrency::Shared => self.shared += 1,
            Concurrency::Exclusive => self.exclusive = true,
            Concurrency::Keyed(ks) => {
                for k in ks {
                    *self.keys.entry(k.clone()).or_default() += 1;
                }
            }
        }
    }

    fn leave(&mut self, mode: &Concurrency) {
        match mode {
            Concurrency::Shared => self.shared -= 1,
            Concurrency::Exclusive => self.exclusive = false,
            Concurrency::Keyed(ks) => {
                for k in ks {
                    if let Some(n) = self.keys.get_mut(k) {
                        *n -= 1;
                        if *n == 0 {
                            self.keys.remove(k);
                        }
                    }
                }
            }
        }
    }

    /// Admits every waiter that now fits, in arrival order.
    fn admit(&mut self) {
        let mut i = 0;
        while i < self.waiting.len() {
            let mode = &self.waiting[i].mode;
            let blocked_by_earlier = self.waiting.iter().take(i).any(|w| conflicts(&w.mode, mode));
            if !blocked_by_earlier && self.fits_running(mode) {
                let w = self.waiting.remove(i).expect("index checked");
                if w.wake.is_closed() {
                    continue; // The caller gave up; nothing to enter.
                }
                self.enter(&w.mode);
                if w.wake.send(()).is_err() {
                    // Raced with the caller giving up after the check: undo.
                    self.leave(&w.mode);
                }
                continue;
            }
            i += 1;
        }
    }
}

/// The gate of one server, shared by all its pools.
#[derive(Clone, Default)]
pub struct Gate {
    state: Arc<Mutex<State>>,
}

/// Held while a call runs; dropping it lets the next waiters in.
pub struct Permit {
    gate: Gate,
    mode: Concurrency,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut st = self.gate.state.lock().expect("gate lock");
        st.leave(&self.mode);
        st.admit();
    }
}

/// What a waiting call is waiting for, for "busy" messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blockers {
    pub running_shared: usize,
    pub running_exclusive: bool,
    pub running_keyed: usize,
    /// Calls waiting at the gate; the one asking (a waiting call) is among them.
    pub queued: usize,
}

impl std::fmt::Display for Blockers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.running_exclusive {
            write!(f, "an exclusive call to finish")?;
        } else {
            write!(f, "{} shared and {} keyed calls in flight", self.running_shared, self.running_keyed)?;
        }
        if self.queued > 0 {
            write!(f, ", {} calls queued, this one included", self.queued)?;
        }
        Ok(())
    }
}

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Waits until `mode` may run. Cancel-safe: dropping the future leaves the queue clean.
    pub async fn acquire(&self, mode: Concurrency) -> Permit {
        let rx = {
            let mut st = self.state.lock().expect("gate lock");
            let blocked = st.waiting.iter().any(|w| conflicts(&w.mode, &mode));
            if !blocked && st.fits_running(&mode) {
                st.enter(&mode);
                return Permit { gate: self.clone(), mode };
            }
            let (tx, rx) = oneshot::channel();
            st.next_ticket += 1;
            let ticket = st.next_ticket;
            st.waiting.push_back(Waiter { ticket, mode: mode.clone(), wake: tx });
            (rx, ticket)
        };
        let (rx, ticket) = rx;
        let mut guard = WaitGuard { gate: self, ticket, mode: &mode, admitted: false, rx };
        // The sender stays in the queue until it is used, so this cannot fail while we wait.
        let _ = (&mut guard.rx).await;
        guard.admitted = true;
        drop(guard);
        Permit { gate: self.clone(), mode }
    }

    /// Why a call of `mode` would wait now (for the "waiting" notice).
    pub fn blockers(&self) -> Blockers {
        let st = self.state.lock().expect("gate lock");
        Blockers {
            running_shared: st.shared,
            running_exclusive: st.exclusive,
            running_keyed: st.keys.values().sum(),
            queued: st.waiting.len(),
        }
    }
}

/// Removes a waiter whose caller stopped waiting, and lets later waiters re-check.
///
/// It owns the receiver: fields drop after `drop` runs, so the receiver cannot close before the
/// waiter is settled under the lock. (Were it a separate local of `acquire`, dropping the
/// future would close it first, `admit` on another thread could skip the waiter as abandoned
/// in between, and the guard would then `leave` a mode that never entered.)
struct WaitGuard<'a> {
    gate: &'a Gate,
    ticket: u64,
    mode: &'a Concurrency,
    admitted: bool,
    rx: oneshot::Receiver<()>,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.admitted {
            return;
        }
        let mut st = self.gate.state.lock().expect("gate lock");
        if let Some(i) = st.waiting.iter().position(|w| w.ticket == self.ticket) {
            st.waiting.remove(i);
            st.admit();
        } else {
            // Admitted after the caller stopped polling: give back the slot it never used.
            st.leave(self.mode);
            st.admit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn keyed(ks: &[&str]) -> Concurrency {
        Concurrency::Keyed(ks.iter().map(|k| k.to_string()).collect())
    }

    async fn is_admitted(gate: &Gate, mode: Concurrency) -> Option<Permit> {
        tokio::time::timeout(Duration::from_millis(10), gate.acquire(mode)).await.ok()
    }

    #[tokio::test(start_paused = true)]
    async fn shared_calls_overlap_exclusive_waits_for_drain() {
        let g = Gate::new();
        let a = g.acquire(Concurrency::Shared).await;
        let _b = g.acquire(Concurrency::Shared).await;
        let g2 = g.clone();
        let ex = tokio::spawn(async move { g2.acquire(Concurrency::Exclusive).await });
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!ex.is_finished());
        // A shared call arriving after the waiting exclusive one queues behind it (no starvation).
        assert!(is_admitted(&g, Concurrency::Shared).await.is_none());
        drop(a);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!ex.is_finished());
        drop(_b);
        let ex = ex.await.unwrap();
        assert!(is_admitted(&g, Concurrency::Shared).await.is_none());
        assert!(is_admitted(&g, keyed(&["x"])).await.is_none());
        drop(ex);
        assert!(is_admitted(&g, Concurrency::Shared).await.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_blockers_count_the_calls_that_really_wait() {
        let g = Gate::new();
        let _ex = g.acquire(Concurrency::Exclusive).await;
        let g2 = g.clone();
        let waiter = tokio::spawn(async move { drop(g2.acquire(Concurrency::Shared).await) });
        tokio::time::sleep(Duration::from_millis(1)).await;
        // The one waiting call is the one asking: nothing is queued ahead of it.
        assert_eq!(g.blockers().to_string(), "an exclusive call to finish, 1 calls queued, this one included");
        waiter.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn keyed_calls_conflict_only_on_shared_keys() {
        let g = Gate::new();
        let _a = g.acquire(keyed(&["/a"])).await;
        assert!(is_admitted(&g, keyed(&["/b"])).await.is_some());
        assert!(is_admitted(&g, Concurrency::Shared).await.is_some());
        assert!(is_admitted(&g, keyed(&["/b", "/a"])).await.is_none());
        assert!(is_admitted(&g, Concurrency::Exclusive).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn same_key_runs_in_arrival_order_and_abandoned_waits_leave_no_trace() {
        let g = Gate::new();
        let first = g.acquire(keyed(&["/a"])).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = vec![];
        for i in 0..5 {
            let (g, order) = (g.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _p = g.acquire(keyed(&["/a"])).await;
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // A waiter that gives up must not block the queue.
        assert!(is_admitted(&g, keyed(&["/a"])).await.is_none());
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        let st = g.state.lock().unwrap();
        assert!(st.waiting.is_empty() && st.keys.is_empty() && st.shared == 0 && !st.exclusive);
    }

    /// A waiting call abandoned on one thread (a timeout or a cancel drops its future) while
    /// another thread releases the gate. Dropping the future drops the awaited receiver first and
    /// the WaitGuard after it (checked: rustc drops the awaitee before earlier locals), and the
    /// release can run in between. The interleaving is played here step by step.
    #[tokio::test]
    async fn a_wait_abandoned_while_the_gate_is_released_leaves_the_counts_right() {
        let g = Gate::new();
        let holder = g.acquire(Concurrency::Exclusive).await;
        // A shared call waits behind the exclusive one.
        let (tx, rx) = oneshot::channel();
        let ticket = {
            let mut st = g.state.lock().unwrap();
            st.next_ticket += 1;
            let ticket = st.next_ticket;
            st.waiting.push_back(Waiter { ticket, mode: Concurrency::Shared, wake: tx });
            ticket
        };
        let mode = Concurrency::Shared;
        let guard = WaitGuard { gate: &g, ticket, mode: &mode, admitted: false, rx };
        // Thread A starts dropping the waiting future. The receiver used to be a separate local
        // dropped first; now it lives in the guard, so the earliest thread B's release can run
        // is before the guard goes (and then the waiter is admitted and given back)...
        drop(holder);
        // ...or after it (then the waiter is already out of the queue).
        drop(guard);
        let st = g.state.lock().unwrap();
        assert!(st.waiting.is_empty() && st.shared == 0 && !st.exclusive, "shared = {}", st.shared);
    }
}
