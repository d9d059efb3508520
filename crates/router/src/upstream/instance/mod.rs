//! One upstream server instance, whatever carries it: id rewriting, the in-flight table, its
//! replies, and one answer for every call when a request or the whole link is lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;

mod overlap;
mod strays;
mod table;

pub use strays::LOG_TRAIL;

use super::transport::{Closed, Connector, Ended, Failure, Inbound, Lost, Outbound, Transport};
use super::{Events, ProgressSink};
use crate::placement::ScopeKey;
use overlap::{Answered, Overlap};
use switchyard_core::call::Call;
use switchyard_core::codec::{self, Envelope, Kind};
use switchyard_core::error::{Death, Unanswered};
use switchyard_core::ids::SessionId;

/// Where a call's reply and its progress notifications go.
struct Pending {
    session: SessionId,
    reply: oneshot::Sender<Result<Reply, Unanswered>>,
    /// The client's own progress token (raw JSON) and where to send progress.
    progress: Option<(String, Arc<dyn ProgressSink>)>,
    /// Poked on every progress notification, so the caller can extend its deadline.
    activity: Option<Arc<Notify>>,
    /// When it was sent, whether another client call was in flight on the instance then, and
    /// what it is (see [`overlap::kind`]; 0 for the router's own requests).
    sent: Instant,
    behind: bool,
    kind: u64,
    /// For a `subscriptions/listen`: the client's own id of it (raw JSON) and where the
    /// notifications of its stream go (each names it in `_meta`, mapped back to this id).
    stream: Option<(String, Arc<dyn ProgressSink>)>,
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

/// switchyard's trace context for a request it forwards (see [`Instance::send_traced`]).
pub struct Trace {
    /// Splices that put `traceparent` (and a `tracestate`) into the request's `params._meta`.
    pub edits: Vec<(std::ops::Range<usize>, String)>,
    pub traceparent: String,
}

/// A call sent upstream: its id there, and where its reply will arrive.
pub struct Sent {
    pub upstream_id: u64,
    pub reply: oneshot::Receiver<Result<Reply, Unanswered>>,
}

/// A running (or starting, or dead) instance of a server.
pub struct Instance {
    number: u64,
    label: String,
    /// The pool it serves; changes once at most, when an instance started for a 2026-07-28
    /// probe turns out to be of the initialize era and is kept for that era's pool.
    pool: Mutex<Arc<str>>,
    /// The only session this instance serves: set for a session's own instances (a pool's
    /// `affinity = "session"`, a call placed `session`). What it sends on its own goes to that
    /// session alone; the instances of other scopes are attributed by their calls in flight.
    pub owner: Option<SessionId>,
    /// Which of its pool's scopes it serves (for status, and so that only shared instances
    /// hold what every session shares, such as resource subscriptions).
    pub scope: ScopeKey,
    /// What carries messages; set once connected, taken when it ends.
    transport: Mutex<Option<Arc<dyn Transport>>>,
    /// From the transport, kept for after it ended.
    pid: OnceLock<Option<u32>>,
    endpoint: OnceLock<String>,
    pending: Mutex<table::Table>,
    next_id: AtomicU64,
    inflight: AtomicUsize,
    ready: AtomicBool,
    closing: AtomicBool,
    /// Client calls that got a response.
    answered: AtomicU64,
    /// Client calls still waiting when it ended (did it die in a call, or idle?).
    calls_at_end: AtomicUsize,
    /// How it answered calls that overlapped (does it run calls one at a time?).
    overlap: Mutex<Overlap>,
    death: OnceLock<Death>,
    dead_tx: watch::Sender<bool>,
    applied: Mutex<Applied>,
    last_used: Mutex<Instant>,
    /// When it was connected (for status: its uptime).
    started: Instant,
    /// Calls whose client stopped waiting (cancelled, timed out, disconnected) by upstream id:
    /// the session and when. Many servers keep working after a cancel, so such a call may still
    /// make the server ask a client something or log; it stays an owner of what the server sends
    /// until its late response arrives, the instance ends, or the hub's linger passes.
    abandoned: Mutex<HashMap<u64, (SessionId, Instant)>>,
    /// What it sent that names no call (see [`strays`]).
    strays: strays::Strays,
    events: Arc<dyn Events>,
    /// Why switchyard ended it, when it did (the status its calls are answered with).
    kill_reason: OnceLock<String>,
    /// Itself, for handing server-initiated messages to `events` (which keeps the instance).
    me: std::sync::Weak<Instance>,
}

/// The sessions whose calls a server-initiated message may belong to (the router's own calls,
/// session 0, are left out: they never cause sampling, elicitation or logs for a client).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owners {
    /// Sessions with calls still waiting for their response here (sorted, no repeats).
    pub live: Vec<SessionId>,
    /// Sessions with abandoned calls the server may still be working on (sorted, no repeats).
    pub abandoned: Vec<SessionId>,
    /// Sessions whose calls here ended within [`LOG_TRAIL`] (a log may trail its call).
    pub lately: Vec<SessionId>,
}

impl Instance {
    /// Connects a new instance through `connector`. Not yet initialised. A connect that fails
    /// says why and what to check.
    pub async fn start(
        connector: &dyn Connector,
        server: &str,
        number: u64,
        pool: &str,
        scope: ScopeKey,
        events: Arc<dyn Events>,
    ) -> Result<Arc<Instance>, Failure> {
        let label = format!("{server}#{number}");
        let owner = match scope {
            ScopeKey::Session(s) => Some(s),
            _ => None,
        };
        let inst = Arc::new_cyclic(|me| Instance {
            number,
            label: label.clone(),
            pool: Mutex::new(Arc::from(pool)),
            owner,
            scope,
            transport: Mutex::new(None),
            pid: OnceLock::new(),
            endpoint: OnceLock::new(),
            pending: Mutex::new(table::Table::default()),
            next_id: AtomicU64::new(1),
            inflight: AtomicUsize::new(0),
            ready: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            answered: AtomicU64::new(0),
            calls_at_end: AtomicUsize::new(0),
            overlap: Mutex::new(Overlap::default()),
            death: OnceLock::new(),
            dead_tx: watch::channel(false).0,
            applied: Mutex::new(Applied::default()),
            last_used: Mutex::new(Instant::now()),
            started: Instant::now(),
            abandoned: Mutex::new(HashMap::new()),
            strays: Default::default(),
            events,
            kill_reason: OnceLock::new(),
            me: me.clone(),
        });
        let transport = connector.connect(&label, inst.clone()).await?;
        let _ = inst.pid.set(transport.pid());
        let _ = inst.endpoint.set(transport.endpoint());
        // A transport that ended during the connect has reported it already: keep none then.
        if inst.death.get().is_none() {
            *inst.transport.lock().expect("lock") = Some(transport);
        }
        Ok(inst)
    }

    pub fn number(&self) -> u64 {
        self.number
    }
    /// The pool it serves.
    pub fn pool(&self) -> Arc<str> {
        self.pool.lock().expect("lock").clone()
    }

    /// Moves it to another pool (see the `pool` field).
    pub fn move_to_pool(&self, pool: &str) {
        *self.pool.lock().expect("lock") = Arc::from(pool);
    }

    pub fn label(&self) -> &str {
        &self.label
    }
    pub fn pid(&self) -> Option<u32> {
        self.pid.get().copied().flatten()
    }
    /// Where it lives: `pid 4242`, or a URL.
    pub fn endpoint(&self) -> &str {
        self.endpoint.get().map(String::as_str).unwrap_or("not connected")
    }
    /// How long since it was connected.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }
    /// How long the link has carried nothing for request `upstream` (None: not known, or a
    /// transport that does not tell).
    pub fn silent_for(&self, upstream: u64) -> Option<Duration> {
        self.transport()?.silent_for(upstream)
    }
    fn transport(&self) -> Option<Arc<dyn Transport>> {
        self.transport.lock().expect("lock").clone()
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
    /// How many client calls it answered.
    pub fn answered_calls(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
    /// How many client calls were still waiting for their answer when it ended (0 while it lives).
    pub fn calls_at_end(&self) -> usize {
        self.calls_at_end.load(Ordering::Acquire)
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

    /// Whether calls of clients ended here within [`LOG_TRAIL`] (what it says now may be about them).
    pub fn ended_calls_lately(&self) -> bool {
        !self.strays.lately().is_empty()
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
        Owners { live, abandoned: gone, lately: self.strays.lately() }
    }
    /// The last diagnostic lines (a child's stderr), oldest first.
    pub fn stderr_tail(&self) -> Vec<String> {
        match (self.death.get(), self.transport()) {
            (Some(d), _) => d.stderr.clone(),
            (None, Some(t)) => t.stderr_tail(),
            (None, None) => Vec::new(),
        }
    }

    /// Resolves when the instance has died (at once if it already has).
    pub async fn dead(&self) {
        let mut rx = self.dead_tx.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// Sends one message that expects no reply (a notification, or the answer to a server's request).
    pub fn write(&self, line: String) -> Result<(), Closed> {
        self.transport().ok_or(Closed)?.send(Outbound { line, request: None, quiet: false, traceparent: None })
    }

    /// Bytes sent to this instance that the server has not taken yet.
    pub fn backlog(&self) -> usize {
        self.transport().map_or(0, |t| t.backlog())
    }

    /// Whether the pool may send it another call (its backlog is under [`super::WRITE_BACKLOG_LIMIT`]).
    pub fn is_writable(&self) -> bool {
        self.backlog() < super::WRITE_BACKLOG_LIMIT
    }

    /// Runs `hook` whenever the backlog falls back under the limit (set once, by the pool).
    pub fn on_drain(&self, hook: Box<dyn Fn() + Send + Sync>) {
        if let Some(t) = self.transport() {
            t.on_drain(hook);
        }
    }

    /// Why a send failed: the real end if known, else "closed".
    fn death_or_closed(&self) -> Unanswered {
        Unanswered::Died(self.death.get().cloned().unwrap_or_else(|| Death {
            instance: self.label.clone(),
            status: "its link is closed".into(),
            stderr: self.stderr_tail(),
            local: self.pid().is_some(),
            quiet_for: Duration::ZERO,
        }))
    }

    /// Sends a client request: rewrites its id (and progress token) to a fresh upstream id. The
    /// notifications of its own stream (a `subscriptions/listen`'s) go to `stream`, under the
    /// client's id of the request.
    pub fn send(
        &self,
        call: &Call,
        session: SessionId,
        progress: Option<Arc<dyn ProgressSink>>,
        activity: Option<Arc<Notify>>,
        stream: Option<Arc<dyn ProgressSink>>,
    ) -> Result<Sent, Unanswered> {
        self.send_traced(call, session, progress, activity, stream, None)
    }

    /// [`Instance::send`] with switchyard's trace context for the server: `trace` holds the
    /// edits that put it into the request's `_meta` (spliced with the id's) and the
    /// `traceparent` for a remote server's HTTP header.
    pub fn send_traced(
        &self,
        call: &Call,
        session: SessionId,
        progress: Option<Arc<dyn ProgressSink>>,
        activity: Option<Arc<Notify>>,
        stream: Option<Arc<dyn ProgressSink>>,
        trace: Option<Trace>,
    ) -> Result<Sent, Unanswered> {
        let line = call.line();
        let stream = stream.map(|s| (call.id().to_string(), s));
        let (edits, traceparent) = trace.map(|t| (t.edits, Some(t.traceparent))).unwrap_or_default();
        self.submit(session, activity, stream, false, Some((call, traceparent)), |id_text| {
            let progress = call.fields().progress_token.clone().zip(progress);
            // Most requests have only their id rewritten.
            if progress.is_none() && edits.is_empty() {
                return (codec::splice(line, call.id_range(), id_text), None);
            }
            let mut route = None;
            let mut all = vec![(call.id_range(), id_text)];
            if let Some((span, out)) = progress {
                // The upstream id doubles as the progress token: unique on this instance.
                route = Some((line[span.clone()].to_string(), out));
                all.push((span, id_text));
            }
            all.extend(edits.iter().map(|(r, with)| (r.clone(), with.as_str())));
            (codec::splice_many(line, all), route)
        })
    }

    /// Sends a request of the router's own (initialize, ping, tools/list, ...); `quiet`: a
    /// health check's (see [`Outbound::quiet`]).
    pub fn send_own(&self, method: &str, params: &str, quiet: bool) -> Result<Sent, Unanswered> {
        self.submit(0, None, None, quiet, None, |id_text| (codec::request(id_text, method, params), None))
    }

    /// Gives a request a fresh upstream id, registers where its reply goes, and sends it.
    /// `build` makes the line (and the progress route) from the id's text. `client`: the
    /// client's request it is made from, with switchyard's `traceparent` for it (None for
    /// switchyard's own requests).
    fn submit(
        &self,
        session: SessionId,
        activity: Option<Arc<Notify>>,
        stream: Option<(String, Arc<dyn ProgressSink>)>,
        quiet: bool,
        client: Option<(&Call, Option<String>)>,
        build: impl FnOnce(&str) -> (String, Option<(String, Arc<dyn ProgressSink>)>),
    ) -> Result<Sent, Unanswered> {
        if let Some(d) = self.death.get() {
            return Err(Unanswered::Died(d.clone()));
        }
        let Some(transport) = self.transport() else { return Err(self.death_or_closed()) };
        let upstream_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut digits = itoa::Buffer::new();
        let (line, progress) = build(digits.format(upstream_id));
        let (tx, rx) = oneshot::channel();
        let mut pending = self.pending.lock().expect("lock");
        let behind = session != 0 && pending.any_client();
        let kind = client.as_ref().map_or(0, |(call, _)| overlap::kind(call));
        let sent = Instant::now();
        pending.insert(upstream_id, Pending { session, reply: tx, progress, activity, stream, sent, behind, kind });
        drop(pending);
        let (call, traceparent) = client.map_or((None, None), |(c, t)| (Some(c), t));
        let msg = Outbound { line, request: Some(upstream_id), quiet, traceparent };
        let sent = match call {
            Some(call) => transport.send_call(msg, call),
            None => transport.send(msg),
        };
        if sent.is_err() {
            self.pending.lock().expect("lock").remove(&upstream_id);
            return Err(self.death_or_closed());
        }
        Ok(Sent { upstream_id, reply: rx })
    }

    /// Abandons a call: its reply, if it ever comes, is dropped; the server is told to stop.
    pub fn cancel(&self, upstream_id: u64, reason: &str) {
        let was = self.pending.lock().expect("lock").remove(&upstream_id);
        let was_pending = was.is_some();
        if let Some(p) = was.filter(|p| p.session != 0) {
            let mut abandoned = self.abandoned.lock().expect("lock");
            // Pruned here too, so a server that never answers cancelled calls cannot grow it.
            let linger = self.events.linger();
            abandoned.retain(|_, (_, at)| at.elapsed() < linger);
            abandoned.insert(upstream_id, (p.session, Instant::now()));
        }
        if was_pending {
            self.settle_strays();
        }
        if was_pending && !self.is_dead() {
            let params = format!(r#"{{"requestId":{upstream_id},"reason":{}}}"#, codec::json_string(reason));
            let _ = self.write(codec::notification("notifications/cancelled", &params));
            if let Some(t) = self.transport() {
                t.abandon(upstream_id);
            }
        }
    }

    /// Forgets a call whose reply arrived or that will never be answered, without telling the server.
    pub fn forget(&self, upstream_id: u64) {
        self.pending.lock().expect("lock").remove(&upstream_id);
        self.settle_strays();
    }

    fn on_line(&self, line: String) {
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

    fn on_message(&self, line: String) {
        let env = match codec::parse(&line) {
            Ok(env) => env,
            Err(e) => {
                let preview: String = line.chars().take(120).collect();
                tracing::warn!(instance = %self.label, "skipped a message from the server that is not JSON-RPC ({}): {preview}", e.message());
                return;
            }
        };
        match env.kind {
            Kind::Response => self.on_response(line, env),
            Kind::Request => {
                if let Some(me) = self.me.upgrade() {
                    self.events.clone().server_request(&me, line, env)
                }
            }
            Kind::Notification => {
                if env.method.as_deref() == Some("notifications/progress") {
                    self.on_progress(line, env);
                } else if let Some(line) = self.on_stream(line, &env)
                    && let Some(me) = self.me.upgrade()
                {
                    self.events.clone().server_notification(&me, line, env);
                }
            }
        }
    }

    /// Notes how a call that overlapped another was answered (see [`Overlap`]); once the
    /// instance looks like it answers one request at a time, its events hear of it, once.
    fn watch_overlap(&self, p: &Pending, earlier_pending: bool) {
        let answered = Answered { kind: p.kind, behind: p.behind, earlier_pending, took: p.sent.elapsed() };
        let waited = self.overlap.lock().expect("lock").answered(&answered);
        if let Some(waited) = waited {
            self.events.answers_one_at_a_time(self, waited);
        }
    }

    fn on_response(&self, line: String, env: Envelope) {
        if env.id.is_none() {
            return self.on_null_id_error(&line);
        }
        let id = env.id.as_ref().and_then(|r| line[r.clone()].parse::<u64>().ok());
        let (entry, earlier_pending) = {
            let mut pending = self.pending.lock().expect("lock");
            let entry = id.and_then(|id| pending.remove(&id));
            let earlier = id.is_some_and(|id| pending.client_before(id));
            (entry, earlier)
        };
        match entry {
            Some(p) => {
                if p.session != 0 {
                    self.answered.fetch_add(1, Ordering::Relaxed);
                    self.watch_overlap(&p, earlier_pending);
                    self.strays.call_ended(p.session);
                }
                let _ = p.reply.send(Ok(Reply { line, env }));
                self.settle_strays();
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

    /// A notification of a `subscriptions/listen` stream (it names the listen request's id in
    /// `_meta`): to that request's client under its own id; else it is given back.
    fn on_stream(&self, line: String, env: &Envelope) -> Option<String> {
        let Some(span) = env.params.as_ref().and_then(|p| codec::subscription_id(&line, p)) else { return Some(line) };
        let Ok(upstream) = line[span.clone()].parse::<u64>() else { return Some(line) };
        let pending = self.pending.lock().expect("lock");
        let Some((client_id, sink, activity)) =
            pending.get(&upstream).and_then(|p| p.stream.as_ref().map(|(c, s)| (c, s, &p.activity)))
        else {
            drop(pending);
            // Named for a request that ended, or one that opened no stream: no one else's.
            tracing::debug!(instance = %self.label, "dropped a notification of subscription {upstream}, which no open listen request has");
            return None;
        };
        // A stream that speaks is alive: like progress, it extends the request's deadline.
        if let Some(a) = activity {
            a.notify_one();
        }
        sink.progress(codec::splice(&line, span, client_id));
        None
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
        if let Some((client_token, sink)) = &p.progress {
            sink.progress(codec::splice(&line, span, client_token));
        }
    }

    /// The transport ended: every call still waiting gets the death as its answer.
    fn on_end(&self, how: Ended) {
        let status = self.kill_reason.get().cloned().unwrap_or(how.status);
        let death = Death {
            instance: self.label.clone(),
            status,
            stderr: how.stderr,
            local: self.pid().is_some(),
            quiet_for: how.quiet_for,
        };
        if self.death.set(death.clone()).is_err() {
            return;
        }
        if !self.closing.load(Ordering::Acquire) {
            tracing::warn!(instance = %self.label, status = %death.status, "instance ended");
        }
        // Dropped here so nothing the transport holds outlives it.
        drop(self.transport.lock().expect("lock").take());
        let pending: Vec<Pending> = self.pending.lock().expect("lock").drain();
        self.calls_at_end.store(pending.iter().filter(|p| p.session != 0).count(), Ordering::Release);
        for p in pending {
            let _ = p.reply.send(Err(Unanswered::Died(death.clone())));
        }
        self.dead_tx.send_replace(true);
    }

    /// Stops the instance politely (stdio: close stdin, wait, SIGTERM, wait, SIGKILL; HTTP:
    /// end the session). Never leaves an orphan.
    pub async fn shutdown(&self) {
        self.closing.store(true, Ordering::Release);
        if let Some(t) = self.transport() {
            t.close().await;
        }
        self.dead().await;
    }

    /// Ends the instance at once, saying why (the status its calls in flight are answered with).
    pub async fn kill_because(&self, why: String) {
        let _ = self.kill_reason.set(why);
        self.kill().await;
    }

    /// Ends the instance at once (a hung instance being recycled).
    pub async fn kill(&self) {
        self.closing.store(true, Ordering::Release);
        if let Some(t) = self.transport() {
            t.kill().await;
        }
        self.dead().await;
    }
}

impl Inbound for Instance {
    fn message(&self, line: String) {
        self.on_line(line);
    }

    fn too_long(&self, bytes: usize, limit: usize, id: Option<u64>) {
        self.on_too_long(bytes, limit, id);
    }

    fn lost(&self, id: u64, lost: Lost) {
        let Some(p) = self.pending.lock().expect("lock").remove(&id) else { return };
        tracing::info!(instance = %self.label, "request {id} lost: {}", lost.cause);
        let _ = p.reply.send(Err(Unanswered::Lost {
            instance: self.label.clone(),
            cause: lost.cause,
            delivery: lost.delivery,
        }));
        self.settle_strays();
    }

    fn renewed(&self) {
        // The new server-side session has none of what was set up on the old one: the next
        // call sets it up again (see `Server::reconcile`).
        *self.applied.lock().expect("lock") = Applied::default();
    }

    fn ended(&self, how: Ended) {
        self.on_end(how);
    }
}

#[cfg(test)]
mod tests;
