//! One audit log read back: its rotated files oldest first, then the current one, and later
//! what is appended to it (following it across a rotation). Lines are read in pieces and each
//! is held only up to [`MAX_LINE`], so a file without line feeds (a tail of NULs a crash left,
//! a device named as the log) costs no more memory than that.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use switchyard_core::audit::{MAX_LINE, Record, numbered, same_file};

/// A record and its line as the log has it.
pub(crate) type Line = (Record, String);

/// Bad lines told one by one; past these, only their count.
const TOLD: u64 = 5;

pub(crate) struct Log<'f> {
    path: PathBuf,
    /// Which records are kept: the others are let go as they are read, so a long log costs
    /// memory only for what is shown.
    keep: &'f dyn Fn(&Record) -> bool,
    /// The current file, read up to `pos`, once it exists.
    file: Option<File>,
    pos: u64,
    /// The file being read, and the number of its lines read so far.
    reading: PathBuf,
    line: u64,
    /// The start of a line not yet ended (being written).
    partial: Vec<u8>,
    /// The line being read is longer than [`MAX_LINE`]: the rest of it is dropped.
    overlong: bool,
    /// Lines that are no record (cut by a crash, written by hand, too long).
    skipped: u64,
    /// What the reader should be told of them (see [`Log::notes`]).
    notes: Vec<String>,
}

impl<'f> Log<'f> {
    pub(crate) fn new(path: &Path, keep: &'f dyn Fn(&Record) -> bool) -> Log<'f> {
        Log {
            path: path.to_path_buf(),
            keep,
            file: None,
            pos: 0,
            reading: path.to_path_buf(),
            line: 0,
            partial: Vec::new(),
            overlong: false,
            skipped: 0,
            notes: Vec::new(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
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
            let mut file = open(old)?;
            self.start(old);
            self.read_from(&mut file, &mut out)?;
            // A rotated file ends with whole lines; a part left at its end was cut.
            if !self.partial.is_empty() || self.overlong {
                self.partial.clear();
                self.overlong = false;
                self.bad(self.line + 1, "it was cut short");
            }
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
            match open(&self.path) {
                Ok(f) => {
                    self.file = Some(f);
                    self.pos = 0;
                    let path = self.path.clone();
                    self.start(&path);
                    self.read_on(&mut out)?;
                }
                Err(e)
                    if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
                {
                    self.file = None
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// What to tell of the lines skipped since the last call: each of the first few, with its
    /// file and line, then how many more.
    pub(crate) fn notes(&mut self) -> Vec<String> {
        if self.skipped > TOLD {
            let more = self.skipped - TOLD;
            self.notes.push(format!(
                "switchyard calls: {} in all; {more} more not told one by one",
                counted(self.skipped, "line of the audit log was skipped", "lines of the audit log were skipped")
            ));
            // Told once; later ones are counted from here.
            self.skipped = TOLD;
        }
        std::mem::take(&mut self.notes)
    }

    /// Reading `path` from its start.
    fn start(&mut self, path: &Path) {
        self.reading = path.to_path_buf();
        self.line = 0;
        self.partial.clear();
        self.overlong = false;
    }

    /// Whether the file at the path is not the one being read (none yet, rotated, cut short).
    fn replaced(&self) -> bool {
        let Some(file) = &self.file else { return self.path.exists() };
        let (Ok(at_path), Ok(ours)) = (std::fs::metadata(&self.path), file.metadata()) else { return false };
        !same_file(&at_path, &ours) || at_path.len() < self.pos
    }

    fn read_on(&mut self, out: &mut Vec<Line>) -> anyhow::Result<()> {
        let mut file = self.file.take().expect("an open file");
        let read = file
            .seek(SeekFrom::Start(self.pos))
            .with_context(|| format!("cannot read the audit log {}", self.path.display()))
            .and_then(|_| self.read_from(&mut file, out));
        self.file = Some(file);
        self.pos += read?;
        Ok(())
    }

    /// Reads `file` to its end, a piece at a time; how many bytes.
    fn read_from(&mut self, file: &mut File, out: &mut Vec<Line>) -> anyhow::Result<u64> {
        let mut buf = vec![0; 64 * 1024];
        let mut total = 0;
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => return Ok(total),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot read the audit log {}", self.reading.display()));
                }
            };
            total += n as u64;
            self.lines(&buf[..n], out);
        }
    }

    /// The whole lines of `partial` + `bytes`; what follows the last line feed waits, up to
    /// [`MAX_LINE`] bytes.
    fn lines(&mut self, mut bytes: &[u8], out: &mut Vec<Line>) {
        while let Some(end) = bytes.iter().position(|b| *b == b'\n') {
            self.line += 1;
            if std::mem::take(&mut self.overlong) {
                self.partial.clear();
            } else if self.partial.len() + end > MAX_LINE {
                self.partial.clear();
                self.too_long(self.line);
            } else if self.partial.is_empty() {
                self.parse(&bytes[..end], out);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&bytes[..end]);
                self.parse(&line, out);
            }
            bytes = &bytes[end + 1..];
        }
        if self.overlong {
            return;
        }
        if self.partial.len() + bytes.len() > MAX_LINE {
            self.partial.clear();
            self.overlong = true;
            self.too_long(self.line + 1);
            return;
        }
        self.partial.extend_from_slice(bytes);
    }

    fn too_long(&mut self, n: u64) {
        let why = format!("it is longer than {} MiB, more than any record the log writes", MAX_LINE >> 20);
        self.bad(n, &why);
    }

    fn parse(&mut self, line: &[u8], out: &mut Vec<Line>) {
        let text = String::from_utf8_lossy(line);
        // What a crash leaves before a line that was appended after it.
        let text = text.trim_start_matches('\0');
        if text.trim().is_empty() {
            return;
        }
        match serde_json::from_str::<Record>(text) {
            Ok(r) if (self.keep)(&r) => out.push((r, text.to_string())),
            Ok(_) => {}
            Err(e) => self.bad(self.line, &format!("it is not a call record ({e})")),
        }
    }

    /// Line `n` of the file being read is skipped because of `why`.
    fn bad(&mut self, n: u64, why: &str) {
        self.skipped += 1;
        if self.skipped <= TOLD {
            self.notes.push(format!("switchyard calls: {}:{n} skipped: {why}", self.reading.display()));
        }
    }
}

fn counted(n: u64, one: &str, many: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {many}") }
}

/// Opens an audit log file: only a regular file (a device or a FIFO never ends).
fn open(path: &Path) -> anyhow::Result<File> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(e.into()),
        Err(e) => return Err(e).with_context(|| format!("cannot read the audit log {}", path.display())),
    };
    if !meta.is_file() {
        bail!(
            "{} is not a regular file (a device, a FIFO or a directory), so it is no audit log to read; name the log itself with --file, or set the [audit] path of the config to a file",
            path.display()
        );
    }
    File::open(path).with_context(|| format!("cannot read the audit log {}", path.display()))
}
