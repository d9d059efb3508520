//! End-to-end tests of `switchyard:policy@0.2.0` through the daemon: plugins that know who is
//! calling (`tool-filter`, `rate-limit`), `[[plugins]] servers`, and a 0.1.0 plugin binary
//! built before 0.2 existed.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use switchyard_testkit::daemon::{Home, example, fixture_pid, leave, status_server, tool_names};
use switchyard_testkit::*;

/// The `hints` example built against 0.1.0 before 0.2 was added (crates/policy/fixtures).
fn hints_0_1_0() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy/fixtures/hints-0.1.0.wasm")
}

fn tool<'a>(list: &'a Value, name: &str) -> &'a Value {
    let tools = list["result"]["tools"].as_array().unwrap();
    tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no tool {name} in {list}"))
}

#[tokio::test]
async fn tool_filter_hides_write_tools_from_cursor_and_renames_for_it_only() {
    let home = Home::new();
    let config = format!(
        "{}[[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = '{}'\n",
        home.fixture("fs", &[]),
        r#"{"clients": {"cursor": {"hide": ["write*"], "rename": {"echo": "say"}}}}"#
    );
    home.write_config(&config);
    home.install_plugins(&[("tool-filter.wasm", example("tool-filter.wasm"))]);

    let (cp, mut cursor) = home.client_named("fs", "cursor").await;
    let (kp, mut claude) = home.client_named("fs", "claude-code").await;

    let seen = tool_names(&cursor.request("tools/list", json!({})).await);
    assert!(!seen.iter().any(|n| n.starts_with("write")), "cursor sees {seen:?}");
    assert!(seen.contains(&"say".to_string()) && !seen.contains(&"echo".to_string()), "{seen:?}");
    assert!(seen.contains(&"read".to_string()), "{seen:?}");
    let seen = tool_names(&claude.request("tools/list", json!({})).await);
    assert!(seen.contains(&"write".to_string()) && seen.contains(&"echo".to_string()), "claude-code sees {seen:?}");

    // cursor's call to the hidden tool is refused, naming the plugin, in a result its model
    // reads; nothing reaches the server.
    let r = cursor.call_tool("write", json!({"path": "/a", "text": "from cursor"})).await;
    let msg = refusal_text(&r);
    assert!(msg.contains("`tool-filter.wasm`") && msg.contains("not available to client `cursor`"), "{msg}");
    // Called again and again, it is refused each time, and logged once (then counted every 10
    // s at most; trial 39: 3,000 lines in 15 s pushed real errors out of the log).
    for _ in 0..50 {
        let r = cursor.call_tool("write", json!({"path": "/a", "text": "again"})).await;
        assert!(refusal_text(&r).contains("not available to client `cursor`"), "{r}");
    }
    let logged = home.logs().lines().filter(|l| l.contains("tool `write` rejected by `tool-filter.wasm`")).count();
    assert!((1..=2).contains(&logged), "51 refusals, {logged} lines:\n{}", home.logs());
    // claude-code writes as before.
    claude.call_text("write", json!({"path": "/a", "text": "from claude"})).await;
    assert_eq!(claude.call_text("read", json!({"path": "/a"})).await, "from claude");
    let calls: Vec<Value> = journal(home.journal("fs")).into_iter().filter(|e| e["event"] == "write_start").collect();
    assert_eq!(calls.len(), 1, "only claude-code's write reached the server: {calls:?}");

    // The renamed tool: under its new name it reaches `echo`; under the old one it is refused.
    assert_eq!(cursor.call_text("say", json!({"text": "hi"})).await, "hi");
    let r = cursor.call_tool("echo", json!({"text": "hi"})).await;
    assert!(refusal_text(&r).contains("as `say`; call it by that name"), "{r}");
    // The mapping is cursor's alone.
    let r = claude.call_tool("say", json!({"text": "hi"})).await;
    assert!(r.get("error").is_some() || r["result"]["isError"] == true, "claude-code has no `say`: {r}");
    assert_eq!(claude.call_text("echo", json!({"text": "hi"})).await, "hi");

    leave(cp, cursor).await;
    leave(kp, claude).await;
    home.shutdown().await;
}

/// A daemon that goes away under a client it showed a tool under another name: `connect` starts
/// a new one and shows it the client's lists again, so the client's next call under the new
/// name still reaches the tool (it heard of no change and will not list again).
#[tokio::test]
async fn a_renamed_tool_still_answers_by_its_new_name_after_the_daemon_restarts() {
    let home = Home::new();
    let config = format!(
        "{}[[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = '{}'\n",
        home.fixture("fs", &[]),
        r#"{"clients": {"cursor": {"rename": {"echo": "say"}}}}"#
    );
    home.write_config(&config);
    home.install_plugins(&[("tool-filter.wasm", example("tool-filter.wasm"))]);
    let (cp, mut cursor) = home.client_named("fs", "cursor").await;
    assert!(tool_names(&cursor.request("tools/list", json!({})).await).contains(&"say".to_string()));
    assert_eq!(cursor.call_text("say", json!({"text": "before"})).await, "before");
    let daemon = home.daemon_pid().await;
    drop(home.stop().await);
    assert_eq!(cursor.call_text("say", json!({"text": "after"})).await, "after");
    assert_ne!(home.daemon_pid().await, daemon, "the call was not served by a new daemon");
    let r = cursor.call_tool("echo", json!({"text": "x"})).await;
    assert!(is_refusal(&r), "the old name is still refused to cursor: {r}");
    leave(cp, cursor).await;
    home.shutdown().await;
}

#[tokio::test]
async fn rate_limit_refuses_the_eleventh_call_of_one_client_while_another_passes() {
    let home = Home::new();
    let config = format!(
        "{}[[plugins]]\nfile = \"rate-limit.wasm\"\nconfig = {{ tools = {{ \"ech*\" = {{ per_client_per_minute = 10 }} }} }}\n",
        home.fixture("fs", &[])
    );
    home.write_config(&config);
    home.install_plugins(&[("rate-limit.wasm", example("rate-limit.wasm"))]);
    let (cp, mut cursor) = home.client_named("fs", "cursor").await;
    let (kp, mut claude) = home.client_named("fs", "claude-code").await;
    for n in 1..=10 {
        assert_eq!(cursor.call_text("echo", json!({"text": format!("{n}")})).await, format!("{n}"));
    }
    let r = cursor.call_tool("echo", json!({"text": "11"})).await;
    assert!(is_refusal(&r), "the 11th call passed: {r}");
    let msg = refusal_text(&r);
    assert!(msg.contains("`rate-limit.wasm`") && msg.contains("rate limit `ech*`"), "{msg}");
    assert!(msg.contains("client `cursor`") && msg.contains("The next call is allowed in "), "{msg}");
    assert!(msg.ends_with(" s; wait at least that long before calling `echo` again."), "{msg}");
    for n in 1..=10 {
        assert_eq!(claude.call_text("echo", json!({"text": format!("{n}")})).await, format!("{n}"));
    }
    // Other tools are not limited.
    assert!(cursor.call_tool("read", json!({"path": "/x"})).await.get("result").is_some());
    leave(cp, cursor).await;
    leave(kp, claude).await;
    home.shutdown().await;
}

/// An entry that says `refusals = "error"` keeps the JSON-RPC error -32004 for its plugin's
/// refusals of tools/call (for programs that read errors), with the plugin and its reason in
/// the error's data; another plugin's refusals stay tool results.
#[tokio::test]
async fn refusals_error_keeps_the_json_rpc_error_for_that_plugin_only() {
    let home = Home::new();
    let config = format!(
        "{}[[plugins]]\nfile = \"guard.wasm\"\nrefusals = \"error\"\nconfig = {{ deny = {{ \"write\" = \"writes are off here\" }} }}\n\
         [[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = '{}'\n",
        home.fixture("fs", &[]),
        r#"{"clients": {"cursor": {"hide": ["read"]}}}"#
    );
    home.write_config(&config);
    home.install_plugins(&[("guard.wasm", example("guard.wasm")), ("tool-filter.wasm", example("tool-filter.wasm"))]);
    let (cp, mut cursor) = home.client_named("fs", "cursor").await;
    let r = cursor.call_tool("write", json!({"path": "/a", "text": "x"})).await;
    assert_eq!(r["error"]["code"], -32004, "{r}");
    assert_eq!(r["error"]["message"], "rejected by policy plugin `guard.wasm`: writes are off here", "{r}");
    assert_eq!(r["error"]["data"], json!({"plugin": "guard.wasm", "reason": "writes are off here"}), "{r}");
    let r = cursor.call_tool("read", json!({"path": "/a"})).await;
    assert!(refusal_text(&r).contains("`tool-filter.wasm`"), "{r}");
    assert_eq!(cursor.call_text("echo", json!({"text": "fine"})).await, "fine");
    leave(cp, cursor).await;
    home.shutdown().await;
}

#[tokio::test]
async fn a_plugin_scoped_to_one_server_leaves_the_others_annotations_and_a_0_1_0_binary_still_works() {
    let home = Home::new();
    let config = format!(
        "{}{}[[plugins]]\nfile = \"hints.wasm\"\nservers = [\"fs\"]\nconfig = {{ tools = {{ \"write\" = {{ readOnlyHint = true, title = \"Scoped\" }} }} }}\n",
        home.fixture("fs", &[]),
        home.fixture("other", &[])
    );
    home.write_config(&config);
    home.install_plugins(&[("hints.wasm", hints_0_1_0())]);
    let (fp, mut fs) = home.client_named("fs", "claude-code").await;
    let (op, mut other) = home.client_named("other", "claude-code").await;
    let in_fs = fs.request("tools/list", json!({})).await;
    assert_eq!(tool(&in_fs, "write")["annotations"]["readOnlyHint"], true, "{in_fs}");
    assert_eq!(tool(&in_fs, "write")["annotations"]["title"], "Scoped", "{in_fs}");
    let in_other = other.request("tools/list", json!({})).await;
    let write = tool(&in_other, "write");
    assert_ne!(write["annotations"]["readOnlyHint"], true, "{write}");
    assert!(write["annotations"].get("title").is_none(), "{write}");
    // The 0.1.0 plugin decides too: its read-only tool is served.
    assert_eq!(fs.call_text("echo", json!({"text": "ok"})).await, "ok");
    leave(fp, fs).await;
    leave(op, other).await;
    home.shutdown().await;
}

/// An entry scoped to a server the file does not have (a typo) was meant for some server, and
/// nothing says which: every server is refused, with the entry's file and line, until it is
/// fixed. A guard with a misspelt scope never lets a call through.
#[tokio::test]
async fn a_plugin_scoped_to_an_unknown_server_refuses_every_server_naming_the_file_and_line() {
    let home = Home::new();
    let config = format!("{}[[plugins]]\nfile = \"hints.wasm\"\nservers = [\"gihtub\"]\n", home.fixture("fs", &[]));
    home.write_config(&config);
    let out = home.cli(&["connect", "fs", "--config", &home.config_str()]).await;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains(&format!("config file {}, line 6", home.config_str())), "{text}");
    assert!(text.contains("`gihtub`") && text.contains("its servers: fs"), "{text}");
    let status = home.status_json().await;
    assert_eq!(status["broken"][0]["name"], "fs", "{status:#}");
    assert!(status["plugin_entries"].to_string().contains("`gihtub`"), "{status:#}");
    home.shutdown().await;
}

fn prompt_names(list: &Value) -> Vec<String> {
    let prompts = list["result"]["prompts"].as_array().unwrap_or_else(|| panic!("no prompts in {list}"));
    prompts.iter().map(|p| p["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn tool_filter_hides_and_renames_prompts_per_client() {
    let home = Home::new();
    let config = format!(
        "{}[[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = '{}'\n",
        home.fixture("fs", &[]),
        r#"{"clients": {"cursor": {"prompts": {"rename": {"greet": "hello"}}}, "windsurf": {"prompts": {"hide": ["gr*"]}}}}"#
    );
    home.write_config(&config);
    home.install_plugins(&[("tool-filter.wasm", example("tool-filter.wasm"))]);

    let (cp, mut cursor) = home.client_named("fs", "cursor").await;
    let (wp, mut windsurf) = home.client_named("fs", "windsurf").await;
    let (kp, mut claude) = home.client_named("fs", "claude-code").await;
    let greet = |name: &str| json!({"name": name, "arguments": {"name": "Ada"}});
    let text = |r: &Value| r["result"]["messages"][0]["content"]["text"].as_str().map(str::to_string);

    assert_eq!(prompt_names(&cursor.request("prompts/list", json!({})).await), ["hello"]);
    assert!(prompt_names(&windsurf.request("prompts/list", json!({})).await).is_empty());
    assert_eq!(prompt_names(&claude.request("prompts/list", json!({})).await), ["greet"]);
    // Tools are left as listed: the rule names prompts only.
    assert!(tool_names(&cursor.request("tools/list", json!({})).await).contains(&"echo".to_string()));

    // cursor asks by the new name and reaches `greet`; by the old one it is refused.
    let r = cursor.request("prompts/get", greet("hello")).await;
    assert_eq!(text(&r).as_deref(), Some("Hello, Ada!"), "{r}");
    let r = cursor.request("prompts/get", greet("greet")).await;
    assert_eq!(r["error"]["code"], -32004, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("prompt `greet` as `hello`"), "{r}");
    // windsurf's hidden prompt is refused, naming the plugin.
    let r = windsurf.request("prompts/get", greet("greet")).await;
    assert_eq!(r["error"]["code"], -32004, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("tool-filter.wasm") && msg.contains("prompt `greet` is not available to client `windsurf`"),
        "{msg}"
    );
    // The rename is cursor's alone.
    let r = claude.request("prompts/get", greet("hello")).await;
    assert!(r.get("error").is_some(), "claude-code has no `hello`: {r}");
    assert_eq!(text(&claude.request("prompts/get", greet("greet")).await).as_deref(), Some("Hello, Ada!"));

    leave(cp, cursor).await;
    leave(wp, windsurf).await;
    leave(kp, claude).await;
    home.shutdown().await;
}

/// The pids of the fixture instances that received a `tools/call` of `tool`.
fn pids_called(home: &Home, server: &str, tool: &str) -> std::collections::BTreeSet<u64> {
    let calls = journal(home.journal(server))
        .into_iter()
        .filter(|e| e["dir"] == "in" && e["msg"]["method"] == "tools/call" && e["msg"]["params"]["name"] == tool);
    calls.filter_map(|e| e["pid"].as_u64()).collect()
}

#[tokio::test]
async fn placement_gives_each_client_its_own_instance_for_one_tool_while_another_stays_shared() {
    let home = Home::new();
    let config = format!(
        "{}[[plugins]]\nfile = \"placement.wasm\"\nconfig = '{}'\n",
        home.fixture("fs", &[]),
        r#"{"tools": {"pid": "client", "echo": "shared"}}"#
    );
    home.write_config(&config);
    home.install_plugins(&[("placement.wasm", example("placement.wasm"))]);
    let (cp, mut cursor) = home.client_named("fs", "cursor").await;
    let (kp, mut claude) = home.client_named("fs", "claude-code").await;

    let (cursor_pid, _) = fixture_pid(&mut cursor).await;
    let (claude_pid, _) = fixture_pid(&mut claude).await;
    assert_ne!(cursor_pid, claude_pid, "two clients' `pid` calls ran on one instance");
    assert_eq!(fixture_pid(&mut cursor).await.0, cursor_pid, "a client's calls stay on its instance");
    assert_eq!(cursor.call_text("echo", json!({"text": "a"})).await, "a");
    assert_eq!(claude.call_text("echo", json!({"text": "b"})).await, "b");
    let echoed = pids_called(&home, "fs", "echo");
    assert_eq!(echoed.len(), 1, "the shared tool ran on more than one instance: {echoed:?}");
    assert!(!echoed.contains(&(cursor_pid as u64)) && !echoed.contains(&(claude_pid as u64)), "{echoed:?}");

    // Status names each instance's scope: the clients by name, never their directory.
    let status = home.status_json().await;
    let instances = status_server(&status, "fs").and_then(|s| s["instances"].as_array()).cloned().unwrap_or_default();
    let scope_of = |pid: u32| {
        let i = instances.iter().find(|i| i["pid"] == pid).unwrap_or_else(|| panic!("no {pid} in {instances:?}"));
        i["scope"].as_str().unwrap_or_default().to_string()
    };
    assert!(scope_of(cursor_pid).starts_with("client cursor"), "{instances:?}");
    assert!(scope_of(claude_pid).starts_with("client claude-code"), "{instances:?}");
    let text = home.status_text().await;
    let placed: Vec<&str> = text.lines().filter(|l| l.contains(", client ")).collect();
    assert_eq!(placed.len(), 2, "{text}");
    assert!(placed.iter().any(|l| l.contains("[default, client cursor")), "{text}");
    assert!(placed.iter().all(|l| !l.contains('/')), "status shows a client's directory:\n{text}");

    leave(cp, cursor).await;
    leave(kp, claude).await;
    home.shutdown().await;
}
