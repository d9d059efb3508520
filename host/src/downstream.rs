//! Where clients come from: stdin/stdout, and a Unix socket for shared (daemon) use.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use tokio::io::BufReader;
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::server::Server;
use crate::session;

/// Serves the client on stdin/stdout until it closes stdin or `shutdown` fires.
pub async fn stdio(server: Arc<Server>, shutdown: CancellationToken) {
    let reader = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    session::serve(server, reader, tokio::io::stdout(), "stdio", shutdown).await;
}

/// Binds a Unix socket, replacing a stale socket file but never a live one.
pub async fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).await.is_ok() {
            bail!("{} is in use by another switchyard; choose another --listen path", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("cannot remove stale socket {}", path.display()))?;
    }
    UnixListener::bind(path).with_context(|| format!("cannot listen on {}", path.display()))
}

/// Accepts sessions on the socket until `shutdown`; each connection is one session.
pub async fn listen(server: Arc<Server>, listener: UnixListener, path: PathBuf, shutdown: CancellationToken) {
    let sessions = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => break,
        };
        match accepted {
            Ok((stream, _)) => {
                let (r, w) = stream.into_split();
                let (server, shutdown) = (server.clone(), shutdown.clone());
                sessions.spawn(async move {
                    session::serve(server, BufReader::new(r), w, "unix", shutdown).await;
                });
            }
            Err(e) => tracing::warn!("accept on {} failed: {e}", path.display()),
        }
    }
    sessions.close();
    sessions.wait().await;
    let _ = std::fs::remove_file(&path);
}

/// `switchyard connect SOCKET`: joins a running router as one more session over stdin/stdout.
pub async fn connect(path: &Path) -> anyhow::Result<()> {
    let stream = UnixStream::connect(path)
        .await
        .with_context(|| format!("cannot connect to {}: is `switchyard run --listen` running?", path.display()))?;
    let (mut r, mut w) = stream.into_split();
    let to_router = async {
        let mut stdin = tokio::io::stdin();
        let _ = tokio::io::copy(&mut stdin, &mut w).await;
        // Closing our half tells the router the client is gone.
        drop(w);
    };
    let from_router = async {
        let mut stdout = tokio::io::stdout();
        let _ = tokio::io::copy(&mut r, &mut stdout).await;
    };
    tokio::select! {
        _ = async { tokio::join!(to_router, from_router) } => {}
    }
    Ok(())
}
