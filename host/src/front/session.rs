//! One HTTP session of the 2025-11-25 era (`Mcp-Session-Id`): an ordinary `session::Session`
//! fed whole messages from POST bodies, whose output is routed to the SSE streams of that
//! session only (a request's own stream, or the standalone GET stream).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::codec::{self, Frame, Kind};
use crate::link::Backlog;
use crate::server::Server;
use crate::session::{Input, Output};

/// Messages meant for the GET stream kept while none is open, at most; past it the oldest go.
/// Their bytes count in the session's backlog meanwhile, so a session that never opens the
/// stream is closed by the same rules as a client that stops reading.
const QUEUED_MAX: usize = 1024;

/// One line of the session's output on its way to a client, counted in the session's backlog
/// until it is dropped: once written into a response body, or discarded because nobody can
/// take it any more.
pub struct Taken {
    pub line: String,
    /// The raw id of the request it is about, when the line does not name it.
    related: Option<String>,
    backlog: Arc<Backlog>,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.backlog.wrote(self.line.len() + 1);
    }
}

/// Where a stream's lines go: the body of one HTTP response.
pub type Feed = mpsc::UnboundedReceiver<Taken>;

/// An open response stream of a session.
struct Stream {
    tx: mpsc::UnboundedSender<Taken>,
    /// The client accepts only `application/json`: the stream carries the response and
    /// nothing else (what relates to the request goes where unrelated messages go).
    json_only: bool,
    /// Progress tokens of its request (JSON text), forgotten with it.
    progress: Vec<String>,
}

/// Which stream each message of a session goes to. Only this session's streams are in it.
#[derive(Default)]
struct Routes {
    streams: HashMap<u64, Stream>,
    next: u64,
    /// Request id (canonical JSON text) -> its stream.
    by_request: HashMap<String, u64>,
    /// Progress token (canonical JSON text) -> its stream.
    by_progress: HashMap<String, u64>,
    /// The standalone (GET) stream, when one is open.
    get: Option<mpsc::UnboundedSender<Taken>>,
    /// For the GET stream while none is open.
    queued: VecDeque<Taken>,
    /// Whether the session still runs (streams opened after it ended would never end).
    ended: bool,
}

impl Routes {
    fn close(&mut self, stream: u64) {
        if let Some(s) = self.streams.remove(&stream) {
            for p in s.progress {
                self.by_progress.remove(&p);
            }
        }
    }

    fn get_open(&mut self) -> Option<&mpsc::UnboundedSender<Taken>> {
        if self.get.as_ref().is_some_and(|g| g.is_closed()) {
            self.get = None;
        }
        self.get.as_ref()
    }

    /// Where a message that belongs to no request goes: the GET stream; without one, the only
    /// request stream open (a client that never opens GET still gets a server's request made
    /// during its call); else kept for the GET stream.
    fn unrelated(&mut self, t: Taken) {
        let t = match self.get_open() {
            Some(g) => match g.send(t) {
                Ok(()) => return,
                Err(e) => e.0,
            },
            None => t,
        };
        // Streams whose client went away take nothing more (their requests stay in flight).
        let gone: Vec<u64> = self.streams.iter().filter(|(_, s)| s.tx.is_closed()).map(|(n, _)| *n).collect();
        for n in gone {
            self.close(n);
        }
        let mut open = self.streams.values().filter(|s| !s.json_only);
        if let (Some(only), None) = (open.next(), open.next()) {
            let _ = only.tx.send(t);
            return;
        }
        if self.queued.len() >= QUEUED_MAX {
            self.queued.pop_front();
        }
        self.queued.push_back(t);
    }

    /// Routes one line of the session's output.
    fn route(&mut self, t: Taken) {
        let Ok(env) = codec::parse(&t.line) else {
            // A batch answer (the front sends no batches) or something unreadable: nobody's.
            return;
        };
        match env.kind {
            Kind::Response => {
                let id = env.id.as_ref().map(|r| canonical(&t.line[r.clone()]));
                let Some(stream) = id.and_then(|id| self.by_request.remove(&id)) else {
                    tracing::debug!("dropped a response for a request whose stream is gone");
                    return;
                };
                if let Some(s) = self.streams.get(&stream) {
                    let _ = s.tx.send(t);
                }
                self.close(stream);
            }
            // A notice about a request goes on its stream (else where unrelated messages go).
            Kind::Notification if t.related.is_some() => {
                let stream = t.related.as_deref().and_then(|id| self.by_request.get(&canonical(id)).copied());
                match stream.and_then(|n| self.streams.get(&n)).filter(|s| !s.json_only && !s.tx.is_closed()) {
                    Some(s) => {
                        let _ = s.tx.send(t);
                    }
                    None => self.unrelated(t),
                }
            }
            Kind::Notification if env.method.as_deref() == Some("notifications/progress") => {
                let fields = env.params.as_ref().map(|p| codec::param_fields(&t.line, p)).unwrap_or_default();
                let token = fields.progress_token.map(|r| canonical(&t.line[r]));
                let stream = token.and_then(|tok| self.by_progress.get(&tok).copied());
                match stream.and_then(|n| self.streams.get(&n)) {
                    Some(s) if !s.json_only => {
                        let _ = s.tx.send(t);
                    }
                    Some(_) => self.unrelated(t),
                    // Progress of a request that was answered or cancelled: nobody waits for it.
                    None => {}
                }
            }
            _ => self.unrelated(t),
        }
    }
}

/// A JSON value's text in one form, so the same id or token written two ways matches.
fn canonical(raw: &str) -> String {
    serde_json::from_str::<serde_json::Value>(raw).map(|v| v.to_string()).unwrap_or_else(|_| raw.to_string())
}

/// Why a POSTed request was not taken.
pub enum Refused {
    /// Its id is that of a request of this session still open.
    Duplicate(String),
    /// The session has ended.
    Gone,
}

/// An HTTP session.
pub struct HttpSession {
    pub server: Arc<Server>,
    inbox: mpsc::UnboundedSender<String>,
    routes: Arc<Mutex<Routes>>,
    /// Fired to end the session at once (DELETE, idle): its calls are cancelled upstream.
    abort: CancellationToken,
    /// Fired when the session has ended, whatever ended it.
    pub ended: CancellationToken,
    last_seen: Mutex<Instant>,
}

impl HttpSession {
    /// Starts a session on `server`, joining `registry` (the router's sessions).
    pub fn start(
        server: Arc<Server>,
        registry: Arc<crate::session::Registry>,
        shutdown: CancellationToken,
    ) -> Arc<HttpSession> {
        let (inbox, rx) = mpsc::unbounded_channel();
        let routes = Arc::new(Mutex::new(Routes::default()));
        let abort = CancellationToken::new();
        let session = Arc::new(HttpSession {
            server: server.clone(),
            inbox,
            routes: routes.clone(),
            abort: abort.clone(),
            ended: CancellationToken::new(),
            last_seen: Mutex::new(Instant::now()),
        });
        let opening = crate::session::Opening { transport: "http", registry, speaks_control: false };
        let ended = session.ended.clone();
        tokio::spawn(async move {
            let input = Inbox { rx, abort };
            crate::session::serve_with(server, input, Outbox { routes: routes.clone() }, opening, shutdown).await;
            let mut r = routes.lock().expect("lock");
            r.ended = true;
            // Every stream ends after what it holds; what was kept for a GET stream is dropped.
            r.streams.clear();
            r.get = None;
            r.queued.clear();
            drop(r);
            ended.cancel();
        });
        session
    }

    fn touch(&self) {
        *self.last_seen.lock().expect("lock") = Instant::now();
    }

    /// Whether the client did nothing for `idle`: no request, and no stream open to it.
    pub fn idle_for(&self, idle: Duration) -> bool {
        if self.last_seen.lock().expect("lock").elapsed() < idle {
            return false;
        }
        let mut r = self.routes.lock().expect("lock");
        let get_open = r.get_open().is_some();
        !get_open && r.streams.values().all(|s| s.tx.is_closed())
    }

    /// Ends the session now: calls in flight are cancelled upstream.
    pub fn end(&self) {
        self.abort.cancel();
    }

    /// Takes a request (`id` its raw id, `progress` its raw progress token) and gives the
    /// stream its messages come on: every message for it, ending with its response.
    pub fn request(&self, line: String, id: &str, progress: Option<&str>, json_only: bool) -> Result<Feed, Refused> {
        self.touch();
        let id = canonical(id);
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut r = self.routes.lock().expect("lock");
            if r.ended {
                return Err(Refused::Gone);
            }
            // Still in flight in the session (even when its client stopped reading): a second
            // request with its id would have its error routed to the first one's stream.
            if r.by_request.contains_key(&id) {
                return Err(Refused::Duplicate(id));
            }
            let n = r.next;
            r.next += 1;
            let progress: Vec<String> = progress.map(canonical).into_iter().collect();
            for p in &progress {
                r.by_progress.insert(p.clone(), n);
            }
            r.by_request.insert(id, n);
            r.streams.insert(n, Stream { tx, json_only, progress });
        }
        self.push(line)?;
        Ok(rx)
    }

    /// Takes a notification or a response of the client. A cancel also ends the stream of the
    /// request it names: no response is owed for it any more.
    pub fn message(&self, line: String, cancelled: Option<&str>) -> Result<(), Refused> {
        self.touch();
        if let Some(id) = cancelled {
            let mut r = self.routes.lock().expect("lock");
            if let Some(n) = r.by_request.remove(&canonical(id)) {
                r.close(n);
            }
        }
        self.push(line)
    }

    fn push(&self, line: String) -> Result<(), Refused> {
        if self.ended.is_cancelled() || self.abort.is_cancelled() {
            return Err(Refused::Gone);
        }
        self.inbox.send(line).map_err(|_| Refused::Gone)
    }

    /// Opens the standalone stream (a second one replaces the first, which ends).
    pub fn listen(&self) -> Result<Feed, Refused> {
        self.touch();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut r = self.routes.lock().expect("lock");
        if r.ended {
            return Err(Refused::Gone);
        }
        while let Some(t) = r.queued.pop_front() {
            let _ = tx.send(t);
        }
        r.get = Some(tx);
        Ok(rx)
    }
}

/// The session's input: the messages POSTed to it.
struct Inbox {
    rx: mpsc::UnboundedReceiver<String>,
    abort: CancellationToken,
}

impl Input for Inbox {
    async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        tokio::select! {
            biased;
            _ = self.abort.cancelled() => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the HTTP session was ended (DELETE or idle past [http] session_idle_ms)",
            )),
            m = self.rx.recv() => Ok(m.map(Frame::Line)),
        }
    }
}

/// The session's output, routed to its streams.
struct Outbox {
    routes: Arc<Mutex<Routes>>,
}

impl Output for Outbox {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<crate::link::Out>, backlog: Arc<Backlog>, _label: String) {
        while let Some(out) = rx.recv().await {
            let t = Taken { line: out.line, related: out.related, backlog: backlog.clone() };
            self.routes.lock().expect("lock").route(t);
        }
    }
}

/// The live sessions of a front, by their `Mcp-Session-Id`.
#[derive(Default)]
pub struct Table {
    sessions: Mutex<HashMap<String, Arc<HttpSession>>>,
}

impl Table {
    pub fn len(&self) -> usize {
        self.sessions.lock().expect("lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, sid: &str) -> Option<Arc<HttpSession>> {
        let s = self.sessions.lock().expect("lock").get(sid).cloned()?;
        (!s.ended.is_cancelled()).then_some(s)
    }

    /// Starts a session (`start`) under a new random id unless `max` are live (`Ok(None)`); the
    /// entry goes when the session ends. Checked and added under one lock, so `max` holds.
    pub fn open(
        self: &Arc<Self>,
        max: usize,
        start: impl FnOnce() -> Arc<HttpSession>,
    ) -> std::io::Result<Option<(Arc<HttpSession>, String)>> {
        let sid = new_id()?;
        let session = {
            let mut sessions = self.sessions.lock().expect("lock");
            if sessions.len() >= max {
                return Ok(None);
            }
            let session = start();
            sessions.insert(sid.clone(), session.clone());
            session
        };
        let (me, key, ended) = (Arc::downgrade(self), sid.clone(), session.ended.clone());
        tokio::spawn(async move {
            ended.cancelled().await;
            if let Some(me) = me.upgrade() {
                me.sessions.lock().expect("lock").remove(&key);
            }
        });
        Ok(Some((session, sid)))
    }

    /// Takes a session out and ends it.
    pub fn remove(&self, sid: &str) -> bool {
        match self.sessions.lock().expect("lock").remove(sid) {
            Some(s) => {
                s.end();
                true
            }
            None => false,
        }
    }

    /// Ends the sessions idle for `idle`; how many.
    pub fn reap(&self, idle: Duration) -> usize {
        let mut sessions = self.sessions.lock().expect("lock");
        let before = sessions.len();
        sessions.retain(|_, s| {
            let keep = !s.ended.is_cancelled() && !s.idle_for(idle);
            if !keep {
                s.end();
            }
            keep
        });
        before - sessions.len()
    }
}

/// 128 random bits, as 32 hex digits (visible ASCII, as the spec asks of a session id).
fn new_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line queued by `link` (counted in its backlog), as the outbox takes it.
    fn taken(line: &str, link: &Arc<crate::link::SessionLink>) -> Taken {
        link.send(line.to_string());
        Taken { line: line.to_string(), related: None, backlog: link.backlog() }
    }

    fn link() -> Arc<crate::link::SessionLink> {
        let (out, _) = mpsc::unbounded_channel();
        crate::link::SessionLink::new(1, out, 1 << 20, crate::link::Buffered::new(1 << 30))
    }

    fn open(r: &mut Routes, id: &str, progress: Option<&str>, json_only: bool) -> Feed {
        let (tx, rx) = mpsc::unbounded_channel();
        let n = r.next;
        r.next += 1;
        let progress: Vec<String> = progress.map(canonical).into_iter().collect();
        for p in &progress {
            r.by_progress.insert(p.clone(), n);
        }
        r.by_request.insert(canonical(id), n);
        r.streams.insert(n, Stream { tx, json_only, progress });
        rx
    }

    fn drain(f: &mut Feed) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(t) = f.try_recv() {
            out.push(t.line.clone());
        }
        out
    }

    #[test]
    fn responses_and_progress_go_to_their_own_request_s_stream_and_end_it() {
        let b = link();
        let mut r = Routes::default();
        let mut a = open(&mut r, "1", Some("\"pa\""), false);
        let mut c = open(&mut r, "\"x\"", Some("7"), false);
        r.route(taken(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":1}}"#,
            &b,
        ));
        r.route(taken(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"pa","progress":1}}"#,
            &b,
        ));
        r.route(taken(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, &b));
        assert_eq!(drain(&mut a).len(), 2);
        assert!(a.try_recv().is_err() && r.streams.len() == 1, "stream 1 ended with its response");
        assert_eq!(drain(&mut c).len(), 1);
        // A late progress for the answered request reaches nobody (not the other stream).
        r.route(taken(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"pa","progress":2}}"#,
            &b,
        ));
        assert!(drain(&mut c).is_empty());
        r.route(taken(r#"{"jsonrpc":"2.0","id":"x","result":{}}"#, &b));
        assert_eq!(drain(&mut c).len(), 1);
        assert!(r.streams.is_empty() && r.by_progress.is_empty());
    }

    #[test]
    fn unrelated_messages_go_to_get_else_the_only_stream_else_wait_for_get() {
        let b = link();
        let mut r = Routes::default();
        let log = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
        let mut a = open(&mut r, "1", None, false);
        r.route(taken(log, &b));
        assert_eq!(drain(&mut a).len(), 1, "the only open stream takes it");
        let gone = open(&mut r, "3", Some("g"), false);
        drop(gone);
        let mut c = open(&mut r, "2", None, false);
        r.route(taken(log, &b));
        assert!(!r.by_progress.contains_key("\"g\""), "a stream whose client left is forgotten");
        assert!(drain(&mut a).is_empty() && drain(&mut c).is_empty() && r.queued.len() == 1);
        // A notice about request 2 goes on its stream.
        let mut notice = taken(log, &b);
        notice.related = Some("2".into());
        r.route(notice);
        assert!(drain(&mut a).is_empty() && drain(&mut c).len() == 1 && r.queued.len() == 1);
        let (tx, mut g) = mpsc::unbounded_channel();
        while let Some(t) = r.queued.pop_front() {
            tx.send(t).ok();
        }
        r.get = Some(tx);
        r.route(taken(log, &b));
        assert_eq!(drain(&mut g).len(), 2);
    }

    #[test]
    fn every_line_leaves_the_backlog_whether_delivered_or_dropped() {
        let shared = crate::link::Buffered::new(1 << 30);
        let (out, _queue) = mpsc::unbounded_channel();
        let b = crate::link::SessionLink::new(1, out, 1 << 20, shared.clone());
        let line = r#"{"jsonrpc":"2.0","id":9,"result":{}}"#;
        let mut r = Routes::default();
        let mut a = open(&mut r, "9", None, false);
        r.route(taken(line, &b)); // delivered to a
        r.route(taken(line, &b)); // nobody's: dropped
        let _ = open(&mut r, "9", None, false); // body gone before its answer
        r.route(taken(line, &b));
        assert_eq!(shared.total(), line.len() + 1, "only what `a` still holds counts");
        drop(drain(&mut a));
        assert_eq!(shared.total(), 0);
    }
}
