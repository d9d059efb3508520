//! End-to-end tests of how switchyard routes what a server starts on its own (requests to
//! clients, logs, list changes) when sessions share an instance, with the fixture server.

use std::time::Duration;

use crate::setup::*;
use serde_json::{Value, json};
use switchyard_testkit::*;

fn is_server_request(m: &Value, method: &str) -> bool {
    m["method"] == method && m.get("id").is_some()
}

/// A server that keeps working after a cancel asks for sampling on behalf of session A's
/// abandoned call while session B has a call in flight: B must not get A's request.
#[tokio::test]
async fn a_server_request_of_an_abandoned_call_never_reaches_another_session() {
    let dir = temp_dir();
    let sock = dir.path().join("r.sock");
    let journal = journal_in(&dir);
    let mut s = Setup::new(&["--ignore-cancel", "--journal", &journal], &["--listen", sock.to_str().unwrap()]).await;
    s.client.initialize().await;
    let (_bp, mut b) = connect(&sock).await;
    b.initialize().await;

    // A asks for a sampled answer that the server only requests after 1.5 s, then gives up.
    let a_call = s
        .client
        .send_request("tools/call", json!({"name": "sample", "arguments": {"prompt": "A's secret", "delay_ms": 1500}}))
        .await;
    wait_journal(&journal, Duration::from_secs(5), |e| received(e, "tools/call").count() == 1).await;
    s.client.cancel(&a_call, "user pressed stop").await;
    wait_journal(&journal, Duration::from_secs(5), |e| events(e, "cancel_disregarded").count() == 1).await;
    // B works on the same instance meanwhile.
    let b_call = b.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 3000}})).await;

    // The server's request is refused with an error to the server...
    let entries = wait_journal(&journal, Duration::from_secs(8), |e| {
        e.iter().any(|m| m["dir"] == "in" && m["msg"]["error"].is_object())
    })
    .await;
    let refusal = entries.iter().find(|m| m["dir"] == "in" && m["msg"]["error"].is_object()).unwrap();
    let why = refusal["msg"]["error"]["message"].as_str().unwrap();
    assert!(why.contains("sampling/createMessage") && why.contains("cancelled"), "{why}");
    // ...and reached neither session: B's call ends with nothing else before it.
    let b_resp = b.wait_response(&b_call).await;
    assert_eq!(tool_text(&b_resp), "slept 3000 ms");
    let b_seen = drain(&mut b, Duration::from_millis(300)).await;
    assert!(
        b.buffered().iter().chain(&b_seen).all(|m| !is_server_request(m, "sampling/createMessage")),
        "B got A's sampling request: {b_seen:?} {:?}",
        b.buffered()
    );
    let a_seen = drain(&mut s.client, Duration::from_millis(300)).await;
    assert!(a_seen.iter().all(|m| !is_server_request(m, "sampling/createMessage")), "{a_seen:?}");

    // The late answer to A's call has arrived, so the instance is unambiguous again: B's own
    // sampling reaches B.
    let call = b.send_request("tools/call", json!({"name": "sample", "arguments": {"prompt": "B's"}})).await;
    let req = b.recv_request("sampling/createMessage").await;
    b.respond(
        req["id"].clone(),
        json!({"role": "assistant", "content": {"type": "text", "text": "for B"}, "model": "m"}),
    )
    .await;
    assert!(tool_text(&b.wait_response(&call).await).contains("for B"));
}

/// The same when A's call timed out in switchyard: the server still working on it is refused
/// rather than given B (whose call, kept alive by progress, is on the instance meanwhile).
#[tokio::test]
async fn a_server_request_of_a_timed_out_call_never_reaches_another_session() {
    let dir = temp_dir();
    let sock = dir.path().join("t.sock");
    let journal = journal_in(&dir);
    // Only `sample` times out (after 1 s); an abandoned call stays an owner for one default
    // call timeout, far longer than this test.
    let cfg = "[[plugins]]\nfile = \"timeouts.wasm\"\nconfig = { tools = { \"sample\" = { timeout_ms = 1000 } } }\n";
    let timeouts = switchyard_testkit::example_plugins().join("timeouts.wasm");
    let mut s = Setup::start(
        &["--ignore-cancel", "--journal", &journal],
        &["--listen", sock.to_str().unwrap()],
        Some(cfg),
        &[&timeouts],
    )
    .await;
    s.client.initialize().await;
    let (_bp, mut b) = connect(&sock).await;
    b.initialize().await;

    let a_call = s
        .client
        .send_request("tools/call", json!({"name": "sample", "arguments": {"prompt": "A's", "delay_ms": 2500}}))
        .await;
    let b_call = b
        .send_request(
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 4000, "progress_ms": 250}, "_meta": {"progressToken": "b"}}),
        )
        .await;
    let a_resp = s.client.wait_response(&a_call).await;
    assert_eq!(a_resp["error"]["code"], -32001, "{a_resp}");
    let b_resp = b.wait_response(&b_call).await;
    assert_eq!(tool_text(&b_resp), "slept 4000 ms", "{b_resp}");
    let entries = switchyard_testkit::journal(&journal);
    let refused = entries.iter().any(|m| {
        m["dir"] == "in" && m["msg"]["error"]["message"].as_str().is_some_and(|t| t.contains("sampling/createMessage"))
    });
    assert!(refused, "the server's request was not refused");
    assert!(
        b.buffered().iter().all(|m| !is_server_request(m, "sampling/createMessage")),
        "B got A's sampling request: {:?}",
        b.buffered()
    );
}

/// A router (with `config`) whose first client (the Setup's) and a second one, on its socket,
/// are of one profile and stay so: the server asks for the roots once up, so the first's are
/// known, and the second, with the same roots, shares its instances. Each has made a call (the
/// second is placed: its roots asked and answered). What the second needs kept is returned.
async fn two_clients_of_one_profile(config: Option<&str>) -> (Setup, (TempDir, Proc), Client) {
    let dir = temp_dir();
    let sock = dir.path().join("one-profile.sock");
    let mut s = Setup::with_config(&["--roots-on-initialized"], &["--listen", sock.to_str().unwrap()], config).await;
    let roots = json!({"roots": [{"uri": "file:///project", "name": "p"}]});
    s.client.roots = Some(roots.clone());
    s.client.initialize().await;
    assert_eq!(s.client.call_text("echo", json!({"text": "a"})).await, "a");
    let (p, mut b) = connect(&sock).await;
    b.roots = Some(roots);
    b.initialize().await;
    assert_eq!(b.call_text("echo", json!({"text": "b"})).await, "b");
    (s, (dir, p), b)
}

/// A log message sent during session A's call, or just after it, goes to A only; one that
/// belongs to no call goes to nobody (counted in the router's log), never to another session.
#[tokio::test]
async fn log_messages_go_to_the_session_whose_call_sent_them() {
    let (mut s, _keep, mut b) = two_clients_of_one_profile(None).await;
    // Past the 2 s in which a log may still be the tail of B's call.
    tokio::time::sleep(Duration::from_millis(2100)).await;

    assert_eq!(s.client.call_text("log", json!({"level": "info", "message": "A's private note"})).await, "logged");
    let a_seen = drain(&mut s.client, Duration::from_millis(300)).await;
    let a_logs: Vec<&Value> =
        s.client.buffered().iter().chain(&a_seen).filter(|m| m["method"] == "notifications/message").collect();
    assert_eq!(a_logs.len(), 1, "{a_logs:?}");
    assert_eq!(a_logs[0]["params"]["data"], "A's private note");

    // Logged 200 ms after its call ended (a call's last steps): still A's, and only A's.
    assert_eq!(
        s.client.call_text("log", json!({"level": "info", "message": "A's late note", "after_ms": 200})).await,
        "will log"
    );
    let a_seen = drain(&mut s.client, Duration::from_millis(800)).await;
    let late: Vec<&Value> = a_seen.iter().filter(|m| m["method"] == "notifications/message").collect();
    assert_eq!(late.len(), 1, "{a_seen:?}");
    assert_eq!(late[0]["params"]["data"], "A's late note");
    // Logged long after (past the 2 s a log may trail its call): nobody can be named for it.
    assert_eq!(
        s.client.call_text("log", json!({"level": "info", "message": "A's stray note", "after_ms": 2500})).await,
        "will log"
    );
    let a_seen = drain(&mut s.client, Duration::from_millis(3000)).await;
    assert!(a_seen.iter().all(|m| m["method"] != "notifications/message"), "{a_seen:?}");
    let b_seen = drain(&mut b, Duration::from_millis(300)).await;
    assert!(b_seen.iter().all(|m| m["method"] != "notifications/message"), "B got A's logs: {b_seen:?}");
    assert!(s.router.stderr.text().contains("withheld a log message"), "the withholding is logged");
    assert!(!s.router.stderr.text().contains("served by"), "the clients were not of one profile");
}

/// Pool instances that announce tools/list_changed while starting change nothing clients were
/// shown: clients do not hear of it. A real change still reaches them, once.
#[tokio::test]
async fn a_starting_pool_instance_does_not_announce_list_changes() {
    let cfg = "[pools.default]\nmin = 1\nmax = 3\nmax_inflight = 1\n";
    let mut s = Setup::with_config(&["--list-changed-on-initialized", "5"], &[], Some(cfg)).await;
    s.client.initialize().await;
    drain(&mut s.client, Duration::from_millis(500)).await;
    let tools = s.client.request("tools/list", json!({})).await;
    assert!(tools["result"]["tools"].is_array(), "{tools}");

    // Two slow calls hold instance 1 and a new instance 2; the echo needs instance 3.
    let slow: Vec<Value> = vec![
        s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 1500}})).await,
        s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 1500}})).await,
    ];
    assert_eq!(s.client.call_text("echo", json!({"text": "x"})).await, "x");
    for id in &slow {
        s.client.wait_response(id).await;
    }
    let seen = drain(&mut s.client, Duration::from_millis(500)).await;
    let notes =
        s.client.buffered().iter().chain(&seen).filter(|m| m["method"] == "notifications/tools/list_changed").count();
    assert_eq!(notes, 0, "start-up list_changed reached the client: {seen:?}");
    let pids = s.router.stderr.text().matches("instance ready").count();
    assert!(pids >= 2, "the test needs a second instance to start:\n{}", s.router.stderr.text());

    // A real change: one notice.
    s.client.call_text("change_tools", json!({"add": "fresh"})).await;
    s.client.recv_notification("notifications/tools/list_changed").await;
}

/// A pool instance starting up asks for roots/list: switchyard answers it from the roots the
/// client gave, and a client's roots/list_changed refreshes them.
#[tokio::test]
async fn a_starting_instance_gets_the_clients_roots_from_switchyard() {
    let dir = temp_dir();
    let journal = journal_in(&dir);
    let cfg = "[pools.default]\nmin = 1\nmax = 2\nmax_inflight = 1\n";
    let mut s = Setup::with_config(&["--roots-on-initialized", "--journal", &journal], &[], Some(cfg)).await;
    // The client answers switchyard's roots/list with these (the server's own is answered
    // from them).
    s.client.roots = Some(json!({"roots": [{"uri": "file:///a", "name": "a"}]}));
    s.client.initialize().await;

    // Instance 1 is busy: the echo starts instance 2, which asks for roots at once.
    let slow = s.client.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 1500}})).await;
    assert_eq!(s.client.call_text("echo", json!({"text": "x"})).await, "x");
    let entries = wait_journal(&journal, Duration::from_secs(8), |e| events(e, "roots").count() == 2).await;
    let second: Vec<&Value> = events(&entries, "roots").collect();
    assert_ne!(second[0]["pid"], second[1]["pid"]);
    assert_eq!(second[1]["response"]["result"]["roots"][0]["uri"], "file:///a", "{}", second[1]);
    s.client.wait_response(&slow).await;
    let seen = drain(&mut s.client, Duration::from_millis(300)).await;
    assert!(
        s.client.buffered().iter().chain(&seen).all(|m| !is_server_request(m, "roots/list")),
        "the client was asked again: {seen:?}"
    );

    // The client's roots change: switchyard asks it, then servers get the new roots from it.
    s.client.roots = Some(json!({"roots": [{"uri": "file:///a", "name": "a"}, {"uri": "file:///b", "name": "b"}]}));
    s.client.notify("notifications/roots/list_changed", json!({})).await;
    let listed = s.client.call_text("roots", json!({})).await;
    assert!(listed.contains("file:///b"), "{listed}");
    let seen = drain(&mut s.client, Duration::from_millis(300)).await;
    assert!(seen.iter().all(|m| !is_server_request(m, "roots/list")), "{seen:?}");
}

/// switchyard answers roots/list from what it keeps only with the roots of the session the
/// request belongs to: session B's call never gets session A's roots.
#[tokio::test]
async fn one_sessions_roots_never_answer_for_another_session() {
    let dir = temp_dir();
    let sock = dir.path().join("o.sock");
    let mut s = Setup::new(&["--roots-on-initialized"], &["--listen", sock.to_str().unwrap()]).await;
    // Each client answers switchyard's roots/list (and so the server's) with its own roots.
    s.client.roots = Some(json!({"roots": [{"uri": "file:///only-a", "name": "a"}]}));
    s.client.initialize().await;
    let (_bp, mut b) = connect(&sock).await;
    b.roots = Some(json!({"roots": [{"uri": "file:///only-b", "name": "b"}]}));
    b.initialize().await;

    let call = b.send_request("tools/call", json!({"name": "roots", "arguments": {}})).await;
    let listed = tool_text(&b.wait_response(&call).await).to_string();
    assert!(listed.contains("only-b") && !listed.contains("only-a"), "{listed}");
    // And A's own call gets A's roots from switchyard, without asking A again.
    let listed = s.client.call_text("roots", json!({})).await;
    assert!(listed.contains("only-a") && !listed.contains("only-b"), "{listed}");
}

/// A URL-mode elicitation's completion notice goes to the session that was asked, not to every
/// session sharing the instance.
#[tokio::test]
async fn an_elicitation_completion_goes_only_to_the_session_asked() {
    let dir = temp_dir();
    let sock = dir.path().join("e.sock");
    let mut s = Setup::new(&[], &["--listen", sock.to_str().unwrap()]).await;
    s.client.initialize().await;
    let (_bp, mut b) = connect(&sock).await;
    b.initialize().await;

    let call = s
        .client
        .send_request(
            "tools/call",
            json!({"name": "elicit", "arguments": {"message": "sign in", "url": "https://x.test/a"}}),
        )
        .await;
    let req = s.client.recv_request("elicitation/create").await;
    s.client.respond(req["id"].clone(), json!({"action": "accept"})).await;
    let done = s.client.recv_notification("notifications/elicitation/complete").await;
    assert_eq!(done["params"]["elicitationId"], req["params"]["elicitationId"]);
    s.client.wait_response(&call).await;
    let b_seen = drain(&mut b, Duration::from_millis(400)).await;
    assert!(
        b_seen.iter().all(|m| m["method"] != "notifications/elicitation/complete"),
        "B heard of A's elicitation: {b_seen:?}"
    );
}

/// A client that declared no capabilities is never asked for sampling, elicitation or roots:
/// switchyard refuses the server's request with an error naming the missing capability (MCP
/// lets a server ask only for what the client declared), while a client that declared them
/// on the same instance is still asked.
#[tokio::test]
async fn a_server_request_never_reaches_a_client_that_lacks_its_capability() {
    let dir = temp_dir();
    let sock = dir.path().join("c.sock");
    let mut s = Setup::new(&[], &["--listen", sock.to_str().unwrap()]).await;
    s.client.initialize().await;
    let (_bp, mut b) = connect(&sock).await;
    let init = b
        .request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bare", "version": "0"}}),
        )
        .await;
    assert!(init["result"].is_object(), "{init}");
    b.notify("notifications/initialized", json!({})).await;

    for (tool, method, capability) in [
        ("sample", "sampling/createMessage", "sampling"),
        ("elicit", "elicitation/create", "elicitation"),
        ("roots", "roots/list", "roots"),
    ] {
        let call = b.send_request("tools/call", json!({"name": tool, "arguments": {"message": "m"}})).await;
        // Whichever comes first: the call's answer, or (the defect) the server's request.
        let first = b.recv_until(|m| m["id"] == call || is_server_request(m, method)).await;
        assert!(!is_server_request(&first, method), "B was asked for {method} without declaring {capability}");
        assert_eq!(first["result"]["isError"], true, "{first}");
        let why = tool_text(&first);
        assert!(why.contains(method) && why.contains(&format!("`{capability}`")), "{why}");
    }

    // The client that declared sampling is still asked.
    let call = s.client.send_request("tools/call", json!({"name": "sample", "arguments": {"prompt": "A's"}})).await;
    let req = s.client.recv_request("sampling/createMessage").await;
    s.client
        .respond(
            req["id"].clone(),
            json!({"role": "assistant", "content": {"type": "text", "text": "for A"}, "model": "m"}),
        )
        .await;
    assert!(tool_text(&s.client.wait_response(&call).await).contains("for A"));
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

/// A client that declares roots but does not answer switchyard's roots/list (or answers it
/// with an error) is never served by instances set up for another client's roots. Such clients
/// share one set of instances among themselves (a burst of them must not start a server each,
/// kept for minutes: that once exhausted the daemon's descriptors), and it stops as soon as the
/// last of them leaves.
#[tokio::test]
async fn clients_that_do_not_say_their_roots_share_instances_that_go_with_them() {
    let dir = temp_dir();
    let sock = dir.path().join("n.sock");
    let mut s = Setup::new(&[], &["--listen", sock.to_str().unwrap()]).await;
    s.client.roots = Some(json!({"roots": [{"uri": "file:///only-a", "name": "a"}]}));
    s.client.initialize().await;
    let pid_a = fixture_pid(&mut s.client).await;
    let (bp, mut b) = connect(&sock).await;
    let (cp, mut c) = connect(&sock).await;
    b.roots = None;
    c.roots = None;
    let (_, _) = tokio::join!(b.initialize(), c.initialize());
    let (pid_b, pid_c) = tokio::join!(fixture_pid(&mut b), fixture_pid(&mut c));
    assert_ne!(pid_a, pid_b, "a client whose roots are unknown was served by another client's instance");
    assert_eq!(pid_b, pid_c, "two clients whose roots are unknown each got a server of their own");
    assert_eq!(fixture_pid(&mut s.client).await, pid_a);
    drop((b, c, bp, cp));
    assert!(
        wait_gone(pid_b, Duration::from_secs(10)).await,
        "the instance of clients whose roots are unknown outlived them"
    );
    assert_eq!(fixture_pid(&mut s.client).await, pid_a, "the known client's instance went too");
}

/// A client that declares roots, never says them, and leaves before switchyard stops waiting
/// for them (2 s) gets nothing started for it after it left: no instance is left behind.
#[tokio::test]
async fn a_client_that_leaves_while_its_roots_are_awaited_leaves_no_instance() {
    let dir = temp_dir();
    let sock = dir.path().join("r.sock");
    let mut s = Setup::new(&[], &["--listen", sock.to_str().unwrap()]).await;
    s.client.roots = Some(json!({"roots": [{"uri": "file:///only-a", "name": "a"}]}));
    s.client.initialize().await;
    fixture_pid(&mut s.client).await;
    let (bp, mut b) = connect(&sock).await;
    b.roots = None;
    b.initialize().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop((b, bp));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let log = s.router.stderr.text();
    assert!(!log.contains("~2 started"), "an instance was started for a client that had left:\n{log}");
}

/// A client answers a sampling request of its own call and gets the tool's result.
async fn sample_through(c: &mut Client, prompt: &str) -> Value {
    let id = c.send_request("tools/call", json!({"name": "sample", "arguments": {"prompt": prompt}})).await;
    let req = c.recv_request("sampling/createMessage").await;
    let answer =
        json!({"role": "assistant", "content": {"type": "text", "text": format!("sampled {prompt}")}, "model": "m"});
    c.respond(req["id"].clone(), answer).await;
    c.wait_response(&id).await
}

/// Two clients of one profile: once the server has asked a client for sampling, a call of one
/// client does not share an instance with the other's call in flight (while the pool can start
/// one), so its sampling request names one client and reaches it, instead of being refused
/// because calls of two sessions were on the instance.
#[tokio::test]
async fn sampling_reaches_its_client_while_another_client_s_call_is_in_flight() {
    let (mut s, _keep, mut b) = two_clients_of_one_profile(Some("[pools.default]\nmax = 2\n")).await;
    // The server asks a client for the first time: switchyard learns that it does.
    let first = sample_through(&mut s.client, "one").await;
    assert!(tool_text(&first).contains("sampled one"), "{first}");
    // B's long call is in flight when A's call asks for sampling.
    let long = b.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 2000}})).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = sample_through(&mut s.client, "two").await;
    eprintln!("DEBUG {}", s.router.stderr.text());
    assert!(tool_text(&second).contains("sampled two"), "refused or misrouted: {second}");
    assert!(b.wait_response(&long).await["result"].is_object());
    assert!(!s.router.stderr.text().contains("served by"), "the clients were not of one profile");
    assert!(
        !b.buffered().iter().any(|m| m["method"] == "sampling/createMessage"),
        "the other client got a sampling request: {:?}",
        b.buffered()
    );
}
