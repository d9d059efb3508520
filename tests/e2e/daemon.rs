//! End-to-end tests of the daemon through the real binary: `switchyard connect NAME`
//! clients, one daemon per config file that owns the servers and outlives its clients, hot
//! reload of the config, `status`, `stop`, and no orphans whatever happens to the daemon.
//!
//! Each test has a home of its own (harness/daemon.rs): its XDG directories and config file in a
//! temp dir, so its daemon is its own. Each ends with `Home::shutdown` (stop, then nothing of the
//! test may be left running); a failing test's Drop kills whatever is left and prints the
//! daemon's log.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_testkit::daemon::*;
use switchyard_testkit::*;

/// Generous bounds for things that take milliseconds on an idle machine (a daemon start, a
/// reload, a process exit): the machine running these tests is shared and loaded.
const SLOW: Duration = Duration::from_secs(20);

fn init_params(client: &str, version: &str) -> Value {
    json!({
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": client, "version": version},
    })
}

/// Server `name` as `sh -c SCRIPT SWITCHYARD FILE`: the script reads FILE (which the test edits
/// between daemons; the config, and so the key of what a daemon remembers, stays the same) to
/// decide how the fixture starts, as `"$0" fixture ...`.
fn write_sh_server(home: &Home, name: &str, script: &str, file: &Path) {
    home.write_config(&format!(
        "[servers.{name}]\ncommand = \"sh\"\nargs = [\"-c\", {}, {}, {}]\n",
        json!(script),
        json!(bin()),
        json!(file.display().to_string())
    ));
}

/// Server `slow`: the fixture taking `init_delay_ms` to start, with the options the returned
/// file holds (empty at first; the test writes it between daemons).
fn slow_server_with_flags(home: &Home, init_delay_ms: u64) -> std::path::PathBuf {
    let flags = home.path().join("flags");
    std::fs::write(&flags, "").unwrap();
    let script = format!(r#"exec "$0" fixture --init-delay-ms {init_delay_ms} $(cat "$1")"#);
    write_sh_server(home, "slow", &script, &flags);
    flags
}

/// A client initializes `name` through a first daemon, which is then stopped: the next daemon
/// answers `initialize` from what this one learned. The answer.
async fn learn_initialize(home: &Home, name: &str) -> Value {
    let mut first = home.connect(name);
    let mut c = first.client();
    c.timeout = SLOW;
    let learned = c.request("initialize", init_params("e2e", "1")).await;
    assert!(learned["result"].is_object(), "{learned}");
    leave(first, c).await;
    home.stop().await;
    home.wait_no_processes(SLOW).await;
    learned
}

/// SIGKILL or SIGTERM to a process that is not ours to wait for (the daemon runs detached).
fn kill(pid: u32, sig: i32) {
    signal_pid(pid, sig);
}

/// Waits until the fixture behind `journal` has received a `tools/call` of `tool`.
async fn wait_call_arrived(journal: &std::path::Path, tool: &str) {
    wait_journal(journal, SLOW, |e| received(e, "tools/call").any(|m| m["params"]["name"] == tool)).await;
}

// ------------------------------------------------------------------------------------------------
// The seeds.

/// Seed 003: the client SIGTERMs its server command (here `connect`); the server lives on in the
/// daemon, same process, same in-memory state, and the next client gets it without a start.
#[tokio::test]
async fn seed_003_sigterm_to_connect_leaves_the_server_and_its_state_to_the_next_client() {
    let home = Home::new();
    home.write_config(&home.fixture("memory", &[]));
    let (a, mut ca) = home.client("memory").await;
    ca.call_text("write", json!({"path": "k", "text": "v"})).await;
    let (pid, _) = fixture_pid(&mut ca).await;

    let mut a = a;
    a.signal(libc::SIGTERM);
    a.wait_timeout(SLOW).await;
    // The server outlived the client's SIGTERM (give a wrong kill the time to land).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pid_alive(pid), "the server (pid {pid}) died with the connect that was SIGTERMed");
    // That client's session ended, and only that.
    home.wait_status("no session left", SLOW, |s| sessions(s, "memory") == 0).await;

    let (b, mut cb) = home.client("memory").await;
    let (pid_b, _) = fixture_pid(&mut cb).await;
    assert_eq!(pid_b, pid, "the second client reached another server process");
    assert_eq!(cb.call_text("read", json!({"path": "k"})).await, "v", "the server's state was lost");
    assert_eq!(starts(&home.journal("memory")), 1, "the server was started again");
    leave(b, cb).await;
    home.shutdown().await;
}

/// Seed 000: two conversations on one serial server with a pool of two. One is in a long call;
/// the other's calls are answered meanwhile, not after it.
#[tokio::test]
async fn seed_000_a_long_call_does_not_block_another_clients_calls() {
    let home = Home::new();
    let config =
        format!("{}[servers.serial.pools.default]\nmax = 2\nmax_inflight = 1\n", home.fixture("serial", &["--serial"]));
    home.write_config(&config);
    let (a, mut ca) = home.client("serial").await;
    ca.timeout = SLOW;
    let long = ca.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 5000}})).await;
    wait_call_arrived(&home.journal("serial"), "sleep").await;

    let started = Instant::now();
    let (b, mut cb) = home.client("serial").await;
    let joined = started.elapsed();
    let mut latencies = Vec::new();
    for i in 0..5 {
        let t = Instant::now();
        assert_eq!(cb.call_text("echo", json!({"text": format!("b{i}")})).await, format!("b{i}"));
        latencies.push(t.elapsed());
    }
    let b_done = Instant::now();
    let resp = ca.wait_response(&long).await;
    let a_done = Instant::now();
    assert_eq!(tool_text(&resp), "slept 5000 ms", "the long call failed: {resp}");
    println!("client B: connect + initialize {joined:?}, echo latencies {latencies:?}");
    assert!(
        b_done < a_done,
        "client B's answers came after client A's long call ended (B took {:?} in all)",
        b_done - started
    );
    leave(a, ca).await;
    leave(b, cb).await;
    home.shutdown().await;
}

// ------------------------------------------------------------------------------------------------
// Starting the daemon.

/// Ten `connect`s at once and no daemon yet: all are answered, by one daemon.
#[tokio::test]
async fn ten_connects_at_once_start_exactly_one_daemon() {
    let home = Home::new();
    home.write_config(&format!("{}[servers.x.pools.default]\nmax = 1\n", home.fixture("x", &[])));
    let mut procs: Vec<Proc> = (0..10).map(|_| home.connect("x")).collect();
    let mut clients: Vec<Client> = procs.iter_mut().map(Proc::client).collect();
    let mut ids = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        c.timeout = SLOW;
        ids.push(c.send_request("initialize", init_params(&format!("client-{i}"), "1")).await);
    }
    for (c, id) in clients.iter_mut().zip(&ids) {
        let resp = c.wait_response(id).await;
        assert!(resp.get("result").is_some(), "initialize failed: {resp}");
        c.notify("notifications/initialized", json!({})).await;
    }
    for (i, c) in clients.iter_mut().enumerate() {
        assert_eq!(c.call_text("echo", json!({"text": format!("c{i}")})).await, format!("c{i}"));
    }
    let daemon = home.daemon_pid().await;
    // `--detach` launchers that lost the race may still be on their way out; then one is left.
    let left = home
        .wait_processes("exactly one daemon process", SLOW, |ps| {
            ps.iter().filter(|p| p.is("daemon")).map(|p| p.pid).collect::<Vec<_>>() == [daemon]
        })
        .await;
    assert!(left.iter().any(|p| p.pid == daemon && p.argv.iter().any(|a| a.contains(&home.config_str()))));
    let status = home.status_json().await;
    assert_eq!(sessions(&status, "x"), 10, "not every client is a session of the one daemon:\n{status:#}");
    assert_eq!(starts(&home.journal("x")), 1, "the server (a pool of one) was started more than once");
    // The start lock went with the last `connect` that held it: none piles up.
    let socket = status["socket"].as_str().expect("the daemon's socket");
    let lock = switchyard_config::paths::lock_for(Path::new(socket)).unwrap();
    assert!(!lock.exists(), "the start lock {} was left behind", lock.display());
    for (p, c) in procs.into_iter().zip(clients) {
        leave(p, c).await;
    }
    home.shutdown().await;
}

/// A daemon that cannot start (the config does not parse): the client's initialize is answered
/// with an error naming the file, stderr says it too, and `connect` exits non-zero.
#[tokio::test]
async fn connect_with_a_broken_config_answers_initialize_with_the_reason() {
    let home = Home::new();
    home.write_config("[servers.alpha\ncommand = \"x\"\n");
    let mut p = home.connect("alpha");
    let mut c = p.client();
    c.timeout = SLOW;
    let resp = c.request("initialize", init_params("e2e", "1")).await;
    let message = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("initialize was not refused: {resp}"));
    assert!(message.contains(&home.config_str()), "the error does not name the config file: {message}");
    let status = p.wait_timeout(SLOW).await;
    assert!(!status.success(), "connect exited {status} after failing");
    let stderr = p.stderr.text();
    assert!(stderr.lines().any(|l| l.contains(&home.config_str())), "no line on stderr names the file:\n{stderr}");
    home.shutdown().await;
}

/// `connect NAME` for a server the config does not have: an error naming the server and the file.
#[tokio::test]
async fn connect_to_a_server_not_in_the_config_answers_initialize_with_the_reason() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let mut p = home.connect("nosuchserver");
    let mut c = p.client();
    c.timeout = SLOW;
    let resp = c.request("initialize", init_params("e2e", "1")).await;
    let message = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("initialize was not refused: {resp}"));
    assert!(message.contains("nosuchserver"), "the error does not name the server: {message}");
    assert!(message.contains(&home.config_str()), "the error does not name the config file: {message}");
    let status = p.wait_timeout(SLOW).await;
    assert!(!status.success(), "connect exited {status} after failing");
    let stderr = p.stderr.text();
    assert!(stderr.contains("nosuchserver"), "stderr does not name the server:\n{stderr}");
    home.shutdown().await;
}

/// A missing config file: the same, naming the file.
#[tokio::test]
async fn connect_without_a_config_file_answers_initialize_with_the_reason() {
    let home = Home::new();
    let mut p = home.connect("alpha");
    let mut c = p.client();
    c.timeout = SLOW;
    let resp = c.request("initialize", init_params("e2e", "1")).await;
    let message = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("initialize was not refused: {resp}"));
    assert!(message.contains(&home.config_str()), "the error does not name the config file: {message}");
    let status = p.wait_timeout(SLOW).await;
    assert!(!status.success(), "connect exited {status} after failing");
    home.shutdown().await;
}

/// The socket is the user's alone: 0600 in a 0700 directory.
#[tokio::test]
async fn the_socket_is_0600_in_a_0700_directory() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (a, mut ca) = home.client("alpha").await;
    ca.call_text("echo", json!({"text": "x"})).await;
    let socket = home.socket().expect("no socket in the runtime directory");
    let status = home.status_json().await;
    assert_eq!(status["socket"].as_str(), Some(socket.to_str().unwrap()), "status names another socket");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600, "socket {}", socket.display());
    assert_eq!(mode(socket.parent().unwrap()), 0o700, "directory of {}", socket.display());
    leave(a, ca).await;
    home.shutdown().await;
}

// ------------------------------------------------------------------------------------------------
// status and stop.

#[tokio::test]
async fn status_lists_servers_instances_and_sessions_and_stop_leaves_nothing() {
    let home = Home::new();
    home.write_config(&format!("{}{}", home.fixture("alpha", &[]), home.fixture("beta", &[])));
    let mut a = home.connect("alpha");
    let mut ca = a.client();
    let init = ca.request("initialize", init_params("e2e-status", "1.2.3")).await;
    assert!(init.get("result").is_some(), "initialize failed: {init}");
    ca.notify("notifications/initialized", json!({})).await;
    let (pid, _) = fixture_pid(&mut ca).await;

    let status = home.status_json().await;
    let daemon = status["pid"].as_u64().expect("status has a pid") as u32;
    assert!(home.daemons().iter().any(|p| p.pid == daemon), "status pid {daemon} is not a daemon of this test");
    let canonical = std::fs::canonicalize(&home.config).unwrap();
    assert_eq!(status["config"].as_str(), canonical.to_str(), "status names another config");
    assert!(status["log"].is_string(), "a detached daemon has a log file: {status:#}");
    assert!(status_server(&status, "beta").is_some(), "beta is not listed:\n{status:#}");
    let alpha = status_server(&status, "alpha").unwrap_or_else(|| panic!("alpha is not listed:\n{status:#}"));
    // The instance's pid: the server's own, or that of the `switchyard supervise` it runs under.
    let shown = instance_pids(&status, "alpha");
    assert!(
        shown == [pid] || shown == [parent_pid(pid)],
        "alpha's instance in status ({shown:?}) is not the server that answered (pid {pid}, its parent {})",
        parent_pid(pid)
    );
    println!("status shows instance pid {shown:?}; the server's pid is {pid}");
    let sessions = alpha["sessions"].as_array().cloned().unwrap_or_default();
    assert!(
        sessions.iter().any(|s| s["client"] == "e2e-status 1.2.3"),
        "no session names the client from its clientInfo:\n{status:#}"
    );

    let text = home.status_text().await;
    for want in ["alpha", "beta", &shown[0].to_string(), "e2e-status 1.2.3"] {
        assert!(text.contains(want), "status does not show {want:?}:\n{text}");
    }

    leave(a, ca).await;
    let socket = home.socket().expect("a socket while the daemon runs");
    home.stop().await;
    wait_all_dead(&[daemon, pid], SLOW).await;
    assert!(!socket.exists(), "the socket {} is left after stop", socket.display());
    home.wait_no_processes(SLOW).await;
}

// ------------------------------------------------------------------------------------------------
// The daemon going away.

/// kill -9 of the daemon takes its servers with it; the next `connect` starts a new daemon over
/// the stale socket and is answered.
#[tokio::test]
async fn kill_9_of_the_daemon_leaves_no_server_and_the_next_connect_starts_a_new_one() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (a, mut ca) = home.client("alpha").await;
    let (pid, _) = fixture_pid(&mut ca).await;
    leave(a, ca).await;
    let daemon = home.daemon_pid().await;
    let socket = home.socket().expect("a socket while the daemon runs");
    kill(daemon, libc::SIGKILL);
    wait_all_dead(&[daemon, pid], SLOW).await;
    home.wait_no_processes(SLOW).await;
    // The killed daemon could not remove its socket: the next connect meets a stale one.
    assert!(socket.exists(), "no stale socket to replace");

    let (b, mut cb) = home.client("alpha").await;
    let (pid_b, _) = fixture_pid(&mut cb).await;
    assert_ne!(pid_b, pid);
    assert_ne!(home.daemon_pid().await, daemon);
    leave(b, cb).await;
    home.shutdown().await;
}

/// How the daemon goes away under a live client.
enum Away {
    Signal(i32),
    /// `switchyard stop`.
    Stop,
}

/// A live `connect` across a daemon restart: the call in flight is answered (not left hanging),
/// and the next call is answered by a new daemon that `connect` started and initialised with the
/// client's own initialize. The client never initialises again.
async fn a_live_connect_survives_the_daemon_going_away(away: Away) -> Value {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (mut a, mut ca) = home.client("alpha").await;
    ca.timeout = SLOW;
    let (pid, _) = fixture_pid(&mut ca).await;
    let daemon = home.daemon_pid().await;
    let inflight = ca.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 3000}})).await;
    wait_call_arrived(&home.journal("alpha"), "sleep").await;

    let stop = async {
        match away {
            Away::Signal(sig) => kill(daemon, sig),
            Away::Stop => drop(home.stop().await),
        }
    };
    let (answer, ()) = tokio::join!(ca.wait_response(&inflight), stop);
    wait_all_dead(&[daemon, pid], SLOW).await;
    let (pid_after, _) = fixture_pid(&mut ca).await;
    assert_ne!(pid_after, pid, "the old server answered");
    assert!(a.is_running(), "connect exited");
    assert_ne!(home.daemon_pid().await, daemon);
    assert_eq!(starts(&home.journal("alpha")), 2, "the server did not start once more");
    // The new instance was initialised (connect replayed the client's initialize to the daemon).
    let inits = received(&journal(home.journal("alpha")), "initialize").count();
    assert!(inits >= 2, "the new server instance was never initialised");
    // The new daemon knows the session by the client's own initialize, replayed by connect.
    let status = home.status_json().await;
    let clients: Vec<&Value> =
        status_server(&status, "alpha").and_then(|s| s["sessions"].as_array()).into_iter().flatten().collect();
    assert!(
        clients.iter().any(|s| s["client"] == "switchyard-e2e 0.0.0"),
        "the new daemon's session does not carry the client's clientInfo:\n{status:#}"
    );
    leave(a, ca).await;
    home.shutdown().await;
    answer
}

#[tokio::test]
async fn a_live_connect_survives_sigterm_to_the_daemon() {
    let answer = a_live_connect_survives_the_daemon_going_away(Away::Signal(libc::SIGTERM)).await;
    // A daemon stopping cleanly may finish the call or refuse it; either way it is answered.
    println!("the call in flight when the daemon was SIGTERMed was answered with: {answer}");
}

#[tokio::test]
async fn a_live_connect_survives_sigkill_to_the_daemon() {
    let answer = a_live_connect_survives_the_daemon_going_away(Away::Signal(libc::SIGKILL)).await;
    let message = answer["error"]["message"].as_str().unwrap_or_else(|| panic!("not an error: {answer}"));
    assert!(!message.is_empty());
}

#[tokio::test]
async fn a_live_connect_survives_stop_of_the_daemon() {
    let answer = a_live_connect_survives_the_daemon_going_away(Away::Stop).await;
    println!("the call in flight when the daemon was stopped was answered with: {answer}");
    // The call was with the server: the client is told it may have run, never only that
    // switchyard is shutting down.
    if let Some(message) = answer["error"]["message"].as_str() {
        assert!(message.contains("outcome is unknown"), "{answer}");
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
    }
}

/// `[daemon] idle_exit_ms`: the daemon exits, with its servers, once its last client left.
#[tokio::test]
async fn an_idle_daemon_exits_after_idle_exit_ms() {
    let home = Home::new();
    home.write_config(&format!("[daemon]\nidle_exit_ms = 500\n\n{}", home.fixture("alpha", &[])));
    let (a, mut ca) = home.client("alpha").await;
    let (pid, _) = fixture_pid(&mut ca).await;
    let daemon = home.daemon_pid().await;
    let socket = home.socket().expect("a socket while the daemon runs");
    // Still there while a client is connected, however long it stays idle.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(pid_alive(daemon), "the daemon exited with a client connected");
    leave(a, ca).await;
    wait_all_dead(&[daemon, pid], SLOW).await;
    assert!(!socket.exists(), "the socket {} is left after the idle exit", socket.display());
    home.wait_no_processes(SLOW).await;
}

// ------------------------------------------------------------------------------------------------
// Hot reload of the config file.

/// A server added to the file is served to a new `connect`, and the running ones go on.
#[tokio::test]
async fn hot_reload_a_server_added_to_the_file_is_served() {
    let home = Home::new();
    let alpha = home.fixture("alpha", &[]);
    home.write_config(&alpha);
    let (a, mut ca) = home.client("alpha").await;
    let (pid, _) = fixture_pid(&mut ca).await;

    home.write_config(&format!("{alpha}{}", home.fixture("beta", &[])));
    home.wait_status("server beta", SLOW, |s| status_server(s, "beta").is_some()).await;
    let (b, mut cb) = home.client("beta").await;
    assert_eq!(fixture_pid(&mut cb).await.1, "beta");
    assert_eq!(fixture_pid(&mut ca).await, (pid, "alpha".to_string()), "alpha changed under its client");
    leave(a, ca).await;
    leave(b, cb).await;
    home.shutdown().await;
}

/// A client that names a server just added to the file (as a client started right after
/// `switchyard wrap` does) is served, though the daemon had not seen the change yet: a name it
/// does not know is looked up in the file as it is now before it is refused.
#[tokio::test]
async fn a_server_added_to_the_file_is_served_to_a_client_that_comes_at_once() {
    let home = Home::new();
    let alpha = home.fixture("alpha", &[]);
    home.write_config(&alpha);
    let (a, mut ca) = home.client("alpha").await;
    let (pid, _) = fixture_pid(&mut ca).await;

    home.write_config(&format!("{alpha}{}", home.fixture("beta", &[])));
    let (b, mut cb) = home.client("beta").await;
    assert_eq!(fixture_pid(&mut cb).await.1, "beta");
    assert_eq!(fixture_pid(&mut ca).await, (pid, "alpha".to_string()), "alpha changed under its client");
    // The watcher sees the same version later: applied once, beta's instance stays.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(home.logs().matches("applying it").count(), 1, "{}", home.logs());
    leave(a, ca).await;
    leave(b, cb).await;
    home.shutdown().await;
}

/// Server `alpha` (fixture named v1) with a client whose `sleep` of `ms` runs while the file
/// changes alpha to v2: the home, the client, v1's pid and the sleep's request id.
async fn changed_under_a_call(ms: u64) -> (Home, Proc, Client, u32, Value) {
    let home = Home::new();
    home.write_config(&home.fixture_named("alpha", "v1", &[]));
    let (a, mut ca) = home.client("alpha").await;
    ca.timeout = SLOW;
    let (old, name) = fixture_pid(&mut ca).await;
    assert_eq!(name, "v1");
    let inflight = ca.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": ms}})).await;
    wait_call_arrived(&home.journal("alpha"), "sleep").await;
    home.replace_config(&home.fixture_named("alpha", "v2", &[]));
    (home, a, ca, old, inflight)
}

/// A server whose arguments changed: the live session is moved to an instance with the new
/// arguments, no call is lost (the one in flight finishes on the old instance), and the old
/// instance goes away once drained.
#[tokio::test]
async fn hot_reload_changed_args_reach_a_live_session_and_no_call_is_lost() {
    let (home, a, mut ca, old, inflight) = changed_under_a_call(2000).await;
    let changed = Instant::now();
    // Every call is answered; the session reaches the new instance soon (the daemon drains the
    // session and connect reconnects: a call or two may still go the old way meanwhile).
    let mut old_answers = 0;
    let new = loop {
        let (pid, name) = fixture_pid(&mut ca).await;
        if name == "v2" {
            break pid;
        }
        assert_eq!(name, "v1");
        old_answers += 1;
        assert!(changed.elapsed() < SLOW, "no call reached the new arguments within {SLOW:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("{old_answers} calls answered by the old instance after the file changed");
    assert_ne!(new, old);
    let resp = ca.wait_response(&inflight).await;
    assert_eq!(tool_text(&resp), "slept 2000 ms", "the call in flight during the change was lost: {resp}");
    assert_eq!(fixture_pid(&mut ca).await, (new, "v2".to_string()));
    wait_all_dead(&[old], SLOW).await;
    // connect took the session back from the daemon to move it, and handed it over again.
    assert!(holds(home.daemon_pid().await, &pipe_of(a.pid, 1)), "the moved session is relayed, not handed off");
    leave(a, ca).await;
    home.shutdown().await;
}

/// A changed server never makes a client wait: while a slow call of the session runs, its quick
/// calls are answered at once (by the instances as they were), and a call the client cancels
/// does not keep the session on the old configuration.
#[tokio::test]
async fn hot_reload_holds_no_quick_call_behind_a_slow_one_nor_behind_a_cancelled_one() {
    let (home, a, mut ca, old, slow) = changed_under_a_call(60000).await;
    home.wait_status("the old alpha draining", SLOW, |s| {
        s["retired"].as_array().is_some_and(|r| r.iter().any(|x| x["name"] == "alpha"))
    })
    .await;
    // The slow call runs on; quick calls are answered meanwhile, by the instance as it was.
    for i in 0..3 {
        let text = format!("quick {i}");
        assert_eq!(ca.call_text("echo", json!({"text": text})).await, text);
    }
    assert_eq!(fixture_pid(&mut ca).await, (old, "v1".to_string()), "moved while a call was in flight");
    // The client gives up on the slow call: nothing holds the session any more, it moves.
    ca.cancel(&slow, "user pressed Esc").await;
    let changed = Instant::now();
    loop {
        let (pid, name) = fixture_pid(&mut ca).await;
        if name == "v2" {
            assert_ne!(pid, old);
            break;
        }
        assert!(changed.elapsed() < SLOW, "the session never moved to the new configuration after the cancel");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_all_dead(&[old], SLOW).await;
    leave(a, ca).await;
    home.shutdown().await;
}

/// A save seen half-way (the file truncated, not yet written) changes nothing: an empty file
/// would otherwise remove every server and end every session.
#[tokio::test]
async fn hot_reload_an_empty_file_keeps_every_server() {
    let home = Home::new();
    let config = home.fixture("alpha", &[]);
    home.write_config(&config);
    let (a, mut ca) = home.client("alpha").await;
    let (pid, _) = fixture_pid(&mut ca).await;
    std::fs::write(home.config_str(), "").unwrap();
    let end = Instant::now() + SLOW;
    while !home.logs().contains("is empty") {
        assert!(Instant::now() < end, "no log line about the empty file:\n{}", home.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fixture_pid(&mut ca).await.0, pid, "the server was restarted");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(home.logs().matches("is empty").count(), 1, "said more than once:\n{}", home.logs());
    std::fs::write(home.config_str(), &config).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fixture_pid(&mut ca).await.0, pid, "the same config written back restarted the server");
    leave(a, ca).await;
    home.shutdown().await;
}

/// The daemon does not keep descriptors its first `connect` inherited (a client's pipe): the
/// client would wait for their end as long as the daemon runs.
#[tokio::test]
async fn the_daemon_keeps_no_descriptor_its_starter_inherited() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let script = r#"
import os, subprocess, sys, select
r, w = os.pipe()
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(w,))
os.close(w)
p.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fd","version":"1"}}}\n')
p.stdin.flush()
print("answer", p.stdout.readline()[:40])
p.stdin.close()
p.wait(timeout=10)
ready, _, _ = select.select([r], [], [], 5)
print("eof" if ready and os.read(r, 1) == b"" else "still open")
"#;
    let config = home.config_str();
    let mut cmd = tokio::process::Command::new("python3");
    cmd.arg("-c").arg(script).arg(bin()).args(["connect", "alpha", "--config", &config]).envs(home.envs());
    let out = cmd.output().await.unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("answer b'{\"jsonrpc\"") || said.contains("answer b'{\"id\""),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("eof"), "the pipe stayed open after connect exited: {said}\n{}", home.logs());
    home.shutdown().await;
}

/// A socket file removed under a running daemon (a cleaner of /tmp) is made again: the next
/// `connect` reaches the same daemon and server instead of starting a second daemon.
#[tokio::test]
async fn a_removed_socket_is_made_again_and_no_second_daemon_starts() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (a, mut ca) = home.client("alpha").await;
    let (pid, _) = fixture_pid(&mut ca).await;
    leave(a, ca).await;
    let daemon = home.daemon_pid().await;
    let socket = home.socket().expect("the daemon's socket");
    std::fs::remove_file(&socket).unwrap();
    let end = Instant::now() + SLOW;
    while !socket.exists() {
        assert!(Instant::now() < end, "the socket was not made again:\n{}", home.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (b, mut cb) = home.client("alpha").await;
    assert_eq!(fixture_pid(&mut cb).await.0, pid, "another server answered");
    assert_eq!(home.daemon_pid().await, daemon);
    assert_eq!(home.daemons().len(), 1, "{}", render(&home.daemons()));
    leave(b, cb).await;
    home.shutdown().await;
}

/// A config that is a link (as dotfile managers make them), pointed at another file: the same
/// daemon follows it (no second daemon), and so do edits of the file it points to.
#[tokio::test]
async fn a_linked_config_pointed_elsewhere_is_followed_by_the_same_daemon() {
    let home = Home::new();
    let store = home.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join("gen1.toml"), home.fixture_named("alpha", "v1", &[])).unwrap();
    let link = std::path::PathBuf::from(home.config_str());
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(store.join("gen1.toml"), &link).unwrap();
    let (a, mut ca) = home.client("alpha").await;
    ca.timeout = SLOW;
    let (v1, name) = fixture_pid(&mut ca).await;
    assert_eq!(name, "v1");
    let daemon = home.daemon_pid().await;
    // Pointed at a new generation, the way `ln -s new tmp; mv tmp link` does it.
    std::fs::write(store.join("gen2.toml"), home.fixture_named("alpha", "v2", &[])).unwrap();
    let tmp = home.path().join("link.new");
    std::os::unix::fs::symlink(store.join("gen2.toml"), &tmp).unwrap();
    std::fs::rename(&tmp, &link).unwrap();
    let end = Instant::now() + SLOW;
    loop {
        let (_, name) = fixture_pid(&mut ca).await;
        if name == "v2" {
            break;
        }
        assert!(Instant::now() < end, "the daemon did not follow the link:\n{}", home.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An edit of the file the link points to is seen too.
    std::fs::write(store.join("gen2.toml"), home.fixture_named("alpha", "v3", &[])).unwrap();
    let end = Instant::now() + SLOW;
    while fixture_pid(&mut ca).await.1 != "v3" {
        assert!(Instant::now() < end, "an edit of the link's target was not seen:\n{}", home.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (b, mut cb) = home.client("alpha").await;
    assert_eq!(fixture_pid(&mut cb).await.1, "v3");
    assert_eq!(home.daemon_pid().await, daemon);
    assert_eq!(home.daemons().len(), 1, "{}", render(&home.daemons()));
    wait_all_dead(&[v1], SLOW).await;
    leave(a, ca).await;
    leave(b, cb).await;
    home.shutdown().await;
}

/// A server removed from the file: its process goes, and a new `connect` for it is refused with
/// an error naming the server and the file. The others go on.
#[tokio::test]
async fn hot_reload_a_removed_server_stops_and_is_refused_by_name() {
    let home = Home::new();
    let alpha = home.fixture("alpha", &[]);
    home.write_config(&format!("{alpha}{}", home.fixture("beta", &[])));
    let (a, mut ca) = home.client("alpha").await;
    let (b, mut cb) = home.client("beta").await;
    let (beta_pid, _) = fixture_pid(&mut cb).await;
    leave(b, cb).await;

    home.write_config(&alpha);
    home.wait_status("beta gone", SLOW, |s| status_server(s, "beta").is_none()).await;
    wait_all_dead(&[beta_pid], SLOW).await;
    let mut p = home.connect("beta");
    let mut c = p.client();
    c.timeout = SLOW;
    let resp = c.request("initialize", init_params("e2e", "1")).await;
    let message = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("initialize was not refused: {resp}"));
    assert!(message.contains("beta"), "the error does not name the server: {message}");
    assert!(message.contains(&home.config_str()), "the error does not name the config file: {message}");
    assert!(!p.wait_timeout(SLOW).await.success(), "connect exited 0 after failing");
    assert_eq!(ca.call_text("echo", json!({"text": "still"})).await, "still");
    leave(a, ca).await;
    home.shutdown().await;
}

/// A broken file keeps the last good config in force (the servers keep working, untouched) and
/// the daemon logs one line naming the file and the line; a good file later is taken again.
#[tokio::test]
async fn hot_reload_a_broken_file_keeps_the_last_good_config_with_one_log_line() {
    let home = Home::new();
    let alpha = home.fixture("alpha", &[]);
    home.write_config(&alpha);
    let (a, mut ca) = home.client("alpha").await;
    let (pid, _) = fixture_pid(&mut ca).await;
    let log = home.status_json().await["log"].as_str().map(std::path::PathBuf::from).expect("the daemon's log file");

    let bad_line = alpha.lines().count() + 1;
    home.write_config(&format!("{alpha}[servers.beta\ncommand = \"x\"\n"));
    let config = home.config_str();
    let naming = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(&config) && l.contains(&format!("line {bad_line}")))
            .map(String::from)
            .collect()
    };
    let deadline = Instant::now() + SLOW;
    while naming(&std::fs::read_to_string(&log).unwrap_or_default()).is_empty() {
        assert!(Instant::now() < deadline, "no log line names {config} and line {bad_line}:\n{}", home.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Time for a duplicate to show up, if the daemon logged the same error twice.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let lines = naming(&std::fs::read_to_string(&log).unwrap_or_default());
    assert_eq!(lines.len(), 1, "the broken file was logged {} times: {lines:#?}", lines.len());
    println!("the daemon's log line: {}", lines[0]);

    assert_eq!(fixture_pid(&mut ca).await, (pid, "alpha".to_string()), "the running server changed");
    let (b, mut cb) = home.client("alpha").await;
    assert_eq!(fixture_pid(&mut cb).await.0, pid);
    leave(b, cb).await;

    // Mended: the file is read again.
    home.write_config(&format!("{alpha}{}", home.fixture("beta", &[])));
    home.wait_status("server beta", SLOW, |s| status_server(s, "beta").is_some()).await;
    let (b, mut cb) = home.client("beta").await;
    assert_eq!(fixture_pid(&mut cb).await.1, "beta");
    leave(b, cb).await;
    leave(a, ca).await;
    home.shutdown().await;
}

// ------------------------------------------------------------------------------------------------
// Values only the client has (`client_env`, `connect --env`).

/// `[servers.tools]`: the fixture named after the client's TOOLS_NAME (what its `pid` tool
/// reports), `prefix` before it, taking TOOLS_NAME from the client.
fn tools_template(home: &Home, prefix: &str) -> String {
    format!("{}client_env = [\"TOOLS_NAME\"]\n", home.fixture_named("tools", &format!("{prefix}${{TOOLS_NAME}}"), &[]))
}

/// The names of the servers in a status.
fn server_names(status: &Value) -> Vec<String> {
    status["servers"].as_array().into_iter().flatten().filter_map(|s| s["name"].as_str()).map(String::from).collect()
}

/// Two clients with the same value share one server process; a third with another value gets
/// a process of its own, which sees its own value. The values appear in no status, no daemon
/// log, no argv of connect or the daemon, nor the daemon's environment.
#[tokio::test]
async fn client_env_equal_values_share_a_server_and_other_values_get_their_own() {
    let home = Home::new();
    home.write_config(&tools_template(&home, ""));
    let (alpha, beta) = ("alpha-7f3a9c", "beta-52e1d0");
    let (a, mut ca) = home.client_env("tools", &[("TOOLS_NAME", alpha)]).await;
    let (b, mut cb) = home.client_env("tools", &[("TOOLS_NAME", alpha)]).await;
    let (c, mut cc) = home.client_env("tools", &[("TOOLS_NAME", beta)]).await;
    let (pa, name_a) = fixture_pid(&mut ca).await;
    let (pb, name_b) = fixture_pid(&mut cb).await;
    let (pc, name_c) = fixture_pid(&mut cc).await;
    assert_eq!((name_a.as_str(), name_b.as_str(), name_c.as_str()), (alpha, alpha, beta));
    assert_eq!(pa, pb, "two clients with equal values reached two server processes");
    assert_ne!(pa, pc, "clients with different values share a server process");

    let status = home.status_json().await;
    let names = server_names(&status);
    assert!(names.contains(&"tools".to_string()), "the template is not listed: {names:?}");
    let variants: Vec<&String> = names.iter().filter(|n| n.starts_with("tools@")).collect();
    assert_eq!(variants.len(), 2, "{names:?}");
    let mut pids: Vec<u32> = variants.iter().flat_map(|v| instance_pids(&status, v)).collect();
    pids.sort();
    let mut want = vec![pa, pc];
    want.sort();
    assert_eq!(pids, want, "the variants' instances are not the two processes:\n{status:#}");
    let shared = variants.iter().find(|v| instance_pids(&status, v) == [pa]).unwrap();
    assert_eq!(sessions(&status, shared), 2, "{status:#}");

    let text = home.status_text().await;
    // The daemon's own lines: what a server writes to its stderr (forwarded as `[label] ...`) is
    // the server's business, and this fixture names itself there.
    let log: String = home.logs().lines().filter(|l| !l.starts_with('[')).collect::<Vec<_>>().join("\n");
    let daemon = home.daemons().into_iter().next().expect("a daemon runs");
    let environ = std::fs::read(format!("/proc/{}/environ", daemon.pid)).unwrap_or_default();
    let environ = String::from_utf8_lossy(&environ).into_owned();
    let switchyards: Vec<String> =
        home.processes().into_iter().filter(|p| p.is("connect") || p.is("daemon")).map(|p| p.argv.join(" ")).collect();
    assert!(switchyards.iter().filter(|a| a.contains("--env TOOLS_NAME")).count() == 3, "{switchyards:#?}");
    for value in [alpha, beta] {
        assert!(!status.to_string().contains(value), "status --json shows {value}:\n{status:#}");
        assert!(!text.contains(value), "status shows {value}:\n{text}");
        assert!(!log.contains(value), "the daemon's log has {value}:\n{log}");
        assert!(!switchyards.iter().any(|a| a.contains(value)), "a command line has {value}: {switchyards:#?}");
        assert!(!environ.contains(value), "the daemon inherited a client's value {value}");
    }
    leave(a, ca).await;
    leave(b, cb).await;
    leave(c, cc).await;
    home.shutdown().await;
}

/// A connect without a value the server needs is refused: its client's first request gets the
/// reason, naming the server, the missing name and what to do; a name `--env` gives that is not
/// set in connect's environment is named by connect itself.
#[tokio::test]
async fn client_env_a_connect_without_a_needed_value_is_refused_with_what_to_do() {
    let home = Home::new();
    home.write_config(&tools_template(&home, ""));
    for (mut p, says) in [
        (home.connect("tools"), vec!["server `tools`", "did not send TOOLS_NAME", "connect tools --env TOOLS_NAME"]),
        (home.connect_env("tools", &[("OTHER", "x")]), vec!["did not send TOOLS_NAME"]),
    ] {
        let mut c = p.client();
        c.timeout = SLOW;
        let resp = c.request("initialize", init_params("e2e", "1")).await;
        let message = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("initialize was not refused: {resp}"));
        for want in says {
            assert!(message.contains(want), "{want:?} missing from: {message}");
        }
        let status = p.wait_timeout(SLOW).await;
        assert!(!status.success(), "connect exited {status} after being refused");
    }
    // Named by --env but not set where connect runs.
    let config = home.config_str();
    let mut p = home.spawn("connect unset", &["connect", "tools", "--config", &config, "--env", "TOOLS_NAME"]);
    let mut c = p.client();
    c.timeout = SLOW;
    let resp = c.request("initialize", init_params("e2e", "1")).await;
    let message = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("initialize was not refused: {resp}"));
    assert!(message.contains("TOOLS_NAME is not set") && message.contains("--env TOOLS_NAME?"), "{message}");
    p.wait_timeout(SLOW).await;
    let status = home.status_json().await;
    assert_eq!(server_names(&status), ["tools"], "a refused client started a server:\n{status:#}");
    home.shutdown().await;
}

/// An edited template moves a live session to a server of the new definition, with the same
/// client value; the old variant's process goes away.
#[tokio::test]
async fn client_env_a_template_edit_moves_a_live_session_to_the_new_definition() {
    let home = Home::new();
    home.write_config(&tools_template(&home, "v1-"));
    let (a, mut ca) = home.client_env("tools", &[("TOOLS_NAME", "x1")]).await;
    ca.timeout = SLOW;
    let (old, name) = fixture_pid(&mut ca).await;
    assert_eq!(name, "v1-x1");
    home.replace_config(&tools_template(&home, "v2-"));
    let changed = Instant::now();
    let new = loop {
        let (pid, name) = fixture_pid(&mut ca).await;
        if name == "v2-x1" {
            break pid;
        }
        assert_eq!(name, "v1-x1");
        assert!(changed.elapsed() < SLOW, "the session did not reach the edited template within {SLOW:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(new, old);
    wait_all_dead(&[old], SLOW).await;
    let status = home.status_json().await;
    assert_eq!(server_names(&status).len(), 2, "the template and one variant:\n{status:#}");
    leave(a, ca).await;
    home.shutdown().await;
}

/// A server that cannot start in the directory a client's value names: the client is told why,
/// with the value shown as `${NAME}`, and neither status nor the daemon's log shows the value.
#[tokio::test]
async fn client_env_a_failed_start_is_explained_without_the_client_s_value() {
    let home = Home::new();
    home.write_config(&format!(
        "{}cwd = \"${{TOOLS_DIR}}/sub\"\nclient_env = [\"TOOLS_DIR\"]\n",
        home.fixture("tools", &[])
    ));
    let secret = "/nonexistent/secret-dir-4f2a";
    let mut p = home.connect_env("tools", &[("TOOLS_DIR", secret)]);
    let mut c = p.client();
    c.timeout = SLOW;
    let resp = c.request("initialize", init_params("e2e", "1")).await;
    let message = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("initialize succeeded: {resp}"));
    assert!(message.contains("${TOOLS_DIR}/sub") && message.contains("does not exist"), "{message}");
    assert!(!message.contains("secret-dir"), "{message}");
    let status = home.status_json().await;
    assert!(status.to_string().contains("${TOOLS_DIR}/sub"), "no last error in status:\n{status:#}");
    assert!(!status.to_string().contains("secret-dir"), "{status:#}");
    let log = home.logs();
    assert!(log.contains("${TOOLS_DIR}/sub") && !log.contains("secret-dir"), "{log}");
    c.close().await;
    p.wait_timeout(SLOW).await;
    home.shutdown().await;
}

// ------------------------------------------------------------------------------------------------
// The HTTP front's token and `daemon --http`.

/// The one `*.token` file in this home's state directory.
fn token_files(home: &Home) -> Vec<std::path::PathBuf> {
    let dir = home.path().join("state/switchyard");
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "token")).collect()
}

fn text(out: &std::process::Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn token_prints_one_generated_token_kept_0600_and_the_page_url() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let config = home.config_str();
    let out = home.cli(&["token", "--config", &config]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "token failed: {stderr}");
    let token = stdout.trim_end_matches('\n').to_string();
    assert!(token.starts_with("sy_") && token.len() == 46, "not a generated token: {stdout:?}");
    assert!(token[3..].chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{token}");
    let files = token_files(&home);
    assert_eq!(files.len(), 1, "one token file in the state directory: {files:?}");
    let file = &files[0];
    assert!(file.file_name().unwrap().to_str().unwrap().starts_with("switchyard-"), "{}", file.display());
    assert_eq!(std::fs::metadata(file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_to_string(file).unwrap(), format!("{token}\n"));
    // Read back, not made again.
    let out = home.cli(&["token", "--config", &config]).await;
    assert_eq!(text(&out).0, format!("{token}\n"));
    let out = home.cli(&["token", "--config", &config, "--url"]).await;
    assert_eq!(text(&out).0, format!("http://127.0.0.1:7070/#token={token}\n"));
    // The address follows [http] listen.
    home.write_config(&format!("{}[http]\nlisten = \"[::1]:7171\"\n", home.fixture("alpha", &[])));
    let out = home.cli(&["token", "--config", &config, "--url"]).await;
    assert_eq!(text(&out).0, format!("http://[::1]:7171/#token={token}\n"));
    // A file others may read is refused, naming it and the fix, without printing the token.
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = home.cli(&["token", "--config", &config]).await;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success() && stdout.is_empty(), "a 0644 token file was used: {stdout}");
    assert!(stderr.contains(&format!("run `chmod 600 {}`", file.display())), "{stderr}");
    assert!(!stderr.contains(&token), "{stderr}");
    assert!(home.daemons().is_empty(), "`token` started a daemon");
    home.shutdown().await;
}

/// A typo in `[groups]` while the daemon runs: it keeps its last good config, and the read-only
/// commands that need another part of the file keep working, naming the typo as a warning:
/// `token` (its [http]: `SWITCHYARD_TOKEN=$(switchyard token)` must not break), `calls` (its
/// [audit]), `status` and `clients`. A mistake in [http] itself is `token`'s error.
#[tokio::test]
async fn a_broken_groups_table_leaves_token_calls_status_and_clients_working() {
    let home = Home::new();
    let alpha = home.fixture("alpha", &[]);
    let http = "[http]\nlisten = \"127.0.0.1:0\"\n";
    home.write_config(&format!("{alpha}{http}"));
    let (a, mut ca) = home.client("alpha").await;
    fixture_pid(&mut ca).await;
    let config = home.config_str();
    let out = home.cli(&["token", "--config", &config]).await;
    assert!(out.status.success(), "{}", text(&out).1);
    let token = text(&out).0;

    home.write_config(&format!("{alpha}{http}\n[groups.typo]\nservers = [\"alpha\", \"memroy\"]\n"));
    home.wait_status("the config error", SLOW, |s| s.to_string().contains("memroy")).await;
    let out = home.cli(&["token", "--config", &config]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "token failed on a broken [groups]: {stderr}");
    assert_eq!(stdout, token, "another token, or none");
    assert!(stderr.contains("warning:") && stderr.contains("memroy"), "{stderr}");
    let deadline = Instant::now() + SLOW;
    loop {
        let out = home.cli(&["calls", "--config", &config, "--json"]).await;
        let (stdout, stderr) = text(&out);
        assert!(out.status.success() || stderr.contains("no call was logged yet"), "calls failed: {stderr}");
        if out.status.success() && stdout.contains("pid") {
            assert!(stderr.contains("warning:") && stderr.contains("memroy"), "{stderr}");
            break;
        }
        assert!(Instant::now() < deadline, "calls shows no call: {stdout}\n{stderr}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for args in [vec!["status", "--config", &config], vec!["clients"]] {
        let out = home.cli(&args).await;
        assert!(out.status.success(), "{args:?} failed: {}", text(&out).1);
    }
    // A broken server table is the same: its own problem.
    home.write_config(&format!("{alpha}{http}\n[servers.beta]\ncomand = \"x\"\n"));
    let runs =
        [(vec!["token", "--config", &config], token.as_str()), (vec!["calls", "--config", &config, "--json"], "pid")];
    for (args, shown) in runs {
        let out = home.cli(&args).await;
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{args:?} failed on a broken [servers.beta]: {stderr}");
        assert!(stderr.contains("warning:") && stderr.contains("comand"), "{stderr}");
        assert!(stdout.contains(shown), "{args:?}: {stdout}");
    }

    home.write_config(&format!("{alpha}[http]\nlistn = \"127.0.0.1:0\"\n\n[groups.typo]\nservers = [\"memroy\"]\n"));
    let out = home.cli(&["token", "--config", &config]).await;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success() && stdout.is_empty(), "a broken [http] gave a token: {stdout}");
    assert!(stderr.contains("listn"), "{stderr}");
    leave(a, ca).await;
    home.shutdown().await;
}

#[tokio::test]
async fn token_prints_the_config_s_own_token_read_from_the_environment() {
    let home = Home::new();
    home.write_config(&format!("{}[http]\ntoken = \"${{SY_E2E_TOKEN}}\"\n", home.fixture("alpha", &[])));
    let run = |value: Option<&str>| {
        let mut cmd = tokio::process::Command::new(bin());
        cmd.args(["token", "--config", &home.config_str()]).envs(home.envs()).env_remove("SY_E2E_TOKEN");
        if let Some(v) = value {
            cmd.env("SY_E2E_TOKEN", v);
        }
        cmd.stdin(std::process::Stdio::null()).kill_on_drop(true).output()
    };
    let out = run(Some("team-token_1")).await.unwrap();
    assert_eq!(text(&out).0, "team-token_1\n", "{}", text(&out).1);
    assert!(token_files(&home).is_empty(), "a token file was made although the config has a token");
    let out = run(None).await.unwrap();
    let stderr = text(&out).1;
    assert!(!out.status.success(), "an unset variable gave a token");
    assert!(
        stderr.contains("[http] token (config file") && stderr.contains("uses ${SY_E2E_TOKEN}, which is not set"),
        "{stderr}"
    );
    let out = run(Some("")).await.unwrap();
    let stderr = text(&out).1;
    assert!(!out.status.success() && stderr.contains("is empty once ${SY_E2E_TOKEN} is read"), "{stderr}");
    home.shutdown().await;
}

#[tokio::test]
async fn daemon_http_refuses_an_address_other_machines_reach_without_the_user_s_token() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let config = home.config_str();
    for args in [
        vec!["daemon", "--config", &config, "--http", "0.0.0.0:7070"],
        vec!["daemon", "--config", &config, "--detach", "--http=0.0.0.0:7070"],
    ] {
        let out = home.cli(&args).await;
        let stderr = text(&out).1;
        assert!(!out.status.success(), "{args:?} started");
        assert!(stderr.contains("--http 0.0.0.0:7070 is reachable from other machines"), "{stderr}");
        assert!(stderr.contains("token = \"${SWITCHYARD_TOKEN}\""), "{stderr}");
    }
    // The same from the file leaves the front out and serves the rest:
    // resilience::an_http_table_that_does_not_load_leaves_the_front_out_and_the_servers_in.
    let out = home.cli(&["daemon", "--config", &config, "--http", "7070"]).await;
    assert!(text(&out).1.contains("`7070` is not an address and port"), "{}", text(&out).1);
    assert!(home.daemons().is_empty() && token_files(&home).is_empty());
    home.shutdown().await;
}

#[tokio::test]
async fn daemon_detach_forwards_http_and_makes_the_token_at_the_first_start() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let config = home.config_str();
    let out = home.cli(&["daemon", "--config", &config, "--detach", "--http", "127.0.0.1:0"]).await;
    assert!(out.status.success(), "daemon --detach --http failed: {}", text(&out).1);
    let daemons = home.wait_processes("the detached daemon", SLOW, |ps| ps.iter().any(|p| p.is("daemon"))).await;
    let child = daemons.iter().find(|p| p.is("daemon")).unwrap();
    assert!(child.argv.iter().any(|a| a == "--http=127.0.0.1:0"), "--http not forwarded: {:?}", child.argv);
    assert_eq!(token_files(&home).len(), 1, "no token made at the start");
    let out = home.cli(&["token", "--config", &config]).await;
    let token = text(&out).0;
    assert_eq!(std::fs::read_to_string(&token_files(&home)[0]).unwrap(), token);
    home.shutdown().await;
}

/// Clients start `connect` with different environments: the harness's (XDG directories of its
/// own) and an SDK client's (only HOME, LOGNAME, PATH, SHELL, TERM and USER). Starting at the
/// same moment, both reach one daemon and one server instance, and `status` and `stop` from
/// either environment agree on it.
#[tokio::test]
async fn clients_with_different_environments_share_one_daemon() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let config = home.config_str();
    let home_dir = home.path().display().to_string();
    let path = std::env::var("PATH").unwrap_or_default();
    let bare: Vec<(&str, &str)> = vec![
        ("HOME", &home_dir),
        ("LOGNAME", "e2e"),
        ("PATH", &path),
        ("SHELL", "/bin/sh"),
        ("TERM", "dumb"),
        ("USER", "e2e"),
    ];
    let argv: Vec<String> = [bin(), "connect", "alpha", "--config", &config].iter().map(|s| s.to_string()).collect();
    let mut full = home.connect("alpha");
    let mut sdk = Proc::spawn_only_env("connect (SDK environment)", &argv, &bare);
    let (mut a, mut b) = (full.client(), sdk.client());
    let (ra, rb) = tokio::join!(a.initialize(), b.initialize());
    assert!(ra["result"].is_object() && rb["result"].is_object(), "{ra}\n{rb}");
    let ((pid_a, _), (pid_b, _)) = tokio::join!(fixture_pid(&mut a), fixture_pid(&mut b));
    assert_eq!(pid_a, pid_b, "the two clients reached two server instances");
    assert_eq!(home.daemons().len(), 1, "{}", render(&home.processes()));
    // status from the bare environment names the same daemon and socket.
    let mut cmd = tokio::process::Command::new(bin());
    cmd.args(["status", "--json", "--config", &config]).env_clear().envs(bare.iter().copied());
    let out = cmd.output().await.unwrap();
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let status = home.status_json().await;
    assert_eq!((&seen["pid"], &seen["socket"]), (&status["pid"], &status["socket"]));
    assert_eq!(status["socket"].as_str(), Some(home.socket_path().to_str().unwrap()));
    leave(full, a).await;
    leave(sdk, b).await;
    home.stop().await;
    home.wait_no_processes(SLOW).await;
}

/// A server removed from the file while its instance is still starting loses that instance at
/// once; it used to live until its start ended (still there 12 s later), and the waiting client
/// is told the server was removed.
#[tokio::test]
async fn hot_reload_a_server_removed_while_it_starts_loses_its_instance_at_once() {
    let home = Home::new();
    let alpha = home.fixture("alpha", &[]);
    home.write_config(&format!("{alpha}{}", home.fixture("slow", &["--init-delay-ms", "30000"])));
    let mut p = home.connect("slow");
    let mut c = p.client();
    c.timeout = SLOW;
    let id = c.send_request("initialize", init_params("e2e", "1")).await;
    let starting = home
        .wait_processes("the slow server starting", SLOW, |ps| {
            ps.iter().any(|p| p.is("fixture") && p.argv.iter().any(|a| a == "--init-delay-ms"))
        })
        .await;
    let pids: Vec<u32> =
        starting.iter().filter(|p| p.argv.iter().any(|a| a == "--init-delay-ms")).map(|p| p.pid).collect();
    home.write_config(&alpha);
    let removed = Instant::now();
    wait_all_dead(&pids, Duration::from_secs(5)).await;
    eprintln!("the starting instance was gone {:?} after the config was saved", removed.elapsed());
    let resp = c.wait_response(&id).await;
    let message = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("initialize was answered: {resp}"));
    assert!(message.contains("slow"), "{message}");
    drop(p);
    home.shutdown().await;
}

/// The daemon stopped by SIGTERM while an instance of a server that ignores SIGTERM is still
/// starting: nothing of it outlives the daemon.
#[tokio::test]
async fn a_daemon_stopped_while_an_instance_starts_leaves_no_orphan() {
    let home = Home::new();
    home.write_config(&home.fixture("slow", &["--init-delay-ms", "30000", "--ignore-sigterm", "--ignore-stdin-eof"]));
    let mut p = home.connect("slow");
    let mut c = p.client();
    c.send_request("initialize", init_params("e2e", "1")).await;
    let ps = home.wait_processes("the slow server starting", SLOW, |ps| ps.iter().any(|p| p.is("fixture"))).await;
    // The daemon, and the instance's supervisor and server.
    let doomed: Vec<u32> =
        ps.iter().filter(|p| p.is("daemon") || p.is("supervise") || p.is("fixture")).map(|p| p.pid).collect();
    assert_eq!(doomed.len(), 3, "{ps:?}");
    let daemon = home.daemon_pid().await;
    assert!(doomed.contains(&daemon) && doomed.iter().all(|p| pid_alive(*p)), "{ps:?}");
    signal_pid(daemon, libc::SIGTERM);
    let stopped = Instant::now();
    wait_all_dead(&doomed, Duration::from_secs(5)).await;
    eprintln!("the daemon and its starting instance were gone {:?} after SIGTERM", stopped.elapsed());
    // The relay starts a daemon again on its own: that one is stopped as usual.
    drop(p);
    home.shutdown().await;
}

/// Initialises `c` as client `name`, and returns the pid of the fixture instance serving it.
async fn pid_as_client(c: &mut Client, name: &str) -> u32 {
    let r = c.request("initialize", init_params(name, "1")).await;
    assert!(r["result"].is_object(), "{r}");
    c.notify("notifications/initialized", json!({})).await;
    fixture_pid(c).await.0
}

/// `share = "client"`: chats of one client share instances, another client never reaches them,
/// and they outlive the client's `connect` (a SIGTERM of it keeps the server and its state):
/// the client that comes back is served by the same process.
#[tokio::test]
async fn share_client_gives_each_client_instances_of_its_own_that_outlive_it() {
    let home = Home::new();
    home.write_config(&format!("{}share = \"client\"\n", home.fixture("alpha", &[])));
    let (mut pa, mut pa2, mut pb) = (home.connect("alpha"), home.connect("alpha"), home.connect("alpha"));
    let (mut a, mut a2, mut b) = (pa.client(), pa2.client(), pb.client());
    let (chat_1, chat_2, other) =
        tokio::join!(pid_as_client(&mut a, "desktop"), pid_as_client(&mut a2, "desktop"), pid_as_client(&mut b, "cli"));
    assert_eq!(chat_1, chat_2, "two chats of one client got two servers");
    assert_ne!(chat_1, other, "another client reached this client's server");
    pa.signal(libc::SIGTERM);
    pa2.signal(libc::SIGTERM);
    pa.wait_timeout(SLOW).await;
    pa2.wait_timeout(SLOW).await;
    let mut back = home.connect("alpha");
    let mut c = back.client();
    assert_eq!(pid_as_client(&mut c, "desktop").await, chat_1, "the client's server did not outlive its connect");
    let status = home.status_json().await;
    let labels: Vec<&str> = status["servers"].as_array().unwrap().iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(labels, ["alpha", "alpha~2"], "{status:#}");
    leave(back, c).await;
    leave(pb, b).await;
    home.stop().await;
    home.wait_no_processes(SLOW).await;
}

/// A broken file of remembered answers is not dropped without a word: the daemon says so in its
/// log, keeps the file aside, and asks the server anew.
#[tokio::test]
async fn a_broken_answers_file_is_said_and_kept_aside() {
    let home = Home::new();
    home.write_config(&home.fixture("x", &[]));
    let (p, c) = home.client("x").await;
    leave(p, c).await;
    home.stop().await;
    home.wait_no_processes(SLOW).await;
    let state = home.dir.path().join("state/switchyard");
    let answers = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".answers.json"))
        .expect("the daemon kept its servers' answers");
    std::fs::write(&answers, "{\"x:initialize:1\": tru").unwrap();

    let (p, mut c) = home.client("x").await;
    assert_eq!(fixture_pid(&mut c).await.1, "x");
    let logs = home.logs();
    assert!(logs.contains("are not valid JSON") && logs.contains(".answers.json.broken"), "{logs}");
    assert_eq!(std::fs::read_to_string(answers.with_extension("json.broken")).unwrap(), "{\"x:initialize:1\": tru");
    leave(p, c).await;
    home.shutdown().await;
}

/// A server known from before is answered at once: a client of a daemon started anew gets the
/// initialize result the server gave last time while the server is still starting (Claude Code
/// gives up on a server whose initialize takes more than about 3 s), and its first call waits
/// for the server and is answered by it.
#[tokio::test]
async fn a_known_server_is_answered_initialize_while_it_starts() {
    let home = Home::new();
    home.write_config(&home.fixture("slow", &["--init-delay-ms", "4000"]));
    let mut first = home.connect("slow");
    let mut c = first.client();
    c.timeout = SLOW;
    let learned = c.request("initialize", init_params("e2e", "1")).await;
    assert!(learned["result"].is_object(), "{learned}");
    leave(first, c).await;
    home.stop().await;
    home.wait_no_processes(SLOW).await;

    let mut again = home.connect("slow");
    let mut c = again.client();
    c.timeout = SLOW;
    let answered = c.request("initialize", init_params("e2e", "1")).await;
    assert_eq!(answered["result"], learned["result"]);
    let status = home.status_json().await;
    let up = &status["servers"][0]["initialized"];
    assert_eq!(up, &json!(false), "answered only once the server was up: {status:#}");
    c.notify("notifications/initialized", json!({})).await;
    let (pid, _) = fixture_pid(&mut c).await;
    assert!(pid > 0);
    leave(again, c).await;
    home.stop().await;
    home.wait_no_processes(SLOW).await;
}

/// A client that never sent initialize is served by none of the instances set up for clients
/// that did: it cannot read what another client stored there, nor set the server's log level.
#[tokio::test]
async fn a_session_without_initialize_reaches_no_other_client_s_instance() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (pa, mut a) = home.client("alpha").await;
    a.call_text("write", json!({"path": "secret", "text": "alice's"})).await;
    let mut pm = home.connect("alpha");
    let mut m = pm.client();
    let read = m.call_tool("read", json!({"path": "secret"})).await;
    assert_eq!(read["error"]["code"], -32600, "served without initialize: {read}");
    let message = read["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("has not sent initialize"), "{message}");
    let level = m.request("logging/setLevel", json!({"level": "debug"})).await;
    assert_eq!(level["error"]["code"], -32600, "{level}");
    // It declared no roots (nor anything else): it is not asked for them.
    m.expect_silence(Duration::from_millis(500)).await;
    // Once it initializes, it is served.
    m.initialize().await;
    assert_eq!(m.call_text("echo", json!({"text": "now"})).await, "now");
    leave(pm, m).await;
    leave(pa, a).await;
    home.stop().await;
}

/// logging/setLevel from a client that was told of `logging`, to a server that no longer offers
/// it: refused (-32601) saying so; the message.
async fn logging_refused(c: &mut Client) -> String {
    let refused = c.request("logging/setLevel", json!({"level": "info"})).await;
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_else(|| panic!("{refused}")).to_string();
    assert!(message.contains("does not offer `logging` as it runs now"), "{message}");
    message
}

/// A client answered from the server's earlier initialize that the server, as it starts now, no
/// longer matches: a capability it was told of and the server dropped gets a clear error naming
/// what happened, not an answer the server would never give.
#[tokio::test]
async fn a_capability_the_server_dropped_since_its_remembered_answer_gets_a_clear_error() {
    let home = Home::new();
    let flags = slow_server_with_flags(&home, 1500);
    let learned = learn_initialize(&home, "slow").await;
    assert!(learned["result"]["capabilities"]["logging"].is_object(), "{learned}");

    std::fs::write(&flags, "--no-logging").unwrap();
    let mut again = home.connect("slow");
    let mut c = again.client();
    c.timeout = SLOW;
    let answered = c.request("initialize", init_params("e2e", "1")).await;
    assert_eq!(answered["result"], learned["result"], "not answered from memory");
    c.notify("notifications/initialized", json!({})).await;
    let message = logging_refused(&mut c).await;
    assert!(message.contains("Restart the client"), "{message}");
    // What it still offers works.
    let (pid, _) = fixture_pid(&mut c).await;
    assert!(pid > 0);
    leave(again, c).await;
    home.stop().await;
    home.wait_no_processes(SLOW).await;
}

/// A config edit that drops a capability moves a live session to the new configuration; the
/// client keeps what the old one told it at its initialize, so a request for what the server no
/// longer offers gets the same clear error as after a restart answered from memory.
#[tokio::test]
async fn a_capability_a_config_edit_dropped_gets_a_clear_error_after_the_move() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (p, mut c) = home.client("alpha").await;
    c.timeout = SLOW;
    let (pid, _) = fixture_pid(&mut c).await;
    assert!(c.request("logging/setLevel", json!({"level": "debug"})).await["result"].is_object());

    home.write_config(&home.fixture("alpha", &["--no-logging"]));
    let moved = Instant::now();
    while fixture_pid(&mut c).await.0 == pid {
        assert!(moved.elapsed() < SLOW, "the session never moved to the new configuration");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    logging_refused(&mut c).await;
    leave(p, c).await;
    home.shutdown().await;
}

/// The first tools/list of a client answered initialize from memory is answered from memory
/// too, at once, while the server (4 s to start) is still starting; once it is up, a server
/// whose tools differ from those remembered makes the client hear tools/list_changed.
#[tokio::test]
async fn the_first_list_of_a_known_server_is_answered_while_it_starts() {
    let home = Home::new();
    let flags = slow_server_with_flags(&home, 4000);
    let names = |list: &Value| -> Vec<String> {
        let tools = list["result"]["tools"].as_array().unwrap_or_else(|| panic!("not a list: {list}"));
        tools.iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    // A first daemon learns the initialize answer and the list.
    let mut first = home.connect("slow");
    let mut c = first.client();
    c.timeout = SLOW;
    assert!(c.request("initialize", init_params("e2e", "1")).await["result"].is_object());
    c.notify("notifications/initialized", json!({})).await;
    let learned = names(&c.request("tools/list", json!({})).await);
    leave(first, c).await;
    home.stop().await;
    home.wait_no_processes(SLOW).await;

    for (round, extra) in [(0, ""), (1, "--extra-tool added_meanwhile")] {
        std::fs::write(&flags, extra).unwrap();
        let mut again = home.connect("slow");
        let mut c = again.client();
        c.timeout = SLOW;
        assert!(c.request("initialize", init_params("e2e", "1")).await["result"].is_object());
        c.notify("notifications/initialized", json!({})).await;
        let asked = Instant::now();
        let listed = c.request("tools/list", json!({})).await;
        assert!(asked.elapsed() < Duration::from_secs(2), "round {round}: waited {:?} for the start", asked.elapsed());
        assert_eq!(names(&listed), learned, "round {round}");
        // The server is up once a call is answered; then the client hears of a change, if any.
        assert_eq!(c.call_text("echo", json!({"text": "up"})).await, "up");
        let told = crate::setup::drain(&mut c, Duration::from_millis(1500)).await;
        let changed = told.iter().filter(|m| m["method"] == "notifications/tools/list_changed").count();
        assert_eq!(changed, round, "round {round}: {told:?}");
        leave(again, c).await;
        home.stop().await;
        home.wait_no_processes(SLOW).await;
    }
}

/// A client answered from the server's earlier initialize while the server's start then fails
/// (here: its command fails until a file is back; in life, a sign-in nobody had done yet) is
/// served once the cause is gone, without initializing again: it was told the server is up and
/// will not send initialize again, so its next request starts the server anew rather than
/// repeating the old failure until the client is restarted.
#[tokio::test]
async fn a_client_answered_from_memory_is_served_once_a_failed_start_can_succeed() {
    let home = Home::new();
    let ready = home.path().join("ready");
    std::fs::write(&ready, "").unwrap();
    let script = r#"test -f "$1" || { echo "not ready: $1 is missing" >&2; exit 3; }; exec "$0" fixture"#;
    write_sh_server(&home, "flaky", script, &ready);
    let learned = learn_initialize(&home, "flaky").await;

    std::fs::remove_file(&ready).unwrap();
    let mut again = home.connect("flaky");
    let mut c = again.client();
    c.timeout = SLOW;
    let answered = c.request("initialize", init_params("e2e", "1")).await;
    assert_eq!(answered["result"], learned["result"], "not answered from memory");
    c.notify("notifications/initialized", json!({})).await;
    let failed = c.call_tool("echo", json!({"text": "early"})).await;
    let message = failed["error"]["message"].as_str().unwrap_or_else(|| panic!("not an error: {failed}"));
    assert!(message.contains("not ready"), "the start's own failure: {message}");

    std::fs::write(&ready, "").unwrap();
    let end = Instant::now() + SLOW;
    loop {
        let r = c.call_tool("echo", json!({"text": "later"})).await;
        if r["result"]["content"][0]["text"] == "later" {
            break;
        }
        // The server's start backoff may hold the next start a moment.
        assert!(Instant::now() < end, "still refused once the server could start: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    leave(again, c).await;
    home.stop().await;
    home.wait_no_processes(SLOW).await;
}

// ------------------------------------------------------------------------------------------------
// The hand-off: connect gives the daemon its pipes.

/// The kernel's name of the pipe at descriptor `fd` of `pid` (`pipe:[N]`).
fn pipe_of(pid: u32, fd: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).map(|p| p.display().to_string()).unwrap_or_default()
}

/// Whether process `pid` holds a descriptor on `pipe`.
fn holds(pid: u32, pipe: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.display().to_string() == pipe))
}

/// A connect whose stdin and stdout are pipes hands them to the daemon, which then reads and
/// writes the client's pipes itself; `SWITCHYARD_HANDOFF=0` keeps the relay. Both serve calls.
#[tokio::test]
async fn connect_hands_its_pipes_to_the_daemon_unless_told_not_to() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (a, mut ca) = home.client("alpha").await;
    assert_eq!(ca.call_text("echo", json!({"text": "handed"})).await, "handed");
    let daemon = home.daemon_pid().await;
    let (input, output) = (pipe_of(a.pid, 0), pipe_of(a.pid, 1));
    assert!(input.starts_with("pipe:") && output.starts_with("pipe:"), "{input} {output}");
    assert!(holds(daemon, &input) && holds(daemon, &output), "the daemon does not hold connect's pipes");

    let mut envs = home.envs();
    envs.push(("SWITCHYARD_HANDOFF".into(), "0".into()));
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut b = Proc::spawn_env("connect alpha (relayed)", &home.connect_command("alpha"), &envs);
    let mut cb = b.client();
    cb.initialize().await;
    assert_eq!(cb.call_text("echo", json!({"text": "relayed"})).await, "relayed");
    assert!(!holds(daemon, &pipe_of(b.pid, 1)), "the daemon holds a relayed connect's pipe");
    leave(a, ca).await;
    leave(b, cb).await;
    home.shutdown().await;
}

/// A call sent right after kill -9 of the daemon never reached it: it goes to the next daemon
/// and is answered there, never with "this call's outcome is unknown". With the hand-off, the
/// call waits in the client's pipe, which the dead daemon never read; with the relay, a write to
/// a router that is gone fails (connect is stopped while the daemon dies and the call is
/// written, so that it goes on with both at once). A write that lands in the socket of a router
/// still being torn down cannot be told apart from one the router read: that one stays unknown.
#[tokio::test]
async fn a_call_sent_after_kill_9_of_the_daemon_is_served_by_the_next_one() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    for relay in [false, true] {
        let mut envs = home.envs();
        if relay {
            envs.push(("SWITCHYARD_HANDOFF".into(), "0".into()));
        }
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut p = Proc::spawn_env("connect alpha", &home.connect_command("alpha"), &envs);
        let mut c = p.client();
        c.timeout = SLOW;
        c.initialize().await;
        for round in 0..3 {
            assert_eq!(c.call_text("echo", json!({"text": "before"})).await, "before");
            let daemon = home.daemon_pid().await;
            if relay {
                kill(p.pid, libc::SIGSTOP);
            }
            kill(daemon, libc::SIGKILL);
            let text = format!("after {round}");
            let id = c.send_request("tools/call", json!({"name": "echo", "arguments": {"text": text}})).await;
            if relay {
                wait_all_dead(&[daemon], SLOW).await;
                kill(p.pid, libc::SIGCONT);
            }
            let resp = c.wait_response(&id).await;
            assert_eq!(resp["result"]["content"][0]["text"], text, "relay {relay}, round {round}: {resp}");
        }
        leave(p, c).await;
    }
    home.shutdown().await;
}

/// kill -9 of a connect that handed its pipes off: the client sees its output close at once, as
/// it would with the relay, and the server lives on for the next client.
#[tokio::test]
async fn kill_9_of_a_handed_off_connect_closes_the_client_s_output_and_keeps_the_server() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (a, mut ca) = home.client("alpha").await;
    let (pid, _) = fixture_pid(&mut ca).await;
    let _call = ca.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 30000}})).await;
    wait_call_arrived(&home.journal("alpha"), "sleep").await;
    let killed = Instant::now();
    a.signal(libc::SIGKILL);
    ca.timeout = Duration::from_secs(5);
    let seen = ca.expect_eof().await;
    println!("output closed {:?} after kill -9 of connect; read meanwhile: {seen:?}", killed.elapsed());
    assert!(pid_alive(pid), "the server died with its client's connect");
    let (b, mut cb) = home.client("alpha").await;
    assert_eq!(fixture_pid(&mut cb).await.0, pid, "the next client did not get the same server");
    leave(b, cb).await;
    drop(a);
    home.shutdown().await;
}

/// kill -9 of the daemon under a handed-off session with calls in flight, calls it had read and
/// not taken up, and half a line: each request is answered exactly once (those taken up with an
/// error, as they may have run; the rest by the next daemon), the half line is completed and
/// served, and the session goes on.
#[tokio::test]
async fn kill_9_of_the_daemon_under_a_handed_off_session_answers_each_request_once() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (mut a, mut ca) = home.client("alpha").await;
    ca.timeout = SLOW;
    let daemon = home.daemon_pid().await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let id = json!(format!("call-{i}"));
        ca.send_request_with_id(id.clone(), "tools/call", json!({"name": "sleep", "arguments": {"ms": 400}})).await;
        ids.push(id);
    }
    wait_call_arrived(&home.journal("alpha"), "sleep").await;
    ca.send_raw_partial(r#"{"jsonrpc":"2.0","id":"half","method":"tools/call","#).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    kill(daemon, libc::SIGKILL);
    wait_all_dead(&[daemon], SLOW).await;
    ca.send_raw(r#""params":{"name":"echo","arguments":{"text":"whole"}}}"#).await;
    ids.push(json!("half"));

    let mut answers: std::collections::HashMap<String, Value> = Default::default();
    let deadline = Instant::now() + SLOW;
    while answers.len() < ids.len() && Instant::now() < deadline {
        let Some(m) = ca.recv_timeout(Duration::from_secs(1)).await else { continue };
        if let Some(id) = m.get("id").filter(|_| is_response(&m)) {
            let previous = answers.insert(id.to_string(), m.clone());
            assert!(previous.is_none(), "{id} answered twice: {previous:?} and {m}");
        }
    }
    let missing: Vec<&Value> = ids.iter().filter(|id| !answers.contains_key(&id.to_string())).collect();
    assert!(missing.is_empty(), "never answered: {missing:?}");
    assert_eq!(tool_text(&answers["\"half\""]), "whole", "{}", answers["\"half\""]);
    let errors = answers.values().filter(|m| m.get("error").is_some()).count();
    println!("{errors} of {} answered with an error after kill -9 of the daemon", ids.len());
    assert!(errors >= 1, "the call the server had was not answered as lost");
    for m in answers.values().filter(|m| m.get("error").is_some()) {
        assert!(m["error"]["message"].as_str().unwrap_or("").contains("outcome is unknown"), "{m}");
    }
    ca.expect_silence(Duration::from_millis(500)).await;
    assert_eq!(ca.call_text("echo", json!({"text": "after"})).await, "after");
    assert!(a.is_running(), "connect exited");
    assert!(holds(home.daemon_pid().await, &pipe_of(a.pid, 1)), "the new daemon was not handed the session");
    leave(a, ca).await;
    home.shutdown().await;
}

/// kill -9 of the daemon while it sends a client an answer far longer than one unsplit write:
/// the client only ever reads whole JSON lines, that answer arrives once (whole, or as the error
/// of a call whose outcome is unknown), and the session goes on.
#[tokio::test]
async fn kill_9_of_the_daemon_mid_answer_never_leaves_the_client_half_a_line() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    for round in 0..3 {
        let (a, mut ca) = home.client("alpha").await;
        ca.timeout = SLOW;
        let daemon = home.daemon_pid().await;
        // 8 MB, unread for now: the daemon is still sending it (or waiting for connect, which
        // waits for the client) when it dies.
        let id = ca.send_request("tools/call", json!({"name": "big", "arguments": {"bytes": 8_000_000}})).await;
        wait_call_arrived(&home.journal("alpha"), "big").await;
        tokio::time::sleep(Duration::from_millis(20 * round)).await;
        kill(daemon, libc::SIGKILL);
        wait_all_dead(&[daemon], SLOW).await;
        // Every line the client reads parses (the client fails the test on one that does not).
        let answer = ca.wait_response(&id).await;
        match answer["result"]["content"][0]["text"].as_str() {
            Some(text) => assert_eq!(text.len(), 8_000_000),
            None => {
                assert!(answer["error"]["message"].as_str().unwrap_or("").contains("outcome is unknown"), "{answer}")
            }
        }
        println!("round {round}: {}", if answer.get("result").is_some() { "whole" } else { "lost, said so" });
        assert_eq!(ca.call_text("echo", json!({"text": "after"})).await, "after");
        ca.expect_silence(Duration::from_millis(300)).await;
        leave(a, ca).await;
    }
    home.shutdown().await;
}

/// Node's `child_process` (Claude Code, the TypeScript SDK) gives a server Unix socket pairs as
/// stdin and stdout, not pipes: connect hands those over too, and the session survives the
/// daemon's kill -9 as a piped one does.
#[tokio::test]
async fn connect_hands_over_socket_pairs_as_node_clients_give_them() {
    use std::io::{BufRead, Write};
    use std::os::fd::OwnedFd;
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (to_connect, theirs_in) = std::os::unix::net::UnixStream::pair().unwrap();
    let (from_connect, theirs_out) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut child = std::process::Command::new(bin())
        .args(["connect", "alpha", "--config", &home.config_str()])
        .env_clear()
        .envs(home.envs())
        .stdin(std::process::Stdio::from(OwnedFd::from(theirs_in)))
        .stdout(std::process::Stdio::from(OwnedFd::from(theirs_out)))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    from_connect.set_read_timeout(Some(SLOW)).unwrap();
    let mut lines = std::io::BufReader::new(from_connect.try_clone().unwrap()).lines();
    let mut to = &to_connect;
    let mut ask = |id: u64, method: &str, params: Value| -> Value {
        writeln!(to, "{}", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
        loop {
            let line = lines.next().expect("a line").expect("read");
            let m: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if m["id"] == id {
                return m;
            }
        }
    };
    assert!(ask(1, "initialize", init_params("node-like", "1"))["result"].is_object());
    writeln!(&mut &to_connect, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
    let echo = ask(2, "tools/call", json!({"name": "echo", "arguments": {"text": "s"}}));
    assert_eq!(echo["result"]["content"][0]["text"], "s");
    let daemon = home.daemon_pid().await;
    let socket = pipe_of(child.id(), 1);
    assert!(
        socket.starts_with("socket:") && holds(daemon, &socket),
        "the daemon does not hold connect's socket {socket}"
    );
    kill(daemon, libc::SIGKILL);
    wait_all_dead(&[daemon], SLOW).await;
    let echo = ask(3, "tools/call", json!({"name": "echo", "arguments": {"text": "again"}}));
    assert_eq!(echo["result"]["content"][0]["text"], "again");
    assert!(holds(home.daemon_pid().await, &socket), "the new daemon was not handed the socket");
    drop(to_connect);
    let status = child.wait().unwrap();
    assert!(status.success(), "connect exited with {status}");
    home.shutdown().await;
}
