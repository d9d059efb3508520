//! The remote transports against small in-process HTTP servers on 127.0.0.1: a scriptable
//! Streamable HTTP server and a legacy SSE one, with a recording `Inbound`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::RemoteConnector;
use crate::upstream::transport::{
    Connector, Delivery, Ended, Header, Inbound, Lost, Outbound, RemoteKind, RemoteSpec, Transport,
};

// ---------------------------------------------------------------- the recording Inbound

#[derive(Debug, Clone)]
enum Rec {
    Message(String),
    TooLong(usize, Option<u64>),
    Lost(u64, Lost),
    Renewed,
    Ended(String),
}

#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<Rec>>,
    poke: Notify,
}

impl Recorder {
    fn push(&self, r: Rec) {
        let mut seen = self.seen.lock().unwrap();
        assert!(!seen.iter().any(|r| matches!(r, Rec::Ended(_))), "reported after ended: {r:?}");
        seen.push(r);
        self.poke.notify_waiters();
    }

    /// Waits (at most 10 s) for a record that `pick` accepts, and returns it.
    async fn wait<T>(&self, what: &str, pick: impl Fn(&Rec) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let notified = self.poke.notified();
            if let Some(t) = self.seen.lock().unwrap().iter().find_map(&pick) {
                return t;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("no {what} within 10 s; seen: {:#?}", self.seen.lock().unwrap());
            }
        }
    }

    async fn response(&self, id: u64) -> String {
        let needle = format!("\"id\":{id},");
        self.wait(&format!("response {id}"), |r| match r {
            Rec::Message(m) if m.contains(&needle) && !m.contains("\"method\"") => Some(m.clone()),
            _ => None,
        })
        .await
    }

    async fn lost(&self, id: u64) -> Lost {
        self.wait(&format!("lost {id}"), |r| match r {
            Rec::Lost(i, l) if *i == id => Some(l.clone()),
            _ => None,
        })
        .await
    }

    async fn ended(&self) -> String {
        self.wait("ended", |r| match r {
            Rec::Ended(s) => Some(s.clone()),
            _ => None,
        })
        .await
    }

    fn all(&self) -> Vec<Rec> {
        self.seen.lock().unwrap().clone()
    }
}

impl Inbound for Recorder {
    fn message(&self, line: String) {
        self.push(Rec::Message(line));
    }
    fn too_long(&self, bytes: usize, _limit: usize, id: Option<u64>) {
        self.push(Rec::TooLong(bytes, id));
    }
    fn lost(&self, id: u64, lost: Lost) {
        self.push(Rec::Lost(id, lost));
    }
    fn renewed(&self) {
        self.push(Rec::Renewed);
    }
    fn ended(&self, how: Ended) {
        self.push(Rec::Ended(how.status));
    }
}

// ---------------------------------------------------------------- messages

fn init(id: u64) -> Outbound {
    Outbound {
        line: format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"t","version":"0"}}}}}}"#
        ),
        request: Some(id),
        quiet: false,
        traceparent: None,
    }
}

fn initialized() -> Outbound {
    Outbound {
        line: r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(),
        request: None,
        quiet: false,
        traceparent: None,
    }
}

fn call(id: u64, tool: &str) -> Outbound {
    Outbound {
        line: format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        ),
        request: Some(id),
        quiet: false,
        traceparent: None,
    }
}

/// The liveness window of the tests that watch for silent links.
const WINDOW: Duration = Duration::from_secs(1);

async fn open_watched(url: &str, kind: RemoteKind) -> (RemoteConnector, Arc<Recorder>, Arc<dyn Transport>) {
    let conn = RemoteConnector::new(RemoteSpec { liveness: Some(WINDOW), ..spec(url, kind) }).unwrap();
    let rec = Arc::new(Recorder::default());
    let t = conn.connect("remote#1", rec.clone()).await.expect("connects");
    (conn, rec, t)
}

fn spec(url: &str, kind: RemoteKind) -> RemoteSpec {
    RemoteSpec {
        server: "remote".into(),
        oauth: None,
        url: url.into(),
        kind,
        headers: vec![Header {
            name: "Authorization".into(),
            value: "Bearer sekrit".into(),
            vars: vec!["MCP_TOKEN".into()],
        }],
        connect_timeout: Duration::from_secs(2),
        max_message_bytes: 64 * 1024,
        post_timeout: Duration::from_secs(2),
        liveness: None,
    }
}

async fn open(url: &str, kind: RemoteKind) -> (RemoteConnector, Arc<Recorder>, Arc<dyn Transport>) {
    let conn = RemoteConnector::new(spec(url, kind)).unwrap();
    let rec = Arc::new(Recorder::default());
    let t = conn.connect("remote#1", rec.clone()).await.expect("connects");
    (conn, rec, t)
}

/// Initialises a transport the way an instance does.
async fn handshake(t: &Arc<dyn Transport>, rec: &Recorder) {
    t.send(init(1)).unwrap();
    rec.response(1).await;
    t.send(initialized()).unwrap();
}

// ---------------------------------------------------------------- a Streamable HTTP server

#[derive(Default)]
struct Fake {
    initializes: u32,
    live: Option<String>,
    /// Answer an unknown session with 400 and the TS SDK example's words, not 404.
    unknown_is_400: bool,
    refuse_all: Option<StatusCode>,
    posts: Vec<Post>,
    gets: Vec<(Option<String>, Option<String>)>,
    deletes: Vec<Option<String>>,
    /// The request id of a "resume" call, answered on the GET that resumes its stream.
    resumable: Option<serde_json::Value>,
    /// The stream of a "hang" call (never answered), and whether the client closed it.
    hang_tx: Option<mpsc::UnboundedSender<String>>,
    hang_closed: Arc<AtomicBool>,
    /// Serve the GET stream: one numbered notification per connection, then the end.
    get_stream: bool,
    /// Answer initialize with HTTP 503.
    refuse_init: bool,
    /// "prime-only" calls: every stream, resumed ones too, is a priming event and an end.
    primes: u32,
    /// Resumes of a "resume" call are answered with a stream that never carries anything (an
    /// event store that lost the events), held open here.
    silent_resume: Vec<mpsc::UnboundedSender<String>>,
}

/// Sets its flag when dropped: the server dropped a response body (its client went away).
struct OnDrop(Arc<AtomicBool>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One POST as the server saw it.
#[derive(Debug)]
struct Post {
    method: String,
    tool: String,
    session: Option<String>,
    version: Option<String>,
    mcp_method: Option<String>,
    mcp_name: Option<String>,
    /// `Mcp-Param-*` headers, names in lower case, sorted.
    params: Vec<(String, String)>,
    traceparent: Option<String>,
}

type Shared = Arc<Mutex<Fake>>;

const PROGRESS: &str =
    r#"data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

fn sse(events: Vec<String>) -> Response {
    let chunks: Vec<Result<Bytes, Infallible>> = events.into_iter().map(|e| Ok(Bytes::from(e))).collect();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .unwrap()
}

fn json(body: String) -> Response {
    Response::builder().header("content-type", "application/json").body(Body::from(body)).unwrap()
}

fn result(id: &serde_json::Value, text: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"{text}"}}]}}}}"#)
}

async fn mcp_post(State(fake): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let msg: serde_json::Value = serde_json::from_str(&body).unwrap();
    let method = msg["method"].as_str().unwrap_or("").to_string();
    let tool = msg["params"]["name"].as_str().unwrap_or("").to_string();
    let id = msg["id"].clone();
    let session = header(&headers, "mcp-session-id");
    let mut f = fake.lock().unwrap();
    f.posts.push(Post {
        method: method.clone(),
        tool: tool.clone(),
        session: session.clone(),
        version: header(&headers, "mcp-protocol-version"),
        mcp_method: header(&headers, "mcp-method"),
        mcp_name: header(&headers, "mcp-name"),
        traceparent: header(&headers, "traceparent"),
        params: {
            let mut p: Vec<(String, String)> = headers
                .iter()
                .filter(|(k, _)| k.as_str().starts_with("mcp-param-"))
                .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
                .collect();
            p.sort();
            p
        },
    });
    if let Some(status) = f.refuse_all {
        return (status, "go away").into_response();
    }
    if header(&headers, "authorization").as_deref() != Some("Bearer sekrit") {
        return (StatusCode::UNAUTHORIZED, "no").into_response();
    }
    if method == "initialize" {
        if f.refuse_init {
            return (StatusCode::SERVICE_UNAVAILABLE, "starting up").into_response();
        }
        f.initializes += 1;
        let sid = format!("s{}", f.initializes);
        f.live = Some(sid.clone());
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2025-11-25","capabilities":{{}},"serverInfo":{{"name":"fake","version":"1"}}}}}}"#
        );
        let mut resp = json(body);
        resp.headers_mut().insert("mcp-session-id", sid.parse().unwrap());
        return resp;
    }
    let modern = msg["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].is_string();
    if !modern && session != f.live {
        if f.unknown_is_400 {
            return (
                StatusCode::BAD_REQUEST,
                r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#,
            )
                .into_response();
        }
        return (
            StatusCode::NOT_FOUND,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}"#,
        )
            .into_response();
    }
    if id.is_null() {
        return StatusCode::ACCEPTED.into_response();
    }
    if method == "tools/list" {
        // One tool per page: `deploy` mirrors `region` in `Mcp-Param-Region`.
        let page = match msg["params"]["cursor"].as_str() {
            None => r#"{"tools":[{"name":"echo","inputSchema":{"type":"object"}}],"nextCursor":"2"}"#.to_string(),
            Some(_) => r#"{"tools":[{"name":"deploy","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}}]}"#.to_string(),
        };
        return json(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{page}}}"#));
    }
    match tool.as_str() {
        // Refused, as a 2026 server refuses it, without the header its argument is mirrored in.
        "deploy" if header(&headers, "mcp-param-region").as_deref() != msg["params"]["arguments"]["region"].as_str() => (
            StatusCode::BAD_REQUEST,
            [("content-type", "application/json")],
            format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32020,"message":"Mcp-Param-Region header is missing"}}}}"#),
        )
            .into_response(),
        "progress" => {
            sse(vec![PROGRESS.to_string() + "\n\n", format!("event: message\ndata: {}\n\n", result(&id, "done"))])
        }
        // The stream ends before the response, and its events carry no ids.
        "drop" => sse(vec![PROGRESS.to_string() + "\n\n"]),
        // A priming event with an id, then the connection closes: resumable.
        "resume" => {
            f.resumable = Some(id);
            sse(vec!["id: e1\nretry: 10\ndata:\n\n".into()])
        }
        "big" => json(result(&id, &"x".repeat(100_000))),
        // The server's own error under an HTTP error status, as a 2026-07-28 server answers an
        // unknown method (404, -32601).
        "refused" => (
            StatusCode::NOT_FOUND,
            [("content-type", "application/json")],
            format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found: refused"}}}}"#),
        )
            .into_response(),
        // A server that echoes the credentials it refused in its error body.
        "echo-auth" => {
            let auth = header(&headers, "authorization").unwrap_or_default();
            (StatusCode::INTERNAL_SERVER_ERROR, format!("rejected credentials: {auth}")).into_response()
        }
        "prime-only" => {
            f.primes += 1;
            sse(vec![format!("id: p{}\nretry: 10\ndata:\n\n", f.primes)])
        }
        "big-sse" => {
            sse(vec![PROGRESS.to_string() + "\n\n", format!("id: b1\ndata: {}\n\n", result(&id, &"x".repeat(100_000)))])
        }
        "hang" => {
            let (tx, rx) = mpsc::unbounded_channel::<String>();
            tx.send(PROGRESS.to_string() + "\n\n").unwrap();
            f.hang_tx = Some(tx);
            let guard = OnDrop(f.hang_closed.clone());
            let stream = futures_util::stream::unfold((rx, guard), |(mut rx, guard)| async move {
                rx.recv().await.map(|s| (Ok::<Bytes, Infallible>(Bytes::from(s)), (rx, guard)))
            });
            Response::builder().header("content-type", "text/event-stream").body(Body::from_stream(stream)).unwrap()
        }
        _ => json(result(&id, "ok")),
    }
}

async fn mcp_get(State(fake): State<Shared>, headers: HeaderMap) -> Response {
    let mut f = fake.lock().unwrap();
    let last = header(&headers, "last-event-id");
    f.gets.push((header(&headers, "mcp-session-id"), last.clone()));
    if last.as_deref() == Some("e1") && f.resumable.is_some() && !f.silent_resume.is_empty() {
        let (tx, rx) = mpsc::unbounded_channel::<String>();
        f.silent_resume.push(tx);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|s| (Ok::<Bytes, Infallible>(Bytes::from(s)), rx))
        });
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap();
    }
    if last.as_deref() == Some("e1")
        && let Some(id) = f.resumable.take()
    {
        return sse(vec![format!("id: e2\ndata: {}\n\n", result(&id, "resumed"))]);
    }
    if last.as_deref().is_some_and(|l| l.starts_with('p')) {
        f.primes += 1;
        return sse(vec![format!("id: p{}\nretry: 10\ndata:\n\n", f.primes)]);
    }
    if f.get_stream {
        let n = f.gets.len();
        let note = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"g{n}"}}}}"#
        );
        return sse(vec![format!("id: g{n}\ndata: {note}\n\n")]);
    }
    StatusCode::METHOD_NOT_ALLOWED.into_response()
}

async fn mcp_delete(State(fake): State<Shared>, headers: HeaderMap) -> StatusCode {
    fake.lock().unwrap().deletes.push(header(&headers, "mcp-session-id"));
    StatusCode::OK
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

async fn streamable_server() -> (String, Shared) {
    let fake: Shared = Arc::default();
    let app = Router::new().route("/mcp", post(mcp_post).get(mcp_get).delete(mcp_delete)).with_state(fake.clone());
    (format!("{}/mcp", serve(app).await), fake)
}

/// Waits until the server has taken `notifications/initialized` and the GET stream attempt.
async fn settle(fake: &Shared) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        {
            let f = fake.lock().unwrap();
            if f.posts.iter().any(|p| p.method == "notifications/initialized") && !f.gets.is_empty() {
                return;
            }
        }
        assert!(Instant::now() < deadline, "the handshake did not reach the server");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---------------------------------------------------------------- Streamable HTTP tests

/// A 2026-07-28 `tools/call` mirrors the arguments its tool's schema marks with `x-mcp-header`
/// in `Mcp-Param-*` headers, as a direct client does (a server of that era refuses the call
/// when a header is missing): learnt from the tool list, encoded as the spec says.
#[tokio::test]
async fn a_2026_call_mirrors_its_marked_arguments_in_headers() {
    let (url, fake) = streamable_server().await;
    let (c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    let schema = serde_json::json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "who": {"type": "string", "x-mcp-header": "Who"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        "text": {"type": "string"}}});
    let learnt = crate::upstream::Connector::tool_headers(&c).expect("a remote connector learns tool headers");
    learnt.learn(&[serde_json::json!({"name": "deploy", "inputSchema": schema})]);
    let line = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"deploy","arguments":{"region":"eu-west","who":"Zoë","dry":false,"text":"body only"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    t.send(Outbound { line: line.into(), request: Some(4), quiet: false, traceparent: None }).unwrap();
    rec.response(4).await;
    let f = fake.lock().unwrap();
    let post = f.posts.iter().find(|p| p.tool == "deploy").expect("the call reached the server");
    let want = [("mcp-param-dry", "false"), ("mcp-param-region", "eu-west"), ("mcp-param-who", "=?base64?Wm/Dqw==?=")];
    assert_eq!(post.params, want.map(|(a, b)| (a.to_string(), b.to_string())));
    assert_eq!(post.mcp_name.as_deref(), Some("deploy"));
}

/// A 2026-07-28 call of a tool whose schema switchyard has not seen yet (the daemon just
/// started, the client lists no tools: it kept its list from before) is refused for a missing
/// `Mcp-Param-*` header; switchyard reads the tool list (every page) and sends the call once
/// more, with the header. A call the server still refuses gets the server's answer.
/// A call switchyard traces carries its span's `traceparent` in the HTTP header of that name
/// (it is in the body's `_meta` too); one it does not trace carries none.
#[tokio::test]
async fn a_traced_call_carries_its_traceparent_header() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    t.send(Outbound { traceparent: Some(tp.to_string()), ..call(7, "traced") }).unwrap();
    t.send(call(8, "plain")).unwrap();
    rec.response(7).await;
    rec.response(8).await;
    let f = fake.lock().unwrap();
    let header_of = |tool: &str| f.posts.iter().find(|p| p.tool == tool).expect("posted").traceparent.clone();
    assert_eq!((header_of("traced").as_deref(), header_of("plain")), (Some(tp), None));
}

#[tokio::test]
async fn a_2026_call_refused_for_unknown_headers_is_sent_again_once_the_list_is_read() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    let call = |id: u64, args: &str| Outbound {
        line: format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"deploy","arguments":{args},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        ),
        request: Some(id),
        quiet: false,
        traceparent: None,
    };
    t.send(call(7, r#"{"region":"eu"}"#)).unwrap();
    let answer = rec.response(7).await;
    assert!(answer.contains("\"ok\""), "{answer}");
    {
        let f = fake.lock().unwrap();
        let methods: Vec<_> = f.posts.iter().map(|p| (p.method.as_str(), p.params.len())).collect();
        let want = [("tools/call", 0), ("tools/list", 0), ("tools/list", 0), ("tools/call", 1)];
        assert_eq!(methods, want, "the call, the list's two pages, the call with its header");
    }
    // Refused though its header was sent (the argument is not the string the schema says): the
    // server's refusal is the answer, and the list is not read again.
    t.send(call(8, r#"{"region":7}"#)).unwrap();
    let refused = rec.response(8).await;
    assert!(refused.contains("-32020"), "{refused}");
    assert_eq!(fake.lock().unwrap().posts.iter().filter(|p| p.method == "tools/list").count(), 2);
}

/// A 2026-07-28 request (no session) answered with the server's own JSON-RPC error under an
/// HTTP error status (an unknown method: 404 and -32601) gets that answer, as it would directly:
/// not a lost request, nor a link failure. (In the session era a 404 still means the session is
/// gone: a new one is opened and the request replayed.)
#[tokio::test]
async fn a_2026_answer_under_an_http_error_status_is_the_server_s_own() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    let modern = |id: u64, tool: &str| Outbound {
        line: format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}}}}"#
        ),
        request: Some(id),
        quiet: false,
        traceparent: None,
    };
    t.send(modern(2, "refused")).unwrap();
    let answer = rec.response(2).await;
    assert!(answer.contains("-32601") && answer.contains("Method not found: refused"), "{answer}");
    t.send(modern(3, "echo")).unwrap();
    assert!(rec.response(3).await.contains("\"ok\""));
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Lost(..) | Rec::Renewed | Rec::Ended(_))), "{:?}", rec.all());
    assert_eq!(fake.lock().unwrap().initializes, 0);
}

#[tokio::test]
async fn json_answers_carry_the_session_and_version_and_notifications_get_202() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.send(call(2, "echo")).unwrap();
    assert!(rec.response(2).await.contains("\"ok\""));
    assert!(t.endpoint().contains("session s1"), "{}", t.endpoint());
    assert!(!t.endpoint().contains("sekrit"));
    let f = fake.lock().unwrap();
    assert_eq!(f.posts[0].session, None, "the initialize carries no session");
    let notified = f.posts.iter().find(|p| p.method == "notifications/initialized").unwrap();
    assert_eq!(notified.session.as_deref(), Some("s1"));
    let called = f.posts.iter().find(|p| p.method == "tools/call").unwrap();
    assert_eq!(called.session.as_deref(), Some("s1"));
    assert_eq!(called.version.as_deref(), Some("2025-11-25"));
    assert_eq!(called.mcp_method, None, "no Mcp-Method header in the 2025 era");
    drop(f);
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Lost(..) | Rec::Ended(_))), "{:?}", rec.all());
}

#[tokio::test]
async fn sixty_four_calls_at_once_each_get_their_answer() {
    let (url, _fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    for id in 10..74 {
        t.send(call(id, if id % 2 == 0 { "echo" } else { "progress" })).unwrap();
    }
    for id in 10..74 {
        rec.response(id).await;
    }
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Lost(..) | Rec::Ended(_))));
}

#[tokio::test]
async fn an_sse_answer_delivers_progress_before_the_response() {
    let (url, _fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.send(call(2, "progress")).unwrap();
    rec.response(2).await;
    let all = rec.all();
    let progress =
        all.iter().position(|r| matches!(r, Rec::Message(m) if m.contains("notifications/progress"))).unwrap();
    let answer = all.iter().position(|r| matches!(r, Rec::Message(m) if m.contains("\"done\""))).unwrap();
    assert!(progress < answer);
}

#[tokio::test]
async fn the_get_stream_is_opened_after_initialized_and_405_is_tolerated() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while fake.lock().unwrap().gets.is_empty() {
        assert!(Instant::now() < deadline, "no GET stream was tried");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(fake.lock().unwrap().gets[0].0.as_deref(), Some("s1"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.lock().unwrap().gets.len(), 1, "405 means no stream: not retried");
    t.send(call(2, "echo")).unwrap();
    rec.response(2).await;
}

#[tokio::test]
async fn a_lost_session_is_re_initialised_once_and_the_call_replayed() {
    for unknown_is_400 in [false, true] {
        let (url, fake) = streamable_server().await;
        fake.lock().unwrap().unknown_is_400 = unknown_is_400;
        let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
        handshake(&t, &rec).await;
        settle(&fake).await;
        // The server forgets the session (it restarted, or it expired).
        fake.lock().unwrap().live = None;
        t.send(call(2, "echo")).unwrap();
        t.send(call(3, "echo")).unwrap();
        rec.response(2).await;
        rec.response(3).await;
        let f = fake.lock().unwrap();
        assert_eq!(f.initializes, 2, "one re-initialisation for both calls (400 wording: {unknown_is_400})");
        let replays: Vec<_> = f
            .posts
            .iter()
            .filter(|p| p.method == "tools/call" && p.tool == "echo" && p.session.as_deref() == Some("s2"))
            .collect();
        assert_eq!(replays.len(), 2, "both calls replayed in the new session");
        let reinit = f.posts.iter().filter(|p| p.method == "notifications/initialized").count();
        assert_eq!(reinit, 2, "the new session was told it is initialised");
        drop(f);
        assert_eq!(rec.all().iter().filter(|r| matches!(r, Rec::Renewed)).count(), 1);
        assert!(
            !rec.all().iter().any(|r| matches!(r, Rec::Message(m) if m.contains("switchyard-reinit"))),
            "the re-initialisation's answer stays in the transport"
        );
        assert!(t.endpoint().contains("session s2"));
    }
}

#[tokio::test]
async fn a_failed_re_initialisation_loses_the_call_undelivered_and_ends_the_transport() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    settle(&fake).await;
    {
        let mut f = fake.lock().unwrap();
        f.live = None;
        f.refuse_init = true;
    }
    t.send(call(2, "echo")).unwrap();
    let lost = rec.lost(2).await;
    assert_eq!(lost.delivery, Delivery::No, "the server never took it: safe to repeat");
    let status = rec.ended().await;
    assert!(status.contains("could not be re-established") && status.contains("HTTP 503"), "{status}");
}

#[tokio::test]
async fn a_stream_ending_without_event_ids_loses_the_call_at_once() {
    let (url, _fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    let start = Instant::now();
    t.send(call(2, "drop")).unwrap();
    let lost = rec.lost(2).await;
    assert_eq!(lost.delivery, Delivery::Maybe);
    assert!(lost.cause.contains("ended before the response"), "{}", lost.cause);
    assert!(lost.cause.contains(&url), "{}", lost.cause);
    // Generous: the point is that nothing waits for a timeout.
    assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Ended(_))), "the link itself lives on");
}

#[tokio::test]
async fn a_stream_with_event_ids_is_resumed_with_last_event_id() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.send(call(2, "resume")).unwrap();
    assert!(rec.response(2).await.contains("resumed"));
    let f = fake.lock().unwrap();
    assert!(f.gets.iter().any(|g| g.1.as_deref() == Some("e1") && g.0.as_deref() == Some("s1")), "{:?}", f.gets);
    drop(f);
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Lost(..))));
}

#[tokio::test]
async fn an_over_long_answer_is_reported_with_its_request() {
    let (url, _fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.send(call(2, "big")).unwrap();
    let (bytes, id) = rec
        .wait("too_long", |r| match r {
            Rec::TooLong(b, id) => Some((*b, *id)),
            _ => None,
        })
        .await;
    assert!(bytes > 100_000);
    assert_eq!(id, Some(2));
}

#[tokio::test]
async fn an_over_long_event_on_a_request_stream_is_reported_with_its_request() {
    let (url, _fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.send(call(2, "big-sse")).unwrap();
    let id = rec
        .wait("too_long", |r| match r {
            Rec::TooLong(_, id) => Some(*id),
            _ => None,
        })
        .await;
    assert_eq!(id, Some(2));
    // It counts as the answer: no resumption, nothing lost on top.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Lost(..))), "{:?}", rec.all());
}

/// A port on which connections are refused, held (bound, never listening) so that no other
/// test running at the same time can be given it.
fn refused_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

#[tokio::test]
async fn connect_refused_loses_the_call_undelivered_and_ends_the_transport() {
    let (_held, port) = refused_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    t.send(init(1)).unwrap();
    let lost = rec.lost(1).await;
    assert_eq!(lost.delivery, Delivery::No);
    let status = rec.ended().await;
    assert!(status.contains(&url) && status.contains("could not reach"), "{status}");
    assert!(t.send(call(2, "echo")).is_err(), "closed after the end");
}

#[tokio::test]
async fn a_401_ends_the_transport_naming_the_header_and_its_variable() {
    let (url, fake) = streamable_server().await;
    fake.lock().unwrap().refuse_all = Some(StatusCode::UNAUTHORIZED);
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    t.send(init(1)).unwrap();
    let status = rec.ended().await;
    assert!(
        status.contains("HTTP 401") && status.contains("Authorization") && status.contains("$MCP_TOKEN"),
        "{status}"
    );
    assert!(status.contains(&url), "{status}");
    assert!(!status.contains("sekrit"), "never a header value: {status}");
}

#[tokio::test]
async fn a_500_loses_the_call_with_the_status_and_body() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    fake.lock().unwrap().refuse_all = Some(StatusCode::INTERNAL_SERVER_ERROR);
    t.send(call(2, "echo")).unwrap();
    let lost = rec.lost(2).await;
    assert_eq!(lost.delivery, Delivery::Maybe);
    assert!(lost.cause.contains("HTTP 500") && lost.cause.contains("go away"), "{}", lost.cause);
}

#[tokio::test]
async fn close_deletes_the_session_then_reports_the_end() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.close().await;
    assert_eq!(fake.lock().unwrap().deletes, vec![Some("s1".to_string())]);
    assert!(matches!(rec.all().last(), Some(Rec::Ended(_))), "ended has been called when close resolves");
    assert!(t.send(call(2, "echo")).is_err());
}

#[tokio::test]
async fn kill_ends_at_once_and_abandons_what_is_in_flight() {
    let (url, _fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.kill().await;
    assert!(matches!(rec.all().last(), Some(Rec::Ended(s)) if s == "killed"));
}

#[tokio::test]
async fn a_2026_request_carries_its_version_method_and_name_and_no_session() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    let line = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    t.send(Outbound { line: line.into(), request: Some(5), quiet: false, traceparent: None }).unwrap();
    rec.response(5).await;
    let f = fake.lock().unwrap();
    let p = &f.posts[0];
    assert_eq!(p.session, None);
    assert_eq!(p.version.as_deref(), Some("2026-07-28"));
    assert_eq!(p.mcp_method.as_deref(), Some("tools/call"));
    assert_eq!(p.mcp_name.as_deref(), Some("echo"));
    assert!(f.gets.is_empty(), "no GET stream in the 2026 era");
}

#[tokio::test]
async fn abandon_closes_the_request_stream_and_reports_nothing() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.send(call(2, "hang")).unwrap();
    rec.wait("progress", |r| matches!(r, Rec::Message(m) if m.contains("notifications/progress")).then_some(())).await;
    t.abandon(2);
    let deadline = Instant::now() + Duration::from_secs(5);
    let closed = fake.lock().unwrap().hang_closed.clone();
    while !closed.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the server still has the stream open");
        // Writing is how the server notices that the client went away.
        if let Some(tx) = &fake.lock().unwrap().hang_tx {
            let _ = tx.send(": keep-alive\n\n".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Lost(..) | Rec::Ended(_))), "{:?}", rec.all());
}

#[tokio::test]
async fn the_get_stream_is_reopened_with_the_last_event_id() {
    let (url, fake) = streamable_server().await;
    fake.lock().unwrap().get_stream = true;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    for n in 1..=2 {
        let want = format!("\"g{n}\"");
        rec.wait(&format!("server message g{n}"), |r| matches!(r, Rec::Message(m) if m.contains(&want)).then_some(()))
            .await;
    }
    let gets = fake.lock().unwrap().gets.clone();
    assert_eq!(gets[0], (Some("s1".to_string()), None));
    assert_eq!(gets[1], (Some("s1".to_string()), Some("g1".to_string())), "reopened where it stopped");
}

#[tokio::test]
async fn a_2026_request_whose_stream_breaks_is_lost_without_resuming() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    let line = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"resume","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    t.send(Outbound { line: line.into(), request: Some(5), quiet: false, traceparent: None }).unwrap();
    let lost = rec.lost(5).await;
    assert_eq!(lost.delivery, Delivery::Maybe);
    assert!(fake.lock().unwrap().gets.is_empty(), "streams of the 2026 era are not resumable");
}

// ---------------------------------------------------------------- legacy SSE

#[derive(Default)]
struct LegacyFake {
    streams: u32,
    /// Where the current stream's messages go; dropping it severs the stream.
    tx: Option<mpsc::UnboundedSender<String>>,
    posts: Vec<String>,
    /// POSTs to /sse (a Streamable HTTP probe) seen.
    probes: u32,
    /// The stream carries nothing more (it went silent on the way), though POSTs are taken.
    mute: bool,
}

type LegacyShared = Arc<Mutex<LegacyFake>>;

async fn legacy_get(State(fake): State<LegacyShared>) -> Response {
    let (tx, rx) = mpsc::unbounded_channel::<String>();
    let mut f = fake.lock().unwrap();
    f.streams += 1;
    tx.send(format!("event: endpoint\ndata: /messages?sessionId={}\n\n", f.streams)).unwrap();
    f.tx = Some(tx);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|s| (Ok::<Bytes, Infallible>(Bytes::from(s)), rx))
    });
    Response::builder().header("content-type", "text/event-stream").body(Body::from_stream(stream)).unwrap()
}

async fn legacy_post(State(fake): State<LegacyShared>, body: String) -> StatusCode {
    let msg: serde_json::Value = serde_json::from_str(&body).unwrap();
    if msg["params"]["name"] == "stall" {
        // Takes the connection and never answers (a server that lost the session can).
        std::future::pending::<()>().await;
    }
    let mut f = fake.lock().unwrap();
    f.posts.push(body.clone());
    let id = msg["id"].clone();
    // "hang" is a slow tool: taken, answered later (never, here).
    if !id.is_null()
        && !f.mute
        && msg["params"]["name"] != "hang"
        && let Some(tx) = &f.tx
    {
        let answer = if msg["method"] == "initialize" {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2024-11-05","capabilities":{{}},"serverInfo":{{"name":"old","version":"1"}}}}}}"#
            )
        } else {
            result(&id, "legacy")
        };
        let _ = tx.send(format!("event: message\ndata: {answer}\n\n"));
    }
    StatusCode::ACCEPTED
}

async fn legacy_probe(State(fake): State<LegacyShared>) -> StatusCode {
    fake.lock().unwrap().probes += 1;
    StatusCode::NOT_FOUND
}

async fn legacy_server() -> (String, LegacyShared) {
    let fake: LegacyShared = Arc::default();
    let app = Router::new()
        .route("/sse", get(legacy_get).post(legacy_probe))
        .route("/messages", post(legacy_post))
        .with_state(fake.clone());
    (format!("{}/sse", serve(app).await), fake)
}

#[tokio::test]
async fn legacy_sse_posts_to_the_endpoint_and_reads_answers_from_the_stream() {
    let (url, fake) = legacy_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::Sse).await;
    handshake(&t, &rec).await;
    t.send(call(2, "echo")).unwrap();
    assert!(rec.response(2).await.contains("legacy"));
    assert_eq!(fake.lock().unwrap().probes, 0);
}

#[tokio::test]
async fn a_legacy_post_not_accepted_in_time_loses_the_call() {
    let (url, _fake) = legacy_server().await;
    let mut s = spec(&url, RemoteKind::Sse);
    s.post_timeout = Duration::from_millis(200);
    let conn = RemoteConnector::new(s).unwrap();
    let rec = Arc::new(Recorder::default());
    let t = conn.connect("remote#1", rec.clone()).await.unwrap();
    t.send(init(1)).unwrap();
    rec.response(1).await;
    t.send(call(2, "stall")).unwrap();
    let lost = rec.lost(2).await;
    assert_eq!(lost.delivery, Delivery::Maybe);
    assert!(lost.cause.contains("did not accept the message within 200 ms"), "{}", lost.cause);
    t.send(call(3, "echo")).unwrap();
    rec.response(3).await;
}

#[tokio::test]
async fn auto_falls_back_to_legacy_sse_and_remembers_it() {
    let (url, fake) = legacy_server().await;
    let (conn, rec, t) = open(&url, RemoteKind::Auto).await;
    t.send(init(1)).unwrap();
    rec.response(1).await;
    t.send(call(2, "echo")).unwrap();
    rec.response(2).await;
    assert_eq!(fake.lock().unwrap().probes, 1);
    assert_eq!(conn.resolved_kind(), Some(RemoteKind::Sse));
    // The next instance goes straight to legacy SSE: no second probe.
    let rec2 = Arc::new(Recorder::default());
    let t2 = conn.connect("remote#2", rec2.clone()).await.unwrap();
    t2.send(init(1)).unwrap();
    rec2.response(1).await;
    assert_eq!(fake.lock().unwrap().probes, 1);
    assert_eq!(fake.lock().unwrap().streams, 2);
    drop(t);
}

#[tokio::test]
async fn auto_stays_on_streamable_http_when_the_server_speaks_it() {
    let (url, _fake) = streamable_server().await;
    let (conn, rec, t) = open(&url, RemoteKind::Auto).await;
    handshake(&t, &rec).await;
    assert_eq!(conn.resolved_kind(), Some(RemoteKind::StreamableHttp));
}

#[tokio::test]
async fn a_severed_legacy_stream_ends_the_transport() {
    let (url, fake) = legacy_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::Sse).await;
    t.send(init(1)).unwrap();
    rec.response(1).await;
    fake.lock().unwrap().tx = None;
    let status = rec.ended().await;
    assert!(status.contains(&url) && status.contains("SSE stream"), "{status}");
}

#[tokio::test]
async fn a_legacy_server_refusing_the_credentials_fails_the_connect_for_good() {
    async fn refuse() -> StatusCode {
        StatusCode::FORBIDDEN
    }
    let url = format!("{}/sse", serve(Router::new().route("/sse", get(refuse))).await);
    let conn = RemoteConnector::new(spec(&url, RemoteKind::Sse)).unwrap();
    let err = conn.connect("remote#1", Arc::new(Recorder::default())).await.err().expect("refused");
    assert!(!err.transient, "retrying will not help");
    assert!(err.reason.contains("HTTP 403") && err.reason.contains("$MCP_TOKEN"), "{}", err.reason);
}

#[tokio::test]
async fn a_legacy_server_that_is_down_fails_the_connect_as_transient() {
    let (_held, port) = refused_port();
    let url = format!("http://127.0.0.1:{port}/sse");
    let conn = RemoteConnector::new(spec(&url, RemoteKind::Sse)).unwrap();
    let rec = Arc::new(Recorder::default());
    let err = conn.connect("remote#1", rec.clone()).await.err().expect("cannot connect");
    assert!(err.transient && err.reason.contains(&url), "{}", err.reason);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(rec.all().is_empty(), "a failed connect reports nothing: {:?}", rec.all());
}

#[test]
fn bad_headers_and_urls_are_refused_without_showing_values() {
    let mut s = spec("ftp://x/mcp", RemoteKind::Auto);
    assert!(RemoteConnector::new(s.clone()).err().unwrap().contains("http://"));
    s.url = "http://x/mcp".into();
    s.headers[0].value = "Bearer bad\nvalue".into();
    let e = RemoteConnector::new(s).err().unwrap();
    assert!(e.contains("Authorization") && e.contains("$MCP_TOKEN") && !e.contains("bad"), "{e}");
}

#[tokio::test]
async fn a_secret_the_server_echoes_in_an_error_is_redacted() {
    let (url, _fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.send(call(2, "echo-auth")).unwrap();
    let lost = rec.lost(2).await;
    assert!(lost.cause.contains("HTTP 500") && lost.cause.contains("rejected credentials"), "{}", lost.cause);
    assert!(!lost.cause.contains("sekrit"), "the header's value leaked: {}", lost.cause);
    assert!(lost.cause.contains("<redacted>"), "{}", lost.cause);
}

#[tokio::test]
async fn a_server_that_only_primes_its_streams_is_resumed_a_bounded_number_of_times() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.send(call(2, "prime-only")).unwrap();
    let lost =
        tokio::time::timeout(Duration::from_secs(30), rec.lost(2)).await.expect("given up, not resumed for ever");
    assert_eq!(lost.delivery, Delivery::Maybe);
    // The first stream and at most 3 resumptions: priming events are not progress.
    let primes = fake.lock().unwrap().primes;
    assert!(primes <= 4, "{primes} streams");
}

#[tokio::test]
async fn a_resumed_stream_and_a_renewed_session_are_counted_as_reconnects() {
    let (url, fake) = streamable_server().await;
    let metrics = Arc::new(switchyard_core::metrics::Metrics::new(Default::default));
    let conn = RemoteConnector::new(spec(&url, RemoteKind::StreamableHttp)).unwrap().with_metrics(metrics.clone());
    let rec = Arc::new(Recorder::default());
    let t = conn.connect("remote#1", rec.clone()).await.expect("connects");
    handshake(&t, &rec).await;
    t.send(call(2, "resume")).unwrap();
    assert!(rec.response(2).await.contains("resumed"));
    settle(&fake).await;
    fake.lock().unwrap().live = None;
    t.send(call(3, "echo")).unwrap();
    rec.response(3).await;
    let text = metrics.encode();
    let count = |kind: &str| {
        let series = format!(
            r#"switchyard_transport_reconnects_total{{server="remote",transport="streamable_http",kind="{kind}"}} 1"#
        );
        text.lines().any(|l| l == series)
    };
    assert!(count("resume") && count("reinit_404"), "{text}");
}

// ---------------------------------------------------------------- links that go silent

/// Waits for the transport's end, which must come within `within`; returns its status.
async fn ended_within(rec: &Recorder, within: Duration) -> String {
    let started = Instant::now();
    let status = rec.ended().await;
    assert!(started.elapsed() < within, "ended after {:?}, not within {within:?}: {status}", started.elapsed());
    status
}

/// A link that carries nothing any more (a black hole: no FIN, no RST) is found by the probe
/// one window after the call went out, not at the call's deadline.
#[tokio::test]
async fn a_black_holed_link_is_probed_and_ended_after_one_window() {
    let (url, _fake) = streamable_server().await;
    let upstream: std::net::SocketAddr = url.trim_start_matches("http://").trim_end_matches("/mcp").parse().unwrap();
    let proxy = switchyard_testkit::proxy::FaultProxy::start(upstream);
    let (_c, rec, t) = open_watched(&format!("http://{}/mcp", proxy.addr()), RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.send(call(2, "echo")).unwrap();
    rec.response(2).await;
    proxy.black_hole(true);
    t.send(call(3, "echo")).unwrap();
    // One window, a probe of at most a quarter of one (but 0.3 s at least), and a tick.
    let status = ended_within(&rec, WINDOW * 2 + Duration::from_millis(500)).await;
    assert!(status.contains("went silent"), "{status}");
    assert!(status.contains("HEAD request on a fresh connection"), "{status}");
    assert!(status.contains(&proxy.addr().to_string()), "names the link: {status}");
}

/// A call that is silent on a link that answers the probe is a slow call: it keeps waiting, and
/// its answer arrives when the server sends it.
#[tokio::test]
async fn a_silent_call_on_a_live_link_keeps_waiting() {
    let (url, fake) = streamable_server().await;
    let (_c, rec, t) = open_watched(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    t.send(call(2, "hang")).unwrap();
    rec.wait("progress", |r| matches!(r, Rec::Message(m) if m.contains("notifications/progress")).then_some(())).await;
    tokio::time::sleep(WINDOW * 3).await;
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Lost(..) | Rec::Ended(_))), "{:?}", rec.all());
    let tx = fake.lock().unwrap().hang_tx.clone().unwrap();
    tx.send(format!("event: message\ndata: {}\n\n", result(&serde_json::json!(2), "slow but fine"))).unwrap();
    assert!(rec.response(2).await.contains("slow but fine"));
}

/// A resumed stream that carries nothing (an event store that lost the events) counts as lost
/// one window after the resume: the call is answered, the link lives on.
#[tokio::test]
async fn a_resumed_stream_that_stays_silent_is_lost_after_one_window() {
    let (url, fake) = streamable_server().await;
    fake.lock().unwrap().silent_resume.push(mpsc::unbounded_channel().0);
    let (_c, rec, t) = open_watched(&url, RemoteKind::StreamableHttp).await;
    handshake(&t, &rec).await;
    let sent = Instant::now();
    t.send(call(2, "resume")).unwrap();
    let lost = rec.lost(2).await;
    assert_eq!(lost.delivery, Delivery::Maybe);
    assert!(lost.cause.contains("it was resumed, but nothing came on it within 1.0 s"), "{}", lost.cause);
    assert!(sent.elapsed() < WINDOW * 3, "lost after {:?}", sent.elapsed());
    // Whatever the watchdog made of the silence meanwhile, the link itself is fine.
    t.send(call(3, "echo")).unwrap();
    rec.response(3).await;
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Ended(_))), "{:?}", rec.all());
}

/// Legacy SSE: the stream is what carries every answer, so the probe is a ping whose answer
/// must come on it. A stream that went silent is found although the server takes POSTs.
#[tokio::test]
async fn a_legacy_stream_that_went_silent_is_found_by_a_ping() {
    let (url, fake) = legacy_server().await;
    let (_c, rec, t) = open_watched(&url, RemoteKind::Sse).await;
    t.send(init(1)).unwrap();
    rec.response(1).await;
    // A slow call on a live stream: the ping is answered on it, nothing ends.
    t.send(call(2, "hang")).unwrap();
    tokio::time::sleep(WINDOW * 3).await;
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Lost(..) | Rec::Ended(_))), "{:?}", rec.all());
    assert!(
        !rec.all().iter().any(|r| matches!(r, Rec::Message(m) if m.contains("switchyard-probe"))),
        "the probe's answer is switchyard's own: {:?}",
        rec.all()
    );
    assert!(fake.lock().unwrap().posts.iter().any(|p| p.contains("switchyard-probe")), "it was probed");
    fake.lock().unwrap().mute = true;
    let status = ended_within(&rec, WINDOW * 3).await;
    assert!(status.contains("went silent") && status.contains("ping posted on a fresh connection"), "{status}");
}

/// With liveness off, nothing is probed: a silent call waits for its deadline as before.
#[tokio::test]
async fn with_liveness_off_nothing_is_probed() {
    let (url, fake) = legacy_server().await;
    let (_c, rec, t) = open(&url, RemoteKind::Sse).await;
    t.send(init(1)).unwrap();
    rec.response(1).await;
    fake.lock().unwrap().mute = true;
    t.send(call(2, "echo")).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Ended(_))), "{:?}", rec.all());
    assert!(!fake.lock().unwrap().posts.iter().any(|p| p.contains("switchyard-probe")));
}

/// The 2026-07-28 era (no session, no GET stream, no resumption): a request on a link that went
/// silent is found the same way.
#[tokio::test]
async fn a_2026_request_on_a_black_holed_link_is_found_after_one_window() {
    let (url, _fake) = streamable_server().await;
    let upstream: std::net::SocketAddr = url.trim_start_matches("http://").trim_end_matches("/mcp").parse().unwrap();
    let proxy = switchyard_testkit::proxy::FaultProxy::start(upstream);
    let (_c, rec, t) = open_watched(&format!("http://{}/mcp", proxy.addr()), RemoteKind::StreamableHttp).await;
    let modern = |id: u64| Outbound {
        line: format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}}}}"#
        ),
        request: Some(id),
        quiet: false,
        traceparent: None,
    };
    t.send(modern(5)).unwrap();
    rec.response(5).await;
    proxy.black_hole(true);
    t.send(modern(6)).unwrap();
    let status = ended_within(&rec, WINDOW * 2 + Duration::from_millis(500)).await;
    assert!(status.contains("went silent"), "{status}");
}

// ---------------------------------------------------------------- legacy SSE behind a sign-in

/// A legacy SSE server that takes only the bearer token it issued last, and the authorization
/// server that issues them (discovery, registration, authorization and token endpoints).
#[derive(Default)]
struct Guarded {
    base: String,
    /// Tokens issued so far: `tok-N` is the N-th, and only the last one is taken.
    issued: u32,
    /// Authorization requests (browser sign-ins) seen.
    authorizes: u32,
    /// Refuse every token, good or not.
    refuse_all: bool,
    /// Refuse refresh grants (`invalid_grant`): only a browser sign-in gets a token.
    refresh_refused: bool,
    /// The `Authorization` of each GET of the stream and POST of a message.
    seen: Vec<(&'static str, Option<String>)>,
    tx: Option<mpsc::UnboundedSender<String>>,
}

type GuardedShared = Arc<Mutex<Guarded>>;

impl Guarded {
    /// Notes the request; None when its token is taken, else the 401 that asks for a sign-in.
    fn check(&mut self, what: &'static str, headers: &HeaderMap) -> Option<Response> {
        let auth = header(headers, "authorization");
        let good = auth.as_deref() == Some(&format!("Bearer tok-{}", self.issued)) && !self.refuse_all;
        self.seen.push((what, auth));
        if good {
            return None;
        }
        let challenge = format!(r#"Bearer resource_metadata="{}/.well-known/oauth-protected-resource/sse""#, self.base);
        Some((StatusCode::UNAUTHORIZED, [("www-authenticate", challenge)]).into_response())
    }
}

async fn guarded_get(State(fake): State<GuardedShared>, headers: HeaderMap) -> Response {
    let mut f = fake.lock().unwrap();
    if let Some(refusal) = f.check("GET", &headers) {
        return refusal;
    }
    let (tx, rx) = mpsc::unbounded_channel::<String>();
    tx.send("event: endpoint\ndata: /messages\n\n".into()).unwrap();
    f.tx = Some(tx);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|s| (Ok::<Bytes, Infallible>(Bytes::from(s)), rx))
    });
    Response::builder().header("content-type", "text/event-stream").body(Body::from_stream(stream)).unwrap()
}

async fn guarded_post(State(fake): State<GuardedShared>, headers: HeaderMap, body: String) -> Response {
    let mut f = fake.lock().unwrap();
    if let Some(refusal) = f.check("POST", &headers) {
        return refusal;
    }
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"].clone();
    if !id.is_null()
        && let Some(tx) = &f.tx
    {
        let _ = tx.send(format!("event: message\ndata: {}\n\n", result(&id, "guarded")));
    }
    StatusCode::ACCEPTED.into_response()
}

async fn guarded_resource(State(fake): State<GuardedShared>) -> Response {
    let base = fake.lock().unwrap().base.clone();
    json(serde_json::json!({"resource": format!("{base}/sse"), "authorization_servers": [base]}).to_string())
}

async fn guarded_metadata(State(fake): State<GuardedShared>) -> Response {
    let base = fake.lock().unwrap().base.clone();
    json(
        serde_json::json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/authorize"),
            "token_endpoint": format!("{base}/token"),
            "registration_endpoint": format!("{base}/register"),
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "authorization_response_iss_parameter_supported": true,
        })
        .to_string(),
    )
}

async fn guarded_register() -> Response {
    json(serde_json::json!({"client_id": "client-1", "token_endpoint_auth_method": "none"}).to_string())
}

/// Signs in at once: back to the redirect URI with a code, the state and the issuer.
async fn guarded_authorize(State(fake): State<GuardedShared>, uri: axum::http::Uri) -> Response {
    let mut f = fake.lock().unwrap();
    f.authorizes += 1;
    let asked = reqwest::Url::parse(&format!("http://x/?{}", uri.query().unwrap_or(""))).unwrap();
    let field = |k: &str| asked.query_pairs().find(|(n, _)| n == k).map(|(_, v)| v.into_owned()).unwrap();
    let mut to = reqwest::Url::parse(&field("redirect_uri")).unwrap();
    to.query_pairs_mut()
        .append_pair("code", "code-1")
        .append_pair("state", &field("state"))
        .append_pair("iss", &f.base);
    (StatusCode::FOUND, [("location", to.to_string())]).into_response()
}

/// Any grant (the code, or a refresh token unless refused) gets the next token.
async fn guarded_token(State(fake): State<GuardedShared>, body: String) -> Response {
    let mut f = fake.lock().unwrap();
    if f.refresh_refused && body.contains("grant_type=refresh_token") {
        let refused = serde_json::json!({"error": "invalid_grant"}).to_string();
        return (StatusCode::BAD_REQUEST, [("content-type", "application/json")], refused).into_response();
    }
    f.issued += 1;
    let n = f.issued;
    json(
        serde_json::json!({
            "access_token": format!("tok-{n}"), "token_type": "Bearer",
            "refresh_token": format!("refresh-{n}"), "expires_in": 3600,
        })
        .to_string(),
    )
}

async fn guarded_server() -> (String, GuardedShared) {
    let fake: GuardedShared = Arc::default();
    let app = Router::new()
        .route("/sse", get(guarded_get))
        .route("/messages", post(guarded_post))
        .route("/.well-known/oauth-protected-resource/sse", get(guarded_resource))
        .route("/.well-known/oauth-authorization-server", get(guarded_metadata))
        .route("/register", post(guarded_register))
        .route("/authorize", get(guarded_authorize))
        .route("/token", post(guarded_token))
        .with_state(fake.clone());
    let base = serve(app).await;
    fake.lock().unwrap().base = base.clone();
    (format!("{base}/sse"), fake)
}

/// A connector for `url` with sign-in on (tokens kept in `dir`) and no configured header.
fn signing_in(url: &str, dir: &std::path::Path, login_timeout: Duration) -> RemoteConnector {
    let mut conn = RemoteConnector::new(RemoteSpec { headers: Vec::new(), ..spec(url, RemoteKind::Sse) }).unwrap();
    let settings = switchyard_oauth::Settings { open_browser: false, login_timeout, ..Default::default() };
    let auth = switchyard_oauth::Auth::new(reqwest::Url::parse(url).unwrap(), settings, dir).unwrap();
    conn.auth = Some(Arc::new(auth));
    conn
}

/// The browser: follows the sign-in URL that switchyard announces (in a log line, as
/// `open_browser = false` does) to the authorization server and on to the redirect.
fn browser() -> crate::test_log::OnMessage<impl Fn(tracing::Level, &str) + Send + Sync + 'static> {
    crate::test_log::OnMessage(|_, message: &str| {
        if let Some((_, rest)) = message.split_once("sign in at ")
            && let Some((url, _)) = rest.split_once(" (")
        {
            let url = url.to_string();
            tokio::spawn(async move {
                let _ = reqwest::Client::new().get(url).send().await;
            });
        }
    })
}

/// The sign-in is on the stream's GET; the token goes on it and on every POST; a token revoked
/// mid-session is refreshed and the refused message sent again.
#[tokio::test]
async fn a_legacy_server_asking_for_a_sign_in_is_signed_in_and_answers() {
    let _browser = tracing::subscriber::set_default(browser());
    let (url, fake) = guarded_server().await;
    let dir = tempfile::tempdir().unwrap();
    let conn = signing_in(&url, dir.path(), Duration::from_secs(10));
    let rec = Arc::new(Recorder::default());
    let t = conn.connect("remote#1", rec.clone()).await.expect("signs in and connects");
    handshake(&t, &rec).await;
    t.send(call(2, "echo")).unwrap();
    assert!(rec.response(2).await.contains("guarded"));
    {
        let f = fake.lock().unwrap();
        assert_eq!(f.authorizes, 1, "one browser sign-in");
        assert_eq!(f.seen[0], ("GET", None), "the first GET has no token yet");
        assert_eq!(f.seen[1], ("GET", Some("Bearer tok-1".into())), "the GET again, with the token");
        let posts: Vec<_> = f.seen.iter().filter(|s| s.0 == "POST").collect();
        assert_eq!(posts.len(), 3, "{posts:?}");
        assert!(posts.iter().all(|p| p.1.as_deref() == Some("Bearer tok-1")), "{posts:?}");
    }
    // The token is revoked mid-session (the server issued another): the POST is refused, the
    // token refreshed (no browser), and the message sent again once.
    fake.lock().unwrap().issued += 1;
    t.send(call(3, "echo")).unwrap();
    assert!(rec.response(3).await.contains("guarded"));
    let f = fake.lock().unwrap();
    let last: Vec<_> = f.seen.iter().rev().take(2).rev().cloned().collect();
    assert_eq!(last, vec![("POST", Some("Bearer tok-1".into())), ("POST", Some("Bearer tok-3".into()))]);
    assert_eq!(f.authorizes, 1, "refreshed, not signed in again");
    assert!(!rec.all().iter().any(|r| matches!(r, Rec::Lost(..) | Rec::Ended(_))), "{:?}", rec.all());
}

/// A server that refuses even a good token gets an error after the bound, not a loop of
/// sign-ins, and the error shows no token.
#[tokio::test]
async fn a_legacy_server_that_keeps_refusing_fails_the_connect_after_three_sign_ins() {
    let _browser = tracing::subscriber::set_default(browser());
    let (url, fake) = guarded_server().await;
    fake.lock().unwrap().refuse_all = true;
    let dir = tempfile::tempdir().unwrap();
    let conn = signing_in(&url, dir.path(), Duration::from_secs(10));
    let connect = conn.connect("remote#1", Arc::new(Recorder::default()));
    let err = tokio::time::timeout(Duration::from_secs(30), connect).await.expect("bounded").err().expect("refused");
    assert!(!err.transient, "starting again meets the same refusal");
    assert!(err.reason.contains("after 3 sign-ins") && err.reason.contains(&url), "{}", err.reason);
    assert!(!err.reason.contains("tok-") && !err.reason.contains("refresh-"), "a token leaked: {}", err.reason);
    let f = fake.lock().unwrap();
    assert_eq!(f.seen.len(), 4, "the GET and one after each sign-in: {:?}", f.seen);
    assert_eq!(f.authorizes, 1, "one browser window; the others refreshed");
}

/// A sign-in nobody completes fails the connect for good, naming `switchyard login`.
#[tokio::test]
async fn a_legacy_sign_in_nobody_completes_fails_the_connect_naming_login() {
    let (url, fake) = guarded_server().await;
    let dir = tempfile::tempdir().unwrap();
    let conn = signing_in(&url, dir.path(), Duration::from_millis(300));
    let err = conn.connect("remote#1", Arc::new(Recorder::default())).await.err().expect("not signed in");
    assert!(!err.transient, "starting again would only open another sign-in");
    assert!(err.reason.contains("switchyard login remote"), "{}", err.reason);
    assert_eq!(fake.lock().unwrap().seen.len(), 1, "the GET is not sent again: {:?}", fake.lock().unwrap().seen);
}

/// A server named after its URL (`run --url`, in no config file) is signed in to by its URL:
/// the error names the `switchyard login` that works for it. Its status says the sign-in failed.
#[tokio::test]
async fn a_server_named_after_its_url_names_login_by_url() {
    let (url, _fake) = guarded_server().await;
    let dir = tempfile::tempdir().unwrap();
    let mut conn = signing_in(&url, dir.path(), Duration::from_millis(300));
    let name = switchyard_config::url_name(&reqwest::Url::parse(&url).unwrap());
    conn.spec = Arc::new(RemoteSpec { server: name, ..(*conn.spec).clone() });
    use crate::upstream::transport::Connector;
    assert_eq!(conn.sign_in().unwrap().state, switchyard_oauth::State::NotSignedIn);
    let err = conn.connect("remote#1", Arc::new(Recorder::default())).await.err().expect("not signed in");
    assert!(err.reason.contains(&format!("`switchyard login {url}`")), "{}", err.reason);
    let status = conn.sign_in().unwrap();
    assert_eq!(status.state, switchyard_oauth::State::SignInFailed);
    assert!(status.error.unwrap().contains("nobody signed in"));
    // Were starts to keep failing, the server is not said to be merely down.
    assert!(conn.hint().starts_with(&format!("Sign in with `switchyard login {url}`")), "{}", conn.hint());
}

/// A health check's message (quiet) renews a refused token by refresh, but never starts a
/// sign-in: with the refresh refused too it is refused itself, and no browser opens. A client's
/// message in the same state signs in.
#[tokio::test]
async fn a_health_check_refreshes_but_never_opens_a_sign_in() {
    let _browser = tracing::subscriber::set_default(browser());
    let (url, fake) = guarded_server().await;
    let dir = tempfile::tempdir().unwrap();
    let conn = signing_in(&url, dir.path(), Duration::from_secs(10));
    let rec = Arc::new(Recorder::default());
    let t = conn.connect("remote#1", rec.clone()).await.expect("signs in and connects");
    handshake(&t, &rec).await;
    let ping = |id: u64| Outbound {
        line: format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
        request: Some(id),
        quiet: true,
        traceparent: None,
    };
    // The token was replaced meanwhile: the ping refreshes it, without a browser.
    fake.lock().unwrap().issued += 1;
    t.send(ping(2)).unwrap();
    assert!(rec.response(2).await.contains("guarded"));
    assert_eq!(fake.lock().unwrap().authorizes, 1);
    // Replaced again, and no refresh taken: the ping is refused, still without a browser.
    {
        let mut f = fake.lock().unwrap();
        f.issued += 1;
        f.refresh_refused = true;
    }
    t.send(ping(3)).unwrap();
    let lost = rec.lost(3).await;
    assert!(format!("{lost:?}").contains("starts no sign-in"), "{lost:?}");
    assert_eq!(fake.lock().unwrap().authorizes, 1, "a health check opened a sign-in");
    // A client's call in the same state signs in.
    t.send(call(4, "echo")).unwrap();
    assert!(rec.response(4).await.contains("guarded"));
    assert_eq!(fake.lock().unwrap().authorizes, 2);
}
