//! Log lines that may come once per call or message, kept from flooding the log: the first is
//! logged, then at most one line per period with how many times it happened since.

use std::time::Duration;

/// A warning that may repeat once per message or call (a policy's misrouted calls, a client's
/// id-less requests): logged the first time, then at most once per `every` with how many times
/// it happened since, so a flood cannot crowd every other line out of the log (and out of the
/// warnings `status` keeps).
pub struct Repeats {
    every: Duration,
    /// When it was last logged, and how many times it happened since.
    state: std::sync::Mutex<(Option<tokio::time::Instant>, u64)>,
}

impl Repeats {
    pub const fn new(every: Duration) -> Repeats {
        Repeats { every, state: std::sync::Mutex::new((None, 0)) }
    }

    /// It happened once more. `Some(n)` when it should be logged now, `n` being the times it
    /// happened since it was last logged, this one included (1 the first time).
    pub fn hit(&self) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.1 += 1;
        let now = tokio::time::Instant::now();
        if s.0.is_some_and(|t| now.duration_since(t) < self.every) {
            return None;
        }
        let n = s.1;
        *s = (Some(now), 0);
        Some(n)
    }
}

/// How a [`Repeats`] count reads at the end of a log line: nothing for one, else the count.
pub fn times(n: u64) -> String {
    if n > 1 { format!(" ({n} times since the last report)") } else { String::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_repeated_warning_is_logged_once_per_period_with_its_count() {
        let r = Repeats::new(Duration::from_secs(10));
        assert_eq!(r.hit(), Some(1), "the first one is logged");
        for _ in 0..999 {
            assert_eq!(r.hit(), None);
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(r.hit(), Some(1000), "then one line counts the 999 held back and this one");
        assert_eq!(r.hit(), None);
        assert_eq!(times(1), "");
        assert_eq!(times(7), " (7 times since the last report)");
    }
}
