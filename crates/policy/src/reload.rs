//! Finding the plugins directory and hot-reloading it when files or `[[plugins]]` entries
//! change.
//!
//! Every change event triggers a rescan of the whole directory (cheap: files are hashed and
//! unchanged ones reused), so create, modify, rename-into-place and delete are one code path,
//! and so are new entries ([`Policy::set_entries`]); what a scan does is in [`super::loader`].
//! The directory's parent is watched too, so that deleting, renaming or replacing the directory
//! itself (a deploy that swaps it, a symlink switched to a new release) does not end hot reload.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::Policy;
use super::loader::Loader;
use switchyard_config::{Config, PluginEntry};

/// New `[[plugins]]` entries for the watcher, and who waits until the set they make is in force.
pub(super) type EntriesRequest = (Vec<PluginEntry>, oneshot::Sender<()>);

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
    let (dir, why) = pick_dir(config, cli_dir)?;
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

/// The plugins directory for `config` and `--plugins` (`cli_dir`), and why that one.
pub(super) fn pick_dir(config: &Config, cli_dir: Option<PathBuf>) -> anyhow::Result<(PathBuf, &'static str)> {
    Ok(if let Some(d) = cli_dir {
        (d, "from --plugins")
    } else if let Some(base) = &config.base_dir {
        (base.join("plugins"), "beside the config file")
    } else {
        (default_dir()?, "the default")
    })
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

/// Watches the directory and swaps in a new set after each (debounced) change, and after each
/// change of the entries (`entries`), until `shutdown`. Loading runs on a thread of its own, off
/// the request path. The parent is watched for the directory itself going away and coming back:
/// then the directory's own watch is set up again and the directory rescanned.
pub(super) fn watch(
    policy: Policy,
    loader: Loader,
    entries: mpsc::UnboundedReceiver<EntriesRequest>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let dir: PathBuf = loader.dir().to_path_buf();
    let parent = dir.parent().map(Path::to_path_buf);
    // Capacity 1: a pending rescan covers any number of further events.
    let (tx, events) = mpsc::channel::<()>(1);
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
    let follower = Follower { policy, watcher, dir, rearm, dir_gone: false };
    tokio::spawn(follower.run(loader, events, entries, shutdown));
    Ok(())
}

/// The task that follows the directory and the entries.
struct Follower {
    policy: Policy,
    /// Dropping the watcher stops its thread: kept for the life of the task.
    watcher: notify::RecommendedWatcher,
    dir: PathBuf,
    /// Set when an event was about the directory itself.
    rearm: Arc<AtomicBool>,
    dir_gone: bool,
}

impl Follower {
    async fn run(
        mut self,
        mut loader: Loader,
        mut events: mpsc::Receiver<()>,
        mut entries: mpsc::UnboundedReceiver<EntriesRequest>,
        shutdown: CancellationToken,
    ) {
        loop {
            let mut waiting = Vec::new();
            tokio::select! {
                _ = shutdown.cancelled() => break,
                got = events.recv() => {
                    if got.is_none() {
                        break;
                    }
                    // One rescan for a burst: once no event came for DEBOUNCE.
                    while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, events.recv()).await {}
                    if !self.directory_is_there() {
                        continue;
                    }
                }
                got = entries.recv() => {
                    let Some((mut wanted, done)) = got else { break };
                    waiting.push(done);
                    // Saves in a row: the last one counts, and every waiter is told.
                    while let Ok((later, done)) = entries.try_recv() {
                        wanted = later;
                        waiting.push(done);
                    }
                    loader.set_entries(wanted);
                }
            }
            let r = super::worker::run_alone("switchyard-plugin-load", move || {
                let scan = loader.scan();
                (scan, loader)
            })
            .await;
            match r {
                Ok((scan, back)) => {
                    self.policy.took(scan, back.entries());
                    loader = back;
                }
                Err(e) => {
                    tracing::error!("plugin reload failed: {e:#}; hot reload stops");
                    break;
                }
            }
            for done in waiting {
                let _ = done.send(());
            }
        }
    }

    /// Whether the directory is there to rescan, after an event that may have been about it:
    /// whatever happened to it, the watch follows what its name means now.
    fn directory_is_there(&mut self) -> bool {
        let dir = &self.dir;
        if !self.rearm.swap(false, Ordering::Relaxed) {
            return !self.dir_gone;
        }
        let _ = self.watcher.unwatch(dir);
        if !dir.is_dir() {
            if !self.dir_gone {
                tracing::warn!(
                    "plugins directory {} disappeared; the plugins in force stay in force, \
                     and hot reload resumes when it is back",
                    dir.display()
                );
            }
            self.dir_gone = true;
            return false;
        }
        if let Err(e) = self.watcher.watch(dir, RecursiveMode::NonRecursive) {
            tracing::error!("cannot watch plugins directory {} again: {e}", dir.display());
        }
        if std::mem::take(&mut self.dir_gone) {
            tracing::info!("plugins directory {} is back; rescanning it", dir.display());
        } else {
            tracing::info!("plugins directory {} was replaced; rescanning it", dir.display());
        }
        true
    }
}
