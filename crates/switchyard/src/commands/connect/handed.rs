//! connect's side of the hand-off (see `switchyard_router::handoff`): the offer, the descriptors
//! sent, the wait, and the journal read when the router lets go.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use switchyard_router::control::{self, Reply};
use switchyard_router::handoff::{self, REPLAY_ID, Recovered, journal, lost_answers};

use super::Destination;
use super::join::{Joined, join, join_offering, version_note};

/// How long a router that closed the connection may take to be gone before its journal is read
/// all the same.
const GONE_WAIT: Duration = Duration::from_secs(5);

/// How a hand-off came out.
pub(super) enum Outcome {
    /// The client's side ended the session: connect is done.
    Ended,
    /// Nothing was handed off: the relay starts, with this first attempt to reach the router.
    Relay(Result<Joined, String>),
    /// The router let go of the session (`why`): the relay carries it on from the journal.
    Recovered { recovered: Recovered, why: String },
}

/// Whether to offer the hand-off: stdin and stdout are both pipes (as MCP clients start
/// servers), and `SWITCHYARD_HANDOFF=0` does not turn it off.
pub(super) fn wanted() -> bool {
    std::env::var_os("SWITCHYARD_HANDOFF").is_none_or(|v| v != "0")
        && handoff::is_pipe(std::io::stdin())
        && handoff::is_pipe(std::io::stdout())
}

/// Offers the router connect's pipes, and serves as the process its client watches until the
/// session ends. When the router lets go of the session (it died, stopped, or moved it to a new
/// configuration), what it owed is answered from the journal and the session is handed to the
/// router again, set up anew by a replay; the relay carries it on only when that cannot be done.
pub(super) async fn hand_off(destination: &Destination, exe: &Path) -> Outcome {
    // After a round ends: the session as the relay would carry it on (what was owed answered).
    let mut carried: Option<(Recovered, String)> = None;
    let mut replays = 0u64;
    let mut idle_rounds = 0;
    loop {
        let prefill = match carried.take() {
            None => Vec::new(),
            Some((r, why)) => match prefill(&r, &mut replays) {
                Some(bytes) => {
                    carried = Some((r, why));
                    bytes
                }
                None => return Outcome::Recovered { recovered: r, why },
            },
        };
        let (handed, joined) = match (offer(destination, exe, &prefill).await, carried) {
            (Offer::Taken(handed, joined), _) => (handed, joined),
            (Offer::NotTaken(first), None) => return Outcome::Relay(first),
            (Offer::NotTaken(_), Some((recovered, why))) => return Outcome::Recovered { recovered, why },
        };
        let Some((why, recovered)) = serve_handed(destination, handed, joined).await else {
            return Outcome::Ended;
        };
        if recovered.mid_line {
            // The router stopped in the middle of a line: it is ended, so the next is whole.
            to_client(b"\n".to_vec()).await;
        }
        let owed = lost_answers(&why, &recovered.open, &recovered.batches);
        let count = owed.len();
        for line in owed {
            to_client(format!("{line}\n").into_bytes()).await;
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
/// had not taken up. None when that cannot be put in a journal (the relay then carries it).
fn prefill(r: &Recovered, replays: &mut u64) -> Option<Vec<u8>> {
    let pending = match (r.skipping, r.pending.iter().position(|&b| b == b'\n')) {
        (false, _) => &r.pending[..],
        // The rest of a line the router was skipping as too long is dropped, as it would have.
        (true, Some(nl)) => &r.pending[nl + 1..],
        (true, None) => return None,
    };
    let mut bytes: Vec<u8> = r
        .memory
        .replay(|_| {
            *replays += 1;
            switchyard_core::codec::json_string(&format!("{REPLAY_ID}{replays}"))
        })
        .concat()
        .into_bytes();
    bytes.extend_from_slice(pending);
    (bytes.len() <= journal::PREFILL_MAX).then_some(bytes)
}

/// Writes to the client's output (connect's own stdout), off the runtime.
async fn to_client(bytes: Vec<u8>) {
    let _ = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&bytes);
        let _ = out.flush();
    })
    .await;
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

/// Offers the router the session, with a journal starting with `prefill`, and sends the
/// descriptors once it takes the offer.
async fn offer(destination: &Destination, exe: &Path, prefill: &[u8]) -> Offer {
    use switchyard_router::downstream::stdio::own_pipe;
    let input = own_pipe(std::io::stdin().as_fd(), false);
    let output = own_pipe(std::io::stdout().as_fd(), true);
    let (Some(input), Some(output), Ok((head, buf))) = (input, output, journal::create(prefill)) else {
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
    // The router holds the pipes now; connect's own stdin and stdout stay open, unread.
    Offer::Taken(Handing { head, buf }, joined)
}

/// Waits on the router while it serves the session. When it let go of the session: why, and its
/// journal; None when the client's side ended the session.
async fn serve_handed(destination: &Destination, handing: Handing, joined: Joined) -> Option<(String, Recovered)> {
    let Joined { mut reader, writer, version, pid, .. } = joined;
    if let Some(note) = version.and_then(|v| version_note(&destination.socket, &v)) {
        switchyard_core::logging::say(&note);
    }
    let at = destination.socket.display();
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
        match control::reply(&String::from_utf8_lossy(&line)) {
            Ok(Reply::Ended) => return None,
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
    Some((why, recovered))
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
