//! The real Python SDK client (`mcp` from PyPI, pinned in tests/python/requirements.txt), in
//! both its protocol modes, directly and through `switchyard run`.
//!
//! `tests/python/client.py` connects the SDK's `Client` to a server command in `auto` mode
//! (server/discover first: 2026-07-28 when the server speaks it, else the initialize fallback)
//! or `legacy` mode (initialize, 2025-11-25), lists what the server offers, makes a few calls and
//! prints a JSON transcript. Each test runs it directly and with the router in front and requires
//! equal transcripts: a client must get through switchyard the protocol version, capabilities
//! and answers it gets directly. The servers: the Python SDK's own (tests/python/server.py, which
//! speaks both eras), and server-everything and server-filesystem from npm (2025-11-25 only).
//!
//! The setup makes a virtualenv under the target directory (reused while requirements.txt is
//! unchanged) with `python3 -m venv` and `pip install`. Without python3 (>= 3.10, with venv and
//! pip) these tests FAIL with a message saying what is missing, like the npm tests.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::npm_setup::{ensure_npm, everything_entry, filesystem_entry};
use crate::transcript::Run;
use serde_json::{Value, json};

/// Upper bound for one client run; generous because CI machines are shared and slow.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

use switchyard_testkit::KillOnDrop;
use switchyard_testkit::python_venv::{python_dir, venv_python};

// ------------------------------------------------------------------------------------------------
// Running the client.

fn run_client(mode: &str, calls: &Value, server_cmd: &[String]) -> Run {
    let python = venv_python();
    let mut cmd = Command::new(&python);
    cmd.arg(python_dir().join("client.py"))
        .arg(mode)
        .arg(calls.to_string())
        .arg("--")
        .args(server_cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "info");
    }
    crate::transcript::run(cmd, "client.py", CLIENT_TIMEOUT)
}

/// `switchyard run` in front of `server_cmd`, with an empty plugins directory.
fn routed(server_cmd: &[String], plugins: &Path) -> Vec<String> {
    let mut v =
        vec![switchyard_testkit::bin().to_string(), "run".into(), "--plugins".into(), plugins.display().to_string()];
    v.push("--".into());
    v.extend(server_cmd.iter().cloned());
    v
}

/// Runs `mode` directly and through the router; both transcripts must be equal. Returns the
/// direct one for feature checks.
fn same_both_ways(what: &str, mode: &str, calls: &Value, server_cmd: &[String]) -> Value {
    let direct_run = run_client(mode, calls, server_cmd);
    let direct = direct_run.transcript(&format!("{what}, {mode}, direct"));
    let plugins = switchyard_testkit::temp_dir();
    let routed_run = run_client(mode, calls, &routed(server_cmd, plugins.path()));
    let through = routed_run.transcript(&format!("{what}, {mode}, through switchyard"));
    eprintln!("{what} ({mode}): direct {:?}, through switchyard {:?}", direct_run.elapsed, routed_run.elapsed);
    if direct != through {
        let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap();
        let mut report = String::new();
        for key in ["protocolVersion", "handshake", "capabilities", "mode"] {
            if direct[key] != through[key] {
                report += &format!(
                    "\n=== `{key}`\n--- direct\n{}\n--- through switchyard\n{}",
                    pretty(&direct[key]),
                    pretty(&through[key])
                );
            }
        }
        let empty = serde_json::Map::new();
        let (d, r) = (direct["steps"].as_object().unwrap_or(&empty), through["steps"].as_object().unwrap_or(&empty));
        for name in d.keys().chain(r.keys().filter(|k| !d.contains_key(*k))) {
            if d.get(name) != r.get(name) {
                report += &format!(
                    "\n=== step `{name}`\n--- direct\n{}\n--- through switchyard\n{}",
                    d.get(name).map(pretty).unwrap_or_default(),
                    r.get(name).map(pretty).unwrap_or_default()
                );
            }
        }
        panic!(
            "{what} ({mode}): the transcript through switchyard differs from the direct one:{report}\n--- stderr of the routed run\n{}",
            routed_run.stderr
        );
    }
    direct
}

fn texts(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

// ------------------------------------------------------------------------------------------------
// The tests.

#[test]
fn python_sdk_server_of_both_eras_is_identical_through_the_router_in_every_mode() {
    let server = vec![venv_python().display().to_string(), python_dir().join("server.py").display().to_string()];
    let calls =
        json!([["add", {"a": 2, "b": 40}], ["echo", {"text": "through switchyard"}], ["fail", {"reason": "x"}]]);
    // "2026-07-28": the client adopts that version without a probe; its first request is a
    // tools/list carrying the envelope, with no initialize and no server/discover before it.
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        let t = same_both_ways("python server", mode, &calls, &server);
        assert_eq!(t["protocolVersion"], version, "{mode}: {t}");
        let names: Vec<&str> =
            t["steps"]["tools_list"]["tools"].as_array().unwrap().iter().filter_map(|x| x["name"].as_str()).collect();
        assert_eq!(names, ["add", "echo", "fail"], "{mode}");
        assert_eq!(texts(&t["steps"]["call_0_add"]), "42", "{mode}: {t}");
        assert_eq!(texts(&t["steps"]["call_1_echo"]), "through switchyard", "{mode}");
        assert_eq!(t["steps"]["call_2_fail"]["isError"], true, "{mode}");
        if version == "2026-07-28" {
            // `Client.listen()` matches the acknowledgement by the subscription id the server
            // stamps on it: the listen request's id, which the router rewrote.
            assert_eq!(t["steps"]["listen"]["acknowledged"], true, "{mode}: {t}");
        }
        if mode != version {
            // Negotiated modes learn the server's capabilities (a pinned version knows none).
            assert!(t["capabilities"]["tools"].is_object(), "{mode}: {t}");
            assert!(t["steps"]["resources_list"]["resources"][0]["uri"] == "fixture://greeting", "{mode}: {t}");
        }
    }
}

/// `Client.listen()` of a 2026-07-28 client is acknowledged through the daemon: by `connect`
/// and by the HTTP front (which streams the listen POST: headers at once, events as they come).
#[test]
fn a_listen_stream_is_acknowledged_through_connect_and_the_http_front() {
    use switchyard_testkit::http_servers::RemoteTransport;
    use switchyard_testkit::sdk_clients::{ClientTarget, python_client};
    let home = switchyard_testkit::daemon::Home::new();
    home.write_config(&format!(
        "[servers.py]\ncommand = {}\nargs = [{}]\n[http]\nlisten = \"127.0.0.1:0\"\n",
        json!(venv_python().display().to_string()),
        json!(python_dir().join("server.py").display().to_string()),
    ));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (base, token) = rt.block_on(home.start_http());
    let calls = json!([["add", {"a": 2, "b": 40}]]);
    let connect = ClientTarget::Command(home.connect_command("py"));
    let front = ClientTarget::Url {
        url: format!("{base}/mcp/py"),
        transport: RemoteTransport::StreamableHttp,
        headers: vec![format!("Authorization: Bearer {token}")],
    };
    for (what, target) in [("connect", connect), ("the HTTP front", front)] {
        let mut cmd = python_client("2026-07-28", &calls, &target);
        cmd.envs(home.envs());
        let t = crate::transcript::run(cmd, "client.py", CLIENT_TIMEOUT).transcript(what);
        assert_eq!(t["protocolVersion"], "2026-07-28", "{what}: {t}");
        assert_eq!(t["steps"]["listen"]["acknowledged"], true, "through {what}: {t}");
    }
    rt.block_on(home.shutdown());
}

#[test]
fn everything_server_is_identical_through_the_router_for_the_python_sdk_in_both_modes() {
    ensure_npm();
    let server = vec!["node".to_string(), everything_entry().display().to_string(), "stdio".into()];
    let calls = json!([["echo", {"message": "hello from python"}], ["get-sum", {"a": 2, "b": 40}]]);
    for mode in ["auto", "legacy"] {
        let t = same_both_ways("server-everything", mode, &calls, &server);
        // A server of the initialize era: `auto` falls back to initialize, through switchyard too.
        assert_eq!(t["protocolVersion"], "2025-11-25", "{mode}: {t}");
        assert_eq!(t["handshake"]["serverInfo"]["name"], "mcp-servers/everything");
        assert_eq!(texts(&t["steps"]["call_0_echo"]), "Echo: hello from python", "{mode}: {t}");
        assert!(texts(&t["steps"]["call_1_get-sum"]).contains("42"), "{mode}: {t}");
    }
}

#[test]
fn filesystem_server_is_identical_through_the_router_for_the_python_sdk_in_both_modes() {
    ensure_npm();
    let dir = switchyard_testkit::temp_dir();
    let root = dir.path().canonicalize().unwrap();
    fs::write(root.join("a.txt"), "hello\nworld\n").unwrap();
    fs::create_dir(root.join("sub")).unwrap();
    let server = vec!["node".to_string(), filesystem_entry().display().to_string(), root.display().to_string()];
    let file = root.join("a.txt").display().to_string();
    let calls = json!([
        ["read_text_file", {"path": file}],
        ["list_directory", {"path": root.display().to_string()}],
        ["read_text_file", {"path": "/etc/hostname"}],
    ]);
    for mode in ["auto", "legacy"] {
        let t = same_both_ways("server-filesystem", mode, &calls, &server);
        assert_eq!(t["protocolVersion"], "2025-11-25", "{mode}: {t}");
        assert_eq!(texts(&t["steps"]["call_0_read_text_file"]), "hello\nworld\n", "{mode}: {t}");
        assert!(texts(&t["steps"]["call_1_list_directory"]).contains("[DIR] sub"), "{mode}: {t}");
        assert_eq!(t["steps"]["call_2_read_text_file"]["isError"], true, "{mode}: outside the roots: {t}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_router_serves_a_2025_and_a_2026_client_of_the_same_server_each_in_its_own_era() {
    // The instance switchyard initialised for the first (legacy) client cannot serve the second
    // client's 2026-07-28 requests: a server of both eras fixes each connection's era by its
    // first request. The second client must still get 2026-07-28, as it would directly.
    let server = vec![venv_python().display().to_string(), python_dir().join("server.py").display().to_string()];
    let calls = json!([["add", {"a": 1, "b": 2}]]);
    let dir = switchyard_testkit::temp_dir();
    let sock = dir.path().join("router.sock").display().to_string();
    let plugins = dir.path().join("plugins");
    fs::create_dir(&plugins).unwrap();
    let mut args = vec!["--listen", sock.as_str(), "--no-stdio", "--plugins", plugins.to_str().unwrap(), "--"];
    args.extend(server.iter().map(String::as_str));
    let _router = switchyard_testkit::Proc::router(&args);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Path::new(&sock).exists() {
        assert!(Instant::now() < deadline, "the router never made its socket {sock}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let connect = vec![switchyard_testkit::bin().to_string(), "connect".into(), sock.clone()];
    tokio::task::block_in_place(|| {
        for mode in ["legacy", "auto"] {
            let direct = run_client(mode, &calls, &server).transcript(&format!("{mode}, direct"));
            let shared_run = run_client(mode, &calls, &connect);
            let shared = shared_run.transcript(&format!("{mode}, through the shared router"));
            assert_eq!(
                direct, shared,
                "{mode}: a client of the shared router got another transcript than directly\n--- stderr\n{}",
                shared_run.stderr
            );
        }
    });
}

/// Input rounds (2026-07-28) over a pool: the Python SDK answers a call that needs the client's
/// input `input_required`, with a `requestState` sealed under a key of the process that made it,
/// and refuses that state in any other process. Six calls at once through the daemon (`connect`),
/// on a pool of up to 3 instances that take one call at a time; each round of each call keeps its
/// instance busy for a second, and the client answers after a wait: every call completes, and
/// the pool did spread them over several instances. Without the retries pinned to the instance
/// that asked, a retry that lands elsewhere is refused by the server.
#[test]
fn input_rounds_complete_over_a_pool_each_retry_on_the_instance_that_asked() {
    let home = switchyard_testkit::daemon::Home::new();
    home.write_config(&format!(
        "[servers.ask]\ncommand = {}\nargs = [{}]\n[servers.ask.pools.default]\nmax = 3\nmax_inflight = 1\n",
        json!(venv_python().display().to_string()),
        json!(python_dir().join("asking_server.py").display().to_string()),
    ));
    let mut cmd = Command::new(venv_python());
    cmd.arg(python_dir().join("input_rounds.py"))
        .args(["6", "300", "1000", "--"])
        .args(home.connect_command("ask"))
        .envs(home.envs())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let run = crate::transcript::run(cmd, "input_rounds.py", CLIENT_TIMEOUT);
    let out = run.transcript("input rounds through connect");
    let results = out["results"].as_array().expect("results");
    let mut pids = std::collections::BTreeSet::new();
    for (i, r) in results.iter().enumerate() {
        let text = r.as_str().unwrap_or_else(|| panic!("call {i} failed: {r}\n--- stderr\n{}", run.stderr));
        let pid = text.strip_prefix(&format!("q{i}: yes (pid ")).and_then(|t| t.strip_suffix(')'));
        pids.insert(pid.unwrap_or_else(|| panic!("call {i}: {text}")).to_string());
    }
    assert_eq!(results.len(), 6);
    assert!(pids.len() >= 2, "the calls all ran on one instance, which tests nothing: {pids:?}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(home.shutdown());
}

/// `Mcp-Param-*` headers (2026-07-28): the Python SDK server's tool `where` marks its argument
/// `region` with `x-mcp-header: Region`, and the SDK refuses a call that carries the argument
/// without the header (HTTP 400, -32020). A 2026-07-28 client through the daemon (`connect`, so
/// no headers of its own) gets the call served as directly: switchyard, the server's client,
/// sends the header it learnt from the tool list.
#[test]
fn a_remote_2026_server_gets_the_headers_its_tools_mirror() {
    use switchyard_testkit::http_servers::{RemoteTransport, free_port, local, wait_for_port};
    use switchyard_testkit::sdk_clients::{ClientTarget, python_client};
    let port = free_port();
    let _server = KillOnDrop(
        Command::new(venv_python())
            .arg(python_dir().join("header_server.py"))
            .args(["--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start header_server.py"),
    );
    assert!(wait_for_port(local(port), Duration::from_secs(60)), "header_server.py did not listen on {port}");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let home = switchyard_testkit::daemon::Home::new();
    home.write_config(&format!("[servers.h]\nurl = {}\ntransport = \"streamable-http\"\n", json!(url)));
    let calls = json!([["where", {"region": "eu-west"}]]);
    let direct = ClientTarget::url(url.as_str(), RemoteTransport::StreamableHttp);
    let through = ClientTarget::Command(home.connect_command("h"));
    let mut transcripts = Vec::new();
    for (what, target) in [("directly", direct), ("through connect", through)] {
        let mut cmd = python_client("2026-07-28", &calls, &target);
        cmd.envs(home.envs());
        let t = crate::transcript::run(cmd, "client.py", CLIENT_TIMEOUT).transcript(what);
        assert_eq!(t["protocolVersion"], "2026-07-28", "{what}: {t}");
        assert_eq!(texts(&t["steps"]["call_0_where"]), "served in eu-west", "{what}: {t}");
        transcripts.push(t);
    }
    assert_eq!(transcripts[0], transcripts[1], "a client through the daemon saw another server than directly");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(home.shutdown());
}

/// A policy refusal of `tools/call` reaches the Python SDK as a tool result (`isError` and the
/// reason, which a client hands to the model) in both eras, not as a JSON-RPC error a client may
/// keep from the model. Through `switchyard run`, `rate-limit` lets `echo` through once a minute
/// (the second call says when the next is allowed) and `tool-filter` hides `add` from every
/// client (its call says the tool is not available to this client).
#[test]
fn a_policy_refusal_reaches_the_python_sdk_as_a_tool_result_in_both_eras() {
    let dir = switchyard_testkit::temp_dir();
    let plugins = dir.path().join("plugins");
    fs::create_dir(&plugins).unwrap();
    for file in ["rate-limit.wasm", "tool-filter.wasm"] {
        fs::copy(switchyard_testkit::example_plugins().join(file), plugins.join(file)).unwrap();
    }
    let config = dir.path().join("switchyard.toml");
    fs::write(
        &config,
        "[[plugins]]\nfile = \"rate-limit.wasm\"\nconfig = { tools = { \"echo\" = { per_client_per_minute = 1 } } }\n\
         [[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = '{\"clients\": {\"*\": {\"hide\": [\"add\"]}}}'\n",
    )
    .unwrap();
    let server = vec![venv_python().display().to_string(), python_dir().join("server.py").display().to_string()];
    let mut routed = vec![switchyard_testkit::bin().to_string(), "run".into(), "--config".into()];
    routed.extend([config.display().to_string(), "--".into()]);
    routed.extend(server);
    let calls = json!([["echo", {"text": "first"}], ["echo", {"text": "second"}], ["add", {"a": 2, "b": 40}]]);
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let run = run_client(mode, &calls, &routed);
        let t = run.transcript(&format!("refusals, {mode}"));
        let steps = &t["steps"];
        let why = format!("{mode}: {t}\n--- stderr\n{}", run.stderr);
        assert_eq!(t["protocolVersion"], version, "{why}");
        assert_eq!(texts(&steps["call_0_echo"]), "first", "{why}");
        let limited = &steps["call_1_echo"];
        assert_eq!(limited["isError"], true, "{why}");
        let said = texts(limited);
        assert!(said.starts_with("The call of tool `echo` was refused by policy plugin `rate-limit.wasm`"), "{why}");
        assert!(said.contains("rate limit `echo` (at most 1 call a minute per client)"), "{why}");
        assert!(
            said.contains("The next call is allowed in ") && said.ends_with("before calling `echo` again."),
            "{why}"
        );
        let hidden = &steps["call_2_add"];
        assert_eq!(hidden["isError"], true, "{why}");
        let said = texts(hidden);
        assert!(said.contains("`tool-filter.wasm`") && said.contains("tool `add` is not available to client"), "{why}");
        assert!(said.contains("use another tool"), "{why}");
    }
}

/// The tester's case: the Python SDK client raises "has an output schema but did not return
/// structured content" for a result without it, and read_text_file of server-filesystem declares
/// one. Through `switchyard run` with result-cap under its documented entry, a 5 MB read reaches
/// the SDK's app cut, with its structuredContent (valid against the schema, which the SDK checks).
#[test]
fn python_sdk_client_reads_a_5_mb_file_cut_by_result_cap_with_its_structured_content() {
    ensure_npm();
    let root = switchyard_testkit::temp_dir();
    let big = root.path().join("big.log");
    let text = ("0123456789abcdef".repeat(4) + "\n").repeat(5 * 1024 * 1024 / 65);
    fs::write(&big, &text).unwrap();
    let plugins = switchyard_testkit::temp_dir();
    fs::copy(switchyard_testkit::example_plugins().join("result-cap.wasm"), plugins.path().join("result-cap.wasm"))
        .unwrap();
    let config = plugins.path().join("switchyard.toml");
    fs::write(&config, super::content_plugins::documented_entry("result-cap.wasm")).unwrap();
    let server = ["node".to_string(), filesystem_entry().display().to_string(), root.path().display().to_string()];
    let mut routed = routed(&server, plugins.path());
    routed.splice(2..2, ["--config".to_string(), config.display().to_string()]);
    let calls = json!([["read_text_file", {"path": big.to_str().unwrap()}]]);
    let t = run_client("legacy", &calls, &routed).transcript("the Python SDK client through result-cap");
    let r = &t["steps"]["call_0_read_text_file"];
    assert!(r.get("error").is_none() && r["isError"] != true, "{r}");
    let structured = r["structuredContent"]["content"].as_str().unwrap_or_else(|| panic!("no structuredContent: {r}"));
    assert!(structured.len() > 1000 && text.starts_with(structured), "{} bytes kept", structured.len());
    let note = r["content"].as_array().unwrap().last().unwrap()["text"].as_str().unwrap();
    assert!(
        note.starts_with("[result-cap: this result was cut")
            && note.contains(&format!("Its text was {} bytes", text.len())),
        "{note}"
    );
}
