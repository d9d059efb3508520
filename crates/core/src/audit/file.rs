//! The audit log's file: appended to, created 0600, rotated by size into `PATH.1` .. `PATH.N`,
//! and opened again when another process (a second `switchyard run` of the same server) rotated
//! it away.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the writer checks that its file is still the one at the path.
const RECHECK: Duration = Duration::from_secs(1);

pub(super) struct AuditFile {
    path: PathBuf,
    max_bytes: u64,
    /// Rotated files kept (`PATH.1` is the newest).
    keep: u32,
    file: File,
    len: u64,
    checked: Instant,
}

impl AuditFile {
    pub(super) fn open(path: &Path, max_bytes: u64, keep: u32) -> io::Result<AuditFile> {
        let file = open(path)?;
        let len = file.metadata()?.len();
        Ok(AuditFile { path: path.to_path_buf(), max_bytes, keep, file, len, checked: Instant::now() })
    }

    /// Appends `lines` (whole lines, each ending in a newline) in one write, rotating first when
    /// they would take the file past its cap.
    pub(super) fn append(&mut self, lines: &[u8]) -> io::Result<()> {
        if self.checked.elapsed() >= RECHECK {
            self.checked = Instant::now();
            self.follow_path()?;
        }
        if self.len > 0 && self.len + lines.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(lines)?;
        self.len += lines.len() as u64;
        Ok(())
    }

    /// Opens the path again when the file there is no longer the one written to (rotated by
    /// another process, removed by hand), and takes its length from the disk.
    fn follow_path(&mut self) -> io::Result<()> {
        let moved = match std::fs::metadata(&self.path) {
            Ok(at_path) => !same_file(&at_path, &self.file.metadata()?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => true,
            Err(e) => return Err(e),
        };
        if moved {
            self.file = open(&self.path)?;
        }
        self.len = self.file.metadata()?.len();
        Ok(())
    }

    /// `PATH.N` is gone, `PATH.k` becomes `PATH.k+1`, `PATH` becomes `PATH.1`, and a fresh `PATH`.
    fn rotate(&mut self) -> io::Result<()> {
        if self.keep == 0 {
            self.file.set_len(0)?;
            self.len = 0;
            return Ok(());
        }
        let _ = std::fs::remove_file(numbered(&self.path, self.keep));
        for n in (1..self.keep).rev() {
            match std::fs::rename(numbered(&self.path, n), numbered(&self.path, n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        std::fs::rename(&self.path, numbered(&self.path, 1))?;
        self.file = open(&self.path)?;
        self.len = 0;
        Ok(())
    }
}

/// `PATH.n`: the n-th newest rotated file of the log at `path`.
pub fn numbered(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

fn open(path: &Path) -> io::Result<File> {
    let file = switchyard_os::fs::private_options().append(true).create(true).open(path)?;
    // On Windows the user-only DACL comes after creation; on Unix the mode did it.
    #[cfg(windows)]
    switchyard_os::fs::restrict(path)?;
    Ok(file)
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// Windows has no stable file id in std: a file at the path shorter than what was written to
/// it is taken as another one.
#[cfg(not(unix))]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.len() >= b.len()
}
