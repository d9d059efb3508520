//! Real MCP servers from npm, driven by the real TypeScript SDK client, directly and through
//! `switchyard run`.
//!
//! `tests/npm/client.mjs` connects the SDK's `Client` to a server command, runs a scenario and
//! prints a normalised JSON transcript. Each test runs the scenario twice, once against the server
//! itself and once with `switchyard run --` in front, and requires equal transcripts: the router is
//! meant to be invisible. The direct transcript is also checked for every feature the scenario is
//! meant to exercise, so a scenario that silently stopped exercising something cannot pass.
//!
//! Node and npm are required. Without them these tests FAIL (with a message saying so): they are
//! the proof that real clients and servers work through the router, and skipping them quietly
//! would hide exactly that.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::npm_setup::*;
use switchyard_testkit::http_servers::RemoteTransport;
use switchyard_testkit::sdk_clients::{ClientTarget, node_client, python_client};

use crate::transcript::Run;
use serde_json::Value;

/// Must match SAMPLING_REPLY in client.mjs: the text the client answers sampling requests with.
const SAMPLING_REPLY: &str = "switchyard sampled reply";
/// Upper bound for one scenario run; generous because CI machines are shared and slow.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

fn switchyard() -> &'static str {
    switchyard_testkit::bin()
}

// ------------------------------------------------------------------------------------------------
// Running the client.

fn run_client(scenario: &str, server_cmd: &[&str]) -> Run {
    ensure_npm();
    let mut cmd = Command::new("node");
    cmd.arg(npm_dir().join("client.mjs"))
        .arg(scenario)
        .arg("--")
        .args(server_cmd)
        .current_dir(npm_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The router logs to stderr; make sure there is something useful to show on failure.
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "info");
    }
    crate::transcript::run(cmd, "client.mjs", CLIENT_TIMEOUT)
}

/// `switchyard run` in front of `server_cmd`, with an empty plugins directory so that a user's own
/// plugins (default: ~/.config/switchyard/plugins) never change what these tests see.
fn routed(server_cmd: &[&str], plugins: &TempDir) -> Vec<String> {
    let mut v =
        vec![switchyard().to_string(), "run".into(), "--plugins".into(), plugins.path_str().into(), "--".into()];
    v.extend(server_cmd.iter().map(|s| s.to_string()));
    v
}

/// Equal transcripts, or a failure that names each differing step with both versions.
fn assert_same_transcript(direct: &Value, routed: &Value, routed_run: &Run) {
    if direct == routed {
        return;
    }
    let mut report = String::new();
    let empty = serde_json::Map::new();
    let d_steps = direct["steps"].as_object().unwrap_or(&empty);
    let r_steps = routed["steps"].as_object().unwrap_or(&empty);
    let mut names: Vec<&String> = d_steps.keys().collect();
    names.extend(r_steps.keys().filter(|k| !d_steps.contains_key(*k)));
    for name in names {
        let (d, r) = (d_steps.get(name), r_steps.get(name));
        if d != r {
            report += &format!(
                "\n=== step `{name}` differs\n--- direct\n{}\n--- through switchyard\n{}\n",
                pretty(d),
                pretty(r)
            );
        }
    }
    for key in ["notifications", "serverToClientRequests", "fatal", "scenario"] {
        if direct.get(key) != routed.get(key) {
            report += &format!(
                "\n=== `{key}` differs\n--- direct\n{}\n--- through switchyard\n{}\n",
                pretty(direct.get(key)),
                pretty(routed.get(key))
            );
        }
    }
    panic!(
        "transcript through switchyard differs from the direct one:{report}\n--- stderr of the routed run (client, router, server)\n{}",
        routed_run.stderr
    );
}

fn pretty(v: Option<&Value>) -> String {
    match v {
        Some(v) => serde_json::to_string_pretty(v).unwrap(),
        None => "<absent>".into(),
    }
}

/// A step's value; fails when the step is missing or recorded an error.
fn step<'a>(t: &'a Value, name: &str) -> &'a Value {
    let s = &t["steps"][name];
    assert!(!s.is_null(), "step `{name}` missing from transcript:\n{}", pretty(Some(t)));
    assert!(s.get("error").is_none() || name.contains("unknown"), "step `{name}` failed: {}", pretty(Some(s)));
    s
}

/// All text of a tool result's content blocks.
fn texts(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

/// A scratch directory removed on drop.
struct TempDir(switchyard_testkit::TempDir);

impl TempDir {
    fn new(_tag: &str) -> TempDir {
        TempDir(switchyard_testkit::temp_dir())
    }
    fn path_str(&self) -> &str {
        self.0.path().to_str().expect("utf-8 temp path")
    }
    fn join(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// ------------------------------------------------------------------------------------------------
// server-everything

fn check_everything_features(t: &Value) {
    let init = step(t, "initialize");
    assert_eq!(init["serverInfo"]["name"], "mcp-servers/everything");
    assert!(init["instructions"].as_str().is_some_and(|s| !s.is_empty()), "instructions missing");
    for cap in ["tools", "prompts", "resources", "logging"] {
        assert!(init["capabilities"].get(cap).is_some(), "capability {cap} missing: {init}");
    }

    let roots_sync = step(t, "roots_initial_sync");
    assert_eq!(roots_sync["serverAskedForRoots"], true, "server never asked for roots: {roots_sync}");

    let tools = step(t, "tools_list")["tools"].as_array().expect("tools array");
    let tool =
        |name: &str| tools.iter().find(|x| x["name"] == name).unwrap_or_else(|| panic!("tool {name} not listed"));
    for name in [
        "echo",
        "get-sum",
        "get-structured-content",
        "get-tiny-image",
        "trigger-long-running-operation",
        "trigger-sampling-request",
        "trigger-elicitation-request",
        "get-roots-list",
        "toggle-simulated-logging",
        "toggle-subscriber-updates",
    ] {
        tool(name);
    }
    assert_eq!(tool("echo")["annotations"]["readOnlyHint"], true, "echo annotations lost");
    assert!(tool("get-structured-content").get("outputSchema").is_some(), "outputSchema lost");

    assert!(!step(t, "prompts_list")["prompts"].as_array().unwrap().is_empty());
    assert!(!step(t, "resources_list_first_page")["resources"].as_array().unwrap().is_empty());
    assert!(!step(t, "resource_templates_list")["resourceTemplates"].as_array().unwrap().is_empty());
    assert!(step(t, "resources_read_static")["contents"][0]["text"].as_str().is_some_and(|s| s.contains("Everything")));
    assert_eq!(step(t, "completion")["completion"]["values"][0], "Engineering");

    assert_eq!(texts(step(t, "call_echo")), "Echo: hello through switchyard");
    assert!(texts(step(t, "call_get_sum")).contains("42"));
    assert_eq!(step(t, "call_structured_content")["structuredContent"]["temperature"], 36);
    let image = step(t, "call_tiny_image")["content"].as_array().unwrap();
    assert!(image.iter().any(|b| b["type"] == "image" && b["mimeType"] == "image/png" && b["data"].is_string()));
    // Either shape is a correct "no such tool" answer; the SDK version decides which one we get.
    let unknown = step(t, "call_unknown_tool");
    assert!(unknown["result"]["isError"] == true || unknown.get("error").is_some(), "unknown tool: {unknown}");

    let progress = step(t, "progress");
    assert_eq!(progress["countBeforeResponse"], 5, "progress notifications: {progress}");
    assert_eq!(progress["monotonic"], true);
    assert_eq!(progress["sdkCallbackFired"], true);

    let sampling = step(t, "sampling");
    assert!(sampling["requestSeenByClient"].is_object(), "sampling request never reached the client");
    assert!(texts(&sampling["result"]).contains(SAMPLING_REPLY), "sampling reply not returned: {sampling}");

    let elicitation = step(t, "elicitation");
    assert!(elicitation["requestSeenByClient"].is_object(), "elicitation request never reached the client");
    let etext = texts(&elicitation["result"]);
    assert!(etext.contains("User provided the requested information") && etext.contains("Switchyard Tester"));

    let roots = step(t, "roots");
    assert!(texts(&roots["before"]).contains("file:///switchyard/project-a"));
    assert_eq!(roots["serverReRequestedRoots"], true);
    assert!(texts(&roots["after"]).contains("file:///switchyard/project-b"), "roots change not seen: {roots}");

    assert_eq!(step(t, "logging_debug")["simulatedLogArrived"], true);
    assert_eq!(step(t, "logging_error_suppresses_info")["logsBelowErrorLevel"], 0);
    assert_eq!(step(t, "logging_info_delivers")["log"]["level"], "info");

    let updates = step(t, "resource_updates");
    assert!(
        updates["updated"].as_array().unwrap().iter().all(|u| u.is_string()),
        "resources/updated missing: {updates}"
    );

    let cancel = step(t, "cancellation");
    assert_eq!(cancel["outcome"]["rejected"], true, "cancelled call did not reject: {cancel}");
    assert_eq!(cancel["endedWithin2s"], true);
    assert_eq!(texts(&cancel["echoAfterCancel"]), "Echo: still alive after cancel");
    step(t, "ping_final");

    let reqs = t["serverToClientRequests"].as_array().unwrap();
    for m in ["elicitation/create", "roots/list", "sampling/createMessage"] {
        assert!(reqs.iter().any(|r| r == m), "server->client {m} never seen");
    }
}

#[test]
fn everything_server_is_identical_through_the_router() {
    ensure_npm();
    let entry = everything_entry();
    let direct_cmd = ["node", entry.to_str().unwrap(), "stdio"];

    let direct_run = run_client("everything", &direct_cmd);
    let direct = direct_run.transcript("everything, direct");
    check_everything_features(&direct);

    let plugins = TempDir::new("plugins");
    let routed_cmd = routed(&direct_cmd, &plugins);
    let routed_run = run_client("everything", &as_strs(&routed_cmd));
    let routed = routed_run.transcript("everything, through switchyard");
    eprintln!("everything: direct {:?}, through switchyard {:?}", direct_run.elapsed, routed_run.elapsed);
    assert_same_transcript(&direct, &routed, &routed_run);
}

/// The daemon's HTTP front (`[http]`) serving server-everything (run over stdio behind it), and
/// the target both SDK clients reach it at: `/mcp/everything` with the bearer token.
fn everything_behind_the_http_front() -> (switchyard_testkit::daemon::Home, tokio::runtime::Runtime, ClientTarget) {
    let home = switchyard_testkit::daemon::Home::new();
    let entry = everything_entry();
    home.write_config(&format!(
        "[servers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\n[http]\nlisten = \"127.0.0.1:0\"\n",
        serde_json::json!(entry.to_str().unwrap())
    ));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (base, token) = rt.block_on(home.start_http());
    let target = ClientTarget::Url {
        url: format!("{base}/mcp/everything"),
        transport: RemoteTransport::StreamableHttp,
        headers: vec![format!("Authorization: Bearer {token}")],
    };
    (home, rt, target)
}

#[test]
fn the_typescript_sdk_over_http_through_the_daemon_sees_what_it_sees_over_stdio() {
    ensure_npm();
    let entry = everything_entry();
    let direct_run = run_client("everything", &["node", entry.to_str().unwrap(), "stdio"]);
    let direct = direct_run.transcript("everything, direct over stdio");
    check_everything_features(&direct);

    let (home, rt, target) = everything_behind_the_http_front();
    let routed_run = crate::transcript::run(node_client("everything", &target), "client.mjs", CLIENT_TIMEOUT);
    let routed = routed_run.transcript("everything, over HTTP through the daemon's front");
    eprintln!("everything: direct {:?}, over the HTTP front {:?}", direct_run.elapsed, routed_run.elapsed);
    assert_same_transcript(&direct, &routed, &routed_run);
    rt.block_on(home.shutdown());
}

#[test]
fn the_python_sdk_over_http_through_the_daemon_sees_what_it_sees_over_stdio() {
    ensure_npm();
    let entry = everything_entry();
    let calls = serde_json::json!([
        ["echo", {"message": "héllo"}],
        ["get-sum", {"a": 2, "b": 3}],
        ["get-structured-content", {"location": "New York"}],
        ["trigger-long-running-operation", {"duration": 1, "steps": 3}],
        ["no-such-tool", {}]
    ]);
    let direct = ClientTarget::Command(vec!["node".into(), entry.display().to_string(), "stdio".into()]);
    let (home, rt, front) = everything_behind_the_http_front();
    for mode in ["legacy", "auto"] {
        let want = crate::transcript::run(python_client(mode, &calls, &direct), "client.py", CLIENT_TIMEOUT)
            .transcript("client.py, direct over stdio");
        assert!(
            want.to_string().contains("Echo: h\\u00e9llo") || want.to_string().contains("Echo: héllo"),
            "the direct transcript lacks the echo: {want}"
        );
        let got = crate::transcript::run(python_client(mode, &calls, &front), "client.py", CLIENT_TIMEOUT)
            .transcript("client.py over HTTP through the daemon's front");
        assert_eq!(want, got, "mode {mode}: the Python SDK sees something else over the HTTP front");
    }
    rt.block_on(home.shutdown());
}

// ------------------------------------------------------------------------------------------------
// server-filesystem

fn check_filesystem_features(t: &Value) {
    assert_eq!(step(t, "initialize")["serverInfo"]["name"], "secure-filesystem-server");
    let roots = step(t, "roots_initial");
    assert_eq!(roots["serverAskedForRoots"], true);
    assert_eq!(roots["settled"], true, "client roots never took effect: {roots}");

    let tools = step(t, "tools_list")["tools"].as_array().unwrap();
    for name in [
        "read_text_file",
        "write_file",
        "edit_file",
        "list_directory",
        "move_file",
        "get_file_info",
        "search_files",
        "list_allowed_directories",
    ] {
        let tool = tools.iter().find(|x| x["name"] == name).unwrap_or_else(|| panic!("tool {name} missing"));
        assert!(tool["annotations"].is_object(), "{name} lost its annotations");
    }
    assert_eq!(tools.iter().find(|x| x["name"] == "read_text_file").unwrap()["annotations"]["readOnlyHint"], true);

    assert_eq!(texts(step(t, "read_text_file")), "hello\nworld\n");
    assert_eq!(texts(step(t, "read_after_edit")), "hello\nswitchyard\n");
    assert!(texts(step(t, "list_directory")).contains("[DIR] sub"));
    assert!(texts(step(t, "get_file_info")).contains("modified: <time>"));
    assert_eq!(texts(step(t, "search_files")), "<ROOT>/ws/sub/c.txt");
    assert_eq!(step(t, "read_missing_file")["isError"], true);
    assert_eq!(step(t, "write_outside_roots")["isError"], true, "roots did not restrict the server");
    let changed = step(t, "roots_changed");
    assert_eq!(changed["serverReRequestedRoots"], true);
    assert_eq!(changed["settled"], true, "roots change never took effect: {changed}");
    assert!(changed["writeInNewRoot"]["isError"].is_null());
}

#[test]
fn filesystem_server_is_identical_through_the_router() {
    ensure_npm();
    let entry = filesystem_entry();

    let d1 = TempDir::new("fs-direct");
    let direct_run = run_client("filesystem", &["node", entry.to_str().unwrap(), d1.path_str()]);
    let direct = direct_run.transcript("filesystem, direct");
    check_filesystem_features(&direct);

    let d2 = TempDir::new("fs-routed");
    let plugins = TempDir::new("plugins");
    let routed_cmd = routed(&["node", entry.to_str().unwrap(), d2.path_str()], &plugins);
    let routed_run = run_client("filesystem", &as_strs(&routed_cmd));
    let routed = routed_run.transcript("filesystem, through switchyard");
    eprintln!("filesystem: direct {:?}, through switchyard {:?}", direct_run.elapsed, routed_run.elapsed);
    assert_same_transcript(&direct, &routed, &routed_run);
}

// ------------------------------------------------------------------------------------------------
// Cancellation as the server sees it. server-everything does not reveal what it received, so this
// uses switchyard's own fixture server, which journals every message it reads (one JSON line per
// message, the message under "msg"). The SDK client aborts a `sleep` call; the fixture must then
// have received notifications/cancelled carrying the id of the tools/call IT received (the
// router rewrites ids, so the client's id would be wrong).

/// The id of the `sleep` tools/call in the journal, and whether a cancellation for exactly that id
/// followed. Polls briefly: the fixture may still be flushing when the client has already exited.
fn journal_cancel(path: &Path) -> (Option<Value>, bool, Vec<Value>) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let entries = switchyard_testkit::journal(path);
        let msgs: Vec<&Value> = entries.iter().map(|e| &e["msg"]).collect();
        let call_id = msgs
            .iter()
            .find(|m| m["method"] == "tools/call" && m["params"]["name"] == "sleep")
            .map(|m| m["id"].clone());
        let cancelled = call_id.as_ref().is_some_and(|id| {
            msgs.iter().any(|m| m["method"] == "notifications/cancelled" && &m["params"]["requestId"] == id)
        });
        if cancelled || Instant::now() > deadline {
            return (call_id, cancelled, entries);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn check_fixture_cancel(what: &str, run: &Run, journal_path: &Path) {
    let t = run.transcript(what);
    let cancel = step(&t, "cancellation");
    assert_eq!(cancel["outcome"]["rejected"], true, "{what}: cancelled call did not reject: {cancel}");
    assert_eq!(cancel["endedWithin2s"], true, "{what}: cancelled call did not end promptly: {cancel}");
    assert!(
        texts(step(&t, "echo_after_cancel")).contains("still alive after cancel"),
        "{what}: session broken after cancel: {t}"
    );
    let (call_id, cancelled, entries) = journal_cancel(journal_path);
    let dump = entries.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n");
    assert!(
        call_id.is_some(),
        "{what}: the fixture never received the sleep call; journal:\n{dump}\n--- stderr\n{}",
        run.stderr
    );
    assert!(
        cancelled,
        "{what}: the fixture received no notifications/cancelled with requestId {} (its own id of the sleep call); journal:\n{dump}\n--- stderr\n{}",
        call_id.unwrap(),
        run.stderr
    );
}

#[test]
fn sdk_cancellation_reaches_the_server_with_its_own_id() {
    ensure_npm();
    // Directly first: proves the fixture and the client agree on the contract, so a failure in
    // the routed half below is the router's.
    let dir = TempDir::new("fixture-cancel");
    let direct_journal = dir.join("direct.jsonl");
    let direct_run =
        run_client("fixture-cancel", &[switchyard(), "fixture", "--journal", direct_journal.to_str().unwrap()]);
    check_fixture_cancel("fixture, direct", &direct_run, &direct_journal);

    let routed_journal = dir.join("routed.jsonl");
    let plugins = TempDir::new("plugins");
    let routed_cmd = routed(&[switchyard(), "fixture", "--journal", routed_journal.to_str().unwrap()], &plugins);
    let routed_run = run_client("fixture-cancel", &as_strs(&routed_cmd));
    check_fixture_cancel("fixture, through switchyard", &routed_run, &routed_journal);
}
