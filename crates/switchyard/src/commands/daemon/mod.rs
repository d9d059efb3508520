//! `switchyard daemon`: one long-lived router per config file, which owns every server in it and
//! outlives its clients (they join through `switchyard connect NAME`); and how `status`, `stop`
//! and `--detach` find a running one and ask it.

mod detach;
mod live;
mod reload;
pub(crate) mod start;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use switchyard_config::paths;
use switchyard_config::{Config, HttpConfig};
use switchyard_policy::Policy;
use switchyard_router::control::{self, Hello, Reply};
use switchyard_router::downstream;
use switchyard_router::downstream::http::token::{self, Tokens};
use switchyard_router::registry::{About, Servers};

use detach::{detach, detached_child};
use live::{Live, Settings};
use reload::{Applied, reread_on_unknown_names, watch_config};

/// How long stopping may take before the daemon stops waiting for its tasks.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(8);
#[cfg(unix)]
/// How often the daemon checks that its socket file is still there and still its own, besides
/// whenever its directory changes (and every 2 s when that directory cannot be watched).
const SOCKET_CHECK: Duration = Duration::from_secs(60);
#[cfg(unix)]
const SOCKET_CHECK_UNWATCHED: Duration = Duration::from_secs(2);

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DaemonArgs {
    /// The config file with every server (default: ~/.config/switchyard/switchyard.toml).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The socket to serve (default: one per config file, in /run/user/UID/switchyard or /tmp/switchyard-UID).
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
    /// Start in the background, detached from this terminal, logging to a file; return once it
    /// accepts connections (at once when a daemon already serves that socket).
    #[arg(long)]
    pub(crate) detach: bool,
    /// The plugins directory (default: plugins/ beside the config file).
    #[arg(long, value_name = "DIR")]
    pub(crate) plugins: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace (default: RUST_LOG, else info).
    #[arg(long, value_name = "LEVEL")]
    pub(crate) log_level: Option<String>,
    /// Also serve every server over Streamable HTTP at http://ADDR/mcp/NAME, with the config's
    /// [http] settings (ADDR over its `listen`; without ADDR: its `listen`, else 127.0.0.1:7070).
    /// Clients send `Authorization: Bearer TOKEN`; `switchyard token` prints it.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, value_parser = switchyard_config::parse_listen)]
    pub(crate) http: Option<Option<SocketAddr>>,
    #[command(flatten)]
    pub(crate) record: crate::commands::run::RecordArgs,
    /// Set by `--detach` for the process it starts: log to LOG, start a session of its own,
    /// report readiness on stdout.
    #[arg(long, hide = true, value_name = "LOG")]
    pub(crate) detached_child: Option<PathBuf>,
}

/// Which daemon `status` and `stop` talk to.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Which {
    /// The daemon serving this config file (default: ~/.config/switchyard/switchyard.toml).
    #[arg(long, value_name = "FILE", conflicts_with = "socket")]
    pub(crate) config: Option<PathBuf>,
    /// The daemon serving this socket.
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
}

/// The config file (absolute, links resolved) and the socket of a daemon.
pub(super) fn locate(config: Option<&Path>, socket: Option<&Path>) -> anyhow::Result<(Option<PathBuf>, PathBuf)> {
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
pub(crate) fn daemon_blocking(args: DaemonArgs) -> anyhow::Result<()> {
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
    let telemetry = start::telemetry(&config);
    crate::commands::run::init_tracing(args.log_level.as_deref(), &telemetry)?;
    run_blocking(&args, config, socket, None, || {})
}

/// The HTTP front this daemon serves, if any: the config's `[http]` with `--http ADDR` over its
/// `listen` (`--http` alone: `[http]` as it is, or every default), checked, and the bearer token
/// its clients must send (`[http] token`, else the generated one of `canonical`, the config
/// file's canonical path). None when neither `[http]` nor `--http` asks for a front.
fn http_front(
    flag: Option<Option<SocketAddr>>,
    config: &Config,
    canonical: &Path,
) -> anyhow::Result<Option<(HttpConfig, Tokens)>> {
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
) -> anyhow::Result<Option<(HttpConfig, Tokens)>> {
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
    let named = token::named_for_daemon(&http, &token, env)?;
    for (name, t) in named.iter().filter(|(_, t)| t.expose().len() < MIN_TOKEN_CHARS) {
        tracing::warn!(
            "[http.tokens] {name} is only {} characters long: anyone who may reach {} can guess it; use {MIN_TOKEN_CHARS} or more random characters",
            t.expose().len(),
            http.listen
        );
    }
    switchyard_router::upstream::stdio::withhold(http.token_variables());
    Ok(Some((http, Tokens { daemon: token, named })))
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
    let started = std::cell::Cell::new(false);
    let ready = || {
        started.set(true);
        start::clear_failure(&config);
        ready();
    };
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(crate::commands::run::on_signal(shutdown.clone()));
        let record = &args.record;
        serve(args.plugins.clone(), record, config.clone(), socket, log, args.http, shutdown, ready).await
    });
    runtime.shutdown_timeout(Duration::from_millis(200));
    // The last spans go out before exit (a bounded wait).
    switchyard_telemetry::flush();
    if let Err(e) = &result
        && !started.get()
    {
        start::note_failure(&config, e);
    }
    result
}

/// The daemon: loads the config, serves its socket (and its HTTP front, with `[http]` or
/// `http_flag`, which is `--http`), follows edits of the config, and stops its servers when
/// `shutdown` fires, when asked to (`switchyard stop`), or when idle too long.
#[allow(clippy::too_many_arguments)]
async fn serve(
    plugins: Option<PathBuf>,
    record: &crate::commands::run::RecordArgs,
    config_path: PathBuf,
    socket: PathBuf,
    log: Option<PathBuf>,
    http_flag: Option<Option<SocketAddr>>,
    shutdown: CancellationToken,
    ready: impl FnOnce(),
) -> anyhow::Result<()> {
    let start = start::load(&config_path)?;
    let config = &start.loaded.config;
    // A front the command line asks for that cannot be served stops the daemon before anything
    // starts (again below, once bound); one the file asks for is left out, and said.
    if http_flag.is_some() {
        http_front(http_flag, config, &config_path)?;
    }
    let policy = Policy::start(config, plugins, shutdown.child_token()).await?;
    if let Some(file) = &record.record_calls {
        policy.attach_recorder(switchyard_policy::record::Recorder::start(file, record.record_arguments)?);
    }
    // Without a state directory the answers are kept in memory only: said, not fatal.
    let answers = switchyard_config::paths::answers_for(&config_path)
        .map_err(|e| tracing::warn!("servers' answers are not kept between runs: {e:#}"))
        .ok();
    let audit = crate::commands::audit::start(&config.audit, || paths::audit_for(&config_path))?;
    let about = About { config: Some(config_path.clone()), socket: Some(socket.clone()), log, answers, audit };
    let router = Servers::new(policy, about, cfg!(unix).then(switchyard_os::exe::spawnable), shutdown.clone());
    let mut applied = Applied::default();
    applied.audit = Some(config.audit.clone());
    applied.telemetry = Some(config.telemetry.clone());
    applied.apply(&router, &start.loaded, &start.text);
    if let Some(why) = &start.fallback {
        reload::note(
            &router,
            "config_error",
            Some(format!("{why}; the config in force is the last one that loaded").into()),
        );
    }
    let (settings, changes) = tokio::sync::watch::channel(Settings::of(&start.loaded));
    applied.settings = Some(settings);
    let applied = Arc::new(std::sync::Mutex::new(applied));
    reread_on_unknown_names(&router, config_path.clone(), applied.clone());
    let bound = match downstream::bind(&socket).await {
        Ok(bound) => bound,
        // The hint only where a daemon does serve it (not for a path that is no socket at all).
        Err(e) if ask_daemon(&socket, &Hello::Status).is_ok() => {
            anyhow::bail!("{e:#}\n(`switchyard status --socket {}` shows the daemon serving it)", socket.display())
        }
        Err(e) => return Err(e),
    };
    #[cfg(unix)]
    let file = bound.file();
    let live =
        Live::start(router.clone(), http_flag, config_path.clone(), Settings::of(&start.loaded), shutdown.clone())
            .await
            .inspect_err(|_| {
                // The socket just bound is ours: leave none behind for `status` and `stop` to find.
                let _ = std::fs::remove_file(&socket);
            })?;
    let idle = live.idle();
    let listener = tokio::spawn(downstream::listen(router.clone(), bound, socket.clone(), shutdown.clone()));
    // A named pipe cannot be removed from under its daemon: only a socket file is kept.
    #[cfg(unix)]
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
    let front = tokio::spawn(live.follow(changes));
    tokio::spawn(exit_when_idle(router.clone(), idle));
    shutdown.cancelled().await;
    let _ = listener.await;
    let _ = front.await;
    router.stop(SHUTDOWN_GRACE).await;
    tracing::info!("switchyard daemon stopped");
    Ok(())
}

/// Lets the process open more files than the usual soft limit of 1024 (up to its hard limit,
/// at most [`OPEN_FILES`]): each HTTP client holds a connection.
fn raise_open_files() {
    // Not the whole hard limit (often 2^20): the servers started later inherit it, and some
    // close every descriptor up to it before they exec.
    if let Err(e) = switchyard_os::process::raise_open_files(OPEN_FILES) {
        tracing::info!("could not raise the open-file limit to its maximum ({e}); many HTTP clients may be refused");
    }
}

/// The open-file soft limit a daemon serving HTTP asks for.
const OPEN_FILES: u64 = 65_536;

/// Watches the socket file: one removed (a cleaner of temporary files, a user) is made again, so
/// clients, `status` and `stop` still reach this daemon instead of starting a second one; one
/// taken by another daemon means this one can no longer be reached, and it stops.
///
/// The socket's directory is watched, so a change is seen at once and an idle daemon is not woken
/// to look; the slow check stays for what a watch can miss.
#[cfg(unix)]
async fn keep_socket(router: Arc<Servers>, socket: PathBuf, mut file: (u64, u64), shutdown: CancellationToken) {
    use notify::{RecursiveMode, Watcher};
    let (tx, mut changed) = tokio::sync::mpsc::channel::<()>(1);
    let name = socket.file_name().map(|n| n.to_os_string());
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(e) = event
            && !e.kind.is_access()
            && e.paths.iter().any(|p| p.file_name().map(|n| n.to_os_string()) == name)
        {
            let _ = tx.try_send(());
        }
    });
    let watched = watcher.and_then(|mut w| {
        w.watch(socket.parent().unwrap_or(Path::new("/")), RecursiveMode::NonRecursive)?;
        Ok(w)
    });
    let every = match &watched {
        Ok(_) => SOCKET_CHECK,
        Err(e) => {
            tracing::debug!(
                "cannot watch the socket's directory ({e}); checking the socket every {SOCKET_CHECK_UNWATCHED:?}"
            );
            SOCKET_CHECK_UNWATCHED
        }
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            Some(()) = changed.recv() => {}
            _ = shutdown.cancelled() => return,
        }
        match rustix::fs::lstat(&socket) {
            Ok(st) if downstream::unix::file_id(&st) == file => {}
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

/// Stops the router once it has had no session for as long as `idle` says (zero: never; it
/// changes with the settings).
async fn exit_when_idle(router: Arc<Servers>, mut idle: tokio::sync::watch::Receiver<Duration>) {
    let mut count = router.sessions.count();
    loop {
        let limit = *idle.borrow_and_update();
        let none = *count.borrow_and_update() == 0;
        tokio::select! {
            _ = tokio::time::sleep(limit), if none && !limit.is_zero() => {
                if *count.borrow() == 0 {
                    tracing::info!("no session for {} ms (idle_exit_ms); stopping", limit.as_millis());
                    router.shutdown.cancel();
                    return;
                }
            }
            changed = count.changed() => if changed.is_err() { return },
            changed = idle.changed() => if changed.is_err() { return },
        }
    }
}

/// Where the running daemon of `config` (canonical) serves HTTP, if it runs and does.
pub(crate) fn served_http(config: &Path) -> Option<SocketAddr> {
    let socket = paths::socket_for(config).ok()?;
    match ask_daemon(&socket, &Hello::Status).ok()? {
        Reply::Status { status } => status["http"]["listen"].as_str()?.parse().ok(),
        _ => None,
    }
}

/// One hello and its reply, blocking (for `status`, `stop` and `--detach`).
pub(super) fn ask_daemon(socket: &Path, hello: &Hello) -> std::io::Result<Reply> {
    let line = switchyard_os::endpoint::request(socket, control::line(hello).as_bytes(), Duration::from_secs(10))?;
    control::reply(&line).map_err(std::io::Error::other)
}

/// Says that no daemon answers on `socket`.
pub(super) fn not_running(config: &Option<PathBuf>, socket: &Path, e: &std::io::Error) -> String {
    let of = config.as_ref().map(|c| format!(" for {}", c.display())).unwrap_or_default();
    format!("no switchyard daemon runs{of} (socket {}: {e})", socket.display())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (h, Tokens { daemon: t, named }) = front(Some(None), "").unwrap().unwrap();
        assert!(named.is_empty());
        assert_eq!(h, HttpConfig::default());
        assert_eq!(h.listen.to_string(), "127.0.0.1:7070");
        assert!(t.expose().starts_with("sy_"));
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), t.expose());
        // [http] alone, and with --http: the flag's address wins, the rest of [http] stays.
        let text = "[http]\nlisten = \"127.0.0.1:8000\"\nkeepalive_ms = 5000\nallowed_hosts = [\"a.example\"]\n";
        let (h, Tokens { daemon: t2, .. }) = front(None, text).unwrap().unwrap();
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
        assert_eq!(t3.daemon.expose(), "mine");
        let e = format!("{:#}", http_front_with(None, &config(own), &file, &no_env).unwrap_err());
        assert!(e.contains("[http] token uses ${SY_T}, which is not set"), "{e}");
        let empty = |_: &str| Ok(String::new());
        let e = format!("{:#}", http_front_with(None, &config(own), &file, &empty).unwrap_err());
        assert!(e.contains("[http] token is empty once ${SY_T} is read"), "{e}");
    }

    #[test]
    fn named_tokens_come_with_the_front_and_each_must_differ_from_the_others() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("state/sy-1.token");
        let env = |n: &str| match n {
            "SY_T" => Ok("sy_daemon_token".to_string()),
            "SY_A" => Ok("sy_laptop_token".to_string()),
            "SY_B" => Ok("sy_ci_token".to_string()),
            _ => no_env(n),
        };
        let text = "[http]\ntoken = \"${SY_T}\"\ntokens = { laptop = \"${SY_A}\", ci = \"${SY_B}\" }\n";
        let (_, tokens) = http_front_with(None, &config(text), &file, &env).unwrap().unwrap();
        let names: Vec<&str> = tokens.named.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["ci", "laptop"]);
        assert_eq!(tokens.named[1].1.expose(), "sy_laptop_token");
        // With the generated token too.
        let text = "[http.tokens]\nlaptop = \"${SY_A}\"\n";
        let (_, tokens) = http_front_with(None, &config(text), &file, &env).unwrap().unwrap();
        assert!(tokens.daemon.expose().starts_with("sy_") && tokens.named.len() == 1);
        for (text, says) in [
            ("[http.tokens]\na = \"${SY_A}\"\nb = \"${SY_A}\"\n", "[http.tokens] a and b have the same value"),
            (
                "[http]\ntoken = \"${SY_T}\"\ntokens = { a = \"${SY_T}\" }\n",
                "[http.tokens] a has the daemon's own token",
            ),
        ] {
            let e = format!("{:#}", http_front_with(None, &config(text), &file, &env).unwrap_err());
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("sy_laptop_token") && !e.contains("sy_daemon_token"), "a value is shown: {e}");
        }
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
