//! The crash-loop guard: backoff between failed starts, and "down" after too many in a row.

use std::time::Duration;

use tokio::time::Instant;

use super::Server;
use switchyard_core::backoff::{Backoff, Jitter};
use switchyard_core::error::CallError;

/// Consecutive start-up failures after which the server is marked down.
pub(super) const CRASH_LOOP_FAILURES: u32 = 5;
/// The longest wait between two starts, failed ones included.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// The crash-loop guard: backoff between failed starts, and "down" after too many in a row.
#[derive(Default)]
pub(super) struct StartHealth {
    failures: u32,
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

    pub(super) fn record_start_failure(&self, what: String) {
        self.note_error(format!("start failed: {what}"));
        self.count_start_failure(what);
    }

    /// Counts a failed start toward the crash-loop guard without noting it as the last error
    /// (the caller noted what happened in its own words).
    pub(super) fn count_start_failure(&self, what: String) {
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
}
