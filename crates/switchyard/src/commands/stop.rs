//! `switchyard stop`: asks a running daemon to stop and waits until its process is gone.

use std::time::Duration;

use anyhow::bail;

use switchyard_router::control::{Hello, Reply};

use crate::commands::daemon::{Which, ask_daemon, locate, not_running};

/// How long `switchyard stop` waits for the daemon to exit.
const STOP_WAIT: Duration = Duration::from_secs(20);

/// `switchyard stop`: asks the daemon to stop and waits until its process is gone.
pub(crate) fn stop_blocking(which: Which) -> anyhow::Result<()> {
    let (config, socket) = locate(which.config.as_deref(), which.socket.as_deref())?;
    let connected = match ask_daemon(&socket, &Hello::Status) {
        Ok(Reply::Status { status }) => connected_clients(&status),
        _ => 0,
    };
    let pid = match ask_daemon(&socket, &Hello::Stop) {
        Ok(Reply::Stopping { pid }) => pid,
        Ok(other) => bail!("unexpected answer from the daemon on {}: {other:?}", socket.display()),
        Err(e) => {
            switchyard_core::logging::say(&not_running(&config, &socket, &e));
            return Ok(());
        }
    };
    let started = std::time::Instant::now();
    while !exited(pid) {
        if started.elapsed() > STOP_WAIT {
            bail!(
                "the daemon (pid {pid}) was asked to stop {} s ago and is still running; `kill {pid}` ends it (its servers end with it)",
                STOP_WAIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    switchyard_core::logging::say(&format!("stopped the switchyard daemon (pid {pid}) on {}", socket.display()));
    if connected > 0 {
        switchyard_core::logging::say(&format!(
            "note: {connected} client(s) were connected through `switchyard connect`: they start a new daemon within moments, with the environment of one of them (to start it with a new environment, restart those clients too)"
        ));
    }
    Ok(())
}

/// How many sessions of `switchyard connect` clients a status lists (not HTTP ones, which do
/// not start a daemon).
fn connected_clients(status: &serde_json::Value) -> usize {
    let servers = status["servers"].as_array().into_iter().flatten();
    let sessions = servers.flat_map(|s| s["sessions"].as_array().into_iter().flatten());
    sessions.filter(|s| !s["label"].as_str().is_some_and(|l| l.starts_with("http"))).count()
}

/// Whether process `pid` is gone (a zombie counts as gone).
fn exited(pid: u32) -> bool {
    !switchyard_os::process::running(pid)
}
