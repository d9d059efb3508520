//! A client on the process's own stdin and stdout (`switchyard run`): the two as async streams,
//! chosen per stream, and the session served on them.
//!
//! A pipe or a socket (as MCP clients start servers) is driven by the reactor: tokio's
//! portable stdin/stdout hand every read and write to its blocking thread pool, which
//! roughly doubles the router's added latency. A terminal or a file keeps the portable
//! stream. Each stream is decided on its own: the two may be of different kinds.
//!
//! A pipe is reopened through /proc/self/fd: that gives switchyard an open file description
//! of its own, so O_NONBLOCK never touches the one it shares with its parent (or with its own
//! stderr, when that is the same pipe). A socket cannot be reopened; its description is made
//! non-blocking and its flags are put back as found when the returned guard is dropped.

#[cfg(unix)]
use std::io;
#[cfg(unix)]
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use std::sync::Arc;

#[cfg(unix)]
use rustix::fs::{FileType, Mode, OFlags};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
#[cfg(unix)]
use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

use crate::registry::Servers;
use crate::server::Server;
use crate::session::{self, Opening};

pub type Input = Box<dyn AsyncRead + Send + Unpin>;
pub type Output = Box<dyn AsyncWrite + Send + Unpin>;

/// Puts back the flags of the descriptions that were made non-blocking.
#[cfg(unix)]
#[derive(Default)]
pub struct Restore(Vec<(OwnedFd, OFlags)>);

/// Nothing to put back: Windows' stdin and stdout stay as they are. Dropped where Unix's is,
/// so callers read the same on every OS.
#[cfg(windows)]
#[derive(Default)]
pub struct Restore;

#[cfg(windows)]
impl Drop for Restore {
    fn drop(&mut self) {}
}

/// Stdin and stdout through tokio's portable streams (Windows: a pipe handle is not driven by
/// the reactor).
#[cfg(windows)]
pub fn open() -> (Input, Output, Restore) {
    (Box::new(tokio::io::stdin()), Box::new(tokio::io::stdout()), Restore)
}

#[cfg(unix)]
impl Drop for Restore {
    fn drop(&mut self) {
        for (fd, flags) in &self.0 {
            let _ = rustix::fs::fcntl_setfl(fd, *flags);
        }
    }
}

#[cfg(unix)]
/// Stdin and stdout, each reactor-driven when it is a pipe or a socket. Must run inside a
/// tokio runtime with I/O enabled.
pub fn open() -> (Input, Output, Restore) {
    let (stdin, stdout) = (io::stdin(), io::stdout());
    // Both flags are read before either stream changes anything: stdin and stdout may
    // share one description (a socket), and the restore must bring back the original.
    let flags = [rustix::fs::fcntl_getfl(stdin.as_fd()).ok(), rustix::fs::fcntl_getfl(stdout.as_fd()).ok()];
    let mut restore = Restore::default();
    let input: Input = match reactor_stream(stdin.as_fd(), OFlags::RDONLY, flags[0], &mut restore) {
        Some(Stream::Pipe(fd)) => match pipe::Receiver::from_owned_fd(fd) {
            Ok(r) => Box::new(r),
            Err(_) => Box::new(tokio::io::stdin()),
        },
        Some(Stream::Socket(s)) => Box::new(s),
        None => Box::new(tokio::io::stdin()),
    };
    let output: Output = match reactor_stream(stdout.as_fd(), OFlags::WRONLY, flags[1], &mut restore) {
        Some(Stream::Pipe(fd)) => match pipe::Sender::from_owned_fd(fd) {
            Ok(w) => Box::new(w),
            Err(_) => Box::new(tokio::io::stdout()),
        },
        Some(Stream::Socket(s)) => Box::new(s),
        None => Box::new(tokio::io::stdout()),
    };
    (input, output, restore)
}

#[cfg(unix)]
enum Stream {
    /// A description of our own on the pipe, already non-blocking.
    Pipe(OwnedFd),
    Socket(tokio::net::UnixStream),
}

#[cfg(unix)]
fn reactor_stream(fd: BorrowedFd<'_>, access: OFlags, flags: Option<OFlags>, restore: &mut Restore) -> Option<Stream> {
    let stat = rustix::fs::fstat(fd).ok()?;
    // A descriptor open the other way round (stdin write-only, say) is left to std, which
    // reports the error the user needs to see.
    let flags = flags.filter(|f| accessible(*f, access))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Fifo => {
            if let Some(own) = reopen(fd, access, &stat) {
                return Some(Stream::Pipe(own));
            }
            // No /proc (or the reading end is already gone): share the description, and
            // put its flags back at the end.
            let dup = fd.try_clone_to_owned().ok()?;
            restore.0.push((fd.try_clone_to_owned().ok()?, flags));
            rustix::fs::fcntl_setfl(&dup, flags | OFlags::NONBLOCK).ok()?;
            Some(Stream::Pipe(dup))
        }
        FileType::Socket => {
            // Any stream socket reads and writes like a Unix one; only addresses differ,
            // and switchyard never asks for them.
            let dup = fd.try_clone_to_owned().ok()?;
            let std = std::os::unix::net::UnixStream::from(dup);
            restore.0.push((fd.try_clone_to_owned().ok()?, flags));
            std.set_nonblocking(true).ok()?;
            tokio::net::UnixStream::from_std(std).ok().map(Stream::Socket)
        }
        _ => None,
    }
}

#[cfg(unix)]
fn accessible(flags: OFlags, access: OFlags) -> bool {
    if flags.contains(OFlags::RDWR) {
        return true;
    }
    flags.contains(OFlags::WRONLY) == access.contains(OFlags::WRONLY)
}

#[cfg(unix)]
/// A description of this process's own on the pipe at `fd` (stdin or stdout), non-blocking and
/// close-on-exec; None when `fd` is not a pipe or cannot be reopened.
pub fn own_pipe(fd: BorrowedFd<'_>, write: bool) -> Option<OwnedFd> {
    let stat = rustix::fs::fstat(fd).ok()?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Fifo {
        return None;
    }
    reopen(fd, if write { OFlags::WRONLY } else { OFlags::RDONLY }, &stat)
}

#[cfg(unix)]
/// A new open file description on the same pipe, non-blocking from the start.
fn reopen(fd: BorrowedFd<'_>, access: OFlags, stat: &rustix::fs::Stat) -> Option<OwnedFd> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let own = rustix::fs::open(path.as_str(), access | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()).ok()?;
    // The very same pipe, not whatever the path now names.
    let again = rustix::fs::fstat(&own).ok()?;
    (again.st_dev == stat.st_dev && again.st_ino == stat.st_ino).then_some(own)
}

/// Serves the client on stdin/stdout until it closes stdin or `shutdown` fires.
pub async fn serve(router: Arc<Servers>, server: Arc<Server>, shutdown: CancellationToken) {
    let (input, output, restore) = open();
    let reader = BufReader::with_capacity(64 * 1024, input);
    let opening = Opening {
        transport: "stdio",
        sessions: router.sessions.clone(),
        speaks_control: false,
        client_dir: None,
        client_token: None,
    };
    session::serve(server, reader, output, opening, shutdown).await;
    drop(restore);
}
