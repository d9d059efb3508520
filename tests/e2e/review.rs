//! Adversarial review of the router core: each test pins down one bug found in review (or a
//! property checked and found sound). Every test is meant to fail on the code it was written
//! against and to pass once the bug is fixed.

mod harness;
mod setup;

use std::time::{Duration, Instant};

use harness::*;
use serde_json::{Value, json};
use setup::*;

fn init_params() -> Value {
    json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "review", "version": "1"}})
}

/// A call cancelled by its client while the pool was spawning an instance for it dropped the
/// spawn half-way: the pool's count of starting instances was never given back (so the pool
/// could never grow to `max` again) and the half-initialised child was left running outside the
/// pool. Here a later call that needs the second instance waits for the first to be free.
#[tokio::test]
async fn a_call_cancelled_during_a_spawn_does_not_shrink_the_pool() {
    let cfg = "[pools.default]\nmin = 1\nmax = 2\nmax_inflight = 1\n";
    let mut s = Setup::with_config(&["--init-delay-ms", "1000"], &[], Some(cfg)).await;
    s.client.initialize().await;
    let slow = s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 6000}})).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Needs a second instance (1 s to initialise); the client gives up on it half-way.
    let gave_up = s.client.send_request("tools/call", json!({"name": "echo", "arguments": {"text": "b"}})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.client.cancel(&gave_up, "changed my mind").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let c = s.client.send_request("tools/call", json!({"name": "echo", "arguments": {"text": "c"}})).await;
    s.client.timeout = Duration::from_secs(8);
    let first = s.client.recv_until(|m| is_response(m)).await;
    let took = started.elapsed();
    assert_eq!(first["id"], c, "the quick call waited for the 6 s one ({took:?}): {first}");
    assert!(took < Duration::from_millis(2500), "the quick call took {took:?}");
    assert_eq!(tool_text(&first), "c");
    s.client.wait_response(&slow).await;
    assert!(s.client.buffered().iter().all(|m| m["id"] != gave_up), "the cancelled call was answered");
}

/// A client that cancels its `initialize` (the TypeScript SDK does after 60 s, e.g. while npx
/// is still downloading the server) must not leave the router unable to initialise, nor leave
/// every later request of every session waiting for an initialisation nobody finishes.
#[tokio::test]
async fn a_cancelled_initialize_does_not_wedge_the_router() {
    let mut s = Setup::new(&["--init-delay-ms", "800"], &[]).await;
    s.client.send_request_with_id(json!("init-1"), "initialize", init_params()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.client.cancel(&json!("init-1"), "timed out").await;
    // Long enough for the first instance to finish starting in the background, if it does.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    s.client.timeout = Duration::from_secs(5);
    let again = s.client.request_with_id(json!("init-2"), "initialize", init_params()).await;
    assert!(again.get("result").is_some(), "{again}");
    s.client.notify("notifications/initialized", json!({})).await;
    let tools = s.client.request_with_id(json!("list"), "tools/list", json!({})).await;
    assert!(tools["result"]["tools"].is_array(), "{tools}");
}

/// Requests the router answers itself after talking to the server (resources/subscribe,
/// logging/setLevel, ...) ignored their cancellation: when the client left while one was
/// waiting on a busy server, the session — and with it the whole router — could not end until
/// `call_timeout_ms` (5 minutes by default) had passed.
#[tokio::test]
async fn a_client_leaving_during_a_subscribe_on_a_busy_server_does_not_hold_up_exit() {
    let dir = temp_dir();
    let sock = dir.path().join("s.sock");
    let mut s = Setup::new(&["--serial"], &["--listen", sock.to_str().unwrap()]).await;
    s.client.initialize().await;
    let (_other_proc, mut other) = connect(&sock).await;
    other.initialize().await;
    // The other session keeps the serial server busy for good.
    other.send_request("tools/call", json!({"name": "hang", "arguments": {}})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.client.send_request("resources/subscribe", json!({"uri": "fixture://readme"})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.client.close().await;
    let started = Instant::now();
    let status = s.router.wait_timeout(Duration::from_secs(9)).await;
    assert_eq!(status.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(8), "exit took {:?}", started.elapsed());
}

/// The fixture behind a shell that first starts a detached helper (its own session, so outside
/// the server's process group) which inherits the server's stdout, like a daemon a real server
/// might launch. Returns the router set-up and the helper's pid (killed by the caller).
async fn server_with_a_helper_holding_stdout(dir: &TempDir, router_args: &[&str]) -> (Proc, Client, u32) {
    let pidfile = dir.path().join("helper.pid");
    let script = format!(
        "setsid sleep 60 </dev/null 2>/dev/null & echo $! > {}; exec {} fixture",
        pidfile.display(),
        bin()
    );
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let mut args: Vec<&str> = vec!["--plugins", plugins.to_str().unwrap()];
    args.extend_from_slice(router_args);
    args.extend_from_slice(&["--name", "helper", "--", "sh", "-c", &script]);
    let mut router = Proc::router(&args);
    let mut client = router.client();
    client.initialize().await;
    let helper: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    (router, client, helper)
}

struct KillOnDrop(u32);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the helper process this test started.
        unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
    }
}

/// The death of an instance was only noticed when its stdout reached EOF. A server that dies
/// while something else still holds its stdout (a helper it started in its own session) left
/// its in-flight calls unanswered and was never replaced.
#[tokio::test]
async fn a_crash_is_noticed_even_when_a_helper_keeps_stdout_open() {
    let dir = temp_dir();
    let (mut router, mut client, helper) = server_with_a_helper_holding_stdout(&dir, &[]).await;
    let _helper = KillOnDrop(helper);
    let started = Instant::now();
    client.timeout = Duration::from_secs(4);
    let resp = client.call_tool("crash", json!({"code": 5})).await;
    assert_eq!(resp["error"]["code"], -32003, "{resp}");
    assert!(resp["error"]["message"].as_str().unwrap().contains("exit status 5"), "{resp}");
    assert!(started.elapsed() < Duration::from_secs(1), "the crash was answered after {:?}", started.elapsed());
    assert_eq!(client.call_text("echo", json!({"text": "respawned"})).await, "respawned");
    client.close().await;
    router.wait_timeout(Duration::from_secs(8)).await;
}

/// Same cause, at shutdown: stopping an instance waited for its stdout to close, forever.
#[tokio::test]
async fn shutdown_does_not_wait_for_a_helper_that_keeps_stdout_open() {
    let dir = temp_dir();
    let (mut router, mut client, helper) = server_with_a_helper_holding_stdout(&dir, &[]).await;
    let _helper = KillOnDrop(helper);
    assert_eq!(client.call_text("echo", json!({"text": "up"})).await, "up");
    client.close().await;
    let started = Instant::now();
    let status = router.wait_timeout(Duration::from_secs(9)).await;
    assert_eq!(status.code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(8), "exit took {:?}", started.elapsed());
}
