//! The daemon's local endpoint, which `connect`, `status` and `stop` reach it by.
//!
//! - Linux and macOS: a Unix socket in the private runtime directory (see [`crate::dirs`]), made
//!   0600; the router also checks each peer's uid. macOS allows socket paths of 103 bytes,
//!   Linux 107: a longer one is named by a hash of the config alone.
//! - Windows: a named pipe, `\\.\pipe\switchyard-<user SID>-<config key>`, created with a DACL
//!   that admits this user alone, refusing remote clients, and only as the first instance of
//!   its name (a pipe someone else made first is never served on). A client checks that the
//!   process serving the pipe runs as its own user before it says a word.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

/// The longest path a Unix socket may have here (`sun_path` less its NUL).
pub const SOCKET_PATH_MAX: usize = if cfg!(target_os = "linux") { 107 } else { 103 };

/// The endpoint of the daemon whose config key is `key`, its files in `runtime`. `short` is a
/// shorter key for a runtime directory whose path would make the socket's too long.
pub fn path_for(runtime: &std::path::Path, key: &str, short: &str) -> std::path::PathBuf {
    #[cfg(windows)]
    {
        let _ = (runtime, short);
        pipe_path(key)
    }
    #[cfg(not(windows))]
    {
        let full = runtime.join(format!("{key}.sock"));
        if full.as_os_str().len() <= SOCKET_PATH_MAX { full } else { runtime.join(format!("{short}.sock")) }
    }
}

#[cfg(test)]
mod tests;
