//! [`AuditLog`]: records go through a bounded queue to a thread that appends them to the file,
//! so a slow or full disk never holds up a call. A line that finds the queue full, or that the
//! disk refuses, is lost and counted, and the first loss is logged (once until writing works
//! again). With `strict`, a call is refused instead when its line could not be written: each
//! call reserves its place in the queue before it runs ([`AuditLog::admit`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::Record;
use super::arguments::{ARGUMENTS_DEPTH, LeftOut, depth};
use super::file::{AuditFile, Failed};
use super::queue::Queue;
use crate::logging::Repeats;

/// Lost lines are logged at most this often.
const LOSS_LOG_EVERY: Duration = Duration::from_secs(60);

/// A line is never longer: a record whose arguments would make it longer is written without
/// them (their SHA-256 stays), and one still longer is lost. Readers may skip longer lines.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// What one write to the file carries at most (lines waiting are written together).
const BATCH_BYTES: usize = 1024 * 1024;
/// What the queue's buffers and the writer's keep while nobody calls: a burst grows them (to
/// thousands of lines, a megabyte of text), and the writer gives that back before it sleeps.
const KEPT_IDLE: usize = 256;
const BYTES_KEPT_IDLE: usize = 64 * 1024;
/// While lines come, the writer takes them this often: no wake-up per call (a line reaches the
/// file this much later at most).
const TICK: Duration = Duration::from_millis(50);

/// `[audit]` as the writer needs it.
#[derive(Debug, Clone)]
pub struct Settings {
    pub path: PathBuf,
    /// Rotate before the file would grow past this.
    pub max_bytes: u64,
    /// Rotated files kept (`PATH.1` .. `PATH.keep`).
    pub keep: u32,
    /// Lines waiting for the writer at most.
    pub queue: usize,
    /// Refuse a call whose line cannot be written.
    pub strict: bool,
    /// Write the calls' arguments too.
    pub arguments: bool,
}

// A line goes by value: boxing it would cost an allocation per call.
#[allow(clippy::large_enum_variant)]
enum Msg {
    /// Serialised by the writer, off the caller's thread.
    Line(Line),
    /// Everything queued before this is written (or lost); then the sender is told.
    Flush(SyncSender<()>),
}

/// A record on its way to the file.
struct Line {
    record: Record,
    /// What the writer puts in the record (None: it is all there).
    deferred: Option<Deferred>,
    /// The line of a call a strict log refused.
    refusal: bool,
}

/// What the writer thread writes into a call's record, so that the call's task need not
/// format it.
#[derive(Debug, Clone, Copy)]
pub struct Deferred {
    /// When the call ended: the record's `time`.
    pub ended: SystemTime,
    /// The SHA-256 of the call's arguments, when it had some: the record's `arguments_sha256`.
    pub arguments_sha256: Option<[u8; 32]>,
    /// The W3C trace id of the call's span, when it is traced: the record's `trace_id`.
    pub trace_id: Option<[u8; 16]>,
}

/// What the callers and the writer thread share.
struct Shared {
    path: PathBuf,
    /// From the callers to the writer (closed when the log is dropped).
    lines: Queue<Msg>,
    /// Lines queued or reserved, against `capacity`.
    pending: AtomicUsize,
    /// Lines queued and not yet written (or lost) by the writer.
    queued: AtomicUsize,
    /// The writer sleeps until woken (nothing was queued).
    idle: AtomicBool,
    capacity: usize,
    /// The last write failed (a strict log refuses calls until one succeeds).
    failing: AtomicBool,
    /// Why, for the refusal.
    failure: Mutex<String>,
    /// Lines of calls that ran, lost because the queue was full, or because the file could
    /// not be written (the lines of refused calls are not counted: `refused` counts those).
    lost_full: AtomicU64,
    lost_failed: AtomicU64,
    /// Calls a strict log refused.
    refused: AtomicU64,
    /// Losses are logged at the first, then at most once a minute with their count.
    told: Repeats,
    /// Arguments left out of lines, logged the same way, each reason on its own (by
    /// [`LeftOut::kind`]).
    told_left_out: [Repeats; LeftOut::KINDS],
    /// New calls are refused while lines cannot be written (see [`AuditLog::admit`]).
    strict: bool,
    /// Holds the writer back while a test fills the queue.
    #[cfg(test)]
    paused: Mutex<()>,
    /// Makes every write fail, for a test.
    #[cfg(test)]
    broken: AtomicBool,
}

impl Shared {
    /// Takes a place in the queue, if there is one.
    fn reserve(&self) -> bool {
        self.pending.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.capacity).then_some(n + 1)).is_ok()
    }

    fn release(&self, n: usize) {
        self.pending.fetch_sub(n, Ordering::AcqRel);
    }

    /// `n` lines are lost because of `why`: counted (`full`: the queue was full, else the
    /// file failed), and logged at the first, then at most once a minute.
    fn lose(&self, n: u64, full: bool, why: &str) {
        let counter = if full { &self.lost_full } else { &self.lost_failed };
        counter.fetch_add(n, Ordering::Relaxed);
        let total = self.lost_full.load(Ordering::Relaxed) + self.lost_failed.load(Ordering::Relaxed);
        if n > 0 && self.told.hit().is_some() {
            let then = if self.strict {
                "new calls are refused until a line can be written again ([audit] strict = true)"
            } else {
                "calls go on, and their lines are lost"
            };
            tracing::warn!(
                file = %self.path.display(),
                "audit log: {why}; {then} ({total} lost so far; `switchyard status` counts them)"
            );
        }
    }
}

impl Shared {
    fn left_out(&self, server: &str, tool: Option<&str>, why: &LeftOut) {
        let Some(n) = self.told_left_out[why.kind()].hit() else { return };
        let since = match n {
            1 => String::new(),
            n => format!(" ({n} calls' arguments left out for this reason since the last such line)"),
        };
        tracing::warn!(
            file = %self.path.display(),
            server,
            tool = tool.unwrap_or("-"),
            "audit log: a call's arguments are left out of its line: {why}; its arguments_sha256 is kept{since}"
        );
    }
}

/// What an audit log could not record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Losses {
    /// Lines of calls that ran, lost because the queue was full (the disk was slower).
    pub queue_full: u64,
    /// Lines of calls that ran, lost because the file could not be written (disk full, ...).
    pub write_failed: u64,
    /// Calls a strict log refused because it could not record them.
    pub refused: u64,
}

/// The audit log of one router.
pub struct AuditLog {
    writer: std::thread::Thread,
    shared: Arc<Shared>,
    strict: bool,
    arguments: bool,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").field("path", &self.shared.path).field("strict", &self.strict).finish()
    }
}

impl Drop for AuditLog {
    /// The writer sees the queue closed once it wakes, writes what is left, and ends.
    fn drop(&mut self) {
        self.shared.lines.close();
        self.writer.unpark();
    }
}

/// A call's place in the audit log, taken before it runs and used by its line.
pub struct Ticket {
    shared: Arc<Shared>,
    /// Holds a place in the queue (released when dropped unused).
    reserved: bool,
    /// The line of a call the log refused (see [`AuditLog::unreserved`]).
    refusal: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.reserved {
            self.shared.release(1);
        }
    }
}

/// Why a strict audit log refuses a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "the audit log {0} cannot keep up with the calls (its queue is full), and [audit] strict = true refuses a call it cannot record; try again, or look at the disk it is on"
    )]
    Full(String),
    #[error(
        "the audit log {0} cannot be written ({1}), and [audit] strict = true refuses a call it cannot record; free the disk or fix the file, or set strict = false"
    )]
    Failing(String, String),
}

impl AuditLog {
    /// Opens the file (created 0600, to append) and starts the writer thread.
    pub fn start(settings: &Settings) -> std::io::Result<Arc<AuditLog>> {
        let file = AuditFile::open(&settings.path, settings.max_bytes, settings.keep)?;
        let shared = Arc::new(Shared {
            path: settings.path.clone(),
            lines: Queue::default(),
            pending: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            idle: AtomicBool::new(false),
            capacity: settings.queue.max(1),
            failing: AtomicBool::new(false),
            failure: Mutex::new(String::new()),
            lost_full: AtomicU64::new(0),
            lost_failed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            told: Repeats::new(LOSS_LOG_EVERY),
            told_left_out: std::array::from_fn(|_| Repeats::new(LOSS_LOG_EVERY)),
            strict: settings.strict,
            #[cfg(test)]
            paused: Mutex::new(()),
            #[cfg(test)]
            broken: AtomicBool::new(false),
        });
        let theirs = shared.clone();
        let writer =
            std::thread::Builder::new().name("switchyard-audit".into()).spawn(move || write_loop(file, &theirs))?;
        let writer = writer.thread().clone();
        Ok(Arc::new(AuditLog { writer, shared, strict: settings.strict, arguments: settings.arguments }))
    }

    /// A call is about to run: its place in the log. A strict log refuses it when the queue is
    /// full or the file cannot be written; otherwise a place is never refused (its line may
    /// still be lost, and counted).
    pub fn admit(&self) -> Result<Ticket, Refused> {
        let reserved = self.shared.reserve();
        let ticket = Ticket { shared: self.shared.clone(), reserved, refusal: false };
        if self.strict {
            let path = self.shared.path.display().to_string();
            let refused = if !reserved {
                Refused::Full(path)
            } else if self.shared.failing.load(Ordering::Acquire) {
                let why = self.shared.failure.lock().unwrap_or_else(|p| p.into_inner()).clone();
                Refused::Failing(path, why)
            } else {
                return Ok(ticket);
            };
            self.shared.refused.fetch_add(1, Ordering::Relaxed);
            return Err(refused);
        }
        Ok(ticket)
    }

    /// A place for the line of a call the log refused (see [`AuditLog::admit`]): it holds no
    /// room in the queue, and its line is lost when there is none. That line is how a strict log
    /// finds out that the disk takes lines again, and lets calls through once more.
    pub fn unreserved(&self) -> Ticket {
        Ticket { shared: self.shared.clone(), reserved: false, refusal: true }
    }

    /// Queues the line of a call that ended.
    pub fn write(&self, ticket: Ticket, record: Record) {
        self.queue(ticket, record, None);
    }

    /// Queues the line of a call that ended, with what the writer thread is to write into it.
    pub fn write_deferred(&self, ticket: Ticket, record: Record, deferred: Deferred) {
        self.queue(ticket, record, Some(deferred));
    }

    fn queue(&self, mut ticket: Ticket, record: Record, deferred: Option<Deferred>) {
        let refusal = ticket.refusal;
        if !ticket.reserved && !self.shared.reserve() {
            self.shared.lose(u64::from(!refusal), true, "the queue is full (the disk is slower than the calls)");
            return;
        }
        // From here the place belongs to the line in the queue.
        ticket.reserved = false;
        let queued = self.shared.queued.fetch_add(1, Ordering::AcqRel) + 1;
        if self.shared.lines.push(Msg::Line(Line { record, deferred, refusal })).is_err() {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            self.shared.release(1);
            self.shared.lose(u64::from(!refusal), false, "its writer stopped");
            return;
        }
        // A writer asleep is woken; one that ticks is woken early only when the queue fills.
        if self.shared.idle.swap(false, Ordering::AcqRel) || queued > self.shared.capacity / 2 {
            self.writer.unpark();
        }
    }

    /// Waits, at most `limit`, until every line queued so far is written (or lost).
    pub fn flush(&self, limit: Duration) {
        let (tx, rx) = sync_channel(1);
        if self.shared.lines.push(Msg::Flush(tx)).is_ok() {
            self.writer.unpark();
            let _ = rx.recv_timeout(limit);
        }
    }

    /// Lines of calls that ran lost so far (queue full, disk failing).
    pub fn lost(&self) -> u64 {
        let losses = self.losses();
        losses.queue_full + losses.write_failed
    }

    /// What was lost or refused so far, by why.
    pub fn losses(&self) -> Losses {
        Losses {
            queue_full: self.shared.lost_full.load(Ordering::Relaxed),
            write_failed: self.shared.lost_failed.load(Ordering::Relaxed),
            refused: self.shared.refused.load(Ordering::Relaxed),
        }
    }

    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Whether records carry the calls' arguments.
    pub fn with_arguments(&self) -> bool {
        self.arguments
    }

    /// Tells the daemon log that a call's arguments are left out of its line, and `why` (at the
    /// first of each reason, then at most once a minute with how many since). The arguments are
    /// never logged.
    pub fn left_out(&self, server: &str, tool: Option<&str>, why: &LeftOut) {
        self.shared.left_out(server, tool, why);
    }

    pub fn strict(&self) -> bool {
        self.strict
    }

    #[cfg(test)]
    pub(super) fn break_disk(&self, broken: bool) {
        self.shared.broken.store(broken, Ordering::Release);
    }

    #[cfg(test)]
    pub(super) fn pause(&self) -> std::sync::MutexGuard<'_, ()> {
        self.shared.paused.lock().expect("lock")
    }
}

/// The writer thread: every [`TICK`] while lines come, it takes all that wait and writes them
/// in one append (serialised here, off the callers' threads); after a tick that found none, it
/// sleeps until the next line.
fn write_loop(mut file: AuditFile, shared: &Shared) {
    // However the thread ends, lines queued later are lost, not left waiting.
    let _ended = WriterEnded(&shared.lines);
    // What the writer took from the queue; emptied before it takes again, its memory kept.
    let mut taken = Vec::new();
    let mut out = Batch { bytes: Vec::with_capacity(BYTES_KEPT_IDLE), refusals: Vec::new() };
    let mut flushes = Vec::new();
    // The last tick found no line.
    let mut quiet = true;
    loop {
        if quiet {
            // Nothing came: give back what a burst grew, then sleep until a line wakes us (see
            // `AuditLog::write`). Checked again after the flag is up, so a line queued in
            // between is not left waiting.
            shared.lines.settle(KEPT_IDLE);
            taken.shrink_to(KEPT_IDLE);
            out.bytes.shrink_to(BYTES_KEPT_IDLE);
            out.refusals.shrink_to(KEPT_IDLE);
            shared.idle.store(true, Ordering::Release);
            if shared.queued.load(Ordering::Acquire) == 0 {
                std::thread::park();
            }
            shared.idle.store(false, Ordering::Release);
        } else {
            std::thread::park_timeout(TICK);
        }
        #[cfg(test)]
        drop(shared.paused.lock());
        let open = shared.lines.take(&mut taken);
        quiet = true;
        for msg in taken.drain(..) {
            match msg {
                Msg::Line(line) => {
                    let refusal = line.refusal;
                    if add_line(&mut out.bytes, line, shared) {
                        out.refusals.push(refusal);
                    } else {
                        shared.queued.fetch_sub(1, Ordering::AcqRel);
                        shared.release(1);
                    }
                    if out.bytes.len() >= BATCH_BYTES {
                        quiet &= !out.write(&mut file, shared);
                    }
                }
                Msg::Flush(done) => flushes.push(done),
            }
        }
        quiet &= !out.write(&mut file, shared);
        for done in flushes.drain(..) {
            let _ = done.try_send(());
        }
        if !open {
            return;
        }
    }
}

/// Ends the queue when the writer thread ends (its work done, or a panic): later lines are
/// lost and counted, and a flush waits no longer.
struct WriterEnded<'a>(&'a Queue<Msg>);

impl Drop for WriterEnded<'_> {
    fn drop(&mut self) {
        drop(self.0.end());
    }
}

/// Lines serialised and waiting to be appended together.
struct Batch {
    bytes: Vec<u8>,
    /// Which of the lines are those of refused calls.
    refusals: Vec<bool>,
}

impl Batch {
    /// Appends the lines, if there are any (true), and gives their places in the queue back.
    fn write(&mut self, file: &mut AuditFile, shared: &Shared) -> bool {
        let lines = self.refusals.len();
        if lines == 0 {
            return false;
        }
        append(file, &self.bytes, &self.refusals, shared);
        shared.queued.fetch_sub(lines, Ordering::AcqRel);
        shared.release(lines);
        self.bytes.clear();
        self.refusals.clear();
        true
    }
}

/// Adds `line` to `batch`, within [`MAX_LINE`]; false when it is lost. What the writer puts
/// in the record (its [`Deferred`]) is written straight into the line.
fn add_line(batch: &mut Vec<u8>, line: Line, shared: &Shared) -> bool {
    let Line { mut record, deferred, refusal } = line;
    if record.arguments.as_ref().is_some_and(|a| depth(a) > ARGUMENTS_DEPTH) {
        // `switchyard calls` could not read the line back: written without them.
        record.arguments = None;
        shared.left_out(&record.server, record.tool.as_deref(), &LeftOut::TooDeep);
    }
    let start = batch.len();
    record.write_line(batch, deferred.as_ref());
    if batch.len() - start > MAX_LINE && record.arguments.is_some() {
        batch.truncate(start);
        record.arguments = None;
        shared.left_out(&record.server, record.tool.as_deref(), &LeftOut::TooLong);
        record.write_line(batch, deferred.as_ref());
    }
    if batch.len() - start > MAX_LINE {
        batch.truncate(start);
        shared.lose(u64::from(!refusal), false, &format!("a line would be longer than {} MiB", MAX_LINE >> 20));
        return false;
    }
    batch.push(b'\n');
    true
}

/// Writes a batch of lines at once (`refusals`: which are those of refused calls); a failure
/// loses them, counted.
fn append(file: &mut AuditFile, batch: &[u8], refusals: &[bool], shared: &Shared) {
    #[cfg(test)]
    let written = match shared.broken.load(Ordering::Acquire) {
        true => Err(std::io::Error::other("the test broke the disk").into()),
        false => file.append(batch),
    };
    #[cfg(not(test))]
    let written = file.append(batch);
    match written {
        Ok(()) => {
            if shared.failing.swap(false, Ordering::AcqRel) {
                tracing::info!(
                    file = %shared.path.display(),
                    "audit log: writing again; {} lines lost so far",
                    shared.lost_full.load(Ordering::Relaxed) + shared.lost_failed.load(Ordering::Relaxed)
                );
            }
        }
        // Lines that are whole in the file despite the failure are written; the others (one
        // cut part-way was taken back, or is set apart by the next line feed) are lost.
        Err(Failed { error, written }) => {
            *shared.failure.lock().unwrap_or_else(|p| p.into_inner()) = error.to_string();
            shared.failing.store(true, Ordering::Release);
            let ran = refusals.iter().skip(written).filter(|r| !**r).count();
            shared.lose(ran as u64, false, &format!("cannot write: {error}"));
        }
    }
}
