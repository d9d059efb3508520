//! Arguments that give a key twice, and the audit line of a refused call: refused only where a
//! plugin of the server's own chain reads them, told to the client as that, left out of the
//! audit line (their hash kept), and a refused call's line names the chain that judged it.
//! Real time: plugins run on threads of their own.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use switchyard_core::audit::{AuditLog, Record, Settings};

use super::*;

/// The hook probe (a test fixture) and `tool-filter` (an example), as the build made them.
fn plugin(file: &str) -> PathBuf {
    let fixtures = Path::new(switchyard_policy::TEST_PLUGINS);
    match file {
        "tool-filter.wasm" => fixtures.with_file_name("examples").join(file),
        _ => fixtures.join(file),
    }
}

/// A policy of `plugins`: each copied from its build as `name`, with `config` and `more` keys.
async fn policy_of(plugins: &[(&str, &str, Value, &str)]) -> (Policy, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut toml = String::new();
    for (from, name, config, more) in plugins {
        std::fs::copy(plugin(from), dir.path().join(name)).expect("the build made the plugin");
        toml += &format!("[[plugins]]\nfile = \"{name}\"\ndeadline_ms = 1000\nconfig = '{config}'\n{more}\n");
    }
    let config: Config = toml::from_str(&toml).expect("config");
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), CancellationToken::new()).await.expect("loads");
    (policy, dir)
}

/// Audits `server`'s calls, with their arguments, into a file of `dir`.
fn audited(server: &Server, dir: &Path) -> (Arc<AuditLog>, PathBuf) {
    let path = dir.join("a.audit.jsonl");
    let settings =
        Settings { path: path.clone(), max_bytes: u64::MAX, keep: 1, queue: 64, strict: false, arguments: true };
    let log = AuditLog::start(&settings).expect("the log opens");
    server.audit_into(log.clone());
    (log, path)
}

/// The `tools/call` lines of the log at `path`, once what waits is written.
fn calls(log: &AuditLog, path: &Path) -> Vec<Record> {
    log.flush(Duration::from_secs(10));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all = text.lines().map(|l| serde_json::from_str::<Record>(l).expect("a line"));
    all.filter(|r| r.method == "tools/call").collect()
}

fn plugins(r: &Record) -> Vec<&str> {
    r.plugins.iter().map(|p| p.name.as_str()).collect()
}

/// Sends a `tools/call` of `tool` whose `arguments` are written by hand, and waits for its answer.
async fn call_raw(c: &mut Client, id: u64, tool: &str, arguments: &str) -> Value {
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
    );
    c.out.write_all(format!("{line}\n").as_bytes()).await.expect("the session reads");
    c.response(&json!(id)).await
}

/// The tester's case: a plugin for server `t3` only does not judge the calls of this server
/// (`fake`), so their arguments pass as sent, a key given twice included; with no plugin that
/// reads them, the audit line leaves such arguments out, the hash of their bytes kept.
#[tokio::test]
async fn a_key_given_twice_passes_as_sent_where_no_plugin_judges_the_server_and_is_not_logged() {
    let probe = json!({"request": "deny"});
    let (policy, dir) = policy_of(&[("hook-probe.wasm", "path-guard.wasm", probe, "servers = [\"t3\"]")]).await;
    let fake = FakeConnector::new(fake_server(false));
    let server = server_with("", fake.clone(), policy);
    let (log, path) = audited(&server, dir.path());
    let mut c = Client::connect(&server).await;
    let twice = [r#"{"text":"/etc/passwd","text":"/tmp/ok"}"#, r#"{"text":"n","l":[{"z":1},{"z":1,"z":2}]}"#];
    for (id, args) in twice.iter().enumerate() {
        let r = call_raw(&mut c, 100 + id as u64, "echo", args).await;
        assert!(r["result"].get("isError").is_none(), "{args}: {r}");
    }
    // Both reached the server as the client wrote them.
    let lines = fake.link(0).lines();
    for args in twice {
        assert!(lines.iter().any(|l| l.contains(args)), "{args} not sent as written: {lines:?}");
    }
    assert_eq!(text(&c.call("echo", json!({"text": "once"})).await), "once");
    let records = calls(&log, &path);
    assert_eq!(records.len(), 3, "{records:?}");
    for (r, args) in records.iter().zip(twice) {
        assert_eq!(r.arguments, None, "{args}: given twice, written as parsed: {r:?}");
        let sha = switchyard_core::audit::sha256_hex(args.as_bytes());
        assert_eq!(r.arguments_sha256.as_deref(), Some(sha.as_str()), "{r:?}");
        assert!(r.plugins.is_empty() && r.refused_by.is_none(), "no plugin judges `fake`: {r:?}");
    }
    assert_eq!(records[2].arguments, Some(json!({"text": "once"})));
}

/// Where a plugin of the server's chain reads the arguments, a key given twice is refused by
/// switchyard, saying why in words that fit; each refused call's audit line names the chain
/// that judged it, as an allowed call's does: refused by switchyard (a key given twice), by a
/// request hook, or by a plugin that hides the tool from this client.
#[tokio::test]
async fn a_refused_call_s_line_names_the_chain_that_judged_it() {
    let deny_lookup = json!({"tools": ["lookup"], "request": "deny"});
    let hide_write = json!({"clients": {"t": {"hide": ["write"]}}});
    let (policy, dir) = policy_of(&[
        ("hook-probe.wasm", "guard.wasm", deny_lookup, "priority = 10"),
        ("tool-filter.wasm", "tool-filter.wasm", hide_write, ""),
        ("hook-probe.wasm", "elsewhere.wasm", json!({"request": "deny"}), "servers = [\"t3\"]"),
    ])
    .await;
    let fake = FakeConnector::new(fake_server(false));
    let server = server_with("", fake.clone(), policy);
    let (log, path) = audited(&server, dir.path());
    let mut c = Client::connect(&server).await;

    let r = call_raw(&mut c, 100, "echo", r#"{"text":"/etc/passwd","text":"/tmp/ok"}"#).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let said = text(&r);
    assert!(
        said.contains("refused by switchyard itself (not a policy plugin)")
            && said.contains("a policy plugin reads these arguments and they give the key `text` twice")
            && said.contains("rather than let the plugin judge one value and the server act on another"),
        "{said}"
    );
    assert!(!said.contains("no policy plugin") && !said.contains("/etc/passwd"), "{said}");
    let r = c.call("lookup", json!({"text": "x"})).await;
    assert!(text(&r).contains("probe denies tools/call `lookup`"), "{r}");
    let r = c.call("write", json!({"text": "x"})).await;
    assert!(text(&r).contains("tool-filter.wasm"), "{r}");
    assert_eq!(text(&c.call("echo", json!({"text": "once"})).await), "once");
    assert_eq!(calls_of(&fake.link(0), "echo").len(), 1, "only the echo given once was sent");

    let records = calls(&log, &path);
    let seen: Vec<_> = records.iter().map(|r| (r.tool.as_deref(), r.refused_by.as_deref())).collect();
    assert_eq!(
        seen,
        [
            (Some("echo"), Some("switchyard")),
            (Some("lookup"), Some("guard.wasm")),
            (Some("write"), Some("tool-filter.wasm")),
            (Some("echo"), None)
        ],
        "{records:?}"
    );
    for r in &records {
        assert_eq!(plugins(r), ["guard.wasm", "tool-filter.wasm"], "{r:?}");
        assert!(r.plugins.iter().all(|p| p.sha256.len() == 64), "{r:?}");
    }
}
