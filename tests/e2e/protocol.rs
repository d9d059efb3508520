//! End-to-end tests of the client protocol edges (issues 8 and 9): end of input, invalid ids,
//! reused ids, replies switchyard cannot route, large answers, and `server/discover`.

use std::time::{Duration, Instant};

use crate::setup::*;
use serde_json::{Value, json};
use switchyard_testkit::*;

/// A `server/discover` as a 2026-07-28 client sends it (the Python SDK 2.x, say).
fn discover_params() -> Value {
    json!({"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }})
}

#[tokio::test]
async fn end_of_input_still_answers_the_calls_in_flight() {
    // `printf 'init\ncall\n' | switchyard run -- server`: the server alone answers both.
    let mut s = Setup::new(&[], &[]).await;
    s.client.send_request_with_id(json!(0), "initialize", init_params(json!({}))).await;
    s.client.notify("notifications/initialized", json!({})).await;
    s.client
        .send_request_with_id(json!(1), "tools/call", json!({"name": "echo", "arguments": {"text": "after eof"}}))
        .await;
    s.client.send_request_with_id(json!(2), "tools/call", json!({"name": "sleep", "arguments": {"ms": 300}})).await;
    s.client.close().await;
    let seen = s.client.expect_eof().await;
    let answer = |id: i64| seen.iter().find(|m| is_response(m) && m["id"] == id).cloned();
    assert!(answer(0).is_some_and(|m| m.get("result").is_some()), "initialize not answered: {seen:?}");
    assert_eq!(answer(1).map(|m| tool_text(&m).to_string()).as_deref(), Some("after eof"), "{seen:?}");
    assert_eq!(answer(2).map(|m| tool_text(&m).to_string()).as_deref(), Some("slept 300 ms"), "{seen:?}");
    assert_eq!(s.router.wait().await.code(), Some(0));
}

#[tokio::test]
async fn end_of_input_cancels_what_is_still_running_after_the_grace() {
    let dir = temp_dir();
    let journal_path = dir.path().join("journal.jsonl");
    let mut s = Setup::new(&["--journal", journal_path.to_str().unwrap()], &[]).await;
    s.client.initialize().await;
    s.client.send_request_with_id(json!("h"), "tools/call", json!({"name": "hang", "arguments": {}})).await;
    s.client.send_request_with_id(json!("q"), "tools/call", json!({"name": "echo", "arguments": {"text": "q"}})).await;
    s.client.wait_response(&json!("q")).await;
    let closed = Instant::now();
    s.client.close().await;
    let seen = s.client.expect_eof().await;
    assert!(seen.iter().all(|m| m["id"] != "h"), "a client that left is owed nothing: {seen:?}");
    assert_eq!(s.router.wait().await.code(), Some(0));
    assert!(closed.elapsed() >= Duration::from_secs(2), "the grace was not given: {:?}", closed.elapsed());
    let msgs: Vec<Value> = journal(&journal_path).into_iter().map(|e| e["msg"].clone()).collect();
    let hang_id = msgs.iter().find(|m| m["params"]["name"] == "hang").map(|m| m["id"].clone());
    assert!(
        msgs.iter()
            .any(|m| m["method"] == "notifications/cancelled" && Some(&m["params"]["requestId"]) == hang_id.as_ref()),
        "the hung call was not cancelled upstream: {msgs:?}"
    );
}

#[tokio::test]
async fn a_null_id_or_null_params_is_an_invalid_request_that_never_reaches_the_server() {
    let dir = temp_dir();
    let journal_path = dir.path().join("journal.jsonl");
    let mut s = Setup::new(&["--journal", journal_path.to_str().unwrap()], &[]).await;
    s.client.initialize().await;
    s.client
        .send_raw(r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo","arguments":{"text":"null id"}}}"#)
        .await;
    let e = s.client.recv().await;
    assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (Value::Null, json!(-32600)), "{e}");
    s.client.send_raw(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":null}"#).await;
    let e = s.client.recv().await;
    assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (json!(3), json!(-32600)), "{e}");
    // A notification with bad params is dropped: JSON-RPC allows no reply to a notification.
    s.client.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":null}"#).await;
    s.client.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed","params":7}"#).await;
    s.client.expect_silence(Duration::from_millis(300)).await;
    assert_eq!(s.client.call_text("echo", json!({"text": "still up"})).await, "still up");
    let msgs: Vec<Value> = journal(&journal_path).into_iter().map(|e| e["msg"].clone()).collect();
    assert!(
        !msgs
            .iter()
            .any(|m| m["params"]["arguments"]["text"] == "null id" || m["params"].is_null() && m.get("id").is_some()),
        "an invalid request reached the server: {msgs:?}"
    );
}

#[tokio::test]
async fn an_id_can_be_reused_right_after_cancelling_it() {
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    s.client.send_request_with_id(json!(9), "tools/call", json!({"name": "sleep", "arguments": {"ms": 5000}})).await;
    s.client.cancel(&json!(9), "changed my mind").await;
    let again = s
        .client
        .request_with_id(json!(9), "tools/call", json!({"name": "echo", "arguments": {"text": "9 again"}}))
        .await;
    assert_eq!(tool_text(&again), "9 again", "{again}");
    s.client.expect_silence(Duration::from_millis(300)).await;
}

#[tokio::test]
async fn a_server_error_with_id_null_fails_its_call_at_once() {
    // With one call in flight the error can only be that one's. switchyard's own tools/list,
    // sent as initialize is answered, would be a second: it is answered before the client's
    // own tools/list, sent after it, so once that is answered the call below is alone.
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    assert!(s.client.request("tools/list", json!({})).await.get("result").is_some());
    let started = Instant::now();
    let r = s.client.call_tool("null_id_error", json!({})).await;
    assert_eq!(r["error"]["message"], "fixture: lost track of the request", "{r}");
    assert!(started.elapsed() < Duration::from_secs(20), "waited {:?}", started.elapsed());
    assert_eq!(s.client.call_text("echo", json!({"text": "ok"})).await, "ok");
}

#[tokio::test]
async fn a_reply_over_the_size_limit_fails_its_call_at_once_with_the_reason() {
    let config = "[limits]\nmax_message_bytes = 4096\n";
    let mut s = Setup::with_config(&[], &[], Some(config)).await;
    s.client.initialize().await;
    let started = Instant::now();
    let r = s.client.call_tool("big", json!({"bytes": 20000})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("max_message_bytes") && msg.contains("4096"), "{r}");
    assert!(started.elapsed() < Duration::from_secs(20), "waited {:?}", started.elapsed());
    assert_eq!(tool_text(&s.client.call_tool("big", json!({"bytes": 100})).await).len(), 100);
}

#[tokio::test]
async fn a_large_batch_answer_to_a_reading_client_keeps_the_session() {
    let config = "[limits]\nmax_message_bytes = 65536\n";
    let mut s = Setup::with_config(&[], &[], Some(config)).await;
    s.client.initialize().await;
    let batch: Vec<Value> =
        (0..100).map(|i| json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/list", "params": {}})).collect();
    let text = Value::Array(batch).to_string();
    assert!(text.len() < 65536);
    s.client.send_raw(&text).await;
    let reply = s.client.recv().await;
    let items = reply.as_array().unwrap_or_else(|| panic!("not a batch answer: {reply}"));
    assert_eq!(items.len(), 100);
    assert!(reply.to_string().len() > 4 * 65536, "the answer must exceed the old guard to prove anything");
    assert_eq!(s.client.call_text("echo", json!({"text": "alive"})).await, "alive");
}

#[tokio::test]
async fn discover_on_a_server_of_the_initialize_era_gets_its_method_not_found_and_initialize_works() {
    let mut s = Setup::new(&[], &[]).await;
    let d = s.client.request("server/discover", discover_params()).await;
    // The server's own error, as it gave it (not switchyard's word that nothing could start).
    assert_eq!(d["error"], json!({"code": -32601, "message": "Method not found: server/discover"}), "{d}");
    s.client.initialize().await;
    assert_eq!(s.client.call_text("echo", json!({"text": "fell back"})).await, "fell back");
    // Known by now: a second probe is answered at once, without a new instance.
    let started = Instant::now();
    let d = s.client.request("server/discover", discover_params()).await;
    assert_eq!(d["error"], json!({"code": -32601, "message": "Method not found: server/discover"}), "{d}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

/// A stdio server of both eras: discover lists both versions, initialize answers 2025-11-25.
const BOTH_ERAS_SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, rid = msg.get("method"), msg["id"]
    if method == "server/discover":
        result = {"supportedVersions": ["2026-07-28", "2025-11-25"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "both-eras", "version": "1"}}
    elif method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "both-eras", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": []}
    else:
        result = None
    reply = {"jsonrpc": "2.0", "id": rid}
    if result is None:
        reply["error"] = {"code": -32601, "message": "Method not found"}
    else:
        reply["result"] = result
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
"#;

/// Found from outside: a server of both eras offered ["2026-07-28", "2025-11-25"] directly, but
/// only ["2026-07-28"] through switchyard, which serves 2025-11-25 too (through initialize).
#[tokio::test]
async fn discover_offers_every_version_the_server_lists_that_switchyard_serves() {
    let dir = temp_dir();
    let script = dir.path().join("both_eras.py");
    std::fs::write(&script, BOTH_ERAS_SERVER).unwrap();
    let script = script.display().to_string();
    let mut r = Proc::router(&["--", "python3", &script]);
    let mut c = r.client();
    let d = c.request("server/discover", discover_params()).await;
    assert_eq!(d["result"]["supportedVersions"], json!(["2026-07-28", "2025-11-25"]), "{d}");
    // And the older one is served, as offered.
    let init = c.initialize_with("2025-11-25").await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
}

/// Found from outside: Python SDK 1.x servers answer server/discover with -32602, not -32601.
/// That is a server of the initialize era all the same: the client gets its error as it gave
/// it, falls back to initialize, and one server process serves both (a 2026-era mistake started
/// a second one for the fallback and kept it for the whole session).
#[tokio::test]
async fn a_discover_refused_with_invalid_params_is_the_initialize_era_and_one_process_serves() {
    let dir = temp_dir();
    let journal = dir.path().join("journal.jsonl");
    let j = journal.display().to_string();
    let mut s = Setup::new(&["--discover-error", "-32602", "--journal", &j], &[]).await;
    let d = s.client.request("server/discover", discover_params()).await;
    assert_eq!(d["error"]["code"], -32602, "the server's own error: {d}");
    s.client.initialize().await;
    assert_eq!(s.client.call_text("echo", json!({"text": "fell back"})).await, "fell back");
    let again = s.client.request("server/discover", discover_params()).await;
    assert_eq!(again["error"]["code"], -32602, "known by now, and answered the same: {again}");
    let entries = wait_journal(&journal, Duration::from_secs(5), |e| events(e, "start").count() >= 1).await;
    assert_eq!(events(&entries, "start").count(), 1, "one server process for discover and initialize");
}

/// An auto-mode client before a server of the initialize era that is slow to start (Node or
/// Python loading): its server/discover starts an instance, which answers -32601; the client
/// falls back to initialize, which must find that instance rather than wait for a second start.
#[tokio::test]
async fn a_fallback_to_initialize_does_not_wait_for_a_second_start_of_a_slow_server() {
    let mut s = Setup::new(&["--start-delay-ms", "1500"], &[]).await;
    let started = Instant::now();
    let d = s.client.request("server/discover", discover_params()).await;
    assert_eq!(d["error"]["code"], -32601, "{d}");
    s.client.initialize().await;
    assert_eq!(s.client.call_text("echo", json!({"text": "one start"})).await, "one start");
    // One start takes 1.5 s; two would take 3 s.
    let took = started.elapsed();
    assert!(took < Duration::from_millis(2700), "discover, initialize and a call took {took:?}: two starts");
}

/// Found by testing from outside: calls a client pipelines right behind `initialize` each waited
/// for the server's initialisation on their own and woke in any order, so a serial server saw a
/// read before the write sent ahead of it. They must reach the server in the order sent.
#[tokio::test]
async fn calls_pipelined_behind_initialize_reach_the_server_in_order() {
    for round in 0..3 {
        let mut s = Setup::new(&["--serial", "--init-delay-ms", "300"], &[]).await;
        let c = &mut s.client;
        let init = c.send_request("initialize", init_params(json!({}))).await;
        c.notify("notifications/initialized", json!({})).await;
        let write =
            c.send_request("tools/call", json!({"name": "write", "arguments": {"path": "a", "text": "v1"}})).await;
        let read = c.send_request("tools/call", json!({"name": "read", "arguments": {"path": "a"}})).await;
        let sleeps: Vec<Value> =
            (0..6).map(|_| json!({"name": "sleep", "arguments": {"ms": 20}})).collect::<Vec<_>>().into_iter().collect();
        let mut ids = Vec::new();
        for args in sleeps {
            ids.push(c.send_request("tools/call", args).await);
        }
        assert!(c.wait_response(&init).await.get("result").is_some());
        assert!(c.wait_response(&write).await.get("result").is_some());
        let r = c.wait_response(&read).await;
        assert_eq!(tool_text(&r), "v1", "round {round}: the read overtook the write sent before it: {r}");
        // A serial server answers in the order it received; the answers must come back so.
        let mut order = Vec::new();
        while order.len() < ids.len() {
            let m = c.recv().await;
            if is_response(&m) {
                order.push(m["id"].clone());
            }
        }
        assert_eq!(order, ids, "round {round}: calls reached the serial server out of order");
    }
}

/// Found by testing from outside: 2026-07-28 requests to a server of the initialize era only were
/// told "switchyard is shutting down" (the calls waiting while the probe instance was found to be
/// of the other era) or "server is down". They get -32022 with the versions it does serve.
#[tokio::test]
async fn enveloped_requests_to_an_initialize_era_server_get_unsupported_version() {
    let mut s = Setup::new(&[], &[]).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
    let call = |text: &str| json!({"name": "echo", "arguments": {"text": text}, "_meta": meta});
    // Two at once: one starts the instance, the other waits for it.
    let a = s.client.send_request("tools/call", call("a")).await;
    let b = s.client.send_request("tools/call", call("b")).await;
    for id in [a, b] {
        let r = s.client.wait_response(&id).await;
        assert_eq!(r["error"]["code"], -32022, "{r}");
        assert_eq!(r["error"]["data"]["supported"], json!(["2025-11-25"]), "{r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains("initialize") && !msg.contains("shutting down"), "{r}");
    }
    let r = s.client.request("tools/call", call("later")).await;
    assert_eq!(r["error"]["code"], -32022, "{r}");
    // The initialize era still works on the same router.
    s.client.initialize().await;
    assert_eq!(s.client.call_text("echo", json!({"text": "old era"})).await, "old era");
}

/// A router driven line by line, to see ids exactly as written (serde_json would normalise them).
struct RawRouter {
    _dir: TempDir,
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl RawRouter {
    async fn start(fixture_args: &[&str]) -> RawRouter {
        use tokio::io::AsyncBufReadExt;
        let dir = temp_dir();
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        let mut cmd = tokio::process::Command::new(bin());
        cmd.args(["run", "--plugins", plugins.to_str().unwrap(), "--"]).args(Proc::fixture_cmd(fixture_args));
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        cmd.kill_on_drop(true).process_group(0);
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        RawRouter { _dir: dir, child, stdin, lines }
    }

    async fn send(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        self.stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn recv(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(5), self.lines.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("a line")
    }

    /// The next response line (notifications skipped).
    async fn response(&mut self) -> String {
        loop {
            let l = self.recv().await;
            if !l.contains("\"method\"") {
                return l;
            }
        }
    }
}

impl Drop for RawRouter {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            signal_group(pid, libc::SIGKILL);
        }
    }
}

/// Ids come back byte for byte as the client wrote them, however unusual, on every path:
/// forwarded, answered locally, refused, and through a batch.
#[tokio::test]
async fn unusual_ids_come_back_byte_for_byte() {
    let mut r = RawRouter::start(&[]).await;
    r.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#).await;
    assert!(r.response().await.contains("\"result\""));
    let ids =
        [r#""a\"b\\c\u00e9\n""#, "1e3", "-0", "1.00", "18446744073709551616000", "1e400", r#""""#, r#""\ud83d\ude00""#];
    for id in ids {
        let echo = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x"}}}}}}"#
        );
        r.send(&echo).await;
        let resp = r.response().await;
        assert!(resp.contains(&format!(r#""id":{id},"#)), "forwarded call with id {id}: {resp}");
        assert!(resp.contains("\"result\""), "forwarded call with id {id}: {resp}");
        r.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)).await;
        let resp = r.response().await;
        assert!(resp.contains(&format!(r#""id":{id},"#)), "ping with id {id}: {resp}");
    }
    // A batch holding a request, a response to nothing and a notification.
    r.send(r#"[{"jsonrpc":"2.0","id":"b\"1","method":"ping"},{"jsonrpc":"2.0","id":77,"result":{}},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]"#).await;
    let resp = r.response().await;
    assert!(resp.starts_with('[') && resp.contains(r#""id":"b\"1""#), "{resp}");
}

/// A minimal MCP server in Python that answers `tools/call` inside a JSON-RPC batch (allowed by
/// the 2025-03-26 revision, in both directions), together with a log notification.
const BATCHING_SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    if m["method"] == "initialize":
        out = {"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": "2025-03-26", "capabilities": {"tools": {}, "logging": {}}, "serverInfo": {"name": "batcher", "version": "1"}}}
    elif m["method"] == "tools/call":
        out = [{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "in a batch"}},
               {"jsonrpc": "2.0", "id": m["id"], "result": {"content": [{"type": "text", "text": "batched"}]}}]
    else:
        out = {"jsonrpc": "2.0", "id": m["id"], "result": {}}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
"#;

#[tokio::test]
async fn a_batch_from_the_server_is_routed_like_its_messages() {
    let dir = temp_dir();
    let script = dir.path().join("batcher.py");
    std::fs::write(&script, BATCHING_SERVER).unwrap();
    let server = ["python3".to_string(), script.display().to_string()];
    let mut s = Setup::in_front_of(&server, &[], Some("[limits]\ncall_timeout_ms = 2000\n"), &[]).await;
    let client = &mut s.client;
    client.initialize().await;
    let resp = client.call_tool("anything", json!({})).await;
    assert_eq!(tool_text(&resp), "batched", "{resp}");
    let log = client.recv_notification("notifications/message").await;
    assert_eq!(log["params"]["data"], "in a batch");
}

/// A `tools/call` without an id is a notification by JSON-RPC, and no MCP one: it reaches no
/// instance (it went to every instance of the pool, past the policy without its tool name), is
/// never answered, and its drop is logged once, however many come.
#[tokio::test]
async fn a_request_method_without_an_id_reaches_no_server() {
    let dir = temp_dir();
    let journal = journal_in(&dir);
    let mut s = pool_of_two(&journal).await;
    for _ in 0..5 {
        s.client
            .send_raw(
                r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","arguments":{"text":"no id"}}}"#,
            )
            .await;
    }
    s.client.send_raw(r#"{"jsonrpc":"2.0","method":"resources/read","params":{"uri":"fixture://readme"}}"#).await;
    s.client.expect_silence(Duration::from_millis(300)).await;
    assert_eq!(s.client.call_text("echo", json!({"text": "with id"})).await, "with id");
    let entries = switchyard_testkit::journal(&journal);
    let calls: Vec<&Value> = received(&entries, "tools/call").collect();
    assert_eq!(calls.len(), 1, "only the call with an id reaches a server: {calls:?}");
    assert_eq!(received(&entries, "resources/read").count(), 0);
    let log = s.router.stderr.text();
    assert_eq!(log.matches("dropped a `tools/call` without an id").count(), 1, "logged once: {log}");
}
