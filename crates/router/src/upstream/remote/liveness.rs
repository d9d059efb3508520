//! Finding a link that died without a word (a NAT that forgot the connection, a laptop that
//! slept, a VPN that switched): no FIN, no RST, just nothing.
//!
//! Every request a transport sends is watched until it is settled: when it was sent and when its
//! link last carried bytes for it (its own response stream for Streamable HTTP, the one shared
//! stream for legacy SSE). A request silent past the liveness window gets the link probed on a
//! fresh connection. A probe that is answered shows the server reachable: the request is a slow
//! call and waits for its own deadline (probed again each window while it stays silent). A probe
//! that gets nothing ends the transport, so every call on it is answered at once (or repeated on
//! a new instance when that is safe) instead of at its deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Core;
use crate::upstream::transport::BoxFuture;

/// A transport's probe: resolves once the server showed it is reachable, Err(what failed).
pub(super) type Probe = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// What the probe is, for the message when it fails: e.g. "a HEAD request on a fresh connection".
pub(super) struct ProbeKind(pub &'static str);

/// Requests in flight and what their link last carried for them.
pub(super) struct Watch {
    /// Legacy SSE: one stream carries every answer, so its bytes speak for every request.
    shared_stream: AtomicBool,
    state: Mutex<WatchState>,
    /// Poked whenever the shared stream carries bytes (a legacy probe waits for its pong).
    stream_poke: Notify,
}

#[derive(Default)]
struct WatchState {
    /// Request id -> (sent, last bytes for it).
    waiting: HashMap<u64, (Instant, Instant)>,
    /// The last bytes on the shared stream.
    stream: Option<Instant>,
}

/// The request that has been silent longest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Silence {
    pub id: u64,
    pub silent: Duration,
    /// Requests waiting in all.
    pub waiting: usize,
}

impl Watch {
    pub fn new(shared_stream: bool) -> Watch {
        Watch {
            shared_stream: AtomicBool::new(shared_stream),
            state: Mutex::new(WatchState::default()),
            stream_poke: Notify::new(),
        }
    }

    /// From now on one stream carries every answer (`auto` found a legacy SSE server).
    pub fn share_stream(&self) {
        self.shared_stream.store(true, Ordering::Release);
    }

    fn is_shared(&self) -> bool {
        self.shared_stream.load(Ordering::Acquire)
    }

    /// Request `id` was sent (or is about to be).
    pub fn sent(&self, id: u64) {
        let now = Instant::now();
        self.state.lock().unwrap().waiting.insert(id, (now, now));
    }

    /// The link carried bytes for request `id`.
    pub fn heard(&self, id: u64) {
        if let Some(w) = self.state.lock().unwrap().waiting.get_mut(&id) {
            w.1 = Instant::now();
        }
    }

    /// The shared stream carried bytes.
    pub fn heard_stream(&self) {
        self.state.lock().unwrap().stream = Some(Instant::now());
        self.stream_poke.notify_waiters();
    }

    /// Request `id` is answered, lost or abandoned: no longer watched.
    pub fn settled(&self, id: u64) {
        self.state.lock().unwrap().waiting.remove(&id);
    }

    /// When the link last carried bytes for `id` (None: not watched).
    pub fn last_heard(&self, id: u64) -> Option<Instant> {
        let st = self.state.lock().unwrap();
        let own = st.waiting.get(&id)?.1;
        Some(match (self.is_shared(), st.stream) {
            (true, Some(s)) => own.max(s),
            _ => own,
        })
    }

    /// How long request `id` has had nothing from its link (None: not watched).
    pub fn silent_for(&self, id: u64) -> Option<Duration> {
        Some(Instant::now().saturating_duration_since(self.last_heard(id)?))
    }

    /// The request silent longest at `now`, if any is waiting. On a shared stream the silence is
    /// the stream's, counted also from before the request (a stream that went quiet while idle
    /// is as suspect as one that went quiet under a call), once the request has waited `grace`.
    pub fn longest_silence(&self, now: Instant, grace: Duration) -> Option<Silence> {
        let st = self.state.lock().unwrap();
        let shared = self.is_shared();
        st.waiting
            .iter()
            .filter(|(_, (sent, _))| !shared || now.saturating_duration_since(*sent) >= grace)
            .map(|(id, (_, last))| {
                let last = match (shared, st.stream) {
                    (true, Some(stream)) => stream,
                    _ => *last,
                };
                Silence { id: *id, silent: now.saturating_duration_since(last), waiting: st.waiting.len() }
            })
            .max_by_key(|s| (s.silent, std::cmp::Reverse(s.id)))
    }

    /// Resolves once the shared stream carries bytes after `since`.
    pub async fn stream_heard_after(&self, since: Instant) {
        loop {
            let poked = self.stream_poke.notified();
            if self.state.lock().unwrap().stream.is_some_and(|s| s > since) {
                return;
            }
            poked.await;
        }
    }

    /// Resolves when request `id` has had nothing from its link for `window` since `since`
    /// (never, once something came or the request is settled).
    pub async fn quiet_for(&self, id: u64, since: Instant, window: Duration) {
        tokio::time::sleep_until(since + window).await;
        match self.last_heard(id) {
            Some(last) if last <= since => {}
            _ => std::future::pending().await,
        }
    }
}

/// How long a probe may take: a quarter of the window, between 0.3 and 5 s.
pub(super) fn probe_timeout(window: Duration) -> Duration {
    (window / 4).clamp(Duration::from_millis(300), Duration::from_secs(5))
}

/// Watches the transport's requests until it ends: see the module documentation.
pub(super) async fn watchdog(core: Arc<Core>, window: Duration, probe: Probe, kind: ProbeKind) {
    let tick = (window / 40).clamp(Duration::from_millis(20), Duration::from_millis(250));
    let within = probe_timeout(window);
    // When the last probe was answered: the next waits for another window of silence.
    let mut passed: Option<Instant> = None;
    loop {
        tokio::time::sleep(tick).await;
        let now = Instant::now();
        let Some(s) = core.watch.longest_silence(now, window / 10) else { continue };
        if s.silent < window || passed.is_some_and(|t| now.saturating_duration_since(t) < window) {
            continue;
        }
        let started = Instant::now();
        let failed = match tokio::time::timeout(within, probe()).await {
            Ok(Ok(())) => {
                passed = Some(Instant::now());
                core.renew_pool();
                tracing::debug!(
                    instance = %core.label,
                    "request {} has had nothing from {} for {:.1} s, but the server answered a probe in {} ms: a slow call, still waiting",
                    s.id, core.shown_url(), s.silent.as_secs_f64(), started.elapsed().as_millis()
                );
                continue;
            }
            Ok(Err(cause)) => cause,
            Err(_) => format!("got no answer within {:.1} s", within.as_secs_f64()),
        };
        let calls = if s.waiting == 1 { "a request".to_string() } else { format!("{} requests", s.waiting) };
        let status = format!(
            "the link to {} went silent: {calls} waited {:.1} s with nothing from it, and {} {failed}",
            core.shown_url(),
            s.silent.as_secs_f64(),
            kind.0
        );
        tracing::warn!(instance = %core.label, "{status}; replacing the link");
        drop(core.finish_quiet(status, s.silent));
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_longest_silence_is_per_request_unless_the_stream_is_shared() {
        let w = Watch::new(false);
        let grace = Duration::from_secs(1);
        assert_eq!(w.longest_silence(Instant::now(), grace), None);
        w.sent(1);
        tokio::time::advance(Duration::from_secs(3)).await;
        w.sent(2);
        tokio::time::advance(Duration::from_secs(2)).await;
        let s = w.longest_silence(Instant::now(), grace).unwrap();
        assert_eq!((s.id, s.silent, s.waiting), (1, Duration::from_secs(5), 2));
        w.heard(1);
        assert_eq!(w.longest_silence(Instant::now(), grace).unwrap().id, 2);
        // Bytes on a stream of their own do not speak for another request's.
        w.heard_stream();
        assert_eq!(w.longest_silence(Instant::now(), grace).unwrap().silent, Duration::from_secs(2));
        w.settled(2);
        w.settled(1);
        assert_eq!(w.longest_silence(Instant::now(), grace), None);

        let shared = Watch::new(true);
        shared.heard_stream();
        shared.sent(7);
        tokio::time::advance(Duration::from_secs(4)).await;
        shared.heard_stream();
        assert_eq!(shared.longest_silence(Instant::now(), grace).unwrap().silent, Duration::ZERO);
        // A shared stream quiet for 20 s: a request sent now is judged by that silence, once it
        // has waited its grace.
        shared.settled(7);
        tokio::time::advance(Duration::from_secs(20)).await;
        shared.sent(8);
        assert_eq!(shared.longest_silence(Instant::now(), grace), None, "within its grace");
        tokio::time::advance(grace).await;
        assert_eq!(shared.longest_silence(Instant::now(), grace).unwrap().silent, Duration::from_secs(21));
    }

    #[tokio::test(start_paused = true)]
    async fn quiet_for_fires_only_when_nothing_came_since() {
        let w = Arc::new(Watch::new(false));
        w.sent(1);
        let since = Instant::now();
        let quiet = tokio::time::timeout(Duration::from_secs(11), w.quiet_for(1, since, Duration::from_secs(10)));
        assert!(quiet.await.is_ok(), "nothing came: quiet after the window");
        let since = Instant::now();
        let w2 = w.clone();
        let speak = async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            w2.heard(1);
        };
        let quiet = tokio::time::timeout(Duration::from_secs(30), w.quiet_for(1, since, Duration::from_secs(10)));
        let (quiet, ()) = tokio::join!(quiet, speak);
        assert!(quiet.is_err(), "bytes came within the window: never quiet");
    }

    #[test]
    fn the_probe_gets_a_quarter_of_the_window_within_bounds() {
        assert_eq!(probe_timeout(Duration::from_secs(10)), Duration::from_millis(2500));
        assert_eq!(probe_timeout(Duration::from_millis(600)), Duration::from_millis(300));
        assert_eq!(probe_timeout(Duration::from_secs(60)), Duration::from_secs(5));
    }
}
