//! The daemon's config hot reload: each saved version of the file that loads is applied, server
//! by server, to the running router, after its `[[plugins]]` entries are put in force.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use switchyard_config::{Config, PluginEntry, Tolerated};
use switchyard_router::registry::Servers;

/// Edits of the config file within this long are applied together (editors write in steps).
const RELOAD_SETTLE: Duration = Duration::from_millis(150);

/// The config in force: each server's part of the file as written, to tell which changed.
#[derive(Default)]
pub(super) struct Applied {
    parts: BTreeMap<String, toml::Value>,
    text: String,
    /// Where the daemon's own settings (`[http]`, `[daemon]`) of each version applied go.
    pub(super) settings: Option<tokio::sync::watch::Sender<super::live::Settings>>,
    /// `[audit]` as the daemon started with it (read at start only), and the last other
    /// version of it that an edit brought, said once.
    pub(super) audit: Option<switchyard_config::AuditConfig>,
    audit_told: Option<switchyard_config::AuditConfig>,
    /// `[telemetry]` as the daemon started with it (read at start only), and the last other
    /// version of it that an edit brought, said once.
    pub(super) telemetry: Option<switchyard_config::TelemetryConfig>,
    telemetry_told: Option<switchyard_config::TelemetryConfig>,
}

impl Applied {
    /// What in the file decides how server `name` runs: its own table and the defaults above it.
    fn part(file: &toml::Table, name: &str) -> toml::Value {
        let mut part = toml::Table::new();
        // `budgets`: what each client is shown of its tools (docs/search.md).
        for key in ["limits", "pools", "server", "budgets"] {
            if let Some(v) = file.get(key) {
                part.insert(key.to_string(), v.clone());
            }
        }
        if let Some(v) = file.get("servers").and_then(|s| s.get(name)) {
            part.insert("this".to_string(), v.clone());
        }
        toml::Value::Table(part)
    }

    /// Brings the router to `loaded`: new servers are added, changed ones replaced, removed ones
    /// taken out. A server whose table does not load keeps the configuration in force; one that
    /// has none (a start, or a server new in the file) is refused to its clients with the error,
    /// and so is each server a `[[plugins]]` entry that does not load applies to.
    pub(super) fn apply(&mut self, router: &Arc<Servers>, loaded: &Tolerated, text: &str) {
        let file: toml::Table = text.parse().unwrap_or_default();
        let config = &loaded.config;
        let wanted = config.servers();
        let mut parts = BTreeMap::new();
        let refused = self.keep_or_refuse(router, loaded, &mut parts);
        for (name, server_config) in &wanted {
            if parts.contains_key(name) || refused.contains(name) {
                continue;
            }
            let part = Self::part(&file, name);
            let before = self.parts.get(name);
            if before == Some(&part) {
                parts.insert(name.clone(), part);
                continue;
            }
            let why = match before {
                Some(_) => format!("server `{name}` changed in the config"),
                None => String::new(),
            };
            // A server with `client_env` is a template: its servers are made per client's values.
            let added = if server_config.server.launch.client_env.is_empty() {
                router.build(server_config).map(|server| router.add(server, &why))
            } else {
                router.add_template(server_config, &why)
            };
            match added {
                Ok(()) => {
                    if before.is_none() && !self.parts.is_empty() {
                        tracing::info!(server = %name, "server `{name}` added to the config");
                    }
                }
                Err(e) => {
                    tracing::error!(server = %name, "server `{name}` cannot be used: {e:#}");
                    router.mark_broken(name, format!("{e:#}"));
                }
            }
            parts.insert(name.clone(), part);
        }
        // `[[plugins]]` entries are applied before (see `apply_plugins`); `[http]` and `[daemon]`
        // by the daemon's own task, after.
        if let Some(settings) = &self.settings {
            let now = super::live::Settings::of(loaded);
            settings.send_if_modified(|s| std::mem::replace(s, now.clone()) != now);
        }
        if let Some(started) = &self.audit
            && *started != config.audit
            && self.audit_told.as_ref() != Some(&config.audit)
        {
            tracing::warn!(
                "[audit] changed in the config: the daemon reads it when it starts, so the audit log goes on as before until then (`switchyard stop`; the next client starts it again)"
            );
            self.audit_told = Some(config.audit.clone());
        }
        if let Some(started) = &self.telemetry
            && *started != config.telemetry
            && self.telemetry_told.as_ref() != Some(&config.telemetry)
        {
            tracing::warn!(
                "[telemetry] changed in the config: the daemon reads it when it starts, so traces go where they went until then (`switchyard stop`; the next client starts it again)"
            );
            self.telemetry_told = Some(config.telemetry.clone());
        }
        for name in self.parts.keys().filter(|n| !wanted.contains_key(*n) && !parts.contains_key(*n)) {
            router.remove(name, &format!("server `{name}` was removed from the config"));
        }
        // Groups may name a server whose table does not load: its tools are then down with why.
        let mut known = config.server_names();
        known.extend(loaded.broken_servers.keys().filter(|n| !known.contains(n)).cloned().collect::<Vec<_>>());
        match switchyard_config::resolve_groups(&config.groups, &known) {
            Ok(groups) => router.set_groups(self.keep_or_refuse_groups(router, loaded, groups)),
            Err(e) => tracing::error!("[groups] cannot be used: {e}"),
        }
        self.parts = parts;
        self.text = text.to_string();
    }

    /// `groups` (those of `loaded` that load), with each group whose table does not load as it
    /// is in force, or, when none is, refused to its clients with the error (file, line, key).
    /// Each is logged once per version of the file, and shown in status.
    fn keep_or_refuse_groups(
        &self,
        router: &Servers,
        loaded: &Tolerated,
        mut groups: BTreeMap<String, switchyard_config::Group>,
    ) -> BTreeMap<String, switchyard_config::Group> {
        let mut said = Vec::new();
        let mut refused = BTreeMap::new();
        for (name, why) in &loaded.broken_groups {
            let line = match router.group_in_force(name) {
                Some(g) => {
                    groups.insert(name.clone(), g);
                    format!(
                        "group `{name}` is not changed as the config file says: {why}; the group in force stays until it loads"
                    )
                }
                None => {
                    // Not the implicit `all` in place of a `[groups.all]` that does not load.
                    groups.remove(name);
                    refused.insert(name.clone(), why.clone());
                    format!("group `{name}` cannot be used: {why}")
                }
            };
            tracing::error!(group = %name, "{line}");
            said.push(line);
        }
        router.refuse_groups(refused);
        note(router, "group_errors", (!said.is_empty()).then(|| said.into()));
        groups
    }

    /// The servers of `loaded` that are not applied as the file has them: those whose table does
    /// not load, and those a `[[plugins]]` entry that does not load applies to. Each keeps the
    /// configuration in force (its part goes into `parts` as it was), or, without one, is
    /// refused with the reason.
    fn keep_or_refuse(
        &self,
        router: &Arc<Servers>,
        loaded: &Tolerated,
        parts: &mut BTreeMap<String, toml::Value>,
    ) -> BTreeSet<String> {
        let mut refused: BTreeMap<String, String> = loaded.broken_servers.clone();
        let mut kept = Vec::new();
        for name in loaded.config.servers().into_keys() {
            if let Some(p) = loaded.broken_plugins.iter().find(|p| p.applies_to(&name)) {
                let which = p.file.as_deref().map(|f| format!("plugin {f}")).unwrap_or_else(|| "a plugin".into());
                refused.entry(name).or_insert(format!(
                    "the [[plugins]] entry of {which}, which judges its calls, does not load ({}); switchyard does not run its calls without it",
                    p.why
                ));
            }
        }
        let mut unserved = BTreeSet::new();
        for (name, why) in refused {
            match self.parts.get(&name) {
                Some(part) => {
                    let said = format!(
                        "server `{name}` is not changed as the config file says: {why}; the configuration in force stays until it loads"
                    );
                    tracing::error!(server = %name, "{said}");
                    kept.push(said);
                    parts.insert(name, part.clone());
                }
                None => {
                    tracing::error!(server = %name, "server `{name}` cannot be used: {why}");
                    router.mark_broken(&name, why);
                    unserved.insert(name);
                }
            }
        }
        note(router, "config_kept", (!kept.is_empty()).then(|| kept.into()));
        // Said even when it names no server of the file (then nothing is refused for it).
        let entries: Vec<String> =
            loaded.broken_plugins.iter().map(|p| format!("a [[plugins]] entry does not load: {}", p.why)).collect();
        note(router, "plugin_entries", (!entries.is_empty()).then(|| entries.into()));
        // Their plugins have no entry that loads: status says so once, here, not also as a
        // plugin without an entry.
        let files: Vec<&str> = loaded.broken_plugins.iter().filter_map(|p| p.file.as_deref()).collect();
        note(router, "plugin_entry_files", (!files.is_empty()).then(|| files.into()));
        unserved
    }
}

/// The config in force, shared by the file watcher and the router's look-up of a name it does not
/// know yet (see [`Servers::reread`]).
pub(super) type Shared = Arc<Mutex<Applied>>;

/// `text`, a saved version of the config file, loaded as the daemon applies it (once per
/// version: its plugin entries and its servers are applied from the same load).
fn load_saved(path: &Path, text: &str) -> Result<Tolerated, String> {
    Config::load_tolerant(path, text).map_err(|e| format!("{e:#}").replace('\n', " "))
}

/// Applies `text`, the config file's content now (`loaded` is [`load_saved`]'s), unless it is
/// what is in force: true when it was applied, or why it was not.
fn apply_text(
    router: &Arc<Servers>,
    path: &Path,
    applied: &Shared,
    text: &str,
    loaded: Result<Tolerated, String>,
) -> Result<bool, String> {
    // An empty file is a save in progress (truncated, not yet written) far more often than a wish
    // to remove every server; it would end every session.
    if text.trim().is_empty() {
        return Err("it is empty (to remove every server, leave a comment in the file)".into());
    }
    let mut applied = applied.lock().expect("lock");
    if applied.text == text {
        // Back to the version in force (an undo, a restored backup): nothing is wrong any more.
        if router.notes.read().expect("lock").contains_key("config_error") {
            tracing::info!("config file {} is back to the version in force", path.display());
            note(router, "config_error", None);
        }
        return Ok(false);
    }
    // A `[[plugins]]` entry that does not load keeps the entries in force as they are (see
    // `new_plugin_entries`), and the servers it names as they are: the rest is applied.
    let loaded = match loaded {
        Ok(l) => l,
        Err(why) => {
            note(
                router,
                "config_error",
                Some(format!("{why}; the config in force is the last one that loaded").into()),
            );
            return Err(why);
        }
    };
    tracing::info!("config file {} changed; applying it", path.display());
    applied.apply(router, &loaded, text);
    note(router, "config_error", None);
    // What is now in force, broken parts and all, is what a later start falls back on: an
    // older version would drop a `[[plugins]]` entry this save put in force.
    super::start::keep_good(path, text);
    Ok(true)
}

/// Sets (or, with None, clears) what `status` shows under `key`.
pub(super) fn note(router: &Servers, key: &'static str, value: Option<serde_json::Value>) {
    let mut notes = router.notes.write().expect("lock");
    match value {
        Some(v) => notes.insert(key, v),
        None => notes.remove(key),
    };
}

/// The `[[plugins]]` entries a saved version (`text`, `loaded` as [`load_saved`] gives it)
/// would put in force, when they differ from those in force and the file is one [`apply_text`]
/// applies.
fn new_plugin_entries(router: &Servers, text: &str, loaded: &Result<Tolerated, String>) -> Option<Vec<PluginEntry>> {
    if text.trim().is_empty() {
        return None;
    }
    let loaded = loaded.as_ref().ok()?;
    let in_force = router.policy.entries();
    let mut entries = loaded.config.plugins.clone();
    // An entry that does not load keeps the one in force for its file (if any): the other
    // entries of the save apply, and its plugin never runs without the config it had. An entry
    // whose file cannot be read keeps every entry as it is.
    for broken in &loaded.broken_plugins {
        let file = broken.file.as_deref()?;
        if let Some(old) = in_force.iter().find(|e| e.file == file) {
            entries.push(old.clone());
        }
    }
    (*in_force != entries).then_some(entries)
}

/// Puts the `[[plugins]]` entries of `text` in force, and returns once the plugin set they make
/// is: the servers applied next never run a call under the entries before (a server added with
/// a guard scoped to it in one save would otherwise serve a moment without it). Only the
/// plugins whose entry changed load again; one whose new entry does not load keeps its last
/// good version, as the log says.
async fn apply_plugins(router: &Servers, text: &str, loaded: &Result<Tolerated, String>) {
    if let Some(entries) = new_plugin_entries(router, text, loaded) {
        tracing::info!("the config's [[plugins]] entries changed; applying them");
        router.policy.set_entries(entries).await;
    }
}

/// Lets the router read the config file when a client names a server it does not know: the file
/// may have gained it a moment ago. What does not load is left to the watcher to report, and so
/// is a file whose `[[plugins]]` entries changed too: the watcher puts those in force first.
pub(super) fn reread_on_unknown_names(router: &Arc<Servers>, path: PathBuf, applied: Shared) {
    let _ = router.reread.set(Box::new(move |router: &Arc<Servers>| {
        let Ok(text) = std::fs::read_to_string(&path) else { return };
        let loaded = load_saved(&path, &text);
        if new_plugin_entries(router, &text, &loaded).is_none() {
            let _ = apply_text(router, &path, &applied, &text, loaded);
        }
    }));
}

/// Follows edits of the config file: each saved version that loads is applied; one that does not
/// leaves the config in force as it is, with one log line saying why.
pub(super) async fn watch_config(router: Arc<Servers>, path: PathBuf, applied: Shared, shutdown: CancellationToken) {
    use notify::{RecursiveMode, Watcher};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The files whose changes count: the config, and the file it links to (if it is a link).
    let watched = |target: &Option<PathBuf>| -> Vec<PathBuf> {
        [Some(path.clone()), target.clone()].into_iter().flatten().collect()
    };
    let mut target = std::fs::canonicalize(&path).ok().filter(|t| *t != path);
    let files = Arc::new(std::sync::Mutex::new(watched(&target)));
    let seen_by_watcher = files.clone();
    let mut watcher = match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reads (the daemon's own, among them) change nothing.
        let files = seen_by_watcher.lock().expect("lock");
        if let Ok(e) = event
            && !matches!(e.kind, notify::EventKind::Access(_))
            && e.paths.iter().any(|p| files.iter().any(|f| f.file_name() == p.file_name() && f.parent() == p.parent()))
        {
            let _ = tx.send(());
        }
    }) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("cannot watch {} for changes ({e}); restart the daemon to apply edits", path.display());
            return;
        }
    };
    // The directory, not the file: editors save by writing a new file and renaming it over.
    let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
        tracing::warn!("cannot watch {} for changes ({e}); restart the daemon to apply edits", dir.display());
        return;
    }
    // A config that is a link (dotfile managers make them): its target's directory too, so an
    // edit of the target is seen as well as the link being pointed elsewhere.
    let mut target_dir = target.as_ref().and_then(|t| t.parent()).map(Path::to_path_buf).filter(|d| *d != dir);
    if let Some(d) = &target_dir {
        let _ = watcher.watch(d, RecursiveMode::NonRecursive);
    }
    // Nothing seen yet: the first version read goes to `apply_text`, which also notices a file
    // that is back to the version in force (a daemon started on its last good version).
    let mut seen = "\0nothing read yet".to_string();
    loop {
        tokio::select! {
            got = rx.recv() => if got.is_none() { return },
            _ = shutdown.cancelled() => return,
        }
        // Let the save finish: the file is read once no event came for RELOAD_SETTLE.
        loop {
            tokio::time::sleep(RELOAD_SETTLE).await;
            let mut more = false;
            while rx.try_recv().is_ok() {
                more = true;
            }
            if !more {
                break;
            }
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                let marker = format!("\0{e}");
                if seen != marker {
                    tracing::warn!("cannot read config file {} ({e}); the config in force stays", path.display());
                    seen = marker;
                }
                continue;
            }
        };
        // The link may point elsewhere now: follow its target.
        let now_target = std::fs::canonicalize(&path).ok().filter(|t| *t != path);
        if now_target != target {
            target = now_target;
            *files.lock().expect("lock") = watched(&target);
        }
        let now = target.as_ref().and_then(|t| t.parent()).map(Path::to_path_buf).filter(|d| *d != dir);
        if now != target_dir {
            if let Some(d) = &target_dir {
                let _ = watcher.unwatch(d);
            }
            if let Some(d) = &now {
                let _ = watcher.watch(d, RecursiveMode::NonRecursive);
            }
            target_dir = now;
        }
        // Said once per version of the file, whatever became of it.
        if text == seen {
            continue;
        }
        seen = text.clone();
        let loaded = load_saved(&path, &text);
        apply_plugins(&router, &text, &loaded).await;
        if let Err(why) = apply_text(&router, &path, &applied, &text, loaded) {
            tracing::error!("config file {} not applied: {why}; the last good config stays in force", path.display());
        }
    }
}
