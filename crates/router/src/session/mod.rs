//! One client connection: reads its messages, keeps its in-flight calls, answers each request once.

mod answer;
mod sessions;
mod tasks;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::call::Cancel;
use crate::peer::ClientPeer;
use crate::server::Server;
use crate::server::profile::{Placed, Profile};
use sessions::Registered;
pub use sessions::Sessions;
use switchyard_config::Share;
use switchyard_core::codec::{self, Envelope, Frame, Kind, LineReader};
use switchyard_core::decision::Transport;
use switchyard_core::ids::SessionId;

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// How long in-flight calls get to wind down when a session ends.
const SESSION_GRACE: Duration = Duration::from_secs(3);
/// After the client closed its input, how long calls in flight get to finish and be answered
/// before they are cancelled (the SDKs wait as long after closing a server's stdin).
const EOF_GRACE: Duration = Duration::from_secs(2);

/// A connected client.
pub struct Session {
    pub id: SessionId,
    pub label: String,
    link: Arc<ClientPeer>,
    /// The server it is a client of: the one it joined, until its profile sends it to a sibling
    /// (see [`crate::server::profile`]).
    server: std::sync::RwLock<Arc<Server>>,
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
}

/// Where a session stands in finding the server instances that serve its profile.
struct Placement {
    /// Its profile, once it sent initialize.
    profile: Mutex<Option<Profile>>,
    /// Its initialize params: a server it moves to is initialised with them.
    init_params: Mutex<Option<String>>,
    /// False while switchyard asks the client for its roots to place it: its requests wait.
    settled: tokio::sync::watch::Sender<bool>,
    /// The roots are being asked for, or were.
    asked: std::sync::atomic::AtomicBool,
    /// The client's project directory, when `connect` said it (for `share = "client"`).
    client_dir: Option<String>,
    /// The name of the HTTP front's named token that serves the client (for `share = "client"`).
    client_token: Option<String>,
    /// A roots change is being taken up, and another was said meanwhile.
    refreshing: std::sync::atomic::AtomicBool,
    again: std::sync::atomic::AtomicBool,
}

/// How long a session whose roots are known waits for those of a client served before it, to
/// share that client's instances when their roots agree.
const RESERVED_WAIT: Duration = Duration::from_millis(300);

/// How long a session waits for its client's roots before it is placed without them (a
/// client answers in milliseconds; one that does not answer is served as one with no roots).
const ROOTS_WAIT: Duration = Duration::from_secs(2);

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
            "label": self.label,
            "transport": self.label.split('-').next().unwrap_or(""),
            "client": self.link.client(),
            "inflight": self.inflight.lock().expect("lock").len(),
            "waiting": self.link.waiting(),
            "uptime_ms": self.started.elapsed().as_millis() as u64,
        })
    }
}

/// Where a session's messages come from: whole messages, one per frame.
pub trait Input {
    /// The next message, or `None` when the client closed its input (calls in flight get a
    /// short grace). An error of kind `ConnectionAborted` means the client ended the session on
    /// purpose: its calls are cancelled at once.
    fn next(&mut self) -> impl Future<Output = std::io::Result<Option<Frame>>>;
    /// Both ends of the message behind the last `Frame::TooLong` (where its id usually is).
    fn skipped_ends(&self) -> (&[u8], &[u8]) {
        (&[], &[])
    }
}

impl<R: AsyncBufRead + Unpin> Input for LineReader<R> {
    fn next(&mut self) -> impl Future<Output = std::io::Result<Option<Frame>>> {
        LineReader::next(self)
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
        write_loop(self.0, rx, backlog, label)
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

/// A session being served, from [`Session::open`] to [`Serving::close`].
struct Serving<'a> {
    session: Arc<Session>,
    server: Arc<Server>,
    label: String,
    transport: &'static str,
    started: tokio::time::Instant,
    /// Takes the session out of the router's sessions when the serving ends.
    _registered: Registered<'a>,
    writer_task: JoinHandle<()>,
    /// The writer ends early only when writing to the client failed: the client is gone.
    writer_ended: bool,
    /// The session's calls (and batches) running.
    tasks: TaskTracker,
}

/// Why the read loop ended.
#[derive(Clone, Copy, PartialEq)]
enum Ended {
    /// switchyard is shutting down: the client is still there to read an answer for what is
    /// cancelled.
    Shutdown,
    /// The client closed its input; it may still read what it is owed.
    Eof,
    /// The client is gone: it ended its session, stopped reading, or reading from it failed.
    Gone,
}

impl Session {
    /// Sets a session up: its outbox on the server's hub, its place among the router's
    /// sessions, and its writer.
    fn open<'a>(server: Arc<Server>, output: impl Output, opening: &'a Opening) -> Serving<'a> {
        let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
        let started = tokio::time::Instant::now();
        let label = format!("{}-{id}", opening.transport);
        let (tx, rx) = mpsc::unbounded_channel();
        // A client that stops reading may fall this far behind before its session is closed.
        let queue_limit = server.limits.max_message_bytes.saturating_mul(4);
        let link = ClientPeer::new(id, tx, queue_limit, server.buffered.clone());
        link.set_origin(
            Transport::of_label(opening.transport),
            opening.client_dir.clone(),
            opening.client_token.clone(),
        );
        server.hub.attach(link.clone());
        let session = Arc::new(Session {
            id,
            label: label.clone(),
            link,
            server: std::sync::RwLock::new(server.clone()),
            placement: Placement {
                profile: Mutex::new(None),
                init_params: Mutex::new(None),
                settled: tokio::sync::watch::channel(true).0,
                asked: Default::default(),
                client_dir: opening.client_dir.clone(),
                client_token: opening.client_token.clone(),
                refreshing: Default::default(),
                again: Default::default(),
            },
            inflight: Mutex::new(HashMap::new()),
            in_order: tokio::sync::Mutex::new(()),
            started,
            speaks_control: opening.speaks_control,
            promised: std::sync::OnceLock::new(),
            withdrawn: std::sync::OnceLock::new(),
        });
        let registered = opening.sessions.add(&session);
        server.metrics.session_opened(opening.transport);
        let writer_task = tokio::spawn(output.run(rx, session.link.backlog(), label.clone()));
        tracing::debug!(session = %label, "session started");
        Serving {
            session,
            server,
            label,
            transport: opening.transport,
            started,
            _registered: registered,
            writer_task,
            writer_ended: false,
            tasks: TaskTracker::new(),
        }
    }
}

impl Serving<'_> {
    /// Reads the client's messages and acts on each, until the client leaves or `shutdown` fires.
    async fn read_loop(&mut self, input: &mut impl Input, shutdown: &CancellationToken) -> Ended {
        let session = &self.session;
        loop {
            let frame = tokio::select! {
                f = input.next() => f,
                _ = shutdown.cancelled() => return Ended::Shutdown,
                _ = session.link.overflow.cancelled() => return Ended::Gone,
                _ = &mut self.writer_task => {
                    self.writer_ended = true;
                    return Ended::Gone;
                }
            };
            match frame {
                Ok(Some(Frame::Line(line))) => session.on_line(line, &self.tasks),
                Ok(Some(Frame::TooLong { bytes })) => session.link.send(codec::response_error(
                    &{
                        let (head, tail) = input.skipped_ends();
                        codec::skipped_request_id(head, tail).unwrap_or_else(|| "null".to_string())
                    },
                    codec::INVALID_REQUEST,
                    &format!(
                        "message of {bytes} bytes is over the limit of {} bytes (limits.max_message_bytes); it was skipped",
                        self.server.limits.max_message_bytes
                    ),
                    None,
                )),
                Ok(Some(Frame::NotUtf8)) => session.link.send(codec::response_error(
                    "null",
                    codec::PARSE_ERROR,
                    "Parse error: the message is not valid UTF-8",
                    None,
                )),
                Ok(None) => return Ended::Eof,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {
                    tracing::debug!(session = %self.label, "the client ended its session: {e}");
                    return Ended::Gone;
                }
                Err(e) => {
                    tracing::warn!(session = %self.label, "reading from the client failed: {e}");
                    return Ended::Gone;
                }
            }
        }
    }

    /// Winds the session down: its calls get their grace, then are cancelled; it leaves its
    /// server; its writer gets what is queued out to the client (unless the client is gone).
    async fn close(mut self, ended: Ended, shutdown: &CancellationToken) {
        // Whether the client is still there to read an answer for what is cancelled below.
        let mut client_listening = ended == Ended::Shutdown;
        // End of input is not a cancel: what is in flight gets a short grace to be answered, as a
        // server run directly would answer it.
        if ended == Ended::Eof && !self.session.inflight.lock().expect("lock").is_empty() {
            self.tasks.close();
            tokio::select! {
                _ = tokio::time::timeout(EOF_GRACE, self.tasks.wait()) => {}
                _ = shutdown.cancelled() => client_listening = true,
                _ = self.session.link.overflow.cancelled() => {}
                _ = &mut self.writer_task => self.writer_ended = true,
            }
        }
        self.cancel_calls(client_listening).await;
        self.session.server().detach(self.session.id).await;
        let session_overflowed = self.session.link.overflow.is_cancelled();
        let peak = self.session.link.backlog().peak();
        drop(self.session);
        // What is queued still goes out, unless the client stopped reading: then it is dropped.
        // An aborted writer drops what it still held once it is polled to its end.
        let mut writer_task = self.writer_task;
        if self.writer_ended {
            // Already awaited: its output is gone, and so is what was queued for it.
        } else if session_overflowed {
            writer_task.abort();
            let _ = writer_task.await;
        } else if tokio::time::timeout(SESSION_GRACE, &mut writer_task).await.is_err() {
            tracing::warn!(session = %self.label, "the client did not take its last messages within {SESSION_GRACE:?}");
            writer_task.abort();
            let _ = writer_task.await;
        }
        if peak >= crate::peer::GIVE_BACK_AFTER {
            crate::peer::give_back_memory();
        }
        self.server.metrics.session_closed(self.transport, self.started.elapsed());
        tracing::debug!(session = %self.label, "session ended");
    }

    /// The client is gone, or switchyard is shutting down: cancels the session's calls upstream
    /// and waits (a while) for them to wind down. A client that is still there
    /// (`client_listening`) gets an error for each; one that left is owed nothing.
    async fn cancel_calls(&self, client_listening: bool) {
        let open: Vec<Arc<Cancel>> = self.session.inflight.lock().expect("lock").values().cloned().collect();
        if !open.is_empty() {
            tracing::info!(session = %self.label, "session ended with {} calls in flight; cancelling them", open.len());
        }
        // Shutting down, or (the server's own token fired) its server was removed.
        let why = self.session.server().ended().to_string();
        for c in open {
            if client_listening {
                c.cancel_and_answer(&why);
            } else {
                c.cancel(Some("the client disconnected".to_string()));
            }
        }
        self.tasks.close();
        if tokio::time::timeout(SESSION_GRACE, self.tasks.wait()).await.is_err() {
            tracing::warn!(session = %self.label, "calls did not wind down within {SESSION_GRACE:?}");
        }
    }
}

/// Writes the session's messages to the client. It ends before the session only when a write
/// fails (a closed pipe or socket: the client stopped reading), which ends the session.
async fn write_loop<W: AsyncWrite + Unpin>(
    writer: W,
    mut rx: mpsc::UnboundedReceiver<crate::peer::Out>,
    backlog: Arc<crate::peer::Backlog>,
    label: String,
) {
    let mut w = BufWriter::with_capacity(64 * 1024, writer);
    let failed = async {
        while let Some(out) = rx.recv().await {
            let mut next = Some(out.line);
            while let Some(l) = next {
                w.write_all(l.as_bytes()).await?;
                w.write_all(b"\n").await?;
                backlog.wrote(l.len() + 1);
                next = rx.try_recv().ok().map(|o| o.line);
            }
            w.flush().await?;
        }
        std::io::Result::Ok(())
    }
    .await;
    if let Err(e) = failed {
        tracing::info!(session = %label, "the client stopped reading its output (writing to it failed: {e}); ending its session");
    }
}

/// What the reader loop does with one message before anything async runs.
enum Step {
    /// A request, registered in flight; run it.
    Run(String, Envelope, Arc<Cancel>),
    /// Answer this at once.
    Reply(String),
    /// Handled (a notification or a response) or nothing to do.
    Done,
}

impl Session {
    fn on_line(self: &Arc<Self>, line: String, tasks: &TaskTracker) {
        if line.trim().is_empty() {
            return;
        }
        if codec::is_batch(&line) {
            return self.on_batch(&line, tasks);
        }
        match self.step(line) {
            Step::Run(line, env, token) => {
                let me = self.clone();
                tasks.spawn(async move {
                    if let Some(resp) = me.clone().run(line, env, token).await {
                        me.link.send(resp);
                    }
                });
            }
            Step::Reply(r) => self.link.send(r),
            Step::Done => {}
        }
    }

    /// A JSON-RPC batch: its requests run concurrently and are answered together, as an array.
    fn on_batch(self: &Arc<Self>, line: &str, tasks: &TaskTracker) {
        let items = match codec::split_batch(line) {
            Ok(items) => items,
            Err(e) => return self.link.send(codec::response_error("null", e.code(), &e.message(), None)),
        };
        if items.is_empty() {
            return self.link.send(codec::response_error(
                "null",
                codec::INVALID_REQUEST,
                "Invalid Request: empty batch",
                None,
            ));
        }
        let steps: Vec<Step> = items.into_iter().map(|i| self.step(i.to_string())).collect();
        let me = self.clone();
        tasks.spawn(async move {
            let mut replies = Vec::new();
            let mut running = Vec::new();
            for s in steps {
                match s {
                    Step::Run(line, env, token) => running.push(me.clone().run(line, env, token)),
                    Step::Reply(r) => replies.push(r),
                    Step::Done => {}
                }
            }
            let mut set = tokio::task::JoinSet::new();
            for f in running {
                set.spawn(f);
            }
            while let Some(r) = set.join_next().await {
                if let Ok(Some(r)) = r {
                    replies.push(r);
                }
            }
            if !replies.is_empty() {
                me.link.send(format!("[{}]", replies.join(",")));
            }
        });
    }

    fn step(self: &Arc<Self>, line: String) -> Step {
        let env = match codec::parse(&line) {
            Ok(env) => env,
            Err(e @ codec::ParseError::BadNotification { .. }) => {
                tracing::info!(session = %self.label, "dropped a notification from the client: {}", e.message());
                return Step::Done;
            }
            Err(e) => {
                tracing::debug!(session = %self.label, "bad message from client: {}", e.message());
                return Step::Reply(codec::response_error(e.reply_id(), e.code(), &e.message(), None));
            }
        };
        match env.kind {
            Kind::Response => {
                self.server().hub.client_response(&self.link, &line, &env);
                Step::Done
            }
            Kind::Notification => {
                self.on_notification(&line, &env);
                Step::Done
            }
            Kind::Request => {
                let id = line[env.id.clone().expect("requests have ids")].to_string();
                let token = Arc::new(Cancel::default());
                let mut inflight = self.inflight.lock().expect("lock");
                if inflight.contains_key(&id) {
                    return Step::Reply(codec::response_error(
                        &id,
                        codec::INVALID_REQUEST,
                        &format!("Invalid Request: id {id} is already in use by a request still in flight"),
                        None,
                    ));
                }
                inflight.insert(id, token.clone());
                drop(inflight);
                // `initialize` is the handshake of its era even when it carries the envelope.
                let modern = env.method.as_deref() != Some("initialize")
                    && env.params.as_ref().is_some_and(|p| codec::envelope_version(&line, p).is_some());
                match env.method.as_deref() {
                    // A 2026-07-28 client never initialises: its first request opens its session.
                    _ if modern => self.link.open(),
                    Some("initialize") => {
                        let params = env.params.as_ref().map(|p| &line[p.clone()]).unwrap_or("{}");
                        self.place_at_initialize(params);
                        self.server().begin_initialize(params);
                    }
                    Some("ping" | "server/discover") => {}
                    // A client that skips `initialized` is taken as initialised by its first call.
                    _ => {
                        self.link.open();
                        self.settle_roots();
                    }
                }
                Step::Run(line, env, token)
            }
        }
    }

    fn on_notification(self: &Arc<Self>, line: &str, env: &Envelope) {
        let method = env.method.as_deref().unwrap_or_default();
        match method {
            // switchyard initialised the server itself; the client's ack opens its session to
            // what servers send on their own.
            "notifications/initialized" => {
                self.link.open();
                self.settle_roots();
            }
            "notifications/cancelled" => {
                let fields = env.params.as_ref().map(|p| codec::param_fields(line, p)).unwrap_or_default();
                let Some(span) = fields.request_id else { return };
                let id = &line[span];
                // Out of the table at once: no response is owed, and the client may reuse the id
                // right away (the call's task finds its entry gone and leaves a new one alone).
                match self.inflight.lock().expect("lock").remove(id) {
                    Some(c) => c.cancel(fields.reason),
                    None => tracing::debug!(session = %self.label, "cancel for id {id}, which is not in flight"),
                }
            }
            // A request's method without an id is no request (JSON-RPC: a notification), and
            // MCP has no such notification: no server would answer it, a policy would judge it
            // without its tool, and it would go to every instance. Dropped, as JSON-RPC wants
            // a notification it cannot take to be (no reply).
            _ if !method.starts_with("notifications/") => {
                let server = self.server();
                if let Some(n) = server.repeats.request_without_id.hit() {
                    tracing::warn!(
                        session = %self.label,
                        server = %server.name,
                        "dropped a `{method}` without an id from the client: a request needs an id to be answered, and this one was neither sent to the server nor judged by the policy{}",
                        switchyard_core::logging::times(n)
                    );
                }
            }
            _ => {
                let me = self.clone();
                let (method, line) = (method.to_string(), line.to_string());
                tokio::spawn(async move { me.forward_notification(&method, line).await });
            }
        }
    }

    /// A client notification for the servers (roots/list_changed and anything else). Like
    /// every message that reaches a server, it passes the policy first (on a plugin worker).
    async fn forward_notification(self: Arc<Self>, method: &str, line: String) {
        let server = self.server();
        let call = switchyard_core::decision::CallInfo {
            server: server.name.clone(),
            session: self.label.clone(),
            caller: self.link.caller(),
            method: method.to_string(),
            tool: None,
            arguments: None,
            declared: Default::default(),
            attempt: 0,
            task: None,
        };
        if let Err(r) = server.policy.current().decide_async(&call).await {
            tracing::info!(session = %self.label, "{method} not forwarded: rejected by `{}`: {}", r.plugin, r.reason);
            return;
        }
        if method == "notifications/roots/list_changed" {
            // switchyard keeps the client's roots (it answers servers from them): it asks for
            // the new ones, then passes the change on.
            return self.roots_changed(line).await;
        }
        // To every instance of the initialize era this session may use (the 2026-07-28
        // protocol has no such notifications).
        let targets: Vec<_> = server
            .all_instances()
            .into_iter()
            .filter(|i| i.is_ready() && i.owner.is_none_or(|o| o == self.id) && !server.is_modern(i))
            .collect();
        for inst in targets {
            // Counted against the same unread budget as calls: a server that stopped reading
            // must not make switchyard hold every notification a client keeps sending.
            if !inst.is_writable() {
                if let Some(n) = server.repeats.notification_unread.hit() {
                    tracing::warn!(
                        session = %self.label,
                        instance = %inst.label(),
                        "dropped a client's {method}: the server has not read the last {} bytes sent to it{}",
                        inst.backlog(),
                        switchyard_core::logging::times(n)
                    );
                }
                continue;
            }
            let _ = inst.write(line.clone());
        }
    }
}

impl Session {
    /// At `initialize`: the session's profile, and the server that serves it (this one, or a
    /// sibling made for it). A client that declares roots is placed again once they are known.
    fn place_at_initialize(self: &Arc<Self>, params: &str) {
        let server = self.server();
        let owner = match server.share() {
            Share::Client => {
                let v: serde_json::Value = serde_json::from_str(params).unwrap_or_default();
                let name = v["clientInfo"]["name"].as_str().unwrap_or_default();
                let dir = self.placement.client_dir.as_deref().unwrap_or("");
                // Holders of two named tokens are two clients, whatever their names say.
                match &self.placement.client_token {
                    Some(token) => Some(format!("{name} in {dir} with token {token}")),
                    None => Some(format!("{name} in {dir}")),
                }
            }
            Share::Session => Some(format!("session {}", self.id)),
            Share::All | Share::Profile => None,
        };
        let profile = Profile::of_initialize(params, owner);
        *self.placement.init_params.lock().expect("lock") = Some(params.to_string());
        *self.placement.profile.lock().expect("lock") = Some(profile.clone());
        let server = self.place(&server, &profile, false).unwrap_or(server);
        // switchyard asks a client that declares roots for them once it is initialised. Where
        // its requests could be served by instances set up for other roots (the server's roots
        // are known, another client's; or it has other clients), they wait for the answer; a
        // client alone on a server new to roots is served meanwhile, and the server takes its
        // roots when they come.
        let ask = profile.declares_roots() && server.has_family();
        if ask {
            let others = server.profile().is_some_and(|p| p.roots.is_some()) || server.hub.session_count() > 1;
            if others {
                self.placement.settled.send_replace(false);
            } else {
                server.reserve_roots(self.id);
            }
            server.hub.expect_roots(self.id);
        }
        self.placement.asked.store(!ask, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sends the session to the server for `profile` when that is not `server`; returns it then.
    fn place(self: &Arc<Self>, server: &Arc<Server>, profile: &Profile, roots_changed: bool) -> Option<Arc<Server>> {
        match server.place(self.id, profile, roots_changed) {
            Ok(Placed::Stay) => None,
            Ok(Placed::Move(to)) => {
                *self.server.write().expect("lock") = to.clone();
                to.hub.attach(self.link.clone());
                server.hub.detach(self.id);
                let (from, id) = (server.clone(), self.id);
                server.tasks.spawn(async move { from.detach(id).await });
                tracing::info!(
                    session = %self.label,
                    "served by {}: what the server sees of this client differs from the clients of {}",
                    to.instance_label_prefix(),
                    server.instance_label_prefix()
                );
                Some(to)
            }
            Err(why) => {
                tracing::warn!(
                    session = %self.label,
                    server = %server.name,
                    "could not start instances for this client's profile ({why}); it shares those of {}",
                    server.instance_label_prefix()
                );
                None
            }
        }
    }

    /// Once the client is initialised, where its initialize asked for it (see
    /// [`Session::place_at_initialize`]): asks for its roots and places the session by them. Its
    /// requests wait meanwhile (at most [`ROOTS_WAIT`]).
    fn settle_roots(self: &Arc<Self>) {
        // A client that never sent initialize declared no roots: it is asked for none (its
        // requests are refused anyway).
        if !self.sent_initialize() {
            return;
        }
        // Once per initialize that asks for it (cheap on every later request).
        if self.placement.asked.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let server = me.server();
            // No answer in time, or an error: the client's roots are unknown, and it must not
            // be served by instances set up for another client's roots. It gets instances of
            // its own (which ask it for its roots themselves).
            let roots = server.hub.fetch_roots(&me.link, ROOTS_WAIT).await;
            // A client served here first, whose roots are not known yet, decides whether this
            // one may share: wait a moment for them (two clients starting together answer within
            // milliseconds of each other) rather than start instances for clients that may well
            // be alike; past that, this one gets its own.
            let waited = tokio::time::Instant::now();
            while server.roots_reserved_for_other(me.id) && waited.elapsed() < RESERVED_WAIT {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            me.place_by_roots(&server, roots, false);
            me.placement.settled.send_replace(true);
        });
    }

    /// The client's roots are `roots` (None: unknown, it did not say): the session goes to the
    /// server for them (initialised for it when it is not yet). True when it moved.
    fn place_by_roots(self: &Arc<Self>, server: &Arc<Server>, roots: Option<serde_json::Value>, changed: bool) -> bool {
        let profile = {
            let mut p = self.placement.profile.lock().expect("lock");
            let Some(p) = p.as_mut() else { return false };
            p.roots = Some(match &roots {
                Some(r) => crate::server::profile::canonical_roots(r),
                None => crate::server::profile::UNKNOWN_ROOTS.to_string(),
            });
            p.clone()
        };
        let Some(to) = self.place(server, &profile, changed) else { return false };
        to.hub.set_roots(self.id, roots);
        let params = self.placement.init_params.lock().expect("lock").clone();
        if let Some(params) = params {
            to.begin_initialize(&params);
            let (me, to) = (self.clone(), to.clone());
            to.clone().tasks.spawn(async move {
                match to.initialize(me.id, &params).await {
                    Ok(_) => to.refresh_tools().await,
                    Err(e) => tracing::warn!(session = %me.label, "{} could not start for this client: {e}", to.instance_label_prefix()),
                }
            });
        }
        true
    }

    /// A client's roots/list_changed: switchyard learns the new roots; a session that shares its
    /// instances with clients of the old roots moves to instances for the new ones, else the
    /// change goes on to its instances.
    async fn roots_changed(self: &Arc<Self>, line: String) {
        use std::sync::atomic::Ordering::SeqCst;
        // One refresh at a time: a change said while one runs is taken up by it (asked again
        // once it ends), so a client that keeps saying so holds neither asks nor its lines.
        if self.placement.refreshing.swap(true, SeqCst) {
            self.placement.again.store(true, SeqCst);
            return;
        }
        let mut line = line;
        loop {
            let server = self.server();
            let moved = match server.hub.refresh_roots(&self.link).await {
                Some(roots) if server.has_family() => self.place_by_roots(&server, Some(roots), true),
                _ => false,
            };
            if !moved {
                server.hub.pass_roots_changed(self.id, line);
            }
            self.placement.refreshing.store(false, SeqCst);
            if !self.placement.again.swap(false, SeqCst) || self.placement.refreshing.swap(true, SeqCst) {
                return;
            }
            line = codec::notification("notifications/roots/list_changed", "{}");
        }
    }

    /// Its profile, once it sent initialize.
    fn profile(&self) -> Option<Profile> {
        self.placement.profile.lock().expect("lock").clone()
    }

    /// Whether the client sent initialize (without copying its profile: asked on every request).
    fn sent_initialize(&self) -> bool {
        self.placement.profile.lock().expect("lock").is_some()
    }

    /// Waits until the session is placed (see [`Session::settle_roots`]).
    async fn placed(&self) {
        let mut rx = self.placement.settled.subscribe();
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}
