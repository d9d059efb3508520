//! Content hooks (`switchyard:policy@0.3.0`) on the call path, with the hook-probe fixture:
//! a modified request reaches the server, a modified result the client; a denial is a tool
//! result with `isError` (a JSON-RPC error for other methods); audit mode changes nothing; a
//! call outside the interest never enters the plugin. Real time: plugins run on threads of
//! their own.

use serde_json::{Value, json};

use super::*;

/// A policy of the hook probe with `config` under `more` entry keys, attached to `metrics`.
async fn hook_policy(plugins: &[(&str, Value, &str)]) -> (Policy, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let probe = std::path::Path::new(switchyard_policy::TEST_PLUGINS).join("hook-probe.wasm");
    let mut toml = String::new();
    for (name, config, more) in plugins {
        std::fs::copy(&probe, dir.path().join(name)).expect("the build made the hook probe");
        toml += &format!("[[plugins]]\nfile = \"{name}\"\ndeadline_ms = 1000\nconfig = '{config}'\n{more}\n");
    }
    let config: Config = toml::from_str(&toml).expect("config");
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), CancellationToken::new()).await.expect("loads");
    (policy, dir)
}

fn measured(policy: &Policy) -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::new(Default::default));
    policy.attach_metrics(&metrics);
    metrics
}

/// How many times `plugin`'s `op` was entered.
fn entries(metrics: &Metrics, plugin: &str, op: &str) -> u64 {
    let prefix = format!(r#"switchyard_plugin_decision_seconds_count{{plugin="{plugin}",op="{op}"}} "#);
    metrics.encode().lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |n| n.parse().expect("a count"))
}

#[tokio::test]
async fn modified_params_reach_the_server_and_a_modified_result_the_client_in_chain_order() {
    let (policy, _dir) = hook_policy(&[
        ("a.wasm", json!({"tag": "a", "request": "modify", "result": "modify"}), "priority = 10"),
        ("b.wasm", json!({"tag": "b", "request": "modify", "result": "modify"}), ""),
    ])
    .await;
    let fake = FakeConnector::new(fake_server(false));
    let server = server_with("", fake.clone(), policy);
    let mut c = Client::connect(&server).await;
    let r = c.call("echo", json!({"text": "hi"})).await;
    assert_eq!(text(&r), "hi [b] [a]", "result hooks run in reverse chain order: {r}");
    assert_eq!(r["result"]["trail"], json!(["b", "a"]), "{r}");
    let sent = calls_of(&fake.link(0), "echo");
    assert_eq!(sent[0]["params"]["arguments"]["trail"], json!(["a", "b"]), "request hooks in chain order");
    assert_eq!(sent[0]["params"]["arguments"]["text"], "hi");
}

#[tokio::test]
async fn a_denied_request_is_a_tool_result_with_the_reason_and_never_reaches_the_server() {
    let config = json!({"methods": ["tools/call", "resources/list"], "request": "deny"});
    let (policy, _dir) = hook_policy(&[("guard.wasm", config, "")]).await;
    let fake = FakeConnector::new(fake_server(false));
    let server = server_with("", fake.clone(), policy);
    let mut c = Client::connect(&server).await;
    let r = c.call("echo", json!({"text": "x"})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let said = text(&r);
    assert!(said.contains("guard.wasm") && said.contains("probe denies tools/call `echo`"), "{said}");
    let r = c.request("resources/list", json!({})).await;
    let (code, msg) = error(&r);
    assert_eq!(code, -32004, "{r}");
    assert!(msg.contains("guard.wasm") && msg.contains("probe denies resources/list"), "{msg}");
    assert!(calls_of(&fake.link(0), "echo").is_empty(), "a denied call reached the server");
}

#[tokio::test]
async fn a_denied_result_is_a_tool_result_with_the_reason_in_place_of_the_server_s() {
    let (policy, _dir) = hook_policy(&[("cap.wasm", json!({"result": "deny"}), "")]).await;
    let fake = FakeConnector::new(fake_server(false));
    let server = server_with("", fake.clone(), policy);
    let mut c = Client::connect(&server).await;
    let r = c.call("echo", json!({"text": "secret"})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(!r.to_string().contains("secret"), "the server's result leaked: {r}");
    assert!(text(&r).contains("probe denies tools/call `echo`"), "{r}");
    assert_eq!(calls_of(&fake.link(0), "echo").len(), 1, "the call ran");
    // It ran: the model is told so, never "did not run" (it would call it again).
    let said = text(&r);
    let start = "The call of tool `echo` ran on the server, but its result was withheld by policy plugin `cap.wasm`.";
    assert!(said.starts_with(start) && said.contains("do not repeat it blindly"), "{said}");
    assert!(!said.contains("did not run"), "{said}");
    let metrics = server.metrics.encode();
    let withheld = metrics.lines().find(|l| l.contains(r#"tool="echo""#) && l.contains(r#"outcome="withheld""#));
    assert!(withheld.is_some_and(|l| l.ends_with(" 1")), "{metrics}");
    assert!(!metrics.contains(r#"outcome="rejected""#), "{metrics}");
}

/// A result of another method withheld is a JSON-RPC error that says the server answered.
#[tokio::test]
async fn a_withheld_result_of_another_method_says_the_server_answered() {
    let (policy, _dir) =
        hook_policy(&[("cap.wasm", json!({"methods": ["resources/list"], "result": "deny"}), "")]).await;
    let server = server_with("", FakeConnector::new(fake_server(false)), policy);
    let mut c = Client::connect(&server).await;
    let r = c.request("resources/list", json!({})).await;
    let (code, msg) = error(&r);
    assert_eq!(code, -32004, "{r}");
    assert!(msg.starts_with("rejected by policy plugin `cap.wasm`: the server ran the call and answered, and its result was withheld: probe denies resources/list"), "{msg}");
    assert!(msg.contains("do not repeat it blindly"), "as the tool result says it: {msg}");
}

#[tokio::test]
async fn audit_mode_changes_nothing_and_counts_what_it_would_have_done() {
    let config = json!({"request": "deny", "result": "modify"});
    let (policy, _dir) = hook_policy(&[("watch.wasm", config, "mode = \"audit\"")]).await;
    let metrics = measured(&policy);
    let fake = FakeConnector::new(fake_server(false));
    let server = server_with("", fake.clone(), policy);
    let mut c = Client::connect(&server).await;
    let r = c.call("echo", json!({"text": "as sent"})).await;
    assert_eq!(text(&r), "as sent", "{r}");
    assert!(r["result"].get("trail").is_none(), "{r}");
    assert_eq!(calls_of(&fake.link(0), "echo").len(), 1);
    let text = metrics.encode();
    for line in [
        r#"switchyard_plugin_hook_verdicts_total{plugin="watch.wasm",phase="request",verdict="deny",mode="audit"} 1"#,
        r#"switchyard_plugin_hook_verdicts_total{plugin="watch.wasm",phase="result",verdict="modify",mode="audit"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    }
}

#[tokio::test]
async fn a_trapping_hook_passes_the_call_when_fail_is_open_and_refuses_it_when_closed() {
    let (policy, _dir) = hook_policy(&[("t.wasm", json!({"result": "trap"}), "fail = \"open\"")]).await;
    let server = server_with("", FakeConnector::new(fake_server(false)), policy);
    let mut c = Client::connect(&server).await;
    assert_eq!(text(&c.call("echo", json!({"text": "kept"})).await), "kept");
    let (policy, _dir) = hook_policy(&[("t.wasm", json!({"result": "trap"}), "fail = \"closed\"")]).await;
    let server = server_with("", FakeConnector::new(fake_server(false)), policy);
    let mut c = Client::connect(&server).await;
    let r = c.call("echo", json!({"text": "kept"})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text(&r).contains("plugin failed: it trapped"), "{r}");
    assert!(text(&r).contains("ran on the server, but its result was withheld"), "{r}");
}

#[tokio::test]
async fn a_call_outside_the_interest_never_enters_the_plugin() {
    let config = json!({"tools": ["write*"], "request": "modify", "result": "modify"});
    let (policy, _dir) = hook_policy(&[("w.wasm", config, "")]).await;
    let metrics = measured(&policy);
    let fake = FakeConnector::new(fake_server(false));
    let server = server_with("", fake.clone(), policy);
    let mut c = Client::connect(&server).await;
    assert_eq!(text(&c.call("echo", json!({"text": "plain"})).await), "plain");
    c.request("resources/list", json!({})).await;
    assert_eq!((entries(&metrics, "w.wasm", "on_request"), entries(&metrics, "w.wasm", "on_result")), (0, 0));
    let r = c.call("write", json!({"text": "w"})).await;
    assert_eq!(text(&r), "w [probe]", "{r}");
    assert_eq!((entries(&metrics, "w.wasm", "on_request"), entries(&metrics, "w.wasm", "on_result")), (1, 1));
}

/// Hot reload covers 0.3 plugins: an entry saved with `mode = "audit"` stops a denial, and one
/// saved back with `mode = "enforce"` brings it back, with no restart of anything.
#[tokio::test]
async fn a_saved_entry_switches_a_hook_between_enforce_and_audit() {
    let config = json!({"request": "deny"});
    let (policy, _dir) = hook_policy(&[("g.wasm", config.clone(), "")]).await;
    let server = server_with("", FakeConnector::new(fake_server(false)), policy.clone());
    let mut c = Client::connect(&server).await;
    assert_eq!(c.call("echo", json!({"text": "x"})).await["result"]["isError"], true);
    let entries = |mode: &str| {
        let toml =
            format!("[[plugins]]\nfile = \"g.wasm\"\ndeadline_ms = 1000\nconfig = '{config}'\nmode = \"{mode}\"\n");
        toml::from_str::<Config>(&toml).expect("config").plugins
    };
    policy.set_entries(entries("audit")).await;
    assert_eq!(text(&c.call("echo", json!({"text": "passes"})).await), "passes");
    policy.set_entries(entries("enforce")).await;
    assert_eq!(c.call("echo", json!({"text": "x"})).await["result"]["isError"], true);
}

/// Progress passes untouched while hooks change the call's params (its `_meta` and progress
/// token included, as the hooks hand them back) and its final result.
#[tokio::test]
async fn progress_passes_untouched_while_the_hooks_change_params_and_result() {
    let config = json!({"tools": ["sleep"], "request": "modify", "result": "modify"});
    let (policy, _dir) = hook_policy(&[("p.wasm", config, "")]).await;
    let fake = FakeConnector::new(fake_server(false));
    let server = server_with("", fake.clone(), policy);
    let mut c = Client::connect(&server).await;
    let args = json!({"name": "sleep", "arguments": {"ms": 120, "progress_ms": 30}, "_meta": {"progressToken": "tok"}});
    let id = c.send("tools/call", args).await;
    let resp = c.response(&id).await;
    assert_eq!(text(&resp), "sleep after 120 ms [probe]", "{resp}");
    let progress = c.take(Some("notifications/progress"));
    assert_eq!(progress.len(), 3, "{progress:?}");
    for (n, p) in progress.iter().enumerate() {
        let want = json!({"progressToken": "tok", "progress": 30 * (n + 1)});
        assert_eq!(p["params"], want, "{progress:?}");
    }
    let sent = calls_of(&fake.link(0), "sleep");
    assert_eq!(sent[0]["params"]["arguments"]["trail"], json!(["probe"]), "{sent:?}");
}
