//! `switchyard daemon`, `status` and `stop`: one long-lived router per config file, which owns
//! every server in it and outlives its clients (they join through `switchyard connect NAME`).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use switchyard_config::paths;
use switchyard_config::{Config, HttpConfig};
use switchyard_policy::Policy;
use switchyard_router::downstream;
use switchyard_router::downstream::control::{self, Hello, Reply};
use switchyard_router::downstream::http::token::{self, Token};
use switchyard_router::registry::{About, Router};

/// How long stopping may take before the daemon stops waiting for its tasks.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(8);
/// How long `daemon --detach` waits for the new daemon to accept connections.
const START_WAIT: Duration = Duration::from_secs(30);
/// How long `switchyard stop` waits for the daemon to exit.
const STOP_WAIT: Duration = Duration::from_secs(20);
/// How often the daemon checks that its socket file is still there and still its own.
const SOCKET_CHECK: Duration = Duration::from_secs(2);
/// Edits of the config file within this long are applied together (editors write in steps).
const RELOAD_SETTLE: Duration = Duration::from_millis(150);

#[derive(clap::Args, Debug, Clone)]
pub struct DaemonArgs {
    /// The config file with every server (default: ~/.config/switchyard/switchyard.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The socket to serve (default: one per config file, in $XDG_RUNTIME_DIR/switchyard).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Start in the background, detached from this terminal, logging to a file; return once it
    /// accepts connections (at once when a daemon already serves that socket).
    #[arg(long)]
    pub detach: bool,
    /// The plugins directory (default: plugins/ beside the config file).
    #[arg(long, value_name = "DIR")]
    pub plugins: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace (default: RUST_LOG, else info).
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Also serve every server over Streamable HTTP at http://ADDR/mcp/NAME, with the config's
    /// [http] settings (ADDR over its `listen`; without ADDR: its `listen`, else 127.0.0.1:7070).
    /// Clients send `Authorization: Bearer TOKEN`; `switchyard token` prints it.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, value_parser = switchyard_config::parse_listen)]
    pub http: Option<Option<SocketAddr>>,
    /// Set by `--detach` for the process it starts: log to LOG, start a session of its own,
    /// report readiness on stdout.
    #[arg(long, hide = true, value_name = "LOG")]
    pub detached_child: Option<PathBuf>,
}

/// Which daemon `status` and `stop` talk to.
#[derive(clap::Args, Debug, Clone)]
pub struct Which {
    /// The daemon serving this config file (default: ~/.config/switchyard/switchyard.toml).
    #[arg(long, value_name = "FILE", conflicts_with = "socket")]
    pub config: Option<PathBuf>,
    /// The daemon serving this socket.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

/// The config file (absolute, links resolved) and the socket of a daemon.
pub fn locate(config: Option<&Path>, socket: Option<&Path>) -> anyhow::Result<(Option<PathBuf>, PathBuf)> {
    let config = match config {
        Some(c) => Some(paths::canonical_config(c)?),
        None if socket.is_some() => None,
        None => Some(paths::canonical_config(&paths::default_config()?)?),
    };
    let socket = match (socket, &config) {
        (Some(s), _) => s.to_path_buf(),
        (None, Some(c)) => paths::socket_for(c)?,
        (None, None) => unreachable!("a config is resolved when no socket is given"),
    };
    Ok((config, socket))
}

/// `switchyard daemon`.
pub fn daemon_blocking(args: DaemonArgs) -> anyhow::Result<()> {
    if let Some(log) = args.detached_child.clone() {
        return detached_child(args, &log);
    }
    let config_path = match &args.config {
        Some(c) => c.clone(),
        None => paths::default_config()?,
    };
    let (config, socket) = locate(Some(&config_path), args.socket.as_deref())?;
    let config = config.expect("a config file was named");
    if args.detach {
        return detach(&args, &config, &socket);
    }
    crate::commands::run::init_tracing(args.log_level.as_deref())?;
    run_blocking(&args, config, socket, None, || {})
}

/// The HTTP front this daemon serves, if any: the config's `[http]` with `--http ADDR` over its
/// `listen` (`--http` alone: `[http]` as it is, or every default), checked, and the bearer token
/// its clients must send (`[http] token`, else the generated one of `canonical`, the config
/// file's canonical path). None when neither `[http]` nor `--http` asks for a front.
pub fn http_front(
    flag: Option<Option<SocketAddr>>,
    config: &Config,
    canonical: &Path,
) -> anyhow::Result<Option<(HttpConfig, Token)>> {
    if flag.is_none() && config.http.is_none() {
        return Ok(None);
    }
    http_front_with(flag, config, &paths::token_for(canonical)?, &|n| std::env::var(n))
}

/// A token of the user's own shorter than this is warned about (a generated one has 46).
const MIN_TOKEN_CHARS: usize = 24;

/// [`http_front`] with the token file and the environment given.
fn http_front_with(
    flag: Option<Option<SocketAddr>>,
    config: &Config,
    token_file: &Path,
    env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
) -> anyhow::Result<Option<(HttpConfig, Token)>> {
    let mut http = match (&config.http, flag) {
        (None, None) => return Ok(None),
        (Some(h), _) => h.clone(),
        (None, Some(_)) => HttpConfig::default(),
    };
    let mut given_by = "[http] listen";
    if let Some(Some(addr)) = flag {
        http.listen = addr;
        given_by = "--http";
    }
    http.check_exposure(given_by)?;
    let token = token::for_daemon(Some(&http), token_file, env)?;
    if http.token.is_some() && token.expose().len() < MIN_TOKEN_CHARS {
        tracing::warn!(
            "[http] token is only {} characters long: anyone who may reach {} can guess it; use {MIN_TOKEN_CHARS} or more random characters (remove `token` and switchyard makes one)",
            token.expose().len(),
            http.listen
        );
    }
    switchyard_router::upstream::stdio::withhold(http.token_variables());
    Ok(Some((http, token)))
}

/// Runs the daemon on this thread until it is stopped.
fn run_blocking(
    args: &DaemonArgs,
    config: PathBuf,
    socket: PathBuf,
    log: Option<PathBuf>,
    ready: impl FnOnce(),
) -> anyhow::Result<()> {
    // One thread, as `switchyard run` (see cli::run_blocking for the measurement).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("switchyard-daemon")
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        tokio::spawn(crate::commands::run::on_signal(shutdown.clone()));
        serve(args.plugins.clone(), config, socket, log, args.http, shutdown, ready).await
    });
    runtime.shutdown_timeout(Duration::from_millis(200));
    result
}

/// The daemon: loads the config, serves its socket (and its HTTP front, with `[http]` or
/// `http_flag`, which is `--http`), follows edits of the config, and stops its servers when
/// `shutdown` fires, when asked to (`switchyard stop`), or when idle too long.
pub async fn serve(
    plugins: Option<PathBuf>,
    config_path: PathBuf,
    socket: PathBuf,
    log: Option<PathBuf>,
    http_flag: Option<Option<SocketAddr>>,
    shutdown: CancellationToken,
    ready: impl FnOnce(),
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&config_path)
        .with_context(|| format!("cannot read config file {}", config_path.display()))?;
    let config = Config::load_text(&config_path, &text)?;
    // Checked before anything starts: a front that cannot be served stops the daemon here.
    let front = http_front(http_flag, &config, &config_path)?;
    let policy = Policy::start(&config, plugins, shutdown.child_token()).await?;
    let about = About { config: Some(config_path.clone()), socket: Some(socket.clone()), log };
    let router = Router::new(policy, about, Some(PathBuf::from("/proc/self/exe")), shutdown.clone());
    let mut applied = Applied::default();
    applied.apply(&router, &config, &text);
    let bound = downstream::bind(&socket).await.map_err(|e| {
        anyhow::anyhow!("{e:#}\n(`switchyard status --socket {}` shows the daemon serving it)", socket.display())
    })?;
    let file = bound.file();
    let http = match front {
        Some((http, token)) => {
            let addr = http.listen;
            let tcp = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                // The socket just bound is ours: leave none behind for `status` and `stop` to find.
                let _ = std::fs::remove_file(&socket);
                anyhow::anyhow!(
                    "cannot serve HTTP on {addr}: {e}{}",
                    if e.kind() == std::io::ErrorKind::AddrInUse {
                        " (another program listens there; choose another address with --http ADDR or [http] listen)"
                    } else {
                        ""
                    }
                )
            })?;
            let bound = tcp.local_addr().unwrap_or(addr);
            tracing::info!("serving Streamable HTTP on http://{bound}/mcp/NAME");
            raise_open_files();
            Some(tokio::spawn(switchyard_router::downstream::http::serve(
                router.clone(),
                http,
                token,
                tcp,
                shutdown.clone(),
            )))
        }
        None => None,
    };
    let listener = tokio::spawn(downstream::listen(router.clone(), bound, socket.clone(), shutdown.clone()));
    tokio::spawn(keep_socket(router.clone(), socket.clone(), file, shutdown.clone()));
    tracing::info!(
        "switchyard daemon ready (pid {}) for {} on {}: servers {}",
        std::process::id(),
        config_path.display(),
        socket.display(),
        router.names().join(", ")
    );
    ready();
    tokio::spawn(watch_config(router.clone(), config_path, applied, shutdown.clone()));
    let idle = idle_exit(&config);
    if !idle.is_zero() && http.is_some() {
        // An HTTP client cannot start a daemon on demand, as `connect` does.
        tracing::info!("daemon.idle_exit_ms is not applied while HTTP is served");
    } else if !idle.is_zero() {
        tokio::spawn(exit_when_idle(router.clone(), idle));
    }
    shutdown.cancelled().await;
    let _ = listener.await;
    if let Some(http) = http {
        let _ = http.await;
    }
    router.stop(SHUTDOWN_GRACE).await;
    tracing::info!("switchyard daemon stopped");
    Ok(())
}

/// Lets the process open more files than the usual soft limit of 1024 (up to its hard limit,
/// at most [`OPEN_FILES`]): each HTTP client holds a connection.
fn raise_open_files() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    // Not the whole hard limit (often 2^20): the servers started later inherit it, and some
    // close every descriptor up to it before they exec.
    let wanted = limit.maximum.map_or(OPEN_FILES, |m| m.min(OPEN_FILES));
    if limit.current.is_some_and(|c| c < wanted) {
        limit.current = Some(wanted);
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::info!(
                "could not raise the open-file limit to its maximum ({e}); many HTTP clients may be refused"
            );
        }
    }
}

/// The open-file soft limit a daemon serving HTTP asks for.
const OPEN_FILES: u64 = 65_536;

fn idle_exit(config: &Config) -> Duration {
    Duration::from_millis(config.daemon.idle_exit_ms)
}

/// The config in force: each server's part of the file as written, to tell which changed.
#[derive(Default)]
struct Applied {
    parts: BTreeMap<String, toml::Value>,
    text: String,
}

impl Applied {
    /// What in the file decides how server `name` runs: its own table and the defaults above it.
    fn part(file: &toml::Table, name: &str) -> toml::Value {
        let mut part = toml::Table::new();
        for key in ["limits", "pools", "server"] {
            if let Some(v) = file.get(key) {
                part.insert(key.to_string(), v.clone());
            }
        }
        if let Some(v) = file.get("servers").and_then(|s| s.get(name)) {
            part.insert("this".to_string(), v.clone());
        }
        toml::Value::Table(part)
    }

    /// Brings the router to `config`: new servers are added, changed ones replaced, removed ones
    /// taken out.
    fn apply(&mut self, router: &Arc<Router>, config: &Config, text: &str) {
        let file: toml::Table = text.parse().unwrap_or_default();
        let wanted = config.servers();
        let mut parts = BTreeMap::new();
        for (name, server_config) in &wanted {
            let part = Self::part(&file, name);
            let before = self.parts.get(name);
            if before == Some(&part) {
                parts.insert(name.clone(), part);
                continue;
            }
            let why = match before {
                Some(_) => format!("server `{name}` changed in the config"),
                None => String::new(),
            };
            // A server with `client_env` is a template: its servers are made per client's values.
            let added = if server_config.server.client_env.is_empty() {
                router.build(server_config).map(|server| router.add(server, &why))
            } else {
                router.add_template(server_config, &why)
            };
            match added {
                Ok(()) => {
                    if before.is_none() && !self.parts.is_empty() {
                        tracing::info!(server = %name, "server `{name}` added to the config");
                    }
                }
                Err(e) => {
                    tracing::error!(server = %name, "server `{name}` cannot be used: {e:#}");
                    router.mark_broken(name, format!("{e:#}"));
                }
            }
            parts.insert(name.clone(), part);
        }
        let old: toml::Table = self.text.parse().unwrap_or_default();
        for key in ["plugins", "daemon", "http"] {
            if !self.text.is_empty() && old.get(key) != file.get(key) {
                tracing::warn!(
                    "the config's {} changed; that takes effect when the daemon restarts (`switchyard stop`; the next `connect` starts it again)",
                    match key {
                        "plugins" => "[[plugins]] entries",
                        "daemon" => "[daemon] table",
                        _ => "[http] table",
                    }
                );
            }
        }
        for name in self.parts.keys().filter(|n| !wanted.contains_key(*n)) {
            router.remove(name, &format!("server `{name}` was removed from the config"));
        }
        self.parts = parts;
        self.text = text.to_string();
    }
}

/// Follows edits of the config file: each saved version that loads is applied; one that does not
/// leaves the config in force as it is, with one log line saying why.
async fn watch_config(router: Arc<Router>, path: PathBuf, mut applied: Applied, shutdown: CancellationToken) {
    use notify::{RecursiveMode, Watcher};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The files whose changes count: the config, and the file it links to (if it is a link).
    let watched = |target: &Option<PathBuf>| -> Vec<PathBuf> {
        [Some(path.clone()), target.clone()].into_iter().flatten().collect()
    };
    let mut target = std::fs::canonicalize(&path).ok().filter(|t| *t != path);
    let files = Arc::new(std::sync::Mutex::new(watched(&target)));
    let seen_by_watcher = files.clone();
    let mut watcher = match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reads (the daemon's own, among them) change nothing.
        let files = seen_by_watcher.lock().expect("lock");
        if let Ok(e) = event
            && !matches!(e.kind, notify::EventKind::Access(_))
            && e.paths.iter().any(|p| files.iter().any(|f| f.file_name() == p.file_name() && f.parent() == p.parent()))
        {
            let _ = tx.send(());
        }
    }) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("cannot watch {} for changes ({e}); restart the daemon to apply edits", path.display());
            return;
        }
    };
    // The directory, not the file: editors save by writing a new file and renaming it over.
    let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
        tracing::warn!("cannot watch {} for changes ({e}); restart the daemon to apply edits", dir.display());
        return;
    }
    // A config that is a link (dotfile managers make them): its target's directory too, so an
    // edit of the target is seen as well as the link being pointed elsewhere.
    let mut target_dir = target.as_ref().and_then(|t| t.parent()).map(Path::to_path_buf).filter(|d| *d != dir);
    if let Some(d) = &target_dir {
        let _ = watcher.watch(d, RecursiveMode::NonRecursive);
    }
    let mut seen = applied.text.clone();
    loop {
        tokio::select! {
            got = rx.recv() => if got.is_none() { return },
            _ = shutdown.cancelled() => return,
        }
        // Let the save finish: the file is read once no event came for RELOAD_SETTLE.
        loop {
            tokio::time::sleep(RELOAD_SETTLE).await;
            let mut more = false;
            while rx.try_recv().is_ok() {
                more = true;
            }
            if !more {
                break;
            }
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                let marker = format!("\0{e}");
                if seen != marker {
                    tracing::warn!("cannot read config file {} ({e}); the config in force stays", path.display());
                    seen = marker;
                }
                continue;
            }
        };
        // The link may point elsewhere now: follow its target.
        let now_target = std::fs::canonicalize(&path).ok().filter(|t| *t != path);
        if now_target != target {
            target = now_target;
            *files.lock().expect("lock") = watched(&target);
        }
        let now = target.as_ref().and_then(|t| t.parent()).map(Path::to_path_buf).filter(|d| *d != dir);
        if now != target_dir {
            if let Some(d) = &target_dir {
                let _ = watcher.unwatch(d);
            }
            if let Some(d) = &now {
                let _ = watcher.watch(d, RecursiveMode::NonRecursive);
            }
            target_dir = now;
        }
        // Said once per version of the file, whatever became of it.
        if text == seen {
            continue;
        }
        seen = text.clone();
        // An empty file is a save in progress (truncated, not yet written) far more often than
        // a wish to remove every server; it would end every session.
        if text.trim().is_empty() {
            tracing::warn!(
                "config file {} is empty; the config in force stays (to remove every server, leave a comment in the file)",
                path.display()
            );
            continue;
        }
        match Config::load_text(&path, &text) {
            Ok(config) => {
                tracing::info!("config file {} changed; applying it", path.display());
                applied.apply(&router, &config, &text);
            }
            Err(e) => {
                let why = format!("{e:#}").replace('\n', " ");
                tracing::error!(
                    "config file {} not applied: {why}; the last good config stays in force",
                    path.display()
                );
            }
        }
    }
}

/// Watches the socket file: one removed (a cleaner of temporary files, a user) is made again, so
/// clients, `status` and `stop` still reach this daemon instead of starting a second one; one
/// taken by another daemon means this one can no longer be reached, and it stops.
async fn keep_socket(router: Arc<Router>, socket: PathBuf, mut file: (u64, u64), shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SOCKET_CHECK) => {}
            _ = shutdown.cancelled() => return,
        }
        match rustix::fs::lstat(&socket) {
            Ok(st) if (st.st_dev, st.st_ino) == file => {}
            Err(rustix::io::Errno::NOENT) => match downstream::bind(&socket).await {
                Ok(bound) => {
                    tracing::warn!("the socket {} was removed; listening on it again", socket.display());
                    file = bound.file();
                    tokio::spawn(downstream::listen(router.clone(), bound, socket.clone(), shutdown.clone()));
                }
                Err(e) => tracing::warn!("the socket {} was removed and cannot be made again: {e:#}", socket.display()),
            },
            Ok(_) => {
                tracing::error!(
                    "{} is no longer this daemon's socket (another daemon took it); stopping, since no client can reach this one",
                    socket.display()
                );
                router.shutdown.cancel();
                return;
            }
            Err(e) => tracing::warn!("cannot check the socket {}: {e}", socket.display()),
        }
    }
}

/// Stops the router once it has had no session for `idle`.
async fn exit_when_idle(router: Arc<Router>, idle: Duration) {
    let mut count = router.registry.count();
    loop {
        if *count.borrow_and_update() == 0 {
            tokio::select! {
                _ = tokio::time::sleep(idle) => {
                    if *count.borrow() == 0 {
                        tracing::info!("no session for {} ms (idle_exit_ms); stopping", idle.as_millis());
                        router.shutdown.cancel();
                        return;
                    }
                }
                changed = count.changed() => if changed.is_err() { return },
            }
        } else if count.changed().await.is_err() {
            return;
        }
    }
}

/// `daemon --detach`: starts the daemon as a process of its own and returns once it accepts.
fn detach(args: &DaemonArgs, config: &Path, socket: &Path) -> anyhow::Result<()> {
    if let Ok(status) = ask(socket, &Hello::Status) {
        let pid = match status {
            Reply::Status { status } => status["pid"].as_u64().unwrap_or(0),
            _ => 0,
        };
        eprintln_safe(&format!(
            "a switchyard daemon (pid {pid}) already serves {} on {}",
            config.display(),
            socket.display()
        ));
        return Ok(());
    }
    let log = paths::log_for(config)?;
    let offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let mut cmd = std::process::Command::new("/proc/self/exe");
    std::os::unix::process::CommandExt::arg0(&mut cmd, paths::program_name());
    cmd.arg("daemon").arg("--config").arg(config).arg("--socket").arg(socket).arg("--detached-child").arg(&log);
    if let Some(p) = &args.plugins {
        cmd.arg("--plugins").arg(std::path::absolute(p)?);
    }
    if let Some(l) = &args.log_level {
        cmd.arg("--log-level").arg(l);
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
    close_inherited_on_exec();
    let log_file = open_log(&log)?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log_file)
        // Not the client's directory: the daemon outlives it (and may outlive the directory).
        .current_dir("/");
    let mut child = cmd.spawn().context("cannot start the daemon process")?;
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
            eprintln_safe(&format!(
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
fn detached_child(args: DaemonArgs, log: &Path) -> anyhow::Result<()> {
    let _ = rustix::process::setsid();
    // Its stderr is the log file too (opened by the parent, for what is written before this).
    switchyard_core::logging::init_file(log, switchyard_core::logging::LOG_FILE_MAX_BYTES)
        .with_context(|| format!("cannot write the daemon's log {}", log.display()))?;
    crate::commands::run::init_tracing(args.log_level.as_deref())?;
    let config = args.config.clone().context("--detached-child needs --config")?;
    let socket = args.socket.clone().context("--detached-child needs --socket")?;
    run_blocking(&args, config, socket, Some(log.to_path_buf()), || {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "ready");
        let _ = out.flush();
        if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
            let _ = rustix::stdio::dup2_stdout(&null);
        }
    })
}

/// Marks every descriptor above stderr close-on-exec.
#[allow(unsafe_code)]
fn close_inherited_on_exec() {
    use std::os::fd::{BorrowedFd, RawFd};
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
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

/// The daemon's log file, opened for appending (made 0600).
fn open_log(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot open the daemon's log {}", path.display()))
}

/// What the log got since `offset` (the last 40 lines of it).
fn log_since(path: &Path, offset: u64) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let new = String::from_utf8_lossy(text.get(offset as usize..).unwrap_or_default()).into_owned();
    // What went wrong, not the start-up's progress lines.
    let lines: Vec<&str> = new.lines().filter(|l| !(l.contains("Z  INFO ") || l.contains("Z DEBUG "))).collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn eprintln_safe(line: &str) {
    switchyard_core::logging::write(format!("{line}\n").into_bytes());
}

/// One hello and its reply, blocking (for `status`, `stop` and `--detach`).
/// Where the running daemon of `config` (canonical) serves HTTP, if it runs and does.
pub fn served_http(config: &Path) -> Option<SocketAddr> {
    let socket = paths::socket_for(config).ok()?;
    match ask(&socket, &Hello::Status).ok()? {
        Reply::Status { status } => status["http"]["listen"].as_str()?.parse().ok(),
        _ => None,
    }
}

fn ask(socket: &Path, hello: &Hello) -> std::io::Result<Reply> {
    let mut stream = std::os::unix::net::UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(control::line(hello).as_bytes())?;
    let mut line = String::new();
    std::io::BufReader::new(&stream).read_line(&mut line)?;
    control::reply(&line).map_err(std::io::Error::other)
}

/// Says that no daemon answers on `socket`.
fn not_running(config: &Option<PathBuf>, socket: &Path, e: &std::io::Error) -> String {
    let of = config.as_ref().map(|c| format!(" for {}", c.display())).unwrap_or_default();
    format!("no switchyard daemon runs{of} (socket {}: {e})", socket.display())
}

/// `switchyard status`.
pub fn status_blocking(which: Which, json: bool) -> anyhow::Result<()> {
    let (config, socket) = locate(which.config.as_deref(), which.socket.as_deref())?;
    let status = match ask(&socket, &Hello::Status) {
        Ok(Reply::Status { status }) => status,
        Ok(other) => bail!("unexpected answer from the daemon on {}: {other:?}", socket.display()),
        Err(e) => bail!("{}", not_running(&config, &socket, &e)),
    };
    let text = if json { format!("{status:#}\n") } else { render(&status) };
    let mut out = std::io::stdout();
    out.write_all(text.as_bytes()).and_then(|_| out.flush()).context("cannot write to stdout")
}

/// `switchyard stop`: asks the daemon to stop and waits until its process is gone.
pub fn stop_blocking(which: Which) -> anyhow::Result<()> {
    let (config, socket) = locate(which.config.as_deref(), which.socket.as_deref())?;
    let pid = match ask(&socket, &Hello::Stop) {
        Ok(Reply::Stopping { pid }) => pid,
        Ok(other) => bail!("unexpected answer from the daemon on {}: {other:?}", socket.display()),
        Err(e) => {
            eprintln_safe(&not_running(&config, &socket, &e));
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
    eprintln_safe(&format!("stopped the switchyard daemon (pid {pid}) on {}", socket.display()));
    Ok(())
}

/// Whether process `pid` is gone or a zombie (its stat unreadable, or in state Z).
fn exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|rest| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// The status as text for people.
/// `text` with control characters escaped (`\n`, `\u{1b}`): a client names itself, and its
/// name must not add lines to `status` or drive the terminal.
fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

pub fn render(s: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let ms = |v: &serde_json::Value| human_ms(v.as_u64().unwrap_or(0));
    let _ = writeln!(
        out,
        "switchyard {} daemon, pid {}, up {}",
        s["version"].as_str().unwrap_or("?"),
        s["pid"],
        ms(&s["uptime_ms"])
    );
    for (label, key) in [("config", "config"), ("socket", "socket"), ("log", "log")] {
        let v = s[key].as_str().unwrap_or(if key == "log" { "stderr" } else { "-" });
        let _ = writeln!(out, "  {label}: {v}");
    }
    if let Some(http) = s.get("http") {
        let _ = writeln!(
            out,
            "  http: {} ({} session{})",
            http["listen"].as_str().unwrap_or("?"),
            http["sessions"],
            if http["sessions"] == 1 { "" } else { "s" }
        );
    }
    let plugins: Vec<&str> = s["plugins"].as_array().into_iter().flatten().filter_map(|p| p.as_str()).collect();
    let _ = writeln!(
        out,
        "  plugins: {}{}",
        if plugins.is_empty() { "none".to_string() } else { plugins.join(", ") },
        s["plugins_dir"].as_str().map(|d| format!(" (from {d})")).unwrap_or_default()
    );
    let servers = s["servers"].as_array().cloned().unwrap_or_default();
    let retired = s["retired"].as_array().cloned().unwrap_or_default();
    for (server, old) in servers.iter().map(|v| (v, false)).chain(retired.iter().map(|v| (v, true))) {
        if let Some(names) = server["client_env"].as_array() {
            let names: Vec<&str> = names.iter().filter_map(|n| n.as_str()).collect();
            let variants: Vec<&str> =
                server["variants"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
            let _ = writeln!(
                out,
                "\nserver {}: {}\n  one server per distinct set of client values of {} (connect --env {}); {}",
                server["name"].as_str().unwrap_or("?"),
                server["target"].as_str().unwrap_or(""),
                names.join(", "),
                names.join(","),
                if variants.is_empty() {
                    "none running".to_string()
                } else {
                    format!("running: {}", variants.join(", "))
                }
            );
            continue;
        }
        let _ = writeln!(
            out,
            "\nserver {}{}: {}",
            server["name"].as_str().unwrap_or("?"),
            if old { " (old configuration, draining)" } else { "" },
            server["target"].as_str().unwrap_or("")
        );
        let _ = writeln!(out, "  started {} instance(s), {} restart(s)", server["starts"], server["restarts"]);
        if let Some(e) = server["last_error"].as_str() {
            let _ = writeln!(out, "  last error: {e}");
        }
        let instances = server["instances"].as_array().cloned().unwrap_or_default();
        if instances.is_empty() {
            let _ = writeln!(out, "  no instance running (one starts with the first call)");
        }
        for i in &instances {
            let at = match (i["pid"].as_u64(), i["url"].as_str()) {
                (Some(pid), _) => format!("pid {pid}"),
                (None, Some(url)) => url.to_string(),
                _ => "-".to_string(),
            };
            let _ = writeln!(
                out,
                "  instance {} [{}] {at}, up {}, {} call(s) in flight{}",
                i["label"].as_str().unwrap_or("?"),
                i["pool"].as_str().unwrap_or("?"),
                ms(&i["uptime_ms"]),
                i["inflight"],
                if i["ready"] == true { "" } else { ", starting" }
            );
        }
        for c in server["sessions"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "  session {} {}, up {}, {} call(s) in flight, {} waiting",
                c["label"].as_str().unwrap_or("?"),
                c["client"].as_str().map_or("(client not initialised yet)".into(), printable),
                ms(&c["uptime_ms"]),
                c["inflight"],
                c["waiting"]
            );
        }
    }
    for b in s["broken"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "\nserver {}: cannot be used: {}",
            b["name"].as_str().unwrap_or("?"),
            b["error"].as_str().unwrap_or("")
        );
    }
    let recent = s["recent_errors"].as_array().cloned().unwrap_or_default();
    if !recent.is_empty() {
        let shown = recent.len().min(RECENT_SHOWN);
        let _ = writeln!(
            out,
            "
recent warnings and errors (the last {shown} of {}; all in --json):",
            recent.len()
        );
        for r in &recent[recent.len() - shown..] {
            let secs = r["at_ms"].as_u64().unwrap_or(0) / 1000 % 86_400;
            let _ = writeln!(
                out,
                "  {:02}:{:02}:{:02} UTC {} {}",
                secs / 3600,
                secs / 60 % 60,
                secs % 60,
                r["level"].as_str().unwrap_or("?"),
                printable(r["message"].as_str().unwrap_or(""))
            );
        }
    }
    out
}

/// How many of the recent warnings and errors the status text shows.
const RECENT_SHOWN: usize = 10;

fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min", ms / 60_000),
        _ => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text_names_servers_instances_and_sessions() {
        let s = serde_json::json!({
            "pid": 7, "version": "0.1.0", "config": "/c.toml", "socket": "/s.sock", "log": null,
            "uptime_ms": 61_000, "plugins": ["hints.wasm"], "plugins_dir": "/p",
            "servers": [{"name": "fs", "target": "npx fs", "starts": 1, "restarts": 0, "last_error": null,
                "instances": [{"label": "fs#1", "pool": "default", "pid": 42, "url": null, "uptime_ms": 500, "inflight": 1, "ready": true}],
                "sessions": [{"label": "unix-3", "client": "claude-code 1.0", "uptime_ms": 1500, "inflight": 1, "waiting": 0}]},
                {"name": "tools", "target": "python3 ${DIR}/s.py", "client_env": ["DIR", "KEY"], "variants": ["tools@1"]},
                {"name": "tools@1", "template": "tools", "target": "python3 ${DIR}/s.py", "starts": 1, "restarts": 0,
                 "last_error": null, "instances": [], "sessions": []}],
            "retired": [], "broken": [{"name": "web", "error": "TOKEN is not set"}],
            "recent_errors": [{"at_ms": 3_723_000, "level": "WARN", "message": "server=fs: pool `x` is not configured"}]
        });
        let text = render(&s);
        for want in [
            "pid 7",
            "up 1 min",
            "log: stderr",
            "hints.wasm",
            "server fs: npx fs",
            "fs#1 [default] pid 42",
            "claude-code 1.0",
            "server web: cannot be used: TOKEN is not set",
            "server tools: python3 ${DIR}/s.py\n  one server per distinct set of client values of DIR, KEY (connect --env DIR,KEY); running: tools@1",
            "server tools@1: python3 ${DIR}/s.py\n  started 1 instance(s)",
            "recent warnings and errors (the last 1 of 1; all in --json):\n  01:02:03 UTC WARN server=fs: pool `x`",
        ] {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
    }

    #[test]
    fn a_client_name_cannot_add_lines_or_drive_the_terminal() {
        let s = serde_json::json!({
            "pid": 7, "version": "0.1.0", "config": "/c.toml", "socket": "/s.sock", "log": null, "uptime_ms": 1,
            "plugins": [], "plugins_dir": "/p", "retired": [], "broken": [],
            "servers": [{"name": "fs", "target": "npx fs", "starts": 1, "restarts": 0, "last_error": null, "instances": [],
                "sessions": [{"label": "http-3", "client": "evil\n\nserver fake: ok\u{1b}[31mRED\r", "uptime_ms": 1, "inflight": 0, "waiting": 0}]}],
            "recent_errors": [{"at_ms": 1, "level": "WARN", "message": "line\nforged"}]
        });
        let text = render(&s);
        assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
        assert!(!text.lines().any(|l| l.starts_with("server fake")), "a forged line:\n{text}");
        assert!(text.contains(r"evil\n\nserver fake: ok\u{1b}[31mRED\r"), "{text}");
        assert!(text.contains(r"line\nforged"), "{text}");
    }

    /// `switchyard daemon ARGS` as clap reads it.
    fn parse(argv: &[&str]) -> Result<DaemonArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            daemon: DaemonArgs,
        }
        use clap::Parser;
        Cli::try_parse_from(std::iter::once("daemon").chain(argv.iter().copied())).map(|c| c.daemon)
    }

    #[test]
    fn http_flag_alone_with_an_address_or_absent() {
        assert_eq!(parse(&[]).unwrap().http, None);
        assert_eq!(parse(&["--http"]).unwrap().http, Some(None));
        assert_eq!(parse(&["--http", "--detach"]).unwrap().http, Some(None));
        let at = |a: &str| Some(Some(a.parse::<SocketAddr>().unwrap()));
        assert_eq!(parse(&["--http", "127.0.0.1:9000"]).unwrap().http, at("127.0.0.1:9000"));
        assert_eq!(parse(&["--http=[::1]:9000"]).unwrap().http, at("[::1]:9000"));
        assert_eq!(parse(&["--http", "localhost:9000"]).unwrap().http, at("127.0.0.1:9000"));
        let e = parse(&["--http", "9000"]).unwrap_err().to_string();
        assert!(e.contains("`9000` is not an address and port") && e.contains("127.0.0.1:7070"), "{e}");
    }

    fn config(text: &str) -> Config {
        let mut c: Config = toml::from_str(text).unwrap();
        c.validate().unwrap();
        c
    }

    fn no_env(_: &str) -> Result<String, std::env::VarError> {
        Err(std::env::VarError::NotPresent)
    }

    #[test]
    fn the_effective_front_is_the_config_s_with_the_flag_over_its_listen() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("state/sy-1.token");
        let front = |flag: Option<Option<SocketAddr>>, text: &str| http_front_with(flag, &config(text), &file, &no_env);
        let addr = |a: &str| Some(Some(a.parse::<SocketAddr>().unwrap()));
        // Neither: no front, and no token file made.
        assert!(front(None, "").unwrap().is_none());
        assert!(!file.exists());
        // --http alone: every default, with the generated token (made now, kept for later starts).
        let (h, t) = front(Some(None), "").unwrap().unwrap();
        assert_eq!(h, HttpConfig::default());
        assert_eq!(h.listen.to_string(), "127.0.0.1:7070");
        assert!(t.expose().starts_with("sy_"));
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), t.expose());
        // [http] alone, and with --http: the flag's address wins, the rest of [http] stays.
        let text = "[http]\nlisten = \"127.0.0.1:8000\"\nkeepalive_ms = 5000\nallowed_hosts = [\"a.example\"]\n";
        let (h, t2) = front(None, text).unwrap().unwrap();
        assert_eq!((h.listen.port(), h.keepalive_ms), (8000, 5000));
        assert_eq!(t2, t);
        let (h, _) = front(Some(None), text).unwrap().unwrap();
        assert_eq!(h.listen.port(), 8000);
        let (h, _) = front(addr("[::1]:9000"), text).unwrap().unwrap();
        assert_eq!((h.listen.to_string().as_str(), h.keepalive_ms, h.allowed_hosts.len()), ("[::1]:9000", 5000, 1));
        // The config's own token wins over the file.
        let own = "[http]\ntoken = \"${SY_T}\"\n";
        let env = |n: &str| if n == "SY_T" { Ok("mine".to_string()) } else { no_env(n) };
        let (_, t3) = http_front_with(addr("0.0.0.0:9000"), &config(own), &file, &env).unwrap().unwrap();
        assert_eq!(t3.expose(), "mine");
        let e = format!("{:#}", http_front_with(None, &config(own), &file, &no_env).unwrap_err());
        assert!(e.contains("[http] token uses ${SY_T}, which is not set"), "{e}");
        let empty = |_: &str| Ok(String::new());
        let e = format!("{:#}", http_front_with(None, &config(own), &file, &empty).unwrap_err());
        assert!(e.contains("[http] token is empty once ${SY_T} is read"), "{e}");
    }

    #[test]
    fn an_address_other_machines_reach_needs_the_user_s_own_token() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("t.token");
        for a in ["0.0.0.0:7070", "[::]:7070", "192.168.1.5:7070"] {
            let flag = Some(Some(a.parse::<SocketAddr>().unwrap()));
            let e = format!("{:#}", http_front_with(flag, &config("[http]\n"), &file, &no_env).unwrap_err());
            assert!(e.starts_with(&format!("--http {a} is reachable from other machines")), "{e}");
            assert!(e.contains("token = \"${SWITCHYARD_TOKEN}\"") && e.contains("or listen on 127.0.0.1"), "{e}");
            let e = format!("{:#}", http_front_with(flag, &config(""), &file, &no_env).unwrap_err());
            assert!(e.contains("reachable from other machines"), "{e}");
        }
        assert!(!file.exists(), "a refused front makes no token");
        // The flag may bring a front back to loopback.
        let text = "[http]\nlisten = \"127.0.0.1:1\"\n";
        let flag = Some(Some("127.0.0.1:2".parse::<SocketAddr>().unwrap()));
        assert_eq!(http_front_with(flag, &config(text), &file, &no_env).unwrap().unwrap().0.listen.port(), 2);
    }
}
