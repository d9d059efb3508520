//! Log lines that may come once per call or message, kept from flooding the log: the first is
//! logged, then at most one line per period with how many times it happened since.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

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

/// [`Repeats`] for each of many keys (a client's refused calls, by session, call and plugin):
/// the first of a key is logged, then at most one line per `every` with how many times it
/// happened since. At most `room` keys are kept, as a client can make up any number of them
/// (calling tools that do not exist): a key is let go once a whole period has passed since its
/// last line, and a new key that finds no room is counted with every other such key, in one
/// [`Repeats`].
pub struct KeyedRepeats {
    every: Duration,
    room: usize,
    /// Keys are kept as hashes: one costs the same whatever its length, and a collision only
    /// counts two keys as one.
    hasher: RandomState,
    /// By key: when it was last logged, and how many times it happened since.
    seen: Mutex<HashMap<u64, (Instant, u64)>>,
    /// The keys that found no room.
    crowded: Repeats,
}

/// What to do with one more occurrence of a key of a [`KeyedRepeats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    /// Log it: `n` times since its last line, this one included (1 the first time).
    Log(u64),
    /// Log it for all the keys that found no room: `n` of theirs since the last such line.
    Crowded(u64),
    /// Hold it back: it is counted in its key's next line.
    Held,
}

impl KeyedRepeats {
    pub fn new(every: Duration, room: usize) -> KeyedRepeats {
        KeyedRepeats {
            every,
            room,
            hasher: RandomState::new(),
            seen: Mutex::new(HashMap::new()),
            crowded: Repeats::new(every),
        }
    }

    /// `key` happened once more: whether to log it now.
    pub fn hit(&self, key: &impl Hash) -> Hit {
        let key = self.hasher.hash_one(key);
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, since)) = seen.get_mut(&key) {
            *since += 1;
            if now.duration_since(*at) < self.every {
                return Hit::Held;
            }
            let n = *since;
            (*at, *since) = (now, 0);
            return Hit::Log(n);
        }
        if seen.len() >= self.room {
            // Keys quiet for a whole period: their next time is logged as a first.
            seen.retain(|_, (at, _)| now.duration_since(*at) < self.every);
        }
        if seen.len() >= self.room {
            drop(seen);
            return self.crowded.hit().map_or(Hit::Held, Hit::Crowded);
        }
        seen.insert(key, (now, 0));
        Hit::Log(1)
    }

    /// How many keys are kept now.
    pub fn kept(&self) -> usize {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).len()
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

    #[tokio::test(start_paused = true)]
    async fn each_key_is_logged_once_per_period_and_their_number_is_bounded() {
        let every = Duration::from_secs(10);
        let r = KeyedRepeats::new(every, 3);
        assert_eq!(r.hit(&("s1", "echo")), Hit::Log(1));
        assert_eq!(r.hit(&("s1", "add")), Hit::Log(1), "another key is logged at once");
        assert_eq!(r.hit(&("s2", "echo")), Hit::Log(1));
        for _ in 0..500 {
            assert_eq!(r.hit(&("s1", "echo")), Hit::Held);
        }
        // A fourth key finds no room: it is counted with the others that found none.
        assert_eq!(r.hit(&("s1", "made-up-1")), Hit::Crowded(1));
        for i in 0..1000 {
            assert_eq!(r.hit(&("s1", format!("made-up-{i}"))), Hit::Held);
        }
        assert_eq!(r.kept(), 3, "made-up keys take no room");
        tokio::time::sleep(every).await;
        assert_eq!(r.hit(&("s1", "echo")), Hit::Log(501), "one line counts the 500 held back");
        // The keys quiet for a period are let go for a new one; the crowd's count comes with the
        // next that finds no room.
        assert_eq!(r.hit(&("s1", "made-up-1")), Hit::Log(1));
        assert_eq!(r.kept(), 2);
        assert_eq!(r.hit(&("s1", "add")), Hit::Log(1), "let go: logged as a first");
        assert_eq!(r.hit(&("s3", "x")), Hit::Crowded(1001));
    }
}
