//! Remote servers: `switchyard run --url` in front of real MCP servers over Streamable
//! HTTP and legacy SSE, with faults injected for real by a TCP proxy (sever: every connection
//! reset; black hole: connections accepted, nothing carried) and by killing the server.
//!
//! The servers: the Python SDK's (tests/python/http_server.py: `echo` read-only, `slow_echo`
//! idempotent, `slow_counter` neither, the slow ones logging each run to a file that outlives
//! restarts) and `@modelcontextprotocol/server-everything` in its `streamableHttp` and `sse`
//! modes. The SDK transcript tests compare a client's view directly over HTTP with its view
//! through `switchyard run --url`.

use std::time::{Duration, Instant};

use crate::npm_setup::{ensure_npm, everything_entry};
use serde_json::{Value, json};
use switchyard_testkit::http_servers::{HttpServer, PythonServerOptions, RemoteTransport};
use switchyard_testkit::proxy::FaultProxy;
use switchyard_testkit::sdk_clients::{ClientTarget, node_client, python_client};
use switchyard_testkit::{Client, Proc, temp_dir, tool_text};

use RemoteTransport::{Sse, StreamableHttp};

/// Upper bound for one SDK client run; generous because CI machines are shared and slow.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// `switchyard run --url URL --transport T` with a config file holding `config` (TOML).
fn router(
    url: &str,
    transport: RemoteTransport,
    config: &str,
    envs: &[(&str, &str)],
    extra: &[&str],
) -> (Proc, switchyard_testkit::TempDir) {
    let dir = temp_dir();
    let file = dir.path().join("switchyard.toml");
    std::fs::write(&file, config).unwrap();
    let mut args = vec!["--config", file.to_str().unwrap(), "--url", url, "--transport", transport.arg()];
    args.extend_from_slice(extra);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (Proc::router_env(&args, envs), dir)
}

async fn started(url: &str, transport: RemoteTransport, config: &str) -> (Proc, Client, switchyard_testkit::TempDir) {
    let (mut p, dir) = router(url, transport, config, &[], &[]);
    let mut c = p.client();
    c.initialize().await;
    (p, c, dir)
}

/// Waits until `tool` has started `n` times on `server` (its runs file).
fn wait_runs(server: &HttpServer, tool: &str, n: usize) {
    assert!(server.wait_runs(tool, n, Duration::from_secs(30)), "{tool} never ran {n} times:\n{}", server.log());
}

/// The transcript with every UUID (server-everything names its HTTP session in tool texts, and
/// each connection has its own) replaced by `<uuid>`.
fn without_uuids(v: &Value) -> Value {
    let text = v.to_string();
    let b = text.as_bytes();
    let shape = [8usize, 4, 4, 4, 12];
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    let mut i = 0;
    'scan: while i < b.len() {
        let mut j = i;
        for (k, n) in shape.iter().enumerate() {
            if j + n > b.len() || !b[j..j + n].iter().all(u8::is_ascii_hexdigit) {
                out.push(b[i]);
                i += 1;
                continue 'scan;
            }
            j += n;
            if k < 4 {
                if b.get(j) != Some(&b'-') {
                    out.push(b[i]);
                    i += 1;
                    continue 'scan;
                }
                j += 1;
            }
        }
        out.extend_from_slice(b"<uuid>");
        i = j;
    }
    serde_json::from_slice(&out).expect("still JSON")
}

fn error_message(resp: &Value) -> String {
    resp["error"]["message"].as_str().unwrap_or_else(|| panic!("an error response: {resp}")).to_string()
}

// ------------------------------------------------------------------------------------------------
// The same transcript directly over HTTP and through switchyard.

fn through_switchyard(url: &str, transport: RemoteTransport) -> ClientTarget {
    ClientTarget::Command(vec![
        switchyard_testkit::bin().to_string(),
        "run".into(),
        "--url".into(),
        url.into(),
        "--transport".into(),
        transport.arg().into(),
    ])
}

fn python_transcripts(server: &HttpServer, mode: &str, calls: &Value) -> (Value, Value) {
    let url = server.url();
    let direct = crate::transcript::run(
        python_client(mode, calls, &ClientTarget::url(&url, server.transport())),
        "client.py",
        CLIENT_TIMEOUT,
    )
    .transcript("direct over HTTP");
    let routed = crate::transcript::run(
        python_client(mode, calls, &through_switchyard(&url, server.transport())),
        "client.py",
        CLIENT_TIMEOUT,
    )
    .transcript("through switchyard run --url");
    (direct, routed)
}

#[test]
fn the_python_sdk_sees_the_same_python_server_through_switchyard_over_both_transports() {
    let calls = json!([["echo", {"text": "héllo"}], ["slow_echo", {"text": "later", "ms": 50}], ["nope", {}]]);
    for transport in [StreamableHttp, Sse] {
        let server = HttpServer::python(transport, &PythonServerOptions::default());
        for mode in ["legacy", "auto"] {
            let (direct, routed) = python_transcripts(&server, mode, &calls);
            assert_eq!(direct, routed, "{transport:?}, mode {mode}: the client sees something else through switchyard");
        }
    }
}

#[test]
fn the_sdks_see_the_same_everything_server_through_switchyard_over_both_transports() {
    ensure_npm();
    let calls = json!([["echo", {"message": "hi"}], ["get-sum", {"a": 2, "b": 3}]]);
    for transport in [StreamableHttp, Sse] {
        let server = HttpServer::everything(&everything_entry(), transport);
        let (direct, routed) = python_transcripts(&server, "legacy", &calls);
        assert_eq!(direct, routed, "{transport:?}: the Python SDK sees something else through switchyard");
        let url = server.url();
        let direct = crate::transcript::run(
            node_client("everything", &ClientTarget::url(&url, transport)),
            "client.mjs",
            CLIENT_TIMEOUT,
        )
        .transcript("node client direct over HTTP");
        let routed = crate::transcript::run(
            node_client("everything", &through_switchyard(&url, transport)),
            "client.mjs",
            CLIENT_TIMEOUT,
        )
        .transcript("node client through switchyard run --url");
        assert_eq!(
            without_uuids(&direct),
            without_uuids(&routed),
            "{transport:?}: the TypeScript SDK sees something else through switchyard"
        );
    }
}

// ------------------------------------------------------------------------------------------------
// Faults.

/// A link dropped while an idempotent call runs: switchyard repeats it and the client gets its
/// result, no error.
#[tokio::test]
async fn a_drop_during_an_idempotent_call_is_retried_and_succeeds() {
    let server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    let proxy = FaultProxy::start(server.addr());
    let (_p, mut c, _d) = started(&server.url_via(proxy.addr()), StreamableHttp, "").await;
    let id =
        c.send_request("tools/call", json!({"name": "slow_echo", "arguments": {"text": "kept", "ms": 1500}})).await;
    wait_runs(&server, "slow_echo", 1);
    proxy.sever();
    let resp = c.wait_response(&id).await;
    assert_eq!(tool_text(&resp), "kept", "{resp}");
    assert_eq!(server.runs("slow_echo"), 2, "ran once, dropped, ran again");
}

/// A link dropped while a call that is not safe to repeat runs: the client gets an error at once
/// (not at a timeout), naming the server, the tool and the cause; the tool ran exactly once.
#[tokio::test]
async fn a_drop_during_a_non_idempotent_call_answers_at_once_and_never_repeats_it() {
    let server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    let proxy = FaultProxy::start(server.addr());
    let (_p, mut c, _d) =
        started(&server.url_via(proxy.addr()), StreamableHttp, "[server]\nname = \"counter\"\n").await;
    let id = c.send_request("tools/call", json!({"name": "slow_counter", "arguments": {"ms": 4000}})).await;
    wait_runs(&server, "slow_counter", 1);
    let severed = Instant::now();
    proxy.sever();
    let resp = c.wait_response(&id).await;
    let took = severed.elapsed();
    eprintln!("severed link -> error answer: {took:?}");
    let why = error_message(&resp);
    for part in ["counter", "slow_counter", "may have run"] {
        assert!(why.contains(part), "the error names {part}: {why}");
    }
    // Far below the tool's 4 s and any timeout: the answer came from the drop itself.
    assert!(took < Duration::from_secs(2), "answered {took:?} after the drop");
    // The tool's own time passes: nothing repeats it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(server.runs("slow_counter"), 1, "a call that is not safe to repeat ran again");
    // And the link works again for the next call.
    assert_eq!(c.call_text("echo", json!({"text": "after"})).await, "after");
}

/// The server is restarted between calls (kill -9, then up again on the same port): its session
/// is gone, switchyard opens a new one, and the next call succeeds with no error.
#[tokio::test]
async fn a_restarted_server_is_reinitialised_and_the_next_call_succeeds() {
    let mut server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    let (mut p, mut c, _d) = started(&server.url(), StreamableHttp, "").await;
    assert_eq!(c.call_text("echo", json!({"text": "one"})).await, "one");
    server.restart();
    assert_eq!(c.call_text("echo", json!({"text": "two"})).await, "two");
    let log = p.stderr.text();
    assert!(log.contains("session"), "one log line says the session was renewed:\n{log}");
    c.close().await;
    p.wait_timeout(Duration::from_secs(10)).await;
}

/// A black hole (connections accepted, nothing carried): the call ends at its deadline, not
/// later; once the hole closes, calls work again.
#[tokio::test]
async fn a_black_hole_ends_the_call_at_its_deadline_and_the_link_recovers() {
    let server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    let proxy = FaultProxy::start(server.addr());
    let config = "[limits]\ncall_timeout_ms = 2000\nhealth_interval_ms = 500\nhealth_timeout_ms = 1000\n";
    let (_p, mut c, _d) = started(&server.url_via(proxy.addr()), StreamableHttp, config).await;
    assert_eq!(c.call_text("echo", json!({"text": "before"})).await, "before");
    proxy.black_hole(true);
    let started_at = Instant::now();
    // `echo` is read-only: safe to repeat, but a repeat must not carry it past its deadline.
    let resp = c.request("tools/call", json!({"name": "echo", "arguments": {"text": "lost"}})).await;
    let took = started_at.elapsed();
    let why = error_message(&resp);
    assert!(why.contains("timed out"), "{why}");
    assert_eq!(resp["error"]["data"]["attempts"], 1, "{resp}");
    // The deadline is 2 s; twice that would mean a second full attempt.
    assert!(took >= Duration::from_millis(1900) && took < Duration::from_millis(3900), "ended after {took:?}");
    proxy.black_hole(false);
    // The next calls work again (the hung instance is recycled by its health ping).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = c.request("tools/call", json!({"name": "echo", "arguments": {"text": "after"}})).await;
        if resp.get("result").is_some() {
            assert_eq!(tool_text(&resp), "after");
            break;
        }
        assert!(Instant::now() < deadline, "the link never recovered: {resp}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Legacy SSE: the stream severed while a call runs answers that call at once, reopens the
/// stream (new endpoint, new initialize) and the next call works.
#[tokio::test]
async fn a_severed_legacy_sse_stream_answers_in_flight_calls_and_reconnects() {
    let server = HttpServer::python(Sse, &PythonServerOptions::default());
    let proxy = FaultProxy::start(server.addr());
    let (_p, mut c, _d) = started(&server.url_via(proxy.addr()), Sse, "").await;
    assert_eq!(c.call_text("echo", json!({"text": "before"})).await, "before");
    let id = c.send_request("tools/call", json!({"name": "slow_counter", "arguments": {"ms": 4000}})).await;
    wait_runs(&server, "slow_counter", 1);
    let severed = Instant::now();
    proxy.sever();
    let resp = c.wait_response(&id).await;
    eprintln!("severed SSE stream -> error answer: {:?}", severed.elapsed());
    assert!(resp.get("error").is_some(), "{resp}");
    assert!(severed.elapsed() < Duration::from_secs(2));
    assert_eq!(c.call_text("echo", json!({"text": "after"})).await, "after");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(server.runs("slow_counter"), 1, "a call that is not safe to repeat ran again");
}

/// A wrong token: a clear error naming the server, the status, the header and the variable, and
/// the secret itself nowhere in the logs.
#[tokio::test]
async fn a_wrong_token_is_a_clear_error_that_names_the_header_and_variable() {
    let server = HttpServer::python(
        StreamableHttp,
        &PythonServerOptions { bearer: Some("right-secret".into()), ..Default::default() },
    );
    let (mut p, _d) = router(
        &server.url(),
        StreamableHttp,
        "",
        &[("MCP_TOKEN", "wrong-secret-value"), ("RUST_LOG", "debug")],
        &["--header", "Authorization: Bearer ${MCP_TOKEN}"],
    );
    let mut c = p.client();
    let resp = c
        .request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        )
        .await;
    let why = error_message(&resp);
    for part in ["401", "Authorization", "MCP_TOKEN"] {
        assert!(why.contains(part), "the error names {part}: {why}");
    }
    c.close().await;
    p.wait_timeout(Duration::from_secs(10)).await;
    let log = p.stderr.text();
    assert!(!log.contains("wrong-secret-value") && !why.contains("wrong-secret-value"), "the secret leaked:\n{log}");
}

/// A server that numbers its SSE events (an event store) behind the fault proxy, switchyard in
/// front, and a `slow_counter` call (2 s, not idempotent) that has started there.
async fn resumable_call_running() -> (HttpServer, FaultProxy, Proc, Client, switchyard_testkit::TempDir, Value) {
    let server = HttpServer::python(StreamableHttp, &PythonServerOptions { event_store: true, ..Default::default() });
    let proxy = FaultProxy::start(server.addr());
    let (mut p, d) = router(&server.url_via(proxy.addr()), StreamableHttp, "", &[], &[]);
    let mut c = p.client();
    // The SDK server numbers its events (a priming event first) for clients of 2025-11-25 on.
    c.initialize_with("2025-11-25").await;
    let id = c.send_request("tools/call", json!({"name": "slow_counter", "arguments": {"ms": 2000}})).await;
    wait_runs(&server, "slow_counter", 1);
    // The stream's first event (its id is what a resume asks for) left the server before the
    // tool ran; on a loaded machine it may still be on its way through the proxy to switchyard.
    tokio::time::sleep(Duration::from_millis(500)).await;
    (server, proxy, p, c, d, id)
}

/// A server that gives its SSE events ids (an event store): a stream severed mid-call is resumed
/// with GET + Last-Event-ID, so even a call that is not safe to repeat gets its result, and runs once.
#[tokio::test]
async fn a_severed_stream_with_event_ids_is_resumed_and_the_call_completes_once() {
    let (server, proxy, _p, mut c, _d, id) = resumable_call_running().await;
    proxy.sever();
    let resp = c.wait_response(&id).await;
    assert!(resp.get("result").is_some(), "resumed, not failed: {resp}");
    assert_eq!(tool_text(&resp), "1", "the result of the one run");
    assert_eq!(server.runs("slow_counter"), 1);
}

/// The server dies while an idempotent call runs and stays down: the repeat cannot reach it
/// ("not delivered"), but the first attempt ran, so the client must not be told the call never
/// ran.
#[tokio::test]
async fn a_call_that_ran_is_never_reported_as_undelivered() {
    let mut server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    let (_p, mut c, _d) = started(&server.url(), StreamableHttp, "").await;
    // The repeats wait about 10 s for the server to come back before giving up.
    c.timeout = Duration::from_secs(40);
    let id = c.send_request("tools/call", json!({"name": "slow_echo", "arguments": {"text": "x", "ms": 3000}})).await;
    wait_runs(&server, "slow_echo", 1);
    server.stop();
    let resp = c.wait_response(&id).await;
    assert_eq!(resp["error"]["data"]["delivered"], true, "{resp}");
    let why = error_message(&resp);
    assert!(why.contains("may have run"), "{why}");
    assert_eq!(server.runs("slow_echo"), 1);
}

/// The server is down when the client starts: a clear error naming the cause, at once; once the
/// server is up, the next initialize gets through (within the start backoff's 10 s cap).
#[tokio::test]
async fn a_server_that_is_down_at_start_is_reported_and_used_once_it_is_up() {
    let mut server = HttpServer::python(StreamableHttp, &PythonServerOptions::default());
    server.stop();
    let (mut p, _d) = router(&server.url(), StreamableHttp, "[server]\nname = \"later\"\n", &[], &[]);
    let mut c = p.client();
    let init =
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}});
    let asked = Instant::now();
    let resp = c.request("initialize", init.clone()).await;
    let why = error_message(&resp);
    assert!(why.contains("`later` is down") && why.contains("could not reach"), "{why}");
    assert!(asked.elapsed() < Duration::from_secs(5), "a refused connect fails fast: {:?}", asked.elapsed());
    server.start();
    let up = Instant::now();
    loop {
        let resp = c.request("initialize", init.clone()).await;
        if resp.get("result").is_some() {
            break;
        }
        assert!(up.elapsed() < Duration::from_secs(20), "never got through after the server came up: {resp}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!("server up -> initialize answered: {:?}", up.elapsed());
    c.notify("notifications/initialized", json!({})).await;
    assert_eq!(c.call_text("echo", json!({"text": "up"})).await, "up");
}

/// The link drops and the server cannot be reached for a moment (connections refused): the
/// resumption tries again rather than giving up at the first refusal, and the call completes.
#[tokio::test]
async fn a_resumable_call_survives_a_link_that_is_unreachable_for_a_moment() {
    let (server, proxy, _p, mut c, _d, id) = resumable_call_running().await;
    proxy.refuse(true);
    proxy.sever();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.refuse(false);
    let resp = c.wait_response(&id).await;
    assert!(resp.get("result").is_some(), "resumed after the outage, not failed: {resp}");
    assert_eq!(server.runs("slow_counter"), 1);
}
