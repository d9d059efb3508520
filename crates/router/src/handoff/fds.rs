//! The descriptors of a hand-off (Linux): sent and received with `SCM_RIGHTS`, and what kind
//! of stream each is.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tokio::io::AsyncWriteExt;

/// The descriptors sent with a hand-off, in this order.
pub const FDS: usize = 4;

/// The four descriptors of a hand-off.
pub struct Handed {
    /// The read end of the client's input pipe (an open description of connect's own).
    pub input: OwnedFd,
    /// The write end of the client's output pipe (likewise).
    pub output: OwnedFd,
    /// The journal's fixed part (a memfd of [`journal::HEAD_LEN`] bytes).
    pub head: OwnedFd,
    /// The journal's input buffer (an empty memfd the router sizes).
    pub input_buf: OwnedFd,
}

/// Sends the four descriptors of a hand-off, with one byte, over a Unix socket.
pub fn send_fds(socket: BorrowedFd<'_>, fds: [BorrowedFd<'_>; FDS]) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("the descriptors do not fit the control message"));
    }
    loop {
        match sendmsg(socket, &[IoSlice::new(b"H")], &mut control, SendFlags::NOSIGNAL) {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(std::io::Error::other("the hand-off byte was not sent")),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives the descriptors [`send_fds`] sent, close-on-exec (a server the router starts never
/// inherits a client's pipe). `WouldBlock` when nothing has arrived yet.
pub fn recv_fds(socket: BorrowedFd<'_>) -> std::io::Result<Handed> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = recvmsg(
        socket,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if got.bytes == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connect closed the socket"));
    }
    if byte[0] != b'H' || fds.len() != FDS || got.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
        return Err(std::io::Error::other(format!(
            "expected the hand-off byte with {FDS} descriptors, got {:?} with {}",
            byte[0] as char,
            fds.len()
        )));
    }
    let mut fds = fds.into_iter();
    let mut next = || fds.next().expect("counted above");
    Ok(Handed { input: next(), output: next(), head: next(), input_buf: next() })
}

/// What a descriptor handed off may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdio {
    /// A pipe (a FIFO), as most programs start a server.
    Pipe,
    /// A Unix stream socket, as Node's `child_process` (libuv) starts one.
    Socket,
}

/// Whether `fd` can be handed off, and as what. A terminal, a file or any other socket stays
/// with connect, which relays it.
pub fn kind(fd: impl AsFd) -> Option<Stdio> {
    use rustix::fs::FileType;
    let stat = rustix::fs::fstat(&fd).ok()?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Fifo => Some(Stdio::Pipe),
        FileType::Socket => {
            let unix = rustix::net::sockopt::socket_domain(&fd).ok()? == rustix::net::AddressFamily::UNIX;
            let stream = rustix::net::sockopt::socket_type(&fd).ok()? == rustix::net::SocketType::STREAM;
            (unix && stream).then_some(Stdio::Socket)
        }
        _ => None,
    }
}

/// The client's output, a pipe or a Unix stream socket, as the router writes to it (and
/// `connect`, for the lines the router sends it). A write of at most 4 KiB to either is never
/// split: on a pipe by POSIX (PIPE_BUF), on a Unix stream socket because it is one buffer of the
/// kernel's, taken whole or not at all.
pub enum WriteEnd {
    Pipe(tokio::net::unix::pipe::Sender),
    Socket(tokio::net::UnixStream),
}

impl WriteEnd {
    pub fn new(fd: OwnedFd) -> std::io::Result<WriteEnd> {
        match kind(&fd) {
            Some(Stdio::Pipe) => Ok(WriteEnd::Pipe(tokio::net::unix::pipe::Sender::from_owned_fd(fd)?)),
            Some(Stdio::Socket) => Ok(WriteEnd::Socket(unix_stream(fd)?)),
            None => Err(std::io::Error::other("the client's stdout is neither a pipe nor a Unix stream socket")),
        }
    }

    /// One write (at most 4 KiB is never split).
    pub async fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            WriteEnd::Pipe(p) => p.write(bytes).await,
            WriteEnd::Socket(s) => s.write(bytes).await,
        }
    }

    /// All of `bytes`, in as many writes as it takes.
    pub async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            WriteEnd::Pipe(p) => p.write_all(bytes).await,
            WriteEnd::Socket(s) => s.write_all(bytes).await,
        }
    }
}

/// A Unix stream socket for the reactor.
pub(crate) fn unix_stream(fd: OwnedFd) -> std::io::Result<tokio::net::UnixStream> {
    let std = std::os::unix::net::UnixStream::from(fd);
    std.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(std)
}
