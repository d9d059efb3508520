//! Loading the plugins directory and hot-reloading it when files change.
//!
//! Every change event triggers a rescan of the whole directory (cheap: files are hashed and
//! unchanged ones reused), so create, modify, rename-into-place and delete are one code path.
//! A file that fails to load leaves the last good version of that plugin in force.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio_util::sync::CancellationToken;

use super::{Loaded, PluginSet, Policy};
use crate::config::{Config, PluginEntry};

/// Events closer together than this are handled as one change (editors write in bursts).
const DEBOUNCE: Duration = Duration::from_millis(250);

/// Picks the plugins directory and says in the log which one and why. A missing directory is
/// created so that it can be watched and plugins dropped into it later.
pub(super) fn resolve_dir(config: &Config, cli_dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let (dir, why) = if let Some(d) = cli_dir {
        (d, "from --plugins")
    } else if let Some(base) = &config.base_dir {
        (base.join("plugins"), "beside the config file")
    } else {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .context("no --plugins directory, no config file, and HOME is not set")?;
        (home.join(".config/switchyard/plugins"), "the default")
    };
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("plugins directory {} does not exist and cannot be created", dir.display()))?;
        tracing::info!("created the empty plugins directory {}", dir.display());
    }
    let dir = dir.canonicalize().unwrap_or(dir);
    tracing::info!("plugins directory: {} ({why})", dir.display());
    Ok(dir)
}

/// Knows what is loaded from the directory, to reuse unchanged plugins across rescans.
pub(super) struct Loader {
    dir: PathBuf,
    entries: Vec<PluginEntry>,
    loaded: BTreeMap<String, Arc<Loaded>>,
    /// Hash of the last version of a file that failed, so it is reported once, not per event.
    failed: BTreeMap<String, [u8; 32]>,
    first_scan: bool,
}

impl Loader {
    pub(super) fn new(dir: PathBuf, entries: Vec<PluginEntry>) -> Loader {
        Loader { dir, entries, loaded: BTreeMap::new(), failed: BTreeMap::new(), first_scan: true }
    }

    /// Candidate plugin files: every `*.wasm` directly in the directory, plus `[[plugins]]`
    /// entries that name a path below it.
    fn candidates(&self) -> BTreeMap<String, PathBuf> {
        let mut out = BTreeMap::new();
        match std::fs::read_dir(&self.dir) {
            Ok(rd) => {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    // Dot files are editors' and copy tools' temporaries, never plugins.
                    if name.starts_with('.') || !name.ends_with(".wasm") {
                        continue;
                    }
                    let path = e.path();
                    if path.is_file() {
                        out.insert(name, path);
                    }
                }
            }
            Err(e) => tracing::warn!("cannot read plugins directory {}: {e}", self.dir.display()),
        }
        for entry in &self.entries {
            if entry.file.contains('/') {
                let path = self.dir.join(&entry.file);
                if path.is_file() {
                    out.insert(entry.file.clone(), path);
                }
            }
        }
        out
    }

    fn entry_for(&self, name: &str) -> PluginEntry {
        self.entries.iter().find(|e| e.file == name).cloned().unwrap_or_else(|| PluginEntry::defaults_for(name))
    }

    /// Rescans the directory (blocking: reads, hashes, compiles). Returns the new set when
    /// anything changed (always on the first scan), None when the set in force stays.
    pub(super) fn scan(&mut self) -> Option<PluginSet> {
        let mut changed = std::mem::take(&mut self.first_scan);
        let found = self.candidates();

        let gone: Vec<String> = self.loaded.keys().filter(|n| !found.contains_key(*n)).cloned().collect();
        for name in gone {
            self.loaded.remove(&name);
            tracing::info!(plugin = %name, "plugin removed (file deleted)");
            changed = true;
        }
        self.failed.retain(|n, _| found.contains_key(n));

        for (name, path) in &found {
            let bytes = match std::fs::read(path) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(plugin = %name, "cannot read {}: {e}; keeping the version in force", path.display());
                    continue;
                }
            };
            let hash = super::wasm::content_hash(&bytes);
            if self.loaded.get(name).is_some_and(|l| l.hash == hash) || self.failed.get(name) == Some(&hash) {
                continue;
            }
            let started = Instant::now();
            match Loaded::load(name, &bytes, &self.entry_for(name)) {
                Ok(l) => {
                    let verb = if self.loaded.contains_key(name) { "reloaded" } else { "loaded" };
                    tracing::info!(
                        plugin = %name,
                        "plugin {verb} ({} bytes, sha256 {}…) in {} ms",
                        bytes.len(),
                        hex8(&hash),
                        started.elapsed().as_millis()
                    );
                    self.failed.remove(name);
                    self.loaded.insert(name.clone(), Arc::new(l));
                    changed = true;
                }
                Err(e) => {
                    let keeping = if self.loaded.contains_key(name) {
                        "keeping the last good version in force"
                    } else {
                        "not loaded"
                    };
                    tracing::error!(plugin = %name, "plugin {} is broken: {e:#}; {keeping}", path.display());
                    self.failed.insert(name.clone(), hash);
                }
            }
        }
        changed.then(|| PluginSet::new(self.loaded.values().cloned().collect()))
    }
}

fn hex8(hash: &[u8; 32]) -> String {
    hash[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// Watches the directory and swaps in a new set after each (debounced) change, until
/// `shutdown`. Loading runs on the blocking pool, off the request path.
pub(super) fn watch(policy: Policy, mut loader: Loader, shutdown: CancellationToken) -> anyhow::Result<()> {
    let dir: PathBuf = loader.dir.clone();
    // Capacity 1: a pending rescan covers any number of further events.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |res: DebounceEventResult| match res {
        Ok(events) if events.iter().any(|e| !e.kind.is_access()) => {
            let _ = tx.try_send(());
        }
        Ok(_) => {}
        Err(errors) => {
            for e in errors {
                tracing::warn!("plugins directory watcher: {e}");
            }
        }
    })
    .context("cannot start the plugins directory watcher")?;
    debouncer
        .watch(&dir, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch plugins directory {}", dir.display()))?;

    tokio::spawn(async move {
        // Dropping the debouncer stops its thread: keep it for the life of this task.
        let _debouncer = debouncer;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                got = rx.recv() => {
                    if got.is_none() {
                        break;
                    }
                    let (set, back) = match tokio::task::spawn_blocking(move || {
                        let set = loader.scan();
                        (set, loader)
                    })
                    .await
                    {
                        Ok(r) => r,
                        Err(e) => {
                            tracing::error!("plugin reload task failed: {e}; hot reload stops");
                            break;
                        }
                    };
                    loader = back;
                    if let Some(set) = set {
                        tracing::info!("policy plugins in force: [{}]", set.names().join(", "));
                        policy.publish(set);
                    }
                }
            }
        }
    });
    Ok(())
}
