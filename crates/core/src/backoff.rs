//! One exponential backoff: a base wait doubled with each attempt, at most a cap, and jitter so
//! that peers who failed together do not all try again at the same moment.

use std::time::Duration;

/// How the wait is spread around its exponential value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// Exactly the exponential value.
    None,
    /// Up to this fraction more or less (0.25: 75 % to 125 %).
    Spread(f64),
    /// Up to this fraction less (0.2: 80 % to 100 %).
    Less(f64),
    /// Up to this fraction more (0.25: 100 % to 125 %).
    More(f64),
}

/// `base * 2^n` for the n-th retry (0 = the first), at most `cap`, then jittered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    pub jitter: Jitter,
}

impl Backoff {
    /// Doublings past this add nothing a cap would not cut (and cannot overflow).
    const MAX_DOUBLINGS: u32 = 16;

    pub const fn new(base: Duration, cap: Duration, jitter: Jitter) -> Backoff {
        Backoff { base, cap, jitter }
    }

    /// The wait before retry `n` (0 = the first).
    pub fn delay(&self, n: u32) -> Duration {
        let full = self.base.saturating_mul(1 << n.min(Self::MAX_DOUBLINGS)).min(self.cap);
        match self.jitter {
            Jitter::None => full,
            Jitter::Spread(f) => full.mul_f64(1.0 - f + 2.0 * f * fastrand::f64()),
            Jitter::Less(f) => full.mul_f64(1.0 - f * fastrand::f64()),
            Jitter::More(f) => full + full.mul_f64(f * fastrand::f64()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_wait_doubles_up_to_the_cap_and_jitter_stays_in_its_band() {
        let exact = Backoff::new(100 * MS, 1000 * MS, Jitter::None);
        let waits: Vec<_> = (0..6).map(|n| exact.delay(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(exact.delay(u32::MAX), 1000 * MS, "no overflow however many attempts");
        for _ in 0..200 {
            let spread = Backoff { jitter: Jitter::Spread(0.25), ..exact }.delay(1);
            assert!((150 * MS..=250 * MS).contains(&spread), "{spread:?}");
            let less = Backoff { jitter: Jitter::Less(0.2), ..exact }.delay(1);
            assert!((160 * MS..=200 * MS).contains(&less), "{less:?}");
            let more = Backoff { jitter: Jitter::More(0.25), ..exact }.delay(4);
            assert!((1000 * MS..=1250 * MS).contains(&more), "{more:?}");
        }
    }
}
