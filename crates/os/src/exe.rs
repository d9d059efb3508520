//! The running executable, for starting copies of switchyard (the daemon, a server's
//! supervisor): resolved once, at start, so a binary replaced or moved later (an upgrade while
//! the daemon runs) does not change what this process starts.
//!
//! - Linux: `/proc/self/exe`, which names this process's own file even after it was replaced
//!   or deleted, so a daemon keeps starting supervisors of its own version.
//! - macOS and Windows: `std::env::current_exe()` as it was at [`init`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static CURRENT: OnceLock<PathBuf> = OnceLock::new();

/// Resolves the running executable now. `main` calls it first, before anything can move the
/// file; [`current`] resolves it on first use otherwise.
pub fn init() {
    let _ = current();
}

/// The running executable's path as it was at start (`switchyard` when the OS cannot tell).
pub fn current() -> &'static Path {
    CURRENT.get_or_init(|| std::env::current_exe().unwrap_or_else(|_| PathBuf::from("switchyard")))
}

/// What to start a copy of this program from (see the module's note per OS).
pub fn spawnable() -> PathBuf {
    if cfg!(target_os = "linux") { PathBuf::from("/proc/self/exe") } else { current().to_path_buf() }
}

/// What a process switchyard starts from its own binary is called in `ps`: the binary's path,
/// so `pgrep switchyard` finds it (Unix; on Windows a process is always named by its file).
pub fn program_name() -> OsString {
    current().as_os_str().to_os_string()
}

/// A command that runs a copy of this program, named [`program_name`] in process listings.
pub fn command() -> std::process::Command {
    #[allow(unused_mut)]
    let mut cmd = std::process::Command::new(spawnable());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::arg0(&mut cmd, program_name());
    cmd
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_executable_is_this_test_binary_and_a_copy_of_it_starts() {
        super::init();
        let me = super::current();
        assert!(me.is_absolute() && me.is_file(), "{}", me.display());
        let out = super::command().arg("--list").output().expect("start a copy of the test binary");
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("the_executable_is_this_test_binary"));
    }
}
