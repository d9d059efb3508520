//! Upkeep of running instances: idle reaping, health pings, and what happens when one dies.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Server;
use crate::upstream::Instance;
use switchyard_core::error::CallError;

impl Server {
    pub(super) async fn on_death(self: Arc<Self>, inst: Arc<Instance>) {
        self.hub.instance_gone(&inst);
        let Some(pool) = self.pool_of(&inst).cloned() else { return };
        pool.forget(&inst);
        if inst.is_closing() || self.shutdown.is_cancelled() {
            return;
        }
        let death = inst.death().cloned();
        self.counts.unexpected_ends.fetch_add(1, Ordering::Relaxed);
        let status = death.as_ref().map_or("", |d| d.status.as_str());
        self.metrics.instance_died(&self.name, &inst.pool(), status);
        let status = death.map_or_else(|| "an unknown status".to_string(), |d| d.status);
        self.note_death(&inst, &status);
        // Back to `min`, with the start backoff applied inside start_instance (the new instance
        // takes the shared subscriptions as it starts).
        if pool.missing() > 0 {
            let p = pool.clone();
            let server = self.clone();
            self.tasks.spawn(async move {
                match p.warm_up().await {
                    Ok(()) => server.metrics.instance_restarted(&server.name, &p.name),
                    Err(e) => tracing::warn!("pool `{}`: respawn failed: {e}", p.name),
                }
            });
        }
    }

    /// Notes what happened to `inst`, which got ready and then ended by itself with `status`,
    /// as the server's last error: in a call or idle, before or after answering calls. It
    /// started, so it is no failed start; one that answered no call paces the next start
    /// instead (see [`super::breaker::StartHealth`]), and the note says how.
    fn note_death(&self, inst: &Instance, status: &str) {
        let answered = inst.answered_calls();
        let mut what = death_text(inst.label(), status, answered, inst.calls_at_end());
        if answered == 0 {
            let (in_a_row, wait) = self.record_early_death();
            if in_a_row > 1 {
                tracing::warn!(
                    server = %self.name,
                    "{in_a_row} instances in a row ended before answering a call; the next start waits {:.1} s",
                    wait.as_secs_f64()
                );
            }
            what += &pace_text(in_a_row, wait);
        }
        self.note_error(what);
    }

    /// Background upkeep: reap idle instances, ping idle ones and recycle those that do not answer.
    /// It sleeps until the next of these is due (or a ping ends), never on a fixed tick: a server
    /// whose instances are busy or fresh wakes nobody.
    pub async fn maintain(self: Arc<Self>) {
        let mut pings = Pings::default();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<u64>();
        loop {
            let wait = self.next_upkeep(&pings);
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                Some(n) = done_rx.recv() => {
                    pings.ended(n);
                    continue;
                }
                _ = tokio::time::sleep(wait) => {}
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
            let instances = self.all_instances();
            pings.last.retain(|n, _| instances.iter().any(|i| i.number() == *n));
            for inst in instances {
                if pings.due_in(&inst, every) == Some(Duration::ZERO) {
                    pings.started(inst.number());
                    let (server, done) = (self.clone(), done_tx.clone());
                    self.tasks.spawn(async move {
                        server.health_check(&inst).await;
                        let _ = done.send(inst.number());
                    });
                }
            }
        }
    }

    /// How long [`Server::maintain`] may sleep: until an idle instance is due for its ping or its
    /// stop. An instance busy now, or started later, is idle from some time after now, so it is
    /// due no sooner than the shortest period from now; that period bounds the sleep.
    pub(crate) fn next_upkeep(&self, pings: &Pings) -> Duration {
        // Not below this: instances that became due together are handled in one wake-up.
        const FLOOR: Duration = Duration::from_millis(100);
        // Nothing due at all (no pings, nothing ever stopped): look again now and then anyway.
        const CEILING: Duration = Duration::from_secs(3600);
        let mut wait = CEILING;
        for pool in self.every_pool() {
            if let Some(d) = pool.next_reap() {
                wait = wait.min(d);
            }
        }
        if self.limits.health_interval_ms != 0 {
            let every = Duration::from_millis(self.limits.health_interval_ms);
            wait = wait.min(every);
            for inst in self.all_instances() {
                if let Some(due) = pings.due_in(&inst, every) {
                    wait = wait.min(due);
                }
            }
        }
        wait.max(FLOOR)
    }

    /// Pings an instance; one that does not answer in time is killed (and respawned to `min`).
    pub async fn health_check(&self, inst: &Arc<Instance>) {
        let timeout = Duration::from_millis(self.limits.health_timeout_ms);
        // The 2026-07-28 protocol has no ping: its instances are probed with server/discover.
        // Quiet: a server that wants a sign-in is not signed in to for a health check.
        let probe = match self.is_modern(inst) {
            true => {
                self.own_request_as(inst, "server/discover", &self.modern_envelope(), timeout, "health probe", true)
                    .await
            }
            false => self.own_request_as(inst, "ping", "{}", timeout, "health ping", true).await,
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
                inst.kill_because(format!(
                    "recycled: it did not answer a health ping within {} ms",
                    timeout.as_millis()
                ))
                .await;
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

/// How an instance that got ready ended: with `status`, in its calls (`waiting` were in flight)
/// or idle, after answering `answered` calls or before any.
fn death_text(label: &str, status: &str, answered: u64, waiting: usize) -> String {
    let calls = |n: u64| if n == 1 { "1 call".to_string() } else { format!("{n} calls") };
    let when = match (answered, waiting) {
        (0, 0) => "while idle, after it started and before it answered any call".to_string(),
        (0, 1) => "in its first call, after it started".to_string(),
        (0, n) => format!("in its first {n} calls (it answered none), after it started"),
        (a, 0) => format!("while idle, after answering {}", calls(a)),
        (a, 1) => format!("in a call, after answering {}", calls(a)),
        (a, n) => format!("in {n} calls, after answering {}", calls(a)),
    };
    format!("{label} ended ({status}) {when}")
}

/// What the death of an instance that answered no call, the `in_a_row`th such in a row, does to
/// the next start (which waits `wait`).
fn pace_text(in_a_row: u32, wait: Duration) -> String {
    match in_a_row {
        0 | 1 => "; not a failed start: the next instance starts at once".to_string(),
        n => format!(
            "; not a failed start, but {n} instances in a row ended before answering a call: the next one starts after \
             {:.1} s (restarts are paced up to 10 s apart while this goes on, never held down; an answered call ends it)",
            wait.as_secs_f64()
        ),
    }
}

/// A server's health pings: which run now, and when each instance was last pinged. An instance is
/// pinged once it has been idle for the health interval, and again no sooner than an interval
/// after its last ping, whatever that ping's answer: a server that refuses pings (a sign-in is
/// missing) is asked once an interval, not in a loop.
#[derive(Default)]
pub(crate) struct Pings {
    running: BTreeSet<u64>,
    last: HashMap<u64, Instant>,
}

impl Pings {
    /// A ping of instance `n` starts now.
    pub(crate) fn started(&mut self, n: u64) {
        self.running.insert(n);
        self.last.insert(n, Instant::now());
    }

    /// The ping of instance `n` ended (answered or not).
    pub(crate) fn ended(&mut self, n: u64) {
        self.running.remove(&n);
    }

    /// How long until `inst` is due a ping (zero: now); None while it is not pinged at all:
    /// not ready, busy, or a ping of it runs.
    fn due_in(&self, inst: &Instance, every: Duration) -> Option<Duration> {
        if !inst.is_ready() || inst.inflight() > 0 || self.running.contains(&inst.number()) {
            return None;
        }
        let idle_left = every.saturating_sub(inst.idle_for());
        let since_ping = self.last.get(&inst.number()).map(Instant::elapsed);
        Some(idle_left.max(since_ping.map_or(Duration::ZERO, |s| every.saturating_sub(s))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Status tells a death in the first call from one while idle, before any call or after
    /// some (the calls in flight are counted as the instance ends, before its calls are cleared).
    #[test]
    fn a_death_says_whether_it_came_in_a_call_or_idle_and_after_how_many_answers() {
        let said = |answered, waiting| death_text("fx#2", "exit status 7", answered, waiting);
        assert_eq!(
            said(0, 0),
            "fx#2 ended (exit status 7) while idle, after it started and before it answered any call"
        );
        assert_eq!(said(0, 1), "fx#2 ended (exit status 7) in its first call, after it started");
        assert_eq!(said(0, 3), "fx#2 ended (exit status 7) in its first 3 calls (it answered none), after it started");
        assert_eq!(said(1, 0), "fx#2 ended (exit status 7) while idle, after answering 1 call");
        assert_eq!(said(12, 1), "fx#2 ended (exit status 7) in a call, after answering 12 calls");
        assert_eq!(said(2, 2), "fx#2 ended (exit status 7) in 2 calls, after answering 2 calls");
    }

    #[test]
    fn an_early_death_says_it_is_no_failed_start_and_how_long_the_next_start_waits() {
        assert_eq!(pace_text(1, Duration::ZERO), "; not a failed start: the next instance starts at once");
        let paced = pace_text(3, Duration::from_millis(180));
        assert!(
            paced.starts_with(
                "; not a failed start, but 3 instances in a row ended before answering a call: the next one starts after 0.2 s"
            ),
            "{paced}"
        );
        assert!(!paced.contains("failed to start") && !paced.contains("down:"), "{paced}");
    }
}
