//! The Unix socket clients of a shared router (`connect`, `run --listen`) reach it by on Linux
//! and macOS: bound only for its user, accepted with back-off when descriptors run out, each
//! connection opened by [`super::local::open`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::AcceptFailures;
use crate::registry::Servers;

/// A socket bound by [`bind`]: its listener, and which file it made at its path (device and
/// inode), so that only that file is removed at the end.
pub struct Bound {
    listener: UnixListener,
    file: (u64, u64),
}

impl Bound {
    /// The socket file it made (device, inode).
    pub fn file(&self) -> (u64, u64) {
        self.file
    }
}

/// Binds a Unix socket, replacing a stale socket file but never a live one, nor anything that
/// is not a socket. The socket file is made 0600 (only this user may connect) whatever the umask.
pub async fn bind(path: &Path) -> anyhow::Result<Bound> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match UnixStream::connect(path).await {
                Ok(_) => bail!("{} is in use by another switchyard; choose another socket path", path.display()),
                // Refused: nobody listens, the file is stale.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                // Not ours to judge (another user's private socket, a full backlog): leave it.
                Err(e) => bail!(
                    "socket {}: a socket is there and switchyard cannot tell whether it is in use ({e}); choose another path",
                    path.display()
                ),
            }
            std::fs::remove_file(path).with_context(|| format!("cannot remove stale socket {}", path.display()))?;
        }
        Ok(_) => bail!(
            "socket {}: that path exists and is not a socket; switchyard replaces only a stale socket. Choose another path",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot check socket path {}", path.display())),
    }
    let (listener, file) = bind_private(path).with_context(|| format!("cannot listen on {}", path.display()))?;
    let listener = UnixListener::from_std(listener).with_context(|| format!("cannot listen on {}", path.display()))?;
    Ok(Bound { listener, file })
}

/// bind, chmod 0600, then listen. Until `listen` the socket refuses every connection, so the
/// file's mode (made from the umask at bind) is narrowed before anyone can connect through it;
/// the process-wide umask is never touched (other threads create files meanwhile).
fn bind_private(path: &Path) -> std::io::Result<(std::os::unix::net::UnixListener, (u64, u64))> {
    use rustix::fs::{FileType, Mode};
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
        None,
    )?;
    // macOS has no SOCK_CLOEXEC: the flags are set right after, before anything could exec.
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    let fd = {
        let fd = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None)?;
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
        rustix::io::ioctl_fionbio(&fd, true)?;
        fd
    };
    rustix::net::bind(&fd, &SocketAddrUnix::new(path)?)?;
    let made = rustix::fs::lstat(path)?;
    if FileType::from_raw_mode(made.st_mode) != FileType::Socket {
        // Replaced between bind and here: touch nothing that is not ours.
        return Err(std::io::Error::other("the path was replaced by something else while binding"));
    }
    rustix::fs::chmod(path, Mode::RUSR | Mode::WUSR)?;
    rustix::net::listen(&fd, 1024)?;
    Ok((std::os::unix::net::UnixListener::from(fd), file_id(&made)))
}

/// Which file `st` describes: its device and inode (of the OS's own widths).
#[allow(clippy::unnecessary_cast)]
pub fn file_id(st: &rustix::fs::Stat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

/// Accepts connections on the socket until `shutdown`; each is a session (or one status or
/// stop request), from this user only.
pub async fn listen(router: Arc<Servers>, bound: Bound, path: PathBuf, shutdown: CancellationToken) {
    let Bound { listener, file } = bound;
    let sessions = TaskTracker::new();
    let mut failures = AcceptFailures::new();
    let me = rustix::process::getuid().as_raw();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => break,
        };
        match accepted {
            Ok((stream, _)) => {
                failures.accepted();
                // The socket file is 0600 in a private directory; the peer's uid is checked too,
                // in case the file was made reachable by hand.
                match stream.peer_cred() {
                    Ok(cred) if cred.uid() == me => {}
                    Ok(cred) => {
                        tracing::warn!(
                            "refused a connection on {} from uid {} (only uid {me} may connect)",
                            path.display(),
                            cred.uid()
                        );
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!("refused a connection on {}: cannot tell who it is from ({e})", path.display());
                        continue;
                    }
                }
                let (router, shutdown) = (router.clone(), shutdown.clone());
                let (r, w) = stream.into_split();
                sessions.spawn(async move { super::local::open("unix", router, r, w, shutdown, HANDOFF).await });
            }
            Err(e) => {
                failures.failed(&e, &path.display());
                // Out of descriptors (or kernel memory), the pending connection stays queued and
                // accept fails again at once: wait for sessions to end instead of spinning.
                if is_resource_exhaustion(&e) {
                    tokio::select! {
                        _ = tokio::time::sleep(failures.wait()) => {}
                        _ = shutdown.cancelled() => break,
                    }
                }
            }
        }
    }
    sessions.close();
    sessions.wait().await;
    // Only the file this router made: if it was removed and another router bound the path
    // since, that router's socket stays.
    match rustix::fs::lstat(&path) {
        Ok(st) if file_id(&st) == file => {
            let _ = std::fs::remove_file(&path);
        }
        Ok(_) => tracing::info!("{} is no longer this router's socket; left in place", path.display()),
        Err(_) => {}
    }
}

/// Linux takes `connect`'s offer of its pipes; macOS has no hand-off (the session is relayed).
#[cfg(target_os = "linux")]
const HANDOFF: Option<super::local::HandOff<tokio::net::unix::OwnedReadHalf, tokio::net::unix::OwnedWriteHalf>> =
    Some(serve_handed);
#[cfg(not(target_os = "linux"))]
const HANDOFF: Option<super::local::HandOff<tokio::net::unix::OwnedReadHalf, tokio::net::unix::OwnedWriteHalf>> = None;

/// Serves a session whose `connect` hands its pipes over: takes the descriptors, then serves.
#[cfg(target_os = "linux")]
fn serve_handed(
    server: Arc<crate::server::Server>,
    reader: tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>,
    w: tokio::net::unix::OwnedWriteHalf,
    opening: crate::session::Opening,
    ends: CancellationToken,
    shutdown: CancellationToken,
) -> futures_util::future::BoxFuture<'static, ()> {
    Box::pin(async move {
        let handed = take_handed(&reader, &shutdown).await;
        crate::handoff::serve::serve(server, handed, (reader, w), opening, ends).await;
    })
}

/// How long a `connect` that offered the hand-off may take to send its descriptors.
#[cfg(target_os = "linux")]
const HANDED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The descriptors a `connect` sends after a welcome that took its offer.
#[cfg(target_os = "linux")]
async fn take_handed(
    reader: &tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>,
    shutdown: &CancellationToken,
) -> std::io::Result<crate::handoff::Handed> {
    use std::os::fd::AsFd;
    if !reader.buffer().is_empty() {
        return Err(std::io::Error::other("it sent bytes before its descriptors"));
    }
    let stream: &UnixStream = reader.get_ref().as_ref();
    let receive = stream.async_io(tokio::io::Interest::READABLE, || crate::handoff::recv_fds(stream.as_fd()));
    tokio::select! {
        r = tokio::time::timeout(HANDED_WAIT, receive) => r.map_err(|_| std::io::Error::other(format!("none came within {HANDED_WAIT:?}")))?,
        _ = shutdown.cancelled() => Err(std::io::Error::other("the router is stopping")),
    }
}

fn is_resource_exhaustion(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    let code = e.raw_os_error();
    [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM].iter().any(|errno| code == Some(errno.raw_os_error()))
}
