//! The Unix socket clients of a shared router (`connect`, `run --listen`) reach it by: bound
//! only for its user, accepted with back-off when descriptors run out, each connection opened by
//! a control hello or as a plain MCP session.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use tokio::io::BufReader;
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::AcceptFailures;
use crate::control::{self, Hello, Reply};
use crate::registry::Servers;
use crate::session::{self, Opening};

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
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    rustix::net::bind(&fd, &SocketAddrUnix::new(path)?)?;
    let made = rustix::fs::lstat(path)?;
    if FileType::from_raw_mode(made.st_mode) != FileType::Socket {
        // Replaced between bind and here: touch nothing that is not ours.
        return Err(std::io::Error::other("the path was replaced by something else while binding"));
    }
    rustix::fs::chmod(path, Mode::RUSR | Mode::WUSR)?;
    rustix::net::listen(&fd, 1024)?;
    Ok((std::os::unix::net::UnixListener::from(fd), (made.st_dev, made.st_ino)))
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
                sessions.spawn(async move { open(router, stream, shutdown).await });
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
        Ok(st) if (st.st_dev, st.st_ino) == file => {
            let _ = std::fs::remove_file(&path);
        }
        Ok(_) => tracing::info!("{} is no longer this router's socket; left in place", path.display()),
        Err(_) => {}
    }
}

/// How long a `connect` that offered the hand-off may take to send its descriptors.
const HANDED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The descriptors a `connect` sends after a welcome that took its offer.
async fn take_handed(
    reader: &BufReader<tokio::net::unix::OwnedReadHalf>,
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

/// The longest first line read before a connection is known to be a hello or an MCP message.
const FIRST_LINE_MAX: u64 = 64 * 1024 * 1024;

/// One accepted connection: a hello (`control::Hello`) says what it wants; anything else is the
/// first MCP message of a session with the router's only server.
async fn open(router: Arc<Servers>, stream: UnixStream, shutdown: CancellationToken) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let (r, mut w) = stream.into_split();
    let mut reader = BufReader::with_capacity(64 * 1024, r);
    let mut first = Vec::new();
    let mut limited = (&mut reader).take(FIRST_LINE_MAX);
    let read = tokio::select! {
        r = limited.read_until(b'\n', &mut first) => r,
        _ = shutdown.cancelled() => return,
    };
    if !matches!(read, Ok(n) if n > 0) {
        return;
    }
    let text = String::from_utf8_lossy(&first).into_owned();
    let reply = |r: &Reply| control::line(r);
    match control::hello(&text) {
        Some(Ok(Hello::Connect { server, version, env, dir, handoff })) => match router.lookup(server.as_deref(), &env)
        {
            Ok(server) => {
                if version != env!("CARGO_PKG_VERSION") {
                    tracing::info!(server = %server.name, "a client of switchyard {version} joined (this router is {})", env!("CARGO_PKG_VERSION"));
                }
                let welcome = Reply::Welcome {
                    server: server.name.clone(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    pid: std::process::id(),
                    handoff,
                };
                if w.write_all(reply(&welcome).as_bytes()).await.is_err() {
                    return;
                }
                let opening = Opening {
                    transport: "unix",
                    sessions: router.sessions.clone(),
                    speaks_control: true,
                    client_dir: dir,
                    client_token: None,
                };
                let ends = server.shutdown.clone();
                if !handoff {
                    return session::serve(server, reader, w, opening, ends).await;
                }
                let handed = take_handed(&reader, &shutdown).await;
                crate::handoff::serve::serve(server, handed, (reader, w), opening, ends).await;
            }
            Err(error) => {
                tracing::info!("refused a client: {error}");
                let _ = w.write_all(reply(&Reply::Refused { error }).as_bytes()).await;
            }
        },
        Some(Ok(Hello::Status)) => {
            let _ = w.write_all(reply(&Reply::Status { status: router.status() }).as_bytes()).await;
        }
        Some(Ok(Hello::Stop)) => {
            tracing::info!("asked to stop (switchyard stop)");
            let _ = w.write_all(reply(&Reply::Stopping { pid: std::process::id() }).as_bytes()).await;
            router.shutdown.cancel();
        }
        Some(Err(error)) => {
            let _ = w.write_all(reply(&Reply::Refused { error }).as_bytes()).await;
        }
        // No hello: a raw MCP client, for the only server.
        None => match router.lookup(None, &Default::default()) {
            Ok(server) => {
                let opening = Opening {
                    transport: "unix",
                    sessions: router.sessions.clone(),
                    speaks_control: false,
                    client_dir: None,
                    client_token: None,
                };
                let ends = server.shutdown.clone();
                let reader = std::io::Cursor::new(first).chain(reader);
                session::serve(server, reader, w, opening, ends).await;
            }
            Err(why) => {
                let id = switchyard_core::codec::parse(text.trim())
                    .ok()
                    .and_then(|e| e.id.map(|r| text.trim()[r].to_string()));
                let msg = format!("{why}; this connection sent no switchyard hello, so it cannot name one");
                let _ = w
                    .write_all(
                        switchyard_core::codec::response_error(
                            id.as_deref().unwrap_or("null"),
                            switchyard_core::codec::INVALID_REQUEST,
                            &msg,
                            None,
                        )
                        .as_bytes(),
                    )
                    .await;
                let _ = w.write_all(b"\n").await;
            }
        },
    }
}

fn is_resource_exhaustion(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    let code = e.raw_os_error();
    [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM].iter().any(|errno| code == Some(errno.raw_os_error()))
}
