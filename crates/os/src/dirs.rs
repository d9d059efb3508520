//! The per-user directories switchyard keeps its files in, per OS.
//!
//! | what | Linux | macOS | Windows |
//! |---|---|---|---|
//! | config | `$XDG_CONFIG_HOME`, else `~/.config` | the same (as most command-line tools there) | `%APPDATA%` |
//! | state (logs, tokens, answers) | `$XDG_STATE_HOME`, else `~/.local/state` | the same | `%LOCALAPPDATA%` |
//! | runtime (sockets, start locks) | `/run/user/UID/switchyard` when the system keeps it for the user, else `/tmp/switchyard-UID` | `/tmp/switchyard-UID` (`$TMPDIR` is too long for a socket path and differs between a client's environments) | `%LOCALAPPDATA%\switchyard\run` (locks only: the endpoint is a named pipe) |
//!
//! The runtime directory is found from the user id alone on Unix, never from the environment:
//! clients start `connect` with different ones (the SDKs pass only HOME, PATH and a few more),
//! and all must find the one daemon of a config.

use std::path::PathBuf;

/// `$VAR` when it is an absolute path (the XDG spec ignores relative ones), else `~/<fallback>`.
#[cfg(unix)]
fn xdg(var: &str, fallback: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(fallback)))
}

/// `%VAR%` when set to an absolute path, else `%USERPROFILE%\<fallback>`.
#[cfg(windows)]
fn known(var: &str, fallback: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("USERPROFILE").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(fallback)))
}

/// The user's home directory: `$HOME` on Unix, `%USERPROFILE%` on Windows (non-empty).
pub fn home() -> Option<PathBuf> {
    let var = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    std::env::var_os(var).filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// What names the home directory, for an error that says it is missing.
pub const HOME_VAR: &str = if cfg!(windows) { "USERPROFILE" } else { "HOME" };

/// Where compiled caches live: `$XDG_CACHE_HOME`, else `~/.cache` (Unix); `%LOCALAPPDATA%`.
pub fn cache_home() -> Option<PathBuf> {
    #[cfg(unix)]
    return xdg("XDG_CACHE_HOME", ".cache");
    #[cfg(windows)]
    return known("LOCALAPPDATA", r"AppData\Local");
}

/// Where the user's configuration lives; None when the environment names no home.
pub fn config_home() -> Option<PathBuf> {
    #[cfg(unix)]
    return xdg("XDG_CONFIG_HOME", ".config");
    #[cfg(windows)]
    return known("APPDATA", r"AppData\Roaming");
}

/// Where the user's state (logs, tokens, remembered answers) lives; None without a home.
pub fn state_home() -> Option<PathBuf> {
    #[cfg(unix)]
    return xdg("XDG_STATE_HOME", ".local/state");
    #[cfg(windows)]
    return known("LOCALAPPDATA", r"AppData\Local");
}

/// Where switchyard's sockets (Unix) or start locks (Windows) live, without making it.
pub fn runtime_dir_path() -> PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let uid = rustix::process::getuid().as_raw();
        let tmp = PathBuf::from(format!("/tmp/switchyard-{uid}"));
        if !cfg!(target_os = "linux") {
            return tmp;
        }
        let system = PathBuf::from(format!("/run/user/{uid}"));
        match std::fs::metadata(&system) {
            Ok(m) if m.is_dir() && m.uid() == uid => system.join("switchyard"),
            _ => tmp,
        }
    }
    #[cfg(windows)]
    {
        let base = state_home().unwrap_or_else(std::env::temp_dir);
        base.join("switchyard").join("run")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_runtime_directory_is_absolute_and_names_switchyard() {
        let dir = super::runtime_dir_path();
        assert!(dir.is_absolute(), "{}", dir.display());
        assert!(dir.to_string_lossy().contains("switchyard"), "{}", dir.display());
        // Short enough to leave room for a socket's name on every Unix.
        #[cfg(unix)]
        assert!(dir.as_os_str().len() < 40, "{}", dir.display());
    }

    #[test]
    fn config_and_state_homes_are_absolute_when_found() {
        for dir in [super::config_home(), super::state_home()].into_iter().flatten() {
            assert!(dir.is_absolute(), "{}", dir.display());
        }
    }
}
