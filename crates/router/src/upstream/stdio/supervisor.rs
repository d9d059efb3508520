//! The per-instance supervisor (`switchyard supervise ROUTER_PID -- CMD [ARGS...]`, hidden): makes
//! a server's whole process group die with the router, even when the router is killed outright.
//!
//! The kernel's parent-death signal reaches a direct child only, so a server started through a
//! launcher (`npx`, `sh -c`) outlived a router killed with SIGKILL. Each instance is therefore
//! started through this small process. It leads the instance's process group and runs the server
//! in that group with the router's pipes as its stdio (inherited: no copying, no hop on the data
//! path). It watches the router through a pidfd (the process, not the thread that forked, unlike
//! PR_SET_PDEATHSIG) and, when the router is gone, kills the whole group, itself included. It
//! exits with the server's status, so the router sees the server's own exit.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;

use rustix::process::{Pid, PidfdFlags, Signal};

/// How often the router is checked for when the kernel has no pidfd (before Linux 5.3).
const PARENT_POLL: Duration = Duration::from_millis(200);

/// Runs `command` under supervision and exits as it did. Never returns.
#[allow(unsafe_code)]
pub fn run(router: i32, command: &[String]) -> ! {
    let Some((program, args)) = command.split_first() else {
        fail(2, "switchyard supervise: no command given");
    };
    // The group killed when the router goes must be ours alone: lead a fresh one unless the
    // router already made us the leader.
    if rustix::process::getpgrp() != rustix::process::getpid() {
        let _ = rustix::process::setpgid(None, None);
    }
    let router = Pid::from_raw(router).unwrap_or_else(|| fail(2, "switchyard supervise: bad router pid"));
    // Opened before the check below, so a router that dies in between is still seen.
    let pidfd = rustix::process::pidfd_open(router, PidfdFlags::empty()).ok();
    if rustix::process::getppid() != Some(router) {
        fail(1, "switchyard supervise: the router exited before the server started");
    }
    let mut child = match Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(e) => fail(
            127,
            &format!(
                "cannot start `{program}`: {e}. Check the command after `--` (or [server] command) and that it is on PATH"
            ),
        ),
    };
    // From here on the group's SIGTERM, SIGINT and SIGHUP are for the server (sent by the
    // router's shutdown, or by a terminal): the supervisor stays until the server has gone.
    // Set after the spawn, so the server keeps the default dispositions.
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: SIG_IGN installs no handler code; signal(2) has no memory-safety preconditions.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    std::thread::spawn(move || {
        watch(router, pidfd);
        // The router is gone: everything it started through us goes too.
        let _ = rustix::process::kill_process_group(rustix::process::getpgrp(), Signal::KILL);
    });
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => fail(1, &format!("switchyard supervise: waiting for `{program}` failed: {e}")),
    };
    if let Some(sig) = status.signal() {
        // Die the way the server died, so the router reports "killed by signal N".
        // SAFETY: restores the default disposition; no handler code is involved.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        if let Some(sig) = Signal::from_named_raw(sig) {
            let _ = rustix::process::kill_process(rustix::process::getpid(), sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(status.code().unwrap_or(1))
}

/// Returns once the router has exited.
fn watch(router: Pid, pidfd: Option<std::os::fd::OwnedFd>) {
    use rustix::event::{PollFd, PollFlags, poll};
    if let Some(fd) = pidfd {
        loop {
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            match poll(&mut fds, None) {
                Ok(_) if !fds[0].revents().is_empty() => return,
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                // Cannot watch the pidfd: fall back to polling the parent.
                Err(_) => break,
            }
        }
    }
    while rustix::process::getppid() == Some(router) {
        std::thread::sleep(PARENT_POLL);
    }
}

fn fail(code: i32, message: &str) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{message}");
    std::process::exit(code)
}
