//! End-to-end scenarios of the engine (issue 4): pools, gates, timeouts, retries, crash recovery.

mod harness;
mod setup;

use std::time::{Duration, Instant};

use harness::*;
use serde_json::{Value, json};
use setup::*;

const POOL_OF_FOUR_SERIAL: &str = "[pools.default]\nmin = 1\nmax = 4\nmax_inflight = 1\n";

/// Sends a slow call and, right behind it, a quick one; returns how long the quick one took.
async fn quick_behind_slow(slow: &mut Client, quick: &mut Client, slow_ms: u64) -> (Duration, Value) {
    let slow_id = slow.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": slow_ms}})).await;
    // Let the slow call reach the server first.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let text = quick.call_text("echo", json!({"text": "quick"})).await;
    let took = started.elapsed();
    assert_eq!(text, "quick");
    let slow_resp = slow.wait_response(&slow_id).await;
    (took, slow_resp)
}

#[tokio::test]
async fn head_of_line_blocking_is_gone_with_a_pool() {
    // Directly, a serial server makes the quick call wait for the slow one.
    let mut direct = Proc::fixture(&["--serial"]);
    let mut d = direct.client();
    d.initialize().await;
    let slow_id = d.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 1500}})).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let echo_id = d.send_request("tools/call", json!({"name": "echo", "arguments": {"text": "q"}})).await;
    d.wait_response(&echo_id).await;
    let direct_wait = started.elapsed();
    d.wait_response(&slow_id).await;
    assert!(direct_wait >= Duration::from_millis(1200), "the fixture must really be serial: {direct_wait:?}");

    // Through switchyard with a pool of up to four serial instances it does not.
    let mut s = Setup::with_config(&["--serial"], &[], Some(POOL_OF_FOUR_SERIAL)).await;
    s.client.initialize().await;
    let mut second = {
        // The same client sends both: split borrows by using the one client twice in sequence.
        let slow_id = s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 1500}})).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        assert_eq!(s.client.call_text("echo", json!({"text": "q"})).await, "q");
        let took = started.elapsed();
        s.client.wait_response(&slow_id).await;
        took
    };
    assert!(second < Duration::from_millis(1000), "echo waited behind sleep through switchyard: {second:?}");

    // And across two sessions sharing the router.
    let sock = s.dir.path().join("r.sock");
    let mut r =
        Setup::with_config(&["--serial"], &["--listen", sock.to_str().unwrap()], Some(POOL_OF_FOUR_SERIAL)).await;
    r.client.initialize().await;
    let (_p, mut other) = connect(&sock).await;
    other.initialize().await;
    let (took, slow) = quick_behind_slow(&mut r.client, &mut other, 1500).await;
    second = took;
    assert_eq!(tool_text(&slow), "slept 1500 ms");
    assert!(second < Duration::from_millis(1000), "session B waited for session A: {second:?}");
}

#[tokio::test]
async fn a_hung_call_times_out_is_cancelled_upstream_and_its_late_reply_is_dropped() {
    let dir = temp_dir();
    let journal = journal_in(&dir);
    let mut s = Setup::with_config(&["--journal", &journal], &[], Some("[limits]\ncall_timeout_ms = 500\n")).await;
    s.client.initialize().await;
    let started = Instant::now();
    let resp = s.client.call_tool("write", json!({"path": "/p", "text": "t", "ms": 1500})).await;
    let took = started.elapsed();
    assert_eq!(resp["error"]["code"], -32001, "{resp}");
    let msg = resp["error"]["message"].as_str().unwrap();
    assert!(msg.contains("`write`") && msg.contains("timed out after 0.5 s") && msg.contains("switchyard"), "{msg}");
    assert!(took < Duration::from_millis(1400), "the timeout fired late: {took:?}");
    let entries =
        wait_journal(&journal, Duration::from_secs(3), |e| received(e, "notifications/cancelled").count() > 0).await;
    let call_id = received(&entries, "tools/call").last().unwrap()["id"].clone();
    assert!(call_id.is_u64());
    assert_eq!(received(&entries, "notifications/cancelled").next().unwrap()["params"]["requestId"], call_id);
    // The late reply (the write finishes at 1.5 s) must not reach the client as a second answer.
    let late = drain(&mut s.client, Duration::from_millis(1500)).await;
    assert!(late.iter().all(|m| !is_response(m)), "late response leaked: {late:?}");
    assert_eq!(s.client.call_text("echo", json!({"text": "alive"})).await, "alive");
}

#[tokio::test]
async fn an_instance_that_stops_answering_pings_is_recycled() {
    let cfg = "[limits]\nhealth_interval_ms = 200\nhealth_timeout_ms = 300\n";
    let mut s = Setup::with_config(&["--no-pong"], &[], Some(cfg)).await;
    s.client.initialize().await;
    let first = fixture_pid(&mut s.client).await;
    assert!(wait_gone(first, Duration::from_secs(5)).await, "the hung instance was not recycled");
    let second = fixture_pid(&mut s.client).await;
    assert_ne!(first, second);
    assert!(s.router.stderr.text().contains("did not answer a health ping"));
}

#[tokio::test]
async fn a_crash_fails_unsafe_calls_fast_and_retries_safe_ones() {
    let mut s = Setup::new(&[], &[]).await;
    s.client.initialize().await;
    // Let the router learn the tools' annotations (sleep is read-only; write is not).
    s.client.request("tools/list", json!({})).await;
    let pid = fixture_pid(&mut s.client).await;
    let write_id = s
        .client
        .send_request("tools/call", json!({"name": "write", "arguments": {"path": "/a", "text": "x", "ms": 10000}}))
        .await;
    let sleep_id = s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 300}})).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    // SAFETY: plain kill(2) of the fixture process this test started through the router.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let killed = Instant::now();
    let write = s.client.wait_response(&write_id).await;
    let answered = killed.elapsed();
    assert_eq!(write["error"]["code"], -32003, "{write}");
    let msg = write["error"]["message"].as_str().unwrap();
    assert!(msg.contains("`write`") && msg.contains("killed by signal 9") && msg.contains("#1"), "{msg}");
    assert!(answered < Duration::from_secs(1), "crash answered after {answered:?}");
    // The read-only call was retried on a fresh instance and succeeded.
    let sleep = s.client.wait_response(&sleep_id).await;
    assert_eq!(tool_text(&sleep), "slept 300 ms", "{sleep}");
    assert_ne!(fixture_pid(&mut s.client).await, pid);
}

#[tokio::test]
async fn a_crash_loop_marks_the_server_down_with_the_reason() {
    let mut s = Setup::new(&["--exit-on-start", "7"], &[]).await;
    let params = init_params(json!({}));
    let first = s.client.request("initialize", params.clone()).await;
    let msg = first["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("exit status 7") && msg.contains("refusing to start"), "{first}");
    let mut last = String::new();
    for _ in 0..8 {
        let r = s.client.request("initialize", params.clone()).await;
        last = r["error"]["message"].as_str().unwrap_or_default().to_string();
        if last.contains("is down") {
            break;
        }
    }
    assert!(last.contains("is down") && last.contains("exit status 7"), "{last}");
    // While down, calls fail fast instead of spawning again.
    let started = Instant::now();
    let r = s.client.request("initialize", params).await;
    assert!(r["error"]["message"].as_str().unwrap().contains("is down"));
    assert!(started.elapsed() < Duration::from_millis(500));
}

#[tokio::test]
async fn a_full_queue_answers_busy_at_once_and_waiters_are_told_why() {
    let cfg = "[pools.default]\nmax = 1\nmax_inflight = 1\nmax_queue = 1\n";
    let mut s = Setup::with_config(&[], &[], Some(cfg)).await;
    s.client.initialize().await;
    let a = s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 1600}})).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = s.client.send_request("tools/call", json!({"name": "echo", "arguments": {"text": "queued"}})).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let c = s.client.request("tools/call", json!({"name": "echo", "arguments": {"text": "refused"}})).await;
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(c["error"]["code"], -32002, "{c}");
    assert!(c["error"]["message"].as_str().unwrap().contains("max_queue"));
    let notice = s.client.recv_notification("notifications/message").await;
    assert!(notice["params"]["data"].as_str().unwrap().contains("waiting for an instance"), "{notice}");
    assert_eq!(tool_text(&s.client.wait_response(&b).await), "queued");
    s.client.wait_response(&a).await;
}

#[tokio::test]
async fn session_affinity_gives_each_session_its_own_instance() {
    let dir = temp_dir();
    let sock = dir.path().join("a.sock");
    let cfg = "[pools.default]\nmin = 0\nmax = 1\naffinity = \"session\"\n";
    let mut s = Setup::with_config(&[], &["--listen", sock.to_str().unwrap()], Some(cfg)).await;
    s.client.initialize().await;
    let (mut other_proc, mut other) = connect(&sock).await;
    other.initialize().await;
    let a = fixture_pid(&mut s.client).await;
    let b = fixture_pid(&mut other).await;
    assert_ne!(a, b, "sessions share an instance despite affinity = session");
    assert_eq!(fixture_pid(&mut s.client).await, a);
    // The session's instance goes when the session does.
    other.close().await;
    other_proc.wait().await;
    assert!(wait_gone(b, Duration::from_secs(5)).await);
    assert!(pid_alive(a));
}

#[tokio::test]
async fn a_departed_session_has_its_calls_cancelled_and_others_carry_on() {
    let dir = temp_dir();
    let journal = journal_in(&dir);
    let sock = dir.path().join("g.sock");
    let mut s = Setup::new(&["--journal", &journal], &["--listen", sock.to_str().unwrap()]).await;
    s.client.initialize().await;
    let (mut gone_proc, mut gone) = connect(&sock).await;
    gone.initialize().await;
    gone.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 20000}})).await;
    let mine = s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 800}})).await;
    wait_journal(&journal, Duration::from_secs(5), |e| received(e, "tools/call").count() >= 2).await;
    gone.close().await;
    gone_proc.wait().await;
    let entries =
        wait_journal(&journal, Duration::from_secs(5), |e| received(e, "notifications/cancelled").count() > 0).await;
    assert_eq!(
        received(&entries, "notifications/cancelled").count(),
        1,
        "only the departed session's call is cancelled"
    );
    assert_eq!(tool_text(&s.client.wait_response(&mine).await), "slept 800 ms");
}

#[tokio::test]
async fn progress_keeps_a_slow_call_alive_past_its_timeout() {
    let mut s =
        Setup::with_config(&[], &[], Some("[limits]\ncall_timeout_ms = 500\nmax_call_timeout_ms = 5000\n")).await;
    s.client.initialize().await;
    let with_progress =
        json!({"name": "sleep", "arguments": {"ms": 1500, "progress_ms": 200}, "_meta": {"progressToken": 1}});
    let resp = s.client.request("tools/call", with_progress).await;
    assert_eq!(tool_text(&resp), "slept 1500 ms", "{resp}");
    // Without progress the same call times out.
    let resp = s.client.call_tool("sleep", json!({"ms": 1500})).await;
    assert_eq!(resp["error"]["code"], -32001, "{resp}");
}

#[tokio::test]
async fn a_burst_grows_the_pool_and_idle_instances_are_reaped() {
    let dir = temp_dir();
    let journal_file = journal_in(&dir);
    let cfg = "[pools.default]\nmin = 1\nmax = 3\nmax_inflight = 1\nidle_timeout_ms = 300\n";
    let mut s = Setup::with_config(&["--journal", &journal_file], &[], Some(cfg)).await;
    s.client.initialize().await;
    let ids = [
        s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 400}})).await,
        s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 400}})).await,
        s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 400}})).await,
    ];
    let started = Instant::now();
    for id in &ids {
        s.client.wait_response(id).await;
    }
    assert!(
        started.elapsed() < Duration::from_millis(1100),
        "three serial instances should overlap: {:?}",
        started.elapsed()
    );
    let pids: std::collections::BTreeSet<u32> = harness::journal(&journal_file)
        .iter()
        .filter(|e| e["msg"]["method"] == "tools/call")
        .filter_map(|e| e["pid"].as_u64())
        .map(|p| p as u32)
        .collect();
    assert_eq!(pids.len(), 3, "the burst should have used three instances: {pids:?}");
    // Two of them are above `min` and go after idle_timeout_ms; one stays.
    let end = Instant::now() + Duration::from_secs(5);
    let alive = loop {
        let alive = pids.iter().filter(|p| pid_alive(**p)).count();
        if alive == 1 || Instant::now() > end {
            break alive;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(alive, 1, "idle instances above min were not reaped");
    assert_eq!(s.client.call_text("echo", json!({"text": "still served"})).await, "still served");
}
