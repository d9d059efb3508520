//! One upstream server instance: its child process, id rewriting, the in-flight table, its replies.

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
use crate::server::{Hub, SessionLink};
use crate::session::SessionId;

/// How many stderr lines of an instance are kept for error messages.
const STDERR_TAIL: usize = 20;
/// Shutdown: after closing stdin, and after SIGTERM, wait this long before the next step.
const SHUTDOWN_STEP: Duration = Duration::from_secs(2);
/// After the process exits, how long its last output may take to be read before it is declared
/// dead even though its stdout is still open.
const EXIT_DRAIN: Duration = Duration::from_millis(200);

/// How to start instances of a server.
#[derive(Debug, Clone)]
pub struct Spec {
    pub server: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<std::path::PathBuf>,
    pub max_message_bytes: usize,
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
    /// the server stops reading; what queues is bounded by the calls in flight and their timeouts.
    writer: Mutex<Option<mpsc::UnboundedSender<String>>>,
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
    hub: Arc<Hub>,
}

impl Instance {
    /// Starts the child process and its reader, writer and stderr tasks. Not yet initialised.
    pub fn spawn(
        spec: &Spec,
        number: u64,
        pool: &str,
        owner: Option<SessionId>,
        hub: Arc<Hub>,
    ) -> std::io::Result<Arc<Instance>> {
        let mut cmd = Command::new(&spec.command);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group, so shutdown reaches grandchildren (npx -> node).
            .process_group(0);
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        // If the router dies without a chance to clean up (SIGKILL), the kernel kills the child.
        // SAFETY: prctl and getppid are async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() == 1 {
                    return Err(std::io::Error::other("parent already gone"));
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let pid = child.id();
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let label = format!("{}#{}", spec.server, number);
        let (wtx, wrx) = mpsc::unbounded_channel::<String>();
        let (dead_tx, _) = watch::channel(false);
        let (exit_tx, exit_rx) = watch::channel(None);
        let inst = Arc::new(Instance {
            number,
            label: label.clone(),
            pool: pool.to_string(),
            owner,
            writer: Mutex::new(Some(wtx)),
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
            hub,
        });
        tokio::spawn(write_loop(stdin, wrx, label.clone()));
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
        match tx {
            Some(tx) => tx.send(line).map_err(|_| ()),
            None => Err(()),
        }
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
        let was_pending = self.pending.lock().expect("lock").remove(&upstream_id).is_some();
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
            None => tracing::debug!(
                instance = %self.label,
                "dropped a response to an unknown or abandoned id {:?}",
                env.id.as_ref().map(|r| &line[r.clone()])
            ),
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
                self.signal(libc::SIGKILL);
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
        self.signal(libc::SIGKILL);
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

    fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid {
            // SAFETY: kill(2) with a negative pid signals the process group we created.
            unsafe {
                libc::kill(-(pid as i32), sig);
            }
        }
    }

    /// Stops the instance: close stdin, wait, SIGTERM, wait, SIGKILL. Never leaves an orphan.
    pub async fn shutdown(&self) {
        self.closing.store(true, Ordering::Release);
        self.writer.lock().expect("lock").take();
        if !self.exited_within(SHUTDOWN_STEP).await {
            tracing::info!(instance = %self.label, "did not exit after stdin closed; sending SIGTERM");
            self.signal(libc::SIGTERM);
            if !self.exited_within(SHUTDOWN_STEP).await {
                tracing::warn!(instance = %self.label, "did not exit after SIGTERM; sending SIGKILL");
                self.signal(libc::SIGKILL);
                self.exited_within(SHUTDOWN_STEP).await;
            }
        }
        // Whatever the leader left behind in its group goes too.
        self.signal(libc::SIGKILL);
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
        self.signal(libc::SIGKILL);
        self.dead().await;
    }
}

async fn write_loop(stdin: ChildStdin, mut rx: mpsc::UnboundedReceiver<String>, label: String) {
    let mut w = BufWriter::with_capacity(64 * 1024, stdin);
    while let Some(line) = rx.recv().await {
        let mut batch = Some(line);
        // Write everything already queued, then flush once: pipelined calls share a syscall.
        while let Some(l) = batch {
            if w.write_all(l.as_bytes()).await.is_err() || w.write_all(b"\n").await.is_err() {
                tracing::debug!(instance = %label, "stdin write failed; the process is gone");
                return;
            }
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
        eprintln!("[{label}] {line}");
        let mut t = tail.lock().expect("lock");
        if t.len() == STDERR_TAIL {
            t.pop_front();
        }
        t.push_back(line);
    }
    done.send_replace(true);
}
