//! Waiting within a call's deadline (for the gate, for an instance), and telling the client,
//! after a while, what it waits for.

use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::peer::ClientPeer;
use switchyard_core::codec;

/// After this long waiting for the gate or the pool, the client is told why (so it sees "busy").
const WAIT_NOTICE_AFTER: Duration = Duration::from_secs(1);

/// A call that may have to wait, and whether its client may be told why.
pub(super) struct Waiting<'a> {
    /// e.g. "tools/call `read_file` on server `fs`".
    pub(super) about: String,
    pub(super) link: &'a ClientPeer,
    /// The raw id of the client's request that waits (the notice is about it).
    pub(super) client_id: &'a str,
    /// Checked when the notice is due: the server declared `logging` (MCP lets a server send
    /// notifications/message only then) and the client's level admits `info`.
    pub(super) may_notify: Box<dyn Fn() -> bool + Send + Sync + 'a>,
}

/// MCP level of the "waiting" notice (RFC 5424 severity: 6 = info).
pub(super) const NOTICE_LEVEL: u8 = 6;

/// Waits for `fut` until the deadline or the client's cancel; after a second, tells the client
/// what it waits for (`waiting`, made only when `fut` is not ready at once). On the deadline:
/// `Err(Some(what it was waiting for))`; on a cancel: `Err(None)`.
///
/// Most waits are over at once (a free gate, an idle instance): `fut` is polled first (after a
/// look at the cancel), and only when it is pending are the timers set and the wait counted. A
/// timer set costs the runtime a wake-up of its driver: on the hot path, a system call per call.
pub(super) async fn bounded<'w, T>(
    fut: impl Future<Output = T>,
    deadline: Instant,
    cancel: &CancellationToken,
    waiting: impl FnOnce() -> Waiting<'w>,
    waiting_for: impl Fn() -> String,
) -> Result<T, Option<String>> {
    // A call its client cancelled goes no further, whatever is free.
    if cancel.is_cancelled() {
        return Err(None);
    }
    let mut fut = std::pin::pin!(fut);
    if let Poll::Ready(v) = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
        return Ok(v);
    }
    // The wait itself (its timers, its notice) boxed, made only now: this future is part of
    // every request's, and most requests never wait.
    Box::pin(wait(fut, deadline, cancel, waiting, waiting_for)).await
}

/// [`bounded`] once `fut` is pending.
async fn wait<'w, T>(
    mut fut: Pin<&mut impl Future<Output = T>>,
    deadline: Instant,
    cancel: &CancellationToken,
    waiting: impl FnOnce() -> Waiting<'w>,
    waiting_for: impl Fn() -> String,
) -> Result<T, Option<String>> {
    let waiting = waiting();
    let _counted = waiting.link.wait_begins();
    let notice_at = Instant::now() + WAIT_NOTICE_AFTER;
    let mut noticed = false;
    loop {
        tokio::select! {
            v = fut.as_mut() => return Ok(v),
            _ = cancel.cancelled() => return Err(None),
            _ = tokio::time::sleep_until(deadline) => return Err(Some(waiting_for())),
            _ = tokio::time::sleep_until(notice_at), if !noticed => {
                noticed = true;
                if (waiting.may_notify)() {
                    let text = format!("switchyard: {} is waiting for {}", waiting.about, waiting_for());
                    let data = codec::json_string(&text);
                    waiting.link.send_for(
                        waiting.client_id,
                        codec::notification(
                            "notifications/message",
                            &format!(r#"{{"level":"info","logger":"switchyard","data":{data}}}"#),
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::mpsc;

    fn link() -> (Arc<ClientPeer>, mpsc::UnboundedReceiver<crate::peer::Out>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (ClientPeer::new(1, tx, 1 << 20, crate::peer::Buffered::new(usize::MAX)), rx)
    }

    fn waiting<'a>(link: &'a ClientPeer, may: &'a (dyn Fn() -> bool + Sync)) -> Waiting<'a> {
        Waiting { about: "tools/call `x` on server `s`".into(), link, client_id: "1", may_notify: Box::new(may) }
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_wait_tells_the_client_why_then_times_out_at_the_deadline() {
        let (link, mut rx) = link();
        let cancel = CancellationToken::new();
        let started = Instant::now();
        let deadline = started + Duration::from_millis(2500);
        let yes = || true;
        let w = || waiting(&link, &yes);
        let r = bounded(std::future::pending::<()>(), deadline, &cancel, w, || "the gate".to_string()).await;
        assert_eq!(r, Err(Some("the gate".to_string())));
        assert_eq!(started.elapsed(), Duration::from_millis(2500));
        let out = rx.try_recv().unwrap();
        assert_eq!(out.related.as_deref(), Some("1"), "the notice is about the waiting request");
        let notice: serde_json::Value = serde_json::from_str(&out.line).unwrap();
        assert_eq!(notice["method"], "notifications/message");
        assert_eq!(notice["params"]["level"], "info");
        assert_eq!(notice["params"]["data"], "switchyard: tools/call `x` on server `s` is waiting for the gate");
        assert!(rx.try_recv().is_err(), "one notice per wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_the_client_may_not_hear_of_times_out_in_silence() {
        let (link, mut rx) = link();
        let cancel = CancellationToken::new();
        let deadline = Instant::now() + Duration::from_millis(2500);
        let no = || false;
        let w = || waiting(&link, &no);
        let r = bounded(std::future::pending::<()>(), deadline, &cancel, w, || "the gate".to_string()).await;
        assert_eq!(r, Err(Some("the gate".to_string())));
        assert!(rx.try_recv().is_err(), "a notice was sent though the client may not get one");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quick_wait_says_nothing_and_a_cancel_ends_it() {
        let (link, mut rx) = link();
        let cancel = CancellationToken::new();
        let far = Instant::now() + Duration::from_secs(60);
        let quick = async {
            tokio::time::sleep(Duration::from_millis(900)).await;
            7
        };
        let yes = || true;
        let w = || waiting(&link, &yes);
        assert_eq!(bounded(quick, far, &cancel, w, String::new).await, Ok(7));
        assert!(rx.try_recv().is_err());
        let c2 = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            c2.cancel();
        });
        let r = bounded(std::future::pending::<()>(), far, &cancel, w, String::new).await;
        assert_eq!(r, Err(None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_over_at_once_sets_no_timer_and_makes_no_notice() {
        // A free gate (a ready future) is taken even at the deadline: the timers and the notice
        // are only set up for a wait that is pending. Before, the branches were polled in a
        // random order, and a passed deadline could win over a free gate, or a free gate over a
        // cancel given before it.
        let cancel = CancellationToken::new();
        let passed = Instant::now();
        let made = || -> Waiting<'static> { panic!("the notice of a wait that did not wait was made") };
        for _ in 0..64 {
            let r = bounded(std::future::ready(3), passed, &cancel, made, || unreachable!()).await;
            assert_eq!(r, Ok(3));
        }
        cancel.cancel();
        for _ in 0..64 {
            let r = bounded(std::future::ready(3), passed, &cancel, made, || unreachable!()).await;
            assert_eq!(r, Err(None), "a cancelled call took a free gate");
        }
    }
}
