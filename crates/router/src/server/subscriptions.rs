//! Resource subscriptions: which sessions subscribed to which URIs, and which of a server's
//! `notifications/resources/updated` they get. Every shared instance holds the shared
//! subscriptions (a server tells only the subscribers of its own connection, and a change made
//! through any instance must be seen), so one change that several instances see (a file they
//! all watch) arrives several times: it reaches each subscriber once. An instance with calls
//! of clients on it (or just ended) may be telling of a change those calls made: that always
//! goes on, as does each update of one instance; only an instance that tells of a change
//! nobody made through it, right after another instance told of one, is taken to see the same.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use switchyard_core::ids::SessionId;

/// An update from an instance that no call could have caused, this soon after another
/// instance's of the same URI, is the same change seen by each (watchers that poll see a change
/// some tens of milliseconds apart).
pub const SAME_CHANGE: Duration = Duration::from_millis(100);

#[derive(Default)]
pub struct Subscriptions {
    by_uri: Mutex<HashMap<String, BTreeSet<SessionId>>>,
    /// The last update passed on per URI: from which instance, and when.
    last: Mutex<HashMap<String, (u64, Instant)>>,
}

impl Subscriptions {
    pub fn subscribe(&self, id: SessionId, uri: &str) {
        self.by_uri.lock().expect("lock").entry(uri.to_string()).or_default().insert(id);
    }

    pub fn unsubscribe(&self, id: SessionId, uri: &str) {
        let mut subs = self.by_uri.lock().expect("lock");
        if let Some(set) = subs.get_mut(uri) {
            set.remove(&id);
            if set.is_empty() {
                subs.remove(uri);
                self.last.lock().expect("lock").remove(uri);
            }
        }
    }

    /// A session left: its subscriptions go.
    pub fn remove_session(&self, id: SessionId) {
        let mut subs = self.by_uri.lock().expect("lock");
        subs.retain(|_, set| {
            set.remove(&id);
            !set.is_empty()
        });
        self.last.lock().expect("lock").retain(|uri, _| subs.contains_key(uri));
    }

    /// URIs some session subscribed to (`Some(id)`: that session only).
    pub fn uris(&self, of: Option<SessionId>) -> BTreeSet<String> {
        let subs = self.by_uri.lock().expect("lock");
        subs.iter().filter(|(_, set)| of.is_none_or(|id| set.contains(&id))).map(|(u, _)| u.clone()).collect()
    }

    /// Instance `instance` says `uri` was updated (`by_calls`: calls of clients are on it, or
    /// just ended there): the sessions to tell, none when another instance's word of the same
    /// change was passed on already (see [`SAME_CHANGE`]).
    pub fn updated(&self, uri: &str, instance: u64, by_calls: bool) -> BTreeSet<SessionId> {
        let Some(subscribers) = self.by_uri.lock().expect("lock").get(uri).cloned() else { return BTreeSet::new() };
        let mut last = self.last.lock().expect("lock");
        if let Some((from, at)) = last.get(uri)
            && !by_calls
            && *from != instance
            && at.elapsed() < SAME_CHANGE
        {
            return BTreeSet::new();
        }
        last.insert(uri.to_string(), (instance, Instant::now()));
        subscribers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_change_seen_by_several_instances_reaches_a_subscriber_once() {
        let subs = Subscriptions::default();
        subs.subscribe(7, "file:///a");
        assert_eq!(subs.updated("file:///b", 1, false), BTreeSet::new(), "nobody subscribed to b");
        assert_eq!(subs.updated("file:///a", 1, false), BTreeSet::from([7]));
        // The same change as seen by instance 2, a moment later: said already.
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(subs.updated("file:///a", 2, false), BTreeSet::new());
        // A change a call made through instance 2 is its own, however soon.
        assert_eq!(subs.updated("file:///a", 2, true), BTreeSet::from([7]));
        // Instance 2 again: a change of its own.
        assert_eq!(subs.updated("file:///a", 2, false), BTreeSet::from([7]));
        // Instance 1, well after: another change.
        tokio::time::sleep(SAME_CHANGE).await;
        assert_eq!(subs.updated("file:///a", 1, false), BTreeSet::from([7]));
        subs.remove_session(7);
        assert_eq!(subs.updated("file:///a", 1, false), BTreeSet::new());
        assert!(subs.uris(None).is_empty());
    }
}
