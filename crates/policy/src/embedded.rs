//! The example plugins, built by crates/policy/build.rs and embedded in the binary (for the demo and
//! `switchyard plugin examples`).

use std::path::{Path, PathBuf};

use anyhow::Context;

/// `(file name, component bytes)` of each example policy plugin, the template among them (not
/// the broken test fixtures).
pub const EXAMPLES: &[(&str, &[u8])] = &[
    ("hints.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/hints.wasm"))),
    ("fs-keys.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/fs-keys.wasm"))),
    ("timeouts.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/timeouts.wasm"))),
    ("guard.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/guard.wasm"))),
    ("template.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/template.wasm"))),
    ("tool-filter.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/tool-filter.wasm"))),
    ("rate-limit.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/rate-limit.wasm"))),
    ("placement.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/placement.wasm"))),
    ("redact.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/redact.wasm"))),
    ("path-guard.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/path-guard.wasm"))),
    ("result-cap.wasm", include_bytes!(concat!(env!("SWITCHYARD_EXAMPLE_PLUGINS"), "/result-cap.wasm"))),
];

/// Writes the example plugins into `dir` (created if missing), refusing to overwrite a file.
pub fn write_examples(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for (name, bytes) in EXAMPLES {
        let path = dir.join(name);
        if path.exists() {
            anyhow::bail!("{} exists already; choose an empty directory", path.display());
        }
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_are_written_once_and_never_over_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("staging");
        let written = write_examples(&target).unwrap();
        assert_eq!(written.len(), EXAMPLES.len());
        assert_eq!(std::fs::read(target.join("hints.wasm")).unwrap(), EXAMPLES[0].1);
        let e = write_examples(&target).unwrap_err().to_string();
        assert!(e.contains("exists already"), "{e}");
    }
}
