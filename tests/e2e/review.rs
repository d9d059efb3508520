//! Adversarial review of the router core: each test pins down one bug found in review (or a
//! property checked and found sound). Every test is meant to fail on the code it was written
//! against and to pass once the bug is fixed.

use std::time::{Duration, Instant};

use crate::setup::*;
use serde_json::json;
use switchyard_testkit::*;

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
    let first = s.client.recv_until(is_response).await;
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
    s.client.send_request_with_id(json!("init-1"), "initialize", init_params(json!({}))).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.client.cancel(&json!("init-1"), "timed out").await;
    // Long enough for the first instance to finish starting in the background, if it does.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    s.client.timeout = Duration::from_secs(5);
    let again = s.client.request_with_id(json!("init-2"), "initialize", init_params(json!({}))).await;
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
    let script =
        format!("setsid sleep 60 </dev/null 2>/dev/null & echo $! > {}; exec {} fixture", pidfile.display(), bin());
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
        signal_pid(self.0, libc::SIGKILL);
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

/// The realistic form of the same bug: a server behind a launcher (`npx`, `uvx`, `sh -c`) that
/// is killed. The server itself shares the launcher's stdout, so stdout never closed: the call
/// in flight hung and the server went on running outside any pool.
#[tokio::test]
async fn a_killed_launcher_fails_its_calls_and_leaves_no_orphan() {
    let dir = temp_dir();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    // `; true` keeps sh from exec-ing the fixture: sh stays as the launcher.
    let script = format!("{} fixture; true", bin());
    let mut router =
        Proc::router(&["--plugins", plugins.to_str().unwrap(), "--name", "launched", "--", "sh", "-c", &script]);
    let mut client = router.client();
    client.initialize().await;
    let server = fixture_pid(&mut client).await;
    let launcher = descendants(router.pid).into_iter().find(|p| descendants(*p) == [server]).expect("the sh launcher");
    // Not read-only, so not retried: the error itself must come back.
    let id = client
        .send_request("tools/call", json!({"name": "write", "arguments": {"path": "/p", "text": "t", "ms": 20000}}))
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // SAFETY: kill(2) of the launcher this test started through the router.
    signal_pid(launcher, libc::SIGKILL);
    let killed = Instant::now();
    client.timeout = Duration::from_secs(4);
    let resp = client.wait_response(&id).await;
    assert!(killed.elapsed() < Duration::from_secs(1), "answered after {:?}", killed.elapsed());
    let msg = resp["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("killed by signal 9") && msg.contains("launched#1"), "{resp}");
    assert!(wait_gone(server, Duration::from_secs(2)).await, "the server {server} outlived its launcher");
    client.close().await;
    assert_eq!(router.wait_timeout(Duration::from_secs(8)).await.code(), Some(0));
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
            // SAFETY: kill(2) of the router group this test started.
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
        [r#""a\"b\\c\u00e9\n""#, "1e3", "-0", "1.50", "18446744073709551616000", "1e400", r#""""#, r#""\ud83d\ude00""#];
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

/// With `affinity = "session"` each session has a server of its own, but `logging/setLevel`
/// from one session was sent to every instance: session A asking for debug turned session B's
/// private server verbose although B had asked for errors only.
#[tokio::test]
async fn one_sessions_log_level_does_not_reach_another_sessions_own_server() {
    let dir = temp_dir();
    let sock = dir.path().join("l.sock");
    let cfg = "[pools.default]\nmin = 0\nmax = 1\naffinity = \"session\"\n";
    let mut s = Setup::with_config(&[], &["--listen", sock.to_str().unwrap()], Some(cfg)).await;
    s.client.initialize().await;
    let (_p, mut b) = connect(&sock).await;
    b.initialize().await;
    assert_eq!(b.request("logging/setLevel", json!({"level": "error"})).await["result"], json!({}));
    assert_eq!(b.call_text("log", json!({"level": "info", "message": "b"})).await, "suppressed");
    assert_eq!(s.client.request("logging/setLevel", json!({"level": "debug"})).await["result"], json!({}));
    assert_eq!(
        b.call_text("log", json!({"level": "info", "message": "b"})).await,
        "suppressed",
        "A's level reached B's server"
    );
}

/// A router on a socket with one `connect` client that has a slow call and a batch in flight.
async fn connect_with_calls_in_flight() -> (Proc, Proc, Client, TempDir) {
    let dir = temp_dir();
    let socket = dir.path().join("r.sock");
    let mut argv = vec!["--listen".to_string(), socket.display().to_string(), "--no-stdio".into(), "--".into()];
    argv.extend(Proc::fixture_cmd(&[]));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let router = Proc::router(&argv);
    let (conn, mut c) = connect(&socket).await;
    c.initialize().await;
    c.send_request_with_id(json!("slow"), "tools/call", json!({"name": "sleep", "arguments": {"ms": 60000}})).await;
    c.send_raw(r#"[{"jsonrpc":"2.0","id":"in-batch","method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000}}}]"#)
        .await;
    // Both reached the server: the client holds no answer yet.
    assert_eq!(c.call_text("echo", json!({"text": "up"})).await, "up");
    (router, conn, c, dir)
}

/// `switchyard connect` relayed bytes only: when the router died (SIGKILL) or stopped, the
/// client got no EOF and no answers, and waited forever.
#[tokio::test]
async fn connect_answers_its_calls_and_exits_when_the_router_is_killed() {
    let (mut router, mut conn, mut c, _dir) = connect_with_calls_in_flight().await;
    router.signal(libc::SIGKILL);
    router.wait().await;
    let single = c.wait_response(&json!("slow")).await;
    let batch = c.recv_until(|m| m.is_array()).await;
    for resp in [&single, &batch[0]] {
        assert_eq!(resp["error"]["code"], -32603, "{resp}");
        assert!(resp["error"]["message"].as_str().unwrap().contains("closed the connection"), "{resp}");
    }
    assert_eq!(batch[0]["id"], "in-batch");
    assert_eq!(conn.wait().await.code(), Some(1));
    assert!(conn.stderr.text().contains("router at"), "the client is told why: {}", conn.stderr.text());
}

#[tokio::test]
async fn connect_exits_when_the_router_stops() {
    let (mut router, mut conn, mut c, _dir) = connect_with_calls_in_flight().await;
    router.signal(libc::SIGTERM);
    // The router answers its calls itself as it shuts down, then closes.
    let single = c.wait_response(&json!("slow")).await;
    let batch = c.recv_until(|m| m.is_array()).await;
    assert!(single.get("error").is_some() && batch[0].get("error").is_some(), "{single} {batch}");
    assert_eq!(conn.wait().await.code(), Some(1));
    assert!(conn.stderr.text().contains("closed the connection"), "{}", conn.stderr.text());
    assert_eq!(router.wait().await.code(), Some(0));
}

/// Out of file descriptors, accept failed at once, forever: 100 % CPU and a warning per try.
#[tokio::test]
async fn running_out_of_descriptors_on_accept_backs_off() {
    let dir = temp_dir();
    let socket = dir.path().join("r.sock");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    // A low descriptor limit for the router only, set by the shell that execs it.
    let mut argv = vec![
        "sh".to_string(),
        "-c".into(),
        "ulimit -n 48 && exec \"$@\"".into(),
        "sh".into(),
        bin().to_string(),
        "run".into(),
        "--plugins".into(),
        plugins.display().to_string(),
        "--listen".into(),
        socket.display().to_string(),
        "--no-stdio".into(),
        "--".into(),
    ];
    argv.extend(Proc::fixture_cmd(&[]));
    let router = Proc::spawn("router", &argv);
    let end = Instant::now() + DEFAULT_TIMEOUT;
    while !router.stderr.text().contains("ready") {
        assert!(Instant::now() < end, "{}", router.stderr.text());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // More connections than the router has descriptors left.
    let mut held = Vec::new();
    for _ in 0..60 {
        held.push(std::os::unix::net::UnixStream::connect(&socket).unwrap());
    }
    let cpu = |pid: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        // utime and stime, in clock ticks (fields 14 and 15 of stat; 12 and 13 after the name).
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = cpu(router.pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = cpu(router.pid) - before;
    // Ticks are usually 1/100 s: a busy loop spends about 200 in 2 s.
    assert!(spent < 60, "the router spent {spent} ticks of CPU in 2 s while out of descriptors");
    let warnings = router.stderr.text().matches("accept on").count();
    assert!((1..=3).contains(&warnings), "{warnings} accept warnings in about 2 s");
    // Once descriptors are free again, new sessions are served.
    drop(held);
    let (_conn, mut c) = connect(&socket).await;
    c.initialize().await;
    assert_eq!(c.call_text("echo", json!({"text": "back"})).await, "back");
}

/// The other way round: a client that leaves first ends `connect` cleanly.
#[tokio::test]
async fn connect_exits_zero_when_its_client_leaves() {
    let (mut router, mut conn, mut c, _dir) = connect_with_calls_in_flight().await;
    c.close().await;
    c.expect_eof().await;
    assert_eq!(conn.wait().await.code(), Some(0), "{}", conn.stderr.text());
    // The router serves on.
    assert!(router.is_running());
}
