//! The backups of the client files `wrap` and `unwrap` write: one per write, none ever
//! overwritten, in switchyard's state directory beside the records (`wrapped/backups/`), never
//! beside the file, which may be in a repository (a project's `.mcp.json`) where a stray file
//! would be committed.
//!
//! A file's backups are `NAME-HASH.N`, N counting its writes. Its first is kept for good (the
//! file as it was before switchyard first wrote it: an `unwrap` after a `wrap` must not replace
//! it with the wrapped text), and the newest [`KEPT`] - 1 beside it. `NAME-HASH` without a
//! number is a backup of an earlier switchyard, the first of its file.

use std::path::{Path, PathBuf};

use super::records::{records_dir, replace_file};

/// How many backups of one client file are kept: its first and the newest of the others.
pub const KEPT: usize = 10;

/// The backups of one client file.
pub struct Backups {
    dir: PathBuf,
    /// `NAME-HASH`: the file's name, and a hash of its whole path that tells apart two files of
    /// one name.
    stem: String,
}

impl Backups {
    /// The backups of the client file at `real` (its path with links resolved).
    pub fn of(real: &Path) -> anyhow::Result<Backups> {
        Ok(Backups::in_dir(records_dir()?.join("backups"), real))
    }

    fn in_dir(dir: PathBuf, real: &Path) -> Backups {
        let name = real.file_name().unwrap_or_default().to_string_lossy();
        let hash = switchyard_config::paths::short_hash(real, 6);
        Backups { dir, stem: format!("{name}-{hash}") }
    }

    /// Every backup there is, oldest first.
    pub fn list(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut found: Vec<(u64, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                let n = match name.strip_prefix(self.stem.as_str())? {
                    "" => 0,
                    rest => rest.strip_prefix('.').filter(|n| n.bytes().all(|b| b.is_ascii_digit()))?.parse().ok()?,
                };
                Some((n, e.path()))
            })
            .collect();
        found.sort();
        found.into_iter().map(|(_, p)| p).collect()
    }

    /// The first backup: the file before switchyard's first write to it.
    pub fn first(&self) -> Option<PathBuf> {
        self.list().into_iter().next()
    }

    /// The newest backup: the file before switchyard's last write to it.
    pub fn newest(&self) -> Option<PathBuf> {
        self.list().pop()
    }

    /// Keeps `text` as a new backup (0600), under a name no other backup has, then removes the
    /// oldest but the first beyond [`KEPT`]. The caller holds the records' lock, so no other
    /// `wrap` takes the same number.
    pub fn keep(&self, text: &str) -> anyhow::Result<PathBuf> {
        switchyard_config::paths::private_dir(&self.dir)?;
        let old = self.list();
        let n = old.last().map_or(1, |p| self.number(p) + 1);
        let path = self.dir.join(format!("{}.{n}", self.stem));
        replace_file(&path, text.as_bytes(), Some(0o600))?;
        let total = old.len() + 1;
        if total > KEPT {
            // Best effort: a backup left over is only disk, and the one just made is in place.
            for extra in &old[1..1 + total - KEPT] {
                let _ = std::fs::remove_file(extra);
            }
        }
        Ok(path)
    }

    fn number(&self, path: &Path) -> u64 {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        name.strip_prefix(self.stem.as_str())
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each write has its own backup; the first stays however many follow; the newest
    /// [`KEPT`] - 1 stay beside it; an older switchyard's `NAME-HASH` counts as the first.
    #[test]
    fn every_write_keeps_its_own_backup_and_the_first_is_never_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let backups = Backups::in_dir(dir.path().join("backups"), Path::new("/home/u/.claude.json"));
        let made: Vec<PathBuf> = (0..KEPT + 5).map(|i| backups.keep(&format!("text {i}")).unwrap()).collect();
        let unique: std::collections::BTreeSet<&PathBuf> = made.iter().collect();
        assert_eq!(unique.len(), made.len(), "two writes shared a backup: {made:?}");
        let kept = backups.list();
        assert_eq!(kept.len(), KEPT, "{kept:?}");
        let text = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(text(&backups.first().unwrap()), "text 0");
        assert_eq!(text(&backups.newest().unwrap()), format!("text {}", KEPT + 4));
        assert_eq!(text(&kept[1]), "text 6", "the oldest but the first go: {kept:?}");

        let other = Backups::in_dir(dir.path().join("old"), Path::new("/home/u/.cursor/mcp.json"));
        std::fs::create_dir_all(&other.dir).unwrap();
        std::fs::write(other.dir.join(&other.stem), "from before").unwrap();
        std::fs::write(other.dir.join(format!("{}.txt", other.stem)), "not a backup").unwrap();
        let new = other.keep("wrapped").unwrap();
        assert_eq!(other.list(), [other.dir.join(&other.stem), new.clone()]);
        assert!(new.to_str().unwrap().ends_with(".1"), "{new:?}");
    }
}
