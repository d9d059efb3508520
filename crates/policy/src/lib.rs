//! The policy stage: a chain of WebAssembly plugins that decides how each request is handled.
//!
//! [`Policy`] is the live handle (hot-reloaded from the plugins directory and the config's
//! `[[plugins]]` entries); [`PluginSet`] is one immutable version of the chain, read once at the
//! start of a request. wasmtime stays inside [`wasm`]; what the directory and the entries make
//! is in [`loader`], following their changes in [`reload`], and what is wrong with them in
//! [`problems`]; how listed tools are shown to each client is in [`lists`].

pub mod annotate;
pub mod check;
pub mod embedded;
mod hooks;
mod lists;
mod loader;
pub mod problems;
pub mod project;
pub mod rate;
pub mod record;
mod reload;
mod wasm;
mod worker;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use switchyard_config::{Config, Fail, HookMode, OnError, PluginEntry, Refusals};
use switchyard_core::decision::{CallInfo, Decision, Hints, Rejection};
use switchyard_core::metrics::Metrics;

use lists::ShownKept;
use problems::Problem;
use record::Recorder;

pub use hooks::{Hooked, Phase};
pub use lists::{Kind, ListedTool, Listing, Shown};
pub use wasm::{Contract, PluginError};

/// Where the build put the test fixture plugins (the deliberately broken ones, and the probe
/// that tells what a plugin is shown), for the tests of this crate and the router's.
#[doc(hidden)]
pub const TEST_PLUGINS: &str = env!("SWITCHYARD_TEST_PLUGINS");

/// Cheap, cloneable handle on the live plugin set.
#[derive(Clone)]
pub struct Policy {
    inner: Arc<Inner>,
}

struct Inner {
    set: ArcSwap<PluginSet>,
    /// The router's metrics, given to every set published (plugin timings and failures).
    metrics: std::sync::OnceLock<Arc<Metrics>>,
    /// Where calls are recorded (`--record-calls`), given to every set published.
    recorder: std::sync::OnceLock<Arc<Recorder>>,
    /// Generation counter: bumped after each swap, so watchers can diff what changed.
    changes: tokio::sync::watch::Sender<u64>,
    dir: Option<PathBuf>,
    /// What is wrong with the plugins now (see [`Policy::problems`]).
    problems: ArcSwap<Vec<Problem>>,
    /// The `[[plugins]]` entries the set in force was made with.
    entries: ArcSwap<Vec<PluginEntry>>,
    /// Where new entries go to be applied (None: nothing follows them, as in a disabled policy).
    reload: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<reload::EntriesRequest>>,
}

impl Policy {
    /// No plugins at all: decide returns `Decision::default()`, annotate returns declared.
    pub fn disabled() -> Policy {
        Policy::with_set(PluginSet::empty(), None)
    }

    fn with_set(set: PluginSet, dir: Option<PathBuf>) -> Policy {
        let (changes, _) = tokio::sync::watch::channel(0);
        Policy {
            inner: Arc::new(Inner {
                set: ArcSwap::from_pointee(set),
                metrics: std::sync::OnceLock::new(),
                recorder: std::sync::OnceLock::new(),
                changes,
                dir,
                problems: ArcSwap::from_pointee(Vec::new()),
                entries: ArcSwap::from_pointee(Vec::new()),
                reload: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Resolves the plugins directory (`cli_dir`, else `plugins/` beside the config file, else
    /// `$XDG_CONFIG_HOME/switchyard/plugins`), loads the plugins of `config`'s `[[plugins]]`
    /// entries and starts the hot-reload watcher, which stops when `shutdown` is cancelled. A
    /// missing directory is created. A plugin never stops the start: one that must run and
    /// cannot (file missing, not loadable, `init` refuses its config) refuses the calls it would
    /// judge, naming itself and the fix; the others are left out. A file without an entry is
    /// not applied. Each is logged, and listed by [`Policy::problems`].
    pub async fn start(
        config: &Config,
        cli_dir: Option<PathBuf>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Policy> {
        // A file's `servers` were checked against its servers as it loaded. Here a router may
        // serve one of them (`run NAME`), or one named after its command (`run -- CMD`): an
        // entry for none of those judges nothing, which is said once.
        let serving = config.server_names();
        for entry in &config.plugins {
            let Some(servers) = &entry.servers else { continue };
            if !serving.is_empty() && !servers.iter().any(|s| serving.contains(s)) {
                tracing::info!(
                    "plugin {} is for servers [{}], none of which this router serves ([{}]): it judges nothing here",
                    entry.file,
                    servers.join(", "),
                    serving.join(", ")
                );
            }
        }
        let dir = reload::resolve_dir(config, cli_dir)?;
        let mut loader = loader::Loader::new(dir.clone(), config.plugins.clone());
        // Compiling can take tens of milliseconds per plugin, and `init` runs plugin code: on a
        // thread of its own, outside the async runtime.
        let (scan, loader) = worker::run_alone("switchyard-plugin-load", move || {
            let scan = loader.scan();
            (scan, loader)
        })
        .await?;
        let policy = Policy::with_set(PluginSet::empty(), Some(dir.clone()));
        policy.took(scan, loader.entries());
        let (tx, entries) = tokio::sync::mpsc::unbounded_channel();
        let _ = policy.inner.reload.set(tx);
        reload::watch(policy.clone(), loader, entries, shutdown)?;
        Ok(policy)
    }

    /// Applies a config's `[[plugins]]` entries to the running chain, and returns once the set
    /// they make is in force: plugins whose entry changed are loaded again with it (the others
    /// keep running as they are), new entries load their plugin, and a removed entry's plugin
    /// is no longer applied. The whole set is swapped at once: a call runs under the old
    /// entries or the new ones, never a mix. A plugin whose new entry does not load (its `init`
    /// refuses the new config) keeps its last good version in force, and is logged.
    pub async fn set_entries(&self, entries: Vec<PluginEntry>) {
        let Some(reload) = self.inner.reload.get() else { return };
        let (done, applied) = tokio::sync::oneshot::channel();
        if reload.send((entries, done)).is_ok() {
            let _ = applied.await;
        }
    }

    /// The `[[plugins]]` entries the set in force was made with.
    pub fn entries(&self) -> Arc<Vec<PluginEntry>> {
        self.inner.entries.load_full()
    }

    /// Every plugin that is broken or not applied now, by file: each with one sentence (the
    /// file, what is wrong, the fix), what it does to calls, and the servers its entry names.
    pub fn problems(&self) -> Arc<Vec<Problem>> {
        self.inner.problems.load_full()
    }

    /// Takes in what a scan found (made with `entries`).
    fn took(&self, scan: loader::Scan, entries: &[PluginEntry]) {
        self.inner.problems.store(Arc::new(scan.problems));
        if scan.complete {
            self.inner.entries.store(Arc::new(entries.to_vec()));
        }
        if let Some(set) = scan.set {
            tracing::info!("policy plugins in force: [{}]", set.names().join(", "));
            self.publish(set);
        }
    }

    /// The plugin set in force now; a request reads it once at its start.
    pub fn current(&self) -> Arc<PluginSet> {
        self.inner.set.load_full()
    }

    /// Bumped every time a new set is swapped in.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// The directory in use.
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_deref()
    }

    /// Swaps in a new set; requests already running keep the one they loaded.
    /// Plugin calls are timed into `metrics` from now on (the router's; set once).
    pub fn attach_metrics(&self, metrics: &Arc<Metrics>) {
        if self.inner.metrics.set(metrics.clone()).is_ok() {
            // The same chain, measured: no change for watchers to see. `rcu`: a reload
            // publishing meanwhile is not undone.
            self.inner.set.rcu(|cur| PluginSet {
                chain: cur.chain.clone(),
                metrics: Some(metrics.clone()),
                recorder: cur.recorder.clone(),
                lists: cur.lists,
                shown: ShownKept::default(),
                hooks: cur.hooks,
            });
        }
    }

    /// Records every call the chain decides and every tool it annotates from now on (set once;
    /// see [`record`]).
    pub fn attach_recorder(&self, recorder: Recorder) {
        let recorder = Arc::new(recorder);
        if self.inner.recorder.set(recorder.clone()).is_ok() {
            self.inner.set.rcu(|cur| PluginSet {
                chain: cur.chain.clone(),
                metrics: cur.metrics.clone(),
                recorder: Some(recorder.clone()),
                lists: cur.lists,
                shown: ShownKept::default(),
                hooks: cur.hooks,
            });
        }
    }

    fn publish(&self, mut set: PluginSet) {
        set.metrics = self.inner.metrics.get().cloned();
        set.recorder = self.inner.recorder.get().cloned();
        self.inner.set.store(Arc::new(set));
        self.inner.changes.send_modify(|n| *n += 1);
    }
}

/// One loaded plugin in a chain.
struct Loaded {
    /// File name (or the `[[plugins]]` path), used as the plugin's name in logs and errors.
    name: String,
    /// The name as a metrics label (shared: no copy per call).
    label: Arc<str>,
    hash: [u8; 32],
    plugin: Runs,
    /// The entry it was loaded with: its priority, on_error, refusals (how its refusals of
    /// `tools/call` are answered) and servers (None: every server). A changed entry loads the
    /// plugin again.
    entry: PluginEntry,
}

impl Loaded {
    /// Whether its entry scopes it to `server` (or to every server).
    fn applies_to(&self, server: &str) -> bool {
        self.entry.servers.as_ref().is_none_or(|s| s.iter().any(|n| n == server))
    }
}

/// Whether a plugin in the chain can run.
enum Runs {
    Ready(Box<wasm::Plugin>),
    /// A plugin that must run (its entry is `required`, or says on_error = closed) whose file
    /// does not load, and no earlier version did: it rejects the calls it would have judged
    /// until a good version arrives, with this sentence (the file, what is wrong, the fix) as
    /// the reason.
    Broken(String),
}

/// An immutable, ordered chain of loaded plugins.
pub struct PluginSet {
    chain: Vec<Arc<Loaded>>,
    /// Where each plugin call's time and failure are counted (None: not measured).
    metrics: Option<Arc<Metrics>>,
    /// Where the chain's answers are recorded (None: not recorded).
    recorder: Option<Arc<Recorder>>,
    /// A plugin of the chain is of `switchyard:policy@0.2.0`: it may hide or rename tools.
    lists: bool,
    /// The list hook's answers so far (see [`ShownKept`]).
    shown: ShownKept,
    /// A plugin of the chain has content hooks (of `switchyard:policy@0.3.0`).
    hooks: bool,
}

impl PluginSet {
    fn empty() -> PluginSet {
        PluginSet {
            chain: Vec::new(),
            metrics: None,
            recorder: None,
            lists: false,
            shown: ShownKept::default(),
            hooks: false,
        }
    }

    /// Orders by priority (higher first), then by name.
    fn new(mut chain: Vec<Arc<Loaded>>) -> PluginSet {
        chain.sort_by(|a, b| b.entry.priority.cmp(&a.entry.priority).then_with(|| a.name.cmp(&b.name)));
        let lists = chain.iter().any(|p| matches!(&p.plugin, Runs::Ready(w) if w.contract().lists()));
        let hooks = chain.iter().any(|p| matches!(&p.plugin, Runs::Ready(w) if w.interest().is_some()));
        PluginSet { chain, metrics: None, recorder: None, lists, shown: ShownKept::default(), hooks }
    }

    /// Whether a plugin of the chain for `server` may hide or rename tools (one of
    /// `switchyard:policy@0.2.0`): only then is a `tools/call` checked against what its client
    /// was shown.
    pub fn may_hide_or_rename(&self, server: &str) -> bool {
        self.lists
            && self
                .chain
                .iter()
                .any(|p| p.applies_to(server) && matches!(&p.plugin, Runs::Ready(w) if w.contract().lists()))
    }

    pub fn is_empty(&self) -> bool {
        self.chain.is_empty()
    }

    /// Whether anything reads the details of calls and tool lists (arguments, declared hints):
    /// a plugin, or the recorder. Without either they are not gathered.
    pub fn reads_calls(&self) -> bool {
        !self.chain.is_empty() || self.recorder.is_some()
    }

    /// Whether the plugins that may hide or rename tools (of `switchyard:policy@0.2.0`) are the
    /// same in both sets: same files, configs and servers. When they are not, what each client
    /// is shown may have changed, which no single client's view can tell.
    pub fn shows_tools_as(&self, other: &PluginSet) -> bool {
        /// A hook's file name, content hash, config and servers.
        type Hook<'a> = (&'a str, [u8; 32], &'a str, Option<&'a [String]>);
        fn listing(set: &PluginSet) -> Vec<Hook<'_>> {
            let v2 = set.chain.iter().filter_map(|p| match &p.plugin {
                Runs::Ready(w) if w.contract().lists() => Some((p, w)),
                _ => None,
            });
            v2.map(|(p, w)| (p.name.as_str(), p.hash, w.config_json(), p.entry.servers.as_deref())).collect()
        }
        listing(self) == listing(other)
    }

    /// Whether the plugin named `plugin` refuses `tools/call` with a JSON-RPC error
    /// (`refusals = "error"`) rather than a tool result. A name not in the chain (`switchyard`,
    /// for a refusal of the host's own) takes the default: a result.
    pub fn refuses_with_error(&self, plugin: &str) -> bool {
        self.chain.iter().any(|p| p.name == plugin && p.entry.refusals == Refusals::Error)
    }

    /// Whether a plugin of the chain judges the calls to `server` (reads them in `decide` or a
    /// hook): those [`PluginSet::judges_of`] names. A chain whose plugins are all for other
    /// servers judges none of this one's calls.
    pub fn judges(&self, server: &str) -> bool {
        self.chain.iter().any(|p| p.applies_to(server))
    }

    /// The plugins that judge the calls to `server`, in chain order: each by its file name and
    /// the SHA-256 of the file that runs (for the audit log and traces).
    pub fn judges_of(&self, server: &str) -> Vec<switchyard_core::audit::PluginRef> {
        let judges = self.chain.iter().filter(|p| p.applies_to(server));
        judges
            .map(|p| switchyard_core::audit::PluginRef {
                name: p.name.clone(),
                sha256: switchyard_core::ids::hex(&p.hash),
            })
            .collect()
    }

    /// The plugins with content hooks, in chain order, each with what its hooks are for and
    /// how its entry applies them: `on-result for methods [tools/call], every tool; enforce,
    /// fail closed, payloads up to 4096 KiB` (for `status`).
    pub fn content_hooks(&self) -> Vec<(String, String)> {
        let hooked = self.chain.iter().filter_map(|p| match &p.plugin {
            Runs::Ready(w) => w.interest().map(|i| (p, i)),
            Runs::Broken(_) => None,
        });
        hooked
            .map(|(p, i)| {
                let mode = match p.entry.mode {
                    HookMode::Enforce => "enforce",
                    HookMode::Audit => "audit: logged only",
                };
                let fail = match p.entry.fails() {
                    Fail::Open => "fail open",
                    Fail::Closed => "fail closed",
                };
                let how = format!("{}; {mode}, {fail}, payloads up to {} KiB", i.describe(), p.entry.max_payload_kib);
                (p.name.clone(), how)
            })
            .collect()
    }

    /// Plugin names in chain order (for logs).
    pub fn names(&self) -> Vec<String> {
        self.chain.iter().map(|p| p.name.clone()).collect()
    }

    /// Runs the chain for one call on a plugin worker thread, in the turn of the call's
    /// session (see [`worker`]), and waits for it without blocking the async thread. With no
    /// plugins it answers at once, without leaving this thread.
    pub async fn decide_async(self: &Arc<Self>, call: &CallInfo) -> Result<Decision, Rejection> {
        let answer = if self.chain.is_empty() {
            Ok(Decision::default())
        } else {
            let args = wasm::CallArgs::new(call);
            let set = self.clone();
            worker::run(&call.session, move || set.decide_args(&args)).await.unwrap_or_else(|e| {
                // Each plugin call is guarded on its own (see `guarded`); this is the chain code.
                Err(Rejection::new("switchyard", e.to_string()))
            })
        };
        if let Some(r) = &self.recorder {
            r.decide(call, &answer);
        }
        answer
    }

    /// Runs the chain on the calling thread, which must not be an async runtime thread (use
    /// [`PluginSet::decide_async`] there): each plugin sees the decision so far; `stop` ends
    /// the chain; `reject` refuses the call. A plugin that fails (trap, deadline, memory,
    /// switched off) is skipped when its `on_error` is open and rejects the call when closed.
    /// The result is not clamped.
    pub fn decide(&self, call: &CallInfo) -> Result<Decision, Rejection> {
        if self.chain.is_empty() {
            return Ok(Decision::default());
        }
        self.decide_args(&wasm::CallArgs::new(call))
    }

    fn decide_args(&self, args: &wasm::CallArgs) -> Result<Decision, Rejection> {
        let mut decision = Decision::default();
        for p in self.chain.iter().filter(|p| p.applies_to(args.server())) {
            let plugin = match &p.plugin {
                Runs::Ready(plugin) => plugin,
                Runs::Broken(why) => {
                    if let Some(m) = &self.metrics {
                        m.plugin_call(&p.label, "decide", std::time::Duration::ZERO, Some("broken"));
                    }
                    // The load error was logged whole, once; the client's error has its sentence.
                    return Err(Rejection::new(&p.name, why.clone()));
                }
            };
            let started = std::time::Instant::now();
            let answer = guarded(|| plugin.decide_waited(args, &decision));
            self.measured(&p.label, "decide", started, &answer);
            match answer {
                Ok((wasm::Verdict::Continue(d), _)) => decision = d,
                Ok((wasm::Verdict::Stop(d), _)) => return Ok(d),
                Ok((wasm::Verdict::Reject(reason), retry_after)) => {
                    return Err(Rejection { plugin: p.name.clone(), reason, retry_after });
                }
                Err(e) => {
                    let what = match args.tool() {
                        Some(t) => format!("tools/call `{t}`"),
                        None => args.method().to_string(),
                    };
                    match p.entry.on_error {
                        OnError::Open => {
                            let note = format!("plugin skipped for {what}: it {e} (on_error = open)");
                            plugin.output().line(tracing::Level::WARN, "switchyard", &note);
                        }
                        OnError::Closed => {
                            let note = format!("{what} rejected: the plugin {e} (on_error = closed)");
                            plugin.output().line(tracing::Level::WARN, "switchyard", &note);
                            return Err(Rejection::new(&p.name, format!("plugin failed: {e}")));
                        }
                    }
                }
            }
        }
        Ok(decision)
    }

    /// [`PluginSet::annotate`] for many tools at once, on a plugin worker thread in `lane`'s
    /// turn. With no plugins it answers at once with the declared hints.
    pub async fn annotate_async(self: &Arc<Self>, lane: &str, server: &str, tools: Vec<(String, Hints)>) -> Vec<Hints> {
        if self.chain.is_empty() {
            if let Some(r) = &self.recorder {
                for (tool, declared) in &tools {
                    r.annotate(server, tool, declared, declared);
                }
            }
            return tools.into_iter().map(|(_, declared)| declared).collect();
        }
        let set = self.clone();
        let server = server.to_string();
        let fallback: Vec<Hints> = tools.iter().map(|(_, d)| d.clone()).collect();
        let run = worker::run(lane, move || {
            tools.iter().map(|(tool, declared)| set.annotate(&server, tool, declared)).collect::<Vec<_>>()
        });
        run.await.unwrap_or_else(|e| {
            tracing::warn!("annotations left as the server declared them: {e}");
            fallback
        })
    }

    /// Effective hints for a tool, on the calling thread (not an async runtime thread):
    /// `declared` passed through every plugin's `annotate` in chain order. A failing plugin is
    /// skipped (annotations are advisory; on_error is about calls).
    pub fn annotate(&self, server: &str, tool: &str, declared: &Hints) -> Hints {
        let mut hints = declared.clone();
        for p in self.chain.iter().filter(|p| p.applies_to(server)) {
            // A broken plugin is skipped: its load error was logged once.
            let Runs::Ready(plugin) = &p.plugin else { continue };
            let started = std::time::Instant::now();
            let answer = guarded(|| plugin.annotate(server, tool, declared, &hints));
            self.measured(&p.label, "annotate", started, &answer);
            match answer {
                Ok(h) => hints = h,
                Err(e) => {
                    let note = format!("annotate of tool `{tool}` skipped: the plugin {e}");
                    plugin.output().line(tracing::Level::WARN, "switchyard", &note);
                }
            }
        }
        if let Some(r) = &self.recorder {
            r.annotate(server, tool, declared, &hints);
        }
        hints
    }
}

impl PluginSet {
    /// Counts one plugin call (`op`: decide, annotate) that began at `started`.
    fn measured<T>(
        &self,
        plugin: &Arc<str>,
        op: &'static str,
        started: std::time::Instant,
        answer: &Result<T, PluginError>,
    ) {
        let Some(m) = &self.metrics else { return };
        let failed = answer.as_ref().err().map(|e| match e {
            PluginError::Deadline(_) => "deadline",
            PluginError::OutOfMemory(_) => "memory",
            PluginError::Trap(_) => "trap",
            PluginError::SwitchedOff(_) => "breaker_open",
            PluginError::Init(_) | PluginError::ConfigRefused(_) | PluginError::Host(_) => "error",
        });
        m.plugin_call(plugin, op, started.elapsed(), failed);
    }
}

/// Runs one plugin call so that a panic in the host while serving it (a bug, but possible in
/// any WASI host function) fails that plugin's call, never the whole request.
fn guarded<T>(f: impl FnOnce() -> Result<T, PluginError>) -> Result<T, PluginError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(PluginError::Host(worker::panic_text(&*p))))
}

impl Loaded {
    /// Blocking: compiles, checks and inits. See [`wasm::Plugin::load`].
    fn load(name: &str, bytes: &[u8], entry: &PluginEntry) -> anyhow::Result<Loaded> {
        let hash = wasm::content_hash(bytes);
        let config_json = entry.config_json()?;
        let plugin = wasm::Plugin::load(name, bytes, &hash, wasm::Limits::from_entry(entry), &config_json, false)?;
        let plugin = Runs::Ready(Box::new(plugin));
        let (name, label) = (name.to_string(), Arc::from(name));
        Ok(Loaded { name, label, hash, plugin, entry: entry.clone() })
    }

    /// The stand-in for a plugin that must run and does not load (see [`Runs::Broken`]).
    fn broken(name: &str, hash: [u8; 32], entry: &PluginEntry, why: String) -> Loaded {
        let plugin = Runs::Broken(why);
        let (name, label) = (name.to_string(), Arc::from(name));
        Loaded { name, label, hash, plugin, entry: entry.clone() }
    }

    fn is_ready(&self) -> bool {
        matches!(self.plugin, Runs::Ready(_))
    }

    /// Whether it is a stand-in refusing calls with `why`.
    fn broken_with(&self, why: &str) -> bool {
        matches!(&self.plugin, Runs::Broken(w) if w == why)
    }

    #[cfg(test)]
    fn plugin(&self) -> &wasm::Plugin {
        match &self.plugin {
            Runs::Ready(p) => p,
            Runs::Broken(why) => panic!("{} cannot run: {why}", self.name),
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_content;
#[cfg(test)]
mod tests_hooks;
#[cfg(test)]
mod tests_live;
#[cfg(test)]
mod tests_v2;
