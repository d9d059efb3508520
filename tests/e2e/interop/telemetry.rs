//! Traces through the real binary, received by a real OTLP/HTTP receiver (tests/python/
//! otlp_receiver.py, decoding with the opentelemetry-proto package): for a call through `run`,
//! through the daemon (`connect`) and through the HTTP front, a SERVER span (the call as the
//! client sees it) with a CLIENT span inside it (the request to the server), named and
//! attributed as the OpenTelemetry MCP conventions say — the names taken from the
//! semantic-conventions package, not typed here — and the server gets the client's trace id
//! with switchyard's CLIENT span as parent in `params._meta.traceparent`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_testkit::daemon::Home;
use switchyard_testkit::python_venv::{otel_venv_python, python_dir};
use switchyard_testkit::*;

/// The client's own trace context, as an instrumented client would send it.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn client_traceparent() -> String {
    format!("00-{TRACE}-{PARENT}-01")
}

/// The conventions' names, as the semantic-conventions package spells them.
pub(super) fn conventions() -> HashMap<String, String> {
    let out = Command::new(otel_venv_python())
        .arg(python_dir().join("otlp_receiver.py"))
        .arg("--conventions")
        .output()
        .expect("run the receiver for the conventions");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the conventions as JSON")
}

/// The OTLP receiver, writing the spans it gets to a file.
pub(super) struct Receiver {
    _proc: KillOnDrop,
    port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    pub(super) fn start() -> Receiver {
        let dir = temp_dir();
        let out = dir.path().join("spans.jsonl");
        let mut child = Command::new(otel_venv_python())
            .arg(python_dir().join("otlp_receiver.py"))
            .arg("--out")
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the OTLP receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("listening ").and_then(|p| p.parse().ok());
        let port = port.unwrap_or_else(|| panic!("the receiver said {line:?}"));
        Receiver { _proc: KillOnDrop(child), port, out, _dir: dir }
    }

    pub(super) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The spans received so far.
    pub(super) fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// The histogram points received so far (cumulative: the last of each series has its totals).
    fn points(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.out.with_extension("jsonl.metrics")).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// The headers of each export received so far (names in lower case; `:path` is the path
    /// posted to, `/v1/traces` or `/v1/metrics`).
    fn headers(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.out.with_extension("jsonl.headers")).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// Waits for a span that `pred` holds for (`what` names it in the failure).
    pub(super) async fn find(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let spans = self.spans();
            if let Some(s) = spans.iter().find(|s| pred(s)) {
                return s.clone();
            }
            assert!(Instant::now() < until, "{what} did not come: {spans:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (batches go out every second) until a SERVER span named `name` and a CLIENT span
    /// inside it have come; both.
    async fn linked(&self, name: &str) -> (Value, Value) {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let spans = self.spans();
            let server = spans.iter().find(|s| s["kind"] == "SERVER" && s["name"] == name);
            let client = server.and_then(|srv| {
                spans.iter().find(|s| {
                    s["kind"] == "CLIENT" && s["parent_span_id"] == srv["span_id"] && s["trace_id"] == srv["trace_id"]
                })
            });
            if let (Some(srv), Some(cli)) = (server, client) {
                return (srv.clone(), cli.clone());
            }
            assert!(Instant::now() < until, "no SERVER span `{name}` with a CLIENT span inside came: {spans:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A tools/call of the fixture's echo with the client's traceparent in `_meta` (or none).
fn echo(id: u64, text: &str, traced: bool) -> Value {
    let mut params = json!({"name": "echo", "arguments": {"text": text}});
    if traced {
        params["_meta"] = json!({"traceparent": client_traceparent(), "tracestate": "client=1"});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// The spans of a call of `echo` by the conventions: names, kinds, attribute keys and values,
/// and the CLIENT span within the SERVER span, which continues the client's trace when it
/// sent one. `transport` is the client side's `network.transport`.
fn check_call(c: &HashMap<String, String>, server: &Value, client: &Value, transport: &str, traced: bool) {
    let attr = |span: &Value, key: &str| span["attributes"][&c[key]].clone();
    for span in [server, client] {
        assert_eq!(span["name"], format!("{} {}", attr(span, "MCP_METHOD_NAME").as_str().unwrap(), "echo"), "{span}");
        assert_eq!(attr(span, "MCP_METHOD_NAME"), "tools/call", "{span}");
        assert_eq!(attr(span, "GEN_AI_TOOL_NAME"), "echo", "{span}");
        assert_eq!(attr(span, "GEN_AI_OPERATION_NAME"), c["GEN_AI_OPERATION_EXECUTE_TOOL"].as_str(), "{span}");
        assert!(attr(span, "JSONRPC_REQUEST_ID").is_string(), "{span}");
        assert!(attr(span, "ERROR_TYPE").is_null(), "an echo does not fail: {span}");
        assert_eq!(span["service"], "switchyard");
    }
    assert_eq!(attr(server, "NETWORK_TRANSPORT"), c[transport].as_str(), "{server}");
    assert_eq!(attr(client, "NETWORK_TRANSPORT"), c["NETWORK_TRANSPORT_PIPE"].as_str(), "{client}");
    assert!(attr(server, "MCP_SESSION_ID").is_string(), "{server}");
    assert!(attr(server, "MCP_PROTOCOL_VERSION").is_string(), "{server}");
    assert_eq!(client["trace_id"], server["trace_id"]);
    assert_eq!(client["parent_span_id"], server["span_id"]);
    // switchyard's own part: the SERVER span is told it when the call ends, the CLIENT span
    // names the instance it went to.
    let own = |span: &Value, key: &str| span["attributes"][key].clone();
    assert!(own(client, "switchyard.instance").as_str().is_some_and(|i| i.contains('#')), "{client}");
    assert_eq!(own(server, "switchyard.instance"), own(client, "switchyard.instance"), "{server}");
    assert_eq!(own(server, "switchyard.attempts"), 1, "{server}");
    assert!(own(server, "switchyard.client.name").is_string(), "{server}");
    for key in ["switchyard.wait.gate_ms", "switchyard.wait.queue_ms"] {
        assert!(own(server, key).is_number(), "{key}: {server}");
    }
    if traced {
        assert_eq!((server["trace_id"].as_str(), server["parent_span_id"].as_str()), (Some(TRACE), Some(PARENT)));
    } else {
        assert_ne!(server["trace_id"], TRACE);
        assert_eq!(server["parent_span_id"], "", "a call without a trace context starts a trace");
    }
}

/// The traceparent the fixture server got with the call of `text`: the call's trace, with
/// switchyard's CLIENT span as parent.
async fn check_server_got(journal: &std::path::Path, text: &str, client: &Value, tracestate: Option<&str>) {
    let entries =
        wait_journal(journal, |e| received(e, "tools/call").any(|m| m["params"]["arguments"]["text"] == text)).await;
    let msg = received(&entries, "tools/call").find(|m| m["params"]["arguments"]["text"] == text).unwrap();
    let want = format!("00-{}-{}-01", client["trace_id"].as_str().unwrap(), client["span_id"].as_str().unwrap());
    assert_eq!(msg["params"]["_meta"]["traceparent"], want, "{msg}");
    assert_eq!(msg["params"]["_meta"]["tracestate"].as_str(), tracestate, "{msg}");
}

/// `switchyard run` in front of the fixture (given `fixture_args`), with `env`.
pub(super) fn fixture_router(fixture_args: &[&str], env: &[(&str, &str)]) -> Proc {
    let argv: Vec<String> = std::iter::once("--".to_string()).chain(Proc::fixture_cmd(fixture_args)).collect();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    Proc::router_env(&argv, env)
}

async fn wait_journal(path: &std::path::Path, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let entries = journal(path);
        if pred(&entries) || Instant::now() > until {
            return entries;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_call_through_run_continues_the_clients_trace_to_the_server() {
    let c = conventions();
    let receiver = Receiver::start();
    let dir = temp_dir();
    let journal_file = dir.path().join("j.jsonl");
    // The standard variables alone turn traces on.
    let mut router = fixture_router(
        &["--journal", journal_file.to_str().unwrap()],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()), ("OTEL_SERVICE_NAME", "switchyard")],
    );
    let mut client = router.client();
    client.initialize().await;
    client.send(&echo(1, "traced", true)).await;
    assert_eq!(tool_text(&client.wait_response(&json!(1)).await), "traced");
    client.send(&echo(2, "untraced", false)).await;
    assert_eq!(tool_text(&client.wait_response(&json!(2)).await), "untraced");

    let (server, cli) = receiver.linked("tools/call echo").await;
    let (server, cli) = if server["trace_id"] == TRACE { (server, cli) } else { panic!("{server}") };
    check_call(&c, &server, &cli, "NETWORK_TRANSPORT_PIPE", true);
    assert_eq!(server["attributes"][&c["JSONRPC_REQUEST_ID"]], "1", "the client's id, on the client's side");
    check_server_got(&journal_file, "traced", &cli, Some("client=1")).await;
    // A call without a trace context gets a trace of its own, which the server gets too.
    let untraced = || {
        let spans = receiver.spans();
        let srv = spans.iter().find(|s| s["kind"] == "SERVER" && s["trace_id"] != TRACE)?.clone();
        let cli = spans.iter().find(|s| s["parent_span_id"] == srv["span_id"])?.clone();
        Some((srv, cli))
    };
    let until = Instant::now() + Duration::from_secs(20);
    let (srv, cli) = loop {
        if let Some(found) = untraced() {
            break found;
        }
        assert!(Instant::now() < until, "the untraced call's spans did not come");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    check_call(&c, &srv, &cli, "NETWORK_TRANSPORT_PIPE", false);
    check_server_got(&journal_file, "untraced", &cli, None).await;
    // A call the server answers with an error: both spans say so, with its code.
    let nope = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "nope", "arguments": {}}});
    client.send(&nope).await;
    let answer = client.wait_response(&json!(3)).await;
    let code = answer["error"]["code"].as_i64().unwrap_or_else(|| panic!("{answer}")).to_string();
    let (srv, cli) = receiver.linked("tools/call nope").await;
    for span in [&srv, &cli] {
        assert_eq!(span["attributes"][&c["ERROR_TYPE"]], code.as_str(), "{span}");
        assert_eq!(span["status"], "ERROR", "{span}");
    }
}

/// The last point received of histogram `name` whose attributes include `with` (keys are the
/// conventions' names in `c`), if any came.
fn last_point(points: &[Value], c: &HashMap<String, String>, name: &str, with: &[(&str, &str)]) -> Option<Value> {
    let holds = |p: &Value| with.iter().all(|(k, v)| p["attributes"][&c[*k]] == *v);
    points.iter().rev().find(|p| p["name"] == c[name].as_str() && holds(p)).cloned()
}

#[tokio::test]
async fn run_sends_the_conventions_durations_as_otlp_histograms() {
    let c = conventions();
    let receiver = Receiver::start();
    let mut router = fixture_router(&[], &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint())]);
    let mut client = router.client();
    client.initialize().await;
    // As clients do: a tool is named in metrics once its server has listed it (labels stay
    // bounded); a call before the list counts as `other`.
    client.request("tools/list", json!({})).await;
    for id in 1..=3 {
        client.send(&echo(id, "counted", false)).await;
        client.wait_response(&json!(id)).await;
    }
    let nope = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope", "arguments": {}}});
    client.send(&nope).await;
    let code = client.wait_response(&json!(4)).await["error"]["code"].as_i64().expect("an error").to_string();
    // The totals go out every 10 s, and once more at exit (with the session's, which ends then).
    client.close().await;
    let status = router.wait_timeout(Duration::from_secs(20)).await;
    assert!(status.success(), "run ended with {status}");
    let points = receiver.points();
    let echo_ok = [("MCP_METHOD_NAME", "tools/call"), ("GEN_AI_TOOL_NAME", "echo"), ("NETWORK_TRANSPORT", "pipe")];
    for name in ["MCP_SERVER_OPERATION_DURATION", "MCP_CLIENT_OPERATION_DURATION"] {
        let p = last_point(&points, &c, name, &echo_ok).unwrap_or_else(|| panic!("no {name} for echo: {points:#?}"));
        assert_eq!(p["count"], 3, "three echo calls, each timed once on each side: {p}");
        assert_eq!(p["unit"], "s", "{p}");
        assert!(p["attributes"].get(&c["ERROR_TYPE"]).is_none(), "a success has no error.type: {p}");
        assert_eq!(p["bounds"][0], 0.01, "the conventions' buckets: {p}");
        let failed = [("MCP_METHOD_NAME", "tools/call"), ("ERROR_TYPE", code.as_str())];
        let p = last_point(&points, &c, name, &failed).unwrap_or_else(|| panic!("no failed {name}: {points:#?}"));
        assert_eq!(p["count"], 1, "{p}");
    }
    let session = last_point(&points, &c, "MCP_SERVER_SESSION_DURATION", &[("NETWORK_TRANSPORT", "pipe")]);
    let session = session.unwrap_or_else(|| panic!("no session duration: {points:#?}"));
    assert_eq!(session["count"], 1, "one session, ended at exit: {session}");
    assert_eq!(session["service"], "switchyard", "{session}");
}

#[tokio::test]
async fn a_call_through_the_daemon_continues_the_clients_trace_to_the_server() {
    let c = conventions();
    let receiver = Receiver::start();
    let home = Home::new();
    // Credentials and a query in the URL: status shows where traces go without them.
    let endpoint = receiver.endpoint().replace("http://", "http://user:pw@") + "/?key=k1";
    home.write_config(&format!("{}\n[telemetry]\nendpoint = \"{endpoint}\"\n", home.fixture("alpha", &[])));
    let (mut connect, mut client) = home.client("alpha").await;
    let shown = format!("{}/v1/traces", receiver.endpoint());
    assert_eq!(home.status_json().await["traces"], json!({"endpoint": shown}));
    let text = home.status_text().await;
    assert!(text.contains(&format!("traces: {shown} (OTLP over HTTP)")) && !text.contains("k1"), "{text}");
    // [telemetry] is read at start: an edit is said, and traces go where they went.
    home.write_config(&format!("{}\n[telemetry]\nenabled = false\n", home.fixture("alpha", &[])));
    let until = Instant::now() + Duration::from_secs(10);
    while !home.logs().contains("[telemetry] changed in the config") {
        assert!(Instant::now() < until, "the edit of [telemetry] is not said:\n{}", home.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(home.status_json().await["traces"], json!({"endpoint": shown}));
    client.send(&echo(7, "through the daemon", true)).await;
    assert_eq!(tool_text(&client.wait_response(&json!(7)).await), "through the daemon");
    let (server, cli) = receiver.linked("tools/call echo").await;
    check_call(&c, &server, &cli, "NETWORK_TRANSPORT_UNIX", true);
    check_server_got(&home.journal("alpha"), "through the daemon", &cli, Some("client=1")).await;
    client.close().await;
    connect.wait_timeout(Duration::from_secs(10)).await;
    // The session's span, once it ended: the call's span links to it.
    let session = receiver.find("the session's span", |s| s["name"] == "session alpha").await;
    assert_eq!(session["attributes"][&c["MCP_SESSION_ID"]], server["attributes"][&c["MCP_SESSION_ID"]]);
    assert_eq!(session["attributes"][&c["NETWORK_TRANSPORT"]], c["NETWORK_TRANSPORT_UNIX"].as_str());
    assert_eq!(server["links"], json!([session["span_id"]]), "{server}");
    home.shutdown().await;
}

/// The JSON-RPC messages of a POST's answer (an SSE stream, or one JSON body).
async fn answers(resp: reqwest::Response) -> Vec<Value> {
    let sse = resp.headers().get("content-type").is_some_and(|c| c == "text/event-stream");
    let text = resp.text().await.unwrap();
    if !sse {
        return serde_json::from_str(&text).into_iter().collect();
    }
    text.lines().filter_map(|l| l.strip_prefix("data:")).filter_map(|d| serde_json::from_str(d.trim()).ok()).collect()
}

#[tokio::test]
async fn a_call_through_the_http_front_continues_the_trace_of_its_headers() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let c = conventions();
    let receiver = Receiver::start();
    let home = Home::new();
    home.write_config(&format!(
        "{}[http]\nlisten = \"127.0.0.1:0\"\n[telemetry]\nendpoint = \"{}\"\n",
        home.fixture("alpha", &[]),
        receiver.endpoint()
    ));
    let (base, token) = home.start_http().await;
    let http = reqwest::Client::new();
    let post = |sid: Option<&str>, body: Value| {
        let mut r = http
            .post(format!("{base}/mcp/alpha"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(s) = sid {
            r = r.header("mcp-session-id", s).header("mcp-protocol-version", "2025-11-25");
        }
        r
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "otel-e2e", "version": "1"}}});
    let resp = post(None, init).send().await.unwrap();
    let sid = resp.headers()["mcp-session-id"].to_str().unwrap().to_string();
    assert!(answers(resp).await[0]["result"].is_object());
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(Some(&sid), note).send().await.unwrap().status(), 202);
    // The trace context in the headers only, as an HTTP client's instrumentation puts it.
    // Two tracestate headers are one list (W3C).
    let resp = post(Some(&sid), echo(3, "over http", false))
        .header("traceparent", client_traceparent())
        .header("tracestate", "front=1")
        .header("tracestate", "back=2")
        .send()
        .await
        .unwrap();
    let got = answers(resp).await;
    assert_eq!(tool_text(got.iter().find(|m| m["id"] == 3).unwrap()), "over http", "{got:?}");
    let (server, cli) = receiver.linked("tools/call echo").await;
    check_call(&c, &server, &cli, "NETWORK_TRANSPORT_TCP", true);
    check_server_got(&home.journal("alpha"), "over http", &cli, Some("front=1,back=2")).await;
    // A tracestate too long to pass on is left out, never sent empty.
    let resp = post(Some(&sid), echo(4, "long state", false))
        .header("traceparent", client_traceparent())
        .header("tracestate", format!("big={}", "v".repeat(10_000)))
        .send()
        .await
        .unwrap();
    let got = answers(resp).await;
    assert_eq!(tool_text(got.iter().find(|m| m["id"] == 4).unwrap()), "long state", "{got:?}");
    let entries = wait_journal(&home.journal("alpha"), |e| {
        received(e, "tools/call").any(|m| m["params"]["arguments"]["text"] == "long state")
    })
    .await;
    let msg = received(&entries, "tools/call").find(|m| m["params"]["arguments"]["text"] == "long state").unwrap();
    assert!(msg["params"]["_meta"]["traceparent"].is_string(), "{msg}");
    assert!(msg["params"]["_meta"].get("tracestate").is_none(), "{msg}");
    home.shutdown().await;
}

#[tokio::test]
async fn a_collector_that_is_away_costs_no_call_and_one_log_line() {
    // Nothing listens there: every export fails at once.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Credentials and a query in the URL: the failure lines show it without them.
    let away = format!("http://user:pw@127.0.0.1:{port}/?key=k1");
    drop(listener);
    // A plugin's timeout past the limit: the clamp's log line comes after the chain's
    // `tracing::enabled!` check, which creates nothing (the log must not lose it to the
    // per-layer filters traces bring).
    let dir = temp_dir();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(example_plugins().join("timeouts.wasm"), plugins.join("timeouts.wasm")).unwrap();
    let config = dir.path().join("switchyard.toml");
    let cfg = "[limits]\ncall_timeout_ms = 3000\nmax_call_timeout_ms = 5000\n[[plugins]]\nfile = \"timeouts.wasm\"\nconfig = { tools = { \"echo\" = { timeout_ms = 600000 } } }\n";
    std::fs::write(&config, cfg).unwrap();
    let mut argv: Vec<String> =
        ["--config", config.to_str().unwrap(), "--plugins", plugins.to_str().unwrap(), "--"].map(String::from).to_vec();
    argv.extend(Proc::fixture_cmd(&[]));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut router = Proc::router_env(&argv, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &away)]);
    let mut client = router.client();
    client.initialize().await;
    // Batches go out every second: three of them fail while calls go on.
    for i in 0..30 {
        let started = Instant::now();
        assert_eq!(client.call_text("echo", json!({"text": format!("n{i}")})).await, format!("n{i}"));
        assert!(started.elapsed() < Duration::from_secs(1), "a call waited on the exporter");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = router.stderr.text();
    let said = log.lines().filter(|l| l.contains("traces could not be sent")).count();
    assert_eq!(said, 1, "the failing exports are said once:\n{log}");
    assert!(log.contains("clamped to 5000 ms"), "a log line was lost:\n{log}");
    // The metrics go out at exit, and fail there too: one line says they were not sent, where
    // they were to go and why (not a promise to send them again, which exit cannot keep).
    client.close().await;
    router.wait_timeout(Duration::from_secs(20)).await;
    let log = router.stderr.text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("metrics") && l.contains("sent")).collect();
    assert_eq!(lines.len(), 1, "one line for the metrics at exit:\n{log}");
    let want = format!("the last metrics were not sent to http://127.0.0.1:{port}/v1/metrics at exit: ");
    assert!(lines[0].contains(&want) && lines[0].contains("WARN") && lines[0].contains("refused"), "{}", lines[0]);
    assert!(!log.contains("sent again"), "{log}");
    let spans: Vec<&str> = log.lines().filter(|l| l.contains("were not sent to") && l.contains("spans")).collect();
    assert!(spans.len() <= 1 && spans.iter().all(|l| l.contains("at exit: ") && l.ends_with("lost")), "{log}");
    assert!(!log.contains("pw@") && !log.contains("k1"), "a credential in the log:\n{log}");
}

#[tokio::test]
async fn the_variables_headers_are_decoded_and_a_bad_entry_is_said_without_its_value() {
    let receiver = Receiver::start();
    let headers = "x-ok=a%20b%2Cc, novalue-secret1 ,=secret2,x k=secret3,x-nl=secret4\nevil,x-pct=secret5%ZZ";
    let mut router = fixture_router(
        &[],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()), ("OTEL_EXPORTER_OTLP_HEADERS", headers)],
    );
    let mut client = router.client();
    client.initialize().await;
    assert_eq!(client.call_text("echo", json!({"text": "h"})).await, "h");
    receiver.linked("tools/call echo").await;
    let got = receiver.headers();
    assert!(!got.is_empty() && got.iter().all(|h| h["x-ok"] == "a b,c"), "decoded as the spec says: {got:?}");
    for h in &got {
        let text = h.to_string();
        assert!(!text.contains("secret") && h.get("x-pct").is_none(), "a bad entry was sent: {h}");
    }
    let log = router.stderr.text();
    assert!(!log.contains("secret"), "a value in the log:\n{log}");
    for (entry, key) in [(2, None), (3, None), (4, None), (5, Some("x-nl")), (6, Some("x-pct"))] {
        let line = log.lines().find(|l| l.contains(&format!("OTEL_EXPORTER_OTLP_HEADERS: entry {entry} ")));
        let line = line.unwrap_or_else(|| panic!("entry {entry} is not said:\n{log}"));
        assert!(line.contains("WARN") && line.contains("left out"), "{line}");
        if let Some(key) = key {
            assert!(line.contains(key), "{line}");
        }
    }
}

#[tokio::test]
async fn a_collector_that_never_answers_holds_exit_2_s_and_what_it_missed_is_said() {
    // A collector that takes the connection and never answers.
    let tarpit = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", tarpit.local_addr().unwrap());
    let held = std::thread::spawn(move || tarpit.incoming().take(4).filter_map(Result::ok).collect::<Vec<_>>());
    let mut router = fixture_router(&[], &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);
    let mut client = router.client();
    client.initialize().await;
    for i in 0..3 {
        assert_eq!(client.call_text("echo", json!({"text": format!("t{i}")})).await, format!("t{i}"));
    }
    // Traces and metrics together get 2 s at exit, not one after the other.
    let closed = Instant::now();
    client.close().await;
    router.wait_timeout(Duration::from_secs(20)).await;
    let took = closed.elapsed();
    let log = router.stderr.text();
    assert!(took < Duration::from_millis(2500), "exit took {took:?}:\n{log}");
    let metrics: Vec<&str> = log.lines().filter(|l| l.contains("the last metrics were not sent to")).collect();
    assert_eq!(metrics.len(), 1, "{log}");
    assert!(metrics[0].contains(&format!("{endpoint}/v1/metrics")) && metrics[0].contains("WARN"), "{}", metrics[0]);
    let said: Vec<&str> = log.lines().filter(|l| l.contains("spans were not sent to")).collect();
    assert_eq!(said.len(), 1, "{log}");
    let n: u64 = said[0].split(" spans were").next().and_then(|s| s.rsplit(' ').next()).unwrap().parse().unwrap();
    // initialize and the three calls, each a SERVER and (but initialize) a CLIENT span, and the session's.
    assert!(n >= 4, "{}", said[0]);
    assert!(said[0].contains(&endpoint) && said[0].contains("WARN"), "{}", said[0]);
    drop(held);
}

/// What the client may put in `_meta` that a splice alone would pass on wrong; each call's text
/// names its case.
const ODD_META: [(&str, &str); 5] = [
    // The progress token, which switchyard replaces too, beside it.
    ("number", r#"{"progressToken":"pt","traceparent":12345}"#),
    ("object", r#"{"traceparent":{"a":1}}"#),
    ("null", r#"{"traceparent":null}"#),
    ("array", r#"{"traceparent":["x"]}"#),
    (
        "twice",
        r#"{"traceparent":"00-11111111111111111111111111111111-1111111111111111-01","traceparent":"00-22222222222222222222222222222222-2222222222222222-01"}"#,
    ),
];

#[tokio::test]
async fn the_server_gets_switchyards_traceparent_whatever_the_clients_meta_holds() {
    let c = conventions();
    let receiver = Receiver::start();
    let dir = temp_dir();
    let journal_file = dir.path().join("j.jsonl");
    let mut router = fixture_router(
        &["--journal", journal_file.to_str().unwrap()],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint())],
    );
    let mut client = router.client();
    client.initialize().await;
    for (i, (case, meta)) in ODD_META.iter().enumerate() {
        let id = 10 + i as u64;
        client
            .send_raw(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{case}"}},"_meta":{meta}}}}}"#
            ))
            .await;
        assert_eq!(tool_text(&client.wait_response(&json!(id)).await), *case);
    }
    let entries = wait_journal(&journal_file, |e| received(e, "tools/call").count() >= ODD_META.len()).await;
    for (case, _) in ODD_META {
        let msg = received(&entries, "tools/call").find(|m| m["params"]["arguments"]["text"] == case).unwrap();
        let got = msg["params"]["_meta"]["traceparent"].as_str().unwrap_or_else(|| panic!("{case}: {msg}")).to_string();
        let (trace, span) = (&got[3..35], &got[36..52]);
        // switchyard's CLIENT span of this call is the parent, in a trace of switchyard's own.
        let cli = receiver
            .find(&format!("the CLIENT span the server got for {case}"), |s| {
                s["kind"] == "CLIENT" && s["trace_id"] == trace && s["span_id"] == span
            })
            .await;
        assert!(!got.contains("1111111111111111") && !got.contains("2222222222222222"), "{case}: {msg}");
        assert_eq!(cli["attributes"][&c["MCP_METHOD_NAME"]], "tools/call", "{case}: {cli}");
    }
}

#[tokio::test]
async fn a_tool_error_is_on_both_spans_and_a_uris_secrets_on_neither() {
    let c = conventions();
    let receiver = Receiver::start();
    let mut router = fixture_router(&[], &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint())]);
    let mut client = router.client();
    client.initialize().await;
    // The fixture's `sample` answers `isError` when the client refuses its sampling request.
    let call = client.send_request("tools/call", json!({"name": "sample", "arguments": {"prompt": "no"}})).await;
    let req = client.recv_request("sampling/createMessage").await;
    client.respond_error(req["id"].clone(), -32600, "no sampling here").await;
    let answer = client.wait_response(&call).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let (srv, cli) = receiver.linked("tools/call sample").await;
    for span in [&srv, &cli] {
        assert_eq!(span["attributes"][&c["ERROR_TYPE"]], "tool_error", "{span}");
        assert_eq!(span["status"], "ERROR", "{span}");
    }
    // A resource URI's userinfo and query values are redacted in the name and the attribute.
    // The fragment's values too (an implicit grant's `#access_token=...`).
    let uri = "file://me:pw@h/x?token=SECRETQ&v#access_token=SECRETF&expires_in=60";
    let read = client.send_request("resources/read", json!({"uri": uri})).await;
    client.wait_response(&read).await;
    let shown = "file://REDACTED:REDACTED@h/x?token=REDACTED&v#access_token=REDACTED&expires_in=REDACTED";
    let (srv, cli) = receiver.linked(&format!("resources/read {shown}")).await;
    for span in [&srv, &cli] {
        assert_eq!(span["attributes"][&c["MCP_RESOURCE_URI"]], shown, "{span}");
    }
    let all = serde_json::to_string(&receiver.spans()).unwrap();
    assert!(!all.contains("SECRETQ") && !all.contains("SECRETF") && !all.contains("me:pw"), "{all}");
}

#[tokio::test]
async fn each_signal_gets_the_general_headers_and_its_own_never_the_other_s() {
    let receiver = Receiver::start();
    let mut router = fixture_router(
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-all=a"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-traces-key=tk"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-metrics-key=mk"),
        ],
    );
    let mut client = router.client();
    client.initialize().await;
    assert_eq!(client.call_text("echo", json!({"text": "h"})).await, "h");
    receiver.linked("tools/call echo").await;
    // The metrics go out at exit.
    client.close().await;
    assert!(router.wait_timeout(Duration::from_secs(20)).await.success());
    let got = receiver.headers();
    let of = |path: &str| got.iter().filter(|h| h[":path"] == path).cloned().collect::<Vec<_>>();
    let (traces, metrics) = (of("/v1/traces"), of("/v1/metrics"));
    assert!(!traces.is_empty() && !metrics.is_empty(), "{got:?}");
    for h in &traces {
        assert!(h["x-all"] == "a" && h["x-traces-key"] == "tk" && h.get("x-metrics-key").is_none(), "{h}");
    }
    for h in &metrics {
        assert!(h["x-all"] == "a" && h["x-metrics-key"] == "mk" && h.get("x-traces-key").is_none(), "{h}");
    }
    let log = router.stderr.text();
    assert!(!log.contains("tk") && !log.contains("mk"), "a value in the log:\n{log}");
}

#[tokio::test]
async fn traces_exporter_none_sends_no_span_and_metrics_still_go() {
    let receiver = Receiver::start();
    let mut router =
        fixture_router(&[], &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()), ("OTEL_TRACES_EXPORTER", "none")]);
    let mut client = router.client();
    client.initialize().await;
    assert_eq!(client.call_text("echo", json!({"text": "h"})).await, "h");
    client.close().await;
    assert!(router.wait_timeout(Duration::from_secs(20)).await.success());
    assert!(receiver.spans().is_empty(), "spans were sent: {:?}", receiver.spans());
    assert!(!receiver.points().is_empty(), "the metrics follow OTEL_METRICS_EXPORTER, not the traces' setting");
    let log = router.stderr.text();
    assert!(log.contains("traces are off (OTEL_TRACES_EXPORTER=none); metrics go to"), "{log}");
}
