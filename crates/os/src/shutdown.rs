//! A request to stop from outside the process.
//!
//! - Unix: SIGTERM, SIGINT or SIGHUP.
//! - Windows: Ctrl+C, Ctrl+Break, the console closing, log-off or system shutdown. A client
//!   that ends `run` or `connect` without a console closes its stdin, which ends them as well.

/// Resolves with the name of the first stop request received; never resolves when none can be
/// watched (the error is logged once, and closing stdin still stops the process).
pub async fn requested() -> &'static str {
    match watch().await {
        Ok(name) => name,
        Err(e) => {
            tracing_free_log(&format!("cannot watch for stop requests ({e}); stop switchyard by closing its stdin"));
            std::future::pending().await
        }
    }
}

fn tracing_free_log(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "switchyard: {message}");
}

#[cfg(unix)]
async fn watch() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        _ = hup.recv() => "SIGHUP",
    })
}

#[cfg(windows)]
async fn watch() -> std::io::Result<&'static str> {
    use tokio::signal::windows;
    let mut c = windows::ctrl_c()?;
    let mut brk = windows::ctrl_break()?;
    let mut close = windows::ctrl_close()?;
    let mut logoff = windows::ctrl_logoff()?;
    let mut shutdown = windows::ctrl_shutdown()?;
    Ok(tokio::select! {
        _ = c.recv() => "Ctrl+C",
        _ = brk.recv() => "Ctrl+Break",
        _ = close.recv() => "the console closing",
        _ = logoff.recv() => "log-off",
        _ = shutdown.recv() => "system shutdown",
    })
}

#[cfg(all(test, unix))]
mod tests {
    #[tokio::test]
    async fn sigterm_is_a_stop_request() {
        let waiting = tokio::spawn(super::requested());
        // Let the handlers be installed before the signal is sent.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::TERM).unwrap();
        assert_eq!(waiting.await.unwrap(), "SIGTERM");
    }
}
