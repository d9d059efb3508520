//! One client connection: reads its messages, keeps its in-flight calls, answers each request once.
//!
//! Here: the session, how it is opened and served, and where its messages come from and go.
//! The children hold the stages: `serving` (open, read loop, wind-down), `message` (each
//! message read), `place` (its profile and roots, and the server that serves them), `answer`
//! and `tasks` (a request to its response), `sessions` (the router's sessions).

mod answer;
mod message;
mod place;
mod serving;
mod sessions;
mod tasks;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::call::Cancel;
use crate::peer::ClientPeer;
use crate::server::Server;
use place::Placement;
pub use sessions::Sessions;
use switchyard_core::call::Call;
use switchyard_core::codec::{Frame, LineReader};
use switchyard_core::ids::SessionId;

/// A connected client.
pub struct Session {
    pub id: SessionId,
    /// `TRANSPORT-N` (`stdio-1`), shared with what its calls tell the policy.
    pub label: Arc<str>,
    link: Arc<ClientPeer>,
    /// The server it is a client of: the one it joined, until its profile sends it to a sibling
    /// (see [`crate::server::profile`]).
    server: std::sync::RwLock<Arc<Server>>,
    /// Set as the session winds down: it is placed nowhere any more (a wait for its roots that
    /// ends after it left must not start instances for it, or attach it to them).
    leaving: std::sync::atomic::AtomicBool,
    placement: Placement,
    /// Requests of this client still running, by their raw id: each owes exactly one response.
    inflight: Mutex<HashMap<String, Arc<Cancel>>>,
    /// Requests wait for the server's initialisation through this, one at a time in arrival
    /// order (tokio's mutex is FIFO), so calls pipelined behind `initialize` reach a serial
    /// server in the order the client sent them, as they would without switchyard.
    in_order: tokio::sync::Mutex<()>,
    started: tokio::time::Instant,
    /// The client said a switchyard hello: it understands control lines (`control::Reply::Drain`).
    speaks_control: bool,
    /// The server's earlier initialize result, when the client was answered with it while the
    /// server started: what it was told the server offers.
    promised: std::sync::OnceLock<String>,
    /// The capabilities of `promised` the server, once initialised, does not declare.
    withdrawn: std::sync::OnceLock<Vec<&'static str>>,
    /// Its span for export, from its start to its end (none when traces are off): its calls'
    /// spans link to it.
    span: switchyard_telemetry::Span,
}

/// How a session was opened.
pub struct Opening {
    /// What carries it (`stdio`, `unix`): the first part of its label.
    pub transport: &'static str,
    /// The router's sessions, which this one joins until it ends.
    pub sessions: Arc<Sessions>,
    /// The client understands switchyard's control lines.
    pub speaks_control: bool,
    /// The client's project directory (`connect`'s working directory), when known.
    pub client_dir: Option<String>,
    /// The name of the `[http.tokens]` entry whose token the HTTP front was sent, when one was.
    pub client_token: Option<String>,
}

impl Session {
    /// The server this session is a client of now.
    pub fn server(&self) -> Arc<Server> {
        self.server.read().expect("lock").clone()
    }

    /// What carries it: the first part of its label (`stdio`, `unix`, `http`).
    pub fn transport(&self) -> &str {
        self.label.split('-').next().unwrap_or("")
    }

    /// Its calls waiting for a gate or an instance.
    pub fn waiting(&self) -> usize {
        self.link.waiting()
    }

    /// The session as `switchyard status --json` shows it.
    pub fn status(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "label": &*self.label,
            "transport": self.label.split('-').next().unwrap_or(""),
            "client": self.link.client(),
            "inflight": self.inflight.lock().expect("lock").len(),
            "waiting": self.link.waiting(),
            "uptime_ms": self.started.elapsed().as_millis() as u64,
        })
    }
}

/// One message from the client, as its input hands it on.
pub enum Message {
    /// A frame of a byte stream: a line to parse, or what stood for one.
    Frame(Frame),
    /// A request its input parsed already (the HTTP front reads each body before it routes
    /// it): it is not parsed again. Boxed where it is parsed, in place of the `String` a second
    /// parse would make, so a channel of messages keeps small slots.
    Request(Box<Call>),
}

/// Where a session's messages come from: whole messages, one per frame.
pub trait Input {
    /// The next message, or `None` when the client closed its input (calls in flight get a
    /// short grace). An error of kind `ConnectionAborted` means the client ended the session on
    /// purpose: its calls are cancelled at once.
    fn next(&mut self) -> impl Future<Output = std::io::Result<Option<Message>>>;
    /// Both ends of the message behind the last `Frame::TooLong` (where its id usually is).
    fn skipped_ends(&self) -> (&[u8], &[u8]) {
        (&[], &[])
    }
}

impl<R: AsyncBufRead + Unpin> Input for LineReader<R> {
    async fn next(&mut self) -> std::io::Result<Option<Message>> {
        Ok(LineReader::next(self).await?.map(Message::Frame))
    }
    fn skipped_ends(&self) -> (&[u8], &[u8]) {
        LineReader::skipped_ends(self)
    }
}

/// Where a session's messages go: `run` takes every line the session sends, in order, until the
/// channel closes (the session ended). It returns early only when the client is gone, which
/// ends the session. Each line taken must be given back to `backlog` (`Backlog::wrote`) once
/// the client has it (or it is dropped), so a client that stops reading is noticed.
pub trait Output: Send + 'static {
    fn run(
        self,
        rx: mpsc::UnboundedReceiver<crate::peer::Out>,
        backlog: Arc<crate::peer::Backlog>,
        label: String,
    ) -> impl Future<Output = ()> + Send + 'static;
}

/// A byte stream (stdio, a Unix socket): one line per message.
pub struct Writer<W>(pub W);

impl<W: AsyncWrite + Unpin + Send + 'static> Output for Writer<W> {
    fn run(
        self,
        rx: mpsc::UnboundedReceiver<crate::peer::Out>,
        backlog: Arc<crate::peer::Backlog>,
        label: String,
    ) -> impl Future<Output = ()> + Send + 'static {
        serving::write_loop(self.0, rx, backlog, label)
    }
}

/// Serves one client until it disconnects or `shutdown` fires. Every request it sent gets one
/// response unless the client cancelled it; calls still running at the end are cancelled upstream.
pub async fn serve<R, W>(server: Arc<Server>, reader: R, writer: W, opening: Opening, shutdown: CancellationToken)
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let lines = LineReader::new(reader, server.limits.max_message_bytes);
    serve_with(server, lines, Writer(writer), opening, shutdown).await
}

/// [`serve`] with messages read from `input` and lines given to `output`.
pub async fn serve_with(
    server: Arc<Server>,
    mut input: impl Input,
    output: impl Output,
    opening: Opening,
    shutdown: CancellationToken,
) {
    let mut serving = Session::open(server, output, &opening);
    let ended = serving.read_loop(&mut input, &shutdown).await;
    serving.close(ended, &shutdown).await;
}
