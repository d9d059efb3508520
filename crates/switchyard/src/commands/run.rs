//! `switchyard run`: command-line arguments into a config, tracing set-up, signals, the runtime.

use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use tokio_util::sync::CancellationToken;

use switchyard_config::{Config, HeaderValue, Source, TransportKind, about_header, check_header, parse_url, uses_vars};

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The config file (server command or URL, pools, limits, plugins).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The plugins directory (default: plugins/ beside --config FILE; without --config, the
    /// daemon's ~/.config/switchyard/plugins, with the [[plugins]] entries of the daemon's
    /// switchyard.toml beside it). Made empty when missing.
    #[arg(long, value_name = "DIR")]
    pub plugins: Option<PathBuf>,
    /// The server's name in logs and errors (default: from the command, or the URL's host); with
    /// a config file of `[servers.NAME]` tables, the one to front.
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
    /// A remote MCP server to front instead of a command: its Streamable HTTP endpoint, or its
    /// legacy SSE stream (http:// or https://).
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub url: Option<String>,
    /// How to reach the remote server [default: auto]
    #[arg(long, value_name = "KIND")]
    pub transport: Option<TransportKind>,
    /// A header sent with every request to the remote server, as 'Name: value'; repeatable.
    /// `${VAR}` in the value is read from the environment at start-up (`$${` is a literal `${`),
    /// so that secrets stay out of the process list: --header 'Authorization: Bearer ${MCP_TOKEN}'
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<HeaderArg>,
    #[command(flatten)]
    pub record: RecordArgs,
    /// The server command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `--record-calls`: live traffic as recorded calls for `switchyard plugin test` (run and daemon).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RecordArgs {
    /// Append every call the policy chain decides and every tool it annotates to FILE, with the
    /// client's session and the chain's answer: recorded calls for `switchyard plugin test`.
    #[arg(long, value_name = "FILE")]
    pub record_calls: Option<PathBuf>,
    /// With --record-calls: write each call's arguments too (they may hold anything a user typed).
    #[arg(long, requires = "record_calls")]
    pub record_arguments: bool,
}

/// One `--header 'Name: value'` as given. It may hold a secret written out, so Debug hides it,
/// and it is read only by `build_config`, whose errors do not repeat it (a parser that failed
/// here would have clap print it).
#[derive(Clone)]
pub struct HeaderArg(pub String);

impl std::str::FromStr for HeaderArg {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(HeaderArg(s.to_string()))
    }
}

impl std::fmt::Debug for HeaderArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeaderArg(<hidden>)")
    }
}

/// `Name: value` split at the first colon, both trimmed. The error does not repeat the text.
fn split_header(arg: &str) -> Result<(&str, &str), String> {
    let (name, value) = arg.split_once(':').ok_or("has no `:` between name and value; write it as 'Name: value'")?;
    Ok((name.trim(), value.trim_matches([' ', '\t'])))
}

/// A warning for a `--header` that looks like a credential written out: every user of the
/// machine can read a command line (`ps`), but not switchyard's environment.
pub fn literal_secret_warning(name: &str, raw: &str) -> Option<String> {
    let n = name.to_ascii_lowercase();
    let secret = ["authorization", "proxy-authorization", "cookie"].contains(&n.as_str())
        || ["token", "key", "secret"].iter().any(|w| n.contains(w));
    (secret && !uses_vars(raw)).then(|| {
        format!(
            "--header `{name}` has its value written out on the command line, where any user of this machine can read it in the process list; put the secret in an environment variable and refer to it: --header '{name}: ...${{VAR}}' (e.g. 'Authorization: Bearer ${{MCP_TOKEN}}')"
        )
    })
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

/// Sets up logging to stderr, and traces for export when `telemetry` (the config file's
/// `[telemetry]`) or the `OTEL_*` variables name a collector. stdout carries protocol only, so
/// nothing else may write there; stderr is written by a thread of its own (see `logging`), never
/// by the runtime. The spans for export are not `tracing`'s (see `switchyard_telemetry`): the log
/// neither shows them nor pays for them.
pub fn init_tracing(level: Option<&str>, telemetry: &switchyard_config::TelemetryConfig) -> anyhow::Result<()> {
    use tracing_subscriber::prelude::*;
    let (filter, warning) = log_filter(level)?;
    switchyard_core::logging::init();
    let target = telemetry.target(&|n| std::env::var(n));
    let problem = match &target {
        Ok(Some(t)) => switchyard_telemetry::start(t).err(),
        Ok(None) => None,
        Err(e) => Some(e.clone()),
    };
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(log_lines())
        .with(switchyard_core::logging::RecentErrors)
        .try_init();
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    match (problem, target) {
        (Some(p), _) => tracing::warn!("traces are off: {p}"),
        (None, Ok(Some(t))) => {
            use switchyard_config::TelemetryTarget;
            match (&t.traces_url, &t.metrics_url) {
                (Some(url), _) => tracing::info!("traces go to {} (OTLP over HTTP)", TelemetryTarget::shown(url)),
                (None, Some(url)) => tracing::info!(
                    "traces are off (OTEL_TRACES_EXPORTER=none); metrics go to {} (OTLP over HTTP)",
                    TelemetryTarget::shown(url)
                ),
                (None, None) => {}
            }
            for w in &t.warnings {
                tracing::warn!("{w}");
            }
        }
        _ => {}
    }
    Ok(())
}

/// The log's lines, each written to stderr (or the daemon's file) by the logging thread.
fn log_lines<S>() -> impl tracing_subscriber::Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(|| switchyard_core::logging::Stderr)
        .with_target(false)
        .with_ansi(false)
}

/// For `switchyard run ... CMD ARGS` without `--`, the line as it should have been.
/// `argv` is the whole command line, program name first.
pub fn without_dashes_hint(argv: &[String]) -> Option<String> {
    // Options of `run` that take a value: their value is not the server command.
    const VALUED: &[&str] =
        &["--config", "--plugins", "--name", "--log-level", "--listen", "--transport", "--header", "--record-calls"];
    let rest = argv.get(2..).filter(|_| argv.get(1).is_some_and(|a| a == "run"))?;
    // With --url there is no command to move behind `--` (and a stray word may be a header's
    // value, not to be echoed).
    if rest.iter().any(|a| a == "--" || a == "--url" || a.starts_with("--url=") || a.starts_with("--header")) {
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
        Some(path) => pick_server(Config::load(path)?, args.name.as_deref(), path)?,
        None => {
            let mut c = Config::default();
            c.validate()?;
            c
        }
    };
    // The command line names the server over the file's, and the file's settings for the other
    // kind of server go with the file's: a command keeps the file's env and cwd (as before
    // URLs existed), a URL keeps the file's transport and headers.
    let s = &mut config.server;
    if let Some((cmd, rest)) = args.command.split_first() {
        s.launch.command = Some(cmd.clone());
        s.launch.args = rest.to_vec();
        s.launch.url = None;
        s.launch.transport = None;
        s.launch.headers.clear();
    }
    if let Some(url) = &args.url {
        parse_url(url).map_err(|e| anyhow!("--url {e}"))?;
        s.launch.url = Some(url.clone());
        s.launch.command = None;
        s.launch.args.clear();
        s.launch.env.clear();
        s.launch.cwd = None;
    }
    if s.launch.command.is_none() && s.launch.url.is_none() {
        bail!(
            "no server: give its command after `--` (switchyard run -- npx -y @modelcontextprotocol/server-everything), or --url URL for a remote one, or [server] command or url in the config file"
        );
    }
    if let Some(cmd) = &s.launch.command
        && (args.transport.is_some() || !args.headers.is_empty())
    {
        bail!(
            "--transport and --header apply to a remote server (--url, or [server] url in the config file), and this server is the command `{cmd}`"
        );
    }
    if let Some(t) = args.transport {
        s.launch.transport = Some(t);
    }
    let mut given: Vec<String> = Vec::new();
    for (i, arg) in args.headers.iter().enumerate() {
        let (name, raw) = split_header(&arg.0).map_err(|e| anyhow!("--header #{} {e}", i + 1))?;
        switchyard_config::check_header_name(name).map_err(|e| anyhow!("--header #{} {e}", i + 1))?;
        let about = about_header(name, &Source::CommandLine);
        check_header(name, raw).map_err(|e| anyhow!("{about} {e}"))?;
        if given.iter().any(|g| g.eq_ignore_ascii_case(name)) {
            bail!("{about} is given twice (header names ignore case); keep one");
        }
        given.push(name.to_string());
        if let Some(w) = literal_secret_warning(name, raw) {
            tracing::warn!("{w}");
        }
        // Over the file's header of that name, whatever its case.
        s.launch.headers.retain(|k, _| !k.eq_ignore_ascii_case(name));
        s.launch.headers.insert(name.to_string(), HeaderValue { raw: raw.to_string(), source: Source::CommandLine });
    }
    if let Some(n) = &args.name {
        s.name = Some(n.clone());
    }
    Ok(config)
}

/// The `[[plugins]]` entries of `file`, the daemon's config, for a `run` without `--config` and
/// `--plugins`: it uses the plugins directory beside that file, and applies its plugins as the
/// daemon does, each with the config its entry gives it (a plugin without one is not applied).
/// `serving`: the names of the server `run` fronts. No file: no entries. A file that does not
/// load, or whose entry for a plugin that judges this server does not, is an error when the
/// directory holds plugins: they are what a user relies on for access control, and must never
/// run with another config than theirs, nor be left out without a word.
fn daemon_plugins(file: &std::path::Path, serving: &[String]) -> anyhow::Result<Vec<switchyard_config::PluginEntry>> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(anyhow!("cannot read config file {}: {e}", file.display())),
    };
    let dir = file.with_file_name("plugins");
    let refuse = |why: String| {
        let plugins = std::fs::read_dir(&dir).into_iter().flatten().flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && name.ends_with(".wasm")
        });
        if !plugins {
            tracing::warn!("{why}; `switchyard run` applies no plugins (there are none in {})", dir.display());
            return Ok(Vec::new());
        }
        bail!(
            "{why}. Without --config, `switchyard run` applies the [[plugins]] entries of {} to the plugins in {}, and does not run them without the config their entries give them: fix the file, or name the file whose entries apply with --config FILE",
            file.display(),
            dir.display()
        )
    };
    let loaded = match Config::load_tolerant(file, &text) {
        Ok(loaded) => loaded,
        Err(e) => return refuse(format!("{e:#}")),
    };
    // A broken server table or [http] is the daemon's concern: `run` fronts a server of its own.
    let judging_this = loaded.broken_plugins.iter().filter(|p| serving.iter().any(|s| p.applies_to(s)));
    let whys: Vec<&str> = judging_this.map(|p| p.why.as_str()).collect();
    if !whys.is_empty() {
        return refuse(whys.join("; "));
    }
    Ok(loaded.config.plugins)
}

/// The one server `run` fronts from a file with `[servers]`: its only one, or the one `--name`
/// names. A file in the `[server]` form is returned as it is (`--name` renames that server).
fn pick_server(config: Config, name: Option<&str>, path: &std::path::Path) -> anyhow::Result<Config> {
    if config.servers.is_empty() {
        return Ok(config);
    }
    let mut all = config.servers();
    let names = all.keys().cloned().collect::<Vec<_>>().join(", ");
    let picked = match name {
        Some(n) => all.remove(n).ok_or_else(|| {
            anyhow!("--name {n}: config file {} has no server `{n}` in [servers]; its servers: {names}", path.display())
        }),
        None if all.len() == 1 => Ok(all.into_values().next().unwrap_or_default()),
        None => bail!(
            "config file {} has {} servers ({names}); `switchyard run` fronts one; use `switchyard connect NAME` (the daemon) or pass `--name NAME` to pick one",
            path.display(),
            all.len()
        ),
    }?;
    picked.refuse_client_env()?;
    Ok(picked)
}

/// Runs the router until the client disconnects or a signal arrives; exits cleanly. A start that
/// fails is said on stderr, and, when the client is on stdin and stdout, as the answer to its
/// first request (see [`refuse_start`]); the reason is on stderr already when this returns.
pub fn run_blocking(args: RunArgs) -> anyhow::Result<()> {
    // Logging first, so that whatever fails after it is logged the usual way.
    // `[telemetry]` of --config (its other errors are told once logging is up).
    let telemetry = args.config.as_deref().map(switchyard_config::TelemetryConfig::from_file).unwrap_or_default();
    let logging = init_tracing(args.log_level.as_deref(), &telemetry);
    // One thread: a message crosses several tasks (session, engine, instance writer and reader)
    // and on one thread each hand-over is a queue push, not a cross-thread wake-up. Measured on
    // 2 cores: added p50 latency +38 µs against +70 µs with the multi-threaded runtime, and the
    // servers keep the other core. Plugin compiles run on the blocking pool, off this thread.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("switchyard")
        .build()
        .context("cannot start the async runtime")
    {
        Ok(r) => r,
        Err(e) => {
            say_error(&e);
            return Err(e);
        }
    };
    let result = runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        tokio::spawn(on_signal(shutdown.clone()));
        let stdio = !args.no_stdio;
        let started = match logging.and_then(|()| configure(&args)) {
            Ok(config) => serve(config, &args, shutdown.clone()).await,
            Err(e) => Err(e),
        };
        if let Err(e) = &started {
            refuse_start(e, stdio, &shutdown).await;
        }
        started
    });
    // A blocking read of stdin may still be parked in the runtime's thread pool (after a signal
    // the client has not closed it); it must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    // The last spans go out before exit (a bounded wait).
    switchyard_telemetry::flush();
    result
}

/// The config `run` serves: the command line over the file, with the daemon's `[[plugins]]`
/// entries when neither --config nor --plugins is given.
fn configure(args: &RunArgs) -> anyhow::Result<Config> {
    let mut config = build_config(args)?;
    if args.config.is_none() && args.plugins.is_none() {
        // Without a home directory there is no such file (and the plugins directory says so).
        if let Ok(file) = switchyard_config::paths::default_config() {
            config.plugins = daemon_plugins(&file, &config.server_names())?;
        }
    }
    Ok(config)
}

/// The router, until the client leaves or `shutdown` fires. An error is a start that failed:
/// nothing was served.
async fn serve(config: Config, args: &RunArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let opts = switchyard_router::RunOptions {
        plugins_dir: args.plugins.clone(),
        listen: args.listen.clone(),
        stdio: !args.no_stdio,
        // This very binary, even if its file was replaced or removed since it started.
        supervisor: cfg!(unix).then(switchyard_os::exe::spawnable),
        record_calls: args.record.record_calls.clone(),
        record_arguments: args.record.record_arguments,
        audit: crate::commands::audit::start(&config.audit, || {
            let name = config.server_names().into_iter().next().unwrap_or_else(|| "server".to_string());
            switchyard_config::paths::audit_for_run(&name)
        })?,
    };
    switchyard_router::run(config, opts, shutdown).await
}

/// A start that failed: said on stderr, then, with the client on stdin and stdout, given as the
/// error answer to its first request (a client shows that, where it shows only "connection
/// closed" for a server that exits). Ends early when the client closes its input, sends
/// nothing for a while, or a signal comes.
async fn refuse_start(e: &anyhow::Error, stdio: bool, shutdown: &CancellationToken) {
    say_error(e);
    if stdio {
        let why = format!("switchyard run could not start: {e:#}");
        tokio::select! {
            () = crate::commands::lines::refuse_on_stdio(&why) => {}
            () = shutdown.cancelled() => {}
        }
    }
}

/// `switchyard: error: ...` on stderr (never eprintln!: it panics when stderr is closed).
fn say_error(e: &anyhow::Error) {
    switchyard_core::logging::write(format!("switchyard: error: {e:#}\n").into_bytes());
}

/// `switchyard connect NAME [--config FILE] [--socket PATH] [--env NAME,...]`. The reason of a failure is on
/// stderr already when this returns (the relay says it as it happens, once).
pub fn connect_blocking(opts: crate::commands::connect::Options) -> anyhow::Result<()> {
    // stderr through the logging thread: a closed or full stderr never blocks nor panics the relay.
    switchyard_core::logging::init();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            switchyard_core::logging::write(
                format!("switchyard connect: cannot start the async runtime: {e}\n").into_bytes(),
            );
            return Err(e.into());
        }
    };
    let result = runtime.block_on(crate::commands::connect::run(&opts));
    // A terminal's stdin is read on the blocking pool; a read still parked there must not keep
    // the process alive once the router is gone.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

pub async fn on_signal(shutdown: CancellationToken) {
    let name = switchyard_os::shutdown::requested().await;
    tracing::info!("{name}: shutting down");
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_router::upstream::target::Target;

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
            url: None,
            transport: None,
            headers: vec![],
            record: RecordArgs::default(),
            command: vec!["echo".into(), "hi".into()],
        };
        let c = build_config(&args).unwrap();
        assert_eq!(c.server.launch.command.as_deref(), Some("echo"));
        assert_eq!(c.server.launch.args, vec!["hi"]);
        assert_eq!(c.server.name.as_deref(), Some("x"));
        let e = build_config(&RunArgs { command: vec![], ..args }).unwrap_err().to_string();
        assert!(e.contains("after `--`") && e.contains("--url URL"), "{e}");
    }

    /// `switchyard run ARGS` as clap reads it.
    fn parse(argv: &[&str]) -> Result<RunArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        use clap::Parser;
        Cli::try_parse_from(std::iter::once("run").chain(argv.iter().copied())).map(|c| c.run)
    }

    fn config_file(text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchyard.toml");
        std::fs::write(&path, text).unwrap();
        let p = path.display().to_string();
        (dir, p)
    }

    #[test]
    fn url_transport_and_headers_come_from_the_command_line() {
        let a = parse(&[
            "--url",
            "https://mcp.example.com/mcp",
            "--transport",
            "streamable-http",
            "--header",
            "Authorization: Bearer ${MCP_TOKEN}",
            "--header",
            "X-Team:core ",
        ])
        .unwrap();
        let c = build_config(&a).unwrap();
        assert_eq!(c.server.launch.url.as_deref(), Some("https://mcp.example.com/mcp"));
        assert_eq!(c.server.launch.transport, Some(TransportKind::StreamableHttp));
        assert_eq!(c.server.launch.headers["Authorization"].raw, "Bearer ${MCP_TOKEN}");
        assert_eq!(c.server.launch.headers["X-Team"], HeaderValue { raw: "core".into(), source: Source::CommandLine });
        assert!(!format!("{a:?}").contains("MCP_TOKEN"), "Debug shows a header: {a:?}");
        assert!(parse(&["--url", "https://h/", "--transport", "websocket"]).is_err());
    }

    #[test]
    fn a_url_and_a_command_together_are_refused() {
        let e = parse(&["--url", "https://h/mcp", "--", "npx", "srv"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{e}");
        assert!(e.to_string().contains("--url"), "{e}");
    }

    #[test]
    fn the_command_line_server_replaces_the_file_s_and_keeps_what_fits_it() {
        // A file URL with headers; --url keeps its transport and headers, --header overrides by name.
        let (_d, file) = config_file(
            "[server]\nname = \"docs\"\nurl = \"https://a/mcp\"\ntransport = \"sse\"\n\
             headers = { authorization = \"Bearer ${A}\", X-Team = \"core\" }\n",
        );
        let a =
            parse(&["--config", &file, "--url", "https://b/mcp", "--header", "Authorization: Bearer ${B}"]).unwrap();
        let c = build_config(&a).unwrap();
        assert_eq!(c.server.launch.url.as_deref(), Some("https://b/mcp"));
        assert_eq!((c.server.launch.transport, c.server.name.as_deref()), (Some(TransportKind::Sse), Some("docs")));
        let names: Vec<_> = c.server.launch.headers.keys().cloned().collect();
        assert_eq!(names, ["Authorization", "X-Team"]);
        assert_eq!(c.server.launch.headers["Authorization"].source, Source::CommandLine);
        // A command on the command line drops the file's URL settings.
        let c = build_config(&parse(&["--config", &file, "--", "npx", "srv"]).unwrap()).unwrap();
        assert!(
            c.server.launch.url.is_none() && c.server.launch.transport.is_none() && c.server.launch.headers.is_empty()
        );
        Target::resolve(&c, &|_| Err(std::env::VarError::NotPresent)).unwrap();
        // A file command with env and cwd; --url drops them (they describe a command).
        let (_d, file) = config_file("[server]\ncommand = \"npx\"\nargs = [\"x\"]\nenv = { A = \"1\" }\ncwd = \"w\"\n");
        let c = build_config(&parse(&["--config", &file, "--url", "https://h/"]).unwrap()).unwrap();
        assert!(c.server.launch.command.is_none() && c.server.launch.args.is_empty() && c.server.launch.env.is_empty());
        assert!(c.server.launch.cwd.is_none());
        Target::resolve(&c, &|_| Err(std::env::VarError::NotPresent)).unwrap();
        // ... while --header alone does not apply to that command.
        let e = build_config(&parse(&["--config", &file, "--header", "A: b"]).unwrap()).unwrap_err().to_string();
        assert!(e.contains("apply to a remote server") && e.contains("command `npx`"), "{e}");
    }

    #[test]
    fn bad_command_line_urls_and_headers_are_named_without_their_values() {
        let build = |argv: &[&str]| build_config(&parse(argv).unwrap()).map(|_| ()).unwrap_err().to_string();
        let e = build(&["--url", "ftp://h/"]);
        assert!(e.starts_with("--url must start with https://"), "{e}");
        let e = build(&["--url", "https://h/", "--header", "Authorization Bearer hunter2"]);
        assert!(e.contains("--header #1 has no `:`") && !e.contains("hunter2"), "{e}");
        let e = build(&["--url", "https://h/", "--header", "A: b", "--header", "Bearer hunter2: x"]);
        assert!(e.contains("--header #2 has a name with a space") && !e.contains("hunter2"), "{e}");
        let e = build(&["--url", "https://h/", "--header", "X-Key: a${B"]);
        assert!(e.contains("header `X-Key` (--header) has `${` without a closing `}`"), "{e}");
        let e = build(&["--url", "https://h/", "--header", "A: b", "--header", "a: c"]);
        assert!(e.contains("given twice"), "{e}");
        let e = build(&["--url", "https://h/", "--header", "Mcp-Session-Id: 1"]);
        assert!(e.contains("set by switchyard itself"), "{e}");
    }

    #[test]
    fn a_literal_credential_on_the_command_line_is_warned_about() {
        for name in ["Authorization", "x-api-key", "X-Auth-Token", "Cookie", "Client-Secret"] {
            let w = literal_secret_warning(name, "hunter2").unwrap_or_else(|| panic!("{name}"));
            assert!(w.contains("process list") && w.contains("${") && !w.contains("hunter2"), "{w}");
        }
        assert!(literal_secret_warning("Authorization", "Bearer ${MCP_TOKEN}").is_none());
        assert!(literal_secret_warning("X-Team", "core").is_none());
        // `$${` is a literal `${`, so still written out.
        assert!(literal_secret_warning("Authorization", "$${x}").is_some());
    }

    #[test]
    fn no_dashes_hint_with_a_url() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(without_dashes_hint(&a(&["sy", "run", "--url", "https://h/", "npx"])), None);
        assert_eq!(without_dashes_hint(&a(&["sy", "run", "--header", "A: b c", "x"])), None);
        assert_eq!(
            without_dashes_hint(&a(&["sy", "run", "--transport", "sse", "srv"])).as_deref(),
            Some("switchyard run --transport sse -- srv")
        );
    }

    #[test]
    fn a_file_with_one_of_its_servers_is_run_as_that_server() {
        let (_d, file) =
            config_file("[limits]\ncall_timeout_ms = 1000\n[servers.fs]\ncommand = \"npx\"\nargs = [\"srv\"]\n");
        let c = build_config(&parse(&["--config", &file]).unwrap()).unwrap();
        assert_eq!((c.server.name.as_deref(), c.server.launch.command.as_deref()), (Some("fs"), Some("npx")));
        assert_eq!(c.limits.call_timeout_ms, 1000);
        assert!(c.servers.is_empty());
        assert_eq!(Target::resolve(&c, &|_| Err(std::env::VarError::NotPresent)).unwrap().0.server(), "fs");
        // The command line still overrides what it gives.
        let c = build_config(&parse(&["--config", &file, "--", "uvx", "other"]).unwrap()).unwrap();
        assert_eq!((c.server.name.as_deref(), c.server.launch.command.as_deref()), (Some("fs"), Some("uvx")));
    }

    #[test]
    fn run_refuses_a_server_that_takes_values_from_its_client() {
        let (_d, file) = config_file(
            "[servers.tools]\ncommand = \"python3\"\nargs = [\"${DIR}/s.py\"]\nclient_env = [\"DIR\", \"KEY\"]\n",
        );
        let e = format!("{:#}", build_config(&parse(&["--config", &file]).unwrap()).unwrap_err());
        assert!(e.contains("server `tools` has `client_env` (DIR, KEY)"), "{e}");
        assert!(e.contains("switchyard connect tools --env DIR,KEY") && e.contains("`switchyard run`"), "{e}");
    }

    /// Without --config, `run` applies the [[plugins]] entries of the daemon's config, as the
    /// daemon does; a file that does not load stops it when there are plugins it would leave
    /// without their config, and an entry broken only for other servers does not.
    #[test]
    fn run_without_config_takes_the_daemon_s_plugin_entries_or_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("switchyard.toml");
        let serving = ["fs".to_string()];
        assert!(daemon_plugins(&file, &serving).unwrap().is_empty(), "no file: no entries");
        std::fs::write(
            &file,
            "[servers.fs]\ncommand = \"x\"\n[[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = { clients = {} }\non_error = \"closed\"\n",
        )
        .unwrap();
        let entries = daemon_plugins(&file, &serving).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(
            (entries[0].file.as_str(), entries[0].on_error),
            ("tool-filter.wasm", switchyard_config::OnError::Closed)
        );
        assert_eq!(entries[0].config_json().unwrap(), r#"{"clients":{}}"#);

        // A file that does not load, with no plugin beside it: nothing is left out.
        std::fs::write(&file, "[[plugins]]\nfile = \"tool-filter.wasm\"\nconfg = {}\n").unwrap();
        assert!(daemon_plugins(&file, &serving).unwrap().is_empty());
        // With one, `run` does not start, and says where the mistake is and what to do.
        std::fs::create_dir(dir.path().join("plugins")).unwrap();
        std::fs::write(dir.path().join("plugins").join("tool-filter.wasm"), b"\0asm").unwrap();
        let e = format!("{:#}", daemon_plugins(&file, &serving).unwrap_err());
        assert!(e.starts_with(&format!("config file {}, line 3", file.display())), "{e}");
        assert!(e.contains("unknown field `confg`") && e.contains("--config FILE"), "{e}");
        assert!(e.contains(&dir.path().join("plugins").display().to_string()), "{e}");

        // An entry broken for another server only is that server's concern; one for this
        // server stops the start.
        let two = "[servers.fs]\ncommand = \"x\"\n[servers.gh]\ncommand = \"y\"\n\
                   [[plugins]]\nfile = \"a.wasm\"\nservers = [\"gh\"]\nrefusals = \"eror\"\n\
                   [[plugins]]\nfile = \"tool-filter.wasm\"\n";
        std::fs::write(&file, two).unwrap();
        let entries = daemon_plugins(&file, &serving).unwrap();
        assert_eq!(entries.iter().map(|e| e.file.as_str()).collect::<Vec<_>>(), ["tool-filter.wasm"]);
        let e = format!("{:#}", daemon_plugins(&file, &["gh".to_string()]).unwrap_err());
        assert!(e.contains("line 8") && e.contains("`refusals = \"eror\"`"), "{e}");
    }

    #[test]
    fn a_file_with_several_servers_needs_name_to_pick_one() {
        let (_d, file) = config_file(
            "[servers.fs]\ncommand = \"npx\"\n[servers.tracker]\nurl = \"https://h/mcp\"\n[servers.git]\ncommand = \"uvx\"\n",
        );
        let e = build_config(&parse(&["--config", &file]).unwrap()).unwrap_err().to_string();
        assert!(e.contains(&format!("config file {file} has 3 servers (fs, git, tracker)")), "{e}");
        assert!(e.contains("`switchyard run` fronts one") && e.contains("switchyard connect NAME"), "{e}");
        assert!(e.contains("--name NAME"), "{e}");
        let c = build_config(&parse(&["--config", &file, "--name", "tracker"]).unwrap()).unwrap();
        assert_eq!(
            (c.server.name.as_deref(), c.server.launch.url.as_deref()),
            (Some("tracker"), Some("https://h/mcp"))
        );
        let e = build_config(&parse(&["--config", &file, "--name", "trakcer"]).unwrap()).unwrap_err().to_string();
        assert!(e.contains("no server `trakcer`") && e.contains("its servers: fs, git, tracker"), "{e}");
        // In the [server] form, --name still renames.
        let (_d, file) = config_file("[server]\ncommand = \"npx\"\n");
        let c = build_config(&parse(&["--config", &file, "--name", "mine"]).unwrap()).unwrap();
        assert_eq!(c.server.name.as_deref(), Some("mine"));
    }
}
