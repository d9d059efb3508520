//! Loading the plugins directory and hot-reloading it when files change.
//!
//! Every change event triggers a rescan of the whole directory (cheap: files are hashed and
//! unchanged ones reused), so create, modify, rename-into-place and delete are one code path.
//! A file that fails to load leaves the last good version of that plugin in force, and so does
//! deleting the file of a plugin that has a `[[plugins]]` entry. The directory's parent is
//! watched too, so that deleting, renaming or replacing the directory itself (a deploy that
//! swaps it, a symlink switched to a new release) does not end hot reload.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use notify::{RecursiveMode, Watcher};
use tokio_util::sync::CancellationToken;

use super::{Loaded, PluginSet, Policy};
use switchyard_config::{Config, OnError, PluginEntry};

/// Events closer together than this are handled as one change (editors write in bursts). The
/// wait is timed on the runtime and starts with an event: nothing ticks while nothing changes.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// The most of a plugin file that is read: far above any real component, and a bound on memory
/// when the path names something endless (`/dev/zero`, a fifo fed forever).
pub(crate) const MAX_PLUGIN_BYTES: u64 = 64 * 1024 * 1024;

/// Reads a plugin file, refusing one over [`MAX_PLUGIN_BYTES`] without reading past the limit.
pub(crate) fn read_plugin_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let limit = MAX_PLUGIN_BYTES;
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 > limit {
        anyhow::bail!(
            "{} is over {} MiB, the most switchyard reads of a plugin file: it is not a plugin (check the path)",
            path.display(),
            limit / (1024 * 1024)
        );
    }
    Ok(bytes)
}

/// Picks the plugins directory and says in the log which one and why. A missing directory is
/// created so that it can be watched and plugins dropped into it later.
pub(super) fn resolve_dir(config: &Config, cli_dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let (dir, why) = if let Some(d) = cli_dir {
        (d, "from --plugins")
    } else if let Some(base) = &config.base_dir {
        (base.join("plugins"), "beside the config file")
    } else {
        (default_dir()?, "the default")
    };
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("plugins directory {} does not exist and cannot be created", dir.display()))?;
        tracing::info!("created the empty plugins directory {}", dir.display());
    }
    // Absolute but not canonical: when the path is a symlink that a deploy switches to a new
    // release, the watcher must follow the name, not the directory it first pointed to.
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    tracing::info!("plugins directory: {} ({why})", dir.display());
    Ok(dir)
}

/// `switchyard/plugins` in the user's config directory: `$XDG_CONFIG_HOME`, else `~/.config`
/// (an empty or relative XDG_CONFIG_HOME is ignored, as the XDG base directory spec says);
/// `%APPDATA%` on Windows.
fn default_dir() -> anyhow::Result<PathBuf> {
    let base = switchyard_os::dirs::config_home().with_context(|| {
        format!(
            "no --plugins directory, no config file, and no config directory ({} is not set)",
            switchyard_os::dirs::HOME_VAR
        )
    })?;
    Ok(base.join("switchyard").join("plugins"))
}

/// What a scan found.
pub(super) struct Scan {
    /// The new set when anything changed (always on the first scan), None when the set in
    /// force stays.
    pub set: Option<PluginSet>,
    /// Plugins with a `[[plugins]]` entry that cannot run, each with the reason.
    pub configured_failures: Vec<String>,
}

/// Knows what is loaded from the directory, to reuse unchanged plugins across rescans.
pub(super) struct Loader {
    dir: PathBuf,
    entries: Vec<PluginEntry>,
    loaded: BTreeMap<String, Arc<Loaded>>,
    /// Hash of the last version of a file that failed, so it is reported once, not per event.
    failed: BTreeMap<String, [u8; 32]>,
    /// Configured plugins whose file is gone (reported once; their last version stays).
    missing: BTreeSet<String>,
    first_scan: bool,
}

impl Loader {
    pub(super) fn new(dir: PathBuf, entries: Vec<PluginEntry>) -> Loader {
        Loader {
            dir,
            entries,
            loaded: BTreeMap::new(),
            failed: BTreeMap::new(),
            missing: BTreeSet::new(),
            first_scan: true,
        }
    }

    /// Candidate plugin files: every `*.wasm` directly in the directory, plus `[[plugins]]`
    /// entries that name a path below it. None when the directory cannot be read.
    fn candidates(&self) -> Option<BTreeMap<String, PathBuf>> {
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
            Err(e) => {
                tracing::warn!("cannot read plugins directory {}: {e}; the plugins in force stay", self.dir.display());
                return None;
            }
        }
        for entry in &self.entries {
            if entry.file.contains('/') {
                let path = self.dir.join(&entry.file);
                if path.is_file() {
                    out.insert(entry.file.clone(), path);
                }
            }
        }
        Some(out)
    }

    fn entry(&self, name: &str) -> Option<&PluginEntry> {
        self.entries.iter().find(|e| e.file == name)
    }

    fn entry_for(&self, name: &str) -> PluginEntry {
        self.entry(name).cloned().unwrap_or_else(|| PluginEntry::defaults_for(name))
    }

    /// Rescans the directory (blocking: reads, hashes, compiles and runs `init`; keep it off
    /// any async runtime thread).
    pub(super) fn scan(&mut self) -> Scan {
        let mut configured_failures = Vec::new();
        let Some(found) = self.candidates() else {
            if std::mem::take(&mut self.first_scan) {
                configured_failures.push(format!("the plugins directory {} cannot be read", self.dir.display()));
            }
            return Scan { set: None, configured_failures };
        };
        let mut changed = std::mem::take(&mut self.first_scan);

        for entry in self.entries.iter().filter(|e| e.required) {
            let name = &entry.file;
            if found.contains_key(name) {
                self.missing.remove(name);
                continue;
            }
            let path = self.dir.join(name);
            if !self.loaded.contains_key(name) {
                configured_failures.push(format!(
                    "plugin {} does not exist: put it there, or remove its [[plugins]] entry (or give it required = false)",
                    path.display()
                ));
            } else if self.missing.insert(name.clone()) {
                tracing::error!(
                    plugin = %name,
                    "plugin file {} was deleted, but its [[plugins]] entry requires it: the version loaded \
                     stays in force (remove the entry, or set required = false, and restart to drop it)",
                    path.display()
                );
            }
        }
        let gone: Vec<String> = self
            .loaded
            .keys()
            .filter(|n| !found.contains_key(*n) && !self.entry(n).is_some_and(|e| e.required))
            .cloned()
            .collect();
        for name in gone {
            self.loaded.remove(&name);
            tracing::info!(plugin = %name, "plugin removed (file deleted)");
            changed = true;
        }
        self.failed.retain(|n, _| found.contains_key(n));

        for (name, path) in &found {
            let bytes = match read_plugin_file(path) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(plugin = %name, "{e:#}; keeping the version in force");
                    continue;
                }
            };
            let hash = super::wasm::content_hash(&bytes);
            if self.loaded.get(name).is_some_and(|l| l.hash == hash) || self.failed.get(name) == Some(&hash) {
                continue;
            }
            let started = Instant::now();
            // A component of an interpreter (Python, JS) takes tens of seconds to compile the
            // first time: say so before, not only after.
            if bytes.len() > 4 << 20 {
                tracing::info!(
                    plugin = %name,
                    "compiling plugin ({} MB); a large component (Python, JavaScript) takes up to a minute the first time, then loads from the cache",
                    bytes.len() >> 20
                );
            }
            match Loaded::load(name, &bytes, &self.entry_for(name)) {
                Ok(l) => {
                    let verb = if self.loaded.get(name).is_some_and(|l| l.is_ready()) { "reloaded" } else { "loaded" };
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
                    // The whole error for the log; one sentence for what clients and terminals get.
                    let reason = format!("{e:#}");
                    let sentence = super::wasm::sentence(path, &e);
                    let entry = self.entry(name).cloned();
                    let has_good = self.loaded.get(name).is_some_and(|l| l.is_ready());
                    if entry.as_ref().is_some_and(|e| e.required) && !has_good {
                        configured_failures.push(sentence.clone());
                    }
                    let keeping = match (&entry, has_good) {
                        (_, true) => "keeping the last good version in force",
                        (Some(e), false) if e.on_error == OnError::Closed => {
                            // A configured closed plugin that never ran must not fail open.
                            let l = Loaded::broken(name, hash, e, sentence);
                            self.loaded.insert(name.clone(), Arc::new(l));
                            changed = true;
                            "on_error = closed: the calls it would judge are rejected until it loads"
                        }
                        _ => "not loaded",
                    };
                    tracing::error!(plugin = %name, "plugin {} is broken: {reason}; {keeping}", path.display());
                    self.failed.insert(name.clone(), hash);
                }
            }
        }
        let set = changed.then(|| PluginSet::new(self.loaded.values().cloned().collect()));
        Scan { set, configured_failures }
    }
}

fn hex8(hash: &[u8; 32]) -> String {
    hash[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// Watches the directory and swaps in a new set after each (debounced) change, until
/// `shutdown`. Loading runs on a thread of its own, off the request path. The parent is
/// watched for the directory itself going away and coming back: then the directory's own
/// watch is set up again and the directory rescanned.
pub(super) fn watch(policy: Policy, mut loader: Loader, shutdown: CancellationToken) -> anyhow::Result<()> {
    let dir: PathBuf = loader.dir.clone();
    let parent = dir.parent().map(Path::to_path_buf);
    // Capacity 1: a pending rescan covers any number of further events.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    let rearm = Arc::new(AtomicBool::new(false));
    let (watched, flag) = (dir.clone(), rearm.clone());
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
        Ok(e) if e.kind.is_access() => {}
        Ok(e) => {
            let mut wanted = false;
            if e.paths.iter().any(|p| p == &watched) {
                // The directory itself was created, deleted, renamed or replaced.
                flag.store(true, Ordering::Relaxed);
                wanted = true;
            } else if e.paths.iter().any(|p| p.parent() == Some(watched.as_path())) {
                wanted = true;
            }
            if wanted {
                let _ = tx.try_send(());
            }
        }
        Err(e) => tracing::warn!("plugins directory watcher: {e}"),
    })
    .context("cannot start the plugins directory watcher")?;
    watcher
        .watch(&dir, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch plugins directory {}", dir.display()))?;
    match &parent {
        Some(p) => {
            if let Err(e) = watcher.watch(p, RecursiveMode::NonRecursive) {
                tracing::warn!(
                    "cannot watch {} (the plugins directory's parent): {e}; if the plugins directory \
                     is deleted or replaced, hot reload stops until switchyard restarts",
                    p.display()
                );
            }
        }
        None => tracing::warn!("the plugins directory {} has no parent to watch", dir.display()),
    }

    tokio::spawn(async move {
        // Dropping the watcher stops its thread: keep it for the life of this task.
        let mut watcher = watcher;
        let mut dir_gone = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                got = rx.recv() => {
                    if got.is_none() {
                        break;
                    }
                    // One rescan for a burst: once no event came for DEBOUNCE.
                    while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {}
                    if rearm.swap(false, Ordering::Relaxed) {
                        // Whatever happened to the directory, watch what the name means now.
                        let _ = watcher.unwatch(&dir);
                        if !dir.is_dir() {
                            if !dir_gone {
                                tracing::warn!(
                                    "plugins directory {} disappeared; the plugins in force stay in force, \
                                     and hot reload resumes when it is back",
                                    dir.display()
                                );
                            }
                            dir_gone = true;
                            continue;
                        }
                        if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
                            tracing::error!("cannot watch plugins directory {} again: {e}", dir.display());
                        }
                        if std::mem::take(&mut dir_gone) {
                            tracing::info!("plugins directory {} is back; rescanning it", dir.display());
                        } else {
                            tracing::info!("plugins directory {} was replaced; rescanning it", dir.display());
                        }
                    } else if dir_gone {
                        continue;
                    }
                    let r = super::worker::run_alone("switchyard-plugin-load", move || {
                        let scan = loader.scan();
                        (scan.set, loader)
                    })
                    .await;
                    let (set, back) = match r {
                        Ok(r) => r,
                        Err(e) => {
                            tracing::error!("plugin reload failed: {e:#}; hot reload stops");
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
