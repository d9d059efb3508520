//! End-to-end tests of policy plugins in the real binary: annotation overrides with enforced
//! safety (issue 4, scenario 2), rejection, tools/list_changed, and hot reload under load.

mod harness;
mod npm_setup;
mod setup;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::*;
use serde_json::{Value, json};
use setup::*;

fn example(name: &str) -> PathBuf {
    Path::new(env!("SWITCHYARD_EXAMPLE_PLUGINS")).join(name)
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
    let entries = harness::journal(&journal_file);
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
        if (r["error"]["code"] == -32004) == refused {
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
    let mut s = Setup::start(&[], &[], Some(cfg), &[]).await;
    s.client.initialize().await;
    let pid = fixture_pid(&mut s.client).await;
    let plugins = s.plugins_dir();
    // Rename into place, the way editors and build tools publish files.
    let staged = s.dir.path().join("guard.wasm.tmp");
    std::fs::copy(example("guard.wasm"), &staged).unwrap();
    std::fs::rename(&staged, plugins.join("guard.wasm")).unwrap();
    let started = Instant::now();
    poll_read(&mut s.client, true).await;
    eprintln!("guard live after {:?}", started.elapsed());
    let rejected = s.client.call_tool("crash", json!({})).await;
    assert_eq!(rejected["error"]["code"], -32004, "{rejected}");
    let msg = rejected["error"]["message"].as_str().unwrap();
    assert!(msg.contains("guard") && msg.contains("not allowed here"), "{msg}");
    assert!(pid_alive(pid), "a rejected call must never reach the server");
    assert_eq!(s.client.call_text("echo", json!({"text": "fine"})).await, "fine");
    // Deleting the file takes the guard away again.
    std::fs::remove_file(plugins.join("guard.wasm")).unwrap();
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
"#;
    let mut s = Setup::start(&[], &[], Some(cfg), &[&example("template.wasm")]).await;
    s.client.initialize().await;
    let before = s.client.request("tools/list", json!({})).await;
    assert!(tool(&before, "write")["annotations"].get("readOnlyHint").is_none());
    std::fs::copy(example("hints.wasm"), s.plugins_dir().join("hints.wasm")).unwrap();
    let note = s.client.recv_notification("notifications/tools/list_changed").await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
    let after = s.client.request("tools/list", json!({})).await;
    assert_eq!(tool(&after, "write")["annotations"]["readOnlyHint"], true);
    // A plugin that changes no annotation does not make clients re-fetch.
    std::fs::copy(example("timeouts.wasm"), s.plugins_dir().join("timeouts.wasm")).unwrap();
    let quiet = drain(&mut s.client, Duration::from_millis(1500)).await;
    assert!(quiet.iter().all(|m| m["method"] != "notifications/tools/list_changed"), "{quiet:?}");
}

#[tokio::test]
async fn replacing_plugins_under_load_loses_and_fails_no_call() {
    let mut s = Setup::start(&[], &[], Some(FIXTURE_SAFETY), &[&example("hints.wasm"), &example("fs-keys.wasm")]).await;
    s.client.initialize().await;
    let plugins = s.plugins_dir();
    let swapper = tokio::spawn(async move {
        for round in 0..6 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let staged = plugins.join(".hints.wasm.new");
            std::fs::copy(example("hints.wasm"), &staged).unwrap();
            std::fs::rename(&staged, plugins.join("hints.wasm")).unwrap();
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
    let entries = harness::journal(&journal_file);
    let attempts = received(&entries, "tools/call").filter(|m| m["params"]["name"] == "hang").count();
    assert_eq!(attempts, 3, "attempts seen by the server: {entries:?}");
    let extra = drain(&mut s.client, Duration::from_millis(300)).await;
    assert!(extra.iter().all(|m| !is_response(m)), "{extra:?}");
}

/// Scenario 2 against the real @modelcontextprotocol/server-filesystem: hints marks its writes
/// read-only (a client would now run them in parallel), fs-keys keys them by path, and ten
/// concurrent read-modify-write edits of one file all survive.
#[tokio::test]
async fn server_filesystem_writes_marked_read_only_stay_serialised_per_file() {
    npm_setup::ensure_npm();
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
    let entry = npm_setup::filesystem_entry();
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
