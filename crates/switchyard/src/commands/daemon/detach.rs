//! `daemon --detach`: starts the daemon as a process of its own, logging to a file, and returns
//! once it accepts connections.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

use switchyard_config::paths;
use switchyard_router::control::{Hello, Reply};

use super::{DaemonArgs, ask_daemon, run_blocking};

/// How long `daemon --detach` waits for the new daemon to accept connections.
const START_WAIT: Duration = Duration::from_secs(30);

/// `daemon --detach`: starts the daemon as a process of its own and returns once it accepts.
pub(super) fn detach(args: &DaemonArgs, config: &Path, socket: &Path) -> anyhow::Result<()> {
    if let Ok(status) = ask_daemon(socket, &Hello::Status) {
        let pid = match status {
            Reply::Status { status } => status["pid"].as_u64().unwrap_or(0),
            _ => 0,
        };
        switchyard_core::logging::say(&format!(
            "a switchyard daemon (pid {pid}) already serves {} on {}",
            config.display(),
            socket.display()
        ));
        return Ok(());
    }
    let log = paths::log_for(config)?;
    let offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let mut cmd = switchyard_os::exe::command();
    switchyard_os::process::detach(&mut cmd);
    cmd.arg("daemon").arg("--config").arg(config).arg("--socket").arg(socket).arg("--detached-child").arg(&log);
    if let Some(p) = &args.plugins {
        cmd.arg("--plugins").arg(std::path::absolute(p)?);
    }
    if let Some(l) = &args.log_level {
        cmd.arg("--log-level").arg(l);
    }
    if let Some(f) = &args.record.record_calls {
        // The daemon runs in `/`: a relative path must mean what it meant here.
        cmd.arg("--record-calls").arg(std::path::absolute(f)?);
    }
    if args.record.record_arguments {
        cmd.arg("--record-arguments");
    }
    match args.http {
        Some(Some(addr)) => {
            cmd.arg(format!("--http={addr}"));
        }
        Some(None) => {
            cmd.arg("--http");
        }
        None => {}
    }
    // Descriptors this process inherited without close-on-exec (a client's pipe passed down to
    // `connect`) must not live on in the daemon for as long as it runs.
    switchyard_os::process::close_inherited_on_exec();
    let log_file = open_log(&log)?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log_file)
        // Not the client's directory: the daemon outlives it (and may outlive the directory). The root:
        // `/`, or on Windows the drive of the temporary directory.
        .current_dir(std::env::temp_dir().ancestors().last().unwrap_or(Path::new("/")));
    let mut child = switchyard_os::process::spawn_detached(&mut cmd).context("cannot start the daemon process")?;
    let stdout = child.stdout.take().expect("piped");
    // The child writes one line when its socket accepts, or nothing (and exits) if it cannot
    // start; the wait is bounded in case it hangs before either.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(START_WAIT) {
        Ok(line) if line.starts_with("ready") => {
            switchyard_core::logging::say(&format!(
                "switchyard daemon started (pid {}) for {} on {}; log: {}",
                child.id(),
                config.display(),
                socket.display(),
                log.display()
            ));
            Ok(())
        }
        Ok(_) => {
            let status = child.wait().map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
            let said = log_since(&log, offset);
            // Its own error says why in one line; the log lines before it stay in the log.
            if let Some(reason) = own_error(&said) {
                bail!("{reason} (the daemon exited, {status}; its log: {})", log.display());
            }
            bail!("the daemon for {} did not start ({status}):\n{said}\n(log: {})", config.display(), log.display())
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            let said = log_since(&log, offset);
            bail!(
                "the daemon for {} did not accept connections within {} s; it was stopped.\n{said}\n(log: {})",
                config.display(),
                START_WAIT.as_secs(),
                log.display()
            )
        }
    }
}

/// The process `--detach` starts: a session of its own (no terminal's hangup reaches it), stdout
/// tells the parent it is ready, and from then on stdout is /dev/null.
pub(super) fn detached_child(args: DaemonArgs, log: &Path) -> anyhow::Result<()> {
    switchyard_os::process::leave_session();
    // Its stderr is the log file too (opened by the parent, for what is written before this).
    switchyard_core::logging::init_file(log, switchyard_core::logging::LOG_FILE_MAX_BYTES)
        .with_context(|| format!("cannot write the daemon's log {}", log.display()))?;
    let config = args.config.clone().context("--detached-child needs --config")?;
    let telemetry = super::start::telemetry(&config);
    crate::commands::run::init_tracing(args.log_level.as_deref(), &telemetry)?;
    let socket = args.socket.clone().context("--detached-child needs --socket")?;
    run_blocking(&args, config, socket, Some(log.to_path_buf()), || {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "ready");
        let _ = out.flush();
        switchyard_os::process::stdout_to_null();
    })
}

/// The daemon's log file, opened for appending (made its user's alone).
fn open_log(path: &Path) -> anyhow::Result<std::fs::File> {
    switchyard_os::fs::private_options()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open the daemon's log {}", path.display()))
}

/// The error the daemon ended with (what follows `switchyard: error: `, on one line), when it
/// wrote one: why it did not start, without the log lines before it.
fn own_error(said: &str) -> Option<String> {
    let (_, reason) = said.rsplit_once("switchyard: error: ")?;
    let reason = reason.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    (!reason.is_empty()).then_some(reason)
}

/// What the log got since `offset` (the last 40 lines of it).
fn log_since(path: &Path, offset: u64) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let new = String::from_utf8_lossy(text.get(offset as usize..).unwrap_or_default()).into_owned();
    // What went wrong, not the start-up's progress lines.
    let lines: Vec<&str> = new.lines().filter(|l| !(l.contains("Z  INFO ") || l.contains("Z DEBUG "))).collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
