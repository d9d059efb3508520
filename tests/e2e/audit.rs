//! The audit log through the real binary: a line for every call, its outcome right when its
//! server was killed under it, no secret in any line, `switchyard calls` and its filters, and
//! `[audit] enabled = false`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::*;
use switchyard_testkit::*;

/// What the server's environment holds, which no line may.
const SECRET_ENV: &str = "sy-env-secret-4f9c1a77";
/// Calls through the daemon's socket (the HTTP ones come on top).
const CALLS: usize = 10_000;
const CLIENTS: usize = 4;
const ROUNDS: usize = 10;
/// Writes per round that outlast the kill: they die with their server.
const SLOW_WRITES: usize = 2;

/// Every audit log file of `home` (rotated ones too), whole.
fn audit_files(home: &Home) -> Vec<PathBuf> {
    let dir = home.path().join("state/switchyard");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p: &PathBuf| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.contains(".audit.jsonl")))
        .collect();
    files.sort();
    files
}

fn audit_records(home: &Home) -> (Vec<Value>, String) {
    let mut text = String::new();
    for f in audit_files(home) {
        text.push_str(&std::fs::read_to_string(&f).unwrap());
    }
    let records = text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    (records, text)
}

fn sha256_hex(text: &str) -> String {
    switchyard_core::audit::sha256_hex(text.as_bytes())
}

/// How the client saw a call end, as the audit log should say it.
fn expected_result(resp: &Value) -> &'static str {
    if resp.get("error").is_some() {
        "error-like"
    } else if resp["result"]["isError"] == true {
        "tool_error"
    } else {
        "ok"
    }
}

async fn calls_cli(home: &Home, args: &[&str]) -> (bool, String, String) {
    let config = home.config_str();
    let mut argv = vec!["calls", "--config", config.as_str()];
    argv.extend_from_slice(args);
    let out = home.cli(&argv).await;
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn calls_json(home: &Home, args: &[&str]) -> Vec<Value> {
    let mut with = vec!["--json"];
    with.extend_from_slice(args);
    let (ok, out, err) = calls_cli(home, &with).await;
    assert!(ok, "switchyard calls {args:?} failed: {err}");
    out.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// One round of one client: `n` calls sent at once (echo, and a few slow writes), then every
/// answer. Each call's arguments are its own, so its line is found by their hash.
async fn send_round(c: &mut Client, client: usize, round: usize, n: usize) -> Vec<(Value, Value)> {
    let mut sent = Vec::new();
    for k in 0..n {
        let (tool, args) = if client == 0 && k < SLOW_WRITES {
            ("write", json!({"path": format!("p{round}-{k}"), "text": format!("w{round}-{k}"), "ms": 3000}))
        } else {
            ("echo", json!({"text": format!("c{client}-r{round}-{k}")}))
        };
        let id = c.send_request("tools/call", json!({"name": tool, "arguments": args})).await;
        sent.push((id, args));
    }
    sent
}

#[tokio::test]
async fn ten_thousand_calls_with_servers_killed_each_have_their_line_and_no_secret() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let home = Home::new();
    let server = home.fixture("fx", &[]);
    home.write_config(&format!(
        "{server}env = {{ SY_SECRET = \"{SECRET_ENV}\" }}\n[servers.fx.pools.default]\nmax = 2\n[http]\nlisten = \"127.0.0.1:0\"\n"
    ));
    let (base, token) = home.start_http().await;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(home.client("fx").await);
    }
    // Arguments' hash -> the client's answer.
    let mut answers: HashMap<String, Value> = HashMap::new();
    let mut killed = 0;
    let per_round = CALLS / ROUNDS / CLIENTS;
    for round in 0..ROUNDS {
        let mut sent = Vec::new();
        for (n, (_, c)) in clients.iter_mut().enumerate() {
            sent.push(send_round(c, n, round, per_round).await);
        }
        // The slow writes are with the server by now: kill -9 every instance under them.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let status = home.status_json().await;
        for pid in instance_pids(&status, "fx") {
            signal_pid(pid, libc::SIGKILL);
            killed += 1;
        }
        for ((_, c), calls) in clients.iter_mut().zip(sent) {
            for (id, args) in calls {
                let resp = c.wait_response(&id).await;
                answers.insert(sha256_hex(&args.to_string()), resp);
            }
        }
    }
    assert!(killed >= ROUNDS, "every round killed an instance ({killed})");
    // A few calls over HTTP, with the bearer token in their Authorization header.
    let http = reqwest::Client::new();
    let post = |body: Value, sid: Option<String>| {
        let mut r = http
            .post(format!("{base}/mcp/fx"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .header("accept", "application/json");
        if let Some(s) = sid {
            r = r.header("mcp-session-id", s).header("mcp-protocol-version", "2025-06-18");
        }
        r.body(body.to_string()).send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "audit-http", "version": "1"}}});
    let resp = post(init, None).await.unwrap();
    let sid = resp.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let _ = resp.text().await;
    let _ = post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), Some(sid.clone())).await.unwrap();
    const HTTP_CALLS: usize = 20;
    for k in 0..HTTP_CALLS {
        let args = json!({"text": format!("http-{k}")});
        let body = json!({"jsonrpc": "2.0", "id": k + 1, "method": "tools/call", "params": {"name": "echo", "arguments": args}});
        let resp: Value =
            serde_json::from_str(&post(body, Some(sid.clone())).await.unwrap().text().await.unwrap()).unwrap();
        answers.insert(sha256_hex(&args.to_string()), resp);
    }
    for (p, c) in clients {
        leave(p, c).await;
    }
    home.stop().await;

    let (records, text) = audit_records(&home);
    let calls: Vec<&Value> = records.iter().filter(|r| r["method"] == "tools/call").collect();
    // One line per request: as many as were sent, each request's own.
    assert_eq!(calls.len(), CALLS + HTTP_CALLS, "lines for tools/call");
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for r in &calls {
        *seen.entry(r["arguments_sha256"].as_str().unwrap()).or_default() += 1;
    }
    assert_eq!(seen.len(), CALLS + HTTP_CALLS, "each call has a line of its own");
    let mut died = 0;
    for r in &calls {
        let sha = r["arguments_sha256"].as_str().unwrap();
        let resp = answers.get(sha).unwrap_or_else(|| panic!("a line for a call never sent: {r}"));
        let result = r["outcome"]["result"].as_str().unwrap();
        match expected_result(resp) {
            "ok" => assert_eq!(result, "ok", "{r}\n{resp}"),
            "tool_error" => assert!(result == "tool_error" && r["outcome"]["is_error"] == true, "{r}\n{resp}"),
            _ => {
                assert!(["lost", "error", "timeout", "shutting_down"].contains(&result), "{r}\n{resp}");
                assert_eq!(r["outcome"]["code"], resp["error"]["code"], "{r}\n{resp}");
            }
        }
        if result == "lost" {
            // It reached its server, which died with it: it may or may not have run.
            assert_eq!((r["tool"].as_str(), r["outcome"]["unknown"].as_bool()), (Some("write"), Some(true)), "{r}");
            died += 1;
        }
        assert_eq!(r["server"], "fx");
        assert!(r["instance"].as_str().is_some_and(|i| i.starts_with("fx#") || i.starts_with("fx~")), "{r}");
        assert!(r["attempts"].as_u64().is_some_and(|a| a >= 1), "{r}");
        assert!(r["duration_ms"].as_f64().is_some() && r["request_bytes"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["decision"]["pool"], "default", "{r}");
    }
    assert!(died >= ROUNDS, "the slow writes died with their servers and say so ({died})");
    let over_http = calls.iter().filter(|r| r["client"]["transport"] == "http").count();
    assert_eq!(over_http, HTTP_CALLS);
    // Never a secret: not the server's environment, not the client's token or its header.
    for secret in [SECRET_ENV, token.as_str(), "Bearer", "authorization", "Authorization"] {
        assert!(!text.contains(secret), "an audit line holds {secret:?}");
    }

    // `switchyard calls` reads the same lines back, and filters them.
    let all = calls_json(&home, &[]).await;
    assert_eq!(all.len(), records.len());
    let writes = calls_json(&home, &["--tool", "write"]).await;
    assert_eq!(writes.len(), ROUNDS * SLOW_WRITES);
    let failed = calls_json(&home, &["--failed"]).await;
    let failed_in_file = records.iter().filter(|r| r["outcome"]["result"] != "ok").count();
    assert!(failed.len() >= ROUNDS && failed.len() == failed_in_file, "{} failed", failed.len());
    assert!(failed.iter().all(|r| r["outcome"]["result"] != "ok"));
    assert_eq!(
        calls_json(&home, &["--client", "audit-http", "--server", "fx", "--since", "1h"]).await.len(),
        HTTP_CALLS
    );
    assert!(calls_json(&home, &["--server", "other"]).await.is_empty());
    let (ok, table, _) = calls_cli(&home, &["--tool", "write", "--failed"]).await;
    assert!(ok && table.starts_with("TIME") && table.contains("lost") && table.contains("(ran?)"), "{table}");
    let (ok, table, err) = calls_cli(&home, &["--since", "2999-01-01"]).await;
    assert!(ok && table.is_empty() && err.contains("no calls match"), "{table}{err}");
}

#[tokio::test]
async fn the_daemon_s_log_is_0600_and_one_key_turns_it_off() {
    let home = Home::new();
    home.write_config(&home.fixture("fx", &[]));
    let (p, mut c) = home.client("fx").await;
    c.call_text("echo", json!({"text": "one"})).await;
    // [audit] is read at start: an edit is said, and the log goes on until the next start.
    home.write_config(&format!("{}[audit]\nenabled = false\n", home.fixture("fx", &[])));
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !home.logs().contains("[audit] changed in the config") {
        assert!(std::time::Instant::now() < until, "the edit of [audit] is not said:\n{}", home.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.call_text("echo", json!({"text": "two"})).await;
    leave(p, c).await;
    home.stop().await;
    let files = audit_files(&home);
    assert_eq!(files.len(), 1, "{files:?}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777, 0o600);
    let (records, _) = audit_records(&home);
    assert_eq!(records.len(), 2);
    assert_eq!(
        (records[0]["tool"].as_str(), records[0]["client"]["name"].as_str()),
        (Some("echo"), Some("switchyard-e2e"))
    );

    // Off: no file, and `calls` says why.
    std::fs::remove_file(&files[0]).unwrap();
    let (p, mut c) = home.client("fx").await;
    c.call_text("echo", json!({"text": "three"})).await;
    leave(p, c).await;
    home.stop().await;
    assert!(audit_files(&home).is_empty());
    let (ok, _, err) = calls_cli(&home, &[]).await;
    assert!(!ok && err.contains("audit log is off") && err.contains("enabled = false"), "{err}");
}

#[tokio::test]
async fn run_logs_its_calls_too() {
    let home = Home::new();
    let mut argv = vec!["run", "--"];
    let fixture = Proc::fixture_cmd(&[]);
    argv.extend(fixture.iter().map(String::as_str));
    let mut p = home.spawn("run", &argv);
    let mut c = p.client();
    c.initialize().await;
    c.call_text("echo", json!({"text": "via run"})).await;
    let resp = c.call_tool("crash", json!({"code": 3})).await;
    assert!(resp.get("error").is_some(), "{resp}");
    c.close().await;
    p.wait_timeout(Duration::from_secs(10)).await;
    let files = audit_files(&home);
    assert!(files.len() == 1 && files[0].file_name().unwrap().to_str().unwrap().starts_with("run-"), "{files:?}");
    let (records, _) = audit_records(&home);
    let results: Vec<(&str, &str)> =
        records.iter().map(|r| (r["tool"].as_str().unwrap(), r["outcome"]["result"].as_str().unwrap())).collect();
    assert_eq!(results, [("echo", "ok"), ("crash", "lost")]);
    assert_eq!(records[1]["outcome"]["unknown"], true);
}

#[tokio::test]
async fn calls_follow_prints_each_call_as_it_ends() {
    let home = Home::new();
    home.write_config(&home.fixture("fx", &[]));
    let config = home.config_str();
    // Started before the daemon: it waits for the log to appear.
    let mut follower =
        home.spawn("calls --follow", &["calls", "--config", &config, "--follow", "--json", "--tool", "echo"]);
    let mut lines = follower.client();
    let (p, mut c) = home.client("fx").await;
    for text in ["a", "b"] {
        c.call_text("echo", json!({"text": text})).await;
        let _ = c.call_tool("pid", json!({})).await;
    }
    for want in ["a", "b"] {
        let r = lines.recv().await;
        assert_eq!((r["tool"].as_str(), r["outcome"]["result"].as_str()), (Some("echo"), Some("ok")), "{r}");
        assert_eq!(r["arguments_sha256"].as_str(), Some(sha256_hex(&json!({"text": want}).to_string()).as_str()));
    }
    // Only echo: the pid calls are not printed.
    lines.expect_silence(Duration::from_millis(500)).await;
    leave(p, c).await;
    home.stop().await;
}

#[tokio::test]
async fn calls_follow_of_the_state_directory_takes_in_logs_begun_after_it() {
    let home = Home::new();
    // No audit log yet: it waits for one instead of failing.
    let mut follower = home.spawn("calls --follow", &["calls", "--follow", "--json"]);
    let mut lines = follower.client();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut argv = vec!["run", "--name", "brandnew", "--"];
    let fixture = Proc::fixture_cmd(&[]);
    argv.extend(fixture.iter().map(String::as_str));
    let mut p = home.spawn("run", &argv);
    let mut c = p.client();
    c.initialize().await;
    c.call_text("echo", json!({"text": "late"})).await;
    let r = lines.recv().await;
    assert_eq!((r["tool"].as_str(), r["outcome"]["result"].as_str()), (Some("echo"), Some("ok")), "{r}");
    assert_eq!(r["arguments_sha256"].as_str(), Some(sha256_hex(&json!({"text": "late"}).to_string()).as_str()));
    c.close().await;
    p.wait_timeout(Duration::from_secs(10)).await;
}

/// Sends `line` (a tools/call with id `id`, written by hand) and waits for its answer.
async fn call_raw(c: &mut Client, id: u64, line: &str) {
    c.send_raw(line).await;
    c.recv_until(|m| m["id"] == id).await;
}

#[tokio::test]
async fn arguments_a_line_cannot_hold_are_left_out_and_said_and_every_line_is_read_back() {
    let home = Home::new();
    home.write_config(&format!("{}[audit]\narguments = true\n", home.fixture("fx", &[])));
    let (p, mut c) = home.client("fx").await;
    let deep = format!("{{\"text\":\"deep\",\"d\":{}{}}}", "[".repeat(121), "]".repeat(121));
    let lines = [
        r#"{"text":"kept","n":1}"#.to_string(),
        deep,
        r#"{"text":"big","n":1e400}"#.to_string(),
        r#"{"text":"lone \ud800"}"#.to_string(),
    ];
    for (id, args) in lines.iter().enumerate() {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{args}}}}}"#
        );
        call_raw(&mut c, id as u64, &line).await;
    }
    let odd = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"ec\udc00ho","arguments":{}}}"#;
    call_raw(&mut c, 9, odd).await;
    leave(p, c).await;
    home.stop().await;

    let (ok, _, err) = calls_cli(&home, &["--json"]).await;
    assert!(ok && !err.contains("skipped"), "{err}");
    let records = calls_json(&home, &["--tool", "echo"]).await;
    assert_eq!(records.len(), lines.len(), "{records:?}");
    for (r, args) in records.iter().zip(&lines) {
        assert_eq!(r["arguments_sha256"].as_str(), Some(sha256_hex(args).as_str()), "{r}");
    }
    assert_eq!(records[0]["arguments"], json!({"text": "kept", "n": 1}));
    assert!(records[1..].iter().all(|r| r.get("arguments").is_none()), "{records:?}");
    // A tool named with a lone surrogate is written, and found, with U+FFFD in its place.
    let odd = calls_json(&home, &["--tool", "ec\u{fffd}ho"]).await;
    assert_eq!(odd.len(), 1, "{odd:?}");
    // Each reason said once (then at most once a minute), with server and tool, never the
    // arguments; the depth is the writer thread's to find, the others the call's.
    let logs = home.logs();
    let said: Vec<&str> = logs.lines().filter(|l| l.contains("arguments are left out")).collect();
    assert_eq!(said.len(), 3, "{logs}");
    for why in ["nest deeper", "number too large", "not valid Unicode"] {
        let line = said.iter().find(|l| l.contains(why)).unwrap_or_else(|| panic!("`{why}` not said: {logs}"));
        assert!(line.contains("fx") && line.contains("echo"), "{line}");
    }
    assert!(!logs.contains("\"deep\"") && !logs.contains("lone \\ud800"), "{logs}");
}

/// The tester's case: `path-guard` for server `t3` only. A key given twice passes as sent to
/// `t`, which no plugin judges, and its line leaves the arguments out (a server that takes the
/// first value acted on /etc/passwd, which the parsed `{"path":"/tmp/ok"}` would hide), their
/// hash kept, the reason said once and no value named. To `t3`, path-guard reads the arguments:
/// such a call is refused by switchyard, saying so, and every refused call's line names the
/// chain that judged it.
#[tokio::test]
async fn a_key_given_twice_is_left_out_of_the_line_and_refused_only_where_a_plugin_reads_it() {
    let home = Home::new();
    let plugins = home.path().join("plugins");
    install_plugin(&plugins, &example("path-guard.wasm"), "path-guard.wasm");
    let allowed = home.path().join("allowed");
    std::fs::create_dir_all(&allowed).unwrap();
    let root = json!(allowed.to_str().unwrap());
    home.write_config(&format!(
        "{}{}[audit]\narguments = true\n[[plugins]]\nfile = \"path-guard.wasm\"\nservers = [\"t3\"]\nconfig = {{ roots = [{root}] }}\n",
        home.fixture("t", &[]),
        home.fixture("t3", &[]),
    ));
    let twice =
        [r#"{"text":"kept","path":"/etc/passwd","path":"/tmp/ok"}"#, r#"{"text":"n","l":[{"z":1},{"z":1,"z":2}]}"#];
    let call = |id: usize, args: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{args}}}}}"#)
    };
    let (p, mut c) = home.client("t").await;
    for (id, args) in twice.iter().enumerate() {
        c.send_raw(&call(id, args)).await;
        let r = c.recv_until(|m| m["id"] == id).await;
        assert!(r["result"]["isError"] != true && r.get("error").is_none(), "{args}: {r}");
    }
    leave(p, c).await;
    let (p, mut c) = home.client("t3").await;
    // path-guard (serde_json) judges the last value, inside its root, and passes it: switchyard
    // refuses it, as a server that takes the first would read /etc/passwd.
    let inside = json!(allowed.join("ok").to_str().unwrap());
    c.send_raw(&call(7, &format!(r#"{{"text":"kept","path":"/etc/passwd","path":{inside}}}"#))).await;
    let r = c.recv_until(|m| m["id"] == 7).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let said = r["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(said.contains("a policy plugin reads these arguments and they give the key `path` twice"), "{said}");
    assert!(!said.contains("no policy plugin") && !said.contains("/etc/passwd"), "{said}");
    let r = c.call_tool("echo", json!({"text": "x", "path": "/etc/passwd"})).await;
    assert!(r["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("outside the allowed roots")), "{r}");
    leave(p, c).await;
    home.stop().await;

    // What `t` got: both values, as the client wrote them.
    let sent = std::fs::read_to_string(home.journal("t")).unwrap();
    assert!(sent.contains("/etc/passwd"), "the call to `t` did not reach it as sent: {sent}");
    let (records, _) = audit_records(&home);
    let on =
        |server: &'static str| records.iter().filter(move |r| r["server"] == server && r["method"] == "tools/call");
    let t: Vec<&Value> = on("t").collect();
    assert_eq!(t.len(), 2, "{records:?}");
    for (r, args) in t.iter().zip(twice) {
        assert!(r.get("arguments").is_none(), "given twice, written as parsed: {r}");
        assert_eq!(r["arguments_sha256"].as_str(), Some(sha256_hex(args).as_str()), "{r}");
        assert!(r.get("plugins").is_none() && r.get("refused_by").is_none(), "no plugin judges `t`: {r}");
    }
    let t3: Vec<&Value> = on("t3").collect();
    let refusers: Vec<&str> = t3.iter().map(|r| r["refused_by"].as_str().unwrap_or("-")).collect();
    assert_eq!(refusers, ["switchyard", "path-guard.wasm"], "{t3:?}");
    for r in &t3 {
        assert_eq!(r["plugins"][0]["name"], "path-guard.wasm", "the chain that judged it: {r}");
        assert_eq!(r["plugins"].as_array().map(Vec::len), Some(1), "{r}");
    }
    let logs = home.logs();
    let told: Vec<&str> = logs.lines().filter(|l| l.contains("arguments are left out")).collect();
    assert_eq!(told.len(), 1, "said once a minute: {logs}");
    assert!(told[0].contains("a key twice") && told[0].contains("echo"), "{}", told[0]);
    assert!(!told[0].contains("/etc/passwd") && !told[0].contains("/tmp/ok"), "{}", told[0]);
}
