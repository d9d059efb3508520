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
///
/// When stdin and stdout are pipes or sockets (as MCP clients start servers), they are driven
/// by the reactor directly: tokio's own stdin/stdout hand every read and write to its blocking
/// thread pool, which roughly doubles the router's added latency. Anything else (a terminal, a
/// file) keeps tokio's portable streams.
pub async fn stdio(server: Arc<Server>, shutdown: CancellationToken) {
    match (pipe::Pipe::open(0), pipe::Pipe::open(1)) {
        (Some(input), Some(output)) => {
            let reader = BufReader::with_capacity(64 * 1024, input);
            session::serve(server, reader, output, "stdio", shutdown).await;
        }
        _ => {
            let reader = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
            session::serve(server, reader, tokio::io::stdout(), "stdio", shutdown).await;
        }
    }
}

mod pipe {
    //! A non-blocking pipe or socket on an inherited file descriptor, driven by the reactor.

    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::pin::Pin;
    use std::task::{Context, Poll, ready};

    use tokio::io::unix::AsyncFd;
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    pub struct Pipe(AsyncFd<OwnedFd>);

    impl Pipe {
        /// A duplicate of `fd` in non-blocking mode, if it is a pipe or a socket.
        pub fn open(fd: i32) -> Option<Pipe> {
            // SAFETY: fstat, dup and fcntl on a descriptor number; the duplicate is owned at once,
            // and an OwnedFd is a valid descriptor for AsyncFd::register for as long as it lives.
            unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstat(fd, &mut st) != 0 {
                    return None;
                }
                let kind = st.st_mode & libc::S_IFMT;
                if kind != libc::S_IFIFO && kind != libc::S_IFSOCK {
                    return None;
                }
                let dup = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
                if dup < 0 {
                    return None;
                }
                let owned = OwnedFd::from_raw_fd(dup);
                let flags = libc::fcntl(dup, libc::F_GETFL);
                if flags < 0 || libc::fcntl(dup, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
                    return None;
                }
                // An OwnedFd keeps its descriptor open and unchanged for as long as it lives.
                AsyncFd::register(owned).ok().map(Pipe)
            }
        }
    }

    impl AsyncRead for Pipe {
        fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            loop {
                let mut guard = ready!(self.0.poll_read_ready(cx))?;
                let unfilled = buf.initialize_unfilled();
                let r = guard.try_io(|fd| {
                    // SAFETY: reads into the initialised, unfilled part of the caller's buffer.
                    let n = unsafe { libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len()) };
                    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
                });
                match r {
                    Ok(Ok(n)) => {
                        buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    Ok(Err(e)) => return Poll::Ready(Err(e)),
                    Err(_would_block) => continue,
                }
            }
        }
    }

    impl AsyncWrite for Pipe {
        fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
            loop {
                let mut guard = ready!(self.0.poll_write_ready(cx))?;
                let r = guard.try_io(|fd| {
                    // SAFETY: writes from the caller's buffer.
                    let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
                });
                match r {
                    Ok(result) => return Poll::Ready(result),
                    Err(_would_block) => continue,
                }
            }
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }
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
