//! How often and how soon a dropped SSE stream is reopened: capped attempts that count only
//! failures in a row (new events reset them), exponential delays with a cap, and the server's
//! `retry:` hint honoured.

use std::time::Duration;

use switchyard_core::backoff::{Backoff, Jitter};

/// The policy and its running count for one stream.
#[derive(Debug, Clone)]
pub struct Reconnect {
    /// Attempts in a row allowed without new events; `None`: no limit (the standalone stream).
    max_attempts: Option<u32>,
    backoff: Backoff,
    attempts: u32,
    hint: Option<Duration>,
}

/// Longest `retry:` the server may ask for and be obeyed (a larger one is cut to this).
const HINT_CAP: Duration = Duration::from_secs(30);

impl Reconnect {
    /// For a request's response stream: a few tries over about 3.5 s (long enough for a link
    /// that drops for a moment), then the request is given up.
    pub fn resume() -> Reconnect {
        Reconnect {
            max_attempts: Some(3),
            backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(4), Jitter::None),
            attempts: 0,
            hint: None,
        }
    }

    /// For the standalone GET stream: tries for as long as the transport lives.
    pub fn listen() -> Reconnect {
        Reconnect {
            max_attempts: None,
            // Up to a quarter more at random, so many instances do not reconnect in step.
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(30), Jitter::More(0.25)),
            attempts: 0,
            hint: None,
        }
    }

    /// New events arrived: the stream works, the count starts over.
    pub fn progress(&mut self) {
        self.attempts = 0;
    }

    /// The server's `retry:` field (the latest one wins).
    pub fn hint(&mut self, retry: Duration) {
        self.hint = Some(retry.min(HINT_CAP));
    }

    /// Forgets the server's `retry:` (the next waits are this backoff's own).
    pub fn clear_hint(&mut self) {
        self.hint = None;
    }

    /// The wait before the next attempt, or `None` once the attempts are used up.
    pub fn next_delay(&mut self) -> Option<Duration> {
        if self.max_attempts.is_some_and(|max| self.attempts >= max) {
            return None;
        }
        let n = self.attempts;
        self.attempts += 1;
        Some(self.hint.unwrap_or_else(|| self.backoff.delay(n)))
    }

    /// Waits for the next attempt; false once the attempts are used up.
    pub async fn wait(&mut self) -> bool {
        match self.next_delay() {
            Some(d) => {
                tokio::time::sleep(d).await;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn resume_tries_three_times_with_growing_waits_then_gives_up() {
        let mut r = Reconnect::resume();
        let start = Instant::now();
        let mut at = Vec::new();
        while r.wait().await {
            at.push(start.elapsed());
        }
        assert_eq!(at, vec![Duration::from_millis(500), Duration::from_millis(1500), Duration::from_millis(3500)]);
    }

    #[tokio::test(start_paused = true)]
    async fn new_events_reset_the_count_and_the_server_hint_wins() {
        let mut r = Reconnect::resume();
        assert!(r.wait().await);
        assert!(r.wait().await);
        r.progress();
        r.hint(Duration::from_millis(1500));
        let start = Instant::now();
        for _ in 0..3 {
            assert!(r.wait().await);
        }
        assert_eq!(start.elapsed(), Duration::from_millis(4500));
        assert!(!r.wait().await, "three failures in a row without events end it");
        r.hint(Duration::from_secs(3600));
        r.progress();
        assert_eq!(r.next_delay(), Some(HINT_CAP), "a huge retry: is capped");
    }

    #[tokio::test(start_paused = true)]
    async fn listen_never_gives_up_and_its_waits_stay_under_the_cap_with_jitter() {
        let mut r = Reconnect::listen();
        let mut last = Duration::ZERO;
        for i in 0..40 {
            let d = r.next_delay().expect("no limit");
            assert!(d >= Duration::from_secs(1) && d <= Duration::from_millis(37_500), "attempt {i}: {d:?}");
            if i < 4 {
                assert!(d > last, "grows at first");
            }
            last = d;
        }
        let start = Instant::now();
        r.progress();
        assert!(r.wait().await);
        assert!(start.elapsed() >= Duration::from_secs(1) && start.elapsed() <= Duration::from_millis(1250));
    }
}
