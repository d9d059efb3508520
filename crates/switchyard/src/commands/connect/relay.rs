//! The relay's controller: the client's lines to the router, requests in flight, the session
//! replayed on a new connection, a drain, and reconnecting when the router goes away.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::anyhow;
use switchyard_os::endpoint::WriteHalf as OwnedWriteHalf;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use switchyard_core::codec;
pub(super) use switchyard_router::handoff::REPLAY_ID;
#[cfg(target_os = "linux")]
use switchyard_router::handoff::Recovered;
use switchyard_router::handoff::{Memory, cancelled_ids, lost_answers};

use super::Destination;
use super::join::{Joined, join, version_note};
use super::pumps::{for_each_message, read_router, request_ids};
use crate::commands::lines::{finish_writer, refuse_first_request, spawn_reader, spawn_writer};

/// After a failed reconnect, a new request tries again at most this often; the ones in between
/// get the last failure at once.
pub(super) const RETRY_EVERY: Duration = Duration::from_secs(1);
/// After the client closed its input, how long answers still owed may take.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// Whether shutting the connection's write half tells the router the input ended (a Unix
/// socket does; a Windows named pipe does not).
const HALF_CLOSE: bool = cfg!(unix);
/// How long a drained connection may go on delivering the server's messages after it was closed.
const DRAINED_LINGER: Duration = Duration::from_secs(10);
/// Client lines that may wait for a connection; past this, requests are answered with an error
/// at once (a client that keeps sending while the router is away must not grow `connect`).
const QUEUE_MAX: usize = 1024;

/// How a relay starts.
pub(super) enum Start {
    /// With the first attempt to reach the router (made before any of the client's input was read).
    Fresh(Result<Joined, String>),
    /// Carrying on a handed-off session the router let go of (`why`), from its journal.
    #[cfg(target_os = "linux")]
    Recovered { recovered: Recovered, why: String },
}

/// Relays `input` (the client's messages) to the router at `destination` and the router's messages
/// to `output`, until the client closes `input`. `exe` is the switchyard binary that starts a
/// daemon (`exe daemon --config C --socket S --detach`).
///
/// Fails when the router cannot be reached (or refuses) at the start: the client's first
/// request is answered with the reason first. In the old form it also fails when the router
/// goes away and cannot be reached again at once (nothing would start it again). The reason of
/// a failure is on stderr already when this returns.
pub(super) async fn relay<R, W>(
    destination: Destination,
    exe: PathBuf,
    input: R,
    output: W,
    start: Start,
) -> anyhow::Result<()>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    use tokio::io::AsyncReadExt;
    let (pending, skipping) = match &start {
        #[cfg(target_os = "linux")]
        Start::Recovered { recovered, .. } => {
            let (pending, skipping) = recovered.unread();
            (pending.to_vec(), skipping)
        }
        Start::Fresh(_) => (Vec::new(), false),
    };
    let (lines, reader) = spawn_reader(std::io::Cursor::new(pending).chain(input), skipping);
    let (events_tx, events) = mpsc::unbounded_channel();
    let gone = events_tx.clone();
    let (out, writer) = spawn_writer(output, move || {
        let _ = gone.send(Event::ClientGone);
    });
    let mut relay = Relay {
        destination,
        exe,
        out,
        events_tx,
        ledger: Arc::new(Mutex::new(Ledger::default())),
        idle: Arc::new(Notify::new()),
        memory: Memory::default(),
        queue: VecDeque::new(),
        conn: None,
        generation: 0,
        state: State::Live,
        readers: Vec::new(),
        warned_version: false,
        client_closed: false,
        closing: None,
        next_replay: 0,
    };
    let result = match start {
        Start::Fresh(Ok(joined)) => {
            relay.open(joined).await;
            relay.run(lines, events).await
        }
        Start::Fresh(Err(why)) => {
            switchyard_core::logging::say(&format!("switchyard connect: {why}"));
            refuse_first_request(lines, &relay.out, &why).await;
            Err(anyhow!(why))
        }
        #[cfg(target_os = "linux")]
        Start::Recovered { recovered, why } => {
            relay.memory = recovered.memory;
            {
                let mut ledger = relay.ledger.lock().expect("lock");
                ledger.ids.extend(recovered.open);
                ledger.batches = recovered.batches;
            }
            match relay.connection_lost(why).await {
                Some(end) => end,
                None => relay.run(lines, events).await,
            }
        }
    };
    for r in relay.readers.drain(..) {
        r.abort();
    }
    finish_writer(relay.out, writer).await;
    reader.abort();
    result
}

/// What reaches the controller from the other tasks.
#[derive(Debug)]
pub(super) enum Event {
    /// Connection `generation` ended (EOF, or an error).
    Gone { generation: u64, why: String },
    /// The router asked connection `generation` to drain.
    Drain { generation: u64, reason: String },
    /// The client stopped reading its output.
    ClientGone,
}

/// What `connect` passed to the router and has not seen answered.
#[derive(Default)]
pub(super) struct Ledger {
    /// The client's request ids (raw JSON).
    pub(super) ids: HashSet<String>,
    /// The ids of each batch sent, to answer a batch as one array.
    pub(super) batches: Vec<Vec<String>>,
    /// `connect`'s own replayed requests (raw id -> method): their answers are not the client's.
    pub(super) replayed: HashMap<String, String>,
}

enum State {
    Live,
    /// The router asked for a new connection: the old one serves on until nothing is in flight.
    Draining,
    /// Reaching the router again.
    Joining(Pin<Box<dyn Future<Output = Result<Joined, String>> + Send>>),
    /// The last attempt to reach the router failed, at `at`.
    Down {
        why: String,
        at: Instant,
    },
}

/// The controller: the client's lines to the router, connections, replay, drain.
struct Relay {
    destination: Destination,
    exe: PathBuf,
    out: mpsc::Sender<Vec<u8>>,
    events_tx: mpsc::UnboundedSender<Event>,
    ledger: Arc<Mutex<Ledger>>,
    /// Woken when the ledger's last client request is answered (for a drain).
    idle: Arc<Notify>,
    memory: Memory,
    /// Client lines waiting for a connection (in order).
    queue: VecDeque<Vec<u8>>,
    /// The write half of the live connection.
    conn: Option<OwnedWriteHalf>,
    /// The live connection's number; events of older ones are stale.
    generation: u64,
    state: State,
    readers: Vec<JoinHandle<()>>,
    warned_version: bool,
    client_closed: bool,
    /// Set once the client closed its input and the connection's write half is shut: the end.
    closing: Option<Instant>,
    next_replay: u64,
}

impl Relay {
    async fn run(
        &mut self,
        mut lines: mpsc::Receiver<Vec<u8>>,
        mut events: mpsc::UnboundedReceiver<Event>,
    ) -> anyhow::Result<()> {
        loop {
            let idle = self.idle.clone();
            let draining = matches!(self.state, State::Draining);
            let closing = self.closing;
            tokio::select! {
                // What the router said comes first: a client line read after a drain request
                // must see the drain.
                biased;
                event = events.recv() => {
                    let event = event.expect("the controller holds a sender");
                    if let Some(end) = self.on_event(event).await {
                        return end;
                    }
                }
                joined = async {
                    match &mut self.state {
                        State::Joining(f) => f.await,
                        _ => std::future::pending().await,
                    }
                } => {
                    if let Some(end) = self.joined(joined).await {
                        return end;
                    }
                }
                line = lines.recv(), if !self.client_closed => match line {
                    Some(line) => self.client_line(line).await,
                    None => {
                        self.client_closed = true;
                        if self.maybe_close().await {
                            return Ok(());
                        }
                    }
                },
                _ = idle.notified(), if draining => self.drain_step().await,
                // A named pipe has no half-close: the router never sees the end of the input, so
                // the end is when the last answer came (the router's session ends as connect
                // exits and the pipe closes).
                _ = idle.notified(), if closing.is_some() && !HALF_CLOSE => {
                    if self.ledger.lock().expect("lock").ids.is_empty() {
                        return Ok(());
                    }
                }
                _ = tokio::time::sleep_until(closing.unwrap_or_else(Instant::now)), if closing.is_some() => {
                    let why = format!(
                        "the client closed its input and the router at {} did not answer within {} s",
                        self.destination.socket.display(),
                        CLOSE_GRACE.as_secs()
                    );
                    self.answer_in_flight(&why).await;
                    return Ok(());
                }
            }
        }
    }

    /// Starts using a connection the router welcomed: its reader, the replay, then the queue.
    async fn open(&mut self, joined: Joined) {
        let Joined { reader, writer, version, .. } = joined;
        if let Some(note) = version.and_then(|v| version_note(&self.destination.socket, &v))
            && !self.warned_version
        {
            self.warned_version = true;
            switchyard_core::logging::say(&note);
        }
        self.generation += 1;
        self.readers.retain(|r| !r.is_finished());
        self.readers.push(tokio::spawn(read_router(
            self.generation,
            self.destination.socket.display().to_string(),
            reader,
            self.ledger.clone(),
            self.idle.clone(),
            self.out.clone(),
            self.events_tx.clone(),
        )));
        self.conn = Some(writer);
        self.state = State::Live;
        for line in self.replay() {
            self.write(line.as_bytes()).await;
        }
        // Until a write fails: what is left waits for the next connection.
        while self.conn.is_some()
            && let Some(line) = self.queue.pop_front()
        {
            self.send(line).await;
        }
    }

    /// The lines that set the client's session up again on a new connection; their answers are
    /// swallowed by the reader.
    fn replay(&mut self) -> Vec<String> {
        let mut ledger = self.ledger.lock().expect("lock");
        let next_replay = &mut self.next_replay;
        self.memory.replay(|method| {
            *next_replay += 1;
            let id = codec::json_string(&format!("{REPLAY_ID}{next_replay}"));
            ledger.replayed.insert(id.clone(), method.to_string());
            id
        })
    }

    async fn client_line(&mut self, line: Vec<u8>) {
        // The usual case, at the cost of one parse.
        if matches!(self.state, State::Live) && self.queue.is_empty() {
            return self.send(line).await;
        }
        if self.unqueue_cancelled(&line) {
            return;
        }
        let request = !request_ids(&line).0.is_empty();
        if self.queue.len() >= QUEUE_MAX && !matches!(self.state, State::Draining) {
            let why = format!(
                "{QUEUE_MAX} messages already wait for the router at {} to come back; try again in a moment",
                self.destination.socket.display()
            );
            return self.refuse(&line, &why).await;
        }
        match &self.state {
            State::Live | State::Joining(_) => self.queue.push_back(line),
            // The old connection's session still serves everything (on the server as it was
            // configured) until the first moment nothing is in flight: a quick call never waits
            // for a slow one because the configuration changed.
            State::Draining => self.send(line).await,
            // Nowhere to go (a notification, or an answer to a router that is gone).
            State::Down { .. } if !request => {}
            State::Down { why, at } => {
                let (why, retry) = (why.clone(), at.elapsed() >= RETRY_EVERY);
                if retry {
                    self.queue.push_back(line);
                    self.rejoin();
                } else {
                    self.refuse(&line, &why).await;
                }
            }
        }
    }

    /// A `notifications/cancelled` for a request still waiting in the queue takes that request
    /// out, and goes no further itself: the client wants no answer, and the router never saw it.
    fn unqueue_cancelled(&mut self, line: &[u8]) -> bool {
        if self.queue.is_empty() {
            return false;
        }
        let Ok(text) = std::str::from_utf8(line) else { return false };
        let Ok(env) = codec::parse(text.trim()) else { return false };
        if env.method.as_deref() != Some("notifications/cancelled") {
            return false;
        }
        let Some(span) = env.params.as_ref().and_then(|p| codec::param_fields(text.trim(), p).request_id) else {
            return false;
        };
        let id = &text.trim()[span];
        let waiting = self.queue.iter().position(|q| {
            let (ids, batch) = request_ids(q);
            !batch && ids.len() == 1 && ids[0] == id
        });
        waiting.map(|at| self.queue.remove(at)).is_some()
    }

    /// Passes one client line to the router, keeping its requests in the ledger and its session
    /// set-up in memory.
    async fn send(&mut self, line: Vec<u8>) {
        let (ids, batch) = request_ids(&line);
        if !ids.is_empty() {
            let mut ledger = self.ledger.lock().expect("lock");
            if batch {
                ledger.batches.push(ids.clone());
            }
            ledger.ids.extend(ids.iter().cloned());
        }
        // A request the client cancels is owed no answer (the router sends none): it is no
        // longer in flight, or a drain would wait for it forever.
        if let Ok(text) = std::str::from_utf8(&line) {
            let cancelled = cancelled_ids(text);
            if !cancelled.is_empty() {
                let mut ledger = self.ledger.lock().expect("lock");
                for id in &cancelled {
                    ledger.ids.remove(id);
                }
                if ledger.ids.is_empty() {
                    self.idle.notify_one();
                }
            }
        }
        if !self.write(&line).await {
            // The router was gone before it got the line (a write to a closed connection
            // fails; its reader reports the end in a moment): none of its requests can have run.
            // They go to the next router, not into the answers owed as "outcome unknown".
            let mut ledger = self.ledger.lock().expect("lock");
            for id in &ids {
                ledger.ids.remove(id);
            }
            if batch && ledger.batches.last() == Some(&ids) {
                ledger.batches.pop();
            }
            drop(ledger);
            self.queue.push_front(line);
            return;
        }
        // Parsed again only when it may hold what a replay needs.
        if let Ok(text) = std::str::from_utf8(&line)
            && Memory::may_note(text)
        {
            for_each_message(text, |m, env| {
                self.memory.note(m, env);
            });
        }
    }

    /// Writes to the live connection; false when there is none or the write failed (the router
    /// is gone: its reader sees that too and says so, after the answers it still got).
    async fn write(&mut self, line: &[u8]) -> bool {
        let Some(w) = self.conn.as_mut() else { return false };
        if w.write_all(line).await.is_err() {
            self.conn = None;
            return false;
        }
        true
    }

    /// Answers the requests in `line` with an error at once.
    async fn refuse(&mut self, line: &[u8], why: &str) {
        let (ids, batch) = request_ids(line);
        let errors: Vec<String> =
            ids.iter().map(|id| codec::response_error(id, codec::SERVER_UNAVAILABLE, why, None)).collect();
        if errors.is_empty() {
            return;
        }
        let text = if batch { format!("[{}]", errors.join(",")) } else { errors.join("\n") };
        let _ = self.out.send(text.into_bytes()).await;
    }

    fn rejoin(&mut self) {
        let (destination, exe) = (self.destination.clone(), self.exe.clone());
        self.conn = None;
        self.state = State::Joining(Box::pin(async move { join(&destination, &exe).await }));
    }

    /// A reconnect ended. Some(result) when `connect` is done.
    async fn joined(&mut self, joined: Result<Joined, String>) -> Option<anyhow::Result<()>> {
        match joined {
            Ok(j) => {
                self.open(j).await;
                self.maybe_close().await.then_some(Ok(()))
            }
            Err(why) => {
                for line in std::mem::take(&mut self.queue) {
                    self.refuse(&line, &why).await;
                }
                if self.destination.config.is_none() {
                    // The old form: nothing will start that router again.
                    switchyard_core::logging::say(&format!("switchyard connect: {why}"));
                    return Some(Err(anyhow!("{why}")));
                }
                switchyard_core::logging::say(&format!("switchyard connect: cannot reach the router again: {why}"));
                self.state = State::Down { why, at: Instant::now() };
                self.client_closed.then_some(Ok(()))
            }
        }
    }

    async fn on_event(&mut self, event: Event) -> Option<anyhow::Result<()>> {
        match event {
            Event::ClientGone => Some(Ok(())),
            Event::Drain { generation, reason } if generation == self.generation => {
                if matches!(self.state, State::Live) && self.closing.is_none() {
                    switchyard_core::logging::say(&format!(
                        "switchyard connect: the router at {} asked for a new connection ({reason}); it moves at the first moment no call is in flight",
                        self.destination.socket.display()
                    ));
                    self.state = State::Draining;
                    self.drain_step().await;
                }
                None
            }
            Event::Gone { generation, why } if generation == self.generation => self.connection_lost(why).await,
            // A connection that is no longer the live one (drained, or already replaced).
            Event::Drain { .. } | Event::Gone { .. } => None,
        }
    }

    /// The live connection ended: every request in flight gets an error, then `connect`
    /// reconnects (unless the client is gone).
    async fn connection_lost(&mut self, why: String) -> Option<anyhow::Result<()>> {
        self.conn = None;
        // No reader will report on this generation again.
        self.generation += 1;
        let count = self.answer_in_flight(&why).await;
        if self.client_closed {
            return Some(Ok(()));
        }
        let summary = format!("{why}; {count} call(s) in flight were answered with an error");
        if self.destination.config.is_none() {
            // The old form: one attempt at once; a router that stopped is not started again.
            match join(&self.destination, &self.exe).await {
                Ok(j) => {
                    switchyard_core::logging::say(&format!("switchyard connect: {summary}; reconnected"));
                    self.open(j).await;
                    None
                }
                Err(again) => {
                    for line in std::mem::take(&mut self.queue) {
                        self.refuse(&line, &again).await;
                    }
                    switchyard_core::logging::say(&format!("switchyard connect: {summary}"));
                    Some(Err(anyhow!("{summary}")))
                }
            }
        } else {
            switchyard_core::logging::say(&format!("switchyard connect: {summary}; reconnecting"));
            self.rejoin();
            None
        }
    }

    /// Errors for every client request in flight; how many there were.
    async fn answer_in_flight(&mut self, why: &str) -> usize {
        let (ids, batches) = {
            let mut ledger = self.ledger.lock().expect("lock");
            ledger.replayed.clear();
            (std::mem::take(&mut ledger.ids), std::mem::take(&mut ledger.batches))
        };
        let ids: Vec<String> = ids.into_iter().collect();
        for line in lost_answers(why, &ids, &batches) {
            let _ = self.out.send(line.into_bytes()).await;
        }
        ids.len()
    }

    /// During a drain: once nothing is in flight, closes the old connection and reconnects.
    async fn drain_step(&mut self) {
        if !matches!(self.state, State::Draining) || !self.ledger.lock().expect("lock").ids.is_empty() {
            return;
        }
        if let Some(mut w) = self.conn.take() {
            let _ = w.shutdown().await;
        }
        // The old reader goes on passing the server's messages until the router closes; bounded.
        if let Some(old) = self.readers.last() {
            let old = old.abort_handle();
            tokio::spawn(async move {
                tokio::time::sleep(DRAINED_LINGER).await;
                old.abort();
            });
        }
        self.generation += 1;
        self.rejoin();
    }

    /// After the client closed its input: once its queued lines went out, closes the write half
    /// and waits (bounded) for the router to close. True when there is nothing left to wait for.
    async fn maybe_close(&mut self) -> bool {
        if !self.client_closed || self.closing.is_some() {
            return false;
        }
        match self.state {
            State::Down { .. } => true,
            State::Live => {
                if !HALF_CLOSE && self.ledger.lock().expect("lock").ids.is_empty() {
                    return true;
                }
                if let Some(w) = self.conn.as_mut() {
                    let _ = w.shutdown().await;
                }
                self.closing = Some(Instant::now() + CLOSE_GRACE);
                false
            }
            State::Draining | State::Joining(_) => false,
        }
    }
}
