//! The daemon's config hot reload: each saved version of the file that loads is applied, server
//! by server, to the running router.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use switchyard_config::Config;
use switchyard_router::registry::Servers;

/// Edits of the config file within this long are applied together (editors write in steps).
const RELOAD_SETTLE: Duration = Duration::from_millis(150);

/// The config in force: each server's part of the file as written, to tell which changed.
#[derive(Default)]
pub(super) struct Applied {
    parts: BTreeMap<String, toml::Value>,
    text: String,
}

impl Applied {
    /// What in the file decides how server `name` runs: its own table and the defaults above it.
    fn part(file: &toml::Table, name: &str) -> toml::Value {
        let mut part = toml::Table::new();
        for key in ["limits", "pools", "server"] {
            if let Some(v) = file.get(key) {
                part.insert(key.to_string(), v.clone());
            }
        }
        if let Some(v) = file.get("servers").and_then(|s| s.get(name)) {
            part.insert("this".to_string(), v.clone());
        }
        toml::Value::Table(part)
    }

    /// Brings the router to `config`: new servers are added, changed ones replaced, removed ones
    /// taken out.
    pub(super) fn apply(&mut self, router: &Arc<Servers>, config: &Config, text: &str) {
        let file: toml::Table = text.parse().unwrap_or_default();
        let wanted = config.servers();
        let mut parts = BTreeMap::new();
        for (name, server_config) in &wanted {
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
        let old: toml::Table = self.text.parse().unwrap_or_default();
        for key in ["plugins", "daemon", "http"] {
            if !self.text.is_empty() && old.get(key) != file.get(key) {
                tracing::warn!(
                    "the config's {} changed; that takes effect when the daemon restarts (`switchyard stop`; the next `connect` starts it again)",
                    match key {
                        "plugins" => "[[plugins]] entries",
                        "daemon" => "[daemon] table",
                        _ => "[http] table",
                    }
                );
            }
        }
        for name in self.parts.keys().filter(|n| !wanted.contains_key(*n)) {
            router.remove(name, &format!("server `{name}` was removed from the config"));
        }
        self.parts = parts;
        self.text = text.to_string();
    }
}

/// The config in force, shared by the file watcher and the router's look-up of a name it does not
/// know yet (see [`Servers::reread`]).
pub(super) type Shared = Arc<Mutex<Applied>>;

/// Applies `text`, the config file's content now, unless it is what is in force: true when it
/// was applied, or why it was not.
fn apply_text(router: &Arc<Servers>, path: &Path, applied: &Shared, text: &str) -> Result<bool, String> {
    // An empty file is a save in progress (truncated, not yet written) far more often than a wish
    // to remove every server; it would end every session.
    if text.trim().is_empty() {
        return Err("it is empty (to remove every server, leave a comment in the file)".into());
    }
    let mut applied = applied.lock().expect("lock");
    if applied.text == text {
        return Ok(false);
    }
    let config = Config::load_text(path, text).map_err(|e| format!("{e:#}").replace('\n', " "))?;
    tracing::info!("config file {} changed; applying it", path.display());
    applied.apply(router, &config, text);
    Ok(true)
}

/// Lets the router read the config file when a client names a server it does not know: the file
/// may have gained it a moment ago. What does not load is left to the watcher to report.
pub(super) fn reread_on_unknown_names(router: &Arc<Servers>, path: PathBuf, applied: Shared) {
    let _ = router.reread.set(Box::new(move |router: &Arc<Servers>| {
        if let Ok(text) = std::fs::read_to_string(&path) {
            let _ = apply_text(router, &path, &applied, &text);
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
    let mut seen = applied.lock().expect("lock").text.clone();
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
        if let Err(why) = apply_text(&router, &path, &applied, &text) {
            tracing::error!("config file {} not applied: {why}; the last good config stays in force", path.display());
        }
    }
}
