//! The fixture server driven directly (no router): proves the fixture's scripted behaviours and the harness.

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_testkit::{Client, Proc, events, received, temp_dir, tool_text, wait_journal};

async fn started(args: &[&str]) -> (Proc, Client) {
    let mut p = Proc::fixture(args);
    let mut c = p.client();
    c.initialize().await;
    (p, c)
}

#[tokio::test]
async fn initialize_reports_name_and_capabilities() {
    let mut p = Proc::fixture(&["--name", "alpha"]);
    let mut c = p.client();
    let init = c.initialize_with("2025-11-25").await;
    assert_eq!(init["result"]["serverInfo"]["name"], "alpha");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true);
    let pid = c.call_text("pid", json!({})).await;
    let pid: serde_json::Value = serde_json::from_str(&pid).unwrap();
    assert_eq!(pid["pid"], p.pid, "the fixture runs in the spawned process itself");
    assert_eq!(pid["name"], "alpha");
}

#[tokio::test]
async fn serial_mode_makes_a_quick_call_wait_behind_a_slow_one() {
    let (_p, mut c) = started(&["--serial"]).await;
    let t0 = Instant::now();
    let slow = c.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 500}})).await;
    let quick = c.send_request("tools/call", json!({"name": "echo", "arguments": {"text": "hi"}})).await;
    let echo = c.wait_response(&quick).await;
    let waited = t0.elapsed();
    assert_eq!(tool_text(&echo), "hi");
    assert!(waited >= Duration::from_millis(450), "echo answered after {waited:?}, not serialised");
    // The slow one was answered first and is waiting in the buffer.
    assert_eq!(c.buffered().len(), 1);
    assert_eq!(tool_text(&c.wait_response(&slow).await), "slept 500 ms");
}

#[tokio::test]
async fn concurrent_mode_answers_a_quick_call_at_once() {
    let (_p, mut c) = started(&[]).await;
    let slow = c.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 800}})).await;
    let t0 = Instant::now();
    assert_eq!(c.call_text("echo", json!({"text": "hi"})).await, "hi");
    let waited = t0.elapsed();
    assert!(waited < Duration::from_millis(400), "echo took {waited:?} behind a sleep");
    assert_eq!(tool_text(&c.wait_response(&slow).await), "slept 800 ms");
}

#[tokio::test]
async fn cancellation_stops_a_sleep_and_is_journaled() {
    let dir = temp_dir();
    let jpath = dir.path().join("journal.jsonl");
    let (_p, mut c) = started(&["--journal", jpath.to_str().unwrap()]).await;
    let id = c.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 30_000}})).await;
    c.cancel(&id, "test says stop").await;
    let entries = wait_journal(&jpath, Duration::from_secs(5), |j| events(j, "cancelled").next().is_some()).await;
    let cancelled = events(&entries, "cancelled").next().unwrap();
    assert_eq!(cancelled["requestId"], id);
    assert_eq!(received(&entries, "notifications/cancelled").next().unwrap()["params"]["requestId"], id);
    // No response for the cancelled call, and the server still answers.
    c.expect_silence(Duration::from_millis(200)).await;
    assert!(switchyard_testkit::is_response(&c.request("ping", json!({})).await));
    assert!(c.buffered().is_empty(), "late response after cancellation: {:?}", c.buffered());
}

#[tokio::test]
async fn hang_never_answers_but_honours_cancellation() {
    let dir = temp_dir();
    let jpath = dir.path().join("j.jsonl");
    let (_p, mut c) = started(&["--serial", "--journal", jpath.to_str().unwrap()]).await;
    let id = c.send_request("tools/call", json!({"name": "hang", "arguments": {}})).await;
    c.expect_silence(Duration::from_millis(200)).await;
    c.cancel(&id, "enough").await;
    // Serial: the echo can only run once the hang is gone.
    assert_eq!(c.call_text("echo", json!({"text": "free"})).await, "free");
    assert_eq!(events(&switchyard_testkit::journal(&jpath), "cancelled").count(), 1);
}

#[tokio::test]
async fn crash_exits_with_the_code_and_explains_on_stderr() {
    let (mut p, mut c) = started(&[]).await;
    c.send_request("tools/call", json!({"name": "crash", "arguments": {"code": 7}})).await;
    let leftovers = c.expect_eof().await;
    assert!(leftovers.is_empty(), "crash answered: {leftovers:?}");
    assert_eq!(p.exit_code().await, Some(7));
    let stderr = p.stderr.text();
    assert!(stderr.contains("fixture: crashing on purpose"), "{stderr}");
    assert!(stderr.contains("fixture: exit code 7"), "{stderr}");
}

#[tokio::test]
async fn crash_by_sigkill() {
    use std::os::unix::process::ExitStatusExt;
    let (mut p, mut c) = started(&[]).await;
    c.send_request("tools/call", json!({"name": "crash", "arguments": {"signal": "KILL"}})).await;
    c.expect_eof().await;
    assert_eq!(p.wait().await.signal(), Some(libc::SIGKILL));
}

#[tokio::test]
async fn exit_on_start_refuses_with_the_code() {
    let mut p = Proc::fixture(&["--exit-on-start", "42"]);
    assert_eq!(p.exit_code().await, Some(42));
    assert!(p.stderr.text().contains("fixture: refusing to start (exit 42)"), "{}", p.stderr.text());
}

#[tokio::test]
async fn sampling_elicitation_and_roots_round_trip_through_the_client() {
    let (_p, mut c) = started(&[]).await;

    let call = c.send_request("tools/call", json!({"name": "sample", "arguments": {"prompt": "2+2?"}})).await;
    let req = c.recv_request("sampling/createMessage").await;
    assert_eq!(req["params"]["messages"][0]["content"]["text"], "2+2?");
    c.respond(
        req["id"].clone(),
        json!({"role": "assistant", "model": "m", "content": {"type": "text", "text": "four"}}),
    )
    .await;
    assert_eq!(tool_text(&c.wait_response(&call).await), "four");

    let call = c.send_request("tools/call", json!({"name": "elicit", "arguments": {"message": "name?"}})).await;
    let req = c.recv_request("elicitation/create").await;
    assert_eq!(req["params"]["message"], "name?");
    c.respond(req["id"].clone(), json!({"action": "accept", "content": {"answer": "Ada"}})).await;
    let got: serde_json::Value = serde_json::from_str(tool_text(&c.wait_response(&call).await)).unwrap();
    assert_eq!(got, json!({"action": "accept", "content": {"answer": "Ada"}}));

    c.roots = None;
    let call = c.send_request("tools/call", json!({"name": "roots", "arguments": {}})).await;
    let req = c.recv_request("roots/list").await;
    c.respond_error(req["id"].clone(), -32603, "no roots today").await;
    let resp = c.wait_response(&call).await;
    assert_eq!(resp["result"]["isError"], true);
    assert_eq!(tool_text(&resp), "no roots today");
}

#[tokio::test]
async fn progress_notifications_carry_the_token() {
    let (_p, mut c) = started(&[]).await;
    let id = c
        .send_request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 250, "progress_ms": 100},
                                           "_meta": {"progressToken": "p-1"}}),
        )
        .await;
    let resp = c.wait_response(&id).await;
    assert_eq!(tool_text(&resp), "slept 250 ms");
    let progress: Vec<_> = c.buffered().iter().map(|m| m["params"]["progress"].clone()).collect();
    assert_eq!(progress, vec![json!(100), json!(200)]);
    assert!(c.buffered().iter().all(|m| m["params"]["progressToken"] == "p-1"));
}

#[tokio::test]
async fn garbage_lines_are_printed_on_stdout() {
    let (_p, mut c) = {
        let mut p = Proc::fixture(&["--garbage-at-start"]);
        let mut c = p.client();
        c.allow_non_json(true);
        c.initialize().await;
        (p, c)
    };
    assert_eq!(c.call_text("garbage", json!({})).await, "ok");
    assert_eq!(c.non_json.len(), 2, "{:?}", c.non_json);
}

#[tokio::test]
async fn ignore_sigterm_keeps_serving_until_stdin_closes() {
    let (mut p, mut c) = started(&["--ignore-sigterm"]).await;
    p.signal(libc::SIGTERM);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(c.call_text("echo", json!({"text": "still here"})).await, "still here");
    c.close().await;
    assert_eq!(p.exit_code().await, Some(0));
    assert!(p.stderr.text().contains("ignoring SIGTERM"), "{}", p.stderr.text());
}

#[tokio::test]
async fn instances_share_one_journal() {
    let dir = temp_dir();
    let jpath = dir.path().join("shared.jsonl");
    let j = jpath.to_str().unwrap();
    let (a, mut ca) = started(&["--name", "a", "--journal", j]).await;
    let (b, mut cb) = started(&["--name", "b", "--journal", j]).await;
    for i in 0..20 {
        ca.call_text("write", json!({"path": "/x", "text": format!("a{i}")})).await;
        cb.call_text("write", json!({"path": "/x", "text": format!("b{i}")})).await;
    }
    let entries = switchyard_testkit::journal(&jpath);
    for p in [&a, &b] {
        let mine = |e: &&serde_json::Value| e["pid"] == p.pid;
        assert_eq!(events(&entries, "start").filter(mine).count(), 1);
        assert_eq!(events(&entries, "write_start").filter(mine).count(), 20);
        assert_eq!(events(&entries, "write_end").filter(mine).count(), 20);
    }
}

#[tokio::test]
async fn stdin_eof_ends_the_fixture_and_it_is_reaped() {
    let (mut p, mut c) = started(&[]).await;
    assert!(switchyard_testkit::pid_alive(p.pid));
    c.close().await;
    assert_eq!(p.exit_code().await, Some(0));
    assert!(!switchyard_testkit::pid_alive(p.pid));
}
