//! connect's side of the hand-off (see `switchyard_router::handoff`): the offer, the descriptors
//! sent, the wait (writing the lines too long for the router to write unsplit), and the journal
//! read when the router lets go.

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use switchyard_router::control::{self, Reply};
use switchyard_router::handoff::{self, REPLAY_ID, Recovered, Stdio, WriteEnd, journal, lost_answers, response_ids};

use super::Destination;
use super::join::{Joined, join, join_offering, version_note};

/// How long a router that closed the connection may take to be gone before its journal is read
/// all the same.
const GONE_WAIT: Duration = Duration::from_secs(5);

/// How a hand-off came out.
pub(super) enum Outcome {
    /// The session ended: connect is done.
    Ended,
    /// Nothing was handed off: the relay starts, with this first attempt to reach the router.
    Relay(Result<Joined, String>),
    /// The router let go of the session (`why`): the relay carries it on from the journal.
    Recovered { recovered: Recovered, why: String },
}

/// Whether to offer the hand-off: stdin and stdout are pipes or Unix stream sockets (as MCP
/// clients start servers), and `SWITCHYARD_HANDOFF=0` does not turn it off.
pub(super) fn wanted() -> bool {
    std::env::var_os("SWITCHYARD_HANDOFF").is_none_or(|v| v != "0")
        && handoff::kind(std::io::stdin()).is_some()
        && handoff::kind(std::io::stdout()).is_some()
}

/// Offers the router connect's stdin and stdout, and serves as the process its client watches
/// until the session ends. When the router lets go of the session (it died, stopped, or moved it
/// to a new configuration), what it owed is answered from the journal and the session is handed
/// to the router again, set up anew by a replay; the relay carries it on only when that cannot be
/// done.
pub(super) async fn hand_off(destination: &Destination, exe: &Path) -> Outcome {
    if client_out().is_none() {
        return Outcome::Relay(join(destination, exe).await);
    }
    // After a round ends: the session as the relay would carry it on (what was owed answered).
    let mut carried: Option<(Recovered, String)> = None;
    let mut replays = 0u64;
    let mut idle_rounds = 0;
    loop {
        let (prefill, skipping) = match carried.take() {
            None => (Vec::new(), false),
            Some((r, why)) => match prefill(&r, &mut replays) {
                Some(first) => {
                    carried = Some((r, why));
                    first
                }
                None => return Outcome::Recovered { recovered: r, why },
            },
        };
        let (handed, joined) = match (offer(destination, exe, &prefill, skipping).await, carried) {
            (Offer::Taken(handed, joined), _) => (handed, joined),
            (Offer::NotTaken(first), None) => return Outcome::Relay(first),
            (Offer::NotTaken(_), Some((recovered, why))) => return Outcome::Recovered { recovered, why },
        };
        let Some((why, recovered, delivered)) = serve_handed(destination, handed, joined).await else {
            return Outcome::Ended;
        };
        // Lines connect wrote for the router are answered, whatever the journal had time to say.
        let open: Vec<String> = recovered.open.iter().filter(|id| !delivered.contains(*id)).cloned().collect();
        let owed = lost_answers(&why, &open, &recovered.batches);
        let count = owed.len();
        for line in owed {
            if !to_client(line.as_bytes()).await {
                return Outcome::Ended;
            }
        }
        idle_rounds = if recovered.lines == 0 { idle_rounds + 1 } else { 0 };
        switchyard_core::logging::say(&format!(
            "switchyard connect: {why}; {count} answer(s) owed were given as errors; handing the session to the router again"
        ));
        let rest = Recovered {
            memory: recovered.memory,
            pending: recovered.pending,
            skipping: recovered.skipping,
            lines: recovered.lines,
            ..Recovered::default()
        };
        // A router that lets go again and again before taking anything up: relay instead.
        if idle_rounds >= 3 {
            return Outcome::Recovered { recovered: rest, why };
        }
        carried = Some((rest, why));
    }
}

/// The bytes a new router reads first: the session's set-up replayed, then what the last router
/// had not taken up; and whether the rest of a line it was skipping as too long follows them in
/// the client's input (the new router drops it). None when that cannot be put in a journal (the
/// relay then carries it).
fn prefill(r: &Recovered, replays: &mut u64) -> Option<(Vec<u8>, bool)> {
    let (pending, skipping) = r.unread();
    let mut bytes: Vec<u8> = r
        .memory
        .replay(|_| {
            *replays += 1;
            switchyard_core::codec::json_string(&format!("{REPLAY_ID}{replays}"))
        })
        .concat()
        .into_bytes();
    bytes.extend_from_slice(pending);
    (bytes.len() <= journal::PREFILL_MAX).then_some((bytes, skipping))
}

/// Writes `line` whole to the client (ending it with a newline when it has none), on a writer
/// of connect's own opened for it and closed after: held open, its registration with the
/// reactor would wake connect each time the client reads its output, which costs every call.
/// False when the client is gone.
async fn to_client(line: &[u8]) -> bool {
    let Some(mut out) = client_out() else { return false };
    let newline: &[u8] = if line.ends_with(b"\n") { b"" } else { b"\n" };
    out.write_all(line).await.is_ok() && out.write_all(newline).await.is_ok()
}

/// connect's own writer to the client's output.
fn client_out() -> Option<WriteEnd> {
    WriteEnd::new(handed(std::io::stdout().as_fd(), true)?).ok()
}

/// What connect hands over, and keeps to read the journal from.
struct Handing {
    head: OwnedFd,
    buf: OwnedFd,
}

enum Offer {
    /// The router took the offer and has the descriptors.
    Taken(Handing, Joined),
    /// Nothing was handed over: the first attempt to reach the router, for the relay.
    NotTaken(Result<Joined, String>),
}

/// The descriptor to hand over for `fd` (stdin or stdout): of a pipe, an open description of
/// connect's own; of a socket, the socket.
fn handed(fd: std::os::fd::BorrowedFd<'_>, write: bool) -> Option<OwnedFd> {
    match handoff::kind(fd)? {
        Stdio::Pipe => switchyard_router::downstream::stdio::own_pipe(fd, write),
        Stdio::Socket => fd.try_clone_to_owned().ok(),
    }
}

/// Offers the router the session, with a journal starting with `prefill` (followed by the rest of
/// a skipped line when `skipping`), and sends the descriptors once it takes the offer.
async fn offer(destination: &Destination, exe: &Path, prefill: &[u8], skipping: bool) -> Offer {
    let input = handed(std::io::stdin().as_fd(), false);
    let output = handed(std::io::stdout().as_fd(), true);
    let (Some(input), Some(output), Ok((head, buf))) = (input, output, journal::create(prefill, skipping)) else {
        return Offer::NotTaken(join(destination, exe).await);
    };
    let joined = match join_offering(destination, exe, true).await {
        Ok(j) if j.handoff => j,
        other => return Offer::NotTaken(other),
    };
    let sock: &tokio::net::UnixStream = joined.writer.as_ref();
    if let Err(e) = handoff::send_fds(sock.as_fd(), [input.as_fd(), output.as_fd(), head.as_fd(), buf.as_fd()]) {
        switchyard_core::logging::say(&format!(
            "switchyard connect: could not hand the session to the router at {} ({e}); relaying it",
            destination.socket.display()
        ));
        drop(joined);
        return Offer::NotTaken(join(destination, exe).await);
    }
    // The router holds them now; connect's own stdin and stdout stay open, unread.
    Offer::Taken(Handing { head, buf }, joined)
}

/// Waits on the router while it serves the session, writing the long lines it sends. When it let
/// go of the session: why, its journal, and the responses connect wrote for it; None when the
/// session ended.
async fn serve_handed(
    destination: &Destination,
    handing: Handing,
    joined: Joined,
) -> Option<(String, Recovered, HashSet<String>)> {
    let Joined { mut reader, mut writer, version, pid, .. } = joined;
    if let Some(note) = version.and_then(|v| version_note(&destination.socket, &v)) {
        switchyard_core::logging::say(&note);
    }
    let at = destination.socket.display();
    let mut delivered = HashSet::new();
    let (why, gone) = loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) => {
                break (
                    format!("the router at {at} (pid {pid}) closed the connection (it stopped or was killed)"),
                    true,
                );
            }
            Err(e) => break (format!("the connection to the router at {at} failed: {e}"), true),
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") {
            // Cut off by the router's end: never written, so still owed (from the journal).
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        if !control::is_control(&text) {
            // A line too long for the router to write unsplit: connect writes it, then says so.
            if !to_client(&line).await {
                return None;
            }
            delivered.extend(response_ids(&line));
            // A router gone meanwhile is seen at the next read.
            let _ = writer.write_all(b".").await;
            continue;
        }
        match control::reply(&text) {
            Ok(Reply::Ended { reason }) => {
                if let Some(reason) = reason {
                    switchyard_core::logging::say(&format!("switchyard connect: {reason}"));
                }
                return None;
            }
            Ok(Reply::Handback { reason }) => {
                break (format!("the router at {at} handed the session back: {reason}"), false);
            }
            Ok(other) => switchyard_core::logging::say(&format!(
                "switchyard connect: ignored a control line from the router: {other:?}"
            )),
            Err(e) => switchyard_core::logging::say(&format!("switchyard connect: {e}")),
        }
    };
    // Kept open until now: its end tells the router connect is gone.
    drop(writer);
    if gone {
        // A router that is stopping closes its sockets a moment before its last store.
        wait_gone(pid).await;
    }
    let recovered = handoff::recover(&handing.head, &handing.buf).unwrap_or_else(|e| {
        switchyard_core::logging::say(&format!(
            "switchyard connect: the journal of the session the router let go of cannot be read ({e}); carrying on without it"
        ));
        Recovered::default()
    });
    Some((why, recovered, delivered))
}

/// Waits (bounded) until process `pid` has exited.
async fn wait_gone(pid: u32) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else { return };
    let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) else { return };
    // A pidfd turns readable when its process exits.
    let wait = Timespec { tv_sec: GONE_WAIT.as_secs() as i64, tv_nsec: 0 };
    let _ = tokio::task::spawn_blocking(move || {
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        poll(&mut fds, Some(&wait))
    })
    .await;
}
