//! What a server answered before, so a known server is answered at once while it starts: its
//! `initialize` result and lists per client profile (which also tell which profiles it cannot
//! tell apart: see `alike`), what it asked clients for, and whether it refuses
//! `server/discover`. Kept in a file of the daemon's (private state directory, mode 0600), so a
//! daemon started again answers its clients in milliseconds; the entries are keyed by the
//! server's config (hashed: env values and headers never reach the file), so a changed server
//! is learned anew.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::Digest;

/// The remembered answers of every server of one config.
pub struct Answers {
    /// The file (None: kept in memory only, as for `switchyard run`).
    path: Option<PathBuf>,
    entries: Mutex<BTreeMap<String, String>>,
    /// A write of the file failed already (said once, not at every answer).
    write_failed: AtomicBool,
}

/// How many entries the file keeps at most (a config whose servers keep changing must not grow
/// it without bound): past it, entries are dropped to make room. Each kind of client of each
/// server has about six (its initialize answer, its lists, the evidence `alike` reads), so this
/// holds some forty servers with four kinds of client each.
const MAX_ENTRIES: usize = 1024;

impl Answers {
    /// The answers kept in `path` (read now). A missing file is an empty store; one that cannot
    /// be read or parsed is too, said in the log, and a broken one is kept beside it for a look
    /// (`.broken`) before the next answer replaces it.
    pub fn open(path: Option<PathBuf>) -> Answers {
        let entries = path.as_deref().map(load).unwrap_or_default();
        Answers { path, entries: Mutex::new(entries), write_failed: AtomicBool::new(false) }
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
            && !self.write_failed.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                "cannot keep the servers' answers in {} ({e}); a daemon started again asks each server anew, which makes clients wait for its start",
                path.display()
            );
        }
    }
}

/// The entries in the file at `path` (see [`Answers::open`]).
fn load(path: &Path) -> BTreeMap<String, String> {
    // Bytes, not text: a file that is not UTF-8 is as broken as one that is not JSON.
    let text = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return BTreeMap::new(),
        Err(e) => {
            tracing::warn!(
                "cannot read the servers' remembered answers in {} ({e}); each server is asked anew",
                path.display()
            );
            return BTreeMap::new();
        }
    };
    match serde_json::from_slice(&text) {
        Ok(entries) => entries,
        Err(e) => {
            let kept = path.with_extension("json.broken");
            let kept_note = match std::fs::rename(path, &kept) {
                Ok(()) => format!("it is kept as {}", kept.display()),
                Err(e) => format!("it could not be set aside ({e}) and is replaced by the next answer"),
            };
            tracing::warn!(
                "the servers' remembered answers in {} are not valid JSON ({e}); each server is asked anew, and {kept_note}",
                path.display()
            );
            BTreeMap::new()
        }
    }
}

/// Writes `text` to `path` through a temporary file beside it, readable by the user only.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    switchyard_os::fs::replace_private(path, text.as_bytes())
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
        assert_eq!(Answers::open(Some(path.clone())).get("k"), None, "a broken file is an empty store");
        assert_eq!(std::fs::read(dir.path().join("answers.json.broken")).unwrap(), b"not json", "not kept aside");
        // Not even text: as broken, and kept aside the same way.
        std::fs::write(&path, b"\x00\xffnot json").unwrap();
        assert_eq!(Answers::open(Some(path.clone())).get("k"), None);
        assert_eq!(std::fs::read(dir.path().join("answers.json.broken")).unwrap(), b"\x00\xffnot json");
        // A directory where the file goes: nothing is written, and no temporary file is left.
        let blocked = dir.path().join("blocked.json");
        std::fs::create_dir(&blocked).unwrap();
        Answers::open(Some(blocked)).put("k", "v");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(!left.iter().any(|n| n.to_string_lossy().contains("tmp-")), "{left:?}");
        assert_ne!(digest(&["a", "bc"]), digest(&["ab", "c"]));
    }
}
