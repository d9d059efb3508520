//! The crash-loop guard: backoff between failed starts, and "down" after too many in a row; and
//! the pace of restarts after instances that started and then died before answering any call.

use std::time::Duration;

use tokio::time::Instant;

use super::Server;
use switchyard_core::backoff::{Backoff, Jitter};
use switchyard_core::error::CallError;

/// Consecutive start-up failures after which the server is marked down.
const CRASH_LOOP_FAILURES: u32 = 5;
/// The longest wait between two starts, failed ones included.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// The crash-loop guard: backoff between failed starts, and "down" after too many in a row.
///
/// An instance that answered `initialize` started: its death later is not a failed start, and
/// never holds the server down (its next call may well be answered: perhaps only the call that
/// killed it crashes the server). Instances in a row that died before answering any call
/// (idle, or in their first calls) pace the restarts instead: the second restart waits 100 ms,
/// doubling to 10 s, so a server that dies on every call or right after it starts costs at most
/// one start per 10 s, as a server held down does, while calls wait for it rather than fail.
#[derive(Default)]
pub(super) struct StartHealth {
    /// Failed starts in a row (a start that got ready ends the row).
    failures: u32,
    /// Started instances in a row that ended before answering any call (an answer ends the row).
    early_deaths: u32,
    next_allowed: Option<Instant>,
    down_until: Option<Instant>,
    last_failure: String,
}

impl StartHealth {
    /// 100 ms after the first failure, doubling, at most 10 s; then up to 20 % less, at random,
    /// so routers that lost the same remote server do not all knock again at the same moment.
    fn backoff(&self) -> Duration {
        Backoff::new(Duration::from_millis(100), MAX_WAIT, Jitter::Less(0.2)).delay(self.failures.saturating_sub(1))
    }

    /// Records a failed start; returns how long the server is now down, if it is.
    fn failure(&mut self, now: Instant, what: String) -> Option<Duration> {
        self.failures += 1;
        self.last_failure = what;
        self.next_allowed = Some(now + self.backoff());
        if self.failures < CRASH_LOOP_FAILURES {
            return None;
        }
        // Down for 1 s, then 2, 4, ... at most 10 s (as the backoff): retried "half-open" after
        // each period, so a server that comes back is used within 10 s.
        let down =
            Backoff::new(Duration::from_secs(1), MAX_WAIT, Jitter::None).delay(self.failures - CRASH_LOOP_FAILURES);
        self.next_allowed = self.next_allowed.map(|t| t.min(now + down));
        self.down_until = Some(now + down);
        Some(down)
    }

    /// An instance got ready: the failed starts before it are no longer "in a row".
    fn started(&mut self) {
        self.failures = 0;
        self.down_until = None;
    }

    /// A started instance ended before answering any call; returns how long the next start
    /// waits (zero after the first such death in a row).
    fn died_early(&mut self, now: Instant) -> Duration {
        self.early_deaths += 1;
        let wait = match self.early_deaths {
            1 => Duration::ZERO,
            n => Backoff::new(Duration::from_millis(100), MAX_WAIT, Jitter::Less(0.2)).delay(n - 2),
        };
        self.next_allowed = self.next_allowed.max(Some(now + wait));
        wait
    }

    /// Err(reason) while down; otherwise when the next start may begin (None: now).
    fn check(&self, now: Instant, hint: &str) -> Result<Option<Instant>, String> {
        if let Some(until) = self.down_until.filter(|u| *u > now) {
            return Err(format!(
                "it failed to start {} times in a row (last: {}); switchyard tries again in {:.1} s. {hint}",
                self.failures,
                self.last_failure,
                (until - now).as_secs_f64()
            ));
        }
        Ok(self.next_allowed.filter(|t| *t > now))
    }
}

impl Server {
    // CallError is large, but this is called once per instance start, not per message.
    #[allow(clippy::result_large_err)]
    pub(super) fn check_start_allowed(&self) -> Result<Option<Instant>, CallError> {
        let h = self.health.lock().expect("lock");
        h.check(Instant::now(), &self.connector.hint())
            .map_err(|reason| CallError::Down { server: self.name.clone(), reason })
    }

    /// Whether the crash-loop guard holds the server down now (calls fail fast).
    pub fn is_down(&self) -> bool {
        self.health.lock().expect("lock").down_until.is_some_and(|u| u > Instant::now())
    }

    /// An instance got ready (see [`StartHealth::started`]).
    pub(super) fn record_started(&self) {
        self.health.lock().expect("lock").started();
    }

    /// A started instance ended before answering any call: returns how many did so in a row
    /// and how long the next start waits (see [`StartHealth`]).
    pub(super) fn record_early_death(&self) -> (u32, Duration) {
        let mut h = self.health.lock().expect("lock");
        let wait = h.died_early(Instant::now());
        (h.early_deaths, wait)
    }

    pub(super) fn record_start_failure(&self, what: String) {
        self.note_error(format!("start failed: {what}"));
        let mut h = self.health.lock().expect("lock");
        if let Some(down) = h.failure(Instant::now(), what) {
            tracing::error!(
                server = %self.name,
                "server is down: {} failed starts in a row (last: {}); next try in {:.0} s",
                h.failures, h.last_failure, down.as_secs_f64()
            );
        }
    }

    /// A call got an answer: the server works, forget past start failures and early deaths.
    pub fn record_success(&self) {
        let mut h = self.health.lock().expect("lock");
        if h.failures > 0 || h.early_deaths > 0 {
            *h = StartHealth::default();
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
        assert_eq!(h.check(t0, ""), Ok(None));
        for (i, wait_ms) in [100u64, 200, 400, 800].into_iter().enumerate() {
            assert_eq!(h.failure(Instant::now(), format!("exit status {i}")), None);
            let next = h.check(Instant::now(), "").unwrap().expect("a wait");
            let wait = next - Instant::now();
            // Capped exponential, less up to 20 % of jitter.
            assert!(
                wait <= Duration::from_millis(wait_ms) && wait >= Duration::from_millis(wait_ms * 8 / 10),
                "{wait:?}"
            );
            tokio::time::advance(wait).await;
            assert_eq!(h.check(Instant::now(), ""), Ok(None));
        }
        assert_eq!(h.failure(Instant::now(), "exit status 7".into()), Some(Duration::from_secs(1)));
        let reason = h.check(Instant::now(), "Check the URL.").unwrap_err();
        assert!(
            reason.contains("5 times") && reason.contains("exit status 7") && reason.ends_with("Check the URL."),
            "{reason}"
        );
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(h.check(Instant::now(), "").is_err());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(h.check(Instant::now(), "").is_ok(), "a half-open try is allowed after the down period");
        assert_eq!(h.failure(Instant::now(), "again".into()), Some(Duration::from_secs(2)));
        for _ in 0..10 {
            h.failure(Instant::now(), "again".into());
        }
        assert_eq!(h.failure(Instant::now(), "again".into()), Some(Duration::from_secs(10)));
        // The next start is allowed when the down period ends, never later.
        let next = h.check(Instant::now() + Duration::from_secs(10), "").unwrap();
        assert!(next.is_none_or(|t| t <= Instant::now() + Duration::from_secs(10)), "{next:?}");
    }

    /// Started instances that die before answering any call pace the restarts (the first
    /// restart at once, then 100 ms doubling to 10 s) but never hold the server down, nor count
    /// toward the failed starts in a row.
    #[tokio::test(start_paused = true)]
    async fn early_deaths_pace_restarts_but_never_hold_the_server_down() {
        let mut h = StartHealth::default();
        assert_eq!(h.died_early(Instant::now()), Duration::ZERO);
        assert_eq!(h.check(Instant::now(), ""), Ok(None), "the first restart is at once");
        for wait_ms in [100u64, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000] {
            let wait = h.died_early(Instant::now());
            assert!(
                wait <= Duration::from_millis(wait_ms) && wait >= Duration::from_millis(wait_ms * 8 / 10),
                "{wait:?}"
            );
            let next = h.check(Instant::now(), "").expect("never down").expect("a wait");
            assert_eq!(next - Instant::now(), wait);
            tokio::time::advance(wait).await;
            assert_eq!(h.check(Instant::now(), ""), Ok(None));
        }
        assert_eq!(h.early_deaths, 11);
        // Four failed starts among them are four, not fifteen: the fifth holds it down.
        for i in 0..4 {
            assert_eq!(h.failure(Instant::now(), format!("exit status {i}")), None);
            h.died_early(Instant::now());
        }
        assert!(h.failure(Instant::now(), "exit status 4".into()).is_some());
    }

    /// A start that got ready ends the row of failed starts: failures on either side of it are
    /// not "in a row".
    #[tokio::test(start_paused = true)]
    async fn a_start_that_gets_ready_ends_the_row_of_failed_starts() {
        let mut h = StartHealth::default();
        for i in 0..4 {
            assert_eq!(h.failure(Instant::now(), format!("exit status {i}")), None);
        }
        h.started();
        for i in 0..4 {
            assert_eq!(h.failure(Instant::now(), format!("exit status {i}")), None);
        }
        assert!(h.check(Instant::now() + MAX_WAIT, "").is_ok());
        assert_eq!(h.failure(Instant::now(), "exit status 9".into()), Some(Duration::from_secs(1)));
    }
}
