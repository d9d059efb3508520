//! The hand-off: `connect` gives the router its client's stdin and stdout, so that the router
//! reads and writes the client's pipes itself and `connect` stays out of the message path.
//!
//! Relayed, every message crosses one more process (client -> connect -> router and back): two
//! more wake-ups and four more system calls per call. Handed off, a session through `connect`
//! costs what one through `switchyard run` costs.
//!
//! How it goes: the hello offers the hand-off (`Hello::Connect { handoff: true }`) when connect's
//! stdin and stdout are pipes or Unix stream sockets; a router that takes it says so in its
//! welcome, and connect sends, with one byte over the socket (`SCM_RIGHTS`), four descriptors:
//! the client's two (a pipe as an open description of connect's own), and two memfds that make
//! the journal ([`journal`]). From then on connect only waits on the socket, and the router
//! serves the session on the client's descriptors ([`serve`]).
//!
//! The router writes to the client in writes of at most 4 KiB, which the kernel never splits, so
//! the client's output never stops in the middle of a line, whatever happens to the router. A
//! longer line goes through connect, which writes it whole and says `.`; the router writes on
//! once it did.
//!
//! What each side promises:
//! - connect dies (SIGTERM, kill -9): the router sees the socket close and lets go of the pipes
//!   at once, so the client sees its output close as it would have; the server goes on.
//! - The client closes its input, or stops reading: the session ends as any session does, the
//!   router says [`Reply::Ended`](crate::control::Reply::Ended) and connect exits.
//! - The router must let go of a live session (its server's configuration changed, or it is
//!   stopping): at a moment when no request is in flight it stops reading and says
//!   [`Reply::Handback`](crate::control::Reply::Handback); connect reads the journal and carries
//!   the session on itself (relayed, with its set-up replayed to the router as now configured).
//! - The router dies: the socket closes without a word; connect reads the journal, which holds
//!   what the router had read and not yet taken up, the requests it had taken up and not yet
//!   answered, whether it was in the middle of writing a line, and the session's set-up. Each
//!   request taken up gets an error (it may have run; it is never sent again), what was not taken
//!   up is sent on, and the session is set up again on a new router.
//!
//! The journal is written with plain stores into shared memory, never a system call, so it costs
//! the message path next to nothing; it is read only once the router has let go.

pub mod journal;
pub mod serve;

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tokio::io::AsyncWriteExt;

use serde::{Deserialize, Serialize};
use switchyard_core::codec::{self, Kind};

pub use journal::{Recovered, recover};

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

/// What a client set up in its session, for replay on a new connection.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// The client's `initialize` request, as sent.
    pub initialize: Option<String>,
    pub initialized: bool,
    /// The params of the latest `logging/setLevel`.
    pub level: Option<String>,
    /// Subscribed resource URIs, in order.
    pub subscribed: Vec<String>,
    /// The lists the client asked for (`tools/list`, `prompts/list`,
    /// `resources/templates/list`), first asked first: a policy may show a client a tool under
    /// another name, and the router learns which from the list it showed, so a new router is
    /// shown the lists again before the client's next call under such a name.
    pub listed: Vec<String>,
}

/// The list methods whose answers may rename what a client calls (see [`Memory::listed`]).
const LISTS: [&str; 3] = ["tools/list", "prompts/list", "resources/templates/list"];

impl Memory {
    /// Takes note of one message (not a batch) of the client's. True when something changed.
    pub fn note(&mut self, message: &str, env: &codec::Envelope) -> bool {
        let params = env.params.as_ref();
        match (env.kind, env.method.as_deref()) {
            (Kind::Request, Some("initialize")) => self.initialize = Some(message.to_string()),
            (Kind::Notification, Some("notifications/initialized")) if !self.initialized => self.initialized = true,
            (Kind::Request, Some("logging/setLevel")) => self.level = params.map(|p| message[p.clone()].to_string()),
            (Kind::Request, Some(m)) if LISTS.contains(&m) => {
                if self.listed.iter().any(|l| l == m) {
                    return false;
                }
                self.listed.push(m.to_string());
            }
            (Kind::Request, Some(m @ ("resources/subscribe" | "resources/unsubscribe"))) => {
                let Some(uri) = params.and_then(|p| codec::param_fields(message, p).uri) else { return false };
                self.subscribed.retain(|u| *u != uri);
                if m == "resources/subscribe" {
                    self.subscribed.push(uri);
                }
            }
            _ => return false,
        }
        true
    }

    /// Whether a line may hold something [`Memory::note`] keeps: a cheap test before a parse.
    pub fn may_note(line: &str) -> bool {
        ["initialize", "logging/setLevel", "resources/", "tools/list", "prompts/list"].iter().any(|m| line.contains(m))
    }
}

/// The id prefix of the requests `connect` makes itself when it replays a session: their answers
/// are `connect`'s, never the client's.
pub const REPLAY_ID: &str = "switchyard-replay-";

/// Whether a raw JSON id is one of a replay's.
pub fn is_replay_id(raw: &str) -> bool {
    raw.strip_prefix('"').is_some_and(|r| r.starts_with(REPLAY_ID))
}

impl Memory {
    /// The lines, each with its newline, that set the client's session up again on a new
    /// router. `own(method)` gives each request of the replay its raw id (of [`REPLAY_ID`]).
    pub fn replay(&self, mut own: impl FnMut(&str) -> String) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(init) = &self.initialize
            && let Ok(env) = codec::parse(init)
            && let Some(span) = env.id
        {
            let id = own("initialize");
            lines.push(codec::splice(init, span, &id));
        }
        if self.initialized {
            lines.push(codec::notification("notifications/initialized", "{}"));
        }
        if let Some(params) = &self.level {
            let id = own("logging/setLevel");
            lines.push(codec::request(&id, "logging/setLevel", params));
        }
        for uri in &self.subscribed {
            let id = own("resources/subscribe");
            let params = format!(r#"{{"uri":{}}}"#, codec::json_string(uri));
            lines.push(codec::request(&id, "resources/subscribe", &params));
        }
        // Its first page: where a later page renamed something, the client's next list of it
        // teaches the router the rest.
        for method in &self.listed {
            let id = own(method);
            lines.push(codec::request(&id, method, "{}"));
        }
        for line in &mut lines {
            line.push('\n');
        }
        lines
    }
}

/// The answers owed for requests a router took up and can no longer answer (`open`, of which
/// `batches` came in batches, each answered as one array, as the router would have): an error
/// saying `why` and that the call may have run. Replayed requests are `connect`'s, and skipped.
pub fn lost_answers(why: &str, open: &[String], batches: &[Vec<String>]) -> Vec<String> {
    let msg = format!("{why}; this call's outcome is unknown");
    let error = |id: &str| codec::response_error(id, codec::INTERNAL_ERROR, &msg, None);
    let mut single: std::collections::BTreeSet<&str> =
        open.iter().map(String::as_str).filter(|id| !is_replay_id(id)).collect();
    let mut lines = Vec::new();
    for batch in batches {
        let errors: Vec<String> = batch.iter().filter(|id| single.remove(id.as_str())).map(|id| error(id)).collect();
        if !errors.is_empty() {
            lines.push(format!("[{}]", errors.join(",")));
        }
    }
    lines.extend(single.into_iter().map(error));
    lines
}

/// Calls `f` with each message of a line (each element of a batch) that parses.
pub fn for_each_message(text: &str, mut f: impl FnMut(&str, &codec::Envelope)) {
    let text = text.trim();
    let items = if codec::is_batch(text) { codec::split_batch(text).unwrap_or_default() } else { vec![text] };
    for m in items {
        if let Ok(env) = codec::parse(m) {
            f(m, &env);
        }
    }
}

/// Ids (raw JSON) of the requests in one line from the client, and whether it is a batch.
pub fn request_ids(line: &[u8]) -> (Vec<String>, bool) {
    let batch = std::str::from_utf8(line).is_ok_and(|t| codec::is_batch(t.trim()));
    (ids_of(line, Kind::Request), batch)
}

/// Ids (raw JSON) of the responses in one line to the client.
pub fn response_ids(line: &[u8]) -> Vec<String> {
    ids_of(line, Kind::Response)
}

fn ids_of(line: &[u8], kind: Kind) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(text) = std::str::from_utf8(line) {
        for_each_message(text, |m, env| {
            if env.kind == kind
                && let Some(r) = env.id.clone()
            {
                out.push(m[r].to_string());
            }
        });
    }
    out
}

/// The request ids a line of the client's cancels (`notifications/cancelled`).
pub fn cancelled_ids(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !text.contains("notifications/cancelled") {
        return out;
    }
    for_each_message(text, |m, env| {
        if env.method.as_deref() == Some("notifications/cancelled")
            && let Some(span) = env.params.as_ref().and_then(|p| codec::param_fields(m, p).request_id)
        {
            out.push(m[span].to_string());
        }
    });
    out
}

#[cfg(test)]
mod tests;
