//! The servers one router serves, by name: what a client joins, what status shows, how a
//! server whose configuration changed hands its sessions over to its successor, and the
//! variants of a template server (one with `client_env`), one per distinct set of client values.

mod groups;
mod templates;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::anyhow;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::server::Server;
use crate::session::Sessions;
use crate::upstream::remote::RemoteConnector;
use crate::upstream::target::Target;
use crate::upstream::{Connector, Spec, StdioConnector};
pub use groups::{GroupShown, Groups, Shown as GroupSessionShown};
use switchyard_config::Config;
use switchyard_core::metrics::{Live, LiveServer, Metrics};
use switchyard_policy::Policy;
pub use templates::VARIANT_IDLE;
use templates::{Redacting, Shown, Template, redact};

/// How long stopping waits for the audit log's last lines to reach the disk.
const AUDIT_FLUSH: Duration = Duration::from_secs(2);
/// How often a retired server checks whether its last session has gone.
const RETIRED_CHECK: Duration = Duration::from_millis(200);

/// Where the router lives, for status.
#[derive(Debug, Clone, Default)]
pub struct About {
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    /// The log file (None: stderr).
    pub log: Option<PathBuf>,
    /// Where the servers' answers are kept between runs (None: in memory only).
    pub answers: Option<PathBuf>,
    /// Where each call's end is logged (`[audit]`; None: off).
    pub audit: Option<Arc<switchyard_core::audit::AuditLog>>,
}

/// Starts what keeps a serving server as configured: its `min` instances, and its response to
/// a plugin change.
fn start_upkeep(server: &Arc<Server>) {
    server.tasks.spawn(server.clone().maintain());
    server.tasks.spawn(server.clone().watch_policy());
}

/// How a daemon brings its router to the config file as it is now (see [`Servers::reread`]).
pub type Reread = Box<dyn Fn(&Arc<Servers>) + Send + Sync>;

/// What `status` shows of the HTTP front serving now.
pub type HttpShown = Box<dyn Fn() -> Value + Send + Sync>;

/// One router: its servers by name, one plugin set for all, and their sessions.
pub struct Servers {
    servers: RwLock<BTreeMap<String, Arc<Server>>>,
    /// Servers with `client_env`, by name (never also in `servers`).
    templates: RwLock<BTreeMap<String, Arc<Template>>>,
    /// Servers in the config that cannot be used, with why (a `${VAR}` that is not set, say).
    broken: RwLock<BTreeMap<String, String>>,
    /// Servers replaced or removed by a config change that still serve sessions (with how a
    /// variant is shown).
    retired: Mutex<Vec<(Arc<Server>, Option<Shown>)>>,
    pub sessions: Arc<Sessions>,
    pub policy: Policy,
    pub about: About,
    /// Instances run under `switchyard supervise` (see `upstream::Spec::supervisor`).
    supervisor: Option<PathBuf>,
    started: Instant,
    pub shutdown: CancellationToken,
    /// What status shows of the HTTP front, when one is served (`listen`, `sessions`); the
    /// front that serves now sets it (a settings change may replace the front).
    pub http: RwLock<Option<HttpShown>>,
    /// Itself, for what it hands out that must reach it later (a server making its siblings).
    me: std::sync::Weak<Servers>,
    /// What the servers answered before (see [`crate::server::answers`]).
    answers: Arc<crate::server::answers::Answers>,
    /// What `/metrics` shows; its gauges read this router at each scrape.
    pub metrics: Arc<Metrics>,
    /// Output queued for every client of every server, against `limits.max_buffered_bytes`
    /// (the smallest a server sets).
    pub buffered: Arc<crate::peer::Buffered>,
    /// Brings the router to its config file as it is now (set by a daemon, which follows the
    /// file): asked before a name the router does not know is refused, since a client may come
    /// right after the file was saved (`switchyard wrap` adds a server and the client starts
    /// it at once), before the change was seen.
    pub reread: std::sync::OnceLock<Reread>,
    /// What the daemon says of itself in `status` beside its servers (by key: why its config
    /// file is not the one in force, why its HTTP front is not served), set and cleared by it.
    pub notes: RwLock<BTreeMap<&'static str, Value>>,
    /// The groups clients may connect to, and their live sessions.
    pub groups: Groups,
}

impl Servers {
    pub fn new(policy: Policy, about: About, supervisor: Option<PathBuf>, shutdown: CancellationToken) -> Arc<Servers> {
        let answers = Arc::new(crate::server::answers::Answers::open(about.answers.clone()));
        Arc::new_cyclic(|me: &std::sync::Weak<Servers>| {
            let (me, myself) = (me.clone(), me.clone());
            let metrics = Arc::new(Metrics::new(move || me.upgrade().map(|r| r.live()).unwrap_or_default()));
            policy.attach_metrics(&metrics);
            Servers {
                servers: RwLock::new(BTreeMap::new()),
                templates: RwLock::new(BTreeMap::new()),
                broken: RwLock::new(BTreeMap::new()),
                retired: Mutex::new(Vec::new()),
                sessions: Arc::new(Sessions::default()),
                policy,
                about,
                supervisor,
                started: Instant::now(),
                shutdown,
                http: RwLock::new(None),
                me: myself,
                answers,
                metrics,
                buffered: crate::peer::Buffered::new(usize::MAX),
                reread: std::sync::OnceLock::new(),
                notes: RwLock::new(BTreeMap::new()),
                groups: Groups::default(),
            }
        })
    }

    /// What is live, for the gauges of `/metrics`: every server (variants and retired ones
    /// under their name), its instances and calls in flight, and the sessions.
    fn live(&self) -> Live {
        let mut all = self.servers();
        all.extend(self.variants().into_iter().map(|(s, _)| s));
        all.extend(self.retired.lock().expect("lock").iter().map(|(s, _)| s.clone()));
        let all = with_siblings(all);
        let servers = all
            .iter()
            .map(|s| {
                let instances = s.all_instances();
                LiveServer {
                    name: s.name.clone(),
                    inflight: instances.iter().map(|i| i.inflight()).sum(),
                    instances: instances.iter().map(|i| (i.pool().to_string(), i.is_ready())).collect(),
                    repeating: s.calls.repeating(),
                    silent: s.calls.silent(std::time::Duration::from_millis(s.limits.liveness_ms.max(1))),
                }
            })
            .collect();
        let sessions = self
            .sessions
            .list()
            .iter()
            .map(|s| (s.server().name.clone(), s.transport().to_string(), s.waiting()))
            .collect();
        let buffered_bytes = self.buffered.total() as u64;
        Live { servers, sessions, buffered_bytes }
    }

    /// Makes the server one single-server `config` describes (not yet serving). Clients whose
    /// profile differs from the first one's get siblings of it, made from the same config.
    pub fn build(&self, config: &Config) -> anyhow::Result<Arc<Server>> {
        let server = self.build_one(config)?;
        let (me, config) = (self.me.clone(), config.clone());
        server.allow_siblings(Box::new(move |_label| {
            let router = me.upgrade().ok_or_else(|| anyhow!("switchyard is shutting down"))?;
            let sibling = router.build_one(&config)?;
            start_upkeep(&sibling);
            Ok(sibling)
        }));
        Ok(server)
    }

    /// [`Servers::build`] of one server, without siblings.
    fn build_one(&self, config: &Config) -> anyhow::Result<Arc<Server>> {
        config.refuse_client_env()?;
        // A variant's header values read its client's values before the environment.
        let client = &config.server.client_values.0;
        let (target, warnings) = Target::resolve(config, &|name| match client.get(name) {
            Some(v) => Ok(v.clone()),
            None => std::env::var(name),
        })?;
        for w in warnings {
            tracing::warn!("{w}");
        }
        let name = target.server().to_string();
        let command = matches!(target, Target::Command { .. });
        let connector: Arc<dyn Connector> = match target {
            Target::Command { server, command, args, env, cwd } => Arc::new(StdioConnector::new(Spec {
                server,
                command,
                args,
                env,
                cwd,
                max_message_bytes: config.limits.max_message_bytes,
                supervisor: self.supervisor.clone(),
                // A variant's failure is logged by `Redacting`, without the client's values.
                log_start_failure: client.is_empty(),
            })),
            Target::Remote(remote) => {
                Arc::new(RemoteConnector::new(remote).map_err(|e| anyhow!(e))?.with_metrics(self.metrics.clone()))
            }
        };
        let connector: Arc<dyn Connector> = if client.is_empty() {
            connector
        } else {
            Arc::new(Redacting { inner: connector, values: client.clone(), log: command })
        };
        for warning in config.unreachable_pools(&self.policy.current().names()) {
            tracing::warn!(server = %name, "{warning}");
        }
        // One budget for the output of every session of every server.
        self.buffered.lower_budget(config.limits.max_buffered_bytes);
        let server = Server::new(
            config,
            &name,
            connector,
            self.policy.clone(),
            self.metrics.clone(),
            self.buffered.clone(),
            self.shutdown.child_token(),
        );
        // Keyed by all that makes the server what it is, hashed. A server made for a client's
        // values (a variant) keeps none: its answers may hold them, and they stay off the disk.
        if client.is_empty() {
            let launch = serde_json::to_string(&config.server.launch).unwrap_or_default();
            let key = crate::server::answers::digest(&[&name, &launch]);
            server.keep_answers(self.answers.clone(), key);
        }
        if let Some(audit) = &self.about.audit {
            server.audit_into(audit.clone());
        }
        Ok(server)
    }

    /// Serves `server` under its name from now on (its upkeep starts). A server of that name
    /// already there is retired: see [`Servers::retire`].
    pub fn add(self: &Arc<Self>, server: Arc<Server>, why: &str) {
        start_upkeep(&server);
        self.broken.write().expect("lock").remove(&server.name);
        let template = self.templates.write().expect("lock").remove(&server.name);
        if let Some(old) = self.servers.read().expect("lock").get(&server.name) {
            server.replaces(old);
        }
        let old = self.servers.write().expect("lock").insert(server.name.clone(), server);
        if let Some(old) = old {
            self.retire(old, why, true, None);
        }
        if let Some(t) = template {
            self.retire_template(&t, why, true);
        }
    }

    /// Records a server of the config that cannot be used, and why; one of that name that was
    /// serving stops (its config is no longer what the file says).
    pub fn mark_broken(self: &Arc<Self>, name: &str, why: String) {
        self.broken.write().expect("lock").insert(name.to_string(), why.clone());
        if let Some(old) = self.servers.write().expect("lock").remove(name) {
            self.retire(old, &why, false, None);
        }
        if let Some(t) = self.templates.write().expect("lock").remove(name) {
            self.retire_template(&t, &why, false);
        }
    }

    /// Takes a server out of the config.
    pub fn remove(self: &Arc<Self>, name: &str, why: &str) {
        self.broken.write().expect("lock").remove(name);
        if let Some(old) = self.servers.write().expect("lock").remove(name) {
            self.retire(old, why, false, None);
        }
        if let Some(t) = self.templates.write().expect("lock").remove(name) {
            self.retire_template(&t, why, false);
        }
    }

    /// A server leaves: new sessions no longer reach it. When it has a successor (`replaced`),
    /// its sessions that understand control lines are told to move (they reconnect once the
    /// calls they have in flight are answered), others stay until they end; the old instances
    /// stop when its last session has gone. A removed server ends its sessions at once.
    fn retire(self: &Arc<Self>, old: Arc<Server>, why: &str, replaced: bool, shown: Option<Shown>) {
        let of = shown.as_ref().map(|s| format!(" ({})", s.label)).unwrap_or_default();
        if !replaced {
            tracing::info!(server = %old.name, "{why}{of}: its sessions end and its instances stop");
            // Sessions still on an older configuration of it (HTTP ones, which are not moved
            // when a server is edited) end too: the server is gone, not replaced.
            let mut gone: Vec<Arc<Server>> = self
                .retired
                .lock()
                .expect("lock")
                .iter()
                .map(|(s, _)| s.clone())
                .filter(|s| s.name == old.name)
                .collect();
            gone.push(old.clone());
            for s in with_siblings(gone) {
                s.removed.store(true, std::sync::atomic::Ordering::Release);
                s.shutdown.cancel();
            }
        } else {
            let told = self.sessions.drain(&old, why);
            tracing::info!(server = %old.name, "{why}{of}: new sessions use the new configuration; {told} session(s) asked to move, the old instances stop when their last session has gone");
        }
        self.retired.lock().expect("lock").push((old.clone(), shown));
        let router = self.clone();
        tokio::spawn(async move {
            loop {
                let family = with_siblings(vec![old.clone()]);
                if family.iter().all(|s| s.hub.session_count() == 0) || old.shutdown.is_cancelled() {
                    break;
                }
                tokio::time::sleep(RETIRED_CHECK).await;
            }
            stop_server(&old).await;
            router.retired.lock().expect("lock").retain(|(s, _)| !Arc::ptr_eq(s, &old));
        });
    }

    /// The server a client asks for (None: the only one there is). `env` holds the values the
    /// client sent: of a template, the client gets the variant for its values.
    pub fn lookup(self: &Arc<Self>, name: Option<&str>, env: &BTreeMap<String, String>) -> Result<Arc<Server>, String> {
        if let Some(n) = name
            && !self.knows(n)
            && switchyard_config::check_server_name(n).is_ok()
            && let Some(reread) = self.reread.get()
        {
            reread(self);
        }
        loop {
            let template = {
                let templates = self.templates.read().expect("lock");
                match name {
                    Some(n) => templates.get(n).cloned(),
                    None if self.servers.read().expect("lock").is_empty() && templates.len() == 1 => {
                        templates.values().next().cloned()
                    }
                    None => None,
                }
            };
            let Some(t) = template else { break };
            if let Some(server) = self.variant(&t, env)? {
                return Ok(server);
            }
        }
        let servers = self.servers.read().expect("lock");
        let templates: Vec<String> = self.templates.read().expect("lock").keys().cloned().collect();
        let config = match &self.about.config {
            Some(p) => format!(" in {}", p.display()),
            None => String::new(),
        };
        let invalid =
            name.filter(|n| !servers.contains_key(*n)).and_then(|n| switchyard_config::check_server_name(n).err());
        let mut known: Vec<&str> = servers.keys().chain(&templates).map(String::as_str).collect();
        known.sort();
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
                    // A reason read from the file names it already, with the line.
                    let config = if self.about.config.as_ref().is_some_and(|p| why.contains(&p.display().to_string())) {
                        ""
                    } else {
                        config.as_str()
                    };
                    return Err(format!("server `{n}`{config} cannot be used: {why}{env}"));
                }
                Err(format!(
                    "no server named `{n}`{config}; it has: {}. Add a [servers.{n}] table to the config (the daemon picks it up on save)",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ))
            }
            None => match known.len() {
                1 => Ok(servers.values().next().expect("one").clone()),
                0 => Err(format!("no server is configured{config}")),
                n => Err(format!(
                    "this router serves {n} servers{config} ({}); name one: switchyard connect NAME",
                    known.join(", ")
                )),
            },
        }
    }

    /// Whether `name` is a server, template or broken server of the config in force.
    fn knows(&self, name: &str) -> bool {
        self.servers.read().expect("lock").contains_key(name)
            || self.templates.read().expect("lock").contains_key(name)
            || self.broken.read().expect("lock").contains_key(name)
    }

    /// The servers serving now, by name.
    pub fn servers(&self) -> Vec<Arc<Server>> {
        self.servers.read().expect("lock").values().cloned().collect()
    }

    /// The names of the servers and templates in force.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.servers.read().expect("lock").keys().cloned().collect();
        names.extend(self.templates.read().expect("lock").keys().cloned());
        names.sort();
        names
    }

    /// The plugin set's problems, in a sentence each; not a plugin whose `[[plugins]]` entry does
    /// not load (the daemon's `plugin_entry_files` note), which is said with the entry.
    fn plugin_problems(&self) -> Vec<String> {
        let notes = self.notes.read().expect("lock");
        let said = |file: &str| {
            notes.get("plugin_entry_files").and_then(Value::as_array).is_some_and(|f| f.iter().any(|f| f == file))
        };
        self.policy.problems().iter().filter(|p| !said(&p.plugin)).map(|p| p.to_string()).collect()
    }

    /// The process's recent warnings and errors, less each that said a plugin has no
    /// `[[plugins]]` entry when the entries in force have one for it now: status shows what
    /// holds under the config in force (the log keeps the history).
    fn recent_errors(&self) -> Vec<switchyard_core::logging::Recent> {
        let entries = self.policy.entries();
        let resolved = |message: &str| {
            message.contains("has no [[plugins]] entry")
                && entries.iter().any(|e| message.starts_with(&format!("plugin={}: ", e.file)))
        };
        let mut recent = switchyard_core::logging::recent_errors();
        recent.retain(|r| !resolved(&r.message));
        recent
    }

    /// Everything `switchyard status --json` shows. A template is listed with the names of its
    /// variants, and each variant as a server of its own, named `NAME@N`; a client's values
    /// never appear.
    pub fn status(&self) -> Value {
        let sessions = self.sessions.list();
        let with_sessions = |server: &Arc<Server>, shown: Option<&Shown>| {
            let mut v = server.status();
            let mine: Vec<Value> =
                sessions.iter().filter(|s| Arc::ptr_eq(&s.server(), server)).map(|s| s.status()).collect();
            v["sessions"] = Value::Array(mine);
            if let Some(shown) = shown {
                v["name"] = json!(shown.label);
                v["template"] = json!(shown.template);
                // Its own command line or URL has the client's values in it.
                v["target"] = json!(shown.target);
                if let Some(e) = v["last_error"].as_str() {
                    v["last_error"] = json!(redact(e, &shown.values));
                }
            }
            v
        };
        let mut servers: Vec<Value> = Vec::new();
        for s in self.servers() {
            servers.push(with_sessions(&s, None));
            servers.extend(s.siblings().iter().map(|sib| sibling_status(with_sessions(sib, None), sib, &s)));
        }
        for t in self.templates.read().expect("lock").values() {
            let variants: Vec<String> = t.variants.lock().expect("lock").iter().map(|v| v.label.clone()).collect();
            servers.push(json!({
                "name": t.name,
                "target": t.shown,
                "client_env": t.config.server.launch.client_env,
                "variants": variants,
            }));
        }
        for (s, shown) in self.variants() {
            servers.push(with_sessions(&s, Some(&shown)));
            servers.extend(s.siblings().iter().map(|sib| sibling_status(with_sessions(sib, Some(&shown)), sib, &s)));
        }
        let retired: Vec<Value> =
            self.retired.lock().expect("lock").iter().map(|(s, shown)| with_sessions(s, shown.as_ref())).collect();
        let broken: Vec<Value> =
            self.broken.read().expect("lock").iter().map(|(name, why)| json!({"name": name, "error": why})).collect();
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let mut status = json!({
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "config": path(&self.about.config),
            "socket": path(&self.about.socket),
            "log": path(&self.about.log),
            "audit": self.about.audit.as_ref().map(|a| {
                let l = a.losses();
                json!({"path": a.path().display().to_string(), "lost": a.lost(), "lost_queue_full": l.queue_full,
                    "lost_write_failed": l.write_failed, "refused": l.refused, "strict": a.strict()})
            }),
            // Read at start (`[telemetry]`, OTEL_*): what is exported, each null when it is off.
            "traces": switchyard_telemetry::destination().map(|url| json!({"endpoint": url})),
            "metrics": switchyard_telemetry::metrics_destination().map(|url| json!({"endpoint": url})),
            "uptime_ms": self.started.elapsed().as_millis() as u64,
            "plugins": self.policy.current().names(),
            // The plugins with content hooks: what for, and mode, fail and payload limit.
            "content_hooks": self.policy.current().content_hooks().into_iter()
                .map(|(plugin, hooks)| json!({"plugin": plugin, "hooks": hooks})).collect::<Vec<_>>(),
            "plugin_problems": self.plugin_problems(),
            "plugins_dir": self.policy.dir().map(|d| d.display().to_string()),
            "servers": servers,
            "retired": retired,
            "broken": broken,
            "groups": self.groups_status(),
        });
        if let Some(http) = self.http.read().expect("lock").as_ref() {
            status["http"] = http();
        }
        for (key, note) in self.notes.read().expect("lock").iter() {
            status[*key] = note.clone();
        }
        status["recent_errors"] = json!(self.recent_errors());
        status
    }

    /// Stops every server (live and retired) and waits for their tasks, at most `grace`.
    pub async fn stop(&self, grace: Duration) {
        let mut all = self.servers();
        all.extend(self.variants().into_iter().map(|(s, _)| s));
        all.extend(self.retired.lock().expect("lock").iter().map(|(s, _)| s.clone()));
        let all = with_siblings(all);
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
        // The last calls' lines reach the disk before the process ends.
        if let Some(audit) = &self.about.audit {
            audit.flush(AUDIT_FLUSH);
        }
    }
}

/// `servers` and the siblings each has made for clients of other profiles.
fn with_siblings(servers: Vec<Arc<Server>>) -> Vec<Arc<Server>> {
    servers.into_iter().flat_map(|s| std::iter::once(s.clone()).chain(s.siblings())).collect()
}

/// How status shows a sibling: under its own label, with the server it was made from.
fn sibling_status(mut v: Value, sibling: &Server, base: &Server) -> Value {
    v["name"] = json!(sibling.instance_label_prefix());
    v["sibling_of"] = json!(base.instance_label_prefix());
    v["share"] = json!(sibling.share().as_str());
    v
}

/// Stops a server's instances and its upkeep (and its siblings').
async fn stop_server(server: &Arc<Server>) {
    for sibling in server.siblings() {
        sibling.shutdown.cancel();
        sibling.stop().await;
    }
    server.shutdown.cancel();
    server.stop().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{self, Opening};

    fn router() -> Arc<Servers> {
        Servers::new(Policy::disabled(), About::default(), None, CancellationToken::new())
    }

    /// The template `[servers.t]` with `client_env = ["A"]` and `args`.
    fn template(args: &str) -> Config {
        let text = format!("[servers.t]\ncommand = \"/bin/true\"\nargs = {args}\nclient_env = [\"A\"]\n");
        let mut c: Config = toml::from_str(&text).unwrap();
        c.validate().unwrap();
        c.servers().remove("t").unwrap()
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn names(router: &Servers) -> Vec<String> {
        let status = router.status();
        status["servers"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_string()).collect()
    }

    /// A broken server's refusal names the config file once: its reason, read from the file,
    /// names it already with the line (trial 39: "Refusal text gives the config path twice").
    #[tokio::test(start_paused = true)]
    async fn a_broken_server_s_refusal_names_the_config_file_once() {
        let file = PathBuf::from("/home/u/.config/switchyard/switchyard.toml");
        let about = About { config: Some(file.clone()), ..About::default() };
        let router = Servers::new(Policy::disabled(), about, None, CancellationToken::new());
        let read = format!("config file {}, line 2, column 1: unknown field `comand`", file.display());
        router.mark_broken("memory", read.clone());
        let Err(e) = router.lookup(Some("memory"), &env(&[])) else { panic!("a broken server was served") };
        assert_eq!(e, format!("server `memory` cannot be used: {read}"));
        // A reason that does not name the file still says which file the server is in.
        router.mark_broken("web", "TOKEN is not set".into());
        let Err(e) = router.lookup(Some("web"), &env(&[])) else { panic!("a broken server was served") };
        assert_eq!(e, format!("server `web` in {} cannot be used: TOKEN is not set", file.display()));
        router.stop(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn equal_values_share_a_variant_and_other_values_get_their_own() {
        let router = router();
        router.add_template(&template("[\"--token\", \"${A}\"]"), "").unwrap();
        let a = router.lookup(Some("t"), &env(&[("A", "value-one"), ("OTHER", "x")])).unwrap();
        let again = router.lookup(Some("t"), &env(&[("A", "value-one")])).unwrap();
        assert!(Arc::ptr_eq(&a, &again), "equal values, another server");
        let b = router.lookup(Some("t"), &env(&[("A", "value-two")])).unwrap();
        assert!(!Arc::ptr_eq(&a, &b), "other values, the same server");
        // The servers keep the template's name (what plugins and errors see); status tells them
        // apart by label, and shows the template as written, never a value.
        assert_eq!((a.name.as_str(), b.name.as_str()), ("t", "t"));
        assert_eq!(names(&router), ["t", "t@1", "t@2"]);
        let status = router.status().to_string();
        assert!(!status.contains("value-one") && !status.contains("value-two"), "{status}");
        assert!(status.contains("--token ${A}"), "{status}");
        // The only server of the router is found without a name too.
        assert!(Arc::ptr_eq(&router.lookup(None, &env(&[("A", "value-two")])).unwrap(), &b));
        // A client without the value is refused with what to do.
        let Err(e) = router.lookup(Some("t"), &env(&[("B", "x")])) else { panic!("a client without A joined") };
        assert!(e.contains("server `t`") && e.contains("did not send A") && e.contains("connect t --env A"), "{e}");
        router.stop(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_variant_stops_after_its_last_session_has_been_gone_for_the_idle_grace() {
        let router = router();
        router.add_template(&template("[\"${A}\"]"), "").unwrap();
        let server = router.lookup(Some("t"), &env(&[("A", "one")])).unwrap();
        // A session keeps it however long it lasts.
        let (client, ours) = tokio::io::duplex(1024);
        let (r, w) = tokio::io::split(ours);
        let opening = Opening {
            transport: "test",
            sessions: router.sessions.clone(),
            speaks_control: true,
            client_dir: None,
            client_token: None,
        };
        let serving = tokio::spawn(session::serve(
            server.clone(),
            tokio::io::BufReader::new(r),
            w,
            opening,
            CancellationToken::new(),
        ));
        tokio::time::sleep(VARIANT_IDLE * 2).await;
        assert_eq!(names(&router), ["t", "t@1"]);
        // The session ends; the variant stays for the grace (a reconnecting client finds it).
        drop(client);
        serving.await.unwrap();
        tokio::time::sleep(VARIANT_IDLE - Duration::from_secs(10)).await;
        assert_eq!(names(&router), ["t", "t@1"]);
        assert!(Arc::ptr_eq(&router.lookup(Some("t"), &env(&[("A", "one")])).unwrap(), &server));
        // That lookup counts as use: the grace starts again from it.
        tokio::time::sleep(VARIANT_IDLE - Duration::from_secs(10)).await;
        assert_eq!(names(&router), ["t", "t@1"]);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(names(&router), ["t"]);
        assert!(server.shutdown.is_cancelled());
        // A client with those values again gets a new one.
        let new = router.lookup(Some("t"), &env(&[("A", "one")])).unwrap();
        assert!(!Arc::ptr_eq(&new, &server));
        assert_eq!(names(&router), ["t", "t@2"]);
        router.stop(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_template_retires_its_variants_and_a_removed_one_ends_them() {
        let router = router();
        router.add_template(&template("[\"v1\", \"${A}\"]"), "").unwrap();
        let old = router.lookup(Some("t"), &env(&[("A", "one")])).unwrap();
        router.add_template(&template("[\"v2\", \"${A}\"]"), "server `t` changed in the config").unwrap();
        // No session: the old variant stops at once; the next client gets one of the new template.
        let new = router.lookup(Some("t"), &env(&[("A", "one")])).unwrap();
        assert!(!Arc::ptr_eq(&new, &old));
        assert!(router.status().to_string().contains("v2 ${A}"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(old.shutdown.is_cancelled());
        assert!(router.status()["retired"].as_array().unwrap().is_empty());
        // A removed template ends its variants and their sessions at once.
        router.remove("t", "server `t` was removed from the config");
        assert!(new.shutdown.is_cancelled());
        let Err(e) = router.lookup(Some("t"), &env(&[("A", "one")])) else { panic!("a removed template served") };
        assert!(e.contains("no server named `t`"), "{e}");
        router.stop(Duration::from_secs(1)).await;
    }
}
