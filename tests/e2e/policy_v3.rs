//! End-to-end tests of `switchyard:policy@0.3.0` content hooks through the real binary and the
//! fixture server, with the hook-probe fixture plugin: a denied call is a readable `isError`
//! result, a modified request reaches the server and a modified result the client, audit mode
//! changes nothing and says so in one log line and the audit log; through the daemon
//! (`connect`), the HTTP front and `run`, which share the call path.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::Home;
use switchyard_testkit::*;

const SLOW: Duration = Duration::from_secs(20);

/// Puts the hook probe in `dir` under each name of `entries`, and returns their `[[plugins]]`
/// entries: (file, config, more keys).
fn probes(dir: &Path, entries: &[(&str, Value, &str)]) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let mut toml = String::new();
    for (name, config, more) in entries {
        std::fs::copy(broken_plugins().join("hook-probe.wasm"), dir.join(name)).unwrap();
        toml += &format!("[[plugins]]\nfile = \"{name}\"\ndeadline_ms = 1000\nconfig = '{config}'\n{more}\n");
    }
    toml
}

/// The chain every test runs: `guard.wasm` denies `write`'s requests; `stamp.wasm` adds its
/// tag to `echo`'s arguments and result (`trail`, and ` [stamp]` after the text).
fn chain() -> [(&'static str, Value, &'static str); 2] {
    [
        ("guard.wasm", json!({"tools": ["write"], "request": "deny"}), "priority = 10"),
        ("stamp.wasm", json!({"tools": ["echo"], "tag": "stamp", "request": "modify", "result": "modify"}), ""),
    ]
}

/// What the fixture `server` received as `tools/call` of `tool`.
fn calls_of(home: &Home, server: &str, tool: &str) -> Vec<Value> {
    let all = journal(home.journal(server));
    received(&all, "tools/call").filter(|m| m["params"]["name"] == tool).cloned().collect()
}

/// The answers the chain gives, as a client of any front sees them.
fn assert_hooked(echo: &Value, write: &Value) {
    assert_eq!(tool_text(echo), "hi [stamp]", "{echo}");
    assert_eq!(echo["result"]["trail"], json!(["stamp"]), "{echo}");
    let said = refusal_text(write);
    assert!(said.contains("`guard.wasm`") && said.contains("probe denies tools/call `write`"), "{said}");
}

#[tokio::test]
async fn through_the_daemon_a_denial_is_a_readable_result_and_a_modify_goes_both_ways() {
    let home = Home::new();
    let entries = probes(&home.path().join("plugins"), &chain());
    home.write_config(&format!("{}{entries}", home.fixture("fs", &[])));
    let mut p = home.connect("fs");
    let mut c = p.client();
    c.timeout = SLOW;
    c.initialize().await;
    let echo = c.call_tool("echo", json!({"text": "hi"})).await;
    let write = c.call_tool("write", json!({"path": "/a", "text": "x"})).await;
    assert_hooked(&echo, &write);
    let sent = calls_of(&home, "fs", "echo");
    assert_eq!(sent[0]["params"]["arguments"]["trail"], json!(["stamp"]), "{sent:?}");
    assert!(calls_of(&home, "fs", "write").is_empty(), "a denied call reached the server");
    c.close().await;
    p.wait_timeout(SLOW).await;
    home.shutdown().await;
}

#[tokio::test]
async fn audit_mode_passes_the_call_unchanged_and_logs_what_it_would_have_done() {
    let home = Home::new();
    let entries = probes(
        &home.path().join("plugins"),
        &[("watch.wasm", json!({"tools": ["echo"], "result": "deny"}), "mode = \"audit\"")],
    );
    home.write_config(&format!("{}{entries}", home.fixture("fs", &[])));
    let mut p = home.connect("fs");
    let mut c = p.client();
    c.timeout = SLOW;
    c.initialize().await;
    let echo = c.call_tool("echo", json!({"text": "as the server said"})).await;
    assert_eq!(tool_text(&echo), "as the server said", "{echo}");
    // status says which plugins read what passes, and how their entries apply them.
    let status = home.status_text().await;
    let want = "    watch.wasm: on-request and on-result for methods [tools/call], tools [echo]; audit: logged only, fail open, payloads up to 4096 KiB";
    assert!(status.contains(want), "{want} missing from:\n{status}");
    c.close().await;
    p.wait_timeout(SLOW).await;
    home.shutdown().await;
    let log = home.logs();
    let said: Vec<&str> = log.lines().filter(|l| l.contains("would deny it")).collect();
    assert_eq!(said.len(), 1, "one log line for the one call:\n{log}");
    assert!(said[0].contains("watch.wasm") && said[0].contains("tools/call `echo`"), "{}", said[0]);
    let audit = std::fs::read_dir(home.path().join("state/switchyard")).unwrap().flatten().map(|e| e.path());
    let lines: Vec<Value> = audit
        .filter(|p| p.to_string_lossy().contains(".audit.jsonl"))
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<Value>>()
        })
        .filter(|r: &Value| r["tool"] == "echo")
        .collect();
    let hooks = json!([{"plugin": "watch.wasm", "phase": "result", "verdict": "deny", "mode": "audit"}]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["hooks"], hooks, "{}", lines[0]);
    assert_eq!(lines[0]["outcome"]["result"], "ok", "{}", lines[0]);
}

#[tokio::test]
async fn through_run_a_denial_is_a_readable_result_and_a_modify_goes_both_ways() {
    let dir = temp_dir();
    let entries = probes(&dir.path().join("plugins"), &chain());
    let config = dir.path().join("switchyard.toml");
    let journal_path = dir.path().join("fs.journal.jsonl");
    let mut fixture = Proc::fixture_cmd(&[]);
    fixture.extend(["--journal".to_string(), journal_path.display().to_string()]);
    let server = format!("[servers.fs]\ncommand = {}\nargs = {}\n", json!(fixture[0]), json!(fixture[1..]));
    std::fs::write(&config, format!("{server}{entries}")).unwrap();
    let mut r = Proc::router(&["--config", config.to_str().unwrap()]);
    let mut c = r.client();
    c.timeout = SLOW;
    c.initialize().await;
    let echo = c.call_tool("echo", json!({"text": "hi"})).await;
    let write = c.call_tool("write", json!({"path": "/a", "text": "x"})).await;
    assert_hooked(&echo, &write);
    let all = journal(&journal_path);
    let sent: Vec<&Value> = received(&all, "tools/call").filter(|m| m["params"]["name"] == "echo").collect();
    assert_eq!(sent[0]["params"]["arguments"]["trail"], json!(["stamp"]), "{sent:?}");
    c.close().await;
    r.wait_timeout(SLOW).await;
}

/// POSTs `body` to the front at `url` in session `sid` (None: no session yet); the session id
/// it answers with and the messages of its answer.
async fn post(http: &reqwest::Client, url: &str, token: &str, sid: Option<&str>, body: Value) -> (String, Vec<Value>) {
    let mut r = http
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(s) = sid {
        r = r.header("mcp-session-id", s).header("mcp-protocol-version", "2025-06-18");
    }
    let resp = tokio::time::timeout(SLOW, r.send()).await.expect("the front answers").unwrap();
    let sid = resp.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let text = tokio::time::timeout(SLOW, resp.text()).await.expect("the answer ends").unwrap();
    let data = text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).filter(|d| !d.is_empty());
    (sid, data.map(|d| serde_json::from_str(d).expect("an event carries JSON")).collect())
}

#[tokio::test]
async fn through_the_http_front_a_denial_is_a_readable_result_and_a_modify_goes_both_ways() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let home = Home::new();
    let entries = probes(&home.path().join("plugins"), &chain());
    home.write_config(&format!("{}[http]\nlisten = \"127.0.0.1:0\"\n{entries}", home.fixture("fs", &[])));
    let (base, token) = home.start_http().await;
    let (http, url) = (reqwest::Client::new(), format!("{base}/mcp/fs"));
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "http-e2e", "version": "1"}}});
    let (sid, _) = post(&http, &url, &token, None, init).await;
    post(&http, &url, &token, Some(&sid), json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let call = |id: u64, tool: &str, args: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}});
    let (_, echo) = post(&http, &url, &token, Some(&sid), call(1, "echo", json!({"text": "hi"}))).await;
    let (_, write) = post(&http, &url, &token, Some(&sid), call(2, "write", json!({"path": "/a", "text": "x"}))).await;
    assert_hooked(&echo[0], &write[0]);
    assert!(calls_of(&home, "fs", "write").is_empty(), "a denied call reached the server");
    home.shutdown().await;
}
