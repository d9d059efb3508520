//! What the plugins directory and the config's `[[plugins]]` entries make together: the chain,
//! and what is wrong with it.
//!
//! A plugin applies only under its entry: the entry is the one place its config is named, so a
//! plugin never runs with another config than its entry's (a `.wasm` dropped in before its entry
//! is written does not run with `{}`; a tool filter meant as access control would let everything
//! through). A plugin that must run (`required`, or `on_error = "closed"`) and does not load
//! stands in the chain as [`Runs::Broken`], refusing the calls it would judge. A version that
//! loaded stays in force when a later file or a later entry of the same plugin does not load.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::problems::{Effect, Problem};
use super::reload::read_plugin_file;
use super::{Loaded, PluginSet, wasm};
use switchyard_config::{OnError, PluginEntry};

/// What a scan found.
pub(super) struct Scan {
    /// The new set when anything changed (always on the first scan), None when the set in
    /// force stays.
    pub set: Option<PluginSet>,
    /// Every plugin that is broken or not applied, with why.
    pub problems: Vec<Problem>,
    /// Whether the entries were applied (not when the directory could not be read).
    pub complete: bool,
}

/// What is wrong with one plugin now.
#[derive(Clone, PartialEq, Eq)]
struct Note {
    effect: Effect,
    sentence: String,
    detail: Option<String>,
}

/// Knows what is loaded from the directory, to reuse unchanged plugins across rescans.
pub(super) struct Loader {
    dir: PathBuf,
    entries: Vec<PluginEntry>,
    loaded: BTreeMap<String, Arc<Loaded>>,
    /// The file version and the entry that last failed to load, so each is reported once.
    failed: BTreeMap<String, ([u8; 32], PluginEntry)>,
    /// What is wrong with each plugin that has an entry, by file.
    notes: BTreeMap<String, Note>,
    /// Files in the directory without an entry (each logged once).
    unlisted: BTreeSet<String>,
    first_scan: bool,
}

/// The hash that stands for "no file" (a missing or unreadable one).
const NO_FILE: [u8; 32] = [0; 32];

impl Loader {
    pub(super) fn new(dir: PathBuf, entries: Vec<PluginEntry>) -> Loader {
        Loader {
            dir,
            entries,
            loaded: BTreeMap::new(),
            failed: BTreeMap::new(),
            notes: BTreeMap::new(),
            unlisted: BTreeSet::new(),
            first_scan: true,
        }
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(super) fn entries(&self) -> &[PluginEntry] {
        &self.entries
    }

    /// The entries of the next scan (a config saved with other `[[plugins]]`).
    pub(super) fn set_entries(&mut self, entries: Vec<PluginEntry>) {
        self.entries = entries;
    }

    /// The `*.wasm` files directly in the directory (dot files are editors' and copy tools'
    /// temporaries, never plugins). None when the directory cannot be read.
    fn wasm_files(&self) -> Option<BTreeSet<String>> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) => {
                tracing::warn!("cannot read plugins directory {}: {e}; the plugins in force stay", self.dir.display());
                return None;
            }
        };
        let names = rd.flatten().filter(|e| e.path().is_file()).map(|e| e.file_name().to_string_lossy().into_owned());
        Some(names.filter(|n| !n.starts_with('.') && n.ends_with(".wasm")).collect())
    }

    /// Brings the chain to the directory and the entries as they are now (blocking: reads,
    /// hashes, compiles and runs `init`; keep it off any async runtime thread).
    pub(super) fn scan(&mut self) -> Scan {
        let first = std::mem::take(&mut self.first_scan);
        let files = match self.wasm_files() {
            Some(files) => files,
            // At start there is nothing to keep: the entries are looked for one by one.
            None if first => BTreeSet::new(),
            None => return Scan { set: None, problems: self.problems(), complete: false },
        };
        let mut changed = first;
        let entries = self.entries.clone();
        let has_entry = |name: &str| entries.iter().any(|e| e.file == name);
        let unentered: Vec<String> = self.loaded.keys().filter(|n| !has_entry(n)).cloned().collect();
        for name in unentered {
            self.loaded.remove(&name);
            tracing::info!(plugin = %name, "plugin {name} is no longer applied: its [[plugins]] entry was removed");
            changed = true;
        }
        self.notes.retain(|n, _| has_entry(n));
        self.failed.retain(|n, _| has_entry(n));
        for entry in &entries {
            changed |= self.scan_entry(entry);
        }
        let unlisted: BTreeSet<String> = files.into_iter().filter(|n| !has_entry(n)).collect();
        for name in unlisted.difference(&self.unlisted) {
            tracing::warn!(plugin = %name, "{}", self.unlisted_sentence(name));
        }
        self.unlisted = unlisted;
        let set = changed.then(|| PluginSet::new(self.loaded.values().cloned().collect()));
        Scan { set, problems: self.problems(), complete: true }
    }

    /// Brings one entry's plugin up to date; true when the chain changed.
    fn scan_entry(&mut self, entry: &PluginEntry) -> bool {
        let name = entry.file.as_str();
        let path = self.dir.join(name);
        let current = self.loaded.get(name).cloned();
        if !path.is_file() {
            return self.without_file(entry, &path, current);
        }
        let bytes = match read_plugin_file(&path) {
            Ok(b) => b,
            Err(e) => return self.not_loaded(entry, &path, NO_FILE, current, &e),
        };
        let hash = wasm::content_hash(&bytes);
        if current.as_ref().is_some_and(|c| c.is_ready() && c.hash == hash && c.entry == *entry) {
            // Unchanged, or back to the version in force after a change that did not load.
            self.notes.remove(name);
            self.failed.remove(name);
            return false;
        }
        if self.failed.get(name).is_some_and(|(h, e)| *h == hash && e == entry) {
            return false;
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
        match Loaded::load(name, &bytes, entry) {
            Ok(l) => {
                let verb = match &current {
                    Some(c) if c.is_ready() && c.hash == hash => "re-initialised with its changed [[plugins]] entry",
                    Some(c) if c.is_ready() => "reloaded",
                    _ => "loaded",
                };
                tracing::info!(
                    plugin = %name,
                    "plugin {verb} ({} bytes, sha256 {}…) in {} ms",
                    bytes.len(),
                    hex8(&hash),
                    started.elapsed().as_millis()
                );
                self.failed.remove(name);
                self.notes.remove(name);
                self.loaded.insert(name.to_string(), Arc::new(l));
                true
            }
            Err(e) => self.not_loaded(entry, &path, hash, current, &e),
        }
    }

    /// An entry whose file is not there (yet, or any more).
    fn without_file(&mut self, entry: &PluginEntry, path: &Path, current: Option<Arc<Loaded>>) -> bool {
        let name = entry.file.as_str();
        self.failed.remove(name);
        if !entry.required {
            // The entry only configures the file for when it is there.
            self.notes.remove(name);
            if current.is_some() {
                self.loaded.remove(name);
                tracing::info!(plugin = %name, "plugin removed (file deleted)");
                return true;
            }
            return false;
        }
        if current.as_ref().is_some_and(|c| c.is_ready()) {
            // A guard must not fail open because a file went away.
            let sentence = format!(
                "plugin {} was deleted, but its [[plugins]] entry requires it: put it back (remove the entry, or set required = false, to drop it)",
                path.display()
            );
            self.note(name, Effect::KeptLastGood, sentence, None);
            return false;
        }
        let sentence = format!(
            "plugin {} does not exist: put it there, or remove its [[plugins]] entry (or give it required = false)",
            path.display()
        );
        self.note(name, Effect::Refuses, sentence.clone(), None);
        if current.as_ref().is_some_and(|c| c.entry == *entry && c.broken_with(&sentence)) {
            return false;
        }
        self.loaded.insert(name.to_string(), Arc::new(Loaded::broken(name, NO_FILE, entry, sentence)));
        true
    }

    /// A file that did not load with `entry`: the last good version stays; with none, a plugin
    /// that must run refuses the calls it would judge, and one that may be left out is.
    fn not_loaded(
        &mut self,
        entry: &PluginEntry,
        path: &Path,
        hash: [u8; 32],
        current: Option<Arc<Loaded>>,
        e: &anyhow::Error,
    ) -> bool {
        let name = entry.file.as_str();
        // The whole error for the log; one sentence for what clients and terminals get.
        let reason = format!("{e:#}");
        let sentence = wasm::sentence(path, e);
        self.failed.insert(name.to_string(), (hash, entry.clone()));
        if let Some(good) = current.as_ref().filter(|c| c.is_ready()) {
            let what = if good.hash == hash { "with its changed [[plugins]] entry" } else { "from the new file" };
            tracing::error!(
                plugin = %name,
                "plugin {} did not load {what} ([[plugins]] entry file = {:?}): {reason}; the last good version stays in force, as it was loaded",
                path.display(),
                entry.file
            );
            self.note(name, Effect::KeptLastGood, sentence, Some(reason));
            return false;
        }
        if entry.required || entry.on_error == OnError::Closed {
            let why = if entry.required { "its entry requires it" } else { "on_error = closed" };
            tracing::error!(
                plugin = %name,
                "plugin {} is broken: {reason}; {why}, so the calls it would judge ({}) are refused until it loads",
                path.display(),
                servers_text(entry.servers.as_deref())
            );
            self.note(name, Effect::Refuses, sentence.clone(), Some(reason));
            self.loaded.insert(name.to_string(), Arc::new(Loaded::broken(name, hash, entry, sentence)));
            return true;
        }
        tracing::error!(
            plugin = %name,
            "plugin {} is broken: {reason}; not applied (required = false, on_error = open: calls go on without it)",
            path.display()
        );
        self.note(name, Effect::NotApplied, sentence, Some(reason));
        // A stand-in from an earlier entry that did require it goes.
        self.loaded.remove(name).is_some()
    }

    /// Keeps what is wrong with `name`; a note that is new is logged (most are logged where
    /// they arise, with the whole error; those without one are logged here).
    fn note(&mut self, name: &str, effect: Effect, sentence: String, detail: Option<String>) {
        let note = Note { effect, sentence, detail };
        if self.notes.get(name) == Some(&note) {
            return;
        }
        if note.detail.is_none() {
            let what = match effect {
                Effect::Refuses => "the calls it would judge are refused until it is there",
                Effect::KeptLastGood => "the version loaded stays in force",
                Effect::NotApplied => "it is not applied",
            };
            tracing::error!(plugin = %name, "{}; {what}", note.sentence);
        }
        self.notes.insert(name.to_string(), note);
    }

    fn unlisted_sentence(&self, name: &str) -> String {
        format!(
            "plugin {} has no [[plugins]] entry, so it is not applied (a plugin runs only with the config its entry names): add `[[plugins]]` with `file = {name:?}` and its `config` to the config file",
            self.dir.join(name).display()
        )
    }

    /// Every plugin that is broken or not applied, by file name.
    pub(super) fn problems(&self) -> Vec<Problem> {
        let mut out: Vec<Problem> = self
            .notes
            .iter()
            .map(|(name, note)| Problem {
                plugin: name.clone(),
                effect: note.effect,
                sentence: note.sentence.clone(),
                detail: note.detail.clone(),
                servers: self.entries.iter().find(|e| e.file == *name).and_then(|e| e.servers.clone()),
            })
            .collect();
        out.extend(self.unlisted.iter().map(|name| Problem {
            plugin: name.clone(),
            effect: Effect::NotApplied,
            sentence: self.unlisted_sentence(name),
            detail: None,
            servers: None,
        }));
        out.sort_by(|a, b| a.plugin.cmp(&b.plugin));
        out
    }

    /// The plugins in force, by name (for `switchyard check`).
    pub(super) fn applied(&self) -> Vec<String> {
        self.loaded.values().filter(|l| l.is_ready()).map(|l| l.name.clone()).collect()
    }
}

/// The servers an entry names, for a log line.
pub(super) fn servers_text(servers: Option<&[String]>) -> String {
    match servers {
        None => "on every server".to_string(),
        Some(s) => format!("on {}", s.join(", ")),
    }
}

fn hex8(hash: &[u8; 32]) -> String {
    hash[..4].iter().map(|b| format!("{b:02x}")).collect()
}
