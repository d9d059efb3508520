//! A server's process tree and how it ends.
//!
//! | what | Linux | macOS | Windows |
//! |---|---|---|---|
//! | the tree | a process group the server leads | the same | a Job Object the server is put in before it runs |
//! | polite stop ([`Stop::Ask`]) | SIGTERM to the group | the same | none exists for a windowless process: the job is ended |
//! | dies with the router | the supervisor watches the router's pidfd, or `PR_SET_PDEATHSIG` | the supervisor watches the router with kqueue `EVFILT_PROC`/`NOTE_EXIT` | the job is `KILL_ON_JOB_CLOSE` and only the router holds it: its handle closes when the router dies, however it dies |
//! | is a process running | `/proc/PID/stat` (a zombie counts as gone) | `kill(pid, 0)` | `GetExitCodeProcess` |
//! | its first child | `/proc/PID/task/PID/children` | `proc_listchildpids` | a ToolHelp process snapshot |

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

/// How to end a process tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Ask it to stop (SIGTERM on Unix; on Windows the same as `Kill`).
    Ask,
    /// End it now (SIGKILL; `TerminateJobObject`).
    Kill,
}

impl Stop {
    /// How the step reads in a log line.
    pub fn describe(self) -> &'static str {
        match (self, cfg!(windows)) {
            (Stop::Ask, false) => "sending SIGTERM",
            (Stop::Kill, false) => "sending SIGKILL",
            (_, true) => "ending its process tree",
        }
    }
}

/// How a process ended, as an error message says it: "exit status 3", "killed by signal 9".
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let (None, Some(sig)) = (status.code(), status.signal()) {
            return format!("killed by signal {sig}");
        }
    }
    match status.code() {
        Some(c) => format!("exit status {c}"),
        None => status.to_string(),
    }
}

#[cfg(test)]
mod tests;
