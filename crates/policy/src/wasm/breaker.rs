//! The circuit breaker that switches off a plugin whose calls keep running past their deadline.

use std::time::{Duration, Instant};

use super::PluginError;
use switchyard_core::backoff::{Backoff, Jitter};

/// Calls in a row past the deadline after which a plugin is switched off for a cool-down.
pub(super) const BREAKER_THRESHOLD: u32 = 5;
/// The first cool-down; it doubles on each trip in a row, up to the maximum.
const BREAKER_COOL_DOWN: Duration = Duration::from_secs(1);
const BREAKER_MAX_COOL_DOWN: Duration = Duration::from_secs(30);

/// Switches off a plugin that keeps running past its deadline: each such call burns a whole
/// CPU budget, so after [`BREAKER_THRESHOLD`] in a row its calls fail at once (on_error
/// applies) for a cool-down; then one call tries it again (half-open), which either closes the
/// breaker or opens it for twice as long.
#[derive(Debug, Default)]
pub(super) struct Breaker {
    deadline_streak: u32,
    open_until: Option<Instant>,
    /// Trips in a row without a call that finished in time, for the doubling cool-down.
    trips: u32,
    /// A half-open try is running; other calls still fail at once.
    trying: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum BreakerChange {
    Opened { streak: u32, cool_down: Duration },
    Closed,
}

impl Breaker {
    pub(super) fn admit(&mut self, now: Instant) -> Result<(), PluginError> {
        let Some(until) = self.open_until else { return Ok(()) };
        if now < until || self.trying {
            return Err(PluginError::SwitchedOff(until.saturating_duration_since(now).as_millis() as u64));
        }
        self.trying = true;
        Ok(())
    }

    pub(super) fn record<R>(&mut self, result: &Result<R, PluginError>, now: Instant) -> Option<BreakerChange> {
        let tried = std::mem::take(&mut self.trying);
        match result {
            Err(PluginError::Deadline(_)) => {
                self.deadline_streak += 1;
                if tried || (self.open_until.is_none() && self.deadline_streak >= BREAKER_THRESHOLD) {
                    self.trips += 1;
                    let cool_down =
                        Backoff::new(BREAKER_COOL_DOWN, BREAKER_MAX_COOL_DOWN, Jitter::None).delay(self.trips - 1);
                    self.open_until = Some(now + cool_down);
                    return Some(BreakerChange::Opened { streak: self.deadline_streak, cool_down });
                }
                None
            }
            Err(PluginError::SwitchedOff(_)) => None,
            _ => {
                self.deadline_streak = 0;
                self.trips = 0;
                self.open_until.take().map(|_| BreakerChange::Closed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_trips_after_a_streak_of_deadlines_then_tries_once_and_backs_off() {
        let mut b = Breaker::default();
        let t0 = Instant::now();
        let late: Result<(), PluginError> = Err(PluginError::Deadline(5));
        let trap: Result<(), PluginError> = Err(PluginError::Trap("x".into()));
        // A trap or an answer in between breaks the streak: only deadlines in a row count.
        for _ in 0..BREAKER_THRESHOLD - 1 {
            assert_eq!(b.admit(t0), Ok(()));
            assert_eq!(b.record(&late, t0), None);
        }
        assert_eq!(b.record(&trap, t0), None);
        for _ in 0..BREAKER_THRESHOLD - 1 {
            b.record(&late, t0);
        }
        let opened = b.record(&late, t0);
        assert_eq!(opened, Some(BreakerChange::Opened { streak: BREAKER_THRESHOLD, cool_down: BREAKER_COOL_DOWN }));
        // Open: calls fail at once, without running.
        assert_eq!(b.admit(t0 + Duration::from_millis(400)), Err(PluginError::SwitchedOff(600)));
        // Half-open after the cool-down: one call tries; others still fail meanwhile.
        let t1 = t0 + BREAKER_COOL_DOWN;
        assert_eq!(b.admit(t1), Ok(()));
        assert!(matches!(b.admit(t1), Err(PluginError::SwitchedOff(_))));
        // The try runs late again: open for twice as long.
        let reopened = b.record(&late, t1);
        assert_eq!(
            reopened,
            Some(BreakerChange::Opened { streak: BREAKER_THRESHOLD + 1, cool_down: 2 * BREAKER_COOL_DOWN })
        );
        assert!(b.admit(t1 + BREAKER_COOL_DOWN).is_err());
        let t2 = t1 + 2 * BREAKER_COOL_DOWN;
        assert_eq!(b.admit(t2), Ok(()));
        // The try answers in time: closed, and the next streak starts from zero.
        assert_eq!(b.record(&Ok(()), t2), Some(BreakerChange::Closed));
        assert_eq!(b.admit(t2), Ok(()));
        assert_eq!(b.record(&late, t2), None);
    }
}
