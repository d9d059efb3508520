//! `[audit]`: the audit log, one JSON line per call (docs/audit.md). On unless `enabled = false`.

use std::path::PathBuf;

use anyhow::bail;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    pub enabled: bool,
    /// The log file (default: in the state directory, named after the config file); a relative
    /// path is the config file's directory's.
    pub path: Option<PathBuf>,
    /// Rotate before the file would grow past this many MiB.
    pub max_file_mb: u64,
    /// Rotated files kept beside the current one (`PATH.1` .. `PATH.N`).
    pub keep: u32,
    /// Write the calls' arguments too, not only their SHA-256: they may hold anything a user or
    /// a model typed, secrets included.
    pub arguments: bool,
    /// Refuse a call whose line cannot be written (the queue is full, the disk fails) instead
    /// of letting it run unrecorded.
    pub strict: bool,
    /// Lines waiting for the disk at most (bounds the memory the log may hold).
    pub queue: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            enabled: true,
            path: None,
            max_file_mb: 64,
            keep: 5,
            arguments: false,
            strict: false,
            queue: 8192,
        }
    }
}

impl AuditConfig {
    pub fn check(&self) -> anyhow::Result<()> {
        if self.max_file_mb == 0 {
            bail!("[audit] max_file_mb must be 1 or more (MiB per file before it is rotated)");
        }
        if self.queue == 0 {
            bail!("[audit] queue must be 1 or more (lines that may wait for the disk)");
        }
        if self.path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            bail!("[audit] path is empty; name a file, or remove `path` for the default in the state directory");
        }
        Ok(())
    }

    /// The file's cap in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_file_mb.saturating_mul(1024 * 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_is_on_by_default_and_one_key_turns_it_off() {
        let on: AuditConfig = toml::from_str("").unwrap();
        assert_eq!(on, AuditConfig::default());
        assert!(on.enabled && !on.arguments && !on.strict && on.path.is_none());
        assert_eq!(on.max_bytes(), 64 * 1024 * 1024);
        let off: AuditConfig = toml::from_str("enabled = false").unwrap();
        assert!(!off.enabled);
        let e = toml::from_str::<AuditConfig>("enable = false").unwrap_err().to_string();
        assert!(e.contains("unknown field `enable`"), "{e}");
        for (text, says) in
            [("max_file_mb = 0", "max_file_mb"), ("queue = 0", "queue"), ("path = \"\"", "path is empty")]
        {
            let c: AuditConfig = toml::from_str(text).unwrap();
            assert!(c.check().unwrap_err().to_string().contains(says), "{text}");
        }
    }
}
