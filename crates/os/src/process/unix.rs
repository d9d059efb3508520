//! Process trees on Linux and macOS: process groups and signals.

use std::time::Duration;

use rustix::process::{Pid, Signal};

use super::Stop;

/// A started server's process tree: the process group it leads.
#[derive(Debug)]
pub struct Tree {
    group: Option<Pid>,
}

impl Tree {
    /// Sends `stop` to the whole group. A group that is gone already is not an error.
    pub fn stop(&self, stop: Stop) {
        if let Some(group) = self.group {
            let sig = if stop == Stop::Ask { Signal::TERM } else { Signal::KILL };
            let _ = rustix::process::kill_process_group(group, sig);
        }
    }
}

/// Makes `cmd` start in a process group of its own, so a signal to the group reaches what the
/// server starts (`npx` -> `node`).
pub fn prepare(cmd: &mut tokio::process::Command) {
    cmd.process_group(0);
}

/// The tree of a child started from a command [`prepare`]d. Never fails on Unix.
pub fn adopt(child: &tokio::process::Child) -> std::io::Result<Tree> {
    Ok(Tree { group: child.id().and_then(|p| Pid::from_raw(p as i32)) })
}

/// Makes `cmd`'s process die with this one where the kernel can see to it (Linux:
/// `PR_SET_PDEATHSIG`, which fires when the forking *thread* exits, so spawn from a thread that
/// lives as long as the process). The child checks that this process is still its parent, so a
/// death between fork and the `prctl` is not missed. macOS has no such call: there a supervisor
/// watches the parent ([`wait_for_exit_of_parent`]); this does nothing.
#[allow(unsafe_code)]
pub fn die_with_parent(cmd: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = rustix::process::getpid();
        // SAFETY: prctl and getppid are async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
                if rustix::process::getppid() != Some(parent) {
                    return Err(std::io::Error::other("the router exited while starting the server"));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// How often the parent is checked for where no event tells of its exit.
const PARENT_POLL: Duration = Duration::from_millis(200);

/// A watch on `parent`, opened before the caller checks that `parent` is still its parent, so
/// an exit in between is still seen.
pub struct ParentWatch {
    parent: Pid,
    #[cfg(target_os = "linux")]
    pidfd: Option<std::os::fd::OwnedFd>,
    #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
    kqueue: Option<std::os::fd::OwnedFd>,
}

impl ParentWatch {
    /// Starts watching process `parent`; None for a pid that cannot be one.
    pub fn open(parent: u32) -> Option<ParentWatch> {
        let parent = Pid::from_raw(i32::try_from(parent).ok()?)?;
        Some(ParentWatch {
            parent,
            #[cfg(target_os = "linux")]
            pidfd: rustix::process::pidfd_open(parent, rustix::process::PidfdFlags::empty()).ok(),
            #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
            kqueue: kqueue_exit(parent),
        })
    }

    /// Whether `parent` is this process's parent now.
    pub fn is_parent(&self) -> bool {
        rustix::process::getppid() == Some(self.parent)
    }

    /// Blocks until the parent has exited.
    pub fn wait(self) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.pidfd {
            use rustix::event::{PollFd, PollFlags, poll};
            loop {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                match poll(&mut fds, None) {
                    Ok(_) if !fds[0].revents().is_empty() => return,
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    // Cannot watch the pidfd: fall back to polling the parent.
                    Err(_) => break,
                }
            }
        }
        #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
        if let Some(kq) = &self.kqueue {
            loop {
                let mut events = Vec::with_capacity(1);
                let receive = rustix::buffer::spare_capacity(&mut events);
                // SAFETY: no changes are submitted, only events received into `events`.
                #[allow(unsafe_code)]
                match unsafe { rustix::event::kqueue::kevent(kq, &[], receive, None) } {
                    Ok(n) if n > 0 => return,
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(_) => break,
                }
            }
        }
        while self.is_parent() {
            std::thread::sleep(PARENT_POLL);
        }
    }
}

/// A kqueue that reports `pid`'s exit (NOTE_EXIT on EVFILT_PROC).
#[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
#[allow(unsafe_code)]
fn kqueue_exit(pid: Pid) -> Option<std::os::fd::OwnedFd> {
    use rustix::event::kqueue::{Event, EventFilter, EventFlags, ProcessEvents, kevent, kqueue};
    let kq = kqueue().ok()?;
    let change = Event::new(
        EventFilter::Proc { pid, flags: ProcessEvents::EXIT },
        EventFlags::ADD | EventFlags::ONESHOT,
        std::ptr::null_mut(),
    );
    let mut none: Vec<Event> = Vec::new();
    // SAFETY: the event carries no user data pointer that is ever dereferenced.
    unsafe { kevent(&kq, &[change], rustix::buffer::spare_capacity(&mut none), Some(Duration::ZERO)) }.ok()?;
    Some(kq)
}

/// Kills the process group this process leads (the supervisor's last act).
pub fn kill_own_group() {
    let _ = rustix::process::kill_process_group(rustix::process::getpgrp(), Signal::KILL);
}

/// Makes this process lead a process group of its own unless it already does.
pub fn lead_own_group() {
    if rustix::process::getpgrp() != rustix::process::getpid() {
        let _ = rustix::process::setpgid(None, None);
    }
}

/// Whether process `pid` is running (a zombie counts as gone).
pub fn running(pid: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().map(|rest| !rest.trim_start().starts_with('Z')))
            .unwrap_or(false)
    }
    #[cfg(not(target_os = "linux"))]
    {
        match i32::try_from(pid).ok().and_then(Pid::from_raw) {
            Some(p) => !matches!(rustix::process::test_kill_process(p), Err(rustix::io::Errno::SRCH)),
            None => false,
        }
    }
}

/// The first child of process `pid`, when it has one.
pub fn first_child(pid: u32) -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }
    #[cfg(target_os = "macos")]
    #[allow(unsafe_code)]
    {
        let mut pids = [0 as libc::pid_t; 16];
        let size = std::mem::size_of_val(&pids) as libc::c_int;
        // SAFETY: the buffer is valid for `size` bytes; the call writes at most that many.
        let n = unsafe { libc::proc_listchildpids(pid as libc::pid_t, pids.as_mut_ptr().cast(), size) };
        (n > 0).then(|| pids[0]).and_then(|p| u32::try_from(p).ok()).filter(|p| *p != 0)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = pid;
        None
    }
}

/// The soft limit on open files, None when unlimited.
pub fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Raises the open-file soft limit to `wanted` (at most the hard limit). The error says why not.
pub fn raise_open_files(wanted: u64) -> std::io::Result<()> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let wanted = limit.maximum.map_or(wanted, |m| m.min(wanted));
    if limit.current.is_some_and(|c| c < wanted) {
        limit.current = Some(wanted);
        setrlimit(Resource::Nofile, limit)?;
    }
    Ok(())
}

/// From now on the group's SIGTERM, SIGINT and SIGHUP are for the server (sent by the router's
/// shutdown, or by a terminal): the supervisor stays until the server has gone.
#[allow(unsafe_code)]
pub fn ignore_stop_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: SIG_IGN installs no handler code; signal(2) has no memory-safety preconditions.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
}

/// Exits the way `status` says a child ended: killed by the same signal (so the router reports
/// "killed by signal N"), or with the same code.
#[allow(unsafe_code)]
pub fn exit_like(status: std::process::ExitStatus) -> ! {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        // SAFETY: restores the default disposition; no handler code is involved.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        if let Some(sig) = Signal::from_named_raw(sig) {
            let _ = rustix::process::kill_process(rustix::process::getpid(), sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(status.code().unwrap_or(1))
}

/// Nothing to set at spawn on Unix: the detached daemon leaves the session itself
/// ([`leave_session`]).
pub fn detach(_cmd: &mut std::process::Command) {}

/// Spawns a command [`detach`]ed.
pub fn spawn_detached(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    cmd.spawn()
}

/// Starts a session of this process's own, so no terminal's hangup reaches it.
pub fn leave_session() {
    let _ = rustix::process::setsid();
}

/// Points stdout at /dev/null (the detached daemon, once it said it is ready).
pub fn stdout_to_null() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdout(&null);
    }
}

/// Marks every descriptor above stderr close-on-exec, so a client's pipe that `connect`
/// inherited does not live on in a daemon it starts.
#[allow(unsafe_code)]
pub fn close_inherited_on_exec() {
    use std::os::fd::{BorrowedFd, RawFd};
    let listing = if cfg!(target_os = "linux") { "/proc/self/fd" } else { "/dev/fd" };
    let Ok(dir) = std::fs::read_dir(listing) else { return };
    let fds: Vec<RawFd> =
        dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).filter(|fd| *fd > 2).collect();
    for fd in fds {
        // SAFETY: the descriptor is only borrowed for the fcntl calls below, which change its
        // close-on-exec flag and nothing else; one that was closed meanwhile (the directory
        // listing's own) makes them fail with EBADF, which is ignored.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        if let Ok(flags) = rustix::io::fcntl_getfd(borrowed) {
            let _ = rustix::io::fcntl_setfd(borrowed, flags | rustix::io::FdFlags::CLOEXEC);
        }
    }
}

/// Names this process's main thread `switchyard` where the OS keeps such a name (Linux: a
/// process started through /proc/self/exe would show as `exe` in `top` and `pgrep`).
pub fn name_main_thread() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::set_name(c"switchyard");
}

/// Nothing to do on Unix: every child's stdin, stdout and stderr are replaced at spawn, and
/// other descriptors are close-on-exec.
pub fn keep_std_handles_from_children() {}

/// Whether every writer of this process's stdin has closed it (a pipe's POLLHUP), without
/// waiting: for the supervisor, the router closed the server's input or died.
pub fn stdin_hung_up() -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
    let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
    poll(&mut fds, Some(&zero)).is_ok() && fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR)
}
