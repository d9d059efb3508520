//! The front's own accept loop (instead of `axum::serve`, which has neither): a client gets
//! [`HEADER_READ_TIMEOUT`] to send a request's headers (a connection that trickles them is
//! closed, not held), headers are bounded by [`MAX_HEADER_BYTES`], and at most
//! [`MAX_CONNECTIONS`] connections are served at once, or half the open-file limit when that is
//! lower (past it the next wait in the kernel's queue, and the daemon keeps descriptors for its
//! other clients and servers). On shutdown every connection finishes its response in progress, then closes.

use std::sync::Arc;
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
/// Bytes a connection's read buffer may hold: the request line and headers must fit.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Connections served at once, at most.
pub const MAX_CONNECTIONS: usize = 4096;

/// A full house is logged at most once per this interval.
const FULL_WARN_EVERY: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` until `shutdown`; returns once every connection has closed.
pub async fn serve(listener: tokio::net::TcpListener, app: axum::Router, listen: &str, shutdown: CancellationToken) {
    let connections = TaskTracker::new();
    // Never more than half the descriptors this process may open: the rest stay for the Unix
    // socket's clients, the servers' pipes and the config watch, whatever HTTP clients do.
    let open_files = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let cap = open_files.map_or(MAX_CONNECTIONS, |n| MAX_CONNECTIONS.min((n / 2).max(16) as usize));
    let slots = Arc::new(Semaphore::new(cap));
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
        let tcp = match accepted {
            Ok((tcp, _)) => {
                failures.accepted();
                tcp
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
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT).max_buf_size(MAX_HEADER_BYTES);
            let conn = builder.serve_connection(TokioIo::new(tcp), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
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
