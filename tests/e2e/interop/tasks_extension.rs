//! Tasks of the 2026-07-28 era (the `io.modelcontextprotocol/tasks` extension, SEP-2663) through
//! a pool: a FastMCP server with its tasks extension (tests/python/tasks_server.py, pinned in
//! tests/python/requirements-tasks.txt) keeps each task in the memory of the process whose
//! `tools/call` created it, so every `tasks/get` and `tasks/cancel` must reach that process.
//! tests/python/tasks_client.py, a raw JSON-RPC client of the extension, creates six tasks at once
//! over a pool of three instances through `switchyard connect` to the daemon and through the
//! daemon's HTTP front, polls them to the end, cancels a seventh and asks for an unknown one; it
//! must see what it sees connected to one server directly, with the six spread over more than
//! one of the three instances. The same client reaches the server over Streamable HTTP through
//! `connect` too.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::KillOnDrop;
use switchyard_testkit::daemon::{Home, status_server};
use switchyard_testkit::http_servers::{free_port, local, wait_for_port};
use switchyard_testkit::python_venv::{python_dir, tasks_venv_python};

/// Six one-second tasks polled five times a second, with room for a slow machine.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// A Python server takes a few seconds to import FastMCP; three start at once on a shared machine.
const POOL_READY: Duration = Duration::from_secs(90);

/// tasks_client.py with `args` (`-- COMMAND...` or `--url URL --header H`), its transcript.
fn tasks_transcript(what: &str, args: &[String], envs: &[(String, String)]) -> Value {
    let mut cmd = Command::new(tasks_venv_python());
    cmd.arg(python_dir().join("tasks_client.py"))
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let run = crate::transcript::run(cmd, "tasks_client.py", CLIENT_TIMEOUT);
    eprintln!("{what}: {:?}", run.elapsed);
    run.transcript(what)
}

/// Every task was created, completed under the id it was handed and returned its own result; the
/// cancel reached the seventh; an id nobody handed out is refused as unknown.
fn check_tasks(what: &str, t: &Value) {
    let pretty = serde_json::to_string_pretty(t).unwrap();
    let steps = &t["steps"];
    assert_eq!(steps["tools"], serde_json::json!(["square"]), "{what}: {pretty}");
    assert_eq!(steps["create"]["resultTypes"], serde_json::json!(vec!["task"; 6]), "{what}: {pretty}");
    assert_eq!(steps["create"]["distinct"], 6, "{what}: {pretty}");
    assert_eq!(steps["poll"], serde_json::json!(vec!["completed"; 6]), "{what}: {pretty}");
    assert_eq!(steps["sameTaskId"], serde_json::json!(vec![true; 6]), "{what}: {pretty}");
    let squares: Vec<String> = (0..6).map(|n| format!("{n}^2 = {}", n * n)).collect();
    assert_eq!(steps["results"], serde_json::json!(squares), "{what}: {pretty}");
    assert_eq!(steps["cancel"], serde_json::json!({"answered": true, "status": "cancelled"}), "{what}: {pretty}");
    assert_eq!(steps["unknownTask"], serde_json::json!({"refused": true, "code": -32602}), "{what}: {pretty}");
}

/// Runs the client until its six tasks landed on more than one instance, checking every run. How
/// many instances take a task depends on how the six creates overlap (each is answered at once, so
/// on a loaded machine one instance may answer all six before the next arrives); more than one is
/// what makes a poll on the wrong instance possible, so a run on one proves too little and is
/// repeated, up to five runs.
fn spread_over_instances(what: &str, direct: &Value, mut run: impl FnMut() -> Value) {
    let mut runs = Vec::new();
    for _ in 0..5 {
        let routed = run();
        check_tasks(what, &routed);
        assert_eq!(direct["steps"], routed["steps"], "{what}");
        if routed["pids"].as_u64() >= Some(2) {
            return;
        }
        runs.push(routed);
    }
    panic!("{what}: in five runs the six tasks always ran on one instance: {runs:?}");
}

#[test]
fn six_extension_tasks_over_a_pool_of_three_complete_through_connect_and_the_front() {
    let python = tasks_venv_python().display().to_string();
    let server = python_dir().join("tasks_server.py").display().to_string();
    let direct = tasks_transcript("tasks extension, direct", &["--".into(), python.clone(), server.clone()], &[]);
    check_tasks("directly", &direct);
    assert_eq!(direct["pids"], 1, "one server process: {direct}");

    let home = Home::new();
    home.write_config(&format!(
        "[servers.tasks]\ncommand = {}\nargs = [{}]\n[servers.tasks.pools.default]\nmax = 3\nmax_inflight = 1\n[http]\nlisten = \"127.0.0.1:0\"\n",
        Value::from(python),
        Value::from(server)
    ));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_rt = rt.enter();
    let (base, token) = rt.block_on(home.start_http());
    // A 2026-07-28 pool has no minimum: it grows with its load. Three plain calls (no task asked
    // for, so each holds its instance) outlasting a server's start grow it to three, with one call
    // at a time per instance; then the first three of the six calls made at once land on three
    // idle instances.
    let mut opener = home.connect("tasks");
    let mut client = opener.client();
    let plain = json!({"name": "square", "arguments": {"n": 1, "seconds": 8}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "opener", "version": "1.0.0"},
    }});
    let calls: Vec<Value> = (0..3).map(|_| rt.block_on(client.send_request("tools/call", plain.clone()))).collect();
    let three_ready = |s: &Value| {
        status_server(s, "tasks")
            .and_then(|t| t["instances"].as_array())
            .is_some_and(|is| is.iter().filter(|i| i["ready"] == true).count() == 3)
    };
    rt.block_on(home.wait_status("three ready instances", POOL_READY, three_ready));
    for id in &calls {
        let answer = rt.block_on(client.wait_response(id));
        let text = answer["result"]["structuredContent"]["result"].as_str();
        assert!(text.is_some_and(|t| t.starts_with("1^2 = 1 ")), "{answer}");
    }

    let mut connect = vec!["--".to_string()];
    connect.extend(home.connect_command("tasks"));
    spread_over_instances("through `switchyard connect`", &direct, || {
        tasks_transcript("tasks extension, through connect", &connect, &home.envs())
    });

    let front = vec![
        "--url".to_string(),
        format!("{base}/mcp/tasks"),
        "--header".into(),
        format!("Authorization: Bearer {token}"),
    ];
    spread_over_instances("through the HTTP front", &direct, || {
        tasks_transcript("tasks extension, through the HTTP front", &front, &[])
    });
    rt.block_on(client.close());
    rt.block_on(home.shutdown());
}

/// The same server over Streamable HTTP, reached through `switchyard connect`: the extension
/// refuses a task request whose `Mcp-Name` header differs from the body's `taskId`, so a
/// `tasks/get` or `tasks/cancel` forwarded with the sealed id its client was handed in that header
/// (and the server's id in the body) would fail.
#[test]
fn extension_tasks_of_a_remote_server_complete_through_connect() {
    let port = free_port();
    let _server = KillOnDrop(
        Command::new(tasks_venv_python())
            .arg(python_dir().join("tasks_server.py"))
            .args(["--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tasks_server.py"),
    );
    assert!(wait_for_port(local(port), POOL_READY), "tasks_server.py did not listen on {port}");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let direct = tasks_transcript("remote tasks extension, direct", &["--url".into(), url.clone()], &[]);
    check_tasks("directly", &direct);

    let home = Home::new();
    home.write_config(&format!("[servers.tasks]\nurl = {}\ntransport = \"streamable-http\"\n", Value::from(url)));
    let mut connect = vec!["--".to_string()];
    connect.extend(home.connect_command("tasks"));
    let routed = tasks_transcript("remote tasks extension, through connect", &connect, &home.envs());
    check_tasks("through `switchyard connect`", &routed);
    assert_eq!(direct["steps"], routed["steps"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(home.shutdown());
}
