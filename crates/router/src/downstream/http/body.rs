//! Reading a POSTed body: within the message limit and [`BODY_READ_TIMEOUT`], into one buffer
//! (sized by its `Content-Length` when it declares one), and within the front's [`Bodies`]
//! budget, which bounds what the bodies being read at once may hold in all.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::StatusCode;
use http::header::{self, HeaderMap};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{plain, rpc_error};
use switchyard_core::codec;

/// How long a client may take to send a request's body: a body that trickles in (a byte a
/// second) would otherwise hold its connection, and what it sent so far, for ever.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What the bodies being read at once may hold in all, by default: four messages of the
/// default limit (`limits.max_message_bytes`, 64 MiB).
pub const BODIES_BUDGET: usize = 256 << 20;

/// How long a body may wait for room in the budget before it is refused (503).
pub const ROOM_WAIT: Duration = Duration::from_secs(60);

/// The budget is counted in units of this many bytes (a semaphore counts in `u32`).
const UNIT: usize = 1024;

/// What the bodies being read at once may hold. A body takes its share before a byte of it is
/// read: its declared `Content-Length`, or, for a body that declares none (chunked), the
/// message limit; one that finds no room waits (holding nothing, so waits never deadlock), at
/// most [`ROOM_WAIT`]. Once read, it keeps a share of its real size until it has become a message.
/// A body larger than the whole budget is read alone.
pub struct Bodies {
    units: Arc<Semaphore>,
    total: u32,
}

impl Bodies {
    pub fn new(bytes: usize) -> Bodies {
        let total = u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX).max(1);
        Bodies { units: Arc::new(Semaphore::new(total as usize)), total }
    }

    /// Bytes held by bodies being read now.
    #[cfg(test)]
    fn held(&self) -> usize {
        (self.total as usize - self.units.available_permits()) * UNIT
    }

    /// A share covering `bytes` (at most the whole budget), once there is room for it.
    async fn share(&self, bytes: usize) -> Share {
        let want = u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX).clamp(1, self.total);
        // Never closed: the front owns the semaphore for as long as it serves.
        Share(self.units.clone().acquire_many_owned(want).await.ok())
    }
}

/// A body's share of the budget, while it is read and parsed.
#[derive(Debug)]
pub struct Share(Option<OwnedSemaphorePermit>);

impl Share {
    /// Gives back what is over `bytes`.
    fn shrink_to(&mut self, bytes: usize) {
        let keep = bytes.div_ceil(UNIT).max(1);
        if let Some(p) = self.0.as_mut()
            && p.num_permits() > keep
        {
            drop(p.split(p.num_permits() - keep));
        }
    }
}

/// The `Content-Length` a request declares, if it declares one that is a number.
pub fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// 413 with a JSON-RPC error, for a body over `limit` bytes.
pub fn too_large(limit: usize) -> Response {
    rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "null",
        codec::INVALID_REQUEST,
        &format!("the message is over the server's limit of {limit} bytes (limits.max_message_bytes)"),
    )
}

/// Reads a body of at most `limit` bytes (`declared`: its `Content-Length`) within
/// [`BODY_READ_TIMEOUT`] and the `bodies` budget: its bytes, and its share of the budget, to
/// give back once the bytes are a message. Over the size, 413 with a JSON-RPC error; over the
/// time, 408.
pub async fn read_body(
    body: Body,
    limit: usize,
    declared: Option<u64>,
    bodies: &Bodies,
) -> Result<(Vec<u8>, Share), Response> {
    let expected = declared.map_or(limit, |d| usize::try_from(d).unwrap_or(usize::MAX).min(limit));
    // Waiting for room holds no memory: it does not count against the read's own time.
    let Ok(mut share) = tokio::time::timeout(ROOM_WAIT, bodies.share(expected)).await else {
        return Err(plain(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "the request body was not read: for {} s other large requests held the {} MiB the front reads at once; send it again",
                ROOM_WAIT.as_secs(),
                (bodies.total as usize * UNIT) >> 20
            ),
        ));
    };
    let read = tokio::time::timeout(BODY_READ_TIMEOUT, async {
        use http_body_util::BodyExt;
        let mut bytes = Vec::with_capacity(declared.map_or(0, |_| expected));
        let mut body = http_body_util::Limited::new(body, limit);
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                bytes.extend_from_slice(&data);
            }
        }
        Ok::<_, axum::BoxError>(bytes)
    });
    match read.await {
        Ok(Ok(bytes)) => {
            share.shrink_to(bytes.len());
            Ok((bytes, share))
        }
        Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(too_large(limit)),
        Ok(Err(e)) => Err(plain(StatusCode::BAD_REQUEST, &format!("cannot read the request body: {e}"))),
        Err(_) => Err(plain(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "the request body did not arrive within {} s; send it whole and at once",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;

    /// A body that sends one byte a second, never ending.
    fn trickle() -> Body {
        let bytes = futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some((Ok::<_, std::convert::Infallible>(Bytes::from_static(b" ")), ()))
        });
        Body::from_stream(bytes)
    }

    /// A body of `chunks` chunks of `size` bytes, the next sent when `go` says so.
    fn chunked(size: usize, chunks: usize, go: tokio::sync::watch::Receiver<usize>) -> Body {
        let bytes = futures_util::stream::unfold((0, go), move |(sent, mut go)| async move {
            if sent == chunks {
                return None;
            }
            let _ = go.wait_for(|n| *n > sent).await;
            Some((Ok::<_, std::convert::Infallible>(Bytes::from(vec![b' '; size])), (sent + 1, go)))
        });
        Body::from_stream(bytes)
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_trickles_in_is_cut_at_the_read_timeout() {
        let started = tokio::time::Instant::now();
        let refused = read_body(trickle(), 1 << 20, None, &Bodies::new(BODIES_BUDGET)).await.unwrap_err();
        assert_eq!(refused.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(started.elapsed(), BODY_READ_TIMEOUT);
    }

    #[test]
    fn a_declared_length_is_read_when_it_is_a_number() {
        let h = crate::downstream::http::tests::headers;
        assert_eq!(content_length(&h(&[("content-length", "10000000000")])), Some(10_000_000_000));
        assert_eq!(content_length(&h(&[("content-length", "ten")])), None);
        assert_eq!(content_length(&h(&[])), None);
    }

    /// Bodies read at once hold no more than the budget: a body whose declared length finds
    /// no room waits until the body holding it has become a message; a body that declares no
    /// length takes the message limit while it is read, then only its size; a body larger than
    /// the whole budget is still read (alone).
    #[tokio::test(start_paused = true)]
    async fn bodies_read_at_once_hold_no_more_than_the_budget() {
        let bodies = Arc::new(Bodies::new(4 << 20));
        let read = |chunks: usize, declared: Option<u64>| {
            let bodies = bodies.clone();
            let (tx, rx) = tokio::sync::watch::channel(chunks);
            tokio::spawn(async move {
                let _tx = tx;
                let got = read_body(chunked(1 << 20, chunks, rx), 64 << 20, declared, &bodies).await;
                got.map(|(b, share)| (b.len(), share)).map_err(|r| r.status())
            })
        };
        let (len, share) = read(3, Some(3 << 20)).await.unwrap().unwrap();
        assert_eq!((len, bodies.held()), (3 << 20, 3 << 20));
        let second = read(3, Some(3 << 20));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!second.is_finished(), "a second body went past the budget");
        drop(share);
        let (len, share) = second.await.unwrap().unwrap();
        assert_eq!((len, bodies.held()), (3 << 20, 3 << 20));
        drop(share);
        assert_eq!(bodies.held(), 0, "a read body kept its share");
        // No declared length: the message limit (here all of the budget) while read, then its size.
        let (len, share) = read(2, None).await.unwrap().unwrap();
        assert_eq!((len, bodies.held()), (2 << 20, 2 << 20));
        drop(share);
        let (len, share) = read(6, Some(6 << 20)).await.unwrap().unwrap();
        assert_eq!((len, bodies.held()), (6 << 20, 4 << 20));
        drop(share);
    }

    /// A body that finds no room within [`ROOM_WAIT`] is told why, not that it was slow; the
    /// time it waited is not taken from its own time to arrive.
    #[tokio::test(start_paused = true)]
    async fn a_body_that_finds_no_room_says_so_and_waiting_is_not_reading() {
        let bodies = Bodies::new(1 << 20);
        let (_tx, rx) = tokio::sync::watch::channel(1);
        let (_, held) = read_body(chunked(1 << 20, 1, rx.clone()), 64 << 20, Some(1 << 20), &bodies).await.unwrap();
        let started = tokio::time::Instant::now();
        let refused = read_body(chunked(1 << 20, 1, rx.clone()), 64 << 20, Some(1 << 20), &bodies).await.unwrap_err();
        assert_eq!((refused.status(), started.elapsed()), (StatusCode::SERVICE_UNAVAILABLE, ROOM_WAIT));
        // Room comes after 50 s (past the read timeout): the body is still read.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(50)).await;
            drop(held);
        });
        let (bytes, _) = read_body(chunked(1 << 20, 1, rx), 64 << 20, Some(1 << 20), &bodies).await.unwrap();
        assert_eq!(bytes.len(), 1 << 20);
    }
}
