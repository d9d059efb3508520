//! Where a user's daemon lives: its config file, socket, start lock and log, one set per config file.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sha2::Digest;

/// What a process switchyard starts from its own binary is called in `ps`.
pub use switchyard_os::exe::program_name;

/// The config a daemon serves when none is named: `switchyard/switchyard.toml` in the user's
/// config directory (`$XDG_CONFIG_HOME`, else `~/.config`; `%APPDATA%` on Windows).
pub fn default_config() -> anyhow::Result<PathBuf> {
    Ok(switchyard_os::dirs::config_home()
        .context(if cfg!(windows) {
            "neither APPDATA nor USERPROFILE is set; name the config file with --config"
        } else {
            "neither XDG_CONFIG_HOME nor HOME is set; name the config file with --config"
        })?
        .join("switchyard")
        .join("switchyard.toml"))
}

/// The config file's absolute path, its directory's links resolved but not the file's own: the
/// daemon's identity. A config that is a link (dotfile managers make them) keeps its daemon when
/// the link is pointed at another file; the daemon follows the link.
pub fn canonical_config(config: &Path) -> anyhow::Result<PathBuf> {
    let missing = || {
        format!(
            "cannot open the config file {}; create it with a [servers.NAME] table per server (see README), or name another with --config",
            config.display()
        )
    };
    std::fs::metadata(config).with_context(missing)?;
    let absolute = std::path::absolute(config).with_context(missing)?;
    let (Some(dir), Some(name)) = (absolute.parent(), absolute.file_name()) else {
        return switchyard_os::fs::canonicalize(config).with_context(missing);
    };
    Ok(switchyard_os::fs::canonicalize(dir).with_context(missing)?.join(name))
}

/// A short name for a config file that no other config file has: its stem (for people reading
/// a directory listing) and a hash of its absolute path (so two configs never share a daemon).
pub fn config_key(canonical: &Path) -> String {
    let stem: String = canonical
        .file_stem()
        .map(|s| {
            s.to_string_lossy()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .take(24)
                .collect()
        })
        .unwrap_or_default();
    let hex = short_hash(canonical, 6);
    if stem.is_empty() { hex } else { format!("{stem}-{hex}") }
}

/// The per-user directory for sockets and locks (see `switchyard_os::dirs` for where it is on
/// each OS). Made private when missing; an existing one must be this user's and closed to
/// everyone else (another user could otherwise put a socket of theirs where `connect` looks).
pub fn runtime_dir() -> anyhow::Result<PathBuf> {
    let dir = runtime_dir_path();
    private_dir(&dir)?;
    Ok(dir)
}

/// Where [`runtime_dir`] is, without making it.
pub fn runtime_dir_path() -> PathBuf {
    switchyard_os::dirs::runtime_dir_path()
}

/// The per-user directory for daemon logs: `$XDG_STATE_HOME/switchyard`, else
/// `~/.local/state/switchyard`, else the runtime directory.
pub fn state_dir() -> anyhow::Result<PathBuf> {
    match switchyard_os::dirs::state_home() {
        Some(base) => {
            let dir = base.join("switchyard");
            private_dir(&dir)?;
            Ok(dir)
        }
        None => runtime_dir(),
    }
}

/// Where remote servers' sign-in tokens are kept, one file per server URL: `oauth/` in the
/// state directory. The router and `login`/`logout` must agree on it.
pub fn oauth_dir() -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join("oauth"))
}

/// Where [`state_dir`] is, without making it (for reading what may not be there).
pub fn state_dir_path() -> anyhow::Result<PathBuf> {
    match switchyard_os::dirs::state_home() {
        Some(base) => Ok(base.join("switchyard")),
        None => runtime_dir(),
    }
}

/// The endpoint of the daemon serving `canonical` (a config file's canonical path): a socket in
/// the runtime directory (named by a hash alone where the full name would pass the OS's limit
/// on socket paths), or a named pipe on Windows.
pub fn socket_for(canonical: &Path) -> anyhow::Result<PathBuf> {
    let short = short_hash(canonical, 6);
    Ok(switchyard_os::endpoint::path_for(&runtime_dir()?, &config_key(canonical), &short))
}

/// The lock that lets one `connect` at a time start the daemon behind `socket`: in the private
/// runtime directory whatever the socket's own directory (never a file beside a socket path given
/// by hand), named from the socket's absolute path.
pub fn lock_for(socket: &Path) -> anyhow::Result<PathBuf> {
    let absolute = std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf());
    Ok(runtime_dir()?.join(format!("start-{}.lock", short_hash(&absolute, 8))))
}

/// The first `bytes` bytes of a path's SHA-256, in hex: a file-name-safe name for it.
pub fn short_hash(path: &Path, bytes: usize) -> String {
    let hash = sha2::Sha256::digest(path.as_os_str().as_encoded_bytes());
    hash.iter().take(bytes).map(|b| format!("{b:02x}")).collect()
}

/// The HTTP front's generated bearer token for the daemon serving `canonical` (used when its
/// `[http]` sets no `token`): in the state directory, so it survives reboots and clients keep
/// working; made by `front::token`, 0600.
pub fn token_for(canonical: &Path) -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join(format!("{}.token", config_key(canonical))))
}

/// Where the daemon serving `canonical` keeps its servers' earlier answers (0600).
pub fn answers_for(canonical: &Path) -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join(format!("{}.answers.json", config_key(canonical))))
}

/// The last version of `canonical` that loaded, kept by its daemon: a later start whose file does
/// not load at all runs on it (loudly) instead of serving nothing.
pub fn last_good_for(canonical: &Path) -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join(format!("{}.last-good.toml", config_key(canonical))))
}

/// Why the last start of the daemon serving `canonical` failed (removed by a start that
/// succeeds), for `status` to say when no daemon runs.
pub fn start_error_for(canonical: &Path) -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join(format!("{}.start-error", config_key(canonical))))
}

/// The audit log of the daemon serving `canonical` when `[audit] path` names none.
pub fn audit_for(canonical: &Path) -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join(format!("{}.audit.jsonl", config_key(canonical))))
}

/// The audit log of `switchyard run` in front of server `name` when `[audit] path` names none:
/// one per server name, shared by the `run`s of that server (each appends whole lines).
pub fn audit_for_run(name: &str) -> anyhow::Result<PathBuf> {
    let name: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).take(64).collect();
    Ok(state_dir()?.join(format!("run-{name}.audit.jsonl")))
}

/// The audit logs in the state directory, and their rotated files (`switchyard calls` reads
/// them all when it is not told which).
pub const AUDIT_SUFFIX: &str = ".audit.jsonl";

/// The log file of the detached daemon serving `canonical`.
pub fn log_for(canonical: &Path) -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join(format!("{}.log", config_key(canonical))))
}

/// Makes `dir` (and its parents) if missing, private to this user; checks that it is a
/// directory of this user's that nobody else may enter or write.
pub fn private_dir(dir: &Path) -> anyhow::Result<()> {
    use switchyard_os::fs::NotPrivate;
    match switchyard_os::fs::private_dir(dir) {
        Ok(()) => Ok(()),
        Err(NotPrivate::Io(e)) => match in_the_way(dir) {
            Some(file) => bail!(
                "{} is a file, not a directory, so switchyard cannot make {} (it keeps its sockets, state and logs there); move that file away",
                file.display(),
                dir.display()
            ),
            None => Err(e).with_context(|| format!("cannot make {} private to you", dir.display())),
        },
        Err(NotPrivate::NotADirectory) => bail!(
            "{} is a file, not a directory; switchyard keeps its sockets, state and logs there. Move the file away",
            dir.display()
        ),
        Err(NotPrivate::Foreign { owner, me }) => bail!(
            "{} belongs to uid {owner}, not to you (uid {me}); switchyard will not put its sockets there. Remove it, or give the daemon and every connect the same --socket PATH",
            dir.display()
        ),
    }
}

/// The first of `dir` and its parents that exists and is no directory: what stops it being made.
fn in_the_way(dir: &Path) -> Option<&Path> {
    let mut found = None;
    for p in dir.ancestors() {
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => found = Some(p),
            Err(_) => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_config_file_has_its_own_key() {
        let a = config_key(Path::new("/home/me/.config/switchyard/switchyard.toml"));
        let b = config_key(Path::new("/home/me/work/switchyard.toml"));
        assert!(a.starts_with("switchyard-") && b.starts_with("switchyard-"), "{a} {b}");
        assert_ne!(a, b);
        assert_eq!(a, config_key(Path::new("/home/me/.config/switchyard/switchyard.toml")));
        // Odd characters never reach a file name.
        let odd = config_key(Path::new("/x/my conf;rm -rf.toml"));
        assert!(odd.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{odd}");
    }

    #[cfg(unix)]
    #[test]
    fn a_private_dir_is_made_0700_and_an_open_one_is_narrowed() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let file = tmp.path().join("f");
        std::fs::write(&file, "").unwrap();
        let e = private_dir(&file).unwrap_err().to_string();
        assert!(e.contains("is a file, not a directory") && e.contains("Move the file away"), "{e}");
        // A file where a parent should be: named, not "File exists".
        let e = private_dir(&file.join("state").join("switchyard")).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{} is a file, not a directory", file.display())), "{e}");
        assert!(e.contains("move that file away"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn a_linked_config_is_known_by_the_link_not_its_target() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        std::fs::create_dir(dir.join("store")).unwrap();
        std::fs::write(dir.join("store/gen1.toml"), "").unwrap();
        std::os::unix::fs::symlink("store/gen1.toml", dir.join("sy.toml")).unwrap();
        assert_eq!(canonical_config(&dir.join("sy.toml")).unwrap(), dir.join("sy.toml"));
        // Through `..` and a linked directory alike.
        std::os::unix::fs::symlink(&dir, dir.join("again")).unwrap();
        assert_eq!(canonical_config(&dir.join("store/../again/sy.toml")).unwrap(), dir.join("sy.toml"));
        assert!(canonical_config(&dir.join("none.toml")).is_err());
    }

    #[test]
    fn each_socket_has_its_own_lock_in_the_private_directory() {
        let a = lock_for(Path::new("/run/u/switchyard/a-1.sock")).unwrap();
        let b = lock_for(Path::new("/dev/null")).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.parent(), b.parent());
        assert_eq!(a.parent().unwrap(), runtime_dir().unwrap());
        assert_eq!(a, lock_for(Path::new("/run/u/switchyard/a-1.sock")).unwrap());
    }
}
