//! The call path's timing (timeouts, cancels, retries, crashes, queues, progress) in-process, under paused time.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, DuplexStream, WriteHalf};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::server::Server;
use crate::upstream::Lost;
use crate::upstream::fake::{Behaviour, FakeConnector, FakeLink};
use switchyard_config::Config;
use switchyard_core::error::Delivery;
use switchyard_core::metrics::Metrics;
use switchyard_policy::Policy;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The fake server's tools: `echo`, `sleep` and `hang` are read-only, `lookup` is idempotent,
/// `write` is neither.
const TOOLS: &str = r#"{"tools":[
    {"name":"echo","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},
    {"name":"sleep","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},
    {"name":"hang","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},
    {"name":"lookup","inputSchema":{"type":"object"},"annotations":{"idempotentHint":true}},
    {"name":"write","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":false}}]}"#;

/// A scripted MCP server. A `tools/call` of `hang` is never answered (the test answers it, or
/// not); any other tool answers after `arguments.ms` (0: at once) with `arguments.text`, else
/// "NAME after MS ms", sending progress every `arguments.progress_ms` when the call has a
/// progress token. Other requests get `{}`. `logging`: `initialize` declares that capability.
fn fake_server(logging: bool) -> Behaviour {
    Arc::new(move |link, msg| {
        let Some(id) = msg.request else { return };
        let m: Value = serde_json::from_str(&msg.line).expect("the router sends JSON");
        let result = match m["method"].as_str().unwrap_or_default() {
            "initialize" => {
                let caps = if logging { json!({"tools": {}, "logging": {}}) } else { json!({"tools": {}}) };
                let info = json!({"name": "fake", "version": "1"});
                json!({"protocolVersion": "2025-11-25", "capabilities": caps, "serverInfo": info})
            }
            "tools/list" => serde_json::from_str(TOOLS).expect("tools"),
            "tools/call" => return tool_call(link, id, &m["params"]),
            _ => json!({}),
        };
        link.reply(&json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string());
    })
}

fn answer(id: u64, text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}}).to_string()
}

fn tool_call(link: &Arc<FakeLink>, id: u64, params: &Value) {
    let name = params["name"].as_str().unwrap_or_default();
    if name == "hang" {
        return;
    }
    let args = &params["arguments"];
    let total = args["ms"].as_u64().unwrap_or(0);
    let text = args["text"].as_str().map_or_else(|| format!("{name} after {total} ms"), str::to_string);
    if total == 0 {
        return link.reply(&answer(id, &text));
    }
    let token = params["_meta"]["progressToken"].clone();
    let every = args["progress_ms"].as_u64().filter(|_| !token.is_null());
    let link = link.clone();
    tokio::spawn(async move {
        let mut at = 0;
        while let Some(every) = every.filter(|e| at + e < total) {
            tokio::time::sleep(ms(every)).await;
            at += every;
            let params = json!({"progressToken": token, "progress": at});
            link.reply(&json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}).to_string());
        }
        tokio::time::sleep(ms(total - at)).await;
        link.reply(&answer(id, &text));
    });
}

/// A server named `fake` with the config `toml`, in front of the scripted fake server.
pub(crate) fn start(toml: &str, logging: bool) -> (Arc<Server>, Arc<FakeConnector>) {
    start_with(toml, fake_server(logging))
}

/// [`start`] in front of a server that behaves as `behaviour` says.
fn start_with(toml: &str, behaviour: crate::upstream::fake::Behaviour) -> (Arc<Server>, Arc<FakeConnector>) {
    start_on(toml, FakeConnector::new(behaviour))
}

/// [`start`] in front of the servers `fake` connects to.
fn start_on(toml: &str, fake: Arc<FakeConnector>) -> (Arc<Server>, Arc<FakeConnector>) {
    (server_with(toml, fake.clone(), Policy::disabled()), fake)
}

/// A server named `fake` with the config `toml` and `policy`, in front of `fake`'s servers.
fn server_with(toml: &str, fake: Arc<FakeConnector>, policy: Policy) -> Arc<Server> {
    let mut config: Config = toml::from_str(toml).expect("config");
    config.validate().expect("a valid config");
    Server::new(
        &config,
        "fake",
        fake,
        policy,
        Arc::new(Metrics::new(Default::default)),
        crate::peer::Buffered::new(config.limits.max_buffered_bytes),
        CancellationToken::new(),
    )
}

/// What the fake server received on `link` with `method`.
fn received(link: &FakeLink, method: &str) -> Vec<Value> {
    let all = link.lines().iter().map(|l| serde_json::from_str::<Value>(l).expect("JSON")).collect::<Vec<_>>();
    all.into_iter().filter(|m| m["method"] == method).collect()
}

/// The `tools/call`s of `tool` the fake server received on `link`.
fn calls_of(link: &FakeLink, tool: &str) -> Vec<Value> {
    received(link, "tools/call").into_iter().filter(|m| m["params"]["name"] == tool).collect()
}

fn text(resp: &Value) -> &str {
    resp["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("not a tool result: {resp}"))
}

fn error(resp: &Value) -> (i64, &str) {
    let e = &resp["error"];
    (e["code"].as_i64().unwrap_or_else(|| panic!("not an error: {resp}")), e["message"].as_str().unwrap_or_default())
}

/// [`start`], where a client whose profile differs gets a sibling (instances of its own), made
/// on the same fake connector (its links follow the first server's in `fake.links`).
fn start_family(toml: &str) -> (Arc<Server>, Arc<FakeConnector>) {
    start_family_with(toml, fake_server(true))
}

/// [`start_family`] with the servers behaving as `behaviour`.
fn start_family_with(toml: &str, behaviour: Behaviour) -> (Arc<Server>, Arc<FakeConnector>) {
    let fake = FakeConnector::new(behaviour);
    let build = {
        let (toml, fake) = (toml.to_string(), fake.clone());
        move || server_with(&toml, fake.clone(), Policy::disabled())
    };
    let server = build();
    server.allow_siblings(Box::new(move |_| Ok(build())));
    (server, fake)
}

/// An MCP client in a session of the router, over an in-memory pipe.
struct Client {
    out: WriteHalf<DuplexStream>,
    inbox: mpsc::UnboundedReceiver<Value>,
    /// Received and not taken yet, in order.
    held: Vec<Value>,
    next_id: u64,
}

impl Client {
    /// Opens a session of `server` and initialises it.
    async fn connect(server: &Arc<Server>) -> Client {
        Client::connect_with(server, json!({})).await
    }

    /// [`Client::connect`] with these client capabilities.
    async fn connect_with(server: &Arc<Server>, capabilities: Value) -> Client {
        let mut c = Client::open(server);
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}});
        let resp = c.request("initialize", init).await;
        assert!(resp.get("result").is_some(), "{resp}");
        c.notify("notifications/initialized", json!({})).await;
        c
    }

    /// Opens a session of `server` without initialising it (a 2026-07-28 client's way).
    fn open(server: &Arc<Server>) -> Client {
        let (out, inbox) = crate::test_session::open(server, CancellationToken::new());
        Client { out, inbox, held: Vec::new(), next_id: 1 }
    }

    async fn write(&mut self, msg: Value) {
        self.out.write_all(format!("{msg}\n").as_bytes()).await.expect("the session reads");
    }

    async fn send_with_id(&mut self, id: Value, method: &str, params: Value) {
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
    }

    /// Sends a request; returns its id.
    async fn send(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        self.send_with_id(id.clone(), method, params).await;
        id
    }

    async fn notify(&mut self, method: &str, params: Value) {
        self.write(json!({"jsonrpc": "2.0", "method": method, "params": params})).await;
    }

    /// Waits for the response to `id` (an hour of paused time at most).
    async fn response(&mut self, id: &Value) -> Value {
        loop {
            let is_it = |m: &Value| m.get("method").is_none() && m["id"] == *id;
            if let Some(i) = self.held.iter().position(is_it) {
                return self.held.remove(i);
            }
            let next = tokio::time::timeout(Duration::from_secs(3600), self.inbox.recv()).await;
            self.held.push(next.expect("no response within an hour").expect("the session ended"));
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        self.response(&id).await
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments})).await
    }

    /// Everything received so far, taken out: the messages with `method` (None: responses).
    fn take(&mut self, method: Option<&str>) -> Vec<Value> {
        while let Ok(m) = self.inbox.try_recv() {
            self.held.push(m);
        }
        let (taken, kept) = self.held.drain(..).partition(|m| m.get("method").and_then(Value::as_str) == method);
        self.held = kept;
        taken
    }
}

/// A hung call ends at `call_timeout_ms`, tells the client which server and how long, and stops
/// the server working on it (e2e: a_hung_call_times_out_is_cancelled_upstream_and_its_late_reply_is_dropped).
#[tokio::test(start_paused = true)]
async fn a_call_never_answered_times_out_at_call_timeout_and_is_cancelled_upstream() {
    let (server, fake) = start("[limits]\ncall_timeout_ms = 500\n", true);
    let mut c = Client::connect(&server).await;
    // `hang` is read-only, which the router knows once tools/list has passed: a timeout is
    // still not repeated.
    c.request("tools/list", json!({})).await;
    let started = Instant::now();
    let resp = c.call("hang", json!({})).await;
    assert_eq!(started.elapsed(), ms(500));
    let (code, msg) = error(&resp);
    assert_eq!(code, -32001, "{resp}");
    assert!(
        msg.starts_with(
            "tools/call `hang` (on fake#1) on server `fake` timed out after 0.5 s; switchyard cancelled it upstream"
        ),
        "{msg}"
    );
    assert_eq!(resp["error"]["data"]["attempts"], 1, "{resp}");
    let link = fake.link(0);
    let sent = calls_of(&link, "hang");
    assert_eq!(sent.len(), 1, "a timed-out call was repeated: {sent:?}");
    let upstream = sent[0]["id"].as_u64().expect("the router's own numeric id");
    let cancels = received(&link, "notifications/cancelled");
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    assert_eq!(cancels[0]["params"]["requestId"], upstream);
    assert_eq!(cancels[0]["params"]["reason"], "switchyard: timed out after 0.5 s");
    // A hung call may mean a hung instance: it is pinged at once, not at the next idle check.
    tokio::time::sleep(ms(20)).await;
    assert_eq!(received(&link, "ping").len(), 1);
    // The server's late reply is dropped, not a second answer; the instance serves on.
    link.reply(&answer(upstream, "late"));
    assert_eq!(text(&c.call("echo", json!({"text": "alive"})).await), "alive");
    assert_eq!(c.take(None), Vec::<Value>::new(), "a second answer reached the client");
    assert_eq!(fake.links.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn progress_from_the_server_extends_the_deadline_up_to_max_call_timeout() {
    let (server, _fake) = start("[limits]\ncall_timeout_ms = 500\nmax_call_timeout_ms = 2000\n", true);
    let mut c = Client::connect(&server).await;
    let started = Instant::now();
    let args =
        json!({"name": "sleep", "arguments": {"ms": 1500, "progress_ms": 200}, "_meta": {"progressToken": "tok"}});
    let id = c.send("tools/call", args).await;
    let resp = c.response(&id).await;
    assert_eq!(text(&resp), "sleep after 1500 ms", "{resp}");
    assert_eq!(started.elapsed(), ms(1500));
    // The client got the progress under its own token.
    let progress = c.take(Some("notifications/progress"));
    assert_eq!(progress.len(), 7, "{progress:?}");
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == "tok"), "{progress:?}");

    // Without progress the same call ends at its deadline.
    let started = Instant::now();
    let resp = c.call("sleep", json!({"ms": 1500})).await;
    assert_eq!((error(&resp).0, started.elapsed()), (-32001, ms(500)), "{resp}");

    // Progress for ever does not keep a call past max_call_timeout_ms.
    let started = Instant::now();
    let args = json!({"name": "sleep", "arguments": {"ms": 10000, "progress_ms": 200}, "_meta": {"progressToken": 9}});
    let id = c.send("tools/call", args).await;
    let resp = c.response(&id).await;
    assert_eq!(started.elapsed(), ms(2000));
    let (code, msg) = error(&resp);
    assert_eq!(code, -32001, "{resp}");
    assert!(msg.contains("timed out after 2.0 s"), "{msg}");
}

/// `_meta` of a 2026-07-28 request: the era's envelope, which needs no initialize.
fn modern_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}})
}

/// [`fake_server`], where a `subscriptions/listen` is acknowledged on its stream (a notification
/// naming the listen's id) and then left open, as a server of the 2026-07-28 era does.
fn listening_server() -> Behaviour {
    let inner = fake_server(false);
    Arc::new(move |link, msg| {
        let m: Value = serde_json::from_str(&msg.line).expect("the router sends JSON");
        if m["method"] == "subscriptions/listen" {
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": m["id"]}}});
            link.reply(&ack.to_string());
            return;
        }
        inner(link, msg)
    })
}

/// A listen stream is a subscription, not a call: quiet for longer than any call may take, it
/// stays open; it takes no place of a serial server's one call at a time; and it ends when its
/// client cancels it, with the cancel passed on and no answer owed.
#[tokio::test(start_paused = true)]
async fn a_quiet_listen_stream_outlives_the_call_timeout_and_takes_no_call_slot() {
    let cfg =
        "[limits]\ncall_timeout_ms = 500\nmax_call_timeout_ms = 2000\n[pools.default]\nmax = 1\nmax_inflight = 1\n";
    let (server, fake) = start_with(cfg, listening_server());
    let mut c = Client::open(&server);
    let listen = c
        .send("subscriptions/listen", json!({"notifications": {"toolsListChanged": true}, "_meta": modern_meta()}))
        .await;
    tokio::time::sleep(ms(100)).await;
    let acks = c.take(Some("notifications/subscriptions/acknowledged"));
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(acks[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], listen);

    // Quiet for five times the longest call: no answer, no cancel upstream.
    tokio::time::sleep(ms(10_000)).await;
    assert_eq!(c.take(None), Vec::<Value>::new(), "the listen stream was answered");
    let link = fake.link(0);
    assert_eq!(received(&link, "notifications/cancelled"), Vec::<Value>::new());

    // A call goes through while it is open, though the server takes one call at a time.
    let started = Instant::now();
    let resp = c
        .request("tools/call", json!({"name": "echo", "arguments": {"text": "meanwhile"}, "_meta": modern_meta()}))
        .await;
    assert_eq!(text(&resp), "meanwhile", "{resp}");
    assert_eq!(started.elapsed(), ms(0));

    // What the server sends on the stream later still reaches the client, under its id.
    let upstream = received(&link, "subscriptions/listen")[0]["id"].clone();
    link.reply(
        &json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": upstream}}})
        .to_string(),
    );
    tokio::time::sleep(ms(10)).await;
    let changed = c.take(Some("notifications/tools/list_changed"));
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], listen);

    // The client ends it: the server is told, and the client is owed nothing.
    c.notify("notifications/cancelled", json!({"requestId": listen, "_meta": modern_meta()})).await;
    tokio::time::sleep(ms(10)).await;
    let cancels = received(&link, "notifications/cancelled");
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    assert_eq!(cancels[0]["params"]["requestId"], upstream);
    assert_eq!(c.take(None), Vec::<Value>::new());
}

/// [`fake_server`] with a tool `ask` of the 2026-07-28 era: called without `requestState` it
/// answers `input_required` with the state `asked here`; called with one, it says which state came.
fn asking_server() -> Behaviour {
    let inner = fake_server(false);
    Arc::new(move |link, msg| {
        let m: Value = serde_json::from_str(&msg.line).expect("the router sends JSON");
        if m["method"] == "tools/call" && m["params"]["name"] == "ask" {
            let id = msg.request.expect("a request");
            let result = match m["params"]["requestState"].as_str() {
                None => json!({"resultType": "input_required", "requestState": "asked here",
                    "inputRequests": {"q": {"method": "elicitation/create", "params": {"message": "sure?"}}}}),
                Some(state) => json!({"content": [{"type": "text", "text": format!("resumed with {state}")}]}),
            };
            link.reply(&json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string());
            return;
        }
        inner(link, msg)
    })
}

/// The retry of an `input_required` answer (2026-07-28) goes to the instance that asked, even
/// when the pool would pick another: a server may keep the request's state, or the key that
/// seals it, in that instance's memory. The state the client holds is sealed by switchyard (a
/// forged one reaches the server as it is, for it to refuse); once the instance has ended, the
/// retry is answered at once.
#[tokio::test(start_paused = true)]
async fn the_retry_of_an_input_required_answer_goes_to_the_instance_that_asked() {
    let cfg = "[limits]\ncall_timeout_ms = 5000\n[pools.default]\nmax = 2\nmax_inflight = 1\n";
    let (server, fake) = start_with(cfg, asking_server());
    let mut c = Client::open(&server);
    let call = |name: &str, extra: Value| {
        let mut p = json!({"name": name, "arguments": {}, "_meta": modern_meta()});
        p.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        p
    };
    // The first instance is busy, so `ask` starts and goes to a second.
    let hang = c.send("tools/call", call("hang", json!({}))).await;
    tokio::time::sleep(ms(10)).await;
    let asked = c.request("tools/call", call("ask", json!({}))).await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let state = asked["result"]["requestState"].as_str().expect("a state").to_string();
    assert!(state.starts_with("sy-state."), "the server's state reached the client unsealed: {state}");
    assert_eq!(asked["result"]["inputRequests"]["q"]["params"]["message"], "sure?");
    let (first, second) = (fake.link(0), fake.link(1));
    assert_eq!(calls_of(&second, "ask").len(), 1);

    // Now the first instance is free and the second idle too: the pool would pick the first.
    let upstream = calls_of(&first, "hang")[0]["id"].as_u64().unwrap();
    first.reply(&answer(upstream, "done"));
    assert_eq!(text(&c.response(&hang).await), "done");
    let answers = json!({"requestState": state, "inputResponses": {"q": {"action": "accept"}}});
    let resumed = c.request("tools/call", call("ask", answers)).await;
    assert_eq!(text(&resumed), "resumed with asked here", "{resumed}");
    assert_eq!(calls_of(&first, "ask").len(), 0, "the retry went to an instance that did not ask");
    assert_eq!(calls_of(&second, "ask").len(), 2);

    // A state switchyard did not seal goes on as it is.
    let forged = c.request("tools/call", call("ask", json!({"requestState": "made up"}))).await;
    assert_eq!(text(&forged), "resumed with made up");

    // The instance that asked has ended: the retry is answered at once, saying what to do.
    second.end("exit status: 1");
    tokio::time::sleep(ms(10)).await;
    let started = Instant::now();
    let late = c.request("tools/call", call("ask", json!({"requestState": state}))).await;
    let (code, msg) = error(&late);
    assert_eq!(code, -32602, "{late}");
    assert!(msg.contains("has ended") && msg.contains("without `requestState`"), "{msg}");
    assert_eq!(started.elapsed(), ms(0));
}

/// A 2026-07-28 client sends no initialize: its first request may be what starts the server. It
/// waits for the start as a direct connection would (up to `init_timeout_ms`, not
/// `call_timeout_ms`), then has its own time to run; once an instance is up, a request waits for
/// one no longer than its own deadline.
#[tokio::test(start_paused = true)]
async fn a_2026_request_waits_for_the_server_to_start_then_has_its_own_time() {
    let cfg = "[limits]\ncall_timeout_ms = 3000\ninit_timeout_ms = 20000\n";
    let (server, _fake) = start_on(cfg, FakeConnector::slow(fake_server(false), ms(5000)));
    let mut c = Client::open(&server);
    let started = Instant::now();
    let first = json!({"name": "sleep", "arguments": {"ms": 2000}, "_meta": modern_meta()});
    let resp = c.request("tools/call", first).await;
    assert_eq!(text(&resp), "sleep after 2000 ms", "{resp}");
    assert_eq!(started.elapsed(), ms(7000), "5 s to start, then 2 s to run");
    // Up now: a call that needs longer than its deadline is timed out at it.
    let started = Instant::now();
    let slow = json!({"name": "sleep", "arguments": {"ms": 4000}, "_meta": modern_meta()});
    let resp = c.request("tools/call", slow).await;
    assert_eq!(error(&resp).0, -32001, "{resp}");
    assert_eq!(started.elapsed(), ms(3000));
}

/// A request's params are read once, where its session reads it: the era, the caller, the tool,
/// the progress token and the arguments every later stage needs come from that one read (the
/// session's `Call`), in both eras.
#[tokio::test(start_paused = true)]
async fn a_call_s_params_are_read_once_on_its_way_to_the_server() {
    let (server, fake) = start("", true);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    let reads = switchyard_core::codec::params_reads;
    let before = reads();
    let params = json!({"name": "echo", "arguments": {"text": "once"}, "_meta": {"progressToken": "p"}});
    assert_eq!(text(&c.request("tools/call", params).await), "once");
    assert_eq!(reads() - before, 1, "a 2025-11-25 tools/call's params were read more than once");
    let mut c26 = Client::open(&server);
    let mut meta = modern_meta();
    meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "t26", "version": "2"});
    meta["progressToken"] = json!(7);
    let params = json!({"name": "echo", "arguments": {"text": "once more"}, "_meta": meta});
    let before = reads();
    assert_eq!(text(&c26.request("tools/call", params).await), "once more");
    assert_eq!(reads() - before, 1, "a 2026-07-28 tools/call's params were read more than once");
    // What was read reached the server: the tool, its arguments, the progress token (as the
    // router's own id).
    let sent = fake.links.lock().unwrap().iter().flat_map(|l| calls_of(l, "echo")).collect::<Vec<_>>();
    assert_eq!(sent.len(), 2, "{sent:?}");
    for s in &sent {
        assert_eq!(s["params"]["_meta"]["progressToken"], s["id"], "{s}");
    }
    assert_eq!(sent[1]["params"]["arguments"]["text"], "once more", "{sent:?}");
}

/// With a plugin that reads calls and shows a tool under another name (`tool-filter`), a call
/// by the shown name is put back under the server's own by a splice of its `Call`: its params
/// are still read once, and the server gets the rest as the client sent it. Real time: the
/// plugin runs on threads of its own.
#[tokio::test]
async fn a_tool_called_by_its_shown_name_is_put_back_with_one_read() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (_, wasm) =
        switchyard_policy::embedded::EXAMPLES.iter().find(|(n, _)| *n == "tool-filter.wasm").expect("built");
    std::fs::write(dir.path().join("tool-filter.wasm"), wasm).expect("written");
    let filter = r#"{"clients": {"*": {"rename": {"echo": "shout"}}}}"#;
    let config: Config =
        toml::from_str(&format!("[[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = '{filter}'\n")).expect("config");
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), CancellationToken::new()).await.expect("loads");
    let fake = FakeConnector::new(fake_server(false));
    let server = server_with("", fake.clone(), policy);
    let mut c = Client::connect(&server).await;
    let listed = c.request("tools/list", json!({})).await;
    assert!(listed["result"]["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "shout")), "{listed}");
    let reads = switchyard_core::codec::params_reads;
    let before = reads();
    let params = json!({"name": "shout", "arguments": {"text": "put back"}, "_meta": {"progressToken": "p"}});
    assert_eq!(text(&c.request("tools/call", params).await), "put back");
    assert_eq!(reads() - before, 1, "a renamed call's params were read more than once");
    let sent = calls_of(&fake.link(0), "echo");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["params"]["arguments"]["text"], "put back", "{sent:?}");
    assert_eq!(sent[0]["params"]["_meta"]["progressToken"], sent[0]["id"], "{sent:?}");
}

/// A request the HTTP front read (it reads each POSTed body, then hands the session the `Call`)
/// is not read again on its way to the server: its params are read once from body to server.
#[tokio::test(start_paused = true)]
async fn a_request_the_http_front_read_is_not_read_again() {
    use crate::downstream::http::session::HttpSession;
    use switchyard_core::call::Call;
    let (server, fake) = start("", true);
    let sessions = Arc::new(crate::session::Sessions::default());
    let http = HttpSession::start(server.clone(), sessions, CancellationToken::new(), 1 << 20, None);
    // What the front's `read_message` does with a POST's body.
    let posted = |id: u64, method: &str, params: Value| {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        Box::new(Call::parse(line).unwrap())
    };
    let init =
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
    let Ok(mut feed) = http.request(posted(1, "initialize", init), true) else { panic!("initialize refused") };
    let resp: Value = serde_json::from_slice(&feed.next().await.expect("answered")).unwrap();
    assert!(resp.get("result").is_some(), "{resp}");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    assert!(http.message(initialized, None).is_ok());
    let reads = switchyard_core::codec::params_reads;
    let before = reads();
    let params = json!({"name": "echo", "arguments": {"text": "posted"}, "_meta": {"progressToken": "p"}});
    let Ok(mut feed) = http.request(posted(2, "tools/call", params), true) else { panic!("the call refused") };
    let resp: Value = serde_json::from_slice(&feed.next().await.expect("answered")).unwrap();
    assert_eq!(text(&resp), "posted");
    assert_eq!(reads() - before, 1, "the session read again what the front had read");
    assert_eq!(calls_of(&fake.link(0), "echo").len(), 1);
}

/// A request whose envelope names a version switchyard does not serve per request gets -32022
/// with the versions it does, as the HTTP front answers it, and never reaches the server (which
/// may not check).
#[tokio::test(start_paused = true)]
async fn an_enveloped_request_of_an_unserved_version_gets_32022_and_the_server_never_sees_it() {
    let (server, fake) = start_with("", fake_server(false));
    let mut c = Client::open(&server);
    for version in ["2027-01-01", "2025-11-25"] {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}});
        let resp = c.request("tools/call", json!({"name": "echo", "arguments": {}, "_meta": meta})).await;
        let (code, msg) = error(&resp);
        assert_eq!(code, -32022, "{version}: {resp}");
        assert!(msg.contains(version), "{msg}");
        assert_eq!(resp["error"]["data"]["supported"], json!(["2026-07-28"]), "{resp}");
        assert_eq!(resp["error"]["data"]["requested"], version);
    }
    assert!(fake.links.lock().unwrap().iter().all(|l| calls_of(l, "echo").is_empty()));
    // The served version goes through.
    let ok =
        c.request("tools/call", json!({"name": "echo", "arguments": {"text": "served"}, "_meta": modern_meta()})).await;
    assert_eq!(text(&ok), "served");
}

/// e2e: a_crash_fails_unsafe_calls_fast_and_retries_safe_ones.
#[tokio::test(start_paused = true)]
async fn a_crash_fails_unsafe_calls_at_once_and_repeats_only_safe_ones_on_a_new_instance() {
    let (server, fake) = start("", true);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    let write = c.send("tools/call", json!({"name": "write", "arguments": {"ms": 10000}})).await;
    let sleep = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 300}})).await;
    let lookup = c.send("tools/call", json!({"name": "lookup", "arguments": {"ms": 300}})).await;
    tokio::time::sleep(ms(100)).await;
    let first = fake.link(0);
    assert_eq!(received(&first, "tools/call").len(), 3);
    first.end("killed by signal 9");
    let crashed = Instant::now();
    let resp = c.response(&write).await;
    assert_eq!(crashed.elapsed(), Duration::ZERO, "the crash was answered only at the timeout");
    let (code, msg) = error(&resp);
    assert_eq!(code, -32003, "{resp}");
    assert!(
        msg.starts_with("server `fake` instance fake#1 ended (killed by signal 9) during tools/call `write`")
            && msg.contains("The call may have run"),
        "{msg}"
    );
    // The read-only and the idempotent call run again on a new instance, well within their
    // deadline; one after the other, as either may have ended the first instance (suspect tools
    // run alone until one of their calls is answered).
    assert_eq!(text(&c.response(&sleep).await), "sleep after 300 ms");
    assert_eq!(text(&c.response(&lookup).await), "lookup after 300 ms");
    assert!(crashed.elapsed() >= ms(600) && crashed.elapsed() < ms(800), "{:?}", crashed.elapsed());
    assert_eq!(fake.links.lock().unwrap().len(), 2);
    let second = fake.link(1);
    assert_eq!((calls_of(&second, "sleep").len(), calls_of(&second, "lookup").len()), (1, 1));
    assert_eq!(calls_of(&second, "write"), Vec::<Value>::new(), "an unsafe call was repeated");
}

/// A request lost on a link that lives on (an HTTP response stream broke).
#[tokio::test(start_paused = true)]
async fn a_lost_request_is_repeated_only_if_it_never_arrived_or_is_safe_to_repeat() {
    let (server, fake) = start("", true);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    let link = fake.link(0);
    let upstream_of = |tool: &str, n: usize| calls_of(&link, tool)[n]["id"].as_u64().expect("an id");

    // Never delivered: repeated whatever the tool, on the same instance.
    let id = c.send("tools/call", json!({"name": "write", "arguments": {"ms": 50}})).await;
    tokio::time::sleep(ms(10)).await;
    link.lose(upstream_of("write", 0), Lost { cause: "connection refused".into(), delivery: Delivery::No });
    assert_eq!(text(&c.response(&id).await), "write after 50 ms");
    assert_eq!(calls_of(&link, "write").len(), 2);

    // Maybe delivered: an unsafe call fails at once, saying it may have run...
    let id = c.send("tools/call", json!({"name": "write", "arguments": {"ms": 5000}})).await;
    tokio::time::sleep(ms(10)).await;
    link.lose(upstream_of("write", 2), Lost { cause: "the stream ended".into(), delivery: Delivery::Maybe });
    let lost = Instant::now();
    let resp = c.response(&id).await;
    assert_eq!(lost.elapsed(), Duration::ZERO);
    let (code, msg) = error(&resp);
    assert_eq!(code, -32003, "{resp}");
    assert!(
        msg.starts_with(
            "tools/call `write` on server `fake` got no response: the stream ended (instance fake#1). It may have run"
        ),
        "{msg}"
    );
    assert_eq!(calls_of(&link, "write").len(), 3, "an unsafe call was repeated");

    // ...and a read-only one is repeated.
    let id = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 50}})).await;
    tokio::time::sleep(ms(10)).await;
    link.lose(upstream_of("sleep", 0), Lost { cause: "the stream ended".into(), delivery: Delivery::Maybe });
    assert_eq!(text(&c.response(&id).await), "sleep after 50 ms");
    assert_eq!(calls_of(&link, "sleep").len(), 2);
}

/// e2e: a_full_queue_answers_busy_at_once_and_waiters_are_told_why.
#[tokio::test(start_paused = true)]
async fn a_full_pool_queues_a_call_until_the_first_finishes_and_refuses_past_max_queue() {
    let (server, fake) = start("[pools.default]\nmax = 1\nmax_inflight = 1\nmax_queue = 1\n", true);
    let mut c = Client::connect(&server).await;
    let started = Instant::now();
    let slow = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 1600}})).await;
    tokio::time::sleep(ms(10)).await;
    let queued = c.send("tools/call", json!({"name": "echo", "arguments": {"text": "queued"}})).await;
    tokio::time::sleep(ms(10)).await;
    let asked = Instant::now();
    let refused = c.call("echo", json!({"text": "refused"})).await;
    assert_eq!(asked.elapsed(), Duration::ZERO, "a full queue must answer at once");
    let (code, msg) = error(&refused);
    assert_eq!(code, -32002, "{refused}");
    assert_eq!(
        msg,
        "server `fake` is busy: tools/call `echo` was refused: pool `default` has 1 calls queued already (max_queue = 1); try again shortly or raise `max_queue`/`max` of the pool"
    );
    let link = fake.link(0);
    assert_eq!(received(&link, "tools/call").len(), 1, "a call went past a busy serial instance");
    assert_eq!(text(&c.response(&slow).await), "sleep after 1600 ms");
    assert_eq!(started.elapsed(), ms(1600));
    // The queued call goes the moment the first one is answered.
    assert_eq!(text(&c.response(&queued).await), "queued");
    assert_eq!(started.elapsed(), ms(1600));
    let texts: Vec<Value> =
        received(&link, "tools/call").iter().map(|m| m["params"]["arguments"]["text"].clone()).collect();
    assert_eq!(texts, [Value::Null, json!("queued")], "the refused call reached the server");
    assert_eq!(fake.links.lock().unwrap().len(), 1);
}

/// No separate limit on the wait in the queue: the call's own deadline ends it.
#[tokio::test(start_paused = true)]
async fn a_queued_call_times_out_at_its_own_deadline_saying_what_it_waited_for() {
    let cfg =
        "[limits]\ncall_timeout_ms = 500\nmax_call_timeout_ms = 5000\n[pools.default]\nmax = 1\nmax_inflight = 1\n";
    let (server, fake) = start(cfg, true);
    let mut c = Client::connect(&server).await;
    // The first call keeps the only instance past 500 ms by reporting progress.
    let args = json!({"name": "sleep", "arguments": {"ms": 2000, "progress_ms": 100}, "_meta": {"progressToken": 1}});
    let slow = c.send("tools/call", args).await;
    tokio::time::sleep(ms(10)).await;
    let started = Instant::now();
    let resp = c.call("echo", json!({"text": "never sent"})).await;
    assert_eq!(started.elapsed(), ms(500));
    let (code, msg) = error(&resp);
    assert_eq!(code, -32001, "{resp}");
    assert!(
        msg.starts_with(
            "tools/call `echo` on server `fake` timed out after 0.5 s while waiting for an instance of pool `default` (1 calls queued, this one included; 1 of 1 instances busy, 0 starting); it never reached the server"
        ),
        "{msg}"
    );
    // It was never sent, so nothing was cancelled upstream: the error does not say so.
    assert!(!msg.contains("cancelled it upstream"), "{msg}");
    assert_eq!(calls_of(&fake.link(0), "echo"), Vec::<Value>::new());
    assert_eq!(text(&c.response(&slow).await), "sleep after 2000 ms");
}

/// e2e: the_waiting_notice_counts_true_and_respects_level_and_capability.
#[tokio::test(start_paused = true)]
async fn the_waiting_notice_comes_after_a_second_and_only_if_the_client_may_hear_it() {
    let cfg = "[pools.default]\nmax = 1\nmax_inflight = 1\n";
    let (server, _fake) = start(cfg, true);
    let mut c = Client::connect(&server).await;
    let slow = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 3000}})).await;
    tokio::time::sleep(ms(10)).await;
    let waits = c.send("tools/call", json!({"name": "echo", "arguments": {"text": "w"}})).await;
    tokio::time::sleep(ms(990)).await;
    assert_eq!(c.take(Some("notifications/message")), Vec::<Value>::new(), "told before a second passed");
    tokio::time::sleep(ms(20)).await;
    let notices = c.take(Some("notifications/message"));
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["params"]["level"], "info");
    assert_eq!(
        notices[0]["params"]["data"],
        "switchyard: tools/call `echo` on server `fake` is waiting for an instance of pool `default` (1 calls queued, this one included; 1 of 1 instances busy, 0 starting)"
    );
    assert_eq!(text(&c.response(&waits).await), "w");
    c.response(&slow).await;

    // A client that asked for emergencies only is not told.
    let r = c.request("logging/setLevel", json!({"level": "emergency"})).await;
    assert!(r.get("result").is_some(), "{r}");
    let slow = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 2000}})).await;
    tokio::time::sleep(ms(10)).await;
    let waits = c.send("tools/call", json!({"name": "echo", "arguments": {"text": "w"}})).await;
    c.response(&waits).await;
    c.response(&slow).await;
    assert_eq!(c.take(Some("notifications/message")), Vec::<Value>::new());

    // Nor is the client of a server without the logging capability.
    let (server, _fake) = start(cfg, false);
    let mut c = Client::connect(&server).await;
    let slow = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 2000}})).await;
    tokio::time::sleep(ms(10)).await;
    let waits = c.send("tools/call", json!({"name": "echo", "arguments": {"text": "w"}})).await;
    c.response(&waits).await;
    c.response(&slow).await;
    assert_eq!(c.take(Some("notifications/message")), Vec::<Value>::new());
}

#[tokio::test(start_paused = true)]
async fn replies_in_reverse_order_reach_the_clients_own_ids() {
    let (server, fake) = start("", true);
    let mut c = Client::connect(&server).await;
    c.send_with_id(json!("a"), "tools/call", json!({"name": "hang", "arguments": {"n": 1}})).await;
    c.send_with_id(json!(100), "tools/call", json!({"name": "hang", "arguments": {"n": 2}})).await;
    tokio::time::sleep(ms(10)).await;
    let link = fake.link(0);
    let sent = calls_of(&link, "hang");
    assert_eq!(sent.len(), 2, "both calls share the one instance");
    let ups: Vec<u64> = sent.iter().map(|m| m["id"].as_u64().expect("the router's own numeric ids")).collect();
    assert_ne!(ups[0], ups[1]);
    assert_eq!(
        (sent[0]["params"]["arguments"]["n"].as_u64(), sent[1]["params"]["arguments"]["n"].as_u64()),
        (Some(1), Some(2))
    );
    link.reply(&answer(ups[1], "second"));
    link.reply(&answer(ups[0], "first"));
    tokio::time::sleep(ms(10)).await;
    let got = c.take(None);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!((&got[0]["id"], text(&got[0])), (&json!(100), "second"));
    assert_eq!((&got[1]["id"], text(&got[1])), (&json!("a"), "first"));
}

#[tokio::test(start_paused = true)]
async fn a_client_cancel_reaches_the_server_and_the_call_gets_no_answer() {
    let (server, fake) = start("", true);
    let mut c = Client::connect(&server).await;
    c.send_with_id(json!(5), "tools/call", json!({"name": "hang", "arguments": {}})).await;
    tokio::time::sleep(ms(10)).await;
    let link = fake.link(0);
    let upstream = calls_of(&link, "hang")[0]["id"].as_u64().expect("an id");
    c.notify("notifications/cancelled", json!({"requestId": 5, "reason": "changed my mind"})).await;
    tokio::time::sleep(ms(10)).await;
    let cancels = received(&link, "notifications/cancelled");
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    assert_eq!(cancels[0]["params"], json!({"requestId": upstream, "reason": "changed my mind"}));
    link.reply(&answer(upstream, "late"));
    // The id may be used again at once; the cancelled call is never answered.
    c.send_with_id(json!(5), "tools/call", json!({"name": "echo", "arguments": {"text": "again"}})).await;
    assert_eq!(text(&c.response(&json!(5)).await), "again");
    tokio::time::sleep(ms(10)).await;
    assert_eq!(c.take(None), Vec::<Value>::new());
}

/// A client that closes its input still gets what is answered within the grace (2 s); the
/// rest is cancelled upstream then.
#[tokio::test(start_paused = true)]
async fn closing_the_input_leaves_calls_a_grace_to_finish_then_cancels_the_rest_upstream() {
    let (server, fake) = start("", true);
    let mut c = Client::connect(&server).await;
    let quick = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 1000}})).await;
    let stuck = c.send("tools/call", json!({"name": "hang", "arguments": {}})).await;
    tokio::time::sleep(ms(10)).await;
    let closed = Instant::now();
    c.out.shutdown().await.expect("close the input");
    assert_eq!(text(&c.response(&quick).await), "sleep after 1000 ms");
    let link = fake.link(0);
    tokio::time::sleep_until(closed + ms(1990)).await;
    assert_eq!(received(&link, "notifications/cancelled"), Vec::<Value>::new(), "cancelled before the grace ended");
    tokio::time::sleep(ms(20)).await;
    let cancels = received(&link, "notifications/cancelled");
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    assert_eq!(cancels[0]["params"]["requestId"], calls_of(&link, "hang")[0]["id"]);
    assert_eq!(cancels[0]["params"]["reason"], "the client disconnected");
    assert!(c.take(None).iter().all(|m| m["id"] != stuck), "the departed client's call was answered");
}

/// The server is killed and takes 1.5 s to come back (connections refused meanwhile): a call
/// that is read-only by the server's own annotations waits for it, backing off, and succeeds;
/// an unsafe one fails at once.
#[tokio::test(start_paused = true)]
async fn a_safe_call_waits_for_a_restarting_server_and_succeeds() {
    let (server, fake) = start("", true);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    let sleep = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 300}})).await;
    let write = c.send("tools/call", json!({"name": "write", "arguments": {"ms": 300}})).await;
    tokio::time::sleep(ms(50)).await;
    *fake.refuse.lock().unwrap() = Some("connection refused".into());
    fake.link(0).end("the link broke");
    let crashed = Instant::now();
    let back = fake.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(1500)).await;
        *back.refuse.lock().unwrap() = None;
    });
    let resp = c.response(&write).await;
    assert_eq!((error(&resp).0, crashed.elapsed()), (-32003, Duration::ZERO), "{resp}");
    assert_eq!(text(&c.response(&sleep).await), "sleep after 300 ms");
    // Back at 1.5 s; the repeats back off 100 ms doubling to a second (with jitter), and the
    // crash-loop guard may hold a start back a second more: well within the 10 s the server gets.
    assert!(crashed.elapsed() < ms(5000), "{:?}", crashed.elapsed());
    assert_eq!(calls_of(&fake.link(1), "write"), Vec::<Value>::new(), "an unsafe call was repeated");
}

/// A safe call repeated after a crash has the rest of its own time to run (300 s by default),
/// not only the 10 s the server gets to come back: a 12 s call whose instance died 0.5 s in
/// succeeds on the new one.
#[tokio::test(start_paused = true)]
async fn a_repeat_after_a_crash_keeps_the_call_s_own_deadline() {
    let (server, fake) = start("", true);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    let id = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 12000}})).await;
    tokio::time::sleep(ms(500)).await;
    fake.link(0).end("killed by signal 9");
    let resp = c.response(&id).await;
    assert_eq!(text(&resp), "sleep after 12000 ms", "{resp}");
    assert_eq!(calls_of(&fake.link(1), "sleep").len(), 1);
}

/// A repeat that finds no instance within the server's time to come back says that, not that
/// the call timed out (which would send the user to raise a timeout that did not limit it).
#[tokio::test(start_paused = true)]
async fn a_repeat_that_finds_no_instance_in_time_blames_the_server_not_the_timeout() {
    // Once muted, the server answers nothing: the next instance never finishes its initialize.
    let muted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (inner, mute) = (fake_server(true), muted.clone());
    let behaviour: Behaviour = Arc::new(move |link, msg| {
        if !mute.load(std::sync::atomic::Ordering::SeqCst) {
            inner(link, msg)
        }
    });
    let (server, fake) = start_with("[limits]\ninit_timeout_ms = 60000\n", behaviour);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    let id = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 1000}})).await;
    tokio::time::sleep(ms(100)).await;
    muted.store(true, std::sync::atomic::Ordering::SeqCst);
    fake.link(0).end("killed by signal 9");
    let lost = Instant::now();
    let resp = c.response(&id).await;
    let (_, msg) = error(&resp);
    assert!(lost.elapsed() >= ms(9500) && lost.elapsed() < ms(11000), "{:?}: {resp}", lost.elapsed());
    assert!(msg.contains("not back within 10 s"), "{msg}");
    assert!(!msg.contains("raise the timeout") && !msg.contains("timed out"), "{msg}");
}

/// A safe call repeated until the server's crash-loop guard gave up says how often it was
/// tried, for how long and why, and not that only safe calls are repeated.
#[tokio::test(start_paused = true)]
async fn a_repeated_call_that_never_succeeds_says_how_often_and_why() {
    let (server, fake) = start("", true);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    let id = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 300}})).await;
    tokio::time::sleep(ms(50)).await;
    *fake.refuse.lock().unwrap() = Some("connection refused".into());
    fake.link(0).end("the link broke");
    let resp = c.response(&id).await;
    let (code, msg) = error(&resp);
    assert_eq!(code, -32003, "{resp}");
    assert!(msg.starts_with("tools/call `sleep` on server `fake` failed "), "{msg}");
    assert!(msg.contains("switchyard repeated it because it is safe to repeat"), "{msg}");
    assert!(msg.contains("connection refused"), "the last cause: {msg}");
    assert!(!msg.contains("repeats only calls"), "{msg}");
    let attempts = resp["error"]["data"]["attempts"].as_u64().unwrap();
    assert!((3..=13).contains(&attempts), "{resp}");
}

/// Progress on a token only ever increases: a repeated call's server counts from the start
/// again, and that is held back until it passes what the client has seen.
#[tokio::test(start_paused = true)]
async fn progress_stays_rising_across_a_repeat() {
    let (server, fake) = start("", true);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    let args = json!({"ms": 1000, "progress_ms": 100});
    let id = c.send("tools/call", json!({"name": "sleep", "arguments": args, "_meta": {"progressToken": "p"}})).await;
    tokio::time::sleep(ms(450)).await;
    fake.link(0).end("the link broke");
    let resp = c.response(&id).await;
    assert_eq!(text(&resp), "sleep after 1000 ms");
    let seen: Vec<f64> =
        c.take(Some("notifications/progress")).iter().map(|n| n["params"]["progress"].as_f64().unwrap()).collect();
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "progress went back: {seen:?}");
    assert_eq!(seen.first(), Some(&100.0));
    assert_eq!(seen.last(), Some(&900.0), "the repeat's progress past what was seen goes on: {seen:?}");
}

/// A read-only `sleep` whose link is found dead after 12 s of silence while it runs: its
/// response, and how long after the link's end it came.
async fn sleep_on_a_link_found_silent(server: &Arc<Server>, fake: &FakeConnector) -> (Value, Duration) {
    let mut c = Client::connect(server).await;
    c.request("tools/list", json!({})).await;
    let id = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 300}})).await;
    tokio::time::sleep(ms(50)).await;
    fake.link(0).end_quiet("the link went silent", Duration::from_secs(12));
    let ended = Instant::now();
    let resp = c.response(&id).await;
    (resp, ended.elapsed())
}

/// A link found dead after 12 s of silence where a fresh link works (a NAT timeout or a sleep
/// killed only the old connection): a read-only call on it is repeated on the new link at once.
#[tokio::test(start_paused = true)]
async fn a_safe_call_on_a_link_found_silent_is_repeated_on_a_fresh_link() {
    let (server, fake) = start("", true);
    let (resp, took) = sleep_on_a_link_found_silent(&server, &fake).await;
    assert_eq!(text(&resp), "sleep after 300 ms", "{resp}");
    assert!(took < ms(1000), "answered only after {took:?}");
    assert_eq!(calls_of(&fake.link(1), "sleep").len(), 1, "not repeated on the fresh link");
}

/// The same where the path is still dead (the fresh link's initialize sits in the black hole
/// too): the call gets the short time a fresh link has and is answered naming the silent link,
/// not repeated into a path that stays dead until its deadline.
#[tokio::test(start_paused = true)]
async fn a_safe_call_on_a_link_found_silent_gives_up_when_no_fresh_link_comes() {
    let answering = fake_server(true);
    let initialised = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let black_hole: crate::upstream::fake::Behaviour = Arc::new(move |link, msg| {
        if msg.line.contains("\"initialize\"") && initialised.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0 {
            return;
        }
        answering(link, msg);
    });
    let (server, fake) = start_with("", black_hole);
    let (resp, took) = sleep_on_a_link_found_silent(&server, &fake).await;
    // A fresh link gets 3 s (retry::SILENT_REPEAT).
    assert!(took <= ms(3100), "answered only after {took:?}");
    let (code, msg) = error(&resp);
    assert_eq!(code, -32003, "{resp}");
    assert!(msg.contains("The first attempt: instance fake#1 ended (the link went silent)"), "{msg}");
    assert!(msg.contains("may have run"), "{msg}");
    let links = fake.links.lock().unwrap().len();
    let repeated: usize = (1..links).map(|n| calls_of(&fake.link(n), "sleep").len()).sum();
    assert_eq!(repeated, 0, "a call reached a link whose initialize never came back");
}

/// A pool of two: both instances hear a client's roots change and each logs it, but the client
/// hears it once (the lowest-numbered ready instance speaks for the pool when no call is on
/// either); a log that belongs to a call still reaches its session from whichever instance.
#[tokio::test(start_paused = true)]
async fn a_pool_says_once_what_each_of_its_instances_says_on_its_own() {
    let inner = fake_server(true);
    let logging: crate::upstream::fake::Behaviour = Arc::new(move |link, msg| {
        if msg.line.contains("notifications/roots/list_changed") {
            let params = json!({"level": "info", "data": "Roots updated"});
            link.reply(&json!({"jsonrpc": "2.0", "method": "notifications/message", "params": params}).to_string());
        }
        inner(link, msg);
    });
    let (server, fake) = start_with("[pools.default]\nmin = 2\nmax = 2\n", logging);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    tokio::time::sleep(ms(100)).await;
    assert_eq!(fake.links.lock().unwrap().len(), 2, "min = 2 runs two instances");
    c.take(Some("notifications/message"));
    c.notify("notifications/roots/list_changed", json!({})).await;
    tokio::time::sleep(ms(200)).await;
    let heard = (0..2).filter(|n| received(&fake.link(*n), "notifications/roots/list_changed").len() == 1).count();
    assert_eq!(heard, 2, "both instances heard the change");
    let logs = c.take(Some("notifications/message"));
    assert_eq!(logs.len(), 1, "the client heard the pool's log {} times: {logs:?}", logs.len());
}

/// A log the server sends a moment after it answered a call (servers log a call's last steps)
/// reaches the session whose call it was, and only that one, though no call is in flight then.
#[tokio::test(start_paused = true)]
async fn a_log_that_trails_its_call_reaches_that_call_s_session_alone() {
    let inner = fake_server(true);
    let trailing: Behaviour = Arc::new(move |link, msg| {
        if msg.line.contains(r#""name":"echo""#) {
            let link = link.clone();
            tokio::spawn(async move {
                tokio::time::sleep(ms(300)).await;
                let params = json!({"level": "info", "data": "echo: done"});
                link.reply(&json!({"jsonrpc": "2.0", "method": "notifications/message", "params": params}).to_string());
            });
        }
        inner(link, msg);
    });
    let (server, _fake) = start_with("", trailing);
    let mut a = Client::connect(&server).await;
    let mut b = Client::connect(&server).await;
    a.request("tools/list", json!({})).await;
    assert_eq!(text(&a.call("echo", json!({"text": "x"})).await), "x");
    tokio::time::sleep(ms(500)).await;
    let heard: Vec<Value> = a.take(Some("notifications/message"));
    assert_eq!(heard.len(), 1, "the call's own session did not hear its log: {heard:?}");
    assert_eq!(heard[0]["params"]["data"], "echo: done");
    assert_eq!(b.take(Some("notifications/message")), Vec::<Value>::new(), "another session heard it");
}

/// An error with id null while two calls are in flight answers the one the server leaves
/// unanswered once it has answered the other, not at that call's deadline.
#[tokio::test(start_paused = true)]
async fn an_error_with_id_null_answers_the_call_left_once_the_others_are_answered() {
    let inner = fake_server(true);
    let null_for_bad: Behaviour = Arc::new(move |link, msg| {
        if msg.line.contains(r#""name":"bad""#) {
            let error = json!({"code": -32600, "message": "Invalid request: bad arguments"});
            return link.reply(&json!({"jsonrpc": "2.0", "id": null, "error": error}).to_string());
        }
        inner(link, msg);
    });
    let (server, _fake) = start_with("", null_for_bad);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    let started = Instant::now();
    let slow = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 500}})).await;
    let bad = c.send("tools/call", json!({"name": "bad", "arguments": {}})).await;
    let resp = c.response(&bad).await;
    assert_eq!(error(&resp), (-32600, "Invalid request: bad arguments"), "{resp}");
    assert_eq!(started.elapsed(), ms(500), "answered only at its deadline, or before the other call");
    assert_eq!(text(&c.response(&slow).await), "sleep after 500 ms");
}

/// A link that died without a word while the server stays reachable: nothing tells a dead
/// connection from a slow tool. A call the server declares read-only is sent once more on a new
/// connection after a window and a probe's time of silence, and the copy's answer is the call's;
/// the first copy is cancelled. A call that is not safe to repeat is never sent twice.
#[tokio::test(start_paused = true)]
async fn a_safe_call_silent_on_a_live_link_is_sent_once_more_and_the_first_answer_wins() {
    let inner = fake_server(true);
    // The first `hang` goes into a dead connection: never answered. Its copy is.
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = seen.clone();
    let behaviour: crate::upstream::fake::Behaviour = Arc::new(move |link, msg| {
        let m: Value = serde_json::from_str(&msg.line).unwrap();
        let tool = m["params"]["name"].as_str().unwrap_or_default().to_string();
        if m["method"] == "tools/call" && (tool == "hang" || tool == "write") {
            if tool == "hang" && counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                link.reply(&answer(msg.request.unwrap(), "from the copy"));
            }
            return;
        }
        inner(link, msg);
    });
    let (server, fake) = start_with("[limits]\ncall_timeout_ms = 60000\n", behaviour);
    let mut c = Client::connect(&server).await;
    c.request("tools/list", json!({})).await;
    let link = fake.link(0);
    *link.silent_since.lock().unwrap() = Some(Instant::now());
    let sent = Instant::now();
    let hang = c.send("tools/call", json!({"name": "hang", "arguments": {}})).await;
    let write = c.send("tools/call", json!({"name": "write", "arguments": {}})).await;
    let resp = c.response(&hang).await;
    assert_eq!(text(&resp), "from the copy");
    // A window (10 s), a probe's time (2.5 s) and half a second.
    assert_eq!(sent.elapsed(), ms(13_000), "sent once more after {:?}", sent.elapsed());
    let hangs = calls_of(&link, "hang");
    assert_eq!(hangs.len(), 2);
    let cancelled = received(&link, "notifications/cancelled");
    assert!(
        cancelled.iter().any(|n| n["params"]["requestId"] == hangs[0]["id"]),
        "the first copy was not cancelled: {cancelled:?}"
    );
    // The write waits for its own deadline, sent once.
    let resp = c.response(&write).await;
    assert_eq!(error(&resp).0, -32001, "{resp}");
    assert_eq!(calls_of(&link, "write").len(), 1, "a call that is not safe to repeat was sent twice");
}

/// Clients that the server could tell apart (other capabilities) get instances initialised with
/// their own initialize; clients alike share one. Before, every client shared the instance the
/// first client's initialize had set up.
#[tokio::test(start_paused = true)]
async fn a_client_with_other_capabilities_gets_instances_initialised_for_it() {
    let (server, fake) = start_family("");
    let mut bare = Client::connect(&server).await;
    assert_eq!(bare.call_text_of("echo", "one").await, "one");
    let mut sampling = Client::connect_with(&server, json!({"sampling": {}})).await;
    assert_eq!(sampling.call_text_of("echo", "two").await, "two");
    let mut bare_again = Client::connect(&server).await;
    assert_eq!(bare_again.call_text_of("echo", "three").await, "three");
    let links = fake.links.lock().unwrap().len();
    assert_eq!(links, 2, "one instance per profile");
    let caps = |n: usize| received(&fake.link(n), "initialize")[0]["params"]["capabilities"].clone();
    assert_eq!(caps(0), json!({}));
    assert_eq!(caps(1), json!({"sampling": {}}));
    assert_eq!(calls_of(&fake.link(1), "echo").len(), 1, "the sampling client's call went elsewhere");
    assert_eq!(calls_of(&fake.link(0), "echo").len(), 2);
}

/// Two clients with the same roots share an instance; when one says its roots changed it moves
/// to instances for its new roots, which are answered with them; the other's instance keeps the
/// roots it had and hears of no change.
#[tokio::test(start_paused = true)]
async fn a_client_whose_roots_change_moves_to_instances_for_them() {
    let (server, fake) = start_family("");
    let caps = json!({"roots": {"listChanged": true}});
    let roots = |dir: &str| json!({"roots": [{"uri": format!("file:///{dir}")}]});
    let mut a = Client::connect_with(&server, caps.clone()).await;
    a.answer_roots(roots("project")).await;
    assert_eq!(a.call_text_of("echo", "a").await, "a");
    let mut b = Client::connect_with(&server, caps).await;
    b.answer_roots(roots("project")).await;
    assert_eq!(b.call_text_of("echo", "b").await, "b");
    assert_eq!(fake.links.lock().unwrap().len(), 1, "alike clients share an instance");
    b.notify("notifications/roots/list_changed", json!({})).await;
    b.answer_roots(roots("elsewhere")).await;
    assert_eq!(b.call_text_of("echo", "b2").await, "b2");
    assert_eq!(fake.links.lock().unwrap().len(), 2, "the client with new roots got an instance of its own");
    assert_eq!(calls_of(&fake.link(1), "echo").len(), 1);
    assert!(
        received(&fake.link(0), "notifications/roots/list_changed").is_empty(),
        "the first instance heard of another's roots"
    );
    assert_eq!(a.call_text_of("echo", "a2").await, "a2");
    assert_eq!(calls_of(&fake.link(0), "echo").len(), 3);
}

impl Client {
    /// Calls `echo`-like `tool` with `text` and returns the text of its result.
    async fn call_text_of(&mut self, tool: &str, t: &str) -> String {
        let resp = self.call(tool, json!({"text": t})).await;
        text(&resp).to_string()
    }

    /// Waits for switchyard's roots/list and answers it with `result`.
    async fn answer_roots(&mut self, result: Value) {
        loop {
            let asked = self.take(Some("roots/list"));
            if let Some(ask) = asked.first() {
                let id = ask["id"].clone();
                return self.write(json!({"jsonrpc": "2.0", "id": id, "result": result})).await;
            }
            let next = tokio::time::timeout(Duration::from_secs(60), self.inbox.recv()).await;
            self.held.push(next.expect("no roots/list within a minute").expect("the session ended"));
        }
    }
}

/// A server of 2025-11-25 tasks: a `tools/call` with `params.task` creates a task in the memory
/// of the instance (the link) that ran it; `tasks/get` and `tasks/result` know only that
/// instance's tasks, as an SDK's in-memory task store does; `tasks/list` lists them all.
fn task_server() -> Behaviour {
    let held: Arc<std::sync::Mutex<Vec<(usize, String)>>> = Arc::default();
    Arc::new(move |link, msg| {
        let Some(id) = msg.request else { return };
        let m: Value = serde_json::from_str(&msg.line).expect("the router sends JSON");
        let me = Arc::as_ptr(link) as usize;
        let task =
            |t: &str| json!({"taskId": t, "status": "completed", "ttl": 60000, "createdAt": "x", "lastUpdatedAt": "x"});
        let result = match m["method"].as_str().unwrap_or_default() {
            "initialize" => {
                json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}, "tasks": {"list": {}}},
                                   "serverInfo": {"name": "fake", "version": "1"}})
            }
            "tools/call" if m["params"]["task"].is_object() => {
                // Created after a moment, so calls made at once overlap and spread over the pool.
                let t = format!("task-{id}");
                held.lock().unwrap().push((me, t.clone()));
                let created = json!({"task": {"taskId": t, "status": "working", "ttl": 60000, "createdAt": "x", "lastUpdatedAt": "x"}});
                let link = link.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(ms(100)).await;
                    link.reply(&json!({"jsonrpc": "2.0", "id": id, "result": created}).to_string());
                });
                return;
            }
            method @ ("tasks/get" | "tasks/result") => {
                let t = m["params"]["taskId"].as_str().unwrap_or_default().to_string();
                if !held.lock().unwrap().contains(&(me, t.clone())) {
                    let e = json!({"code": -32602, "message": format!("Task not found: {t}")});
                    return link.reply(&json!({"jsonrpc": "2.0", "id": id, "error": e}).to_string());
                }
                match method {
                    "tasks/get" => task(&t),
                    _ => json!({"content": [{"type": "text", "text": t}],
                                "_meta": {"io.modelcontextprotocol/related-task": {"taskId": t}}}),
                }
            }
            "tasks/list" => {
                let mine: Vec<Value> =
                    held.lock().unwrap().iter().filter(|(l, _)| *l == me).map(|(_, t)| task(t)).collect();
                json!({"tasks": mine})
            }
            _ => json!({}),
        };
        link.reply(&json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string());
    })
}

/// Tasks over a pool of three: each poll and result reaches the instance holding its task; ids
/// are switchyard's own and unforgeable; another session sees none of them; a task whose instance
/// ended is answered at once as not found, never polled elsewhere.
#[tokio::test(start_paused = true)]
async fn tasks_are_routed_to_the_instance_that_holds_them() {
    let (server, fake) = start_with("[pools.default]\nmin = 3\nmax = 3\n", task_server());
    let mut c = Client::connect(&server).await;
    // Six at once, so the pool spreads them.
    let mut ids = Vec::new();
    for i in 0..6 {
        let args = json!({"name": "research", "arguments": {"topic": i}, "task": {"ttl": 60000}});
        ids.push(c.send("tools/call", args).await);
    }
    let mut tasks = Vec::new();
    for id in &ids {
        let r = c.response(id).await;
        let t = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("no task: {r}")).to_string();
        assert!(t.starts_with("sy-task."), "the client gets switchyard's id: {t}");
        tasks.push(t);
    }
    let used = (0..3).filter(|n| !calls_of(&fake.link(*n), "research").is_empty()).count();
    assert_eq!(used, 3, "the tasks were spread over the pool");
    for t in &tasks {
        let g = c.request("tasks/get", json!({"taskId": t})).await;
        assert_eq!(
            (g["result"]["taskId"].as_str(), g["result"]["status"].as_str()),
            (Some(t.as_str()), Some("completed")),
            "{g}"
        );
        let r = c.request("tasks/result", json!({"taskId": t})).await;
        assert_eq!(r["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], json!(t), "{r}");
    }
    let listed = c.request("tasks/list", json!({})).await;
    let mut got: Vec<String> = listed["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    let mut want = tasks.clone();
    want.sort();
    assert_eq!(got, want, "{listed}");

    // Another session: none of them is its own, and its list is empty.
    let mut other = Client::connect(&server).await;
    let r = other.request("tasks/get", json!({"taskId": tasks[0]})).await;
    let (code, msg) = error(&r);
    assert_eq!(code, -32602);
    assert!(msg.contains("not created in this session"), "{msg}");
    let theirs = other.request("tasks/list", json!({})).await;
    assert_eq!(theirs["result"]["tasks"], json!([]), "{theirs}");
    // A forged or altered id is unknown.
    let mut forged = tasks[0].clone();
    forged.pop();
    forged.push('x');
    for bad in ["task-3", forged.as_str()] {
        let r = c.request("tasks/get", json!({"taskId": bad})).await;
        let (code, msg) = error(&r);
        assert_eq!(code, -32602, "{r}");
        assert!(msg.contains("did not hand out this task id"), "{msg}");
    }

    // The instance holding the first task ends: its task is gone, said at once.
    let holder = crate::server::tasks::open("fake", &tasks[0]).unwrap().instance;
    let inst = server.all_instances().into_iter().find(|i| i.number() == holder).expect("running");
    inst.kill().await;
    let started = Instant::now();
    let r = c.request("tasks/get", json!({"taskId": tasks[0]})).await;
    let (code, msg) = error(&r);
    assert_eq!(code, -32602, "{r}");
    assert!(msg.contains("has ended"), "{msg}");
    assert!(started.elapsed() < ms(100), "answered at once: {:?}", started.elapsed());
}

/// A policy of the probe fixture plugin alone, which refuses the `methods` with what it was
/// told of each call as JSON (kept in the returned directory).
async fn probe_policy(methods: &[&str]) -> (Policy, tempfile::TempDir) {
    probe_policy_with(methods, "").await
}

/// [`probe_policy`] with `more` keys in the probe's `[[plugins]]` entry.
async fn probe_policy_with(methods: &[&str], more: &str) -> (Policy, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let probe = std::path::Path::new(switchyard_policy::TEST_PLUGINS).join("probe-caller.wasm");
    std::fs::copy(&probe, dir.path().join("probe-caller.wasm")).expect("the build made the probe");
    let methods = serde_json::to_string(methods).expect("JSON");
    let toml = format!(
        "[[plugins]]\nfile = \"probe-caller.wasm\"\ndeadline_ms = 1000\nconfig = '{{\"methods\": {methods}}}'\n{more}"
    );
    let config: Config = toml::from_str(&toml).expect("config");
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), CancellationToken::new()).await.expect("loads");
    (policy, dir)
}

/// What the probe plugin was told of the call it refused with `resp`.
fn probed(resp: &Value) -> Value {
    let reason = resp["error"]["data"]["reason"].as_str().unwrap_or_else(|| panic!("not refused by the probe: {resp}"));
    serde_json::from_str(reason).expect("the probe's reason is JSON")
}

/// A plugin's refusal of a tools/call is a tool result the model reads (`isError`: which
/// plugin, why), in both eras (a 2026-07-28 result says its `resultType`), counted as rejected;
/// a refusal of another method is the JSON-RPC error -32004; and an entry that says
/// `refusals = "error"` keeps the error for tools/call too. Nothing refused reaches the server.
/// Real time: the plugin runs on threads of its own.
#[tokio::test]
async fn a_refused_tools_call_is_a_tool_result_unless_the_entry_asks_for_an_error() {
    let (policy, _dir) = probe_policy(&["tools/call", "resources/list"]).await;
    let fake = FakeConnector::new(fake_server(false));
    let server = server_with("", fake.clone(), policy);
    let mut c = Client::connect(&server).await;
    let r = c.call("echo", json!({"text": "x"})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"].get("resultType").is_none() && r.get("error").is_none(), "{r}");
    let said = text(&r);
    let start = "The call of tool `echo` was refused by policy plugin `probe-caller.wasm` and did not run. Reason: {";
    assert!(said.starts_with(start), "{said}");
    let mut c26 = Client::open(&server);
    let r = c26.request("tools/call", json!({"name": "echo", "arguments": {}, "_meta": modern_meta()})).await;
    assert_eq!((&r["result"]["isError"], &r["result"]["resultType"]), (&json!(true), &json!("complete")), "{r}");
    assert!(text(&r).starts_with(start), "{r}");
    let r = c.request("resources/list", json!({})).await;
    let (code, msg) = error(&r);
    assert_eq!(code, -32004, "{r}");
    assert!(msg.starts_with("rejected by policy plugin `probe-caller.wasm`: {"), "{msg}");
    assert!(calls_of(&fake.link(0), "echo").is_empty(), "a refused call reached the server");
    let metrics = server.metrics.encode();
    let rejected =
        metrics.lines().find(|l| l.contains(r#"method="tools/call""#) && l.contains(r#"outcome="rejected""#));
    assert!(rejected.is_some_and(|l| l.ends_with(" 2")), "{metrics}");

    let (policy, _dir) = probe_policy_with(&["tools/call"], "refusals = \"error\"\n").await;
    let server = server_with("", FakeConnector::new(fake_server(false)), policy);
    let mut c = Client::connect(&server).await;
    let r = c.call("echo", json!({"text": "x"})).await;
    let (code, msg) = error(&r);
    assert_eq!(code, -32004, "{r}");
    assert!(msg.starts_with("rejected by policy plugin `probe-caller.wasm`: {"), "{msg}");
    assert_eq!(r["error"]["data"]["plugin"], "probe-caller.wasm", "{r}");
}

/// The log lines that say a call was refused, with their level.
#[derive(Clone, Default)]
struct RefusalLines(Arc<std::sync::Mutex<Vec<(tracing::Level, String)>>>);

impl RefusalLines {
    fn at(&self, level: tracing::Level) -> Vec<String> {
        let lines = self.0.lock().unwrap();
        lines.iter().filter(|(l, _)| *l == level).map(|(_, m)| m.clone()).collect()
    }
}

impl RefusalLines {
    /// A subscriber that keeps the refusal lines here.
    fn subscriber(&self) -> crate::test_log::OnMessage<impl Fn(tracing::Level, &str) + Send + Sync + 'static> {
        let lines = self.0.clone();
        crate::test_log::OnMessage(move |level, message: &str| {
            if message.contains("rejected by") {
                lines.lock().unwrap().push((level, message.to_string()));
            }
        })
    }
}

/// A client that keeps calling a refused tool writes one line at info, not one per call (trial
/// 39: 3,000 lines in 15 s pushed real errors out of the log); the others are at debug, and the
/// metrics count every one. Another tool's refusal gets its own first line. Real time: the
/// plugin runs on threads of its own (the counts over time are `KeyedRepeats`' test).
#[tokio::test]
async fn a_burst_of_refusals_is_one_line_in_the_log_and_every_one_in_the_metrics() {
    let lines = RefusalLines::default();
    let _log = tracing::subscriber::set_default(lines.subscriber());
    let (policy, _dir) = probe_policy(&["tools/call"]).await;
    let server = server_with("", FakeConnector::new(fake_server(false)), policy);
    let mut c = Client::connect(&server).await;
    for _ in 0..200 {
        let r = c.call("echo", json!({"text": "x"})).await;
        assert_eq!(r["result"]["isError"], true, "{r}");
    }
    let info = lines.at(tracing::Level::INFO);
    assert_eq!(info.len(), 1, "{info:#?}");
    assert!(info[0].starts_with("tools/call `echo` rejected by `probe-caller.wasm`: {"), "{}", info[0]);
    assert_eq!(lines.at(tracing::Level::DEBUG).len(), 199);
    c.call("lookup", json!({})).await;
    let info = lines.at(tracing::Level::INFO);
    assert!(info.len() == 2 && info[1].starts_with("tools/call `lookup` rejected"), "{info:#?}");
    let metrics = server.metrics.encode();
    let rejected = |tool: &str| {
        let labels = format!(r#"method="tools/call",tool="{tool}",outcome="rejected""#);
        metrics.lines().find(|l| l.starts_with("switchyard_calls_total") && l.contains(&labels)).map(str::to_string)
    };
    assert!(rejected("echo").is_some_and(|l| l.ends_with(" 200")), "{metrics}");
    assert!(rejected("lookup").is_some_and(|l| l.ends_with(" 1")), "{metrics}");
}

/// A request about a task tells the policy which task (the id the client knows) and the tool
/// whose call created it; a request of another kind names no task. Real time: the plugin runs
/// on threads of its own.
#[tokio::test]
async fn a_policy_sees_the_task_a_request_is_about_and_the_tool_that_created_it() {
    let (policy, _dir) = probe_policy(&["tasks/get", "tasks/result", "tasks/cancel", "resources/list"]).await;
    let fake = FakeConnector::new(task_server());
    let server = server_with("", fake.clone(), policy);
    let mut c = Client::connect(&server).await;
    let created = c.request("tools/call", json!({"name": "research", "arguments": {}, "task": {"ttl": 60000}})).await;
    let task = created["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("no task: {created}")).to_string();
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let seen = probed(&c.request(method, json!({"taskId": task})).await);
        assert_eq!(seen["method"], method, "{seen}");
        assert_eq!(seen["task"], json!({"id": task, "tool": "research"}), "{method}: {seen}");
        assert_eq!(seen["tool"], Value::Null, "a task request calls no tool: {seen}");
        assert_eq!(seen["client"]["name"], "t", "{seen}");
    }
    let seen = probed(&c.request("resources/list", json!({})).await);
    assert_eq!(seen["task"], Value::Null, "a request about no task: {seen}");
    assert!(calls_of(&fake.link(0), "research").len() == 1 && received(&fake.link(0), "tasks/get").is_empty());
}

/// A task created while the session shared the first client's instance is still reached, on
/// that instance, after the session moved to instances of its own (its roots changed): instance
/// numbers are unique across a server and its siblings, so its id names one instance.
#[tokio::test(start_paused = true)]
async fn a_task_created_before_its_session_moved_is_reached_after() {
    let (server, fake) = start_family_with("", task_server());
    let caps = json!({"roots": {"listChanged": true}});
    let roots = |dir: &str| json!({"roots": [{"uri": format!("file:///{dir}")}]});
    let mut a = Client::connect_with(&server, caps.clone()).await;
    a.answer_roots(roots("project")).await;
    let mut b = Client::connect_with(&server, caps).await;
    b.answer_roots(roots("project")).await;
    let created = b.call("research", json!({"topic": 1})).await;
    assert!(created["result"].is_object(), "{created}");
    let args = json!({"name": "research", "arguments": {}, "task": {"ttl": 60000}});
    let r = b.request("tools/call", args).await;
    let task = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("no task: {r}")).to_string();
    b.notify("notifications/roots/list_changed", json!({})).await;
    b.answer_roots(roots("elsewhere")).await;
    b.call("research", json!({"topic": 2})).await;
    assert_eq!(fake.links.lock().unwrap().len(), 2, "the client did not move to instances of its own");
    let g = b.request("tasks/get", json!({"taskId": task})).await;
    assert_eq!(g["result"]["status"], "completed", "{g}");
    assert_eq!(received(&fake.link(1), "tasks/get").len(), 0, "asked the new instance, which never held it");
    let listed = b.request("tasks/list", json!({})).await;
    assert_eq!(listed["result"]["tasks"][0]["taskId"], json!(task), "{listed}");
    let r = a.request("tasks/get", json!({"taskId": task})).await;
    assert!(error(&r).1.contains("not created in this session"), "{r}");
}

/// A remembered initialize answer is used only if it has the shape a server's has: an answers
/// file edited into something else is learned anew, not handed to clients.
#[tokio::test(start_paused = true)]
async fn a_remembered_answer_a_server_would_not_give_is_not_used() {
    let (server, _fake) = start("", true);
    let answers = Arc::new(crate::server::answers::Answers::open(None));
    server.keep_answers(answers.clone(), "k".to_string());
    let profile =
        crate::server::profile::Profile::of_initialize(r#"{"protocolVersion":"2025-06-18","capabilities":{}}"#, None);
    let good =
        r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}"#;
    server.remember_initialize(&profile, good);
    assert_eq!(server.remembered_initialize(&profile).as_deref(), Some(good));
    for bad in [
        r#"{"protocolVersion":"1999-01-01","capabilities":{},"serverInfo":{"name":"EVIL","version":"1"}}"#,
        r#"{"protocolVersion":12,"capabilities":{"tools":5},"serverInfo":{}}"#,
        r#"{"protocolVersion":"2025-06-18","capabilities":5,"serverInfo":{"name":"s"}}"#,
        r#"[]"#,
    ] {
        server.remember_initialize(&profile, bad);
        assert_eq!(server.remembered_initialize(&profile), None, "{bad} was used");
    }
}

/// A policy of the `placement` example alone, with `config` (kept in the returned directory).
async fn placement_policy(config: &str) -> (Policy, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (_, bytes) = switchyard_policy::embedded::EXAMPLES
        .iter()
        .find(|(name, _)| *name == "placement.wasm")
        .expect("the build embeds the placement example");
    std::fs::write(dir.path().join("placement.wasm"), bytes).expect("write the plugin");
    let toml = format!("[[plugins]]\nfile = \"placement.wasm\"\ndeadline_ms = 1000\nconfig = '{config}'\n");
    let config: Config = toml::from_str(&toml).expect("config");
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), CancellationToken::new()).await.expect("loads");
    (policy, dir)
}

/// A call placed under a key runs on an instance of that key's own, and so does the task it
/// creates; the task's polls, which the policy leaves unplaced (they name no tool), still go to
/// that instance, never to the shared one. Real time: the plugin runs on threads of its own.
#[tokio::test]
async fn a_task_poll_goes_to_the_instance_holding_the_task_whatever_its_placement() {
    let (policy, _dir) = placement_policy(r#"{"tools": {"research": {"key": "research"}}}"#).await;
    let fake = FakeConnector::new(task_server());
    let server = server_with("[pools.default]\nmin = 1\nmax = 2\n", fake.clone(), policy);
    let mut c = Client::connect(&server).await;
    let created = c.request("tools/call", json!({"name": "research", "arguments": {}, "task": {"ttl": 60000}})).await;
    let task = created["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("no task: {created}")).to_string();
    assert_eq!(fake.links.lock().unwrap().len(), 2, "the placed call started an instance of its own");
    assert!(calls_of(&fake.link(0), "research").is_empty(), "the placed call ran on the shared instance");
    assert_eq!(calls_of(&fake.link(1), "research").len(), 1);
    let placed = server.all_instances().into_iter().find(|i| i.number() == 2).expect("the key's instance");
    assert_eq!(placed.scope, crate::placement::ScopeKey::Key(Arc::from("research")));
    for method in ["tasks/get", "tasks/result"] {
        let r = c.request(method, json!({"taskId": task})).await;
        assert!(r.get("result").is_some(), "{method}: {r}");
        assert_eq!(received(&fake.link(1), method).len(), 1, "{method} did not reach the task's instance");
        assert!(received(&fake.link(0), method).is_empty(), "{method} went to the shared instance");
    }
}

/// The upkeep sleeps until the next ping or stop is due, not on a tick: an instance idle for 10 s
/// of a 30 s ping period is due in 20 s; one busy now, in a full period; an instance above `min`
/// idle for 4 s of a 5 s idle limit, in 1 s. (The old upkeep woke every second whatever was due.)
#[tokio::test(start_paused = true)]
async fn the_upkeep_sleeps_until_a_ping_or_a_stop_is_due() {
    let (server, _fake) = start("[limits]\nhealth_interval_ms = 30000\n", true);
    let mut pings = crate::server::health::Pings::default();
    let mut c = Client::connect(&server).await;
    assert_eq!(text(&c.call("echo", json!({"text": "hi"})).await), "hi");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(server.next_upkeep(&pings), Duration::from_secs(20));
    // Pinged once it was due: the next ping is an interval after it, whatever the answer was (a
    // server that refuses pings is not asked again at once, in a loop).
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(server.next_upkeep(&pings), ms(100), "due now (the upkeep's floor)");
    let inst = server.all_instances()[0].number();
    pings.started(inst);
    pings.ended(inst);
    assert_eq!(server.next_upkeep(&pings), Duration::from_secs(30), "pinged just now");
    let _busy = c.send("tools/call", json!({"name": "sleep", "arguments": {"ms": 60000}})).await;
    tokio::time::sleep(ms(1)).await;
    assert_eq!(server.next_upkeep(&pings), Duration::from_secs(30), "a busy instance is not due");

    let (server, _fake) =
        start("[pools.default]\nmin = 0\nidle_timeout_ms = 5000\n[limits]\nhealth_interval_ms = 0\n", true);
    let mut c = Client::connect(&server).await;
    assert_eq!(text(&c.call("echo", json!({"text": "hi"})).await), "hi");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(server.next_upkeep(&pings), Duration::from_secs(1));
    // No pings, and shared instances never stopped: only instances placed per client or key
    // would be, after 10 minutes.
    let (server, _fake) = start("[pools.default]\nidle_timeout_ms = 0\n[limits]\nhealth_interval_ms = 0\n", true);
    assert_eq!(server.next_upkeep(&pings), crate::placement::LINGER);
}

mod hooks;

mod crash_loop;

mod twice;
