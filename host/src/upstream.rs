//! One upstream server instance: its child process, id rewriting, the in-flight table, its replies.

pub mod remote;
pub mod transport;

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::codec::{self, Envelope, Frame, Kind, LineReader};
use crate::error::Death;
use crate::hub::Hub;
use crate::ids::SessionId;
use crate::link::SessionLink;

/// How many stderr lines of an instance are kept for error messages.
const STDERR_TAIL: usize = 20;
/// Shutdown: after closing stdin, and after SIGTERM, wait this long before the next step.
const SHUTDOWN_STEP: Duration = Duration::from_secs(2);
/// After the process exits, how long its last output may take to be read before it is declared
/// dead even though its stdout is still open.
const EXIT_DRAIN: Duration = Duration::from_millis(200);
/// Past this many bytes written to an instance and not yet taken by its stdin, the pool sends it
/// no more calls: a server that stops reading must not make the router buffer without bound.
/// A single larger message still goes, alone, once the backlog is empty.
pub const WRITE_BACKLOG_LIMIT: usize = 1 << 20;

/// How to start instances of a server.
#[derive(Debug, Clone)]
pub struct Spec {
    pub server: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<std::path::PathBuf>,
    pub max_message_bytes: usize,
    /// A program with the `supervise` subcommand (the switchyard binary): each instance runs
    /// under it, so its whole process group dies with the router. `None` (the library used
    /// in-process, where no such binary is at hand): the parent-death signal only, which
    /// reaches the server's own process but not what it starts.
    pub supervisor: Option<std::path::PathBuf>,
}

/// Where a call's reply and its progress notifications go.
struct Pending {
    session: SessionId,
    reply: oneshot::Sender<Result<Reply, Death>>,
    /// The client's own progress token (raw JSON) and the session to send progress to.
    progress: Option<(String, Arc<SessionLink>)>,
    /// Poked on every progress notification, so the caller can extend its deadline.
    activity: Option<Arc<Notify>>,
}

/// What switchyard has set up on an instance on behalf of its sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The logging level sent with logging/setLevel (rank, 7 = debug).
    pub level: Option<u8>,
    /// URIs subscribed with resources/subscribe.
    pub uris: std::collections::BTreeSet<String>,
}

/// A response from the server, with the range of its id (to put the client's id back).
pub struct Reply {
    pub line: String,
    pub env: Envelope,
}

/// A call sent upstream: its id there, and where its reply will arrive.
pub struct Sent {
    pub upstream_id: u64,
    pub reply: oneshot::Receiver<Result<Reply, Death>>,
}

/// A running (or starting, or dead) instance of a server.
pub struct Instance {
    number: u64,
    label: String,
    pub pool: String,
    /// Set for affinity pools: the only session this instance serves.
    pub owner: Option<SessionId>,
    /// Lines to the child's stdin. Unbounded so a send never waits past a call's deadline when
    /// the server stops reading; the pool bounds what queues here by watching `backlog`.
    writer: Mutex<Option<mpsc::UnboundedSender<String>>>,
    backlog: Arc<Backlog>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    inflight: AtomicUsize,
    ready: AtomicBool,
    closing: AtomicBool,
    /// Set once any client call got a response (a crash after that is not a start-up failure).
    answered: AtomicBool,
    death: OnceLock<Death>,
    /// Set by the first of stdout EOF or process exit to handle the death.
    gone: AtomicBool,
    dead_tx: watch::Sender<bool>,
    exit_rx: watch::Receiver<Option<String>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// Set when the child's stderr reached EOF (every line is in `stderr_tail`).
    stderr_done: Arc<watch::Sender<bool>>,
    pid: Option<u32>,
    applied: Mutex<Applied>,
    last_used: Mutex<Instant>,
    /// Calls whose client stopped waiting (cancelled, timed out, disconnected) by upstream id:
    /// the session and when. Many servers keep working after a cancel, so such a call may still
    /// make the server ask a client something or log; it stays an owner of what the server sends
    /// until its late response arrives, the instance ends, or the hub's linger passes.
    abandoned: Mutex<HashMap<u64, (SessionId, Instant)>>,
    hub: Arc<Hub>,
}

/// The sessions whose calls a server-initiated message may belong to (the router's own calls,
/// session 0, are left out: they never cause sampling, elicitation or logs for a client).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners {
    /// Sessions with calls still waiting for their response here (sorted, no repeats).
    pub live: Vec<SessionId>,
    /// Sessions with abandoned calls the server may still be working on (sorted, no repeats).
    pub abandoned: Vec<SessionId>,
}

impl Instance {
    /// Starts the child process and its reader, writer and stderr tasks. Not yet initialised.
    /// A start that fails is logged, and the error says what to check.
    pub fn spawn(
        spec: &Spec,
        number: u64,
        pool: &str,
        owner: Option<SessionId>,
        hub: Arc<Hub>,
    ) -> Result<Arc<Instance>, String> {
        let label = format!("{}#{}", spec.server, number);
        let mut child = start_process(spec).map_err(|reason| {
            tracing::error!(instance = %label, "{reason}");
            reason
        })?;
        let pid = child.id();
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (wtx, wrx) = mpsc::unbounded_channel::<String>();
        let (dead_tx, _) = watch::channel(false);
        let (exit_tx, exit_rx) = watch::channel(None);
        let inst = Arc::new(Instance {
            number,
            label: label.clone(),
            pool: pool.to_string(),
            owner,
            writer: Mutex::new(Some(wtx)),
            backlog: Arc::new(Backlog::default()),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            inflight: AtomicUsize::new(0),
            ready: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            answered: AtomicBool::new(false),
            death: OnceLock::new(),
            gone: AtomicBool::new(false),
            dead_tx,
            exit_rx,
            stderr_tail: Arc::new(Mutex::new(VecDeque::new())),
            stderr_done: Arc::new(watch::channel(false).0),
            pid,
            applied: Mutex::new(Applied::default()),
            last_used: Mutex::new(Instant::now()),
            abandoned: Mutex::new(HashMap::new()),
            hub,
        });
        tokio::spawn(write_loop(stdin, wrx, label.clone(), inst.backlog.clone()));
        tokio::spawn(wait_exit(child, exit_tx));
        tokio::spawn(stderr_loop(stderr, label.clone(), inst.stderr_tail.clone(), inst.stderr_done.clone()));
        let reader = inst.clone();
        let limit = spec.max_message_bytes;
        tokio::spawn(async move { reader.read_loop(stdout, limit).await });
        // Stdout normally closes when the process exits, but a helper it started outside its
        // process group may hold it open: the exit is the instance's death all the same.
        let watcher = inst.clone();
        tokio::spawn(async move {
            let mut exit = watcher.exit_rx.clone();
            if exit.wait_for(|s| s.is_some()).await.is_ok() {
                tokio::time::sleep(EXIT_DRAIN).await;
                watcher.on_eof().await;
            }
        });
        tracing::debug!(instance = %label, pid, "spawned");
        Ok(inst)
    }

    pub fn number(&self) -> u64 {
        self.number
    }
    pub fn label(&self) -> &str {
        &self.label
    }
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.is_dead()
    }
    pub fn mark_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }
    pub fn is_dead(&self) -> bool {
        self.death.get().is_some() || self.closing.load(Ordering::Acquire)
    }
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }
    pub fn death(&self) -> Option<&Death> {
        self.death.get()
    }
    pub fn has_answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Acquire)
    }
    pub fn begin_call(&self) {
        self.inflight.fetch_add(1, Ordering::AcqRel);
        *self.last_used.lock().expect("lock") = Instant::now();
    }
    pub fn end_call(&self) {
        self.inflight.fetch_sub(1, Ordering::AcqRel);
        *self.last_used.lock().expect("lock") = Instant::now();
    }
    pub fn applied(&self) -> Applied {
        self.applied.lock().expect("lock").clone()
    }
    pub fn update_applied(&self, f: impl FnOnce(&mut Applied)) {
        f(&mut self.applied.lock().expect("lock"));
    }

    /// Counts as activity (a health ping answered).
    pub fn touch(&self) {
        *self.last_used.lock().expect("lock") = Instant::now();
    }
    pub fn idle_for(&self) -> Duration {
        self.last_used.lock().expect("lock").elapsed()
    }
    /// Sessions with calls in flight here (for routing server-to-client requests).
    pub fn sessions_in_flight(&self) -> Vec<SessionId> {
        let pending = self.pending.lock().expect("lock");
        let mut s: Vec<SessionId> = pending.values().map(|p| p.session).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// Who may have caused what the server sends now: live calls, and abandoned calls younger
    /// than `linger` (older ones are forgotten: a server that honours cancellation never answers
    /// them, and they must not keep the instance ambiguous for ever).
    pub fn owners(&self, linger: Duration) -> Owners {
        let mut live: Vec<SessionId> =
            self.pending.lock().expect("lock").values().map(|p| p.session).filter(|s| *s != 0).collect();
        live.sort_unstable();
        live.dedup();
        let mut abandoned = self.abandoned.lock().expect("lock");
        abandoned.retain(|_, (_, at)| at.elapsed() < linger);
        let mut gone: Vec<SessionId> = abandoned.values().map(|(s, _)| *s).collect();
        gone.sort_unstable();
        gone.dedup();
        Owners { live, abandoned: gone }
    }
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr_tail.lock().expect("lock").iter().cloned().collect()
    }

    /// Resolves when the instance has died (at once if it already has).
    pub async fn dead(&self) {
        let mut rx = self.dead_tx.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// Writes one line to the child's stdin. Err when its stdin is closed.
    pub async fn write(&self, line: String) -> Result<(), ()> {
        let tx = self.writer.lock().expect("lock").clone();
        let Some(tx) = tx else { return Err(()) };
        let bytes = line.len() + 1;
        self.backlog.bytes.fetch_add(bytes, Ordering::AcqRel);
        tx.send(line).map_err(|_| {
            self.backlog.bytes.fetch_sub(bytes, Ordering::AcqRel);
        })
    }

    /// Bytes written to this instance that its stdin has not taken yet.
    pub fn backlog(&self) -> usize {
        self.backlog.bytes.load(Ordering::Acquire)
    }

    /// Whether the pool may send it another call (its backlog is under [`WRITE_BACKLOG_LIMIT`]).
    pub fn is_writable(&self) -> bool {
        self.backlog() < WRITE_BACKLOG_LIMIT
    }

    /// Runs `hook` whenever the backlog falls back under the limit (set once, by the pool).
    pub fn on_drain(&self, hook: Box<dyn Fn() + Send + Sync>) {
        let _ = self.backlog.on_drain.set(hook);
    }

    /// The death to report when a write fails: the real one if known, else "stdin closed".
    fn death_or_closed(&self) -> Death {
        self.death.get().cloned().unwrap_or_else(|| Death {
            instance: self.label.clone(),
            status: "its stdin is closed".into(),
            stderr: self.stderr_tail(),
        })
    }

    /// Sends a client request: rewrites its id (and progress token) to a fresh upstream id.
    pub async fn send(
        &self,
        line: &str,
        env: &Envelope,
        session: SessionId,
        progress: Option<(Range<usize>, Arc<SessionLink>)>,
        activity: Option<Arc<Notify>>,
    ) -> Result<Sent, Death> {
        self.submit(session, activity, |id_text| {
            let mut route = None;
            let mut edits = vec![(env.id.clone().expect("requests have ids"), id_text)];
            if let Some((span, out)) = progress {
                // The upstream id doubles as the progress token: unique on this instance.
                route = Some((line[span.clone()].to_string(), out));
                edits.push((span, id_text));
            }
            (codec::splice_many(line, edits), route)
        })
        .await
    }

    /// Sends a request of the router's own (initialize, ping, tools/list, ...).
    pub async fn send_own(&self, method: &str, params: &str) -> Result<Sent, Death> {
        self.submit(0, None, |id_text| (codec::request(id_text, method, params), None)).await
    }

    /// Gives a request a fresh upstream id, registers where its reply goes, and writes it.
    /// `build` makes the line (and the progress route) from the id's text.
    async fn submit(
        &self,
        session: SessionId,
        activity: Option<Arc<Notify>>,
        build: impl FnOnce(&str) -> (String, Option<(String, Arc<SessionLink>)>),
    ) -> Result<Sent, Death> {
        if let Some(d) = self.death.get() {
            return Err(d.clone());
        }
        let upstream_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (line, progress) = build(&upstream_id.to_string());
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("lock").insert(upstream_id, Pending { session, reply: tx, progress, activity });
        if self.write(line).await.is_err() {
            self.pending.lock().expect("lock").remove(&upstream_id);
            return Err(self.death_or_closed());
        }
        Ok(Sent { upstream_id, reply: rx })
    }

    /// Abandons a call: its reply, if it ever comes, is dropped; the server is told to stop.
    pub async fn cancel(&self, upstream_id: u64, reason: &str) {
        let was = self.pending.lock().expect("lock").remove(&upstream_id);
        let was_pending = was.is_some();
        if let Some(p) = was.filter(|p| p.session != 0) {
            let mut abandoned = self.abandoned.lock().expect("lock");
            // Pruned here too, so a server that never answers cancelled calls cannot grow it.
            let linger = self.hub.linger();
            abandoned.retain(|_, (_, at)| at.elapsed() < linger);
            abandoned.insert(upstream_id, (p.session, Instant::now()));
        }
        if was_pending && !self.is_dead() {
            let params = format!(r#"{{"requestId":{upstream_id},"reason":{}}}"#, codec::json_string(reason));
            let _ = self.write(codec::notification("notifications/cancelled", &params)).await;
        }
    }

    /// Forgets a call whose reply arrived or that will never be answered, without telling the server.
    pub fn forget(&self, upstream_id: u64) {
        self.pending.lock().expect("lock").remove(&upstream_id);
    }

    async fn read_loop(self: Arc<Self>, stdout: tokio::process::ChildStdout, limit: usize) {
        let mut reader = LineReader::new(BufReader::with_capacity(64 * 1024, stdout), limit);
        loop {
            match reader.next().await {
                Ok(Some(Frame::Line(line))) => self.on_line(line),
                Ok(Some(Frame::TooLong { bytes })) => {
                    let (head, tail) = reader.skipped_ends();
                    self.on_too_long(bytes, limit, codec::skipped_response_id(head, tail));
                }
                Ok(Some(Frame::NotUtf8)) => {
                    tracing::warn!(instance = %self.label, "skipped a stdout line that is not UTF-8")
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(instance = %self.label, "reading stdout failed: {e}");
                    break;
                }
            }
        }
        self.on_eof().await;
    }

    fn on_line(self: &Arc<Self>, line: String) {
        if line.trim().is_empty() {
            return;
        }
        if codec::is_batch(&line) {
            // A batch (2025-03-26 allows them both ways): its messages are routed one by one.
            match codec::split_batch(&line) {
                Ok(items) => items.into_iter().for_each(|m| self.on_message(m.to_string())),
                Err(e) => {
                    tracing::warn!(instance = %self.label, "skipped a malformed batch on stdout: {}", e.message())
                }
            }
            return;
        }
        self.on_message(line);
    }

    fn on_message(self: &Arc<Self>, line: String) {
        let env = match codec::parse(&line) {
            Ok(env) => env,
            Err(e) => {
                let preview: String = line.chars().take(120).collect();
                tracing::warn!(instance = %self.label, "skipped a non-JSON-RPC line on stdout ({}): {preview}", e.message());
                return;
            }
        };
        match env.kind {
            Kind::Response => self.on_response(line, env),
            Kind::Request => self.hub.server_request(self, line, env),
            Kind::Notification => {
                if env.method.as_deref() == Some("notifications/progress") {
                    self.on_progress(line, env);
                } else {
                    self.hub.server_notification(self, line, env);
                }
            }
        }
    }

    /// A message over the size limit was skipped. When it was the reply to a call, that call
    /// fails now with an error saying why, instead of waiting for its timeout.
    fn on_too_long(&self, bytes: usize, limit: usize, id: Option<u64>) {
        let entry = id.and_then(|id| self.pending.lock().expect("lock").remove(&id).map(|p| (id, p)));
        let Some((id, p)) = entry else {
            tracing::warn!(
                instance = %self.label,
                "skipped a {bytes}-byte message from the server: over limits.max_message_bytes ({limit}); it answered no call switchyard could identify"
            );
            return;
        };
        let why = format!(
            "server instance {} answered with a {bytes}-byte message, over limits.max_message_bytes ({limit} bytes); switchyard dropped it. Raise the limit if answers this large are expected",
            self.label
        );
        tracing::warn!(instance = %self.label, "{why}");
        self.answer_with_error(id, p, codec::response_error(&id.to_string(), codec::INTERNAL_ERROR, &why, None));
    }

    /// Resolves a call with an error response made by switchyard (the server's own reply to it
    /// could not be routed).
    fn answer_with_error(&self, id: u64, p: Pending, line: String) {
        match codec::parse(&line) {
            Ok(env) => {
                let _ = p.reply.send(Ok(Reply { line, env }));
            }
            Err(e) => tracing::warn!(instance = %self.label, "could not answer call {id}: {}", e.message()),
        }
    }

    /// An error response with id null: the server could not tell which request it answers. With
    /// one call in flight it can only be that one; otherwise it is logged and dropped.
    fn on_null_id_error(&self, line: &str) {
        let error = serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| v.get("error").cloned());
        let mut pending = self.pending.lock().expect("lock");
        let only = if pending.len() == 1 { pending.keys().next().copied() } else { None };
        let Some((id, p)) = only.and_then(|id| pending.remove(&id).map(|p| (id, p))) else {
            let calls = pending.len();
            drop(pending);
            tracing::warn!(
                instance = %self.label,
                "dropped an error response with id null from the server ({calls} calls in flight, so it fits none of them): {line}"
            );
            return;
        };
        drop(pending);
        let error = error.unwrap_or_else(|| serde_json::json!({"code": codec::INTERNAL_ERROR, "message": "error"}));
        tracing::warn!(instance = %self.label, "the server answered with id null; taken as the reply to its only call in flight: {line}");
        self.answer_with_error(id, p, format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#));
    }

    fn on_response(&self, line: String, env: Envelope) {
        if env.id.is_none() {
            return self.on_null_id_error(&line);
        }
        let id = env.id.as_ref().and_then(|r| line[r.clone()].parse::<u64>().ok());
        let entry = id.and_then(|id| self.pending.lock().expect("lock").remove(&id));
        match entry {
            Some(p) => {
                if p.session != 0 {
                    self.answered.store(true, Ordering::Relaxed);
                }
                let _ = p.reply.send(Ok(Reply { line, env }));
            }
            None => {
                // A late answer to an abandoned call: the server has stopped working on it.
                if let Some(id) = id {
                    self.abandoned.lock().expect("lock").remove(&id);
                }
                tracing::debug!(
                    instance = %self.label,
                    "dropped a response to an unknown or abandoned id {:?}",
                    env.id.as_ref().map(|r| &line[r.clone()])
                )
            }
        }
    }

    fn on_progress(&self, line: String, env: Envelope) {
        let Some(params) = env.params.as_ref() else { return };
        let fields = codec::param_fields(&line, params);
        let Some(span) = fields.progress_token else { return };
        let Ok(token) = line[span.clone()].parse::<u64>() else {
            tracing::debug!(instance = %self.label, "dropped progress for a token switchyard did not issue");
            return;
        };
        let pending = self.pending.lock().expect("lock");
        let Some(p) = pending.get(&token) else {
            tracing::debug!(instance = %self.label, "dropped progress of a finished call");
            return;
        };
        if let Some(a) = &p.activity {
            a.notify_one();
        }
        if let Some((client_token, link)) = &p.progress {
            link.send(codec::splice(&line, span, client_token));
        }
    }

    /// The instance is gone: stdout closed, or the process exited and `EXIT_DRAIN` passed.
    /// Runs once; whichever of the two comes first does the work.
    async fn on_eof(&self) {
        if self.gone.swap(true, Ordering::AcqRel) {
            return;
        }
        // stdout closed: the process is exiting (or closed stdout, which is as bad).
        let status = match self.exit_status_within(Duration::from_millis(500)).await {
            Some(s) => s,
            None => {
                self.signal(rustix::process::Signal::KILL);
                match self.exit_status_within(Duration::from_secs(1)).await {
                    Some(s) => format!("closed stdout, then {s}"),
                    None => "closed stdout".to_string(),
                }
            }
        };
        // The last lines the process wrote are what the error shows: wait for stderr to close
        // (at once, usually), but not long if something else holds the pipe open.
        let mut done = self.stderr_done.subscribe();
        let _ = tokio::time::timeout(Duration::from_millis(20), done.wait_for(|d| *d)).await;
        // What the leader left behind in its group (e.g. a server under a killed `npx` or `sh`)
        // would be an orphan: it goes too.
        self.signal(rustix::process::Signal::KILL);
        let death = Death { instance: self.label.clone(), status, stderr: self.stderr_tail() };
        if !self.closing.load(Ordering::Acquire) {
            tracing::warn!(instance = %self.label, status = %death.status, "instance ended");
        }
        let _ = self.death.set(death.clone());
        self.writer.lock().expect("lock").take();
        let pending: Vec<Pending> = self.pending.lock().expect("lock").drain().map(|(_, p)| p).collect();
        for p in pending {
            let _ = p.reply.send(Err(death.clone()));
        }
        self.dead_tx.send_replace(true);
    }

    /// Signals the instance's process group (the one it was started in).
    fn signal(&self, sig: rustix::process::Signal) {
        if let Some(pgid) = self.pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
            let _ = rustix::process::kill_process_group(pgid, sig);
        }
    }

    /// Stops the instance: close stdin, wait, SIGTERM, wait, SIGKILL. Never leaves an orphan.
    pub async fn shutdown(&self) {
        self.closing.store(true, Ordering::Release);
        self.writer.lock().expect("lock").take();
        if !self.exited_within(SHUTDOWN_STEP).await {
            tracing::info!(instance = %self.label, "did not exit after stdin closed; sending SIGTERM");
            self.signal(rustix::process::Signal::TERM);
            if !self.exited_within(SHUTDOWN_STEP).await {
                tracing::warn!(instance = %self.label, "did not exit after SIGTERM; sending SIGKILL");
                self.signal(rustix::process::Signal::KILL);
                self.exited_within(SHUTDOWN_STEP).await;
            }
        }
        // Whatever the leader left behind in its group goes too.
        self.signal(rustix::process::Signal::KILL);
        self.dead().await;
    }

    async fn exited_within(&self, limit: Duration) -> bool {
        self.exit_status_within(limit).await.is_some()
    }

    async fn exit_status_within(&self, limit: Duration) -> Option<String> {
        let mut exit = self.exit_rx.clone();
        match tokio::time::timeout(limit, exit.wait_for(|s| s.is_some())).await {
            Ok(Ok(s)) => s.clone(),
            _ => None,
        }
    }

    /// Kills the instance at once (a hung instance being recycled).
    pub async fn kill(&self) {
        self.closing.store(true, Ordering::Release);
        self.signal(rustix::process::Signal::KILL);
        self.dead().await;
    }
}

/// Spawns the server process in a process group of its own (so signals reach what it starts,
/// such as `npx` -> `node`), with piped stdio, under the supervisor when there is one.
fn start_process(spec: &Spec) -> Result<Child, String> {
    let router = rustix::process::getpid();
    let mut cmd = match &spec.supervisor {
        Some(supervisor) => {
            // The supervisor would report a missing program only as its exit status and a
            // stderr line; found here, it is the same immediate error as without it.
            executable(&spec.command, spec.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()))
                .map_err(|e| cannot_start(spec, &e))?;
            let mut cmd = Command::new(supervisor);
            cmd.arg("supervise").arg(router.as_raw_nonzero().to_string()).arg("--").arg(&spec.command);
            cmd
        }
        None => Command::new(&spec.command),
    };
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    if let Some(cwd) = &spec.cwd {
        // Checked here because a missing directory fails the spawn with the same ENOENT as a
        // missing command, and would be reported as one.
        if !cwd.is_dir() {
            return Err(format!(
                "cannot start `{}`: its working directory {} ([server] cwd) does not exist or is not a directory",
                spec.command,
                cwd.display()
            ));
        }
        cmd.current_dir(cwd);
    }
    if spec.supervisor.is_none() {
        // If the router dies without a chance to clean up (SIGKILL), the kernel kills the child.
        // PR_SET_PDEATHSIG fires when the *thread* that forked exits: spawns run on the runtime
        // thread, which lives as long as the router. (The supervisor watches the router
        // process through a pidfd instead, and must not get this signal: it would die before
        // it could kill the group.)
        // SAFETY: prctl and getppid are async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                use rustix::process::{Signal, getppid, set_parent_process_death_signal};
                set_parent_process_death_signal(Some(Signal::KILL))?;
                // The router may have died before the line above: then nobody would kill us.
                if getppid() != Some(router) {
                    return Err(std::io::Error::other("the router exited while starting the server"));
                }
                Ok(())
            });
        }
    }
    cmd.spawn().map_err(|e| cannot_start(spec, &e))
}

fn cannot_start(spec: &Spec, e: &std::io::Error) -> String {
    format!(
        "cannot start `{}`: {e}. Check the command after `--` (or [server] command) and that it is on PATH",
        spec.command
    )
}

/// Whether `command` names an executable file, directly or through PATH (the server's own
/// PATH when its env sets one), as exec would find it.
fn executable(command: &str, path: Option<&str>) -> std::io::Result<()> {
    use rustix::fs::{Access, access};
    if command.contains('/') {
        return access(command, Access::EXEC_OK).map_err(Into::into);
    }
    let path = path.map(str::to_string).or_else(|| std::env::var("PATH").ok()).unwrap_or_default();
    let mut last: std::io::Error = rustix::io::Errno::NOENT.into();
    for dir in path.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        match access(format!("{dir}/{command}").as_str(), Access::EXEC_OK) {
            Ok(()) => return Ok(()),
            // A file that is there but not executable is the more useful error to show.
            Err(e) if e != rustix::io::Errno::NOENT && e != rustix::io::Errno::NOTDIR => last = e.into(),
            Err(_) => {}
        }
    }
    Err(last)
}

/// The bytes queued for a child's stdin, shared by `Instance::write` and the writer task.
#[derive(Default)]
struct Backlog {
    bytes: AtomicUsize,
    /// Wakes the pool when the backlog falls under the limit again.
    on_drain: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Backlog {
    /// `bytes` left the queue (written, or dropped with the instance).
    fn taken(&self, bytes: usize) {
        let before = self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        if before >= WRITE_BACKLOG_LIMIT
            && before - bytes < WRITE_BACKLOG_LIMIT
            && let Some(hook) = self.on_drain.get()
        {
            hook();
        }
    }
}

async fn write_loop(stdin: ChildStdin, mut rx: mpsc::UnboundedReceiver<String>, label: String, backlog: Arc<Backlog>) {
    let mut w = BufWriter::with_capacity(64 * 1024, stdin);
    while let Some(line) = rx.recv().await {
        let mut batch = Some(line);
        // Write everything already queued, then flush once: pipelined calls share a syscall.
        while let Some(l) = batch {
            if w.write_all(l.as_bytes()).await.is_err() || w.write_all(b"\n").await.is_err() {
                tracing::debug!(instance = %label, "stdin write failed; the process is gone");
                return;
            }
            backlog.taken(l.len() + 1);
            batch = rx.try_recv().ok();
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    // Sender dropped: the instance is shutting down. Dropping stdin closes it.
    let _ = w.shutdown().await;
}

async fn wait_exit(mut child: Child, tx: watch::Sender<Option<String>>) {
    let status = match child.wait().await {
        Ok(s) => describe_status(s),
        Err(e) => format!("wait failed: {e}"),
    };
    tx.send_replace(Some(status));
}

fn describe_status(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => s.to_string(),
    }
}

async fn stderr_loop(
    stderr: tokio::process::ChildStderr,
    label: String,
    tail: Arc<Mutex<VecDeque<String>>>,
    done: Arc<watch::Sender<bool>>,
) {
    let mut reader = LineReader::new(BufReader::new(stderr), 16 * 1024);
    while let Ok(Some(frame)) = reader.next().await {
        let line = match frame {
            Frame::Line(l) => l,
            Frame::TooLong { bytes } => format!("<{bytes}-byte line skipped>"),
            Frame::NotUtf8 => "<line that is not UTF-8>".to_string(),
        };
        crate::logging::forward(&label, &line);
        let mut t = tail.lock().expect("lock");
        if t.len() == STDERR_TAIL {
            t.pop_front();
        }
        t.push_back(line);
    }
    done.send_replace(true);
}

#[cfg(test)]
mod tests {
    use super::executable;

    #[test]
    fn programs_are_found_like_exec_finds_them() {
        assert!(executable("sh", None).is_ok());
        assert!(executable("/bin/sh", None).is_ok());
        let missing = executable("no-such-server-xyz", Some("/usr/bin:/bin")).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(executable("/nonexistent/server", None).unwrap_err().kind(), std::io::ErrorKind::NotFound);
        // The server's own PATH decides, not switchyard's.
        assert!(executable("sh", Some("/nonexistent")).is_err());
        // There but not executable.
        let file = tempfile::NamedTempFile::new().unwrap();
        let e = executable(file.path().to_str().unwrap(), None).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    }
}
