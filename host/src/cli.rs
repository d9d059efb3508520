//! `switchyard run`: command-line arguments into a config, tracing set-up, signals, the runtime.

use std::path::PathBuf;

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The config file (server command, pools, limits, plugins).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The plugins directory (default: plugins/ beside the config file, else ~/.config/switchyard/plugins).
    #[arg(long, value_name = "DIR")]
    pub plugins: Option<PathBuf>,
    /// The server's name in logs and errors (default: from the command).
    #[arg(long)]
    pub name: Option<String>,
    /// Log level for stderr: error, warn, info, debug, trace (default: RUST_LOG, else info for
    /// switchyard and warn for the libraries it uses).
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Also accept client sessions on this Unix socket (clients join with `switchyard connect`).
    #[arg(long, value_name = "SOCKET")]
    pub listen: Option<PathBuf>,
    /// Serve only the socket given by --listen, not stdin/stdout (a shared daemon).
    #[arg(long, requires = "listen")]
    pub no_stdio: bool,
    /// The server command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The filter without --log-level or RUST_LOG: switchyard's own lines at info, its libraries'
/// (the wasm compiler, the file watcher) only at warn.
const DEFAULT_FILTER: &str = "warn,switchyard=info";

/// The log filter: `--log-level L` sets switchyard's own level and keeps its dependencies (the
/// wasm compiler above all) at warn; RUST_LOG, when given instead, has full control. Also a
/// warning to log once logging is up, when RUST_LOG was set but not understood.
pub fn log_filter(level: Option<&str>) -> anyhow::Result<(tracing_subscriber::EnvFilter, Option<String>)> {
    use tracing_subscriber::EnvFilter;
    match level {
        Some(l) => {
            let l = l.to_ascii_lowercase();
            if !["error", "warn", "info", "debug", "trace", "off"].contains(&l.as_str()) {
                bail!(
                    "--log-level {l}: use one of error, warn, info, debug, trace (or RUST_LOG for per-module levels)"
                );
            }
            Ok((EnvFilter::new(format!("warn,switchyard={l}")), None))
        }
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.trim().is_empty() => match EnvFilter::try_new(&v) {
                Ok(f) => Ok((f, None)),
                Err(e) => Ok((
                    EnvFilter::new(DEFAULT_FILTER),
                    Some(format!("RUST_LOG={v} is not understood ({e}); logging with `{DEFAULT_FILTER}` instead")),
                )),
            },
            Ok(_) => Ok((EnvFilter::new(DEFAULT_FILTER), None)),
            Err(std::env::VarError::NotPresent) => Ok((EnvFilter::new(DEFAULT_FILTER), None)),
            Err(std::env::VarError::NotUnicode(_)) => Ok((
                EnvFilter::new(DEFAULT_FILTER),
                Some(format!("RUST_LOG is not valid UTF-8; logging with `{DEFAULT_FILTER}` instead")),
            )),
        },
    }
}

/// Sets up logging to stderr. stdout carries protocol only, so nothing else may write there;
/// stderr is written by a thread of its own (see `logging`), never by the runtime.
pub fn init_tracing(level: Option<&str>) -> anyhow::Result<()> {
    let (filter, warning) = log_filter(level)?;
    crate::logging::init();
    let _ = tracing_subscriber::fmt()
        .with_writer(|| crate::logging::Stderr)
        .with_target(false)
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init();
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    Ok(())
}

/// A readable server name from a command line: `npx -y @scope/server-x dir` -> `server-x`,
/// `node node_modules/@scope/server-y/dist/index.js` -> `server-y`.
pub fn derive_name(command: &str, args: &[String]) -> String {
    // Path parts that say nothing about which server it is.
    const GENERIC: &[&str] = &["index", "main", "cli", "server", "dist", "build", "lib", "src", "bin", "out"];
    let base = |s: &str| {
        let s = s.trim_end_matches('/');
        s.rsplit('/').next().unwrap_or(s).to_string()
    };
    let cmd = base(command);
    let launchers = ["npx", "node", "uvx", "uv", "python", "python3", "deno", "bunx", "bun", "pipx"];
    if !launchers.contains(&cmd.as_str()) {
        return cmd;
    }
    let Some(arg) = args.iter().find(|a| !a.starts_with('-') && *a != "run" && *a != "exec") else {
        return cmd;
    };
    let strip = |p: &str| {
        let p = p.split('@').find(|p| !p.is_empty()).unwrap_or(p).to_string();
        p.trim_end_matches(".js").trim_end_matches(".mjs").trim_end_matches(".py").to_string()
    };
    // The last path part that names something: a file, else the package directory above it.
    let parts: Vec<String> = arg.trim_end_matches('/').split('/').map(strip).collect();
    parts
        .iter()
        .rev()
        .find(|p| !p.is_empty() && !GENERIC.contains(&p.as_str()))
        .cloned()
        .unwrap_or_else(|| strip(&base(arg)))
}

/// For `switchyard run ... CMD ARGS` without `--`, the line as it should have been.
/// `argv` is the whole command line, program name first.
pub fn without_dashes_hint(argv: &[String]) -> Option<String> {
    // Options of `run` that take a value: their value is not the server command.
    const VALUED: &[&str] = &["--config", "--plugins", "--name", "--log-level", "--listen"];
    let rest = argv.get(2..).filter(|_| argv.get(1).is_some_and(|a| a == "run"))?;
    if rest.iter().any(|a| a == "--") {
        return None;
    }
    let mut i = 0;
    while i < rest.len() {
        let a = rest[i].as_str();
        if !a.starts_with('-') {
            let (options, command) = rest.split_at(i);
            let mut line = vec!["switchyard".to_string(), "run".to_string()];
            line.extend(options.iter().cloned());
            line.push("--".into());
            line.extend(command.iter().cloned());
            return Some(line.join(" "));
        }
        i += if VALUED.contains(&a) { 2 } else { 1 };
    }
    None
}

/// The config from the file (if any) with the command line applied on top.
pub fn build_config(args: &RunArgs) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => {
            let mut c = Config::default();
            c.validate()?;
            c
        }
    };
    if let Some((cmd, rest)) = args.command.split_first() {
        config.server.command = Some(cmd.clone());
        config.server.args = rest.to_vec();
    }
    if config.server.command.is_none() {
        bail!(
            "no server command: give it after `--` (switchyard run -- npx -y @modelcontextprotocol/server-everything) or as [server] command in the config file"
        );
    }
    if let Some(n) = &args.name {
        config.server.name = Some(n.clone());
    }
    Ok(config)
}

/// Runs the router until the client disconnects or a signal arrives; exits cleanly.
pub fn run_blocking(args: RunArgs) -> anyhow::Result<()> {
    init_tracing(args.log_level.as_deref())?;
    let config = build_config(&args)?;
    // One thread: a message crosses several tasks (session, engine, instance writer and reader)
    // and on one thread each hand-over is a queue push, not a cross-thread wake-up. Measured on
    // 2 cores: added p50 latency +38 µs against +70 µs with the multi-threaded runtime, and the
    // servers keep the other core. Plugin compiles run on the blocking pool, off this thread.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("switchyard")
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        tokio::spawn(on_signal(shutdown.clone()));
        let opts = crate::RunOptions {
            plugins_dir: args.plugins.clone(),
            listen: args.listen.clone(),
            stdio: !args.no_stdio,
            // This very binary, even if its file was replaced or removed since it started.
            supervisor: Some(PathBuf::from("/proc/self/exe")),
        };
        crate::run(config, opts, shutdown).await
    });
    // A blocking read of stdin may still be parked in the runtime's thread pool (after a signal
    // the client has not closed it); it must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

/// `switchyard connect SOCKET`.
pub fn connect_blocking(socket: &std::path::Path) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let result = runtime.block_on(crate::downstream::connect(socket));
    // A terminal's stdin is read on the blocking pool; a read still parked there must not keep
    // the process alive once the router is gone.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

async fn on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup()))
    else {
        tracing::error!("cannot install signal handlers; stop switchyard by closing its stdin");
        return;
    };
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        _ = hup.recv() => "SIGHUP",
    };
    tracing::info!("{name}: shutting down");
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_package_not_the_launcher() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            derive_name("npx", &a(&["-y", "@modelcontextprotocol/server-filesystem", "/w"])),
            "server-filesystem"
        );
        assert_eq!(derive_name("/usr/bin/node", &a(&["dist/index.js", "stdio"])), "index");
        let nm = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";
        assert_eq!(derive_name("node", &a(&[nm, "stdio"])), "server-everything");
        assert_eq!(derive_name("python3", &a(&["-m", "weather_server.py"])), "weather_server");
        assert_eq!(derive_name("uvx", &a(&["mcp-server-git@1.2"])), "mcp-server-git");
        assert_eq!(derive_name("/opt/bin/my-server", &a(&["--port", "3"])), "my-server");
    }

    #[test]
    fn a_command_without_dashes_gets_the_corrected_line() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let hint = |v: &[&str]| without_dashes_hint(&a(v));
        assert_eq!(
            hint(&["sy", "run", "--name", "fs", "npx", "-y", "srv"]).as_deref(),
            Some("switchyard run --name fs -- npx -y srv")
        );
        assert_eq!(hint(&["sy", "run", "--no-stdio", "srv"]).as_deref(), Some("switchyard run --no-stdio -- srv"));
        assert_eq!(hint(&["sy", "run", "--", "npx"]), None);
        assert_eq!(hint(&["sy", "run", "--config", "x.toml"]), None);
        assert_eq!(hint(&["sy", "connect", "sock"]), None);
    }

    #[test]
    fn command_line_overrides_the_file_and_a_missing_command_is_explained() {
        let args = RunArgs {
            config: None,
            plugins: None,
            name: Some("x".into()),
            log_level: None,
            listen: None,
            no_stdio: false,
            command: vec!["echo".into(), "hi".into()],
        };
        let c = build_config(&args).unwrap();
        assert_eq!(c.server.command.as_deref(), Some("echo"));
        assert_eq!(c.server.args, vec!["hi"]);
        assert_eq!(c.server.name.as_deref(), Some("x"));
        let e = build_config(&RunArgs { command: vec![], ..args }).unwrap_err().to_string();
        assert!(e.contains("after `--`"), "{e}");
    }
}
