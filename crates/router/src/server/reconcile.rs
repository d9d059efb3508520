//! Per-instance set-up on behalf of sessions: log levels and resource subscriptions.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::Server;
use crate::peer::{LEVELS, level_rank};
use crate::placement::ScopeKey;
use crate::upstream::Instance;
use switchyard_core::codec;
use switchyard_core::error::CallError;
use switchyard_core::ids::SessionId;

/// A piece of per-instance set-up done on behalf of sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Setup {
    Level,
    Subscribe(String),
    Unsubscribe(String),
}

/// The first failure of the kind a client asked about, as its error.
fn first_failure(failures: Vec<(Setup, String)>, mine: impl Fn(&Setup) -> bool) -> Result<(), String> {
    failures.into_iter().find(|(op, _)| mine(op)).map_or(Ok(()), |(_, e)| Err(e))
}

impl Server {
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

    /// resources/subscribe: held on every shared instance (a change made through any of them is
    /// seen: a server tells only the subscribers of its own connection) and on the session's own
    /// instances; `resources/updated` goes to subscribers only, once per change (see
    /// [`super::fanout`]).
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

    /// Brings every ready instance's level and subscriptions to what its sessions want.
    pub(super) async fn reconcile(&self, timeout: Duration) -> Vec<(Setup, String)> {
        let mut failures = Vec::new();
        // Levels and subscriptions are of the initialize era (2026-07-28 has neither request).
        for inst in self.all_instances().into_iter().filter(|i| i.is_ready() && !self.is_modern(i)) {
            let _guard = self.reconcile_lock(&inst).lock_owned().await;
            failures.extend(self.reconcile_instance(&inst, timeout).await);
        }
        failures
    }

    /// The lock that keeps reconciliations of one instance apart (made on first use; locks of
    /// instances that are gone are dropped here too).
    pub(super) fn reconcile_lock(&self, inst: &Instance) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.reconciling.lock().expect("lock");
        if locks.len() > 8 {
            let live: BTreeSet<u64> = self.all_instances().iter().map(|i| i.number()).collect();
            locks.retain(|n, _| live.contains(n) || *n == inst.number());
        }
        locks.entry(inst.number()).or_default().clone()
    }

    pub(super) async fn reconcile_instance(&self, inst: &Instance, timeout: Duration) -> Vec<(Setup, String)> {
        let (level, uris) = match inst.owner {
            Some(owner) => (self.hub.session_level(owner), self.hub.uris(Some(owner))),
            // A shared instance of a client's or a key's scope stops once idle, its
            // subscriptions with it: only those of the shared scope hold the shared ones.
            None if inst.scope == ScopeKey::Shared => (self.hub.wanted_level(), self.hub.uris(None)),
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

    /// A session ended: drop its subscriptions and log level, stop its own instances (of its
    /// affinity, or placed `session`).
    /// The upstream housekeeping is bounded tightly: a hung server must not hold a departing
    /// client (or the router's shutdown) for long.
    pub async fn detach(&self, session: SessionId) {
        self.family.served.leave(session);
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
}
