//! End-to-end tests of `switchyard run` as a transparent router (issue 2), with the fixture server.

mod harness;
mod setup;

use std::time::{Duration, Instant};

use harness::*;
use serde_json::{Value, json};
use setup::*;

#[tokio::test]
async fn initialize_and_tools_are_the_servers_own() {
    let mut direct = Proc::fixture(&[]);
    let mut dc = direct.client();
    let want_init = dc.initialize().await;
    let want_tools = dc.request("tools/list", json!({})).await;

    let mut s = Setup::new(&[], &[]).await;
    let got_init = s.client.initialize().await;
    let got_tools = s.client.request("tools/list", json!({})).await;
    assert_eq!(got_init["result"], want_init["result"]);
    assert_eq!(got_tools["result"], want_tools["result"]);
    assert_eq!(got_init["id"], want_init["id"]);
    // A second initialize (a reconnecting client) is answered from the same result.
    let again = s.client.request("initialize", init_params(json!({}))).await;
    assert_eq!(again["result"], want_init["result"]);
}

#[tokio::test]
async fn calls_are_pipelined_and_ids_restored() {
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    // String and numeric ids, sent together; the quick one must not wait for the slow one.
    s.client
        .send_request_with_id(json!("slow-1"), "tools/call", json!({"name": "sleep", "arguments": {"ms": 1500}}))
        .await;
    let started = Instant::now();
    let quick =
        s.client.request_with_id(json!(7), "tools/call", json!({"name": "echo", "arguments": {"text": "quick"}})).await;
    assert_eq!(tool_text(&quick), "quick");
    assert!(started.elapsed() < Duration::from_millis(1200), "echo waited for sleep: {:?}", started.elapsed());
    let slow = s.client.wait_response(&json!("slow-1")).await;
    assert_eq!(tool_text(&slow), "slept 1500 ms");
}

#[tokio::test]
async fn bad_input_gets_errors_and_the_session_stays_up() {
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    s.client.send_raw("this is not json").await;
    let e = s.client.recv().await;
    assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (Value::Null, json!(-32700)));
    s.client.send_raw(r#"{"jsonrpc":"2.0","id":5,"params":{}}"#).await;
    let e = s.client.recv().await;
    assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (json!(5), json!(-32600)));
    s.client.send_raw(r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#).await;
    assert_eq!(s.client.recv().await["error"]["code"], -32600);
    // A response to an id nobody asked is dropped, not forwarded and not fatal.
    s.client.send_raw(r#"{"jsonrpc":"2.0","id":999,"result":{}}"#).await;
    // A duplicate id while the first is in flight is refused; the first still completes.
    s.client.send_request_with_id(json!(40), "tools/call", json!({"name": "sleep", "arguments": {"ms": 300}})).await;
    s.client.send_request_with_id(json!(40), "tools/call", json!({"name": "echo", "arguments": {"text": "dup"}})).await;
    let dup = s.client.recv_until(|m| m["id"] == 40 && m.get("error").is_some()).await;
    assert!(dup["error"]["message"].as_str().unwrap().contains("already in use"), "{dup}");
    let first = s.client.wait_response(&json!(40)).await;
    assert_eq!(tool_text(&first), "slept 300 ms");
    assert_eq!(s.client.call_text("echo", json!({"text": "still here"})).await, "still here");
}

#[tokio::test]
async fn oversized_messages_are_refused_and_skipped() {
    let mut s2 = Setup::with_config(&[], &[], Some("[limits]\nmax_message_bytes = 2048\n")).await;
    s2.client.initialize().await;
    let big = "x".repeat(10_000);
    s2.client.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{big}"}}}}}}"#)).await;
    let e = s2.client.recv().await;
    assert_eq!(e["error"]["code"], -32600);
    assert!(e["error"]["message"].as_str().unwrap().contains("max_message_bytes"), "{e}");
    assert_eq!(s2.client.call_text("echo", json!({"text": "small"})).await, "small");
}

#[tokio::test]
async fn batches_are_answered_as_one_array() {
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    s.client
        .send_raw(
            r#"[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"echo","arguments":{"text":"in batch"}}},{"jsonrpc":"2.0","id":"c","params":{}}]"#,
        )
        .await;
    let reply = s.client.recv_until(|m| m.is_array()).await;
    let items = reply.as_array().unwrap();
    assert_eq!(items.len(), 3, "a notification gets no entry: {reply}");
    let by_id = |id: &str| items.iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("no {id} in {reply}"));
    assert_eq!(by_id("a")["result"], json!({}));
    assert_eq!(tool_text(by_id("b")), "in batch");
    assert_eq!(by_id("c")["error"]["code"], -32600);
    s.client.send_raw("[]").await;
    assert_eq!(s.client.recv().await["error"]["code"], -32600);
}

#[tokio::test]
async fn cancellation_reaches_the_server_with_its_own_id() {
    let dir = temp_dir();
    let journal = dir.path().join("j.jsonl").display().to_string();
    let mut s = Setup::new(&["--journal", &journal], &[]).await;
    s.client.initialize().await;
    s.client.send_request_with_id(json!(3), "tools/call", json!({"name": "sleep", "arguments": {"ms": 20000}})).await;
    // Wait until the server has the call, then cancel it.
    let entries = wait_journal(&journal, Duration::from_secs(5), |e| received(e, "tools/call").count() > 0).await;
    let upstream_id = received(&entries, "tools/call").next().unwrap()["id"].clone();
    assert!(upstream_id.is_u64(), "the server sees the router's numeric id");
    s.client.cancel(&json!(3), "user pressed stop").await;
    let entries =
        wait_journal(&journal, Duration::from_secs(5), |e| received(e, "notifications/cancelled").count() > 0).await;
    let cancel = received(&entries, "notifications/cancelled").next().unwrap();
    assert_eq!(cancel["params"]["requestId"], upstream_id);
    assert_eq!(cancel["params"]["reason"], "user pressed stop", "the client's reason is passed on");
    // No response for the cancelled call; the session goes on.
    assert_eq!(s.client.call_text("echo", json!({"text": "next"})).await, "next");
    s.client.expect_silence(Duration::from_millis(300)).await;
    assert!(s.client.buffered().iter().all(|m| m["id"] != 3), "a cancelled call was answered");
}

#[tokio::test]
async fn progress_tokens_are_rewritten_and_mapped_back() {
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    let id = s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 400, "progress_ms": 100}, "_meta": {"progressToken": "my-token"}})).await;
    let resp = s.client.wait_response(&id).await;
    assert_eq!(tool_text(&resp), "slept 400 ms");
    let progress: Vec<&Value> =
        s.client.buffered().iter().filter(|m| m["method"] == "notifications/progress").collect();
    assert!(progress.len() >= 2, "expected progress, got {:?}", s.client.buffered());
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == "my-token"));
}

#[tokio::test]
async fn server_requests_reach_the_client_and_answers_go_back() {
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    let id = s.client.send_request("tools/call", json!({"name": "sample", "arguments": {"prompt": "hello?"}})).await;
    let req = s.client.recv_request("sampling/createMessage").await;
    s.client
        .respond(
            req["id"].clone(),
            json!({"role": "assistant", "content": {"type": "text", "text": "sampled!"}, "model": "m"}),
        )
        .await;
    let resp = s.client.wait_response(&id).await;
    assert!(tool_text(&resp).contains("sampled!"), "{resp}");
    let id = s.client.send_request("tools/call", json!({"name": "roots", "arguments": {}})).await;
    let req = s.client.recv_request("roots/list").await;
    s.client.respond(req["id"].clone(), json!({"roots": [{"uri": "file:///w", "name": "w"}]})).await;
    assert!(tool_text(&s.client.wait_response(&id).await).contains("file:///w"));
}

#[tokio::test]
async fn logging_level_and_subscriptions_are_honoured() {
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    assert_eq!(s.client.request("logging/setLevel", json!({"level": "warning"})).await["result"], json!({}));
    s.client.call_text("log", json!({"level": "info", "message": "quiet"})).await;
    s.client.call_text("log", json!({"level": "error", "message": "loud"})).await;
    let seen = drain(&mut s.client, Duration::from_millis(200)).await;
    let logs: Vec<&Value> = seen.iter().filter(|m| m["method"] == "notifications/message").collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0]["params"]["data"], "loud");

    let uri = "fixture://a";
    assert_eq!(s.client.request("resources/subscribe", json!({"uri": uri})).await["result"], json!({}));
    s.client.call_text("touch", json!({"uri": uri})).await;
    s.client.recv_notification("notifications/resources/updated").await;
    assert_eq!(s.client.request("resources/unsubscribe", json!({"uri": uri})).await["result"], json!({}));
    assert_eq!(s.client.call_text("touch", json!({"uri": uri})).await, "not subscribed");
}

#[tokio::test]
async fn ping_is_local_and_discover_is_answered_fast() {
    // The fixture never answers ping: a pong can only come from the router.
    let mut s = Setup::new(&["--no-pong"], &[]).await;
    let started = Instant::now();
    let d = s.client.request("server/discover", json!({})).await;
    assert_eq!(d["error"]["code"], -32601);
    assert!(started.elapsed() < Duration::from_secs(2));
    s.client.initialize().await;
    assert_eq!(s.client.request("ping", json!({})).await["result"], json!({}));
    let d = s.client.request("server/discover", json!({})).await;
    assert_eq!(d["error"]["code"], -32601, "the fixture does not know server/discover: {d}");
}

#[tokio::test]
async fn garbage_on_the_servers_stdout_never_reaches_the_client() {
    let mut s = Setup::new(&["--garbage-at-start"], &[]).await;
    s.client.initialize().await;
    assert_eq!(s.client.call_text("garbage", json!({})).await, "ok");
    assert!(s.client.non_json.is_empty());
    assert!(s.router.stderr.text().contains("non-JSON-RPC line"), "the skip is logged");
}

#[tokio::test]
async fn client_eof_shuts_down_cleanly_and_reaps_the_server() {
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    let pid = fixture_pid(&mut s.client).await;
    s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 30000}})).await;
    let closed = Instant::now();
    s.client.close().await;
    let status = s.router.wait_timeout(Duration::from_secs(8)).await;
    assert_eq!(status.code(), Some(0));
    // The server leaves at stdin EOF, so nothing should hold the router for seconds.
    assert!(closed.elapsed() < Duration::from_millis(2500), "exit took {:?}", closed.elapsed());
    assert!(wait_gone(pid, Duration::from_secs(2)).await, "fixture {pid} outlived the router");
}

#[tokio::test]
async fn sigterm_escalates_for_a_stubborn_server_and_exits_zero() {
    let mut s = Setup::new(&["--ignore-sigterm", "--ignore-stdin-eof"], &[]).await;
    s.client.initialize().await;
    let pid = fixture_pid(&mut s.client).await;
    s.router.signal(libc::SIGTERM);
    let status = s.router.wait_timeout(Duration::from_secs(12)).await;
    assert_eq!(status.code(), Some(0), "{}", s.router.stderr.text());
    assert!(wait_gone(pid, Duration::from_secs(2)).await);
    let log = s.router.stderr.text();
    assert!(log.contains("SIGTERM") && log.contains("SIGKILL"), "escalation is logged: {log}");
}

#[tokio::test]
async fn a_killed_router_leaves_no_orphan() {
    let mut s = Setup::new(&["--ignore-stdin-eof"], &[]).await;
    s.client.initialize().await;
    let pid = fixture_pid(&mut s.client).await;
    s.router.signal(libc::SIGKILL);
    s.router.wait().await;
    assert!(wait_gone(pid, Duration::from_secs(3)).await, "fixture {pid} survived a SIGKILLed router");
}

#[tokio::test]
async fn a_missing_command_is_a_clear_error() {
    let mut r = Proc::router(&["--", "/nonexistent/mcp-server"]);
    let mut c = r.client();
    let resp = c.request("initialize", init_params(json!({}))).await;
    let msg = resp["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains("/nonexistent/mcp-server") && msg.contains("No such file"), "{resp}");
}

#[tokio::test]
async fn stdout_carries_protocol_only() {
    let mut s = Setup::new(&["--garbage-at-start"], &["--log-level", "debug"]).await;
    s.client.initialize().await;
    s.client.call_text("echo", json!({"text": "x"})).await;
    s.client.close().await;
    let rest = s.client.expect_eof().await;
    assert!(s.client.non_json.is_empty(), "non-JSON on stdout: {:?}", s.client.non_json);
    assert!(rest.iter().all(|m| m["jsonrpc"] == "2.0"));
}

#[tokio::test]
async fn a_server_request_is_withdrawn_when_its_instance_dies() {
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    let pid = fixture_pid(&mut s.client).await;
    let call = s.client.send_request("tools/call", json!({"name": "sample", "arguments": {"prompt": "?"}})).await;
    let req = s.client.recv_request("sampling/createMessage").await;
    // SAFETY: plain kill(2) of the fixture this test started through the router.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let cancelled = s.client.recv_notification("notifications/cancelled").await;
    assert_eq!(cancelled["params"]["requestId"], req["id"]);
    let resp = s.client.wait_response(&call).await;
    assert_eq!(resp["error"]["code"], -32003, "{resp}");
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_not_buffered_forever() {
    let mut s = Setup::with_config(&[], &[], Some("[limits]\nmax_message_bytes = 4096\n")).await;
    s.client.initialize().await;
    // About 400 KiB of answers that the client never reads: the pipe takes 64 KiB, the router's
    // queue may take 4 x max_message_bytes, then the session is closed.
    let text = "x".repeat(2000);
    for id in 1000..1200 {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}});
        // The router stops reading once it gives up on this client: a failed write is expected.
        if s.client.try_send_raw(&call.to_string()).await.is_err() {
            break;
        }
    }
    let status = s.router.wait_timeout(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0));
    assert!(s.router.stderr.text().contains("not reading its messages"), "{}", s.router.stderr.text());
}

#[tokio::test]
async fn a_server_calls_back_only_after_the_client_is_initialised() {
    // The router initialises the server on the client's behalf; the server asks for roots at
    // once. The client must not see that request before its own `initialized`.
    let mut s = Setup::new(&["--roots-on-initialized"], &[]).await;
    let init = s.client.request("initialize", init_params(json!({"roots": {}}))).await;
    assert!(init.get("result").is_some(), "{init}");
    let early = drain(&mut s.client, Duration::from_millis(400)).await;
    assert!(early.is_empty(), "server messages reached a client that is not initialised: {early:?}");
    s.client.notify("notifications/initialized", json!({})).await;
    let req = s.client.recv_request("roots/list").await;
    s.client.respond(req["id"].clone(), json!({"roots": [{"uri": "file:///held", "name": "h"}]})).await;
    // And the server got the answer.
    assert_eq!(s.client.call_text("echo", json!({"text": "after"})).await, "after");
}

#[tokio::test]
async fn calls_in_flight_at_shutdown_are_answered_with_an_error() {
    let dir = temp_dir();
    let journal_file = journal_in(&dir);
    let mut s = Setup::new(&["--journal", &journal_file], &[]).await;
    s.client.initialize().await;
    let id = s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 30000}})).await;
    wait_journal(&journal_file, Duration::from_secs(5), |e| received(e, "tools/call").count() > 0).await;
    s.router.signal(libc::SIGTERM);
    let resp = s.client.wait_response(&id).await;
    assert_eq!(resp["error"]["code"], -32003, "{resp}");
    assert!(resp["error"]["message"].as_str().unwrap().contains("shutting down"), "{resp}");
    assert_eq!(s.router.wait_timeout(Duration::from_secs(8)).await.code(), Some(0));
    // The server was told to stop the call before it was shut down.
    let entries = harness::journal(&journal_file);
    assert_eq!(received(&entries, "notifications/cancelled").count(), 1);
}
