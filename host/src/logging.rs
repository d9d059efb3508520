//! switchyard's stderr: its log lines and the servers' forwarded stderr, written by a thread of
//! its own, so a slow, full or closed stderr never blocks or panics the router.
//!
//! Lines wait in a bounded queue; when it is full (nobody reads stderr) or stderr is gone, lines
//! are dropped and counted, and the count is written as soon as stderr takes lines again.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Lines that may wait for stderr; past this, new lines are dropped and counted.
const QUEUE_LINES: usize = 4096;
/// How long the last lines may take to reach stderr when switchyard exits.
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
        let (tx, rx) = sync_channel(QUEUE_LINES);
        let dropped = Arc::new(AtomicU64::new(0));
        let counter = dropped.clone();
        // A duplicate of fd 2, so the thread owns what it writes to.
        let out = io::stderr().as_fd().try_clone_to_owned().map(File::from);
        // If the thread cannot start, the receiver goes with the closure: every line is then
        // counted as dropped, which is all that can be done without a stderr writer.
        let _ = std::thread::Builder::new().name("switchyard-stderr".into()).spawn(move || match out {
            Ok(out) => write_loop(out, rx, counter),
            // No stderr at all: every line is dropped (and counted, for nobody).
            Err(_) => drain(rx, counter),
        });
        Sink { tx, dropped }
    });
}

/// Queues one line (with its newline) for stderr; drops and counts it if stderr is not keeping up.
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
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn write_loop(mut out: File, rx: Receiver<Msg>, dropped: Arc<AtomicU64>) {
    let mut reported = 0;
    while let Ok(msg) = rx.recv() {
        // Lines lost since the last note are reported before the next line (or at exit).
        let lost = dropped.load(Ordering::Relaxed);
        if lost > reported {
            let note =
                format!("switchyard: {} log lines dropped: stderr was not being read fast enough\n", lost - reported);
            if write_all(&mut out, note.as_bytes()).is_ok() {
                reported = lost;
            }
        }
        match msg {
            Msg::Line(line) => {
                if write_all(&mut out, &line).is_err() {
                    // stderr is closed or broken: the line is lost like one that found the queue full.
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
    use rustix::event::{PollFd, PollFlags, poll};
    while !buf.is_empty() {
        match out.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut fds = [PollFd::new(&*out, PollFlags::OUT)];
                let _ = poll(&mut fds, None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn drain(rx: Receiver<Msg>, dropped: Arc<AtomicU64>) {
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Line(_) => {
                dropped.fetch_add(1, Ordering::Relaxed);
            }
            Msg::Flush(done) => {
                let _ = done.try_send(());
            }
        }
    }
}
