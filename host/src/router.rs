//! The servers one router serves, by name: what a client joins, what status shows, and how a
//! server whose configuration changed hands its sessions over to its successor.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::anyhow;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::policy::Policy;
use crate::server::Server;
use crate::session::Registry;
use crate::target::Target;
use crate::upstream::remote::RemoteConnector;
use crate::upstream::{Connector, Spec, StdioConnector};

/// How often a retired server checks whether its last session has gone.
const RETIRED_CHECK: Duration = Duration::from_millis(200);

/// Where the router lives, for status.
#[derive(Debug, Clone, Default)]
pub struct About {
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    /// The log file (None: stderr).
    pub log: Option<PathBuf>,
}

/// One router: its servers by name, one plugin set for all, and their sessions.
pub struct Router {
    servers: RwLock<BTreeMap<String, Arc<Server>>>,
    /// Servers in the config that cannot be used, with why (a `${VAR}` that is not set, say).
    broken: RwLock<BTreeMap<String, String>>,
    /// Servers replaced or removed by a config change that still serve sessions.
    retired: Mutex<Vec<Arc<Server>>>,
    pub registry: Arc<Registry>,
    pub policy: Policy,
    pub about: About,
    /// Instances run under `switchyard supervise` (see `upstream::Spec::supervisor`).
    supervisor: Option<PathBuf>,
    started: Instant,
    pub shutdown: CancellationToken,
}

impl Router {
    pub fn new(policy: Policy, about: About, supervisor: Option<PathBuf>, shutdown: CancellationToken) -> Arc<Router> {
        Arc::new(Router {
            servers: RwLock::new(BTreeMap::new()),
            broken: RwLock::new(BTreeMap::new()),
            retired: Mutex::new(Vec::new()),
            registry: Arc::new(Registry::default()),
            policy,
            about,
            supervisor,
            started: Instant::now(),
            shutdown,
        })
    }

    /// Makes the server one single-server `config` describes (not yet serving).
    pub fn build(&self, config: &Config) -> anyhow::Result<Arc<Server>> {
        let target = config.target()?;
        let name = target.server().to_string();
        let connector: Arc<dyn Connector> = match target {
            Target::Command { server, command, args, env, cwd } => Arc::new(StdioConnector::new(Spec {
                server,
                command,
                args,
                env,
                cwd,
                max_message_bytes: config.limits.max_message_bytes,
                supervisor: self.supervisor.clone(),
            })),
            Target::Remote(remote) => Arc::new(RemoteConnector::new(remote).map_err(|e| anyhow!(e))?),
        };
        for warning in config.unreachable_pools(&self.policy.current().names()) {
            tracing::warn!(server = %name, "{warning}");
        }
        Ok(Server::new(config, &name, connector, self.policy.clone(), self.shutdown.child_token()))
    }

    /// Serves `server` under its name from now on (its upkeep starts). A server of that name
    /// already there is retired: see [`Router::retire`].
    pub fn add(self: &Arc<Self>, server: Arc<Server>, why: &str) {
        server.tasks.spawn(server.clone().maintain());
        server.tasks.spawn(server.clone().watch_policy());
        self.broken.write().expect("lock").remove(&server.name);
        let old = self.servers.write().expect("lock").insert(server.name.clone(), server);
        if let Some(old) = old {
            self.retire(old, why, true);
        }
    }

    /// Records a server of the config that cannot be used, and why; one of that name that was
    /// serving stops (its config is no longer what the file says).
    pub fn mark_broken(self: &Arc<Self>, name: &str, why: String) {
        self.broken.write().expect("lock").insert(name.to_string(), why.clone());
        if let Some(old) = self.servers.write().expect("lock").remove(name) {
            self.retire(old, &why, false);
        }
    }

    /// Takes a server out of the config.
    pub fn remove(self: &Arc<Self>, name: &str, why: &str) {
        self.broken.write().expect("lock").remove(name);
        if let Some(old) = self.servers.write().expect("lock").remove(name) {
            self.retire(old, why, false);
        }
    }

    /// A server leaves: new sessions no longer reach it. When it has a successor (`replaced`),
    /// its sessions that understand control lines are told to move (they reconnect once the
    /// calls they have in flight are answered), others stay until they end; the old instances
    /// stop when its last session has gone. A removed server ends its sessions at once.
    fn retire(self: &Arc<Self>, old: Arc<Server>, why: &str, replaced: bool) {
        if !replaced {
            tracing::info!(server = %old.name, "{why}: its sessions end and its instances stop");
            old.shutdown.cancel();
        } else {
            let told = self.registry.drain(&old, why);
            tracing::info!(server = %old.name, "{why}: new sessions use the new configuration; {told} session(s) asked to move, the old instances stop when their last session has gone");
        }
        self.retired.lock().expect("lock").push(old.clone());
        let router = self.clone();
        tokio::spawn(async move {
            loop {
                if old.hub.session_count() == 0 || old.shutdown.is_cancelled() {
                    break;
                }
                tokio::time::sleep(RETIRED_CHECK).await;
            }
            stop_server(&old).await;
            router.retired.lock().expect("lock").retain(|s| !Arc::ptr_eq(s, &old));
        });
    }

    /// The server a client asks for (None: the only one there is).
    pub fn lookup(&self, name: Option<&str>) -> Result<Arc<Server>, String> {
        let servers = self.servers.read().expect("lock");
        let config = match &self.about.config {
            Some(p) => format!(" in {}", p.display()),
            None => String::new(),
        };
        let invalid =
            name.filter(|n| !servers.contains_key(*n)).and_then(|n| crate::config::check_server_name(n).err());
        match name {
            Some(n) if let Some(rule) = invalid => {
                // Never echoed whole: it came from a client, and goes into the log.
                let shown: String = n.chars().take(64).collect();
                Err(format!(
                    "{shown:?}{} is not a server name{config}: {rule}",
                    if n.chars().count() > 64 { "..." } else { "" },
                ))
            }
            Some(n) => {
                if let Some(s) = servers.get(n) {
                    return Ok(s.clone());
                }
                if let Some(why) = self.broken.read().expect("lock").get(n) {
                    // A daemon reads the environment it was started with, not this client's.
                    let env = if why.contains("environment") && self.about.config.is_some() {
                        format!(
                            " (this daemon, pid {}, has the environment of the client that started it; after setting the variable where the daemon starts, `switchyard stop` and connect again)",
                            std::process::id()
                        )
                    } else {
                        String::new()
                    };
                    return Err(format!("server `{n}`{config} cannot be used: {why}{env}"));
                }
                let known: Vec<&str> = servers.keys().map(String::as_str).collect();
                Err(format!(
                    "no server named `{n}`{config}; it has: {}. Add a [servers.{n}] table to the config (the daemon picks it up on save)",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ))
            }
            None => match servers.len() {
                1 => Ok(servers.values().next().expect("one").clone()),
                0 => Err(format!("no server is configured{config}")),
                n => Err(format!(
                    "this router serves {n} servers{config} ({}); name one: switchyard connect NAME",
                    servers.keys().cloned().collect::<Vec<_>>().join(", ")
                )),
            },
        }
    }

    /// The servers serving now, by name.
    pub fn servers(&self) -> Vec<Arc<Server>> {
        self.servers.read().expect("lock").values().cloned().collect()
    }

    /// Everything `switchyard status --json` shows.
    pub fn status(&self) -> Value {
        let sessions = self.registry.sessions();
        let with_sessions = |server: &Arc<Server>| {
            let mut v = server.status();
            let mine: Vec<Value> =
                sessions.iter().filter(|s| Arc::ptr_eq(s.server(), server)).map(|s| s.status()).collect();
            v["sessions"] = Value::Array(mine);
            v
        };
        let servers: Vec<Value> = self.servers().iter().map(with_sessions).collect();
        let retired: Vec<Value> = self.retired.lock().expect("lock").iter().map(with_sessions).collect();
        let broken: Vec<Value> =
            self.broken.read().expect("lock").iter().map(|(name, why)| json!({"name": name, "error": why})).collect();
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        json!({
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "config": path(&self.about.config),
            "socket": path(&self.about.socket),
            "log": path(&self.about.log),
            "uptime_ms": self.started.elapsed().as_millis() as u64,
            "plugins": self.policy.current().names(),
            "plugins_dir": self.policy.dir().map(|d| d.display().to_string()),
            "servers": servers,
            "retired": retired,
            "broken": broken,
        })
    }

    /// Stops every server (live and retired) and waits for their tasks, at most `grace`.
    pub async fn stop(&self, grace: Duration) {
        let mut all = self.servers();
        all.extend(self.retired.lock().expect("lock").iter().cloned());
        let mut set = tokio::task::JoinSet::new();
        for server in all {
            set.spawn(async move {
                server.shutdown.cancel();
                stop_server(&server).await;
                server.tasks.close();
                if tokio::time::timeout(grace, server.tasks.wait()).await.is_err() {
                    tracing::warn!(server = %server.name, "some tasks did not finish within {grace:?}");
                }
            });
        }
        while set.join_next().await.is_some() {}
    }
}

/// Stops a server's instances and its upkeep.
async fn stop_server(server: &Arc<Server>) {
    server.shutdown.cancel();
    server.stop().await;
}
