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
    /// The file may end in part of a line (a write that failed part-way, one that a crash cut):
    /// the next write starts with a line feed, so its line does not join that part.
    torn: bool,
    /// Bytes the disk takes before it is full, for a test.
    #[cfg(test)]
    pub(super) room: Option<u64>,
    /// What another process appends as the disk fills, for a test.
    #[cfg(test)]
    pub(super) others: Vec<u8>,
}

/// A write that failed: why, and how many of its lines are whole in the file all the same.
#[derive(Debug)]
pub(super) struct Failed {
    pub(super) error: io::Error,
    pub(super) written: usize,
}

impl From<io::Error> for Failed {
    fn from(error: io::Error) -> Failed {
        Failed { error, written: 0 }
    }
}

impl AuditFile {
    pub(super) fn open(path: &Path, max_bytes: u64, keep: u32) -> io::Result<AuditFile> {
        let mut file = open(path)?;
        let len = file.metadata()?.len();
        let torn = len > 0 && !ends_in_line_feed(&mut file)?;
        Ok(AuditFile {
            path: path.to_path_buf(),
            max_bytes,
            keep,
            file,
            len,
            checked: Instant::now(),
            torn,
            #[cfg(test)]
            room: None,
            #[cfg(test)]
            others: Vec::new(),
        })
    }

    /// Appends `lines` (whole lines, each ending in a newline) in one write, rotating first when
    /// they would take the file past its cap. A write that fails part-way (a full disk) is cut
    /// back to its last whole line; when it cannot be (another process wrote after it), the
    /// next write starts a new line.
    pub(super) fn append(&mut self, lines: &[u8]) -> Result<(), Failed> {
        if self.checked.elapsed() >= RECHECK {
            self.checked = Instant::now();
            self.follow_path()?;
        }
        if self.len > 0 && self.len + lines.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        if self.torn {
            self.write_all(b"\n").map_err(|(e, _)| e)?;
            self.len += 1;
            self.torn = false;
        }
        let Err((error, done)) = self.write_all(lines) else {
            self.len += lines.len() as u64;
            return Ok(());
        };
        let whole = lines[..done].iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let written = lines[..whole].iter().filter(|b| **b == b'\n').count();
        if done > whole {
            let start = self.len;
            // Cut back only a file that holds nothing after our part.
            let ours = self.file.metadata().is_ok_and(|m| m.len() == start + done as u64);
            if !(ours && self.file.set_len(start + whole as u64).is_ok()) {
                self.torn = true;
            }
        }
        self.len += whole as u64;
        Err(Failed { error, written })
    }

    /// `write_all` that says how much it wrote before it failed.
    fn write_all(&mut self, mut bytes: &[u8]) -> Result<(), (io::Error, usize)> {
        let mut done = 0;
        while !bytes.is_empty() {
            match self.write(bytes) {
                Ok(0) => return Err((io::ErrorKind::WriteZero.into(), done)),
                Ok(n) => {
                    done += n;
                    bytes = &bytes[n..];
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err((e, done)),
            }
        }
        Ok(())
    }

    #[cfg(not(test))]
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.file.write(bytes)
    }

    /// A disk with `room` bytes left takes that much, then says it is full.
    #[cfg(test)]
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let Some(room) = self.room else { return self.file.write(bytes) };
        if room == 0 {
            if !self.others.is_empty() {
                let mut other = std::fs::OpenOptions::new().append(true).open(&self.path)?;
                other.write_all(&std::mem::take(&mut self.others))?;
            }
            return Err(io::Error::from_raw_os_error(28));
        }
        let n = self.file.write(&bytes[..bytes.len().min(room as usize)])?;
        self.room = Some(room - n as u64);
        Ok(n)
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
        self.torn = self.len > 0 && !ends_in_line_feed(&mut self.file)?;
        Ok(())
    }

    /// `PATH.N` is gone, `PATH.k` becomes `PATH.k+1`, `PATH` becomes `PATH.1`, and a fresh `PATH`.
    fn rotate(&mut self) -> io::Result<()> {
        if self.keep == 0 {
            self.file.set_len(0)?;
            self.len = 0;
            self.torn = false;
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
        self.torn = false;
        Ok(())
    }
}

/// Whether the last byte of a file that is not empty is a line feed (writes append at the end
/// wherever a read left the position).
fn ends_in_line_feed(file: &mut File) -> io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut last = [0u8; 1];
    file.seek(SeekFrom::End(-1))?;
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// `PATH.n`: the n-th newest rotated file of the log at `path`.
pub fn numbered(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

fn open(path: &Path) -> io::Result<File> {
    let file = switchyard_os::fs::private_options().read(true).append(true).create(true).open(path)?;
    // On Windows the user-only DACL comes after creation; on Unix the mode did it.
    #[cfg(windows)]
    switchyard_os::fs::restrict(path)?;
    Ok(file)
}

/// Whether two looks at a path saw the same file (a log rotated or replaced by another
/// process is a new one).
#[cfg(unix)]
pub fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// Windows has no stable file id in std: a file at the path shorter than what was written to
/// it is taken as another one.
#[cfg(not(unix))]
pub fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.len() >= b.len()
}
