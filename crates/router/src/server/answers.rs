//! What a server answered before, so a known server is answered at once while it starts: its
//! `initialize` result per client profile, and whether it refuses `server/discover`. Kept in a
//! file of the daemon's (private state directory, mode 0600), so a daemon started again answers
//! its clients in milliseconds; the entries are keyed by the server's config (hashed: env values
//! and headers never reach the file), so a changed server is learned anew.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use sha2::Digest;

/// The remembered answers of every server of one config.
pub struct Answers {
    /// The file (None: kept in memory only, as for `switchyard run`).
    path: Option<PathBuf>,
    entries: Mutex<BTreeMap<String, String>>,
}

/// How many entries the file keeps at most (a config whose servers keep changing must not grow
/// it without bound): past it, entries are dropped to make room.
const MAX_ENTRIES: usize = 256;

impl Answers {
    /// The answers kept in `path` (read now; a missing or unreadable file is an empty store).
    pub fn open(path: Option<PathBuf>) -> Answers {
        let entries = path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|text| serde_json::from_str::<BTreeMap<String, String>>(&text).ok())
            .unwrap_or_default();
        Answers { path, entries: Mutex::new(entries) }
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.entries.lock().expect("lock").get(key).cloned()
    }

    /// Remembers `value` under `key`, and writes the file when it changed.
    pub fn put(&self, key: &str, value: &str) {
        let text = {
            let mut entries = self.entries.lock().expect("lock");
            if entries.get(key).is_some_and(|v| v == value) {
                return;
            }
            entries.insert(key.to_string(), value.to_string());
            while entries.len() > MAX_ENTRIES {
                let oldest = entries.keys().next().cloned().expect("not empty");
                entries.remove(&oldest);
            }
            serde_json::to_string(&*entries).expect("strings serialise")
        };
        if let Some(path) = &self.path
            && let Err(e) = write_private(path, &text)
        {
            tracing::debug!("could not keep the servers' answers in {}: {e}", path.display());
        }
    }
}

/// Writes `text` to `path` through a temporary file beside it, readable by the user only.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut f = switchyard_os::fs::private_options().write(true).create(true).truncate(true).open(&tmp)?;
    switchyard_os::fs::restrict(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// A short digest of `parts`, for keys that must not hold what they are made of.
pub fn digest(parts: &[&str]) -> String {
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_survive_a_restart_and_the_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("answers.json");
        let a = Answers::open(Some(path.clone()));
        assert_eq!(a.get("k"), None);
        a.put("k", r#"{"serverInfo":{"name":"x"}}"#);
        let again = Answers::open(Some(path.clone()));
        assert_eq!(again.get("k").as_deref(), Some(r#"{"serverInfo":{"name":"x"}}"#));
        assert!(!switchyard_os::fs::open_to_others(&std::fs::metadata(&path).unwrap()));
        std::fs::write(&path, "not json").unwrap();
        assert_eq!(Answers::open(Some(path)).get("k"), None, "a broken file is an empty store");
        assert_ne!(digest(&["a", "bc"]), digest(&["ab", "c"]));
    }
}
