//! End-to-end tests of plugins in a daemon as a user lives with it (issue 39): a required
//! plugin that does not load refuses only what it would judge, and every `[[plugins]]` setting
//! is live, with no server restarted and no client reconnected; a plugin runs only with the
//! config its entry names.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_testkit::daemon::{Home, fixture_pid, leave, tool_names};
use switchyard_testkit::*;

const SLOW: Duration = Duration::from_secs(20);

/// Why a `tools/call` was refused: the message of a JSON-RPC error, or the text of a tool
/// result marked `isError`; None when it ran.
fn refusal(r: &Value) -> Option<String> {
    if let Some(m) = r["error"]["message"].as_str() {
        return Some(m.to_string());
    }
    (r["result"]["isError"] == true).then(|| r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string())
}

/// Calls `echo` until `pred` holds of its refusal (None: it ran), failing after [`SLOW`].
async fn echo_until(c: &mut Client, what: &str, pred: impl Fn(Option<&str>) -> bool) {
    let end = Instant::now() + SLOW;
    loop {
        let r = c.call_tool("echo", json!({"text": "hi"})).await;
        if pred(refusal(&r).as_deref()) {
            return;
        }
        assert!(Instant::now() < end, "timed out waiting for: {what} (last answer {r})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A required plugin whose file is garbage no longer keeps the daemon from starting: the server
/// it is not for is served, and the one it is for refuses calls with the reason (the file,
/// what is wrong, the fix) instead of running them without it. A good file is then taken
/// without a restart.
#[tokio::test]
async fn a_required_plugin_that_does_not_load_refuses_only_the_calls_it_would_judge() {
    let home = Home::new();
    let plugins = home.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(plugins.join("guard.wasm"), b"<!DOCTYPE html><html>saved a web page</html>").unwrap();
    let guard =
        "[[plugins]]\nfile = \"guard.wasm\"\nservers = [\"fs\"]\nconfig = { deny = { \"write\" = \"no writes\" } }\n";
    home.write_config(&format!("{}{}{guard}", home.fixture("fs", &[]), home.fixture("notes", &[])));

    let (n, mut notes) = home.client("notes").await;
    assert_eq!(notes.call_text("echo", json!({"text": "hi"})).await, "hi", "a server the plugin is not for");
    let (f, mut fs) = home.client("fs").await;
    let r = fs.call_tool("echo", json!({"text": "hi"})).await;
    let why = refusal(&r).unwrap_or_else(|| panic!("a call ran without the plugin its entry requires: {r}"));
    let named = format!("plugin {} is not WebAssembly", plugins.join("guard.wasm").display());
    assert!(why.contains(&named) && why.contains("`switchyard plugin build`"), "{why}");
    assert!(!why.contains("DOCTYPE"), "the file's bytes are for the log: {why}");

    // The real guard dropped in: fs runs its calls again, under the entry's config.
    let pid = home.daemon_pid().await;
    home.install_example("guard.wasm");
    echo_until(&mut fs, "the guard loaded", |r| r.is_none()).await;
    let r = fs.call_tool("write", json!({"path": "/a", "text": "x"})).await;
    assert!(refusal(&r).is_some_and(|w| w.contains("no writes")), "{r}");
    assert_eq!(home.daemon_pid().await, pid, "the same daemon");
    for (p, c) in [(n, notes), (f, fs)] {
        leave(p, c).await;
    }
    home.shutdown().await;
}

/// A plugin's `config` edited in the file changes what a connected client is shown and may
/// call: it hears `tools/list_changed`, lists again, and finds `write` hidden; its server was
/// not restarted and it did not reconnect.
#[tokio::test]
async fn a_plugin_config_edited_in_the_file_applies_to_a_connected_client() {
    let home = Home::new();
    home.install_example("tool-filter.wasm");
    let config = |hide: &str| {
        format!(
            "{}[[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = '{{\"clients\": {{\"cursor\": {{\"hide\": [\"{hide}\"]}}}}}}'\n",
            home.fixture("fs", &[])
        )
    };
    home.write_config(&config("nothing*"));
    let (p, mut cursor) = home.client_named("fs", "cursor").await;
    assert!(tool_names(&cursor.request("tools/list", json!({})).await).contains(&"write".to_string()));
    let (pid, _) = fixture_pid(&mut cursor).await;

    let saved = Instant::now();
    home.replace_config(&config("write*"));
    cursor.recv_notification("notifications/tools/list_changed").await;
    eprintln!("the saved plugin config reached the client after {:?}", saved.elapsed());
    let seen = tool_names(&cursor.request("tools/list", json!({})).await);
    assert!(!seen.contains(&"write".to_string()) && seen.contains(&"read".to_string()), "{seen:?}");
    let r = cursor.call_tool("write", json!({"path": "/a", "text": "x"})).await;
    assert!(refusal(&r).is_some_and(|w| w.contains("tool-filter.wasm") && w.contains("client `cursor`")), "{r}");
    assert_eq!(fixture_pid(&mut cursor).await.0, pid, "the server was restarted");
    let logs = home.logs();
    assert!(logs.contains("re-initialised with its changed [[plugins]] entry"), "{logs}");
    assert!(!logs.contains("takes effect when the daemon restarts"), "{logs}");
    leave(p, cursor).await;
    home.shutdown().await;
}

/// One save makes a filter stricter and adds a broken entry for another server: the stricter
/// config applies all the same (the broken entry holds back only itself and its server).
#[tokio::test]
async fn a_broken_entry_for_another_server_does_not_hold_back_a_stricter_filter() {
    let home = Home::new();
    home.install_example("tool-filter.wasm");
    let (fs, other) = (home.fixture("fs", &[]), home.fixture("other", &[]));
    let filter = |hide: &str| {
        format!(
            "[[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = '{{\"clients\": {{\"cursor\": {{\"hide\": [\"{hide}\"]}}}}}}'\n"
        )
    };
    home.write_config(&format!("{fs}{other}{}", filter("nothing*")));
    let (p, mut cursor) = home.client_named("fs", "cursor").await;
    assert!(tool_names(&cursor.request("tools/list", json!({})).await).contains(&"write".to_string()));
    let broken = "[[plugins]]\nfile = \"guard.wasm\"\nservers = [\"other\"]\nconfig = '{\"deny\": '\n";
    home.replace_config(&format!("{fs}{other}{}{broken}", filter("write*")));
    cursor.recv_notification("notifications/tools/list_changed").await;
    let seen = tool_names(&cursor.request("tools/list", json!({})).await);
    assert!(!seen.contains(&"write".to_string()), "{seen:?}");
    let r = cursor.call_tool("write", json!({"path": "/a", "text": "x"})).await;
    assert!(refusal(&r).is_some_and(|w| w.contains("tool-filter.wasm")), "{r}");
    let status = home.status_json().await;
    assert!(status["plugin_entries"].to_string().contains("guard.wasm"), "{status:#}");
    leave(p, cursor).await;
    home.shutdown().await;
}

/// A `[[plugins]]` entry added to the file applies at once: while the plugin it requires is
/// missing, the calls it would judge are refused saying so; once the file is there, it judges
/// them with the entry's config. The entry removed, calls run without it. One server instance
/// throughout.
#[tokio::test]
async fn a_plugins_entry_added_and_removed_in_the_file_applies_at_once() {
    let home = Home::new();
    std::fs::create_dir_all(home.path().join("plugins")).unwrap();
    let fs = home.fixture("fs", &[]);
    home.write_config(&fs);
    let (p, mut c) = home.client("fs").await;
    c.timeout = SLOW;
    assert_eq!(c.call_text("echo", json!({"text": "hi"})).await, "hi");
    let (pid, _) = fixture_pid(&mut c).await;

    let guard = "[[plugins]]\nfile = \"guard.wasm\"\nconfig = { deny = { \"echo\" = \"echo is off here\" } }\n";
    home.replace_config(&format!("{fs}{guard}"));
    echo_until(&mut c, "refused: the guard is missing", |r| r.is_some_and(|w| w.contains("does not exist"))).await;
    home.install_example("guard.wasm");
    echo_until(&mut c, "refused by the guard", |r| r.is_some_and(|w| w.contains("echo is off here"))).await;
    assert_eq!(fixture_pid(&mut c).await.0, pid, "what the guard allows runs on the same instance");

    home.replace_config(&fs);
    echo_until(&mut c, "echo runs again", |r| r.is_none()).await;
    assert_eq!(fixture_pid(&mut c).await.0, pid, "the server was restarted");
    leave(p, c).await;
    home.shutdown().await;
}

/// Issue 39: a tool filter dropped into the plugins directory before its entry was written ran
/// with `{}`, letting everything through. Now it is not applied (the log says which entry to
/// add) until the entry names it, and then it runs with that entry's config from its first call.
#[tokio::test]
async fn a_plugin_dropped_in_before_its_entry_runs_only_with_the_entry() {
    let home = Home::new();
    let fs = home.fixture("fs", &[]);
    home.write_config(&fs);
    let (p, mut cursor) = home.client_named("fs", "cursor").await;
    assert!(tool_names(&cursor.request("tools/list", json!({})).await).contains(&"write".to_string()));

    home.install_example("tool-filter.wasm");
    let end = Instant::now() + SLOW;
    while !home.logs().contains("tool-filter.wasm has no [[plugins]] entry, so it is not applied") {
        assert!(Instant::now() < end, "the drop was not reported:\n{}", home.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = home.status_json().await;
    assert_eq!(status["plugins"], json!([]), "a plugin without an entry is in force: {status}");

    let filter = r#"{"clients": {"cursor": {"hide": ["write*"]}}}"#;
    home.replace_config(&format!("{fs}[[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = '{filter}'\n"));
    cursor.recv_notification("notifications/tools/list_changed").await;
    let seen = tool_names(&cursor.request("tools/list", json!({})).await);
    assert!(!seen.contains(&"write".to_string()), "{seen:?}");
    let status = home.status_json().await;
    assert_eq!(status["plugins"], json!(["tool-filter.wasm"]), "{status}");
    leave(p, cursor).await;
    home.shutdown().await;
}

/// A list answered from memory while its server starts (a daemon started again) passes the same
/// policy as a live one. With a required tool filter that hides `echo` from cursor and whose file
/// is garbage (then missing) at the daemon's start, cursor's first tools/list is refused at once
/// as the live one is, naming the plugin: never the server's whole list, `echo` and all.
#[tokio::test]
async fn a_list_from_memory_is_refused_as_a_live_one_while_a_required_filter_is_broken() {
    let home = Home::new();
    home.install_example("tool-filter.wasm");
    let filter = r#"{"clients": {"cursor": {"hide": ["echo", "get-env"]}}}"#;
    let entry = format!("[[plugins]]\nfile = \"tool-filter.wasm\"\non_error = \"closed\"\nconfig = '{filter}'\n");
    // 3 s to start: a daemon started again answers the first list from memory meanwhile.
    home.write_config(&format!("{}{entry}", home.fixture("fs", &["--init-delay-ms", "3000"])));
    let (p, mut cursor) = home.client_named("fs", "cursor").await;
    let seen = tool_names(&cursor.request("tools/list", json!({})).await);
    assert!(!seen.contains(&"echo".to_string()) && seen.contains(&"read".to_string()), "{seen:?}");
    leave(p, cursor).await;
    let wasm = home.path().join("plugins").join("tool-filter.wasm");
    for broken in ["garbage", "missing"] {
        home.stop().await;
        home.wait_no_processes(SLOW).await;
        match broken {
            "garbage" => std::fs::write(&wasm, b"<!DOCTYPE html><html>saved a web page</html>").unwrap(),
            _ => std::fs::remove_file(&wasm).unwrap(),
        }
        let (p, mut cursor) = home.client_named("fs", "cursor").await;
        let asked = Instant::now();
        let first = cursor.request("tools/list", json!({})).await;
        let waited = asked.elapsed();
        assert!(
            first.get("result").is_none(),
            "{broken}: the list from memory passed a broken required filter: {first}"
        );
        assert!(
            waited < Duration::from_secs(2),
            "{broken}: not answered from memory (waited {waited:?} for the start)"
        );
        assert_eq!(first["error"]["code"], -32004, "{broken}: {first}");
        let why = first["error"]["message"].as_str().unwrap_or_default();
        assert!(why.contains("tool-filter.wasm"), "{broken}: {why}");
        // A call waits for the start (and is refused too); then the live list is refused alike.
        let r = cursor.call_tool("echo", json!({"text": "hi"})).await;
        assert!(refusal(&r).is_some_and(|w| w.contains("tool-filter.wasm")), "{broken}: {r}");
        let live = cursor.request("tools/list", json!({})).await;
        assert_eq!(live["error"], first["error"], "{broken}: the live list is refused otherwise");
        leave(p, cursor).await;
    }
    home.shutdown().await;
}

/// A daemon started again answers a client's first list from memory, filtered for it; the
/// server, once up, announces its list as it registers its tools (server-everything does), and
/// the list is the one the client was shown: the client hears nothing (it used to hear
/// tools/list_changed after every start). A real change still reaches it, once.
#[tokio::test]
async fn a_list_from_memory_that_the_started_server_keeps_is_not_announced_as_changed() {
    let home = Home::new();
    home.install_example("tool-filter.wasm");
    let filter = r#"{"clients": {"cursor": {"hide": ["echo", "get-env"]}}}"#;
    let entry = format!("[[plugins]]\nfile = \"tool-filter.wasm\"\non_error = \"closed\"\nconfig = '{filter}'\n");
    let flags = ["--init-delay-ms", "3000", "--list-changed-on-initialized", "1"];
    home.write_config(&format!("{}{entry}", home.fixture("fs", &flags)));
    let (p, mut cursor) = home.client_named("fs", "cursor").await;
    let learned = tool_names(&cursor.request("tools/list", json!({})).await);
    assert!(!learned.contains(&"echo".to_string()), "{learned:?}");
    leave(p, cursor).await;
    for round in 1..=2 {
        home.stop().await;
        home.wait_no_processes(SLOW).await;
        let (p, mut cursor) = home.client_named("fs", "cursor").await;
        let asked = Instant::now();
        assert_eq!(tool_names(&cursor.request("tools/list", json!({})).await), learned, "round {round}");
        assert!(asked.elapsed() < Duration::from_secs(2), "round {round}: not answered from memory");
        // Up once a call is answered; its notice and the check of the list come right after.
        fixture_pid(&mut cursor).await;
        let told = crate::setup::drain(&mut cursor, Duration::from_millis(1500)).await;
        let changed: Vec<&Value> = told.iter().filter(|m| m["method"] == "notifications/tools/list_changed").collect();
        assert!(changed.is_empty(), "round {round}: an unchanged list was announced: {told:?}");
        if round == 2 {
            let r = cursor.call_tool("change_tools", json!({"add": "fresh"})).await;
            assert!(refusal(&r).is_none(), "{r}");
            cursor.recv_notification("notifications/tools/list_changed").await;
            assert!(tool_names(&cursor.request("tools/list", json!({})).await).contains(&"fresh".to_string()));
        }
        leave(p, cursor).await;
    }
    home.shutdown().await;
}
