//! The policy stage: a chain of WebAssembly plugins that decides how each request is handled.
//!
//! [`Policy`] is the live handle (hot-reloaded from the plugins directory); [`PluginSet`] is
//! one immutable version of the chain, read once at the start of a request. wasmtime stays
//! inside [`wasm`]; loading and reloading live in [`reload`].

pub mod annotate;
pub mod check;
pub mod embedded;
mod reload;
mod wasm;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, OnError, PluginEntry};
use crate::decision::{CallInfo, Decision, Hints, Rejection};

pub use wasm::PluginError;

/// Cheap, cloneable handle on the live plugin set.
#[derive(Clone)]
pub struct Policy {
    inner: Arc<Inner>,
}

struct Inner {
    set: ArcSwap<PluginSet>,
    /// Generation counter: bumped after each swap, so watchers can diff what changed.
    changes: tokio::sync::watch::Sender<u64>,
    dir: Option<PathBuf>,
}

impl Policy {
    /// No plugins at all: decide returns `Decision::default()`, annotate returns declared.
    pub fn disabled() -> Policy {
        Policy::with_set(PluginSet::empty(), None)
    }

    fn with_set(set: PluginSet, dir: Option<PathBuf>) -> Policy {
        let (changes, _) = tokio::sync::watch::channel(0);
        Policy { inner: Arc::new(Inner { set: ArcSwap::from_pointee(set), changes, dir }) }
    }

    /// Resolves the plugins directory (`cli_dir`, else `plugins/` beside the config file, else
    /// `~/.config/switchyard/plugins`), loads every `*.wasm` in it and starts the hot-reload
    /// watcher, which stops when `shutdown` is cancelled. A missing directory is created; a
    /// broken plugin is logged and skipped, never fatal.
    pub async fn start(
        config: &Config,
        cli_dir: Option<PathBuf>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Policy> {
        let dir = reload::resolve_dir(config, cli_dir)?;
        let mut loader = reload::Loader::new(dir.clone(), config.plugins.clone());
        // Compiling can take tens of milliseconds per plugin: not on an async worker.
        let (set, loader) = tokio::task::spawn_blocking(move || {
            let set = loader.scan().unwrap_or_else(PluginSet::empty);
            (set, loader)
        })
        .await?;
        tracing::info!(
            dir = %dir.display(),
            "policy plugins in force: [{}]",
            set.names().join(", ")
        );
        let policy = Policy::with_set(set, Some(dir));
        reload::watch(policy.clone(), loader, shutdown)?;
        Ok(policy)
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
    fn publish(&self, set: PluginSet) {
        self.inner.set.store(Arc::new(set));
        self.inner.changes.send_modify(|n| *n += 1);
    }
}

/// One loaded plugin in a chain.
struct Loaded {
    /// File name (or the `[[plugins]]` path), used as the plugin's name in logs and errors.
    name: String,
    hash: [u8; 32],
    priority: i32,
    on_error: OnError,
    plugin: wasm::Plugin,
}

/// An immutable, ordered chain of loaded plugins.
pub struct PluginSet {
    chain: Vec<Arc<Loaded>>,
}

impl PluginSet {
    fn empty() -> PluginSet {
        PluginSet { chain: Vec::new() }
    }

    /// Orders by priority (higher first), then by name.
    fn new(mut chain: Vec<Arc<Loaded>>) -> PluginSet {
        chain.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.name.cmp(&b.name)));
        PluginSet { chain }
    }

    pub fn is_empty(&self) -> bool {
        self.chain.is_empty()
    }

    /// Plugin names in chain order (for logs).
    pub fn names(&self) -> Vec<String> {
        self.chain.iter().map(|p| p.name.clone()).collect()
    }

    /// Runs the chain: each plugin sees the decision so far; `stop` ends the chain; `reject`
    /// refuses the call. A plugin that fails (trap, deadline, memory) is skipped when its
    /// `on_error` is open and rejects the call when closed. The result is not clamped.
    pub fn decide(&self, call: &CallInfo) -> Result<Decision, Rejection> {
        let mut decision = Decision::default();
        if self.chain.is_empty() {
            return Ok(decision);
        }
        let args = wasm::CallArgs::new(call);
        for p in &self.chain {
            match p.plugin.decide(&args, &decision) {
                Ok(wasm::Verdict::Continue(d)) => decision = d,
                Ok(wasm::Verdict::Stop(d)) => return Ok(d),
                Ok(wasm::Verdict::Reject(reason)) => {
                    return Err(Rejection { plugin: p.name.clone(), reason });
                }
                Err(e) => match p.on_error {
                    OnError::Open => {
                        tracing::warn!(
                            plugin = %p.name,
                            method = %call.method,
                            tool = call.tool.as_deref().unwrap_or(""),
                            "plugin skipped for this call: it {e}"
                        );
                    }
                    OnError::Closed => {
                        tracing::warn!(plugin = %p.name, "call rejected: plugin {e} (on_error = closed)");
                        return Err(Rejection { plugin: p.name.clone(), reason: format!("plugin failed: {e}") });
                    }
                },
            }
        }
        Ok(decision)
    }

    /// Effective hints for a tool: `declared` passed through every plugin's `annotate` in chain
    /// order. A failing plugin is skipped (annotations are advisory; on_error is about calls).
    pub fn annotate(&self, server: &str, tool: &str, declared: &Hints) -> Hints {
        let mut hints = declared.clone();
        for p in &self.chain {
            match p.plugin.annotate(server, tool, declared, &hints) {
                Ok(h) => hints = h,
                Err(e) => tracing::warn!(plugin = %p.name, tool, "annotate skipped: plugin {e}"),
            }
        }
        hints
    }
}

impl Loaded {
    /// Blocking: compiles, checks and inits. See [`wasm::Plugin::load`].
    fn load(name: &str, bytes: &[u8], entry: &PluginEntry) -> anyhow::Result<Loaded> {
        let hash = wasm::content_hash(bytes);
        let config_json = entry.config_json()?;
        let plugin = wasm::Plugin::load(name, bytes, &hash, wasm::Limits::from_entry(entry), &config_json)?;
        Ok(Loaded { name: name.to_string(), hash, priority: entry.priority, on_error: entry.on_error, plugin })
    }
}

#[cfg(test)]
mod tests;
