//! Links that die without a word: `switchyard run --url` in front of the Python SDK server, with
//! the fault proxy stranding connections (silent for good, no FIN or RST: a NAT that forgot
//! them, a laptop that slept) or black-holing everything, all with the default settings. The
//! bounds asserted are the issue's: an idle link that went silent and healed answers the next
//! call within 2 s; a call whose link goes silent is answered within 15 s; so is one whose
//! resumed stream stays silent; a read-only call survives a server restart.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_testkit::http_servers::{HttpServer, PythonServerOptions, RemoteTransport};
use switchyard_testkit::proxy::FaultProxy;
use switchyard_testkit::{Client, Proc, TempDir, temp_dir, tool_text};

use RemoteTransport::{Sse, StreamableHttp};

/// `switchyard run --url URL` with the defaults (an empty config file), initialised, with the
/// server's tools listed (their annotations are what makes a call safe to repeat).
async fn through_switchyard(url: &str, transport: RemoteTransport) -> (Proc, Client, TempDir) {
    with_config(url, transport, "", &[]).await
}

/// As [`through_switchyard`], with `config` in the file and `plugins` (example plugins by file
/// name) in the plugins directory beside it.
async fn with_config(url: &str, transport: RemoteTransport, config: &str, plugins: &[&str]) -> (Proc, Client, TempDir) {
    let dir = temp_dir();
    let file = dir.path().join("switchyard.toml");
    std::fs::write(&file, config).unwrap();
    let plugins_dir = dir.path().join("plugins");
    std::fs::create_dir(&plugins_dir).unwrap();
    for p in plugins {
        std::fs::copy(switchyard_testkit::example_plugins().join(p), plugins_dir.join(p)).unwrap();
    }
    let args = ["--config", file.to_str().unwrap(), "--url", url, "--transport", transport.arg()];
    let mut p = Proc::router(&args);
    let mut c = p.client();
    c.timeout = Duration::from_secs(40);
    // 2025-11-25: the SDK server numbers its stream events (a priming event first) from it on.
    c.initialize_with("2025-11-25").await;
    c.request("tools/list", json!({})).await;
    (p, c, dir)
}

fn error_message(resp: &Value) -> String {
    resp["error"]["message"].as_str().unwrap_or_else(|| panic!("an error response: {resp}")).to_string()
}

/// Calls `tool` and returns the response and how long it took.
async fn timed_call(c: &mut Client, tool: &str, arguments: Value) -> (Value, Duration) {
    let started = Instant::now();
    let resp = c.request("tools/call", json!({"name": tool, "arguments": arguments})).await;
    (resp, started.elapsed())
}

/// An idle link goes silent and the network heals: the next call must not be sent on the dead
/// connection (it would wait for the call's deadline, 300 s by default).
async fn idle_link_case(transport: RemoteTransport) {
    let server = HttpServer::python(transport, &PythonServerOptions::default());
    let proxy = FaultProxy::start(server.addr());
    let (_p, mut c, _d) = through_switchyard(&server.url_via(proxy.addr()), transport).await;
    assert_eq!(c.call_text("echo", json!({"text": "before"})).await, "before");
    proxy.strand();
    // Idle for a while, as a laptop lid closed for a moment.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (resp, took) = timed_call(&mut c, "echo", json!({"text": "after"})).await;
    eprintln!("{transport:?}: idle link stranded and healed -> next call answered in {took:?}");
    assert_eq!(tool_text(&resp), "after", "{resp}");
    assert!(took < Duration::from_secs(2), "the next call took {took:?}");
}

#[tokio::test]
async fn streamable_http_an_idle_link_that_went_silent_answers_the_next_call_at_once() {
    idle_link_case(StreamableHttp).await;
}

/// Legacy SSE: the stream itself is stranded. The stream carries every answer, so the next call
/// finds it silent, the ping probe gets nothing back on it, and the call is repeated on a new
/// stream (echo is read-only) well within 15 s.
#[tokio::test]
async fn legacy_sse_a_stream_that_went_silent_is_replaced_and_the_call_repeated() {
    let server = HttpServer::python(Sse, &PythonServerOptions::default());
    let proxy = FaultProxy::start(server.addr());
    let (_p, mut c, _d) = through_switchyard(&server.url_via(proxy.addr()), Sse).await;
    assert_eq!(c.call_text("echo", json!({"text": "before"})).await, "before");
    proxy.strand();
    let (resp, took) = timed_call(&mut c, "echo", json!({"text": "after"})).await;
    eprintln!("legacy SSE: stream stranded -> read-only call answered in {took:?}");
    assert_eq!(tool_text(&resp), "after", "{resp}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

/// The whole path goes silent in the middle of a call that is not safe to repeat, and the
/// connection it was on never comes back: the call is answered within 15 s with an error that
/// names the link and says it went silent (not that the tool was slow); once the path heals the
/// next call works.
#[tokio::test]
async fn a_call_whose_link_goes_silent_mid_call_is_answered_within_15_s() {
    let server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    let proxy = FaultProxy::start(server.addr());
    let (_p, mut c, _d) = through_switchyard(&server.url_via(proxy.addr()), StreamableHttp).await;
    let id = c.send_request("tools/call", json!({"name": "slow_counter", "arguments": {"ms": 60000}})).await;
    assert!(server.wait_runs("slow_counter", 1, Duration::from_secs(30)), "{}", server.log());
    proxy.strand();
    proxy.black_hole(true);
    let silent = Instant::now();
    let resp = c.wait_response(&id).await;
    let took = silent.elapsed();
    eprintln!("link silent mid-call -> unsafe call answered in {took:?}: {resp}");
    let why = error_message(&resp);
    assert!(took < Duration::from_secs(15), "answered after {took:?}: {why}");
    assert!(why.contains("went silent") && why.contains(&proxy.addr().to_string()), "{why}");
    assert!(why.contains("may have run"), "{why}");
    assert!(!why.contains("Raise the timeout"), "the link failed, not the tool: {why}");
    proxy.black_hole(false);
    let (resp, took) = timed_call(&mut c, "echo", json!({"text": "healed"})).await;
    assert_eq!(tool_text(&resp), "healed", "{resp}");
    eprintln!("after the heal -> next call answered in {took:?}");
    assert_eq!(server.runs("slow_counter"), 1, "an unsafe call was repeated");
}

/// A stream cut in the middle of a call is resumed with `Last-Event-ID`, and the server's event
/// store replays nothing: the resumed stream stays silent. The call (idempotent) is repeated one
/// window later and answered well within 15 s, instead of waiting for its deadline.
#[tokio::test]
async fn a_resumed_stream_that_stays_silent_is_given_up_and_the_call_repeated() {
    let options = PythonServerOptions { forgetful_store: true, ..Default::default() };
    let server = HttpServer::python(StreamableHttp, &options);
    let proxy = FaultProxy::start(server.addr());
    let (_p, mut c, _d) = through_switchyard(&server.url_via(proxy.addr()), StreamableHttp).await;
    let id = c.send_request("tools/call", json!({"name": "slow_echo", "arguments": {"text": "x", "ms": 1500}})).await;
    assert!(server.wait_runs("slow_echo", 1, Duration::from_secs(30)), "{}", server.log());
    let cut = Instant::now();
    proxy.sever();
    let resp = c.wait_response(&id).await;
    let took = cut.elapsed();
    eprintln!("resumed stream silent -> idempotent call answered in {took:?}: {resp}");
    assert_eq!(tool_text(&resp), "x", "{resp}");
    assert!(took < Duration::from_secs(15), "answered after {took:?}");
    assert_eq!(server.runs("slow_echo"), 2, "repeated once, after the resume gave up");
}

/// The server is killed and comes back 1.5 s later on the same port: a read-only call sent while
/// it is down waits for it and succeeds.
#[tokio::test]
async fn a_read_only_call_across_a_server_restart_succeeds() {
    let mut server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    let (_p, mut c, _d) = through_switchyard(&server.url(), StreamableHttp).await;
    assert_eq!(c.call_text("echo", json!({"text": "before"})).await, "before");
    server.stop();
    let id = c.send_request("tools/call", json!({"name": "echo", "arguments": {"text": "across"}})).await;
    let down = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    server.start();
    let resp = c.wait_response(&id).await;
    eprintln!("server down 1.5 s (then its start) -> read-only call answered after {:?}", down.elapsed());
    assert_eq!(tool_text(&resp), "across", "{resp}");
}

/// A plugin shows `slow_counter` as read-only so that clients run it in parallel. That is the
/// client's scheduling, not a promise that a repeat is harmless: a drop in the middle of it is
/// answered with an error, and the tool ran once.
#[tokio::test]
async fn a_tool_a_policy_shows_as_read_only_is_not_repeated_after_a_drop() {
    let server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    let proxy = FaultProxy::start(server.addr());
    let config =
        "[[plugins]]\nfile = \"hints.wasm\"\nconfig = { tools = { \"slow_counter\" = { readOnlyHint = true } } }\n";
    let (_p, mut c, _d) = with_config(&server.url_via(proxy.addr()), StreamableHttp, config, &["hints.wasm"]).await;
    let list = c.request("tools/list", json!({})).await;
    let shown = list["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "slow_counter").cloned();
    assert_eq!(shown.unwrap()["annotations"]["readOnlyHint"], true, "the override is in force: {list}");
    let id = c.send_request("tools/call", json!({"name": "slow_counter", "arguments": {"ms": 3000}})).await;
    assert!(server.wait_runs("slow_counter", 1, Duration::from_secs(30)), "{}", server.log());
    proxy.sever();
    let resp = c.wait_response(&id).await;
    assert!(error_message(&resp).contains("may have run"), "{resp}");
    // A repeat would have started by now (the first one 100 ms after the drop).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(server.runs("slow_counter"), 1, "a write shown as read-only was repeated");
}

/// Through the daemon (`switchyard connect`): a call whose link went silent is shown by
/// `status` while it waits (state, instance, how long the link has been silent), is answered
/// within 15 s naming the link, and the next call after the heal works.
#[tokio::test]
async fn through_connect_a_silent_call_is_shown_by_status_and_answered_within_15_s() {
    let server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    let proxy = FaultProxy::start(server.addr());
    let home = switchyard_testkit::daemon::Home::new();
    let url = server.url_via(proxy.addr());
    home.write_config(&format!("[servers.remote]\nurl = \"{url}\"\ntransport = \"streamable-http\"\n"));
    let (p, mut c) = home.client("remote").await;
    c.timeout = Duration::from_secs(40);
    c.request("tools/list", json!({})).await;
    assert_eq!(c.call_text("echo", json!({"text": "before"})).await, "before");
    proxy.strand();
    proxy.black_hole(true);
    let id = c.send_request("tools/call", json!({"name": "slow_counter", "arguments": {"ms": 60000}})).await;
    let silent = Instant::now();
    let status = home
        .wait_status("the call silent for 2 s", Duration::from_secs(10), |s| {
            s["servers"][0]["calls"].as_array().into_iter().flatten().any(|c| c["silent_ms"].as_u64() >= Some(2000))
        })
        .await;
    let shown = &status["servers"][0]["calls"][0];
    assert_eq!(shown["call"], "tools/call `slow_counter`", "{status:#}");
    assert_eq!(shown["state"], "in flight", "{status:#}");
    assert_eq!(shown["instance"], "remote#1", "{status:#}");
    let text = home.status_text().await;
    assert!(
        text.contains("call tools/call `slow_counter` of session") && text.contains("nothing from the link for"),
        "{text}"
    );
    let resp = c.wait_response(&id).await;
    let took = silent.elapsed();
    eprintln!("through connect: link silent mid-call -> answered in {took:?}");
    let why = error_message(&resp);
    assert!(took < Duration::from_secs(15) && why.contains("went silent"), "after {took:?}: {why}");
    proxy.black_hole(false);
    assert_eq!(c.call_text("echo", json!({"text": "after"})).await, "after");
    let status = home.status_json().await;
    assert_eq!(status["servers"][0]["calls"], json!([]), "no call left running: {status:#}");
    drop((c, p));
    home.shutdown().await;
}

/// Through the daemon's HTTP front: an idle upstream link that went silent and healed answers
/// the front's next call at once.
#[tokio::test]
async fn through_the_http_front_an_idle_link_that_went_silent_answers_the_next_call_at_once() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    let proxy = FaultProxy::start(server.addr());
    let home = switchyard_testkit::daemon::Home::new();
    let url = server.url_via(proxy.addr());
    home.write_config(&format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n\n[servers.remote]\nurl = \"{url}\"\ntransport = \"streamable-http\"\n"
    ));
    let (base, token) = home.start_http().await;
    let front = FrontClient { http: reqwest::Client::new(), url: format!("{base}/mcp/remote"), token, session: None };
    let mut front = front;
    front.initialize().await;
    assert_eq!(tool_text(&front.call(1, "echo", json!({"text": "before"})).await), "before");
    proxy.strand();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let started = Instant::now();
    let resp = front.call(2, "echo", json!({"text": "after"})).await;
    let took = started.elapsed();
    eprintln!("through the front: idle upstream link stranded and healed -> next call answered in {took:?}");
    assert_eq!(tool_text(&resp), "after", "{resp}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    home.shutdown().await;
}

/// A minimal client of the daemon's HTTP front: one session, each request's SSE answer read to
/// its response.
struct FrontClient {
    http: reqwest::Client,
    url: String,
    token: String,
    session: Option<String>,
}

impl FrontClient {
    async fn post(&self, body: Value) -> reqwest::Response {
        let mut req = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s).header("mcp-protocol-version", "2025-11-25");
        }
        let resp = tokio::time::timeout(Duration::from_secs(30), req.send()).await.expect("the front answered");
        resp.expect("the POST reached the front")
    }

    /// The response in an answer (SSE or JSON).
    async fn answer(resp: reqwest::Response) -> Value {
        let text = tokio::time::timeout(Duration::from_secs(30), resp.text()).await.expect("in time").unwrap();
        let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
        let messages: Vec<Value> = if data.is_empty() {
            vec![serde_json::from_str(&text).unwrap()]
        } else {
            data.iter().filter(|d| !d.is_empty()).map(|d| serde_json::from_str(d).unwrap()).collect()
        };
        messages.into_iter().find(|m| m.get("id").is_some() && m.get("method").is_none()).expect("a response")
    }

    async fn initialize(&mut self) {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "silent-e2e", "version": "1"}}});
        let resp = self.post(init).await;
        self.session = Some(resp.headers()["mcp-session-id"].to_str().unwrap().to_string());
        let answer = Self::answer(resp).await;
        assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
        let note = self.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert_eq!(note.status(), 202);
    }

    async fn call(&self, id: u64, tool: &str, arguments: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
        Self::answer(self.post(body).await).await
    }
}
