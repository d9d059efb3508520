//! One upstream server: its pools, gate, policy and instance start-up; the children hold its other
//! concerns (initialisation, the 2026-07-28 era's instances, crash-loop guard, health,
//! reconciliation, tools).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::gate::Gate;
use crate::peer::Buffered;
use crate::placement::ScopeKey;
use crate::pool::{MODERN_POOL_SUFFIX, Pool, Spawner};
use crate::server::fanout::{Fanout, Upstreams};
use crate::upstream::{Connector, Events, Instance};
use switchyard_config::{Config, Limits};
use switchyard_core::codec;
use switchyard_core::error::{CallError, Unanswered};
use switchyard_core::ids::SessionId;
use switchyard_core::metrics::{Metrics, ToolNames};
use switchyard_policy::Policy;

pub mod alike;
pub mod answers;
mod apart;
mod breaker;
pub mod calls;
pub mod fanout;
pub(crate) mod health;
mod init;
mod subscriptions;
pub(crate) use init::is_modern_answer;
pub mod profile;
mod reconcile;
mod remembered;
mod repeated;
pub use repeated::Repeated;
mod served;
mod shaped;
mod stateless;
mod status;
mod suspect;
pub mod tasks;
mod tools;

use breaker::StartHealth;
use init::Init;
use stateless::Stateless;
use tools::Tools;

/// How long an instance that answered a probe as a server of the initialize era is kept for
/// that era's first start (its client falls back to initialize at once, or not at all).
const SPARE_KEEP: Duration = Duration::from_secs(30);
/// One upstream server and everything that serves it.
pub struct Server {
    pub name: String,
    pub hub: Arc<Fanout>,
    pub limits: Limits,
    /// Output queued for all clients of the router together (`limits.max_buffered_bytes`).
    pub buffered: Arc<Buffered>,
    pub gate: Gate,
    pub policy: Policy,
    connector: Arc<dyn Connector>,
    pools: BTreeMap<String, Arc<Pool>>,
    /// What serves requests of the 2026-07-28 era (its own instances).
    stateless: Stateless,
    /// The initialize era's handshake, done once for the server.
    init: Init,
    next_instance: AtomicU64,
    /// What an instance's label starts with (`NAME#N`); a variant's is its own label.
    instance_prefix: std::sync::OnceLock<String>,
    health: Mutex<StartHealth>,
    tools: Tools,
    /// What shapes its tool list per client (budgets, search mode) and what it did.
    shaping: shaped::Shaping,
    /// One reconciliation of levels and subscriptions at a time per instance, by instance
    /// number. Per instance, so a request stuck on a busy instance holds up only that instance,
    /// never the set-up of a new one.
    reconciling: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    counts: status::Counts,
    /// The calls running now, for status.
    pub calls: calls::Calls,
    /// The router's metrics, and this server's name and tool labels for them.
    pub metrics: Arc<Metrics>,
    pub metric_name: Arc<str>,
    pub tool_labels: ToolNames,
    pub shutdown: CancellationToken,
    /// Set when the server was removed from the config (its `shutdown` then fires, and what it
    /// still owes is answered as such, not as "switchyard is shutting down").
    pub removed: std::sync::atomic::AtomicBool,
    pub tasks: TaskTracker,
    /// Warnings that could otherwise repeat once per call or message.
    pub repeats: Repeated,
    /// Which clients share its instances (`share`).
    share: switchyard_config::Share,
    /// Its place among the servers of one config, and the profile it serves.
    family: profile::Family,
    /// What it answered before (shared by the router's servers), and its config's key there.
    answers: std::sync::OnceLock<(Arc<answers::Answers>, String)>,
    /// The key there of the configuration this one replaced (the config file was edited): what
    /// the clients it takes over were told.
    replaced: std::sync::OnceLock<String>,
    /// Set once the server asked a client something (sampling, elicitation): its pools keep
    /// sessions on instances of their own where they can (see `Pool::keep_sessions_apart`).
    apart: Arc<std::sync::atomic::AtomicBool>,
    /// Said once an instance seems to answer one request at a time (for status and the page).
    serial: Mutex<Option<String>>,
    /// Where each call's end is logged (`[audit]`), when it is on.
    audit: std::sync::OnceLock<Arc<switchyard_core::audit::AuditLog>>,
    /// Tools whose calls run alone, since an instance ended while one ran (see `suspect`).
    suspects: suspect::Suspects,
}

impl Server {
    /// Names its instances `PREFIX#N` instead of `NAME#N` (set before the first instance starts).
    pub fn set_instance_prefix(&self, prefix: &str) {
        let _ = self.instance_prefix.set(prefix.to_string());
    }

    /// What its instances' labels start with: its name, or the label of its variant or sibling.
    pub fn instance_label_prefix(&self) -> &str {
        self.instance_prefix.get().unwrap_or(&self.name)
    }

    pub fn new(
        config: &Config,
        name: &str,
        connector: Arc<dyn Connector>,
        policy: Policy,
        metrics: Arc<Metrics>,
        buffered: Arc<Buffered>,
        shutdown: CancellationToken,
    ) -> Arc<Server> {
        let name = name.to_string();
        Arc::new_cyclic(|weak: &Weak<Server>| {
            let pools_of = |modern: bool| -> BTreeMap<String, Arc<Pool>> {
                config
                    .pools
                    .iter()
                    .map(|(pname, pc)| {
                        let w = weak.clone();
                        let spawner: Spawner = Arc::new(move |pool, scope| {
                            let w = w.clone();
                            Box::pin(async move {
                                match w.upgrade() {
                                    Some(server) => server.start_instance(&pool, scope, modern).await,
                                    None => Err(CallError::ShuttingDown),
                                }
                            })
                        });
                        let (pool_name, mut pc) = (pname.clone(), pc.clone());
                        if modern {
                            pc.min = 0;
                            return (pool_name, Pool::new(&format!("{pname}{MODERN_POOL_SUFFIX}"), &name, pc, spawner));
                        }
                        (pool_name, Pool::new(pname, &name, pc, spawner))
                    })
                    .collect()
            };
            let (pools, modern_pools) = (pools_of(false), pools_of(true));
            let apart = Arc::new(std::sync::atomic::AtomicBool::new(false));
            for pool in pools.values().chain(modern_pools.values()) {
                pool.keep_sessions_apart(apart.clone());
            }
            Server {
                name: name.clone(),
                hub: Fanout::new(
                    &name,
                    Duration::from_millis(config.limits.call_timeout_ms),
                    weak.clone() as Weak<dyn Upstreams>,
                ),
                limits: config.limits.clone(),
                buffered,
                gate: Gate::new(),
                policy,
                connector,
                pools,
                stateless: Stateless::new(modern_pools),
                init: Init::new(),
                next_instance: AtomicU64::new(1),
                instance_prefix: std::sync::OnceLock::new(),
                health: Mutex::new(StartHealth::default()),
                tools: Tools::default(),
                shaping: shaped::Shaping::new(config),
                reconciling: Mutex::new(HashMap::new()),
                counts: Default::default(),
                calls: Default::default(),
                metric_name: Arc::from(name.as_str()),
                metrics,
                tool_labels: ToolNames::default(),
                shutdown,
                removed: Default::default(),
                tasks: TaskTracker::new(),
                repeats: Repeated::new(),
                share: config.server.launch.share.unwrap_or_default(),
                family: profile::Family::default(),
                answers: std::sync::OnceLock::new(),
                replaced: std::sync::OnceLock::new(),
                serial: Mutex::new(None),
                audit: std::sync::OnceLock::new(),
                suspects: Default::default(),
                apart,
            }
        })
    }

    /// Logs each call's end into `audit` from now on (set once, before it serves).
    pub fn audit_into(&self, audit: Arc<switchyard_core::audit::AuditLog>) {
        let _ = self.audit.set(audit);
    }

    /// The audit log its calls go to, when audit is on.
    pub fn audit(&self) -> Option<&Arc<switchyard_core::audit::AuditLog>> {
        self.audit.get()
    }

    /// What it fronts: the command line or the URL.
    pub fn describe(&self) -> String {
        self.connector.describe()
    }

    pub fn pool(&self, name: &str) -> Option<&Arc<Pool>> {
        self.pools.get(name)
    }

    pub fn default_pool(&self) -> &Arc<Pool> {
        self.pools.get("default").expect("validated config always has a default pool")
    }

    pub fn all_instances(&self) -> Vec<Arc<Instance>> {
        self.every_pool().flat_map(|p| p.instances()).collect()
    }

    /// The configured pools and their 2026-07-28 counterparts.
    fn every_pool(&self) -> impl Iterator<Item = &Arc<Pool>> {
        self.pools.values().chain(self.stateless.pools.values())
    }

    /// The pool an instance belongs to.
    fn pool_of(&self, inst: &Instance) -> Option<&Arc<Pool>> {
        let pool = inst.pool();
        self.pools.get(&*pool).or_else(|| self.stateless.pools.get(pool.strip_suffix(MODERN_POOL_SUFFIX)?))
    }

    /// The 2026-07-28 counterpart of a configured pool.
    pub fn modern_pool<'a>(&'a self, pool: &'a Arc<Pool>) -> &'a Arc<Pool> {
        self.stateless.pools.get(&pool.name).unwrap_or(pool)
    }

    /// True for an instance serving 2026-07-28-era requests (never initialised).
    pub fn is_modern(&self, inst: &Instance) -> bool {
        inst.pool().ends_with(MODERN_POOL_SUFFIX)
    }

    pub fn saw_modern_version(&self, version: &str) {
        let mut v = self.stateless.version.lock().expect("lock");
        if *v != version {
            *v = version.to_string();
        }
    }

    pub fn discover_refused(&self) -> bool {
        self.stateless.discover_refused.load(Ordering::Relaxed)
    }

    /// The server's own `error` object of its -32601 to server/discover, once it gave one.
    pub fn discover_refusal(&self) -> Option<&str> {
        self.stateless.discover_refusal.get().map(String::as_str)
    }

    /// The server answered server/discover with -32601 (`reply`, its response): later probes
    /// are answered at once, with its own error (by later daemons too), and the instances
    /// started for that era (it has none) are stopped.
    pub fn refuse_discover(&self, reply: &str) {
        if let Some(error) = serde_json::from_str::<serde_json::Value>(reply).ok().and_then(|v| v.get("error").cloned())
        {
            if let Some((answers, key)) = self.answers.get() {
                answers.put(&format!("{key}:discover"), &error.to_string());
            }
            let _ = self.stateless.discover_refusal.set(error.to_string());
        }
        if self.stateless.discover_refused.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::info!(server = %self.name, "the server does not know server/discover: 2026-07-28 clients fall back to initialize");
        for inst in self.stateless.pools.values().flat_map(|p| p.close_with(self.not_modern())) {
            self.tasks.spawn(async move { inst.shutdown().await });
        }
    }

    /// Why a call of this server ends unanswered once its `shutdown` fired: it was removed from
    /// the config, or switchyard is shutting down.
    pub fn ended(&self) -> CallError {
        match self.removed.load(std::sync::atomic::Ordering::Acquire) {
            true => CallError::Removed { server: self.name.clone() },
            false => CallError::ShuttingDown,
        }
    }

    /// Spawns and initialises one instance for `scope` of `pool` (the pools' spawner).
    async fn start_instance(
        self: Arc<Self>,
        pool: &str,
        scope: ScopeKey,
        modern: bool,
    ) -> Result<Arc<Instance>, CallError> {
        if self.shutdown.is_cancelled() {
            return Err(self.ended());
        }
        if let Some(at) = self.check_start_allowed()? {
            tokio::time::sleep_until(at).await;
        }
        let params = self.init.params.lock().expect("lock").clone();
        if params.is_none() && !modern {
            return Err(self.not_initialized());
        }
        if modern && self.discover_refused() {
            return Err(self.not_modern());
        }
        let shared = scope == ScopeKey::Shared;
        let inst = match (!modern && shared).then(|| self.take_spare(pool)).flatten() {
            Some(spare) => spare,
            None => {
                // Numbered across the family: a task id names its instance by number, and must name
                // one instance of the server and its siblings (a session may move between them).
                let number = self.base().next_instance.fetch_add(1, Ordering::Relaxed);
                let events: Arc<dyn Events> = apart::Watch::new(&self);
                let prefix = self.instance_label_prefix();
                Instance::start(&*self.connector, prefix, number, pool, scope, events).await.map_err(|f| {
                    self.record_start_failure(f.reason.clone());
                    CallError::Down { server: self.name.clone(), reason: f.reason }
                })?
            }
        };
        let handshake = async {
            match modern {
                true => self.modern_handshake(&inst).await,
                false => self.handshake(&inst, params.as_deref().unwrap_or("{}")).await,
            }
        };
        // Removed from the config (or switchyard stopping) while it starts: the instance goes
        // now, not when its start ends (init_timeout_ms later, for a server slow to start).
        let handshake = tokio::select! {
            h = handshake => h,
            _ = self.shutdown.cancelled() => {
                tracing::info!(instance = %inst.label(), "stopped while starting: {}", self.ended());
                inst.kill().await;
                return Err(self.ended());
            }
        };
        match handshake {
            Ok(()) => {
                inst.mark_ready();
                self.record_started();
                // The first instance of a server that may share with other profiles tells what
                // it answers its own (see `alike`).
                if !modern
                    && self.share == switchyard_config::Share::Profile
                    && self.has_family()
                    && !self.family.gathering.swap(true, Ordering::Relaxed)
                {
                    self.tasks.spawn(self.clone().gather_evidence(inst.clone()));
                }
                self.counts.starts.fetch_add(1, Ordering::Relaxed);
                self.metrics.instance_started(&self.name, pool);
                tracing::info!(instance = %inst.label(), at = %inst.endpoint(), pool, "instance ready");
                let server = self.clone();
                let watched = inst.clone();
                self.tasks.spawn(async move {
                    watched.dead().await;
                    server.on_death(watched).await;
                });
                Ok(inst)
            }
            Err(e) => {
                let e = self.start_error(e, modern);
                // A server that does not speak 2026-07-28 started fine: not a start failure.
                if !(modern && self.discover_refused()) {
                    self.record_start_failure(e.to_string());
                } else if shared && matches!(e, CallError::WrongEra { .. }) && !inst.is_dead() {
                    self.keep_spare(inst, pool);
                    return Err(e);
                }
                inst.kill().await;
                Err(e)
            }
        }
    }

    /// What the calls waiting for a start that failed with `e` are told. A remote server that
    /// could not be reached is down, and why (naming their own tool, not initialize); one that
    /// ended before it answered its first request never started, so nothing ran (not "the call
    /// may have run", which is about a call the server had).
    fn start_error(&self, e: CallError, modern: bool) -> CallError {
        match e {
            CallError::Lost { cause, .. } | CallError::Refused { cause, .. } => {
                CallError::Down { server: self.name.clone(), reason: cause }
            }
            CallError::Died { death, .. } => CallError::Down {
                server: self.name.clone(),
                reason: format!(
                    "instance {} ended ({}) while it started, before it answered {}{}; check the server's command and what it wrote",
                    death.instance,
                    death.status,
                    if modern { "server/discover" } else { "initialize" },
                    death.stderr_suffix()
                ),
            },
            e => e,
        }
    }

    /// Keeps `inst`, started for the 2026-07-28 pool `pool` and found of the initialize era, for
    /// that era's pool of the same name; stopped if unused within [`SPARE_KEEP`].
    fn keep_spare(self: &Arc<Self>, inst: Arc<Instance>, pool: &str) {
        inst.move_to_pool(pool.strip_suffix(MODERN_POOL_SUFFIX).unwrap_or(pool));
        tracing::info!(instance = %inst.label(), "kept for the initialize era: a client that probed with server/discover falls back to initialize, and finds it started");
        if let Some(old) = self.stateless.spare.lock().expect("lock").replace(inst.clone()) {
            self.tasks.spawn(async move { old.shutdown().await });
        }
        let me = self.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(SPARE_KEEP) => {}
                _ = me.shutdown.cancelled() => {}
            }
            let unused = {
                let mut spare = me.stateless.spare.lock().expect("lock");
                if spare.as_ref().is_some_and(|s| Arc::ptr_eq(s, &inst)) { spare.take() } else { None }
            };
            if let Some(i) = unused {
                tracing::debug!(instance = %i.label(), "no initialize came for it within {SPARE_KEEP:?}: stopped");
                i.shutdown().await;
            }
        });
    }

    /// The kept instance (a shared one), if it fits a start of a shared instance of `pool`.
    fn take_spare(&self, pool: &str) -> Option<Arc<Instance>> {
        let mut spare = self.stateless.spare.lock().expect("lock");
        let fits = spare.as_ref().is_some_and(|s| &*s.pool() == pool && !s.is_dead());
        if fits { spare.take() } else { None }
    }

    /// Sends a request of the router's own and returns its `result` JSON.
    pub async fn own_request(
        &self,
        inst: &Instance,
        method: &str,
        params: &str,
        timeout: Duration,
        what: &str,
    ) -> Result<String, CallError> {
        self.own_request_as(inst, method, params, timeout, what, false).await
    }

    /// [`Server::own_request`]; `quiet`: a health check's, which starts no sign-in.
    pub(crate) async fn own_request_as(
        &self,
        inst: &Instance,
        method: &str,
        params: &str,
        timeout: Duration,
        what: &str,
        quiet: bool,
    ) -> Result<String, CallError> {
        let reply = self.own_reply(inst, method, params, timeout, what, quiet).await?;
        match reply.env.result {
            Some(r) => Ok(reply.line[r].to_string()),
            None => Err(CallError::Down {
                server: self.name.clone(),
                reason: format!("it answered {method} with an error: {}", reply.line),
            }),
        }
    }

    /// Sends a request of the router's own and returns the server's reply, result or error.
    async fn own_reply(
        &self,
        inst: &Instance,
        method: &str,
        params: &str,
        timeout: Duration,
        what: &str,
        quiet: bool,
    ) -> Result<crate::upstream::Reply, CallError> {
        let failed = |u: Unanswered| u.into_error(&self.name, what);
        let sent = inst.send_own(method, params, quiet).map_err(failed)?;
        let started = Instant::now();
        let reply = match tokio::time::timeout(timeout, sent.reply).await {
            Ok(Ok(r)) => r.map_err(failed)?,
            Ok(Err(_)) => return Err(CallError::ShuttingDown),
            Err(_) => {
                inst.cancel(sent.upstream_id, "switchyard: timed out");
                return Err(CallError::Timeout {
                    server: self.name.clone(),
                    what: format!("{method} (by switchyard, on {})", inst.label()),
                    elapsed: started.elapsed(),
                    attempts: 1,
                    waiting: None,
                });
            }
        };
        Ok(reply)
    }

    /// Params carrying switchyard's own 2026-07-28 envelope (for its probes of such instances).
    fn modern_envelope(&self) -> String {
        let version = codec::json_string(&self.stateless.version.lock().expect("lock"));
        format!(
            r#"{{"_meta":{{"{}":{version},"io.modelcontextprotocol/clientInfo":{{"name":"switchyard","version":"{}"}},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}"#,
            codec::PROTOCOL_VERSION_META,
            env!("CARGO_PKG_VERSION")
        )
    }

    /// Shuts every instance down (close stdin, wait, SIGTERM, wait, SIGKILL), all at once.
    pub async fn stop(&self) {
        let spare = self.stateless.spare.lock().expect("lock").take();
        let all: Vec<Arc<Instance>> = self.every_pool().flat_map(|p| p.take_all()).chain(spare).collect();
        let mut set = tokio::task::JoinSet::new();
        for inst in all {
            set.spawn(async move { inst.shutdown().await });
        }
        while set.join_next().await.is_some() {}
    }
}

impl Upstreams for Server {
    fn instances(&self) -> Vec<Arc<Instance>> {
        self.all_instances()
    }
    fn answers_one_at_a_time(&self, inst: &Instance, waited: Duration) {
        let pool = self.pool_of(inst);
        let Some(pool) = pool.filter(|p| p.config.max <= 1) else { return };
        let name = &self.name;
        let hint = format!(
            "server `{name}` seems to answer one request at a time: calls sent while another ran on {} waited for it (the last {:.1} s), so every client waits behind the slowest call. If it keeps no state between calls, a pool runs calls side by side: [servers.{name}.pools.{}] max = 4",
            inst.label(),
            waited.as_secs_f64(),
            pool.name
        );
        let mut serial = self.serial.lock().expect("lock");
        if serial.is_none() {
            tracing::warn!(server = %name, "{hint}");
            *serial = Some(hint);
        }
    }
    fn roots_learned(&self, session: SessionId, roots: &serde_json::Value) {
        self.take_roots(session, roots);
    }
    fn roots_unshared(&self) -> Option<String> {
        Server::roots_unshared(self)
    }
    fn profile_roots(&self) -> Option<String> {
        let roots = self.profile()?.roots?;
        let list: serde_json::Value = serde_json::from_str(&roots).ok()?;
        list.is_array().then(|| serde_json::json!({ "roots": list }).to_string())
    }
    fn fetch_list<'a>(
        &'a self,
        inst: &'a Instance,
        kind: &'static str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Vec<serde_json::Value>>> + Send + 'a>> {
        Box::pin(Server::fetch_list(self, inst, kind))
    }

    fn tools_differ_for<'a>(
        &'a self,
        link: &'a Arc<crate::peer::ClientPeer>,
        items: &'a [serde_json::Value],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        Box::pin(Server::tools_differ_for(self, link, items))
    }
}
