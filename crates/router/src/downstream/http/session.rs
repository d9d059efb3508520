//! One HTTP session of the 2025-11-25 era (`Mcp-Session-Id`): an ordinary `session::Session`
//! fed whole messages from POST bodies, whose output is routed to the SSE streams of that
//! session only (a request's own stream, or the standalone GET stream).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::peer::Backlog;
use crate::server::Server;
use crate::session::{Input, Message, Output};
use switchyard_core::call::Call;
use switchyard_core::codec::{self, Frame, Kind};

/// Messages meant for the GET stream kept while none is open, at most; past it the oldest go.
/// Their bytes count in the session's backlog meanwhile, so a session that never opens the
/// stream is closed by the same rules as a client that stops reading.
const QUEUED_MAX: usize = 1024;

pub use super::events::Taken;
pub use super::events::Unknown;
use super::events::{HasLanes, Lanes};

/// Where a response's body comes from: one lane of its session.
pub type Feed = super::events::Feed<Routes>;

/// What the session knows of an open request's stream.
struct Stream {
    /// The client accepts only `application/json`: the stream carries the response and
    /// nothing else (what relates to the request goes where unrelated messages go).
    json_only: bool,
    /// Progress tokens of its request (JSON text), forgotten with it.
    progress: Vec<String>,
}

/// Which stream (lane) each message of a session goes to. Only this session's lanes are in it.
pub struct Routes {
    lanes: Lanes,
    /// Request streams by lane, until their response.
    streams: HashMap<u64, Stream>,
    /// Request id (canonical JSON text) -> its lane.
    by_request: HashMap<String, u64>,
    /// Progress token (canonical JSON text) -> its lane.
    by_progress: HashMap<String, u64>,
    /// The lane of the standalone (GET) stream, once one was opened.
    get: Option<u64>,
    /// For the GET stream while none was opened.
    queued: VecDeque<Taken>,
    /// Whether the session still runs (streams opened after it ended would never end).
    ended: bool,
}

impl HasLanes for Routes {
    fn lanes(&mut self) -> &mut Lanes {
        &mut self.lanes
    }
}

impl Routes {
    fn new(event_store_bytes: usize) -> Routes {
        Routes {
            lanes: Lanes::new(event_store_bytes),
            streams: HashMap::new(),
            by_request: HashMap::new(),
            by_progress: HashMap::new(),
            get: None,
            queued: VecDeque::new(),
            ended: false,
        }
    }

    /// Forgets a request's stream (its lane ends after what it holds).
    fn close(&mut self, lane: u64) {
        if let Some(s) = self.streams.remove(&lane) {
            for p in s.progress {
                self.by_progress.remove(&p);
            }
        }
        self.lanes.close(lane);
    }

    /// Where a message that belongs to no request goes: the GET stream while it is read;
    /// else the only request stream read now (a client that never opens GET still gets a
    /// server's request made during its call); else kept for the GET stream (on its lane, for
    /// a client that resumes it, or queued for the first one).
    fn unrelated(&mut self, t: Taken) {
        let mut t = t;
        if let Some(g) = self.get.filter(|g| self.lanes.attached(*g)) {
            match self.lanes.push(g, t) {
                Ok(()) => return,
                Err(back) => t = back,
            }
        }
        let mut open = self.streams.iter().filter(|(n, s)| !s.json_only && self.lanes.attached(**n)).map(|(n, _)| *n);
        if let (Some(only), None) = (open.next(), open.next()) {
            match self.lanes.push(only, t) {
                Ok(()) => return,
                Err(back) => t = back,
            }
        }
        if let Some(g) = self.get {
            match self.lanes.push(g, t) {
                Ok(()) => return,
                Err(back) => {
                    self.get = None;
                    t = back;
                }
            }
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
                let Some(lane) = id.and_then(|id| self.by_request.remove(&id)) else {
                    tracing::debug!("dropped a response for a request whose stream is gone");
                    return;
                };
                if self.lanes.push(lane, t).is_err() {
                    tracing::debug!("dropped a response whose stream was dropped unread");
                }
                self.close(lane);
            }
            // A notice about a request goes on its stream (else where unrelated messages go).
            Kind::Notification if t.related.is_some() => {
                let lane = t.related.as_deref().and_then(|id| self.by_request.get(&canonical(id)).copied());
                match lane.filter(|n| self.streams.get(n).is_some_and(|s| !s.json_only)) {
                    Some(n) => {
                        if let Err(t) = self.lanes.push(n, t) {
                            self.unrelated(t);
                        }
                    }
                    None => self.unrelated(t),
                }
            }
            Kind::Notification if env.method.as_deref() == Some("notifications/progress") => {
                let fields = env.params.as_ref().map(|p| codec::param_fields(&t.line, p)).unwrap_or_default();
                let token = fields.progress_token.map(|r| canonical(&t.line[r]));
                let lane = token.and_then(|tok| self.by_progress.get(&tok).copied());
                match lane.and_then(|n| self.streams.get(&n).map(|s| (n, s.json_only))) {
                    Some((n, false)) => {
                        let _ = self.lanes.push(n, t);
                    }
                    Some((_, true)) => self.unrelated(t),
                    // Progress of a request that was answered or cancelled: nobody waits for it.
                    None => {}
                }
            }
            _ => self.unrelated(t),
        }
    }
}

/// A JSON value's text in one form, so the same id or token written two ways matches.
pub(super) fn canonical(raw: &str) -> String {
    serde_json::from_str::<serde_json::Value>(raw).map(|v| v.to_string()).unwrap_or_else(|_| raw.to_string())
}

/// Why a POSTed request was not taken.
pub enum Refused {
    /// Its id is that of a request of this session still open.
    Duplicate(String),
    /// The session has ended.
    Gone,
}

/// What serves an HTTP session's messages: a session of one server, or of a group.
type Serve = Box<
    dyn FnOnce(
            Inbox,
            Outbox,
            crate::session::Opening,
            CancellationToken,
        ) -> futures_util::future::BoxFuture<'static, ()>
        + Send,
>;

/// An HTTP session.
pub struct HttpSession {
    /// Its server (of a group session: one of the group's, for its limits).
    pub server: Arc<Server>,
    /// The group it is a session of (`/groups/NAME/mcp`), if it is.
    pub group: Option<String>,
    inbox: mpsc::UnboundedSender<Message>,
    routes: Arc<Mutex<Routes>>,
    /// Fired to end the session at once (DELETE, idle): its calls are cancelled upstream.
    abort: CancellationToken,
    /// Fired when the session has ended, whatever ended it.
    pub ended: CancellationToken,
    last_seen: Mutex<Instant>,
    /// The name of the named token it was begun with (None: the daemon's own): only requests
    /// with that token reach it.
    pub token: Option<Arc<str>>,
}

impl HttpSession {
    /// Starts a session on `server`, joining `sessions` (the router's).
    pub fn start(
        server: Arc<Server>,
        sessions: Arc<crate::session::Sessions>,
        shutdown: CancellationToken,
        event_store_bytes: usize,
        token: Option<Arc<str>>,
    ) -> Arc<HttpSession> {
        let on = server.clone();
        let serve: Serve = Box::new(move |input, output, opening, shutdown| {
            Box::pin(crate::session::serve_with(on, input, output, opening, shutdown))
        });
        HttpSession::start_serving(server, None, sessions, shutdown, event_store_bytes, token, serve)
    }

    /// Starts a session of group `group` of `router` (`/groups/NAME/mcp`) on the servers
    /// `joined` (see `group::join`); `server`, one of them, gives its limits.
    #[allow(clippy::too_many_arguments)]
    pub fn start_group(
        router: Arc<crate::registry::Servers>,
        group: switchyard_config::Group,
        joined: Vec<Result<Arc<Server>, String>>,
        server: Arc<Server>,
        shutdown: CancellationToken,
        event_store_bytes: usize,
        token: Option<Arc<str>>,
    ) -> Arc<HttpSession> {
        let (name, sessions) = (group.name.clone(), router.sessions.clone());
        let serve: Serve = Box::new(move |input, output, opening, shutdown| {
            Box::pin(crate::group::serve_in(router, group, joined, input, output, opening, shutdown))
        });
        HttpSession::start_serving(server, Some(name), sessions, shutdown, event_store_bytes, token, serve)
    }

    fn start_serving(
        server: Arc<Server>,
        group: Option<String>,
        sessions: Arc<crate::session::Sessions>,
        shutdown: CancellationToken,
        event_store_bytes: usize,
        token: Option<Arc<str>>,
        serve: Serve,
    ) -> Arc<HttpSession> {
        let (inbox, rx) = mpsc::unbounded_channel();
        let routes = Arc::new(Mutex::new(Routes::new(event_store_bytes)));
        let abort = CancellationToken::new();
        let session = Arc::new(HttpSession {
            server,
            group,
            inbox,
            routes: routes.clone(),
            abort: abort.clone(),
            ended: CancellationToken::new(),
            last_seen: Mutex::new(Instant::now()),
            token: token.clone(),
        });
        let opening = crate::session::Opening {
            transport: "http",
            sessions,
            speaks_control: false,
            client_dir: None,
            client_token: token.map(|t| t.to_string()),
        };
        let ended = session.ended.clone();
        tokio::spawn(async move {
            let why = "the HTTP session was ended (DELETE or idle past [http] session_idle_ms)";
            let input = Inbox { rx, abort, why };
            serve(input, Outbox { routes: routes.clone() }, opening, shutdown).await;
            let mut r = routes.lock().expect("lock");
            r.ended = true;
            // Every stream read now ends after what it holds; the rest is dropped.
            r.lanes.end();
            r.streams.clear();
            r.by_request.clear();
            r.by_progress.clear();
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
        !self.routes.lock().expect("lock").lanes.any_attached()
    }

    /// Drops the streams nobody came back for (cut, not resumed within `events::DETACHED_TTL`).
    pub fn sweep(&self) {
        self.routes.lock().expect("lock").lanes.sweep(Instant::now());
    }

    /// Ends the session now: calls in flight are cancelled upstream.
    pub fn end(&self) {
        self.abort.cancel();
    }

    /// Takes a request (read once, as the `Call` its session runs) and gives the stream its
    /// messages come on: every message for it, ending with its response.
    pub fn request(&self, call: Box<Call>, json_only: bool) -> Result<Feed, Refused> {
        self.touch();
        let id = canonical(call.id());
        let progress = call.text(&call.fields().progress_token);
        let feed = {
            let mut r = self.routes.lock().expect("lock");
            if r.ended {
                return Err(Refused::Gone);
            }
            // Still in flight in the session (even when its client stopped reading): a second
            // request with its id would have its error routed to the first one's stream.
            if r.by_request.contains_key(&id) {
                return Err(Refused::Duplicate(id));
            }
            let n = r.lanes.open(json_only, Some(&id));
            let progress: Vec<String> = progress.map(canonical).into_iter().collect();
            for p in &progress {
                r.by_progress.insert(p.clone(), n);
            }
            r.by_request.insert(id, n);
            r.streams.insert(n, Stream { json_only, progress });
            Feed::open(&self.routes, &mut r.lanes, n, true)
        };
        self.push(Message::Request(call))?;
        Ok(feed)
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
        self.push(Message::Frame(Frame::Line(line)))
    }

    fn push(&self, message: Message) -> Result<(), Refused> {
        if self.ended.is_cancelled() || self.abort.is_cancelled() {
            return Err(Refused::Gone);
        }
        self.inbox.send(message).map_err(|_| Refused::Gone)
    }

    /// Opens the standalone stream (a second one replaces the first, which ends; what the
    /// first still held goes on the new one).
    pub fn listen(&self) -> Result<Feed, Refused> {
        self.touch();
        let mut r = self.routes.lock().expect("lock");
        if r.ended {
            return Err(Refused::Gone);
        }
        let n = r.lanes.open(false, None);
        let feed = Feed::open(&self.routes, &mut r.lanes, n, true);
        let mut moved = std::mem::take(&mut r.queued);
        if let Some(old) = r.get.replace(n) {
            let mut held = r.lanes.take_pending(old);
            held.append(&mut moved);
            moved = held;
            r.lanes.close(old);
        }
        for t in moved {
            let _ = r.lanes.push(n, t);
        }
        Ok(feed)
    }

    /// Resumes the stream of event `last_event_id` of this session (`Last-Event-ID`): its
    /// events after that one, then (while it runs) what comes on it.
    pub fn resume(&self, last_event_id: &str) -> Result<Result<Feed, Unknown>, Refused> {
        self.touch();
        let mut r = self.routes.lock().expect("lock");
        if r.ended {
            return Err(Refused::Gone);
        }
        Ok(Feed::resume(&self.routes, &mut r.lanes, last_event_id))
    }
}

/// A session's input over HTTP: the messages POSTed to it, until `abort` ends it at once (the
/// client ended the session, or left), saying `why`.
pub(super) struct Inbox {
    pub(super) rx: mpsc::UnboundedReceiver<Message>,
    pub(super) abort: CancellationToken,
    pub(super) why: &'static str,
}

impl Input for Inbox {
    async fn next(&mut self) -> std::io::Result<Option<Message>> {
        tokio::select! {
            biased;
            _ = self.abort.cancelled() => Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, self.why)),
            m = self.rx.recv() => Ok(m),
        }
    }
}

/// The session's output, routed to its streams.
struct Outbox {
    routes: Arc<Mutex<Routes>>,
}

impl Output for Outbox {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<crate::peer::Out>, backlog: Arc<Backlog>, _label: String) {
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
            if keep {
                s.sweep();
            } else {
                s.end();
            }
            keep
        });
        before - sessions.len()
    }
}

/// 128 random bits, as 32 hex digits (visible ASCII, as the spec asks of a session id).
fn new_id() -> std::io::Result<String> {
    Ok(super::token::random::<16>()?.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    /// A line queued by `link` (counted in its backlog), as the outbox takes it.
    fn taken(line: &str, link: &Arc<crate::peer::ClientPeer>) -> Taken {
        link.send(line.to_string());
        Taken { line: line.to_string(), related: None, backlog: link.backlog() }
    }

    fn link() -> Arc<crate::peer::ClientPeer> {
        let (out, _) = mpsc::unbounded_channel();
        crate::peer::ClientPeer::new(1, out, 1 << 20, crate::peer::Buffered::new(1 << 30))
    }

    fn routes() -> Arc<Mutex<Routes>> {
        Arc::new(Mutex::new(Routes::new(1 << 20)))
    }

    /// A request's stream, as `HttpSession::request` opens it.
    fn open(routes: &Arc<Mutex<Routes>>, id: &str, progress: Option<&str>, json_only: bool) -> Feed {
        let mut r = routes.lock().unwrap();
        let n = r.lanes.open(json_only, Some(&canonical(id)));
        let progress: Vec<String> = progress.map(canonical).into_iter().collect();
        for p in &progress {
            r.by_progress.insert(p.clone(), n);
        }
        r.by_request.insert(canonical(id), n);
        r.streams.insert(n, Stream { json_only, progress });
        Feed::open(routes, &mut r.lanes, n, true)
    }

    fn route(routes: &Arc<Mutex<Routes>>, t: Taken) {
        routes.lock().unwrap().route(t);
    }

    /// (event id, data) of each frame ready now (priming events have empty data; keep-alives
    /// are not in a feed); `None` once the feed ended.
    fn drain(f: &mut Feed) -> Option<Vec<(String, String)>> {
        let mut out = Vec::new();
        loop {
            match f.next().now_or_never() {
                Some(Some(frame)) => {
                    let text = String::from_utf8(frame.to_vec()).unwrap();
                    let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).unwrap_or("").trim().to_string();
                    out.push((field("id:"), field("data:")));
                }
                Some(None) if out.is_empty() => return None,
                Some(None) | None => return Some(out),
            }
        }
    }

    /// The data of the messages ready now (priming events left out).
    fn data(f: &mut Feed) -> Vec<String> {
        drain(f).unwrap_or_default().into_iter().map(|(_, d)| d).filter(|d| !d.is_empty()).collect()
    }

    #[test]
    fn responses_and_progress_go_to_their_own_request_s_stream_and_end_it() {
        let b = link();
        let r = routes();
        let mut a = open(&r, "1", Some("\"pa\""), false);
        let mut c = open(&r, "\"x\"", Some("7"), false);
        route(
            &r,
            taken(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":1}}"#,
                &b,
            ),
        );
        route(
            &r,
            taken(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"pa","progress":1}}"#,
                &b,
            ),
        );
        route(&r, taken(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, &b));
        assert_eq!(data(&mut a).len(), 2);
        assert!(drain(&mut a).is_none() && r.lock().unwrap().streams.len() == 1, "stream 1 ended with its response");
        assert_eq!(data(&mut c).len(), 1);
        // A late progress for the answered request reaches nobody (not the other stream).
        route(
            &r,
            taken(
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"pa","progress":2}}"#,
                &b,
            ),
        );
        assert!(data(&mut c).is_empty());
        route(&r, taken(r#"{"jsonrpc":"2.0","id":"x","result":{}}"#, &b));
        assert_eq!(data(&mut c).len(), 1);
        let r = r.lock().unwrap();
        assert!(r.streams.is_empty() && r.by_progress.is_empty());
    }

    #[test]
    fn unrelated_messages_go_to_get_else_the_only_stream_else_wait_for_get() {
        let b = link();
        let r = routes();
        let log = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
        let mut a = open(&r, "1", None, false);
        route(&r, taken(log, &b));
        assert_eq!(data(&mut a).len(), 1, "the only open stream takes it");
        let gone = open(&r, "3", Some("g"), false);
        drop(gone);
        let mut c = open(&r, "2", None, false);
        route(&r, taken(log, &b));
        assert!(data(&mut a).is_empty() && data(&mut c).is_empty() && r.lock().unwrap().queued.len() == 1);
        // A notice about request 2 goes on its stream.
        let mut notice = taken(log, &b);
        notice.related = Some("2".into());
        route(&r, notice);
        assert!(data(&mut a).is_empty() && data(&mut c).len() == 1 && r.lock().unwrap().queued.len() == 1);
        // A notice about request 3, whose client went away, waits on its stream for a resume.
        let mut notice = taken(log, &b);
        notice.related = Some("3".into());
        route(&r, notice);
        assert!(data(&mut a).is_empty() && data(&mut c).is_empty() && r.lock().unwrap().queued.len() == 1);
        let mut g = {
            let mut routes = r.lock().unwrap();
            let n = routes.lanes.open(false, None);
            let feed = Feed::open(&r, &mut routes.lanes, n, true);
            for t in std::mem::take(&mut routes.queued) {
                routes.lanes.push(n, t).ok().unwrap();
            }
            routes.get = Some(n);
            feed
        };
        route(&r, taken(log, &b));
        assert_eq!(data(&mut g).len(), 2);
    }

    #[test]
    fn every_line_leaves_the_backlog_whether_delivered_or_dropped() {
        let shared = crate::peer::Buffered::new(1 << 30);
        let (out, _queue) = mpsc::unbounded_channel();
        let b = crate::peer::ClientPeer::new(1, out, 1 << 20, shared.clone());
        let line = r#"{"jsonrpc":"2.0","id":9,"result":{}}"#;
        let r = routes();
        let mut a = open(&r, "9", None, false);
        route(&r, taken(line, &b)); // queued for a
        route(&r, taken(line, &b)); // nobody's: dropped
        assert_eq!(shared.total(), line.len() + 1, "only what `a` still holds counts");
        assert_eq!(data(&mut a).len(), 1);
        assert_eq!(shared.total(), 0);
        // A stream cut before its answer holds it for a resume; the session's end drops it.
        let cut = open(&r, "10", None, false);
        drop(cut);
        route(&r, taken(r#"{"jsonrpc":"2.0","id":10,"result":{}}"#, &b));
        assert!(shared.total() > 0);
        r.lock().unwrap().lanes.end();
        assert_eq!(shared.total(), 0);
    }

    #[test]
    fn a_cut_stream_resumes_after_the_last_event_seen_with_nothing_lost_or_repeated() {
        let b = link();
        let r = routes();
        let progress = |n: u32| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t","progress":{n}}}}}"#
            )
        };
        let mut a = open(&r, "1", Some("\"t\""), false);
        route(&r, taken(&progress(1), &b));
        route(&r, taken(&progress(2), &b));
        let seen = drain(&mut a).unwrap();
        assert_eq!(seen.len(), 3, "priming + 2: {seen:?}");
        assert!(seen[0].1.is_empty() && !seen[0].0.is_empty(), "the priming event has an id and no data");
        let ids: std::collections::HashSet<&String> = seen.iter().map(|(id, _)| id).collect();
        assert_eq!(ids.len(), 3, "ids are unique: {seen:?}");
        route(&r, taken(&progress(3), &b));
        // The client got 3 off the wire but lost it (not in `seen`); then the connection broke.
        assert_eq!(data(&mut a).len(), 1);
        drop(a);
        route(&r, taken(&progress(4), &b));
        route(&r, taken(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, &b));
        let last = seen[2].0.clone();
        let resume = |id: &str| {
            let mut routes = r.lock().unwrap();
            let feed = Feed::resume(&r, &mut routes.lanes, id);
            drop(routes);
            feed
        };
        let mut again = resume(&last).ok().unwrap();
        let got = data(&mut again);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].contains("\"progress\":3") && got[1].contains("\"progress\":4") && got[2].contains("\"id\":1"));
        assert!(drain(&mut again).is_none(), "a resumed request stream ends after its response");
        // Unknown ids, and ids of another session's events, are refused.
        assert_eq!(resume("x").err(), Some(Unknown::Malformed));
        assert_eq!(resume("1.999999").err(), Some(Unknown::NotKept));
        let other = routes();
        let mut theirs = open(&other, "1", None, false);
        let their_id = drain(&mut theirs).unwrap()[0].0.clone();
        assert_eq!(resume(&their_id).err(), Some(Unknown::NotKept));
        // Resuming once more from the same event replays the same events (the client may retry).
        let mut twice = resume(&last).ok().unwrap();
        assert_eq!(data(&mut twice), got);
    }

    #[test]
    fn the_store_keeps_delivered_events_up_to_its_limit_oldest_first() {
        let b = link();
        let r = Arc::new(Mutex::new(Routes::new(600)));
        let log =
            |n: u32| format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"data":"{n:0100}"}}}}"#);
        let mut a = open(&r, "1", None, false);
        let first = drain(&mut a).unwrap()[0].0.clone();
        for n in 0..10 {
            route(&r, taken(&log(n), &b));
        }
        let seen = drain(&mut a).unwrap();
        assert_eq!(seen.len(), 10);
        let resume = |id: &str| {
            let mut routes = r.lock().unwrap();
            let feed = Feed::resume(&r, &mut routes.lanes, id);
            drop(routes);
            feed.err()
        };
        assert_eq!(resume(&first), Some(Unknown::NotKept), "the oldest were dropped");
        assert_eq!(resume(&seen[9].0), None, "the newest are kept");
        // A cut stream holds what it has not sent, up to half the session's backlog limit (more
        // than the store's 600 bytes: a big response waits for the client that resumes); past
        // it, it is dropped.
        let mut cut = open(&r, "2", None, false);
        let cut_at = drain(&mut cut).unwrap()[0].0.clone();
        drop(cut);
        let lane = r.lock().unwrap().by_request["2"];
        let big = |n: u32| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"data":"{n} {}"}}}}"#,
                "x".repeat(b.backlog().limit() / 8)
            )
        };
        for n in 0..3 {
            let mut notice = taken(&big(n), &b);
            notice.related = Some("2".into());
            route(&r, notice);
        }
        assert!(r.lock().unwrap().lanes.exists(lane), "a cut stream was dropped under half the backlog limit");
        for n in 3..4 {
            let mut notice = taken(&big(n), &b);
            notice.related = Some("2".into());
            route(&r, notice);
        }
        assert_eq!(b.backlog().queued(), 0, "the dropped stream's bytes are still counted");
        assert!(!r.lock().unwrap().lanes.exists(lane), "the unread stream was dropped");
        // Resuming it gets an error in place of the response it will never have, then the end.
        let mut resumed = {
            let mut routes = r.lock().unwrap();
            Feed::resume(&r, &mut routes.lanes, &cut_at).ok().unwrap()
        };
        let got = data(&mut resumed);
        assert_eq!(got.len(), 1, "{got:?}");
        let v: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
        assert_eq!(v["id"], 2);
        assert!(v["error"]["message"].as_str().unwrap().contains("dropped"), "{v}");
        assert!(drain(&mut resumed).is_none());
        // A GET stream cut and not resumed for a minute is dropped; resuming it is refused.
        let mut g = {
            let mut routes = r.lock().unwrap();
            let n = routes.lanes.open(false, None);
            Feed::open(&r, &mut routes.lanes, n, true)
        };
        let g_at = drain(&mut g).unwrap()[0].0.clone();
        drop(g);
        r.lock().unwrap().lanes.sweep(Instant::now() + super::super::events::DETACHED_TTL);
        assert_eq!(resume(&g_at), Some(Unknown::Dropped));
    }

    /// A stream whose client stopped reading it (its response body is open, nothing is taken)
    /// is dropped once it holds more than it may (here the store's 1 MiB, more than half the
    /// session's limit) and took nothing for a while; the session and its other streams go on,
    /// its backlog given back, and the client reading again gets an error for its request.
    #[tokio::test(start_paused = true)]
    async fn a_stream_its_client_stopped_reading_is_dropped_and_the_others_go_on() {
        let (r, b) = (routes(), link());
        let (mut good, mut stuck) = (open(&r, "1", Some("\"p1\""), false), open(&r, "2", Some("\"p2\""), false));
        drain(&mut good).unwrap();
        drain(&mut stuck).unwrap();
        let half = b.backlog().limit() / 2;
        let big = "x".repeat(half / 4);
        let progress = |token: &str, n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"{token}","progress":{n},"message":"{big}"}}}}"#
            )
        };
        // Read slowly but steadily: never dropped, however much passes through.
        for n in 0..12 {
            route(&r, taken(&progress("p1", n), &b));
            tokio::time::advance(Duration::from_secs(1)).await;
            assert_eq!(data(&mut good).len(), 1, "the stream that is read lost message {n}");
        }
        // Not read: under half the limit it waits; over it, once nothing was taken for a while, dropped.
        for n in 0..3 {
            route(&r, taken(&progress("p2", n), &b));
        }
        let lane = r.lock().unwrap().by_request["2"];
        tokio::time::advance(super::super::events::STALLED).await;
        assert!(r.lock().unwrap().lanes.exists(lane), "dropped while under half the limit");
        for n in 3..10 {
            route(&r, taken(&progress("p2", n), &b));
        }
        assert_eq!(b.backlog().queued(), 0, "the unread stream was kept past its cap");
        // When its client reads again: the error in place of its response, then the end.
        let last = data(&mut stuck);
        assert_eq!(last.len(), 1, "{last:?}");
        let v: serde_json::Value = serde_json::from_str(&last[0]).unwrap();
        assert_eq!(
            (v["id"].clone(), v["error"]["code"].clone()),
            (serde_json::json!(2), serde_json::json!(-32603)),
            "{v}"
        );
        assert!(drain(&mut stuck).is_none(), "the unread stream's response did not end");
        assert!(!r.lock().unwrap().lanes.exists(lane));
        route(&r, taken(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, &b));
        assert_eq!(data(&mut good), vec![r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_string()]);
    }
}
