//! What `wrap` keeps on disk: its records of replaced entries, the backups, and the atomic,
//! locked writes of client files.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use serde::{Deserialize, Serialize};

use super::backups::Backups;
use super::plan::Change;

/// A replaced entry: where it is, what it was, what it became.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Claude Code's project path for an entry of `projects.<path>.mcpServers`; None for the
    /// file's own server map.
    pub project: Option<String>,
    pub name: String,
    /// The switchyard server the entry runs.
    pub server: String,
    pub original: String,
    pub wrapped: String,
}

/// Entries `wrap --group` replaced by one entry that runs `switchyard connect --group GROUP`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// The entry's name in the client's server map.
    pub name: String,
    pub group: String,
    /// The group entry's value as written.
    pub wrapped: String,
    /// The replaced entries in file order (`original`: each one's value as it was; `wrapped`:
    /// empty, since they are gone from the file).
    pub removed: Vec<Record>,
    /// The whole file before `wrap --group`, and the SHA-256 of the file it wrote: while the file
    /// is still that one, `unwrap` gives back these bytes.
    pub before: String,
    pub after: String,
}

/// What `wrap` recorded for one client file, kept in switchyard's state directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub file: PathBuf,
    pub client: String,
    /// SHA-256 of the file as switchyard last wrote it: another hash means someone else edited it.
    pub written: String,
    pub entries: Vec<Record>,
    /// `wrap --group`'s entries (records of older switchyards have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupRecord>,
}

pub fn sha256(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Where `wrap` keeps its records, one per client file (made by [`records_locked`]).
pub(super) fn records_dir() -> anyhow::Result<PathBuf> {
    Ok(switchyard_config::paths::state_dir_path()?.join("wrapped"))
}

/// The record of one client file.
fn state_path(real: &Path) -> anyhow::Result<PathBuf> {
    Ok(records_dir()?.join(format!("{}.json", switchyard_config::paths::short_hash(real, 12))))
}

pub(super) fn read_state(real: &Path) -> anyhow::Result<Option<State>> {
    let path = state_path(real)?;
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("{}: switchyard's record of what wrap changed is damaged", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

pub(super) fn write_state(real: &Path, state: &State) -> anyhow::Result<()> {
    let path = state_path(real)?;
    if state.entries.is_empty() && state.groups.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove {}", path.display()))
            }
            _ => Ok(()),
        };
    }
    // Its directory exists: `records_locked` made it before anything was written.
    let text = serde_json::to_string_pretty(state).expect("state serialises");
    replace_file(&path, text.as_bytes(), Some(0o600))
}

/// The file a path names, links followed (a dotfile manager's link stays a link; its target
/// changes).
pub(super) fn real_path(path: &Path) -> PathBuf {
    if let Ok(real) = switchyard_os::fs::canonicalize(path) {
        return real;
    }
    // A link to a file not made yet (a dotfile manager's link to a new config): its target.
    let mut at = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    for _ in 0..40 {
        match std::fs::read_link(&at) {
            Ok(target) => at = at.parent().unwrap_or(Path::new("/")).join(target),
            Err(_) => break,
        }
    }
    at
}

/// Writes `bytes` to `path` through a temporary file in its directory renamed over it: a reader
/// sees the old file or the new one, never a part. Keeps the old file's permissions (`mode` for
/// a new file).
pub(super) fn replace_file(path: &Path, bytes: &[u8], mode: Option<u32>) -> anyhow::Result<()> {
    use std::io::Write as _;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| anyhow!("{}: not a file name", path.display()))?;
    let tmp = dir.join(format!(".{}.switchyard-{}.tmp", name.to_string_lossy(), std::process::id()));
    let perms = std::fs::metadata(path).ok().map(|m| m.permissions());
    let write = || -> std::io::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        #[cfg(unix)]
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            options.mode(perms.as_ref().map(|p| p.mode() & 0o7777).or(mode).unwrap_or(0o644));
        }
        let mut f = options.write(true).create_new(true).open(&tmp)?;
        // A new private file is its user's alone on Windows too (Unix: the mode above).
        if cfg!(windows) && perms.is_none() && mode == Some(0o600) {
            switchyard_os::fs::restrict(&tmp)?;
        }
        f.write_all(bytes)?;
        if let Some(p) = perms {
            f.set_permissions(p)?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow!("cannot write {}: {e}; it is as it was", path.display())
    })
}

/// The backup beside a file of switchyard's own (its config): `FILE.switchyard-backup`.
pub fn backup_beside(real: &Path) -> PathBuf {
    let mut name = real.file_name().unwrap_or_default().to_os_string();
    name.push(".switchyard-backup");
    real.with_file_name(name)
}

/// The top of the git work tree that tracks `path`, when git tracks it (None: not tracked, not
/// in a repository, or no git to ask).
pub fn tracked_by_git(path: &Path) -> Option<PathBuf> {
    let real = real_path(path);
    let dir = real.parent()?;
    let name = real.file_name()?;
    let git = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    git(&["ls-files".as_ref(), "--error-unmatch".as_ref(), "--".as_ref(), name])?;
    let top = git(&["rev-parse".as_ref(), "--show-toplevel".as_ref()])?;
    Some(PathBuf::from(String::from_utf8_lossy(&top.stdout).trim()))
}

/// Writes a client file's new text: its current text must still be what was planned on (a
/// client that wrote it meanwhile, as Claude Code does to `~/.claude.json`, wins; nothing is
/// written), the old text goes to a backup of its own, then the new text replaces the file.
pub(super) fn write_client_file(change: &Change) -> anyhow::Result<PathBuf> {
    let real = real_path(&change.path);
    let now = std::fs::read_to_string(&real).with_context(|| format!("cannot read {}", real.display()))?;
    if now != change.before {
        bail!(
            "{} changed while switchyard was working on it (its client may have written it); it was not written: run the command again",
            change.path.display()
        );
    }
    let backup = Backups::of(&real)?.keep(&change.before)?;
    replace_file(&real, change.after.as_bytes(), None)?;
    Ok(backup)
}

/// Holds an exclusive lock on directory `dir` (made if missing) while the file lives: one
/// `wrap` or `unwrap` at a time per switchyard config (its directory) and per record directory.
/// Two wraps at once would otherwise each append servers to switchyard.toml from the text they
/// read, and one's would be lost. A directory, not a lock file, so the lock is the same whatever
/// environment each process has, and nothing is left behind.
pub(super) fn lock_dir(dir: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    switchyard_os::fs::lock_dir(dir).with_context(|| format!("cannot lock {}", dir.display()))
}

/// The directory of `wrap`'s records, made (0700) and locked: before anything is written, so a
/// record that cannot be kept stops the run before a client file changes.
pub(super) fn records_locked() -> anyhow::Result<std::fs::File> {
    switchyard_config::paths::state_dir()?;
    let dir = records_dir()?;
    switchyard_config::paths::private_dir(&dir)?;
    lock_dir(&dir)
}
