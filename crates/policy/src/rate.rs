//! Token buckets for `host.take` (`switchyard:policy@0.2.0`): rate limits a plugin names by key,
//! kept by the host so that every instance of the plugin counts against the same buckets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::time::Instant;

/// Buckets kept per plugin before the full ones (which forget nothing by going) are dropped.
const PRUNE_AT: usize = 10_000;

/// One plugin's buckets, by the key the plugin names.
#[derive(Default)]
pub struct Buckets {
    map: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The buckets of the plugin named `plugin`: the same for every instance and every version
/// of it loaded while the router runs.
pub fn of_plugin(plugin: &str) -> Arc<Buckets> {
    static ALL: OnceLock<Mutex<HashMap<String, Arc<Buckets>>>> = OnceLock::new();
    let all = ALL.get_or_init(Default::default);
    all.lock().unwrap_or_else(|p| p.into_inner()).entry(plugin.to_string()).or_default().clone()
}

impl Buckets {
    /// Takes one token from bucket `key`, which refills at `per_minute` tokens a minute and
    /// holds at most `burst` (at least 1); a new bucket starts full. None: taken. Some(ms): the
    /// bucket is empty and its next token comes in `ms` milliseconds (`u64::MAX` when it never
    /// refills, at a rate of 0).
    pub fn take(&self, key: &str, per_minute: u32, burst: u32, now: Instant) -> Option<u64> {
        let cap = f64::from(burst.max(1));
        let per_ms = f64::from(per_minute) / 60_000.0;
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= PRUNE_AT && !map.contains_key(key) {
            map.retain(|_, b| b.tokens_at(now, per_ms, cap) < cap);
        }
        let b = map.entry(key.to_string()).or_insert(Bucket { tokens: cap, at: now });
        b.tokens = b.tokens_at(now, per_ms, cap);
        b.at = now.max(b.at);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return None;
        }
        if per_ms <= 0.0 {
            return Some(u64::MAX);
        }
        Some(((1.0 - b.tokens) / per_ms).ceil().max(1.0) as u64)
    }
}

impl Bucket {
    /// Its tokens at `now`, refilled since it was last counted and held to `cap`.
    fn tokens_at(&self, now: Instant, per_ms: f64, cap: f64) -> f64 {
        let elapsed_ms = now.saturating_duration_since(self.at).as_secs_f64() * 1000.0;
        (self.tokens + elapsed_ms * per_ms).min(cap)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_bucket_lets_its_burst_through_then_says_when_the_next_token_comes() {
        let b = Buckets::default();
        let now = Instant::now();
        for n in 0..10 {
            assert_eq!(b.take("cursor", 10, 10, now), None, "call {n} of the burst");
        }
        // 10 a minute: one token every 6 s.
        assert_eq!(b.take("cursor", 10, 10, now), Some(6000));
        // Another key is another bucket.
        assert_eq!(b.take("claude-code", 10, 10, now), None);
        tokio::time::advance(Duration::from_millis(4500)).await;
        assert_eq!(b.take("cursor", 10, 10, Instant::now()), Some(1500));
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(b.take("cursor", 10, 10, Instant::now()), None);
        assert_eq!(b.take("cursor", 10, 10, Instant::now()), Some(6000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_bucket_refills_no_further_than_its_burst() {
        let b = Buckets::default();
        assert_eq!(b.take("k", 60, 2, Instant::now()), None);
        tokio::time::advance(Duration::from_secs(3600)).await;
        let now = Instant::now();
        assert_eq!(b.take("k", 60, 2, now), None);
        assert_eq!(b.take("k", 60, 2, now), None);
        assert_eq!(b.take("k", 60, 2, now), Some(1000));
    }

    #[test]
    fn a_rate_of_zero_never_refills_and_a_burst_of_zero_is_one() {
        let b = Buckets::default();
        let now = Instant::now();
        assert_eq!(b.take("k", 0, 0, now), None);
        assert_eq!(b.take("k", 0, 0, now), Some(u64::MAX));
    }

    #[test]
    fn each_plugin_has_its_own_buckets_shared_by_its_instances() {
        let now = Instant::now();
        assert_eq!(of_plugin("rate-a.wasm").take("k", 1, 1, now), None);
        assert_eq!(of_plugin("rate-a.wasm").take("k", 1, 1, now), Some(60_000));
        assert_eq!(of_plugin("rate-b.wasm").take("k", 1, 1, now), None);
    }
}
