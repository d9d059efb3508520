//! End-to-end tests of policy plugins in the real binary: annotation overrides with enforced
//! safety, rejection, tools/list_changed, hot reload under load, plugins that print or panic,
//! configured plugins that cannot run, and a hostile plugin that must not stall other sessions.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::setup::*;
use serde_json::{Value, json};
use switchyard_testkit::daemon::example;
use switchyard_testkit::*;

fn fixture_plugin(name: &str) -> PathBuf {
    switchyard_testkit::broken_plugins().join(name)
}

/// hints marks the fixture's write/read read-only (so clients would run them in parallel);
/// fs-keys, after it in the chain, keys writes by path so that promise stays safe.
const FIXTURE_SAFETY: &str = r#"
[[plugins]]
file = "hints.wasm"
priority = 10
config = { tools = { "write" = { readOnlyHint = true }, "read" = { readOnlyHint = true } } }

[[plugins]]
file = "fs-keys.wasm"
priority = 5
config = { writes = ["write"], reads = ["read"], path_args = ["path"] }
"#;

fn tool<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap()
}

#[tokio::test]
async fn overridden_annotations_are_enforced_by_keyed_gates() {
    let dir = temp_dir();
    let journal_file = journal_in(&dir);
    let mut s = Setup::start(
        &["--journal", &journal_file],
        &[],
        Some(FIXTURE_SAFETY),
        &[&example("hints.wasm"), &example("fs-keys.wasm")],
    )
    .await;
    s.client.initialize().await;
    let list = s.client.request("tools/list", json!({})).await;
    assert_eq!(tool(&list, "write")["annotations"]["readOnlyHint"], true, "{list}");
    // What the server declared besides is kept.
    assert_eq!(tool(&list, "write")["annotations"]["destructiveHint"], false);
    assert_eq!(tool(&list, "read")["annotations"]["readOnlyHint"], true);

    let started = Instant::now();
    let mut ids = Vec::new();
    for n in 1..=3 {
        let args = json!({"path": "/same/./file", "text": format!("v{n}"), "ms": 300});
        ids.push(s.client.send_request("tools/call", json!({"name": "write", "arguments": args})).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let other = s
        .client
        .send_request("tools/call", json!({"name": "write", "arguments": {"path": "/other", "text": "o", "ms": 300}}))
        .await;
    for id in ids.iter().chain([&other]) {
        assert!(s.client.wait_response(id).await.get("result").is_some());
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(880), "same-path writes overlapped: {took:?}");
    assert!(took < Duration::from_millis(1150), "the other path waited for them: {took:?}");
    // One after another, in arrival order: the last write wins.
    assert_eq!(s.client.call_text("read", json!({"path": "/same/./file"})).await, "v3");
    let entries = switchyard_testkit::journal(&journal_file);
    let same: Vec<&str> = entries
        .iter()
        .filter(|e| e["path"].as_str().is_some_and(|p| p.starts_with("/same")))
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert_eq!(same, ["write_start", "write_end"].repeat(3), "{same:?}");
}

/// Calls `read` until it is refused (`refused = true`) or served, within three seconds.
async fn poll_read(c: &mut Client, refused: bool) -> Value {
    let started = Instant::now();
    loop {
        let r = c.call_tool("read", json!({"path": "/x"})).await;
        if is_refusal(&r) == refused {
            return r;
        }
        assert!(started.elapsed() < Duration::from_secs(3), "the plugin change did not take effect: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn guard_rejects_with_a_reason_and_hot_reload_is_live_within_a_second() {
    let cfg = r#"
[[plugins]]
file = "guard.wasm"
config = { deny = { "crash" = "crashing the server is not allowed here", "read" = "reads are off" } }
"#;
    // A configured plugin must exist at start: the trap fixture (it accepts any config and
    // refuses nothing asked here) stands in for the guard until the real one is dropped in.
    let stand_in = fixture_plugin("trap.wasm");
    let plugins_dir = temp_dir();
    std::fs::copy(&stand_in, plugins_dir.path().join("guard.wasm")).unwrap();
    let mut s = Setup::start(&[], &[], Some(cfg), &[&plugins_dir.path().join("guard.wasm")]).await;
    s.client.initialize().await;
    let pid = fixture_pid(&mut s.client).await;
    let plugins = s.plugins_dir();
    poll_read(&mut s.client, false).await;
    // Rename into place, the way editors and build tools publish files.
    install_plugin(&plugins, &example("guard.wasm"), "guard.wasm");
    let started = Instant::now();
    poll_read(&mut s.client, true).await;
    eprintln!("guard live after {:?}", started.elapsed());
    let rejected = s.client.call_tool("crash", json!({})).await;
    let msg = refusal_text(&rejected);
    assert!(msg.contains("`guard.wasm`") && msg.contains("Reason: crashing the server is not allowed here."), "{msg}");
    assert!(pid_alive(pid), "a rejected call must never reach the server");
    assert_eq!(s.client.call_text("echo", json!({"text": "fine"})).await, "fine");
    // Deleting the file of a configured guard does not take it away: a guard must not fail
    // open because a file went missing. The log says why it stays.
    std::fs::remove_file(plugins.join("guard.wasm")).unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while !s.router.stderr.text().contains("stays in force") {
        assert!(Instant::now() < end, "the removal was not noticed:\n{}", s.router.stderr.text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(is_refusal(&s.client.call_tool("read", json!({"path": "/x"})).await));
    // Replacing it does.
    install_plugin(&plugins, &stand_in, "guard.wasm");
    poll_read(&mut s.client, false).await;
    let crashed = s.client.call_tool("crash", json!({})).await;
    assert_eq!(crashed["error"]["code"], -32003, "the call reached the server this time: {crashed}");
}

#[tokio::test]
async fn clients_are_told_when_plugins_change_annotations() {
    let cfg = r#"
[[plugins]]
file = "hints.wasm"
config = { tools = { "write" = { readOnlyHint = true } } }

[[plugins]]
file = "template.wasm"

[[plugins]]
file = "timeouts.wasm"
required = false   # dropped in later
"#;
    // The trap fixture stands in for hints (it accepts the config and changes no annotation).
    let staged = temp_dir();
    std::fs::copy(fixture_plugin("trap.wasm"), staged.path().join("hints.wasm")).unwrap();
    let mut s =
        Setup::start(&[], &[], Some(cfg), &[&example("template.wasm"), &staged.path().join("hints.wasm")]).await;
    s.client.initialize().await;
    let before = s.client.request("tools/list", json!({})).await;
    assert!(tool(&before, "write")["annotations"].get("readOnlyHint").is_none());
    install_plugin(&s.plugins_dir(), &example("hints.wasm"), "hints.wasm");
    let note = s.client.recv_notification("notifications/tools/list_changed").await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
    let after = s.client.request("tools/list", json!({})).await;
    assert_eq!(tool(&after, "write")["annotations"]["readOnlyHint"], true);
    // A plugin that changes no annotation does not make clients re-fetch.
    std::fs::copy(example("timeouts.wasm"), s.plugins_dir().join("timeouts.wasm")).unwrap();
    let quiet = drain(&mut s.client, Duration::from_millis(1500)).await;
    assert!(quiet.iter().all(|m| m["method"] != "notifications/tools/list_changed"), "{quiet:?}");
}

/// `switchyard run` with `tool-filter` hiding `write*` from client `cursor`, in front of the
/// fixture (given `fixture_args`), its client initialised as `client`.
async fn hiding_write_from_cursor(fixture_args: &[&str], client: &str) -> Setup {
    let cfg = r#"
[[plugins]]
file = "tool-filter.wasm"
config = '{"clients": {"cursor": {"hide": ["write*"]}}}'
"#;
    let mut s = Setup::start(fixture_args, &[], Some(cfg), &[&example("tool-filter.wasm")]).await;
    let init =
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": client, "version": "1"}});
    assert!(s.client.request("initialize", init).await.get("result").is_some());
    s.client.notify("notifications/initialized", json!({})).await;
    s
}

/// A tool the policy hides cannot be called by giving `name` (or `arguments`) twice: parsers
/// disagree on which value counts (the server takes the last), so the request is refused before
/// any policy judges it, and never reaches the server.
#[tokio::test]
async fn a_key_given_twice_cannot_slip_a_call_past_the_policy() {
    let dir = temp_dir();
    let journal_file = journal_in(&dir);
    let mut s = hiding_write_from_cursor(&["--journal", &journal_file], "cursor").await;
    for (id, params, key) in [
        (71, r#"{"name":"read","name":"write","arguments":{"path":"/a","text":"x"}}"#, "name"),
        (
            72,
            r#"{"name":"write","arguments":{"path":"/a","text":"x"},"arguments":{"path":"/b","text":"y"}}"#,
            "arguments",
        ),
    ] {
        s.client.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)).await;
        let r = s.client.wait_response(&json!(id)).await;
        assert_eq!(r["error"]["code"], -32600, "{r}");
        let msg = r["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(&format!("duplicate field `{key}`")) && msg.contains("send each key once"), "{msg}");
    }
    // The session goes on; the hidden tool is still refused by its plugin when asked plainly.
    let r = s.client.call_tool("write", json!({"path": "/a", "text": "x"})).await;
    assert!(refusal_text(&r).contains("not available to client `cursor`"), "{r}");
    assert_eq!(s.client.call_text("echo", json!({"text": "still here"})).await, "still here");
    let entries = switchyard_testkit::journal(&journal_file);
    assert!(!received(&entries, "tools/call").any(|m| m["params"]["name"] == "write"), "a hidden tool ran");
}

/// The 0.2 chain judges a client of `switchyard run` (stdio) by the name it gave at initialize,
/// as it judges socket and HTTP clients: `tool-filter` hides `write` from `cursor`, whose call
/// to it is refused naming the plugin, and leaves it to `claude-code`.
#[tokio::test]
async fn tool_filter_judges_a_stdio_client_by_its_name() {
    for (name, hidden) in [("cursor", true), ("claude-code", false)] {
        let mut s = hiding_write_from_cursor(&[], name).await;
        let list = s.client.request("tools/list", json!({})).await;
        let tools = list["result"]["tools"].as_array().unwrap_or_else(|| panic!("no tools: {list}"));
        let listed = |tool: &str| tools.iter().any(|t| t["name"] == tool);
        assert!(listed("read") && listed("write") != hidden, "{name}: {list}");
        let r = s.client.call_tool("write", json!({"path": "/a", "text": "x"})).await;
        if hidden {
            let msg = refusal_text(&r);
            assert!(msg.contains("`tool-filter.wasm`") && msg.contains("not available to client `cursor`"), "{msg}");
        } else {
            assert!(r.get("result").is_some(), "{name}: {r}");
        }
    }
}

/// A plugin change that alters only the resource templates clients are shown tells them so
/// (`resources/list_changed`), and says nothing of tools or prompts, which it left alone.
#[tokio::test]
async fn a_plugin_that_changes_only_resource_templates_sends_resources_list_changed() {
    let cfg = r#"
[[plugins]]
file = "tool-filter.wasm"
required = false
config = '{"clients": {"*": {"resource_templates": {"hide": ["note"]}}}}'

[[plugins]]
file = "template.wasm"
"#;
    let mut s = Setup::start(&[], &[], Some(cfg), &[&example("template.wasm")]).await;
    s.client.initialize().await;
    let templates = |list: &Value| -> Vec<String> {
        let all = list["result"]["resourceTemplates"].as_array().unwrap_or_else(|| panic!("no templates: {list}"));
        all.iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(templates(&s.client.request("resources/templates/list", json!({})).await), ["note"]);
    // The client has listed everything, so any change would be news to it.
    s.client.request("tools/list", json!({})).await;
    s.client.request("prompts/list", json!({})).await;
    install_plugin(&s.plugins_dir(), &example("tool-filter.wasm"), "tool-filter.wasm");
    s.client.recv_notification("notifications/resources/list_changed").await;
    assert!(templates(&s.client.request("resources/templates/list", json!({})).await).is_empty());
    let quiet = drain(&mut s.client, Duration::from_millis(1500)).await;
    for other in ["notifications/tools/list_changed", "notifications/prompts/list_changed"] {
        assert!(quiet.iter().all(|m| m["method"] != other), "{other} for a change of templates only: {quiet:?}");
    }
}

/// Issue 8, item 1: a plugin that prints on every call, panics in `decide` (for `read`) and
/// panics in `annotate` (for `write`) once made the host panic inside the async runtime and
/// lost the call. Under load, with on_error open and closed, every call is answered as
/// on_error says, and the plugin's output and panic message reach the log, rate-limited.
#[tokio::test]
async fn printing_and_panicking_plugins_lose_no_call() {
    for on_error in ["open", "closed"] {
        let cfg = format!(
            r#"
[[plugins]]
file = "noisy.wasm"
on_error = "{on_error}"
deadline_ms = 1000
config = {{ panic_in_decide = "read", panic_in_annotate = "write" }}
"#
        );
        let mut s = Setup::start(&[], &[], Some(&cfg), &[&fixture_plugin("noisy.wasm")]).await;
        s.client.initialize().await;
        let mut ids = Vec::new();
        for n in 0..150 {
            let id = match n % 3 {
                0 => s.client.send_request("tools/call", json!({"name": "echo", "arguments": {"text": "e"}})).await,
                1 => s.client.send_request("tools/call", json!({"name": "read", "arguments": {"path": "/x"}})).await,
                _ => s.client.send_request("tools/list", json!({})).await,
            };
            ids.push((n % 3, id));
        }
        for (kind, id) in &ids {
            let r = s.client.wait_response(id).await;
            match (kind, on_error) {
                (0, _) => assert_eq!(tool_text(&r), "e", "{on_error}: {r}"),
                (1, "open") => assert!(r.get("result").is_some(), "{on_error}: the panicking plugin is skipped: {r}"),
                (1, _) => {
                    let msg = refusal_text(&r);
                    assert!(msg.contains("`noisy.wasm`") && msg.contains("noisy panics in decide for read"), "{msg}");
                }
                _ => {
                    // annotate is advisory: a plugin that panics there is skipped for that tool.
                    assert!(tool(&r, "write")["annotations"].is_object(), "{on_error}: {r}");
                }
            }
        }
        let log = s.router.stderr.text();
        assert!(log.contains("noisy: decide echo (stdout)"), "{on_error}: plugin stdout reaches the log: {log}");
        assert!(log.contains("noisy: decide echo (stderr)"), "{on_error}");
        assert!(log.contains("noisy panics in decide for read"), "{on_error}: the panic message is logged");
        assert!(log.contains("left out of the log"), "{on_error}: plugin output is rate-limited");
        let lines = log.lines().filter(|l| l.contains("noisy: decide")).count();
        assert!(lines < 150, "{on_error}: {lines} lines of plugin output for 300 prints");
        assert!(!log.contains("Cannot start a runtime"), "{on_error}: {log}");
    }
}

/// Issue 9, item 5: session A floods calls that make a plugin loop until its deadline; session
/// B's calls are still answered promptly (before, each of A's calls held the router's only
/// thread for the whole deadline, and B waited behind all of them). Two floods, each against
/// a fresh router, with on_error open and closed: 300 calls that all loop (15 s of plugin CPU
/// if each ran: the breaker switches the plugin off), and 200 calls of which every other one
/// loops (the calls in between finish in time, so no breaker trips: 5 s of plugin CPU, which
/// session B must not wait behind).
#[tokio::test]
async fn a_looping_plugin_does_not_stall_other_sessions() {
    for on_error in ["open", "closed"] {
        for (flood, calls) in [("all spin", 300), ("every other spins", 200)] {
            let dir = temp_dir();
            let sock = dir.path().join("r.sock");
            let cfg = format!("[[plugins]]\nfile = \"spin.wasm\"\non_error = \"{on_error}\"\ndeadline_ms = 50\n");
            let args = ["--listen", sock.to_str().unwrap()];
            let mut s = Setup::start(&[], &args, Some(&cfg), &[&fixture_plugin("spin.wasm")]).await;
            s.client.initialize().await;
            let (_b_proc, mut b) = connect(&sock).await;
            b.initialize().await;
            let answered = |r: &Value| {
                // The echo itself, or (closed, while the looping plugin is switched off) a
                // rejection that says so.
                (r.get("result").is_some() && !is_refusal(r))
                    || (is_refusal(r) && tool_text(r).contains("switched off"))
            };
            let mut baseline = Duration::ZERO;
            for _ in 0..5 {
                let t = Instant::now();
                let r = b.call_tool("echo", json!({"text": "b"})).await;
                baseline = baseline.max(t.elapsed());
                assert!(answered(&r), "{r}");
            }
            let mut sent = Vec::new();
            for n in 0..calls {
                let name = if flood == "all spin" || n % 2 == 0 { "spin" } else { "echo" };
                let args = json!({"name": name, "arguments": {"text": "a"}});
                sent.push(s.client.send_request("tools/call", args).await);
            }
            let mut slowest = Duration::ZERO;
            for _ in 0..10 {
                let t = Instant::now();
                let r = b.call_tool("echo", json!({"text": "b"})).await;
                slowest = slowest.max(t.elapsed());
                assert!(answered(&r), "{on_error}, {flood}: {r}");
            }
            eprintln!("{on_error}, {flood}: session B's echo: baseline {baseline:?}, slowest {slowest:?}");
            assert!(
                slowest < baseline + Duration::from_secs(2),
                "{on_error}, {flood}: session B waited {slowest:?} (baseline {baseline:?}) behind session A"
            );
            for id in &sent {
                let r = s.client.wait_response(id).await;
                assert!(r.get("result").is_some() || r.get("error").is_some(), "{r}");
            }
            let switched_off = s.router.stderr.text().contains("plugin switched off");
            assert_eq!(switched_off, flood == "all spin", "{on_error}, {flood}: the breaker trips only for a streak");
        }
    }
}

/// Found by testing from outside: with a long deadline (8 s), one session's looping call held
/// the only plugin thread, and another session's echo waited the whole deadline behind it.
#[tokio::test]
async fn a_long_plugin_deadline_in_one_session_does_not_hold_up_another() {
    let dir = temp_dir();
    let sock = dir.path().join("r.sock");
    let cfg = "[[plugins]]\nfile = \"spin.wasm\"\ndeadline_ms = 4000\n";
    let args = ["--listen", sock.to_str().unwrap()];
    let mut s = Setup::start(&[], &args, Some(cfg), &[&fixture_plugin("spin.wasm")]).await;
    s.client.initialize().await;
    let (_b_proc, mut b) = connect(&sock).await;
    b.initialize().await;
    let spinning = s.client.send_request("tools/call", json!({"name": "spin", "arguments": {}})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let r = b.call_tool("echo", json!({"text": "b"})).await;
    let waited = t.elapsed();
    assert!(r.get("result").is_some(), "{r}");
    // The spin runs for 4 s; the echo must not wait for it (generous bound for a loaded machine).
    assert!(waited < Duration::from_millis(2500), "session B's echo waited {waited:?} behind session A's plugin call");
    let r = s.client.wait_response(&spinning).await;
    assert!(r.get("result").is_some() || r.get("error").is_some(), "{r}");
}

/// Issue 8, item 2, as issue 39 changed it: a configured plugin that cannot run never leaves
/// a guard silently off, and no longer stops the start either: every call it would judge is
/// refused, naming it and what to do, and the log has the whole error.
#[tokio::test]
async fn a_configured_plugin_that_cannot_run_refuses_the_calls_it_would_judge() {
    let missing = "[[plugins]]\nfile = \"guard.wasm\"\non_error = \"closed\"\nconfig = { deny = [\"delete_*\"] }\n";
    let typo = "[[plugins]]\nfile = \"guard.wasm\"\nconfig = { denny = [\"delete_*\"] }\n";
    let guard = example("guard.wasm");
    for (cfg, plugins, said) in
        [(missing, vec![], "does not exist"), (typo, vec![guard.as_path()], "unknown key `denny`")]
    {
        let mut s = Setup::start(&[], &[], Some(cfg), &plugins).await;
        s.client.initialize().await;
        let r = s.client.call_tool("echo", json!({"text": "x"})).await;
        let msg = refusal_text(&r);
        assert!(msg.contains("`guard.wasm`") && msg.contains(said), "{msg}");
        // The log has it too (read from the router's stderr as it comes).
        let end = Instant::now() + Duration::from_secs(5);
        while !(s.router.stderr.text().contains("guard.wasm") && s.router.stderr.text().contains(said)) {
            assert!(Instant::now() < end, "{}", s.router.stderr.text());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What a client is told of a plugin file that is not WebAssembly: one sentence naming the
/// file, what is wrong and the fix, not the file's bytes and the log's lines.
fn assert_one_sentence(msg: &str, file: &std::path::Path, limit: usize) {
    let named = format!("plugin {} is not WebAssembly", file.display());
    assert!(msg.contains(&named) && msg.contains("`switchyard plugin build`"), "{msg}");
    assert!(msg.len() <= limit, "{} bytes, over {limit}: {msg}", msg.len());
    assert!(msg.is_ascii() && !msg.contains('\n'), "the file's bytes or several lines: {msg:?}");
    assert!(!msg.contains(" ERROR ") && !msg.contains(" INFO "), "log lines: {msg}");
}

/// Issue 43: a broken plugin's error carried the file's raw bytes (and, through the daemon,
/// log lines with their timestamps) in a 1.3 KB JSON-RPC message. A closed plugin that does
/// not load rejects calls with one sentence; so does a daemon for a required one; the log keeps
/// the detail.
#[tokio::test]
async fn a_broken_plugin_is_one_sentence_to_the_client() {
    let garbage: Vec<u8> = (0..300u32).map(|n| (n.wrapping_mul(151) % 251) as u8 | 0x80).collect();
    let staged = temp_dir();
    std::fs::write(staged.path().join("garbage.wasm"), &garbage).unwrap();

    let cfg = "[[plugins]]\nfile = \"garbage.wasm\"\non_error = \"closed\"\nrequired = false\n";
    let mut s = Setup::start(&[], &[], Some(cfg), &[&staged.path().join("garbage.wasm")]).await;
    s.client.initialize().await;
    let r = s.client.call_tool("echo", json!({"text": "x"})).await;
    let file = s.plugins_dir().join("garbage.wasm");
    // The sentence, in the result that says which plugin refused the call.
    assert_one_sentence(refusal_text(&r), &file, 500);
    assert!(s.router.stderr.text().contains("it starts with the bytes "), "the log lost the detail");

    let home = switchyard_testkit::daemon::Home::new();
    let plugins = home.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::write(plugins.join("garbage.wasm"), &garbage).unwrap();
    home.write_config(&format!("{}\n[[plugins]]\nfile = \"garbage.wasm\"\n", home.fixture("fx", &[])));
    let (_p, mut c) = home.client("fx").await;
    let r = c.call_tool("echo", json!({"text": "x"})).await;
    assert_one_sentence(refusal_text(&r), &plugins.join("garbage.wasm"), 500);
    assert!(home.logs().contains("it starts with the bytes "), "the daemon's log lost the detail");
}

#[tokio::test]
async fn replacing_plugins_under_load_loses_and_fails_no_call() {
    // broken.wasm, dropped in broken, has an entry: a file without one would not even be loaded.
    let cfg = format!("{FIXTURE_SAFETY}\n[[plugins]]\nfile = \"broken.wasm\"\nrequired = false\n");
    let mut s = Setup::start(&[], &[], Some(&cfg), &[&example("hints.wasm"), &example("fs-keys.wasm")]).await;
    s.client.initialize().await;
    let plugins = s.plugins_dir();
    let swapper = tokio::spawn(async move {
        for round in 0..6 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            install_plugin(&plugins, &example("hints.wasm"), "hints.wasm");
            if round == 2 {
                // A broken file must not disturb anything either.
                std::fs::write(plugins.join("broken.wasm"), b"not a component").unwrap();
            }
            if round % 2 == 1 {
                std::fs::copy(example("fs-keys.wasm"), plugins.join("fs-keys.wasm")).unwrap();
            }
        }
    });
    let mut sent = 0;
    let mut in_flight = std::collections::VecDeque::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2200) {
        while in_flight.len() < 16 {
            let (name, args) = if sent % 3 == 0 {
                ("write", json!({"path": format!("/p{}", sent % 4), "text": "x"}))
            } else {
                ("echo", json!({"text": format!("n{sent}")}))
            };
            in_flight.push_back(s.client.send_request("tools/call", json!({"name": name, "arguments": args})).await);
            sent += 1;
        }
        let id = in_flight.pop_front().unwrap();
        let r = s.client.wait_response(&id).await;
        assert!(r.get("result").is_some() && r["result"]["isError"] != true, "call failed during reload: {r}");
    }
    for id in in_flight {
        let r = s.client.wait_response(&id).await;
        assert!(r.get("result").is_some(), "call failed during reload: {r}");
    }
    swapper.await.unwrap();
    assert!(sent > 100, "too little load to mean anything: {sent}");
    let log = s.router.stderr.text();
    assert!(log.contains("broken.wasm"), "a broken file is named in the log: {log}");
}

#[tokio::test]
async fn decisions_are_clamped_to_the_limits_and_retries_follow_the_policy() {
    let dir = temp_dir();
    let journal_file = journal_in(&dir);
    let cfg = r#"
[limits]
call_timeout_ms = 300
max_call_timeout_ms = 800
max_retries = 2

[[plugins]]
file = "timeouts.wasm"
config = { tools = { "write" = { timeout_ms = 600000 }, "hang" = { timeout_ms = 200, retry = { attempts = 9, backoff_ms = 10 } } } }
"#;
    let mut s = Setup::start(&["--journal", &journal_file], &[], Some(cfg), &[&example("timeouts.wasm")]).await;
    s.client.initialize().await;
    // Ten minutes asked, 0.8 s allowed (and `write` is not retried: it is not idempotent).
    let started = Instant::now();
    let r = s.client.call_tool("write", json!({"path": "/w", "text": "t", "ms": 1500})).await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("0.8 s"), "{r}");
    assert!(started.elapsed() < Duration::from_millis(1400));
    assert!(s.router.stderr.text().contains("clamped"), "clamps are logged");
    // Nine retries asked, two allowed: three attempts reach the server, one error reaches the client.
    let r = s.client.call_tool("hang", json!({})).await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    // The client waited for every attempt: the error says so.
    assert!(r["error"]["message"].as_str().unwrap().contains("in all (3 attempts)"), "{r}");
    assert_eq!(r["error"]["data"]["attempts"], 3, "{r}");
    let entries = switchyard_testkit::journal(&journal_file);
    let attempts = received(&entries, "tools/call").filter(|m| m["params"]["name"] == "hang").count();
    assert_eq!(attempts, 3, "attempts seen by the server: {entries:?}");
    let extra = drain(&mut s.client, Duration::from_millis(300)).await;
    assert!(extra.iter().all(|m| !is_response(m)), "{extra:?}");
}

/// Scenario 2 against the real @modelcontextprotocol/server-filesystem: hints marks its writes
/// read-only (a client would now run them in parallel), fs-keys keys them by path, and ten
/// concurrent read-modify-write edits of one file all survive.
#[cfg(feature = "interop")]
#[tokio::test]
async fn server_filesystem_writes_marked_read_only_stay_serialised_per_file() {
    crate::npm_setup::ensure_npm();
    let work = temp_dir();
    let file = work.path().join("notes.txt");
    let lines: Vec<String> = (0..10).map(|i| format!("slot-{i}")).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let cfg = r#"
[[plugins]]
file = "hints.wasm"
priority = 10
config = { tools = { "write_file" = { readOnlyHint = true }, "edit_file" = { readOnlyHint = true } } }

[[plugins]]
file = "fs-keys.wasm"
priority = 5
"#;
    let entry = crate::npm_setup::filesystem_entry();
    let server = ["node", entry.to_str().unwrap(), work.path().to_str().unwrap()].map(String::from);
    let plugins = [example("hints.wasm"), example("fs-keys.wasm")];
    let mut s = Setup::in_front_of(&server, &[], Some(cfg), &[&plugins[0], &plugins[1]]).await;
    let c = &mut s.client;
    // No roots capability: the server keeps the directory it was started with.
    let init = c.request("initialize", init_params(json!({}))).await;
    assert!(init.get("result").is_some(), "{init}");
    c.notify("notifications/initialized", json!({})).await;
    let list = c.request("tools/list", json!({})).await;
    assert_eq!(tool(&list, "edit_file")["annotations"]["readOnlyHint"], true, "hints applied");
    assert_eq!(tool(&list, "read_text_file")["annotations"]["readOnlyHint"], true, "the server's own hint kept");

    let path = file.to_str().unwrap().to_string();
    let mut ids = Vec::new();
    for i in 0..10 {
        let args =
            json!({"path": path, "edits": [{"oldText": format!("slot-{i}\n"), "newText": format!("done-{i}\n")}]});
        ids.push(c.send_request("tools/call", json!({"name": "edit_file", "arguments": args})).await);
    }
    for id in &ids {
        let r = c.wait_response(id).await;
        assert!(r.get("result").is_some() && r["result"]["isError"] != true, "{r}");
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let want: Vec<String> = (0..10).map(|i| format!("done-{i}")).collect();
    assert_eq!(text, want.join("\n") + "\n", "an edit was lost: writes to one file overlapped");
    // Reads of the same file are not held back by the keyed gate.
    let r = c.call_text("read_text_file", json!({"path": path})).await;
    assert!(r.contains("done-9"));
}

/// Issue 8, item 17: without --plugins or a config file, the plugins directory follows
/// XDG_CONFIG_HOME.
#[tokio::test]
async fn the_default_plugins_directory_follows_xdg_config_home() {
    let dir = temp_dir();
    let xdg = dir.path().join("xdg");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut argv = vec!["--".to_string()];
    argv.extend(Proc::fixture_cmd(&[]));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let envs = [("XDG_CONFIG_HOME", xdg.to_str().unwrap()), ("HOME", home.to_str().unwrap())];
    let mut router = Proc::router_env(&argv, &envs);
    let mut client = router.client();
    client.initialize().await;
    let wanted = xdg.join("switchyard/plugins");
    assert!(wanted.is_dir(), "{} was not created", wanted.display());
    assert!(!home.join(".config").exists(), "HOME/.config is used only without XDG_CONFIG_HOME");
    // It is the directory in force: a guard dropped there is seen (without an entry to give it
    // its config it is not applied, and the log says so).
    install_plugin(&wanted, &example("guard.wasm"), "guard.wasm");
    let started = Instant::now();
    loop {
        if router.stderr.text().contains("guard.wasm has no [[plugins]] entry") {
            break;
        }
        // Generous: the watcher's event can come late on a machine busy with builds.
        assert!(started.elapsed() < Duration::from_secs(30), "{}", router.stderr.text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(router.stderr.text().contains(&wanted.display().to_string()));
}

/// Issue 8, items 15 and 17: `plugin check` through the binary: a file that is not wasm is one
/// line of error; an unknown `--call` field is refused; a panic's message is shown; and
/// `plugin examples` writes the template the docs list.
#[tokio::test]
async fn plugin_check_and_examples_through_the_binary() {
    let dir = temp_dir();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin()).arg("plugin").args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let notes = dir.path().join("notes.wasm");
    std::fs::write(&notes, "just some text\n".repeat(20)).unwrap();
    let (ok, _, err) = run(&["check", notes.to_str().unwrap()]);
    assert!(!ok && err.trim().lines().count() == 1 && err.contains("not WebAssembly"), "{err}");

    let hints = example("hints.wasm");
    let (ok, _, err) = run(&["check", hints.to_str().unwrap(), "--call", r#"{"declared": {"readOnlyHint": true}}"#]);
    assert!(!ok && err.contains("unknown field `declared`"), "{err}");
    let (_, help, _) = run(&["check", "--help"]);
    assert!(help.contains("annotations") && !help.contains("\"declared\""), "{help}");

    let noisy = fixture_plugin("noisy.wasm");
    let args = ["check", noisy.to_str().unwrap(), "--config", r#"{"panic_in_decide": "example"}"#];
    let (ok, out, err) = run(&args);
    assert!(!ok, "{out}");
    assert!(out.contains("plugin stdout: noisy: decide example (stdout)"), "{out}");
    assert!(err.contains("noisy panics in decide for example"), "{err}");

    let cfg = dir.path().join("switchyard.toml");
    std::fs::write(&cfg, "[[plugins]]\nfile = \"guard.wasm\"\nconfig = { deny = [\"example\"] }\n").unwrap();
    let guard = example("guard.wasm");
    let (ok, out, err) = run(&["check", guard.to_str().unwrap(), "--config-file", cfg.to_str().unwrap()]);
    assert!(ok && out.contains("reject: tool `example` is blocked by policy"), "{out}{err}");

    // A path that never ends is refused at the size limit rather than read until memory runs out.
    let (ok, _, err) = run(&["check", "/dev/zero"]);
    assert!(!ok && err.contains("/dev/zero is over 64 MiB"), "{err}");

    let ex = dir.path().join("examples");
    let (ok, out, _) = run(&["examples", ex.to_str().unwrap()]);
    assert!(ok && out.contains("template.wasm") && ex.join("template.wasm").is_file(), "{out}");
    for v2 in ["tool-filter.wasm", "rate-limit.wasm", "placement.wasm"] {
        assert!(ex.join(v2).is_file(), "{v2} is not among the examples the binary carries: {out}");
        let (ok, out, err) = run(&["check", ex.join(v2).to_str().unwrap(), "--call", r#"{"client": "cursor"}"#]);
        assert!(ok && out.contains("contract: switchyard:policy@0.2.0"), "{out}{err}");
    }
    // The template is what `plugin new --lang rust` writes: of 0.3, its content hooks declared
    // (and continuing everything).
    let template = ex.join("template.wasm");
    let (ok, out, err) = run(&["check", template.to_str().unwrap(), "--call", r#"{"client": "cursor"}"#]);
    assert!(ok && out.contains("contract: switchyard:policy@0.3.0"), "{out}{err}");
    assert!(out.contains("hooks:    on-request and on-result for methods [tools/call]"), "{out}{err}");
}

/// Waits until the router's log contains `text`.
async fn log_shows(s: &Setup, text: &str) {
    let started = Instant::now();
    while !s.router.stderr.text().contains(text) {
        assert!(started.elapsed() < Duration::from_secs(5), "no `{text}` in the log: {}", s.router.stderr.text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 9, item 4: hot reload goes on after the plugins directory is deleted and created
/// again, and after it is replaced by another directory renamed into its place.
#[tokio::test]
async fn hot_reload_goes_on_after_the_plugins_directory_is_deleted_or_replaced() {
    let optional = |file: &str| format!("[[plugins]]\nfile = \"{file}\"\nrequired = false\n");
    let cfg: String = ["guard.wasm", "hints.wasm", "timeouts.wasm"].map(optional).concat();
    let mut s = Setup::start(&[], &[], Some(&cfg), &[]).await;
    s.client.initialize().await;
    let plugins = s.plugins_dir();
    std::fs::remove_dir(&plugins).unwrap();
    log_shows(&s, "disappeared").await;
    std::fs::create_dir(&plugins).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    install_plugin(&plugins, &example("guard.wasm"), "guard.wasm");
    log_shows(&s, "policy plugins in force: [guard.wasm]").await;

    let next = s.dir.path().join("next");
    std::fs::create_dir(&next).unwrap();
    std::fs::copy(example("hints.wasm"), next.join("hints.wasm")).unwrap();
    std::fs::rename(&plugins, s.dir.path().join("old")).unwrap();
    std::fs::rename(&next, &plugins).unwrap();
    log_shows(&s, "policy plugins in force: [hints.wasm]").await;
    install_plugin(&plugins, &example("timeouts.wasm"), "timeouts.wasm");
    log_shows(&s, "policy plugins in force: [hints.wasm, timeouts.wasm]").await;
    assert_eq!(s.client.call_text("echo", json!({"text": "still here"})).await, "still here");
}

/// Issue 27: `--record-calls` writes live traffic as the recorded calls `plugin test` replays,
/// with the calls' arguments only when asked (`--record-arguments`).
#[tokio::test]
async fn live_calls_are_recorded_for_plugin_test_arguments_only_when_asked() {
    for with_arguments in [false, true] {
        let dir = temp_dir();
        let file = dir.path().join("calls.jsonl");
        let file_arg = file.display().to_string();
        let mut args = vec!["--record-calls", file_arg.as_str()];
        if with_arguments {
            args.push("--record-arguments");
        }
        let mut s = Setup::new(&[], &args).await;
        s.client.initialize().await;
        s.client.request("tools/list", json!({})).await;
        assert_eq!(s.client.call_text("echo", json!({"text": "private words"})).await, "private words");
        // Written by a thread of its own: wait for the call's line.
        let end = Instant::now() + Duration::from_secs(10);
        let text = loop {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if text.contains(r#""tool":"echo""#) || Instant::now() > end {
                break text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(text.contains(r#""tool":"echo""#) && text.contains(r#""name":"echo""#), "{text}");
        assert_eq!(text.contains("private words"), with_arguments, "{text}");
        // Without plugins every answer was the pass-through: the template, whose example rule
        // is about `delete_file` alone, gives them all.
        let out = std::process::Command::new(bin())
            .args(["plugin", "test", "--plugin"])
            .arg(example("template.wasm"))
            .arg("--calls")
            .arg(&file)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && report.contains(" recorded calls match"), "{report}");
    }
}
