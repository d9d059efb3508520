//! The front's own accept loop (instead of `axum::serve`, which has neither): a client gets
//! [`HEADER_READ_TIMEOUT`] to send a request's headers (a connection that trickles them is
//! closed, not held), headers are bounded by [`MAX_HEADER_BYTES`], and at most
//! [`MAX_CONNECTIONS`] connections are served at once, or half the open-file limit when that is
//! lower (past it the next wait in the kernel's queue, and the daemon keeps descriptors for its
//! other clients and servers). On shutdown every connection finishes its response in progress, then closes.
//!
//! Anyone who can reach the port can open connections, token or not, so a connection counts as
//! *unproven* until a request on it passes with the token ([`Admission`]). A new connection gets
//! [`FIRST_BYTE_TIMEOUT`] to send anything; unproven connections may hold at most three quarters
//! of the slots, and half of those from one peer address; past either, the oldest unproven one
//! (of that peer, or of all) is closed to admit the newcomer. So idle or slow connections never
//! keep a client with the token waiting: its new connection evicts one, and its proven ones stay.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::downstream::AcceptFailures;

/// How long a client may take to send the headers of a request (also how long an idle
/// keep-alive connection stays open).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's line and headers together are refused (431) past this many bytes.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Bytes taken from a connection per read. hyper checks its read buffer against its limit only
/// between reads, so one read may take it past the limit by as much as that read brought (heads
/// of 100 KiB and more went through a 64 KiB limit); small reads keep the overshoot small.
const READ_CHUNK: usize = 8 * 1024;
/// hyper's read-buffer limit: with reads of [`READ_CHUNK`], no head over [`MAX_HEADER_BYTES`]
/// gets through, and every head under this one does.
const READ_BUFFER_LIMIT: usize = MAX_HEADER_BYTES - READ_CHUNK;
/// Connections served at once, at most.
pub const MAX_CONNECTIONS: usize = 4096;
/// How long a new connection may take to send its first byte before it is closed. As long as a
/// head may take: a burst of legitimate clients on a busy machine can take seconds to write, and
/// idle peers cannot starve the front anyway (the oldest unproven connection makes room).
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// A full house is logged at most once per this interval.
const FULL_WARN_EVERY: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` until `shutdown`; returns once every connection has closed.
pub async fn serve(listener: tokio::net::TcpListener, app: axum::Router, listen: &str, shutdown: CancellationToken) {
    let connections = TaskTracker::new();
    // Never more than half the descriptors this process may open: the rest stay for the Unix
    // socket's clients, the servers' pipes and the config watch, whatever HTTP clients do.
    let open_files = switchyard_os::process::open_files_limit();
    let cap = open_files.map_or(MAX_CONNECTIONS, |n| MAX_CONNECTIONS.min((n / 2).max(16) as usize));
    let slots = Arc::new(Semaphore::new(cap));
    let admission = Arc::new(Admission::new(cap));
    let mut failures = AcceptFailures::new();
    let mut full_since: Option<Instant> = None;
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(s) => s,
            Err(_) => {
                if full_since.is_none_or(|t| t.elapsed() >= FULL_WARN_EVERY) {
                    tracing::warn!(
                        "the HTTP front on {listen} has {cap} connections open, its maximum; new ones wait until one closes"
                    );
                    full_since = Some(Instant::now());
                }
                tokio::select! {
                    s = slots.clone().acquire_owned() => s.expect("the semaphore is never closed"),
                    _ = shutdown.cancelled() => break,
                }
            }
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok((tcp, peer)) => {
                failures.accepted();
                (tcp, peer.ip())
            }
            Err(e) => {
                failures.failed(&e, &listen);
                // Out of descriptors, the pending connection stays queued and accept fails again
                // at once: wait for connections to close instead of spinning.
                tokio::select! {
                    _ = tokio::time::sleep(failures.wait()) => {}
                    _ = shutdown.cancelled() => break,
                }
                continue;
            }
        };
        // No Nagle: a response's head and its first event are separate small writes, and holding
        // the second for the client's delayed ACK added 40 ms to every call (BENCHMARKS.md).
        let _ = tcp.set_nodelay(true);
        let conn = admission.admit(peer, has_input(&tcp));
        let tower = hyper_util::service::TowerToHyperService::new(app.clone());
        let this = conn.clone();
        // Each request carries its connection, for the front to mark it proven.
        let service = hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(this.clone());
            hyper::service::Service::call(&tower, req)
        });
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let _slot = slot;
            let mut evicted = conn.evicted.clone();
            // Nothing sent in time (an idle connection holding a slot): closed before hyper
            // spends a buffer on it.
            let mut first = [0u8; 1];
            let spoke = tokio::select! {
                r = tokio::time::timeout(FIRST_BYTE_TIMEOUT, tcp.peek(&mut first)) => matches!(r, Ok(Ok(n)) if n > 0),
                // Chosen to make room before this task had looked: bytes that came meanwhile
                // make it a client, kept in place of the next silent one.
                _ = evicted.cancelled() => has_input(&tcp),
                _ = shutdown.cancelled() => return,
            };
            if !spoke {
                return;
            }
            if evicted.is_cancelled() {
                evicted = conn.reinstate();
            } else {
                conn.spoke();
            }
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT).max_buf_size(READ_BUFFER_LIMIT);
            let conn = builder.serve_connection(TokioIo::new(Chunked(tcp)), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                // Closed to admit a newer connection while no request on it had the token.
                _ = evicted.cancelled() => Ok(()),
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                // A client that went away, or one too slow with its headers: its business only.
                tracing::debug!("an HTTP connection ended: {e}");
            }
        });
    }
    connections.close();
    connections.wait().await;
}

/// Which connections are unproven (no request with the token on them yet), oldest first, and
/// how many per peer address: the ones closed when a new connection needs room. Those that
/// never sent a byte go first: a client's new connection has its request in flight from the
/// start, while idle ones were only holding a slot.
pub struct Admission {
    /// Unproven connections at most (the rest of the slots are kept for proven ones).
    unproven_max: usize,
    /// Unproven connections of one peer address at most.
    per_peer_max: usize,
    state: Mutex<Unproven>,
}

#[derive(Default)]
struct Unproven {
    next: u64,
    /// By admission order: peer and the token that closes the connection.
    by_age: BTreeMap<u64, (IpAddr, CancellationToken)>,
    /// Those of `by_age` that have sent nothing yet.
    silent: BTreeSet<u64>,
    per_peer: HashMap<IpAddr, usize>,
    /// Closed to make room, since the last report.
    evicted: u64,
    last_report: Option<Instant>,
}

/// One admitted connection; requests on it carry a clone (as an extension), so the front can
/// mark it proven. Dropping the last clone (the connection closed) takes it out of the count.
#[derive(Clone)]
pub struct Conn {
    seq: u64,
    peer: IpAddr,
    admission: Arc<Admission>,
    /// Fired when the connection is closed to make room for a newer one.
    evicted: CancellationToken,
    _alive: Arc<Leave>,
}

/// Takes a closed connection out of the unproven ones (a no-op when it was proven or evicted).
struct Leave(u64, std::sync::Weak<Admission>);

impl Drop for Leave {
    fn drop(&mut self) {
        if let Some(a) = self.1.upgrade() {
            a.remove(self.0);
        }
    }
}

impl Conn {
    /// A request on this connection carried the token: it is never closed to make room.
    pub fn prove(&self) {
        self.admission.remove(self.seq);
    }

    /// The client sent something: it is closed to make room only after every silent one.
    fn spoke(&self) {
        self.admission.state.lock().expect("lock").silent.remove(&self.seq);
    }

    /// Closed to make room, but it had sent bytes by then (its task had not looked yet): it
    /// counts again as unproven and spoken, in its place by age, and the room is made again
    /// elsewhere. Returns the token that now closes it.
    fn reinstate(&self) -> CancellationToken {
        let mut s = self.admission.state.lock().expect("lock");
        self.admission.make_room(&mut s, self.peer);
        let evicted = CancellationToken::new();
        s.by_age.insert(self.seq, (self.peer, evicted.clone()));
        *s.per_peer.entry(self.peer).or_default() += 1;
        evicted
    }
}

impl Admission {
    /// For a front of `slots` connections.
    pub fn new(slots: usize) -> Admission {
        let unproven_max = (slots - slots / 4).max(1);
        Admission { unproven_max, per_peer_max: (unproven_max / 2).max(1), state: Mutex::new(Unproven::default()) }
    }

    /// Admits a new connection from `peer` as unproven (`spoke`: it has sent bytes already),
    /// closing an unproven one of that peer (or of all) when it has (or they have) too many:
    /// the oldest silent one, else the oldest.
    pub fn admit(self: &Arc<Self>, peer: IpAddr, spoke: bool) -> Conn {
        let mut s = self.state.lock().expect("lock");
        self.make_room(&mut s, peer);
        let seq = s.next;
        s.next += 1;
        let evicted = CancellationToken::new();
        s.by_age.insert(seq, (peer, evicted.clone()));
        if !spoke {
            s.silent.insert(seq);
        }
        *s.per_peer.entry(peer).or_default() += 1;
        Conn { seq, peer, admission: self.clone(), evicted, _alive: Arc::new(Leave(seq, Arc::downgrade(self))) }
    }

    /// Closes the unproven connection that must go for one more of `peer` to fit, if one must.
    fn make_room(&self, s: &mut Unproven, peer: IpAddr) {
        let victim = if s.per_peer.get(&peer).copied().unwrap_or(0) >= self.per_peer_max {
            let of_peer = |k: &u64| s.by_age.get(k).is_some_and(|(ip, _)| *ip == peer);
            s.silent.iter().copied().find(of_peer).or_else(|| s.by_age.keys().copied().find(of_peer))
        } else if s.by_age.len() >= self.unproven_max {
            s.silent.first().or_else(|| s.by_age.keys().next()).copied()
        } else {
            None
        };
        if let Some(k) = victim {
            if let Some((ip, token)) = s.by_age.remove(&k) {
                s.silent.remove(&k);
                Self::uncount(s, ip);
                token.cancel();
                s.evicted += 1;
            }
            if s.last_report.is_none_or(|t| t.elapsed() >= FULL_WARN_EVERY) {
                tracing::warn!(
                    "the HTTP front closed {} connection(s) that sent no request with the token, to admit new ones (at most {} such connections, {} per address)",
                    s.evicted,
                    self.unproven_max,
                    self.per_peer_max
                );
                s.evicted = 0;
                s.last_report = Some(Instant::now());
            }
        }
    }

    fn remove(&self, seq: u64) {
        let mut s = self.state.lock().expect("lock");
        if let Some((ip, _)) = s.by_age.remove(&seq) {
            s.silent.remove(&seq);
            Self::uncount(&mut s, ip);
        }
    }

    fn uncount(s: &mut Unproven, ip: IpAddr) {
        if let Some(n) = s.per_peer.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                s.per_peer.remove(&ip);
            }
        }
    }

    /// Unproven connections now.
    pub fn unproven(&self) -> usize {
        self.state.lock().expect("lock").by_age.len()
    }
}

/// A connection read at most [`READ_CHUNK`] bytes at a time (see [`READ_BUFFER_LIMIT`]).
struct Chunked(tokio::net::TcpStream);

impl tokio::io::AsyncRead for Chunked {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if buf.remaining() <= READ_CHUNK {
            return std::pin::Pin::new(&mut self.0).poll_read(cx, buf);
        }
        let mut chunk = [0u8; READ_CHUNK];
        let mut part = tokio::io::ReadBuf::new(&mut chunk);
        std::task::ready!(std::pin::Pin::new(&mut self.0).poll_read(cx, &mut part))?;
        buf.put_slice(part.filled());
        std::task::Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Chunked {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Whether the client has sent bytes that wait to be read (a peek that never blocks).
fn has_input(tcp: &tokio::net::TcpStream) -> bool {
    // tokio's sockets are non-blocking: a peek with nothing waiting says WouldBlock.
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    socket2::SockRef::from(tcp).peek(&mut byte).is_ok_and(|n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_new_connection_evicts_the_oldest_unproven_one_never_a_proven_one() {
        // 8 slots: 6 unproven at most, 3 per address.
        let a = Arc::new(Admission::new(8));
        let proven = a.admit(ip(1), false);
        proven.prove();
        let first: Vec<Conn> = (0..3).map(|_| a.admit(ip(2), false)).collect();
        // A fourth from the same address closes that address's oldest.
        let fourth = a.admit(ip(2), false);
        assert!(first[0].evicted.is_cancelled());
        assert!(!first[1].evicted.is_cancelled() && !fourth.evicted.is_cancelled());
        // Other addresses fill the rest; past 6 unproven the oldest of all goes.
        let others: Vec<Conn> = (3..6).map(|n| a.admit(ip(n), false)).collect();
        assert_eq!(a.unproven(), 6);
        assert!(!first[1].evicted.is_cancelled());
        let newest = a.admit(ip(6), false);
        assert_eq!(a.unproven(), 6);
        assert!(first[1].evicted.is_cancelled(), "the oldest unproven of all");
        assert!(!newest.evicted.is_cancelled() && !proven.evicted.is_cancelled(), "a proven one is never closed");
        // A closed connection leaves the count.
        drop(others);
        assert_eq!(a.unproven(), 3);
    }

    #[test]
    fn a_connection_that_spoke_is_closed_only_after_every_silent_one() {
        let a = Arc::new(Admission::new(8));
        let talking = a.admit(ip(1), true);
        let silent: Vec<Conn> = (0..5).map(|_| a.admit(ip(1), false)).collect();
        // Past three from one address: the oldest silent one goes, not the older talking one.
        assert!(silent[0].evicted.is_cancelled() && silent[1].evicted.is_cancelled());
        assert!(!talking.evicted.is_cancelled());
        let later = a.admit(ip(1), false);
        later.spoke();
        let _more: Vec<Conn> = (0..2).map(|_| a.admit(ip(1), false)).collect();
        assert!(!talking.evicted.is_cancelled() && !later.evicted.is_cancelled());
    }

    #[test]
    fn a_connection_closed_before_its_bytes_were_seen_is_kept_in_place_of_a_silent_one() {
        // 8 slots: 3 unproven per address. A client's connection, its request not seen yet, is
        // chosen to make room for three newer silent ones.
        let a = Arc::new(Admission::new(8));
        let client = a.admit(ip(1), false);
        let idlers: Vec<Conn> = (0..3).map(|_| a.admit(ip(1), false)).collect();
        assert!(client.evicted.is_cancelled());
        // Its bytes had come: it is kept, and the oldest silent one goes instead.
        let token = client.reinstate();
        assert!(!token.is_cancelled());
        assert!(idlers[0].evicted.is_cancelled());
        assert!(!idlers[1].evicted.is_cancelled() && !idlers[2].evicted.is_cancelled());
        assert_eq!(a.unproven(), 3);
        // As one that spoke, it goes only after every silent one.
        let _more: Vec<Conn> = (0..2).map(|_| a.admit(ip(1), false)).collect();
        assert!(!token.is_cancelled());
        // Proven, it leaves the count; closed, nothing is counted twice.
        client.prove();
        assert_eq!(a.unproven(), 2);
        drop(client);
        assert_eq!(a.unproven(), 2);
    }
}
