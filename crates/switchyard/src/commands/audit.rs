//! The audit log `switchyard run` and the daemon write (`[audit]`, docs/audit.md): started
//! before the router serves, or left off, as the config says.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use switchyard_config::AuditConfig;
use switchyard_core::audit::{AuditLog, Settings};

/// The audit log `config` asks for, at its `path` or else at `default()` (None: audit is off).
/// A log that cannot be opened leaves audit off, said in the log, unless `strict` asks that no
/// call run unrecorded: then the start fails.
pub(crate) fn start(
    config: &AuditConfig,
    default: impl FnOnce() -> anyhow::Result<PathBuf>,
) -> anyhow::Result<Option<Arc<AuditLog>>> {
    if !config.enabled {
        tracing::info!("audit log off ([audit] enabled = false)");
        return Ok(None);
    }
    let opened = match &config.path {
        Some(p) => Ok(p.clone()),
        None => default(),
    }
    .and_then(|path| {
        let settings = Settings {
            path: path.clone(),
            max_bytes: config.max_bytes(),
            keep: config.keep,
            queue: config.queue,
            strict: config.strict,
            arguments: config.arguments,
        };
        AuditLog::start(&settings).with_context(|| format!("cannot open the audit log {}", path.display()))
    });
    match opened {
        Ok(log) => {
            tracing::info!(file = %log.path().display(), "audit log: one line per call{}", if config.strict { " (strict)" } else { "" });
            Ok(Some(log))
        }
        Err(e) if config.strict => Err(e.context(
            "[audit] strict = true lets no call run unrecorded; fix the path (or the disk), or set strict = false",
        )),
        Err(e) => {
            tracing::warn!(
                "{e:#}; calls are not logged ([audit] path names another file; enabled = false says so on purpose)"
            );
            Ok(None)
        }
    }
}
