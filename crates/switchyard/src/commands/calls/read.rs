//! One audit log read back: its rotated files oldest first, then the current one, and later
//! what is appended to it (following it across a rotation).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::Context;

use switchyard_core::audit::{Record, numbered};

/// A record and its line as the log has it.
pub(crate) type Line = (Record, String);

pub(crate) struct Log<'f> {
    path: PathBuf,
    /// Which records are kept: the others are let go as they are read, so a long log costs
    /// memory only for what is shown.
    keep: &'f dyn Fn(&Record) -> bool,
    /// The current file, read up to `pos`, once it exists.
    file: Option<File>,
    pos: u64,
    /// The start of a line not yet ended (being written).
    partial: Vec<u8>,
    /// Lines that are no record (cut by a crash, written by hand), said once.
    skipped: u64,
}

impl<'f> Log<'f> {
    pub(crate) fn new(path: &Path, keep: &'f dyn Fn(&Record) -> bool) -> Log<'f> {
        Log { path: path.to_path_buf(), keep, file: None, pos: 0, partial: Vec::new(), skipped: 0 }
    }

    /// Every record: the rotated files' (`PATH.N` .. `PATH.1`), then the current file's.
    pub(crate) fn read_all(&mut self) -> anyhow::Result<Vec<Line>> {
        let mut out = Vec::new();
        let mut rotated = Vec::new();
        for n in 1.. {
            let old = numbered(&self.path, n);
            if !old.exists() {
                break;
            }
            rotated.push(old);
        }
        for old in rotated.iter().rev() {
            let bytes = std::fs::read(old).with_context(|| format!("cannot read the audit log {}", old.display()))?;
            self.lines(&bytes, &mut out);
            // A rotated file ends with whole lines.
            self.partial.clear();
        }
        out.extend(self.read_new()?);
        Ok(out)
    }

    /// What was appended since the last read; after a rotation, the rest of the old file and
    /// then the new one from its start.
    pub(crate) fn read_new(&mut self) -> anyhow::Result<Vec<Line>> {
        let mut out = Vec::new();
        if self.file.is_some() {
            self.read_on(&mut out)?;
        }
        if self.replaced() {
            match File::open(&self.path) {
                Ok(f) => {
                    self.file = Some(f);
                    self.pos = 0;
                    self.partial.clear();
                    self.read_on(&mut out)?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.file = None,
                Err(e) => return Err(e).with_context(|| format!("cannot read the audit log {}", self.path.display())),
            }
        }
        Ok(out)
    }

    /// Whether the file at the path is not the one being read (none yet, rotated, cut short).
    fn replaced(&self) -> bool {
        let Some(file) = &self.file else { return self.path.exists() };
        let (Ok(at_path), Ok(ours)) = (std::fs::metadata(&self.path), file.metadata()) else { return false };
        !same_file(&at_path, &ours) || at_path.len() < self.pos
    }

    fn read_on(&mut self, out: &mut Vec<Line>) -> anyhow::Result<()> {
        let file = self.file.as_mut().expect("an open file");
        let mut bytes = Vec::new();
        file.seek(SeekFrom::Start(self.pos))
            .and_then(|_| file.read_to_end(&mut bytes))
            .with_context(|| format!("cannot read the audit log {}", self.path.display()))?;
        self.pos += bytes.len() as u64;
        self.lines(&bytes, out);
        Ok(())
    }

    /// The whole lines of `partial` + `bytes`; what follows the last line feed waits.
    fn lines(&mut self, bytes: &[u8], out: &mut Vec<Line>) {
        self.partial.extend_from_slice(bytes);
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else { return };
        let rest = self.partial.split_off(end + 1);
        let whole = std::mem::replace(&mut self.partial, rest);
        for line in String::from_utf8_lossy(&whole).lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Record>(line) {
                Ok(r) if (self.keep)(&r) => out.push((r, line.to_string())),
                Ok(_) => {}
                Err(e) => {
                    self.skipped += 1;
                    if self.skipped == 1 {
                        eprintln!(
                            "switchyard calls: a line of {} is not a call record ({e}); skipped",
                            self.path.display()
                        );
                    }
                }
            }
        }
    }
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

#[cfg(not(unix))]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.len() >= b.len()
}
