//! What a daemon starts on: the config file as far as it loads, else the last version of it that
//! loaded (kept in the state directory), and why the last start failed, for `status`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;

use switchyard_config::{Config, Tolerated, paths};

/// The config a daemon runs on.
pub(super) struct Start {
    pub(super) loaded: Tolerated,
    /// The text it came from.
    pub(super) text: String,
    /// Set when the file itself did not load and the daemon runs on the last version that did:
    /// the file's error.
    pub(super) fallback: Option<String>,
}

/// Reads `config_path` (canonical) for a start. A file whose servers and plugin entries load in
/// part is taken as far as it loads; one that does not load at all gives way to the last version
/// that did, when there is one.
pub(super) fn load(config_path: &Path) -> anyhow::Result<Start> {
    let text = std::fs::read_to_string(config_path)
        .with_context(|| format!("cannot read config file {}", config_path.display()))?;
    let error = match Config::load_tolerant(config_path, &text) {
        Ok(loaded) => {
            // What the daemon runs on, parts left out and all (see `keep_good`).
            keep_good(config_path, &text);
            return Ok(Start { loaded, text, fallback: None });
        }
        Err(e) => e,
    };
    let Some((kept, at, kept_at)) = last_good(config_path) else { return Err(error) };
    match Config::load_tolerant(config_path, &kept) {
        Ok(loaded) => {
            let why = format!("{error:#}").replace('\n', " ");
            tracing::error!(
                "{why}; switchyard runs on the last version of the file that loaded ({}, kept at {}) until the file is fixed, which it applies on save; `switchyard check` shows what is wrong",
                age(at),
                kept_at.display()
            );
            Ok(Start { loaded, text: kept, fallback: Some(why) })
        }
        // The file has moved on from what was kept (a renamed plugin directory, say).
        Err(_) => Err(error),
    }
}

/// The `[telemetry]` a daemon of `config_path` (canonical) starts with, read before its logging
/// and the rest of the file: the file's, or, when the file's does not load (a typo in it), that
/// of the last version of the file that loaded, which the daemon then runs on (see [`load`]).
pub(super) fn telemetry(config_path: &Path) -> switchyard_config::TelemetryConfig {
    use switchyard_config::TelemetryConfig;
    TelemetryConfig::loaded_from_file(config_path)
        .or_else(|| TelemetryConfig::loaded_from_file(&paths::last_good_for(config_path).ok()?))
        .unwrap_or_default()
}

/// The last version of the file that loaded, when it was kept, and where.
fn last_good(config_path: &Path) -> Option<(String, SystemTime, PathBuf)> {
    let path = paths::last_good_for(config_path).ok()?;
    let at = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
    Some((std::fs::read_to_string(&path).ok()?, at, path))
}

/// Keeps `text`, a version of the file that loaded and is now in force, as the one to fall back
/// on; so at each start and each applied save, even one with a server, group, `[http]` or
/// `[[plugins]]` part that does not load. The text is kept as saved: read again, those parts
/// are left out again, so a fallback runs what was in force (a plugin entry then, a guard, is
/// never dropped for an older version's), refusing what was refused; a server or group kept at
/// its earlier version is then refused too, never run without its policy. Not kept: said, and
/// the next start of a file that does not load fails as it would have.
pub(super) fn keep_good(config_path: &Path, text: &str) {
    let kept = paths::last_good_for(config_path).and_then(|path| {
        if let Some(dir) = path.parent() {
            paths::private_dir(dir)?;
        }
        if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
            return Ok(());
        }
        switchyard_os::fs::replace_private(&path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))
    });
    if let Err(e) = kept {
        tracing::warn!("the config that loaded is not kept for a start whose file does not load: {e:#}");
    }
}

/// Notes why a start failed, for `status` (best effort: the error is on stderr already).
pub(super) fn note_failure(config_path: &Path, error: &anyhow::Error) {
    if let Ok(path) = paths::start_error_for(config_path) {
        let text = format!("{error:#}").replace('\n', " ");
        let _ = path.parent().map(paths::private_dir);
        let _ = switchyard_os::fs::replace_private(&path, text.as_bytes());
    }
}

/// Forgets the failure of an earlier start, once a start succeeded.
pub(super) fn clear_failure(config_path: &Path) {
    if let Ok(path) = paths::start_error_for(config_path) {
        let _ = std::fs::remove_file(path);
    }
}

/// Why the last start of the daemon of `config_path` failed, and how long ago, when it did.
pub(crate) fn last_failure(config_path: &Path) -> Option<String> {
    let path = paths::start_error_for(config_path).ok()?;
    let at = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
    let why = std::fs::read_to_string(&path).ok()?;
    Some(format!("its last start failed ({}): {}", age(at), why.trim()))
}

/// "3 min ago", "2 h ago" (the moment a file was written).
fn age(at: SystemTime) -> String {
    let s = at.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    match s {
        0..60 => format!("{s} s ago"),
        60..7200 => format!("{} min ago", s / 60),
        7200..172_800 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_people_say_them() {
        let ago = |s: u64| age(SystemTime::now() - std::time::Duration::from_secs(s));
        assert_eq!(ago(5), "5 s ago");
        assert_eq!(ago(180), "3 min ago");
        assert_eq!(ago(3 * 3600), "3 h ago");
        assert_eq!(ago(3 * 86_400), "3 days ago");
    }
}
