//! The calls in flight on an instance, by upstream id: found, added and removed in constant
//! time, with the oldest client call at hand (was a call sent behind another? was an answer
//! given before an earlier call's?) instead of a walk over every call for each.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use super::Pending;

/// The in-flight table. Upstream ids are issued in increasing order, so the smallest client id
/// in flight is the oldest client call.
#[derive(Default)]
pub(super) struct Table {
    calls: HashMap<u64, Pending, BuildHasherDefault<IdHasher>>,
    /// The ids of the clients' calls in `calls` (session not 0: the router's own requests, such
    /// as health pings, never make a client's call wait behind them in the server's view).
    clients: BTreeSet<u64>,
}

impl Table {
    pub(super) fn insert(&mut self, id: u64, p: Pending) {
        if p.session != 0 {
            self.clients.insert(id);
        }
        let old = self.calls.insert(id, p);
        debug_assert!(old.is_none(), "an upstream id is issued once");
    }

    pub(super) fn remove(&mut self, id: &u64) -> Option<Pending> {
        let p = self.calls.remove(id)?;
        if p.session != 0 {
            self.clients.remove(id);
        }
        Some(p)
    }

    pub(super) fn get(&self, id: &u64) -> Option<&Pending> {
        self.calls.get(id)
    }

    pub(super) fn contains_key(&self, id: &u64) -> bool {
        self.calls.contains_key(id)
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &u64> {
        self.calls.keys()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Pending> {
        self.calls.values()
    }

    /// Whether any client's call is in flight.
    pub(super) fn any_client(&self) -> bool {
        !self.clients.is_empty()
    }

    /// Whether a client's call sent before `id` is still in flight.
    pub(super) fn client_before(&self, id: u64) -> bool {
        self.clients.first().is_some_and(|first| *first < id)
    }

    /// Takes every call out.
    pub(super) fn drain(&mut self) -> Vec<Pending> {
        self.clients.clear();
        self.calls.drain().map(|(_, p)| p).collect()
    }
}

/// Hashes an upstream id with one multiplication: the ids are issued by the router, one after
/// another, so no one can choose them to collide (what SipHash guards against), and the
/// multiplication spreads consecutive ids over the high bits the table probes with.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(session: u64) -> Pending {
        Pending {
            session,
            reply: tokio::sync::oneshot::channel().0,
            progress: None,
            activity: None,
            sent: tokio::time::Instant::now(),
            behind: false,
            kind: 0,
            stream: None,
        }
    }

    /// What `submit` and `on_response` ask of the table (a call sent behind a client's call;
    /// an answer given while an earlier client call waits), as calls come and go in any order;
    /// the router's own requests count for neither.
    #[test]
    fn the_oldest_client_call_is_known_as_calls_come_and_go() {
        let mut t = Table::default();
        t.insert(1, pending(0));
        assert!(!t.any_client(), "the router's own request is no client's call");
        t.insert(2, pending(7));
        t.insert(3, pending(8));
        t.insert(4, pending(0));
        t.insert(5, pending(7));
        assert!(t.any_client());
        assert!(!t.client_before(2), "only the router's own request is older than 2");
        assert!(t.client_before(3) && t.client_before(5));
        assert_eq!(t.remove(&3).map(|p| p.session), Some(8), "answered out of order");
        assert!(t.client_before(5), "2 still waits");
        assert!(t.remove(&2).is_some());
        assert!(!t.client_before(5), "3 and 2 are answered; 4 is the router's own");
        assert!(t.remove(&2).is_none(), "gone once");
        assert!(t.remove(&5).is_some());
        assert!(!t.any_client(), "only the router's own requests are left");
        assert!(t.contains_key(&1) && t.contains_key(&4) && t.get(&4).is_some());
        let mut keys: Vec<u64> = t.keys().copied().collect();
        keys.sort_unstable();
        assert_eq!(keys, [1, 4]);
        t.insert(6, pending(9));
        assert_eq!(t.drain().len(), 3);
        assert!(!t.any_client() && t.values().next().is_none(), "drained");
    }

    /// Consecutive ids spread over the buckets and the control bytes hashbrown probes with.
    #[test]
    fn consecutive_ids_hash_apart() {
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<IdHasher>::default();
        let top: std::collections::HashSet<u64> = (1..=128u64).map(|id| b.hash_one(id) >> 57).collect();
        let low: std::collections::HashSet<u64> = (1..=128u64).map(|id| b.hash_one(id) & 127).collect();
        assert!(top.len() > 64, "high bits: {} distinct of 128", top.len());
        assert_eq!(low.len(), 128, "low bits: one bucket each");
    }
}
