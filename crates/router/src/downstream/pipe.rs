//! The named pipe clients of a shared router (`connect`, `run --listen`) reach it by on
//! Windows: admitting this user alone (see `switchyard_os::endpoint`), each connection opened
//! by [`super::local::open`]. `connect` relays its stdio here: Windows has no hand-off.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::AcceptFailures;
use crate::registry::Servers;

/// A pipe created by [`bind`]: its first instance, waiting for a client.
pub struct Bound {
    listener: switchyard_os::endpoint::Listener,
}

/// Creates the daemon's pipe. It fails when the name is taken (another daemon of this config,
/// or someone else's pipe), and the error says so.
pub async fn bind(path: &Path) -> anyhow::Result<Bound> {
    let listener = switchyard_os::endpoint::Listener::bind(path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    Ok(Bound { listener })
}

/// Accepts connections on the pipe until `shutdown`; each is a session (or one status or stop
/// request).
pub async fn listen(router: Arc<Servers>, bound: Bound, path: PathBuf, shutdown: CancellationToken) {
    let Bound { mut listener } = bound;
    let sessions = TaskTracker::new();
    let mut failures = AcceptFailures::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => break,
        };
        match accepted {
            Ok(pipe) => {
                failures.accepted();
                let (router, shutdown) = (router.clone(), shutdown.clone());
                let (r, w) = tokio::io::split(pipe);
                sessions.spawn(async move { super::local::open("pipe", router, r, w, shutdown, None).await });
            }
            Err(e) => {
                failures.failed(&e, &path.display());
                tokio::select! {
                    _ = tokio::time::sleep(failures.wait()) => {}
                    _ = shutdown.cancelled() => break,
                }
            }
        }
    }
    sessions.close();
    sessions.wait().await;
}
