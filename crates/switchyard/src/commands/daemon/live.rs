//! The daemon's own settings, live: `[http]` (the front: its address, tokens, hosts, limits) and
//! `[daemon]` (`idle_exit_ms`) take effect on save, as servers do, without touching a server.
//!
//! A changed `[http]` replaces the front: the new one is bound (the old one first stopped when
//! they share the address), and HTTP clients start their sessions again, as after any restart
//! of a Streamable HTTP server; the servers and the socket's sessions go on. A front that cannot
//! be served (the address taken, a token variable that is not set) leaves the front in force as
//! it was, and says why.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use switchyard_config::{Config, DaemonConfig, HttpConfig, Tolerated};
use switchyard_router::downstream::http::token::Tokens;
use switchyard_router::registry::Servers;

use super::reload::note;

/// What of the config file the daemon itself runs by.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Settings {
    http: Option<HttpConfig>,
    /// Why `[http]` does not load, when it does not (then the front in force stays).
    broken_http: Option<String>,
    daemon: DaemonConfig,
}

impl Settings {
    pub(super) fn of(loaded: &Tolerated) -> Settings {
        Settings {
            http: loaded.config.http.clone(),
            broken_http: loaded.broken_http.clone(),
            daemon: loaded.config.daemon.clone(),
        }
    }
}

/// A front being served.
struct Running {
    /// The `[http]` it serves (with `--http`'s address over its `listen`).
    http: HttpConfig,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The front and the idle exit, following the settings.
pub(super) struct Live {
    router: Arc<Servers>,
    /// `--http`: a front whatever the file says, at this address when one is given.
    flag: Option<Option<SocketAddr>>,
    config_path: PathBuf,
    shutdown: CancellationToken,
    front: Option<Running>,
    settings: Settings,
    /// How long without a session before the daemon exits (zero: never).
    idle: watch::Sender<Duration>,
}

impl Live {
    /// The settings at a start: the front is served when asked for. A front the command line
    /// asks for that cannot be served stops the start; one only the file asks for is left out,
    /// and said.
    pub(super) async fn start(
        router: Arc<Servers>,
        flag: Option<Option<SocketAddr>>,
        config_path: PathBuf,
        settings: Settings,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Live> {
        let (idle, _) = watch::channel(Duration::ZERO);
        let mut live = Live { router, flag, config_path, shutdown, front: None, settings: settings.clone(), idle };
        if let Some(why) = &settings.broken_http {
            live.say_front_problem(&format!("[http] does not load, so the HTTP front is not served: {why}"));
        }
        let served = match live.wanted(&settings) {
            Ok(Some(wanted)) => live.bind(wanted).await.map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        match served {
            Ok(front) => live.front = front,
            Err(e) if flag.is_some() => return Err(e),
            Err(e) => live.say_front_problem(&format!("the HTTP front is not served: {e:#}")),
        }
        live.set_idle();
        Ok(live)
    }

    /// A receiver of the idle exit's length (zero: never), for [`super::exit_when_idle`].
    pub(super) fn idle(&self) -> watch::Receiver<Duration> {
        self.idle.subscribe()
    }

    /// Follows the settings `changes` sends until the daemon stops; then waits (bounded by the
    /// front's own grace) for the front to finish.
    pub(super) async fn follow(mut self, mut changes: watch::Receiver<Settings>) {
        loop {
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let settings = changes.borrow_and_update().clone();
                    self.apply(settings).await;
                }
                _ = self.shutdown.cancelled() => break,
            }
        }
        if let Some(front) = self.front.take() {
            let _ = front.task.await;
        }
    }

    /// Brings the front and the idle exit to `settings`.
    async fn apply(&mut self, settings: Settings) {
        if settings == self.settings {
            return;
        }
        let old = std::mem::replace(&mut self.settings, settings.clone());
        if old.daemon != settings.daemon {
            tracing::info!("[daemon] changed; applying it");
        }
        if let Some(why) = &settings.broken_http {
            self.say_front_problem(&format!("[http] does not load, so the HTTP front in force stays as it was: {why}"));
        } else if old.http != settings.http || old.broken_http.is_some() {
            self.replace_front(&settings).await;
        }
        self.set_idle();
    }

    /// Stops the front in force and serves the one `settings` ask for.
    async fn replace_front(&mut self, settings: &Settings) {
        let wanted = match self.wanted(settings) {
            Ok(w) => w,
            Err(e) => return self.say_front_problem(&format!("[http] changed, but the front in force stays: {e:#}")),
        };
        if wanted.is_some() && self.front.as_ref().map(|f| &f.http) == wanted.as_ref().map(|(h, _)| h) {
            // The same front (what changed is what `--http` overrides).
            note(&self.router, "http_error", None);
            return;
        }
        // The new front may want the old one's address: the old one goes first.
        if let Some(old) = self.front.take() {
            tracing::info!(
                "[http] changed: the HTTP front on {} stops; its clients start their sessions again",
                old.http.listen
            );
            old.stop.cancel();
            let _ = old.task.await;
            *self.router.http.write().expect("lock") = None;
        }
        let Some(wanted) = wanted else {
            note(&self.router, "http_error", None);
            return;
        };
        match self.bind(wanted).await {
            Ok(front) => {
                self.front = Some(front);
                note(&self.router, "http_error", None);
            }
            Err(e) => self.say_front_problem(&format!("[http] changed, but the HTTP front cannot be served: {e:#}")),
        }
    }

    /// The front `settings` ask for, checked, with its tokens (None: none is asked for).
    fn wanted(&self, settings: &Settings) -> anyhow::Result<Option<(HttpConfig, Tokens)>> {
        super::http_front(self.flag, &config_with(settings), &self.config_path)
    }

    /// Binds and serves a front.
    async fn bind(&self, (http, tokens): (HttpConfig, Tokens)) -> anyhow::Result<Running> {
        let addr = http.listen;
        let tcp = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                " (another program listens there; choose another address with --http ADDR or [http] listen)"
            } else {
                ""
            };
            anyhow::anyhow!("cannot serve HTTP on {addr}: {e}{hint}")
        })?;
        let bound = tcp.local_addr().unwrap_or(addr);
        tracing::info!("serving Streamable HTTP on http://{bound}/mcp/NAME");
        super::raise_open_files();
        let stop = self.shutdown.child_token();
        let task = tokio::spawn(switchyard_router::downstream::http::serve(
            self.router.clone(),
            http.clone(),
            tokens,
            tcp,
            stop.clone(),
        ));
        Ok(Running { http, stop, task })
    }

    fn say_front_problem(&self, why: &str) {
        // A daemon reads the environment it was started with, not the shell's of the user.
        let hint = if why.contains("environment") {
            format!(
                " (this daemon, pid {}, has the environment of the client that started it: set the variable where the daemon starts, then `switchyard stop` and start it again)",
                std::process::id()
            )
        } else {
            String::new()
        };
        tracing::error!("{why}{hint}");
        note(&self.router, "http_error", Some(format!("{why}{hint}").into()));
    }

    /// The idle exit for the settings in force: none while HTTP is served (an HTTP client
    /// cannot start a daemon, as `connect` does).
    fn set_idle(&self) {
        let configured = Duration::from_millis(self.settings.daemon.idle_exit_ms);
        let idle = if self.front.is_some() { Duration::ZERO } else { configured };
        if self.front.is_some() && !configured.is_zero() {
            tracing::info!("daemon.idle_exit_ms is not applied while HTTP is served");
        }
        self.idle.send_if_modified(|now| std::mem::replace(now, idle) != idle);
    }
}

/// A config with `settings`' `[http]`, for [`super::http_front`].
fn config_with(settings: &Settings) -> Config {
    Config { http: settings.http.clone(), ..Config::default() }
}
