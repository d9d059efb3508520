//! connect's side of the hand-off (see `switchyard_router::handoff`): the offer, the descriptors
//! sent, the wait, and the journal read when the router lets go.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use switchyard_router::control::{self, Reply};
use switchyard_router::handoff::{self, Recovered, journal};

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
/// session ends or comes back.
pub(super) async fn hand_off(destination: &Destination, exe: &Path) -> Outcome {
    use switchyard_router::downstream::stdio::own_pipe;
    let input = own_pipe(std::io::stdin().as_fd(), false);
    let output = own_pipe(std::io::stdout().as_fd(), true);
    let (Some(input), Some(output), Ok((head, buf))) = (input, output, journal::create()) else {
        return Outcome::Relay(join(destination, exe).await);
    };
    let joined = match join_offering(destination, exe, true).await {
        Ok(j) if j.handoff => j,
        other => return Outcome::Relay(other),
    };
    let Joined { mut reader, writer, version, pid, .. } = joined;
    if let Some(note) = version.and_then(|v| version_note(&destination.socket, &v)) {
        switchyard_core::logging::say(&note);
    }
    let at = destination.socket.display();
    let sock: &tokio::net::UnixStream = writer.as_ref();
    if let Err(e) = handoff::send_fds(sock.as_fd(), [input.as_fd(), output.as_fd(), head.as_fd(), buf.as_fd()]) {
        switchyard_core::logging::say(&format!(
            "switchyard connect: could not hand the session to the router at {at} ({e}); relaying it"
        ));
        drop((reader, writer));
        return Outcome::Relay(join(destination, exe).await);
    }
    // The router holds them now; connect's own stdin and stdout stay open, unread.
    drop((input, output));
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
            Ok(Reply::Ended) => return Outcome::Ended,
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
    match handoff::recover(&head, &buf) {
        Ok(recovered) => Outcome::Recovered { recovered, why },
        Err(e) => {
            switchyard_core::logging::say(&format!(
                "switchyard connect: the journal of the session the router let go of cannot be read ({e}); carrying on without it"
            ));
            Outcome::Recovered { recovered: Recovered::default(), why }
        }
    }
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
