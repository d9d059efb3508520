//! The per-instance supervisor (`switchyard supervise ROUTER_PID -- CMD [ARGS...]`, hidden): makes
//! a server's whole process group die with the router, even when the router is killed outright.
//!
//! The kernel's parent-death signal reaches a direct child only, so a server started through a
//! launcher (`npx`, `sh -c`) outlived a router killed with SIGKILL. Each instance is therefore
//! started through this small process. It leads the instance's process group and runs the server
//! in that group with the router's pipes as its stdio (inherited: no copying, no hop on the data
//! path). It watches the router process (a pidfd on Linux: the process, not the thread that
//! forked, unlike PR_SET_PDEATHSIG; kqueue on macOS) and, when the router is gone, kills the whole group, itself included. It
//! exits with the server's status, so the router sees the server's own exit.

use std::process::Command;

use switchyard_os::process::{self as os, ParentWatch};

/// How long a supervisor whose server exited after its input closed waits to see whether the
/// router died too.
const ROUTER_EXIT_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs `command` under supervision and exits as it did. Never returns.
pub fn run(router: i32, command: &[String]) -> ! {
    let Some((program, args)) = command.split_first() else {
        fail(2, "switchyard supervise: no command given");
    };
    // The group killed when the router goes must be ours alone: lead a fresh one unless the
    // router already made us the leader.
    os::lead_own_group();
    // Opened before the check below, so a router that dies in between is still seen.
    let watch = u32::try_from(router)
        .ok()
        .and_then(ParentWatch::open)
        .unwrap_or_else(|| fail(2, "switchyard supervise: bad router pid"));
    if !watch.is_parent() {
        fail(1, "switchyard supervise: the router exited before the server started");
    }
    let mut child = match Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(e) => {
            fail(127, &format!("cannot start `{program}`: {e}. Check the server's command and that it is on PATH"))
        }
    };
    // Set after the spawn, so the server keeps the default dispositions.
    os::ignore_stop_signals();
    let (router_gone, gone) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        watch.wait();
        let _ = router_gone.send(());
        // The router is gone: everything it started through us goes too.
        os::kill_own_group();
    });
    let status = match child.wait() {
        Ok(s) => s,
        Err(e) => fail(1, &format!("switchyard supervise: waiting for `{program}` failed: {e}")),
    };
    // A server that exits because the router died (its stdin closed as the router's descriptors
    // went) exits a moment before the router's death is seen: leaving now would leave what the
    // server started in its group. So when the router has closed the server's input, its exit
    // is awaited a moment, and if it comes the group goes (this process with it). A server that
    // exits on its own (a crash) finds its input open and is reported at once; a router that
    // lives kills the group itself once it sees the server's exit.
    if os::stdin_hung_up() && gone.recv_timeout(ROUTER_EXIT_GRACE).is_ok() {
        os::kill_own_group();
    }
    os::exit_like(status)
}

fn fail(code: i32, message: &str) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{message}");
    std::process::exit(code)
}
