//! switchyard's log: its log lines and the servers' forwarded stderr, written to stderr (or, for
//! the detached daemon, to a file rotated at a size cap) by a thread of its own, so a slow, full
//! or closed output never blocks or panics the router.
//!
//! Lines wait in a bounded queue; when it is full (nobody reads stderr, the disk is slow) or the
//! output is gone, lines are dropped and counted, and the count is written as soon as the output
//! takes lines again.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

mod repeats;
pub use repeats::{Hit, KeyedRepeats, Repeats, times};

/// A sensible cap for the daemon's log file: past it the file is renamed to `PATH.1`.
pub const LOG_FILE_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Old log files kept beside the current one (`PATH.1`, `PATH.2`).
const OLD_LOG_FILES: usize = 2;
/// Lines that may wait for the output; past this, new lines are dropped and counted.
const QUEUE_LINES: usize = 4096;
/// How long the last lines may take to reach the output when switchyard exits.
const EXIT_FLUSH: Duration = Duration::from_millis(500);

enum Msg {
    Line(Vec<u8>),
    /// Everything queued before this is written (or dropped); then the sender is told.
    Flush(SyncSender<()>),
}

struct Sink {
    tx: SyncSender<Msg>,
    dropped: Arc<AtomicU64>,
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Starts the stderr thread; later calls do nothing. Without it (the library used in-process),
/// lines are written straight to stderr, errors ignored.
pub fn init() {
    SINK.get_or_init(|| {
        // A duplicate of fd 2, so the thread owns what it writes to.
        match switchyard_os::fs::stderr_file() {
            Ok(out) => start("switchyard-stderr", StderrOut(out)),
            // No stderr at all: every line is dropped (and counted, for nobody).
            Err(_) => start("switchyard-stderr", Nowhere),
        }
    });
}

/// Starts the log thread writing to the file `path` instead of stderr (the detached daemon,
/// whose stderr is /dev/null): opened to append, created 0600, and rotated when a line would
/// take it past `max_bytes` (see [`RotatingFile`]). An error when the file cannot be opened,
/// or when logging was already started (by this or [`init`]).
pub fn init_file(path: &Path, max_bytes: u64) -> io::Result<()> {
    let mut file = Some(RotatingFile::open(path, max_bytes)?);
    SINK.get_or_init(|| start("switchyard-log", file.take().expect("taken once, here")));
    match file {
        None => Ok(()),
        Some(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("logging was already started, so it cannot be sent to {}", path.display()),
        )),
    }
}

/// The queue and the thread that empties it into `out`.
fn start(name: &str, out: impl Output) -> Sink {
    let (tx, rx) = sync_channel(QUEUE_LINES);
    let dropped = Arc::new(AtomicU64::new(0));
    let counter = dropped.clone();
    // If the thread cannot start, the receiver goes with the closure: every line is then
    // counted as dropped, which is all that can be done without a writer.
    let _ = std::thread::Builder::new().name(name.into()).spawn(move || write_loop(out, rx, counter));
    Sink { tx, dropped }
}

/// One line of text for the user on stderr, through the log (never a panic when stderr is closed).
pub fn say(text: &str) {
    let mut line = Vec::with_capacity(text.len() + 1);
    line.extend_from_slice(text.as_bytes());
    line.push(b'\n');
    write(line);
}

/// Queues one line (with its newline) for the log; drops and counts it if the log is not keeping up.
pub fn write(line: Vec<u8>) {
    match SINK.get() {
        Some(sink) => match sink.tx.try_send(Msg::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                sink.dropped.fetch_add(1, Ordering::Relaxed);
            }
        },
        None => {
            let _ = io::stderr().write_all(&line);
        }
    }
}

/// A server's stderr line, forwarded with its instance label.
pub fn forward(label: &str, line: &str) {
    let mut buf = Vec::with_capacity(label.len() + line.len() + 4);
    buf.push(b'[');
    buf.extend_from_slice(label.as_bytes());
    buf.extend_from_slice(b"] ");
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    write(buf);
}

/// How many lines were dropped so far.
pub fn dropped() -> u64 {
    SINK.get().map_or(0, |s| s.dropped.load(Ordering::Relaxed))
}

/// Waits (briefly) until what is queued has been written; for exit.
pub fn flush() {
    let Some(sink) = SINK.get() else { return };
    let (tx, rx) = sync_channel(1);
    // A full queue means stderr is stuck: then there is nothing to wait for.
    if sink.tx.try_send(Msg::Flush(tx)).is_ok() {
        let _ = rx.recv_timeout(EXIT_FLUSH);
    }
}

/// The writer for tracing: each formatted event arrives in one `write` call and becomes one line.
/// A line break inside it (from a client's name, a server's error text, anything quoted) is
/// written as `\n`, so nothing a client or server says can start a line of its own that looks
/// like the router's.
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write(one_line(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `event` (ending in its line feed) with every other line break escaped.
fn one_line(event: &[u8]) -> Vec<u8> {
    let (body, end) = match event.strip_suffix(b"\n") {
        Some(body) => (body, &b"\n"[..]),
        None => (event, &b""[..]),
    };
    if !body.iter().any(|b| *b == b'\n' || *b == b'\r') {
        return event.to_vec();
    }
    let mut out = Vec::with_capacity(event.len() + 8);
    for b in body {
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b => out.push(*b),
        }
    }
    out.extend_from_slice(end);
    out
}

/// Where the log thread writes its lines.
trait Output: Send + 'static {
    /// Writes one whole line; an error loses it.
    fn put(&mut self, line: &[u8]) -> io::Result<()>;
    /// Why lines were dropped, for the note that counts them.
    fn behind(&self) -> &'static str;
}

/// stderr, duplicated.
struct StderrOut(File);

impl Output for StderrOut {
    fn put(&mut self, line: &[u8]) -> io::Result<()> {
        write_all(&mut self.0, line)
    }

    fn behind(&self) -> &'static str {
        "stderr was not being read fast enough"
    }
}

/// No output at all.
struct Nowhere;

impl Output for Nowhere {
    fn put(&mut self, _: &[u8]) -> io::Result<()> {
        Err(io::ErrorKind::NotConnected.into())
    }

    fn behind(&self) -> &'static str {
        "there is no stderr"
    }
}

fn write_loop(mut out: impl Output, rx: Receiver<Msg>, dropped: Arc<AtomicU64>) {
    let mut reported = 0;
    while let Ok(msg) = rx.recv() {
        // Lines lost since the last note are reported before the next line (or at exit).
        let lost = dropped.load(Ordering::Relaxed);
        if lost > reported {
            let note = format!("switchyard: {} log lines dropped: {}\n", lost - reported, out.behind());
            if out.put(note.as_bytes()).is_ok() {
                reported = lost;
            }
        }
        match msg {
            Msg::Line(line) => {
                if out.put(&line).is_err() {
                    // The output is closed or broken: the line is lost like one that found the queue full.
                    dropped.fetch_add(1, Ordering::Relaxed);
                    reported += 1;
                }
            }
            Msg::Flush(done) => {
                let _ = done.try_send(());
            }
        }
    }
}

/// `write_all` that also copes with a non-blocking stderr (one shared with a socket on stdout
/// that the session made non-blocking): it waits for room instead of failing.
fn write_all(out: &mut File, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match out.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                switchyard_os::fs::wait_writable(out);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A log file kept under a size cap: before a line would take it past `max_bytes`, `PATH` is
/// renamed to `PATH.1` (an older `PATH.1` to `PATH.2`, and an older `PATH.2` is gone) and a
/// fresh `PATH` is started. Lines are never split across files; a line longer than the cap
/// gets a file of its own.
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    file: File,
    /// Bytes in the current file.
    len: u64,
    /// Rotate when a line would take `len` past this: `max_bytes`, or further after a rotation
    /// failed (so a directory that refuses renames is not retried on every line).
    limit: u64,
}

impl RotatingFile {
    /// Opens `path` to append (created 0600), counting what it already holds toward the cap.
    pub fn open(path: &Path, max_bytes: u64) -> io::Result<RotatingFile> {
        let file = open_log(path)?;
        let len = file.metadata()?.len();
        Ok(RotatingFile { path: path.to_path_buf(), max_bytes, file, len, limit: max_bytes })
    }

    /// Appends one line (with its newline), rotating first if it would pass the cap.
    pub fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        if self.len > 0
            && self.len + line.len() as u64 > self.limit
            && let Err(e) = self.rotate()
        {
            // Logging goes on in the file as it is: losing lines would be worse than a big file.
            let note = format!(
                "switchyard: cannot rotate the log file {} ({e}); it grows past {} bytes\n",
                self.path.display(),
                self.max_bytes
            );
            self.append(note.as_bytes())?;
            self.limit = self.len + self.max_bytes;
        }
        self.append(line)
    }

    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)?;
        self.len += buf.len() as u64;
        Ok(())
    }

    /// `PATH.2` <- `PATH.1` <- `PATH`, then a fresh `PATH`.
    fn rotate(&mut self) -> io::Result<()> {
        // The fresh file first: if it cannot be made, nothing has moved.
        let fresh_path = old_file(&self.path, 0);
        let fresh = open_log(&fresh_path)?;
        fresh.set_len(0)?;
        for n in (1..OLD_LOG_FILES).rev() {
            match std::fs::rename(old_file(&self.path, n), old_file(&self.path, n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    let _ = std::fs::remove_file(&fresh_path);
                    return Err(e);
                }
                _ => {}
            }
        }
        if let Err(e) = std::fs::rename(&self.path, old_file(&self.path, 1)) {
            let _ = std::fs::remove_file(&fresh_path);
            return Err(e);
        }
        std::fs::rename(&fresh_path, &self.path)?;
        self.file = fresh;
        self.len = 0;
        self.limit = self.max_bytes;
        Ok(())
    }
}

impl Output for RotatingFile {
    fn put(&mut self, line: &[u8]) -> io::Result<()> {
        self.write_line(line)
    }

    fn behind(&self) -> &'static str {
        "the log file was not being written fast enough"
    }
}

/// `PATH.n`; `PATH.new` for n = 0 (the fresh file, made before the renames).
fn old_file(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    if n == 0 {
        name.push(".new");
    } else {
        name.push(format!(".{n}"));
    }
    PathBuf::from(name)
}

/// Opens a log file to append, creating it readable by this user only (it names servers,
/// tools and arguments).
fn open_log(path: &Path) -> io::Result<File> {
    switchyard_os::fs::private_options().append(true).create(true).open(path)
}

/// How many WARN and ERROR lines [`RecentErrors`] keeps.
pub const RECENT_ERRORS: usize = 50;
/// The longest a kept line may be (characters); longer ones are cut and end with `…`.
pub const RECENT_ERROR_CHARS: usize = 300;

/// One WARN or ERROR line kept for status.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Recent {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub level: &'static str,
    /// The message with its fields (`server=fs session=stdio-3: ...`).
    pub message: String,
}

static RECENT: std::sync::Mutex<std::collections::VecDeque<Recent>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// A tracing layer that keeps the last [`RECENT_ERRORS`] WARN and ERROR lines of the process,
/// for `switchyard status` and the status page. It keeps what the log shows (which holds no
/// secrets), nothing more.
pub struct RecentErrors;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RecentErrors {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let level = *event.metadata().level();
        if level > tracing::Level::WARN {
            return;
        }
        let mut line = Line::default();
        event.record(&mut line);
        let text = match (line.fields.is_empty(), line.message.is_empty()) {
            (true, _) => line.message,
            (false, true) => line.fields,
            (false, false) => format!("{}: {}", line.fields, line.message),
        };
        remember(if level == tracing::Level::ERROR { "ERROR" } else { "WARN" }, &text);
    }
}

/// Keeps one line in the ring (cut to [`RECENT_ERROR_CHARS`]).
fn remember(level: &'static str, text: &str) {
    let message = match text.char_indices().nth(RECENT_ERROR_CHARS - 1) {
        Some((cut, _)) if text.chars().count() > RECENT_ERROR_CHARS => format!("{}…", &text[..cut]),
        _ => text.to_string(),
    };
    let at_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let mut ring = RECENT.lock().unwrap_or_else(|p| p.into_inner());
    if ring.len() == RECENT_ERRORS {
        ring.pop_front();
    }
    ring.push_back(Recent { at_ms, level, message });
}

/// The WARN and ERROR lines kept so far, oldest first.
pub fn recent_errors() -> Vec<Recent> {
    RECENT.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
}

/// An event's message and its other fields as `name=value` words.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            if !self.fields.is_empty() {
                self.fields.push(' ');
            }
            let _ = write!(self.fields, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.record_debug(field, &format_args!("{value}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_line_whatever_its_text_holds() {
        let forged = b"INFO rejected client `cursor\n2026-11-26T10:00:00Z ERROR fake`\r\n\n";
        assert_eq!(one_line(forged), b"INFO rejected client `cursor\\n2026-11-26T10:00:00Z ERROR fake`\\r\\n\n");
        assert_eq!(one_line(b"plain line\n"), b"plain line\n");
        assert_eq!(one_line(b"no end"), b"no end");
    }

    #[test]
    fn the_last_warnings_and_errors_are_kept_cut_to_size() {
        use tracing_subscriber::prelude::*;
        let subscriber = tracing_subscriber::registry().with(super::RecentErrors);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("an info line is not kept");
            tracing::warn!("the first warning");
            for i in 0..super::RECENT_ERRORS - 1 {
                tracing::warn!(server = %"fs", "warning {i}");
            }
            tracing::error!("{}", "é".repeat(400));
        });
        let kept = super::recent_errors();
        assert_eq!(kept.len(), super::RECENT_ERRORS);
        assert_eq!(kept[0].message, "server=fs: warning 0", "the oldest line stays");
        let last = kept.last().unwrap();
        assert_eq!((last.level, last.message.chars().count()), ("ERROR", super::RECENT_ERROR_CHARS));
        assert!(last.message.ends_with('…'));
    }
    /// Whether the file is its user's alone (0600 on Unix; Windows' ACL is not in metadata).
    fn private(path: &Path) -> bool {
        #[cfg(unix)]
        return {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(path).unwrap().permissions().mode() & 0o777 == 0o600
        };
        #[cfg(windows)]
        return !switchyard_os::fs::open_to_others(&std::fs::metadata(path).unwrap());
    }

    fn lines_of(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path).map(|t| t.lines().map(str::to_string).collect()).unwrap_or_default()
    }

    #[test]
    fn lines_reach_the_file_which_only_its_user_may_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.log");
        switchyard_os::fs::write_private(&path, b"from before\n").unwrap();
        let mut f = RotatingFile::open(&path, 1 << 20).unwrap();
        f.write_line(b"one\n").unwrap();
        f.write_line(b"two\n").unwrap();
        assert_eq!(lines_of(&path), ["from before", "one", "two"]);
        let fresh = dir.path().join("new.log");
        RotatingFile::open(&fresh, 100).unwrap();
        assert!(private(&fresh));
    }

    #[test]
    fn the_file_rotates_at_the_cap_and_keeps_two_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.log");
        // Ten 10-byte lines fill a file of 100 bytes; the 11th starts a new one.
        let mut f = RotatingFile::open(&path, 100).unwrap();
        let line = |i: usize| format!("line {i:04}\n");
        for i in 0..10 {
            f.write_line(line(i).as_bytes()).unwrap();
        }
        assert!(!old_file(&path, 1).exists(), "rotated before the cap");
        f.write_line(line(10).as_bytes()).unwrap();
        assert_eq!(lines_of(&old_file(&path, 1)).len(), 10);
        assert_eq!(lines_of(&path), ["line 0010"]);
        for i in 11..60 {
            f.write_line(line(i).as_bytes()).unwrap();
        }
        let mut names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["d.log", "d.log.1", "d.log.2"]);
        for p in [path.clone(), old_file(&path, 1), old_file(&path, 2)] {
            assert!(std::fs::metadata(&p).unwrap().len() <= 100, "{}", p.display());
            assert!(private(&p), "{}", p.display());
        }
        // The newest 30 lines, in order, oldest file first.
        let kept: Vec<String> =
            [old_file(&path, 2), old_file(&path, 1), path.clone()].iter().flat_map(|p| lines_of(p)).collect();
        let want: Vec<String> = (30..60).map(|i| line(i).trim_end().to_string()).collect();
        assert_eq!(kept, want);
        // What the file held when opened counts toward the cap; a line over the cap gets its own file.
        let mut f = RotatingFile::open(&path, 100).unwrap();
        f.write_line(&[b'x'; 150]).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 150);
        assert_eq!(lines_of(&old_file(&path, 1)).len(), 10);
    }

    #[test]
    fn nothing_is_lost_across_rotations_through_the_log_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.log");
        let out = RotatingFile::open(&path, 4096).unwrap();
        let (tx, rx) = sync_channel(QUEUE_LINES);
        let dropped = Arc::new(AtomicU64::new(0));
        let counter = dropped.clone();
        let thread = std::thread::spawn(move || write_loop(out, rx, counter));
        // About 2.5 files' worth: two rotations, and every line still in one of the three files.
        let n = 500;
        for i in 0..n {
            tx.send(Msg::Line(format!("[fs#1] message {i:05}\n").into_bytes())).unwrap();
        }
        let (done_tx, done_rx) = sync_channel(1);
        tx.send(Msg::Flush(done_tx)).unwrap();
        done_rx.recv().unwrap();
        drop(tx);
        thread.join().unwrap();
        assert_eq!(dropped.load(Ordering::Relaxed), 0);
        assert!(old_file(&path, 2).exists() && !old_file(&path, 3).exists());
        let all: Vec<String> =
            [old_file(&path, 2), old_file(&path, 1), path].iter().flat_map(|p| lines_of(p)).collect();
        let want: Vec<String> = (0..n).map(|i| format!("[fs#1] message {i:05}")).collect();
        assert_eq!(all, want);
    }

    #[test]
    fn a_rotation_that_fails_keeps_the_lines_in_the_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.log");
        // `PATH.1` cannot become `PATH.2`, a directory with something in it (root or not).
        std::fs::write(old_file(&path, 1), "old\n").unwrap();
        std::fs::create_dir_all(old_file(&path, 2).join("x")).unwrap();
        let mut f = RotatingFile::open(&path, 100).unwrap();
        for _ in 0..20 {
            f.write_line(b"0123456789\n").unwrap();
        }
        let lines = lines_of(&path);
        assert_eq!(lines.iter().filter(|l| *l == "0123456789").count(), 20, "{lines:?}");
        // Said once per cap's worth of lines, not on every line.
        let notes = lines.iter().filter(|l| l.contains("cannot rotate the log file")).count();
        assert_eq!(notes, 2, "{lines:?}");
        assert_eq!(lines_of(&old_file(&path, 1)), ["old"]);
        assert!(!old_file(&path, 0).exists());
    }
}
