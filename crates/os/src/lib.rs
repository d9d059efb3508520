//! What differs by operating system, in one place, so the router above reads the same on Linux,
//! macOS and Windows: random bytes, the running executable, a server's process tree and its
//! death with the router, the daemon's local endpoint (a Unix socket, or a named pipe), the
//! per-user directories, private files and locks, shutdown requests, and how a command is
//! found on PATH.
//!
//! Each module documents what it does on each OS. Linux and macOS share the Unix code except
//! where noted (the parent watch, the process listing); Windows has its own.

pub mod dirs;
pub mod endpoint;
pub mod exe;
pub mod fs;
pub mod launch;
pub mod process;
pub mod random;
pub mod shutdown;

#[cfg(windows)]
mod win;
