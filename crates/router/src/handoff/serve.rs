//! The router's side of a handed-off session: the client's pipes read and written here, with the
//! journal kept as it goes, and the socket to `connect` watched for its end.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use switchyard_core::call::Call;
use switchyard_core::codec::{self, ENDS_KEPT, Frame, keep_tail};

use super::journal::{Full, Head, ID_MAX, Map, Position, SLOT_COUNT};
use super::{
    Handed, Memory, WriteEnd, cancelled_ids, for_each_message, is_replay_id, request_ids, response_ids, unix_stream,
};
use crate::control::{self, Reply};
use crate::server::Server;
use crate::session::{self, Input, Message, Opening, Output};

/// The most read from the client's pipe at once.
const READ_MAX: usize = 64 * 1024;
/// Memory of the input buffer past this, touched by a large line, is given back once the line
/// is taken up (as the line reader lets a large line's buffer go with it).
const KEEP_TOUCHED: usize = 256 * 1024;

/// What the reader, the writer and the controller of one handed-off session share.
struct Shared {
    head: Head,
    /// Why the router must let go of the session, once it must.
    back: std::sync::Mutex<Option<String>>,
    /// Wakes the reader: a hand-back was asked, or the last request in flight was answered.
    wake: Notify,
    /// The reader stopped, with nothing in flight, for a hand-back.
    quiet: CancellationToken,
    /// `connect` is gone: the pipes are let go of at once.
    dead: CancellationToken,
    /// The client's side ended the session (its input ended, or its output failed).
    client_ended: AtomicBool,
    /// The socket to connect: lines too long to write to the client at once go through it.
    to_connect: tokio::sync::Mutex<OwnedWriteHalf>,
    /// How many of those connect has written to the client (it says `.` for each).
    acked: std::sync::atomic::AtomicU64,
    acks: Notify,
}

impl Shared {
    fn ask_back(&self, reason: String) {
        self.back.lock().expect("lock").get_or_insert(reason);
        self.wake.notify_one();
    }

    fn handing_back(&self) -> bool {
        self.back.lock().expect("lock").is_some()
    }

    /// These requests were answered (or cancelled): their slots are freed.
    fn answered(&self, ids: &[String]) {
        if !ids.is_empty() && self.head.free(ids) == 0 && self.handing_back() {
            self.wake.notify_one();
        }
    }
}

/// Serves a session on the descriptors `connect` handed over, until the client ends it,
/// `connect` is gone, or the router lets go of it (`ends` fired, or the server's configuration
/// changed). `socket` is the connection to `connect`, after the welcome; it is told how the
/// session ended. When the descriptors did not come (`handed` failed) or cannot be taken over,
/// connect is told so at once and carries the session on itself.
pub async fn serve(
    server: Arc<Server>,
    handed: std::io::Result<Handed>,
    socket: (BufReader<OwnedReadHalf>, OwnedWriteHalf),
    opening: Opening,
    ends: CancellationToken,
) {
    let (mut from_connect, mut to_connect) = socket;
    let limit = server.limits.max_message_bytes;
    let taken = match handed.and_then(|handed| open(handed, limit)) {
        Ok(taken) => taken,
        Err(e) => {
            // Out of descriptors, say. Nothing was read from the client yet: connect carries the
            // session on (or offers it again) without waiting.
            tracing::warn!(server = %server.name, "could not take over a connect's stdin and stdout: {e}");
            let reason = format!("the router could not take the session over ({e})");
            let _ = to_connect.write_all(control::line(&Reply::Handback { reason }).as_bytes()).await;
            return;
        }
    };
    let shared = Arc::new(Shared {
        head: taken.head,
        back: Default::default(),
        wake: Notify::new(),
        quiet: CancellationToken::new(),
        dead: CancellationToken::new(),
        client_ended: AtomicBool::new(false),
        to_connect: tokio::sync::Mutex::new(to_connect),
        acked: Default::default(),
        acks: Notify::new(),
    });
    let (refuse, refusals) = mpsc::unbounded_channel();
    let input = HandedInput {
        read_end: taken.read_end,
        buf: taken.buf,
        touched: taken.position.filled as usize,
        position: taken.position,
        scan: 0,
        limit,
        skipped: None,
        silent: false,
        discard_after_prefill: taken.discard_after_prefill,
        head_bytes: Vec::new(),
        tail: Vec::new(),
        memory: Memory::default(),
        shared: shared.clone(),
        refuse,
    };
    let output = HandedOutput { write_end: taken.write_end, shared: shared.clone(), refusals, sent: 0 };
    let stop = CancellationToken::new();
    let ended_by = server.clone();
    let session = session::serve_with(server, input, output, opening, stop.clone());
    tokio::pin!(session);
    let mut watching = true;
    let mut scratch = [0u8; 64];
    loop {
        tokio::select! {
            _ = &mut session => break,
            read = from_connect.read(&mut scratch), if watching => match read {
                // connect says `.` for each line it wrote for the router; its socket closing
                // means it is gone.
                Ok(n) if n > 0 => {
                    let acks = scratch[..n].iter().filter(|&&b| b == b'.').count() as u64;
                    shared.acked.fetch_add(acks, Ordering::AcqRel);
                    shared.acks.notify_one();
                }
                _ => {
                    watching = false;
                    shared.dead.cancel();
                    stop.cancel();
                }
            },
            _ = shared.quiet.cancelled(), if !stop.is_cancelled() => stop.cancel(),
            _ = ends.cancelled(), if !stop.is_cancelled() => {
                shared.ask_back(ended_by.ended().to_string());
                stop.cancel();
            }
        }
    }
    // The pipes and the journal's input are let go of with the session; connect may read the
    // journal from here on.
    if shared.dead.is_cancelled() {
        return;
    }
    let back = shared.back.lock().expect("lock").clone();
    let client_ended = shared.client_ended.load(Ordering::Acquire);
    let reply = match back {
        Some(reason) if !client_ended => Reply::Handback { reason },
        _ if client_ended => Reply::Ended { reason: None },
        _ => Reply::Ended {
            reason: Some(format!(
                "the router at pid {} ended the session: its client fell too far behind in reading its output (see the daemon's log)",
                std::process::id()
            )),
        },
    };
    let mut to_connect = shared.to_connect.lock().await;
    let _ = to_connect.write_all(control::line(&reply).as_bytes()).await;
    let _ = to_connect.shutdown().await;
}

/// What the router takes over from connect's descriptors.
struct Taken {
    head: Head,
    read_end: ReadEnd,
    write_end: WriteEnd,
    buf: Map,
    position: Position,
    /// What connect put first is followed by the rest of a line the last router was skipping.
    discard_after_prefill: bool,
}

fn open(handed: Handed, limit: usize) -> std::io::Result<Taken> {
    let read_end = ReadEnd::new(handed.input)?;
    let write_end = WriteEnd::new(handed.output)?;
    let head = Head::open(handed.head.as_fd())?;
    // Room for a whole line at the limit, and for moving it to the front without overlap.
    let cap = 2 * (limit + 2 + READ_MAX) + READ_MAX;
    rustix::fs::ftruncate(&handed.input_buf, cap as u64)?;
    let buf = Map::new(handed.input_buf.as_fd(), cap)?;
    // What connect put first (a replay, and what the last router had not taken up).
    let mut position = head.position();
    if position.start > position.filled || position.filled as usize + 2 * READ_MAX > cap || position.lines > 0 {
        return Err(std::io::Error::other("the journal does not start as a new one this router can hold"));
    }
    let discard_after_prefill = std::mem::take(&mut position.skipping);
    head.set_position(position);
    Ok(Taken { head, read_end, write_end, buf, position, discard_after_prefill })
}

/// The client's input: a pipe, or a Unix stream socket (what Node's `child_process` gives).
enum ReadEnd {
    Pipe(pipe::Receiver),
    Socket(tokio::net::UnixStream),
}

impl ReadEnd {
    fn new(fd: std::os::fd::OwnedFd) -> std::io::Result<ReadEnd> {
        match super::kind(&fd) {
            Some(super::Stdio::Pipe) => Ok(ReadEnd::Pipe(pipe::Receiver::from_owned_fd(fd)?)),
            Some(super::Stdio::Socket) => Ok(ReadEnd::Socket(unix_stream(fd)?)),
            None => Err(std::io::Error::other("the client's stdin is neither a pipe nor a Unix stream socket")),
        }
    }

    /// One read. Through the reactor's `AsyncRead`, which takes a read shorter than asked as
    /// the end of what is there (the readiness is cleared, as a pipe or a stream socket is
    /// drained then): the next read waits for more instead of being tried at once and failing
    /// with `EAGAIN`, one system call per message saved. Cancel-safe, as `select!` needs.
    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use tokio::io::AsyncReadExt;
        match self {
            ReadEnd::Pipe(p) => p.read(buf).await,
            ReadEnd::Socket(s) => s.read(buf).await,
        }
    }
}

/// The client's input, read into the journal's input buffer; each line is booked (its requests
/// in flight, its set-up) before the session takes it up.
struct HandedInput {
    read_end: ReadEnd,
    buf: Map,
    /// The end of the bytes of `buf` ever written (and so backed by memory).
    touched: usize,
    /// As recorded in the journal (offsets into `buf`).
    position: Position,
    /// Where the search for the next newline goes on.
    scan: usize,
    limit: usize,
    /// Bytes of the over-long line being skipped, so far.
    skipped: Option<usize>,
    /// The line being skipped is the rest of one the last router skipped and answered: it ends
    /// without a word.
    silent: bool,
    /// Once what connect put first is taken up, the rest of such a line follows.
    discard_after_prefill: bool,
    head_bytes: Vec<u8>,
    tail: Vec<u8>,
    memory: Memory,
    shared: Arc<Shared>,
    /// Errors for requests that cannot be booked, to the writer.
    refuse: mpsc::UnboundedSender<String>,
}

impl HandedInput {
    fn start(&self) -> usize {
        self.position.start as usize
    }

    fn filled(&self) -> usize {
        self.position.filled as usize
    }

    /// Takes up the bytes before `next` (a line, or what of a skipped line was seen).
    fn take_up(&mut self, next: usize, line_ended: bool) {
        self.position.start = next as u64;
        if line_ended {
            self.position.lines += 1;
        }
        self.scan = next;
        self.shared.head.set_position(self.position);
    }

    /// Books one line's requests and set-up; the error line to send instead when its requests
    /// cannot be booked (then nothing of it is booked).
    fn book(&mut self, line: &str) -> Result<(), String> {
        let (ids, batch) = request_ids(line.as_bytes());
        self.book_ids(line, &ids, batch)
    }

    /// [`HandedInput::book`] of a line whose request ids are known (`ids`, of a batch or not).
    fn book_ids(&mut self, line: &str, ids: &[String], batch: bool) -> Result<(), String> {
        let number = self.position.lines;
        for (i, id) in ids.iter().enumerate() {
            if let Err(full) = self.shared.head.book(id, number, batch) {
                self.shared.head.free(&ids[..i]);
                let why = match full {
                    Full::IdTooLong => format!(
                        "switchyard connect carries request ids of at most {ID_MAX} bytes of JSON text, a string's quotes included (a string id of at most {} plain characters); this one has {}: use a shorter id",
                        ID_MAX - 2,
                        id.len()
                    ),
                    Full::NoSlot => format!(
                        "{SLOT_COUNT} requests of this session are already in flight through switchyard connect; wait for some to finish"
                    ),
                };
                let errors: Vec<String> =
                    ids.iter().map(|id| codec::response_error(id, codec::INVALID_REQUEST, &why, None)).collect();
                return Err(if batch { format!("[{}]", errors.join(",")) } else { errors.join("\n") });
            }
        }
        // A request the client cancels is owed no answer: it is no longer in flight.
        let cancelled = cancelled_ids(line);
        self.shared.answered(&cancelled);
        if Memory::may_note(line) {
            let mut changed = false;
            for_each_message(line, |m, env| changed |= self.memory.note(m, env));
            if changed && !self.shared.head.set_memory(&self.memory) {
                tracing::warn!(
                    "this session's set-up is too large for connect's journal; after a router restart it is replayed as it was before"
                );
            }
        }
        Ok(())
    }

    /// The line that ends at `nl` (its newline, or the end of the input), taken up to `next`;
    /// None when it was answered with an error instead.
    fn line_at(&mut self, nl: usize, next: usize) -> Option<Message> {
        let start = self.start();
        if let Some(bytes) = self.skipped.take() {
            let bytes = bytes + (nl - start);
            keep_tail(&mut self.tail, &self.buf.bytes_mut()[start..nl]);
            self.position.skipping = false;
            self.take_up(next, true);
            return (!std::mem::take(&mut self.silent)).then_some(Message::Frame(Frame::TooLong { bytes }));
        }
        let mut end = nl;
        if end > start && self.buf.bytes_mut()[end - 1] == b'\r' {
            end -= 1;
        }
        if end - start > self.limit {
            let bytes = &self.buf.bytes_mut()[start..end];
            self.head_bytes = bytes[..ENDS_KEPT.min(bytes.len())].to_vec();
            self.tail = bytes[bytes.len().saturating_sub(ENDS_KEPT)..].to_vec();
            let len = bytes.len();
            self.take_up(next, true);
            return Some(Message::Frame(Frame::TooLong { bytes: len }));
        }
        let text = match std::str::from_utf8(&self.buf.bytes_mut()[start..end]) {
            Ok(t) => t.to_string(),
            Err(_) => {
                self.take_up(next, true);
                return Some(Message::Frame(Frame::NotUtf8));
            }
        };
        let (booked, message) = match codec::parse(&text) {
            // A request (the common line) is read here once and handed to the session as read,
            // as the HTTP front hands its requests: its id is booked from what was read.
            Ok(env) if env.kind == codec::Kind::Request => {
                let call = Call::read(text, env);
                let booked = self.book_ids(call.line(), &[call.id().to_string()], false);
                (booked, Message::Request(Box::new(call)))
            }
            // The rest (a batch, a response, a notification, what does not read) as a line.
            _ => (self.book(&text), Message::Frame(Frame::Line(text))),
        };
        self.take_up(next, true);
        match booked {
            Ok(()) => Some(message),
            Err(refusal) => {
                let _ = self.refuse.send(refusal);
                None
            }
        }
    }

    /// Over the limit with no newline yet: the bytes so far are dropped, both ends kept.
    fn skip(&mut self) {
        let (start, filled) = (self.start(), self.filled());
        match self.skipped.as_mut() {
            Some(n) => {
                *n += filled - start;
                keep_tail(&mut self.tail, &self.buf.bytes_mut()[start..filled]);
            }
            None => {
                let bytes = &self.buf.bytes_mut()[start..filled];
                self.head_bytes = bytes[..ENDS_KEPT.min(bytes.len())].to_vec();
                self.tail.clear();
                keep_tail(&mut self.tail, bytes);
                self.skipped = Some(filled - start);
                // Its id, when the head shows it, is booked: the session answers it with an
                // error at the line's end, and a router that dies before then leaves it owed.
                if let Some(id) = codec::skipped_request_id(&self.head_bytes, &[]) {
                    let _ = self.shared.head.book(&id, self.position.lines, false);
                }
            }
        }
        self.position.skipping = true;
        self.take_up(filled, false);
    }

    /// Moves what is not taken up to the front once that cannot overwrite it.
    fn make_room(&mut self) {
        let (start, filled) = (self.start(), self.filled());
        let pending = filled - start;
        let crowded = filled + READ_MAX > self.buf.len();
        if start == 0 || pending > start || !(crowded || start >= READ_MAX) {
            return;
        }
        let bytes = self.buf.bytes_mut();
        let (front, back) = bytes.split_at_mut(start);
        front[..pending].copy_from_slice(&back[..pending]);
        self.scan -= start;
        self.position.start = 0;
        self.position.filled = pending as u64;
        self.shared.head.set_position(self.position);
        self.give_back();
    }

    /// Gives back the memory of the buffer past what is in use, once a large line left it.
    fn give_back(&mut self) {
        let keep = self.filled().max(KEEP_TOUCHED).next_multiple_of(4096);
        if self.touched <= keep {
            return;
        }
        let end = self.touched.next_multiple_of(4096).min(self.buf.len());
        if let Err(e) = self.buf.release(keep..end) {
            tracing::debug!("cannot give back the input buffer's memory: {e}");
        }
        self.touched = keep;
    }

    /// Reads what the client sent next into the buffer; 0 at the end of its input.
    async fn fill(&mut self) -> std::io::Result<usize> {
        let filled = self.filled();
        let end = (filled + READ_MAX).min(self.buf.len());
        debug_assert!(end > filled, "make_room leaves room to read");
        let HandedInput { read_end, buf, .. } = self;
        read_end.read(&mut buf.bytes_mut()[filled..end]).await
    }
}

impl Input for HandedInput {
    async fn next(&mut self) -> std::io::Result<Option<Message>> {
        self.next_message().await
    }

    fn skipped_ends(&self) -> (&[u8], &[u8]) {
        (&self.head_bytes, &self.tail)
    }
}

impl HandedInput {
    /// The next message the client sent (or what stood for one), or None at the end of its input.
    async fn next_message(&mut self) -> std::io::Result<Option<Message>> {
        loop {
            if self.shared.handing_back() && self.shared.head.in_flight() == 0 {
                // Nothing in flight and nothing more taken up: connect carries on from here.
                self.shared.quiet.cancel();
                self.shared.dead.cancelled().await;
                return Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "connect is gone"));
            }
            let filled = self.filled();
            if let Some(i) = memchr::memchr(b'\n', &self.buf.bytes_mut()[self.scan..filled]) {
                let nl = self.scan + i;
                match self.line_at(nl, nl + 1) {
                    Some(message) => return Ok(Some(message)),
                    None => continue,
                }
            }
            self.scan = filled;
            if std::mem::take(&mut self.discard_after_prefill) {
                // What connect put first is taken up; the rest of the skipped line follows.
                self.skipped = Some(0);
                self.silent = true;
            }
            if self.skipped.is_some() || filled - self.start() > self.limit + 2 {
                self.skip();
            }
            self.make_room();
            let shared = self.shared.clone();
            let read = tokio::select! {
                read = self.fill() => read,
                _ = shared.wake.notified() => continue,
                _ = shared.dead.cancelled() => {
                    return Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "connect is gone"));
                }
            };
            match read {
                Ok(0) => {
                    if self.skipped.is_some() || self.filled() > self.start() {
                        // A last line without a newline is still a line.
                        let end = self.filled();
                        if let Some(message) = self.line_at(end, end) {
                            return Ok(Some(message));
                        }
                        continue;
                    }
                    self.shared.client_ended.store(true, Ordering::Release);
                    return Ok(None);
                }
                Ok(n) => {
                    self.position.filled += n as u64;
                    self.touched = self.touched.max(self.filled());
                    self.shared.head.set_position(self.position);
                }
                Err(e) => {
                    self.shared.client_ended.store(true, Ordering::Release);
                    return Err(e);
                }
            }
        }
    }
}

/// The most written to the client in one write: never split by the kernel (see `WriteEnd`),
/// so the client's output never stops mid-line whatever happens to the router. A longer line
/// goes through connect, which writes it whole.
const ATOMIC_WRITE: usize = 4096;

/// The client's output: lines written as they come, in writes that are never split, the
/// answered requests freed in the journal once written, and the router's control lines turned
/// into a hand-back.
struct HandedOutput {
    write_end: WriteEnd,
    shared: Arc<Shared>,
    refusals: mpsc::UnboundedReceiver<String>,
    /// Lines sent through connect so far.
    sent: u64,
}

impl Output for HandedOutput {
    async fn run(
        self,
        rx: mpsc::UnboundedReceiver<crate::peer::Out>,
        backlog: Arc<crate::peer::Backlog>,
        label: String,
    ) {
        let shared = self.shared.clone();
        if let Err(e) = self.write_loop(rx, &backlog).await {
            shared.client_ended.store(true, Ordering::Release);
            tracing::info!(session = %label, "the client stopped reading its output (writing to it failed: {e}); ending its session");
        }
    }
}

/// A line to write, and whether it is one of the session's (counted in its backlog).
struct Item {
    line: String,
    counted: bool,
}

impl HandedOutput {
    async fn write_loop(
        mut self,
        mut rx: mpsc::UnboundedReceiver<crate::peer::Out>,
        backlog: &crate::peer::Backlog,
    ) -> std::io::Result<()> {
        let mut items: Vec<Item> = Vec::new();
        loop {
            tokio::select! {
                biased;
                _ = self.shared.dead.cancelled() => return Ok(()),
                out = rx.recv() => match out {
                    Some(out) => items.push(Item { line: out.line, counted: true }),
                    None => break,
                },
                Some(refusal) = self.refusals.recv() => items.push(Item { line: refusal, counted: false }),
            }
            while items.len() < 256 {
                if let Ok(out) = rx.try_recv() {
                    items.push(Item { line: out.line, counted: true });
                } else if let Ok(refusal) = self.refusals.try_recv() {
                    items.push(Item { line: refusal, counted: false });
                } else {
                    break;
                }
            }
            self.write(&mut items, backlog).await?;
        }
        while let Ok(refusal) = self.refusals.try_recv() {
            items.push(Item { line: refusal, counted: false });
        }
        self.write(&mut items, backlog).await
    }

    /// Writes `items` in order: short lines gathered into writes of at most [`ATOMIC_WRITE`]
    /// bytes, longer ones through connect.
    async fn write(&mut self, items: &mut Vec<Item>, backlog: &crate::peer::Backlog) -> std::io::Result<()> {
        let mut chunk = Vec::with_capacity(ATOMIC_WRITE);
        let mut written = Written::default();
        for item in items.drain(..) {
            if item.counted && control::is_control(&item.line) {
                // Not for the client: the router asks for the session to move.
                if let Ok(Reply::Drain { reason }) = control::reply(&item.line) {
                    self.shared.ask_back(reason);
                }
                backlog.wrote(item.line.len() + 1);
                continue;
            }
            let ids = response_ids(item.line.as_bytes());
            if ids.len() == 1 && is_replay_id(&ids[0]) && !codec::is_batch(item.line.trim()) {
                // The answer to a request of connect's replay: not the client's.
                if item.line.contains("\"error\"") {
                    tracing::info!("a request connect replayed was refused: {}", item.line);
                }
                written.add(&item, ids);
                continue;
            }
            let len = item.line.len() + 1;
            if chunk.len() + len > ATOMIC_WRITE {
                self.write_chunk(&mut chunk, &mut written, backlog).await?;
            }
            if len > ATOMIC_WRITE {
                self.through_connect(&item.line).await?;
                written.add(&item, ids);
                written.done(&self.shared, backlog);
                continue;
            }
            chunk.extend_from_slice(item.line.as_bytes());
            chunk.push(b'\n');
            written.add(&item, ids);
        }
        self.write_chunk(&mut chunk, &mut written, backlog).await
    }

    /// Writes the gathered short lines in one write, which the kernel never splits.
    async fn write_chunk(
        &mut self,
        chunk: &mut Vec<u8>,
        written: &mut Written,
        backlog: &crate::peer::Backlog,
    ) -> std::io::Result<()> {
        let mut off = 0;
        while off < chunk.len() {
            let n = tokio::select! {
                biased;
                _ = self.shared.dead.cancelled() => return Ok(()),
                n = self.write_end.write(&chunk[off..]) => n?,
            };
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            off += n;
        }
        chunk.clear();
        written.done(&self.shared, backlog);
        Ok(())
    }

    /// A line too long for one unsplit write goes through connect, which writes it whole; the
    /// next line waits until connect says it did.
    async fn through_connect(&mut self, line: &str) -> std::io::Result<()> {
        let sent = async {
            let mut to_connect = self.shared.to_connect.lock().await;
            to_connect.write_all(line.as_bytes()).await?;
            to_connect.write_all(b"\n").await
        };
        tokio::select! {
            biased;
            _ = self.shared.dead.cancelled() => return Ok(()),
            r = sent => r.map_err(|e| std::io::Error::new(e.kind(), format!("connect: {e}")))?,
        }
        self.sent += 1;
        while self.shared.acked.load(Ordering::Acquire) < self.sent {
            tokio::select! {
                _ = self.shared.acks.notified() => {}
                _ = self.shared.dead.cancelled() => return Ok(()),
            }
        }
        Ok(())
    }
}

/// What was written since the journal and the backlog were last told.
#[derive(Default)]
struct Written {
    /// The sizes of the session's lines, given back to its backlog.
    counted: Vec<usize>,
    /// The responses among them.
    answered: Vec<String>,
}

impl Written {
    fn add(&mut self, item: &Item, ids: Vec<String>) {
        if item.counted {
            self.counted.push(item.line.len() + 1);
        }
        self.answered.extend(ids);
    }

    fn done(&mut self, shared: &Shared, backlog: &crate::peer::Backlog) {
        for n in self.counted.drain(..) {
            backlog.wrote(n);
        }
        shared.answered(&self.answered);
        self.answered.clear();
    }
}
