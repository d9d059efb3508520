//! Tasks (2025-11-25) through a pool: server-everything's `simulate-research-query` creates a
//! task in the memory of the instance that ran the call, so every poll, result and list must
//! reach that instance. Six tasks are created at once over a pool of three instances, through
//! `switchyard run`, through `switchyard connect` to the daemon, and through the daemon's HTTP
//! front; each client must see what it sees connected to one server directly.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::npm_setup::{ensure_npm, everything_entry};
use switchyard_testkit::daemon::Home;
use switchyard_testkit::http_servers::RemoteTransport;
use switchyard_testkit::sdk_clients::{ClientTarget, node_client};

/// Six tasks of four one-second stages each, polled once a second, with room for a slow machine.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// The pool: three instances, all kept running, so calls made at once spread over them.
const POOL_OF_3: &str = "[pools.default]\nmin = 3\nmax = 3\n";

fn server_args() -> String {
    serde_json::json!([everything_entry().to_str().unwrap(), "stdio"]).to_string()
}

/// The `tasks` scenario of client.mjs against `target`, with `envs` for the processes it starts.
fn tasks_transcript(what: &str, target: &ClientTarget, envs: &[(String, String)]) -> Value {
    let mut cmd = node_client("tasks", target);
    cmd.envs(envs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    crate::transcript::run(cmd, "client.mjs", CLIENT_TIMEOUT).transcript(what)
}

/// Every task completed and returned its own result; the list has all six; an id nobody handed
/// out is refused as unknown.
fn check_tasks(what: &str, t: &Value) {
    let steps = &t["steps"];
    let pretty = serde_json::to_string_pretty(t).unwrap();
    assert_eq!(steps["create"]["count"], 6, "{what}: {pretty}");
    assert_eq!(steps["create"]["distinct"], 6, "{what}: {pretty}");
    assert_eq!(steps["poll"], serde_json::json!(vec!["completed"; 6]), "{what}: {pretty}");
    let ok = serde_json::json!({"report": true, "relatedTaskIsOurs": true});
    assert_eq!(
        steps["results"],
        serde_json::json!([ok.clone(), ok.clone(), ok.clone(), ok.clone(), ok.clone(), ok]),
        "{what}: {pretty}"
    );
    assert_eq!(steps["list"], serde_json::json!({"allSix": true, "completed": 6}), "{what}: {pretty}");
    assert_eq!(steps["unknown_task"], serde_json::json!({"refused": true, "code": -32602}), "{what}: {pretty}");
}

#[test]
fn six_tasks_over_a_pool_of_three_complete_through_run_connect_and_the_front() {
    ensure_npm();
    let entry = everything_entry();
    let direct = tasks_transcript(
        "tasks, direct",
        &ClientTarget::Command(vec!["node".into(), entry.display().to_string(), "stdio".into()]),
        &[],
    );
    check_tasks("directly", &direct);

    // `switchyard run` with a pool of three.
    let home = Home::new();
    let run_config = home.path().join("run.toml");
    std::fs::write(&run_config, format!("[server]\ncommand = \"node\"\nargs = {}\n{POOL_OF_3}", server_args()))
        .unwrap();
    std::fs::create_dir(home.path().join("plugins")).unwrap();
    let run = ClientTarget::Command(vec![
        switchyard_testkit::bin().to_string(),
        "run".into(),
        "--config".into(),
        run_config.display().to_string(),
        "--plugins".into(),
        home.path().join("plugins").display().to_string(),
    ]);
    let routed = tasks_transcript("tasks, through run", &run, &home.envs());
    check_tasks("through `switchyard run`", &routed);
    assert_eq!(direct["steps"], routed["steps"]);

    // The daemon, reached by `connect` and by the HTTP front.
    home.write_config(&format!(
        "[servers.everything]\ncommand = \"node\"\nargs = {}\n[servers.everything.pools.default]\nmin = 3\nmax = 3\n[http]\nlisten = \"127.0.0.1:0\"\n",
        server_args()
    ));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (base, token) = rt.block_on(home.start_http());
    let connect = ClientTarget::Command(home.connect_command("everything"));
    let routed = tasks_transcript("tasks, through connect", &connect, &home.envs());
    check_tasks("through `switchyard connect`", &routed);
    let front = ClientTarget::Url {
        url: format!("{base}/mcp/everything"),
        transport: RemoteTransport::StreamableHttp,
        headers: vec![format!("Authorization: Bearer {token}")],
    };
    let routed = tasks_transcript("tasks, through the HTTP front", &front, &[]);
    check_tasks("through the HTTP front", &routed);
    // Three instances served them (through `run`, the same pool showed that a poll the pool
    // placed freely would miss its task: "Task not found").
    let status = rt.block_on(home.status_json());
    assert!(status.to_string().contains("everything#3"), "a pool of three instances: {status:#}");
    rt.block_on(home.shutdown());
}

/// A gate the creating call held stays held while its task runs: with fs-keys making the task
/// tool and `echo` exclusive, an `echo` sent after the task was created waits until a poll sees
/// the task completed (polls pass the gate), rather than running while the task still works.
#[tokio::test]
async fn an_exclusive_call_s_gate_is_held_until_its_task_completes() {
    ensure_npm();
    let entry = everything_entry();
    let server = vec!["node".to_string(), entry.display().to_string(), "stdio".to_string()];
    let config = r#"
[[plugins]]
file = "fs-keys.wasm"
config = { writes = ["simulate-research-query", "echo"], path_args = ["path"] }
"#;
    let fs_keys = switchyard_testkit::example_plugins().join("fs-keys.wasm");
    let mut s = crate::setup::Setup::in_front_of(&server, &[], Some(config), &[&fs_keys]).await;
    s.client.initialize().await;
    let args = json!({"name": "simulate-research-query", "arguments": {"topic": "gates"}, "task": {"ttl": 60000}});
    let created = s.client.request("tools/call", args).await;
    let task = created["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("no task: {created}")).to_string();
    let started = Instant::now();
    let echo = s.client.send_request("tools/call", json!({"name": "echo", "arguments": {"message": "after"}})).await;
    let mut completed_at = None;
    for _ in 0..40 {
        let g = s.client.request("tasks/get", json!({"taskId": task})).await;
        if g["result"]["status"] == "completed" {
            completed_at = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let completed_at = completed_at.expect("the task completed within 10 s");
    let answer = s.client.wait_response(&echo).await;
    let echoed_at = started.elapsed();
    assert!(answer["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("after")), "{answer}");
    assert!(echoed_at >= completed_at, "echo ran at {echoed_at:?}, before its task completed at {completed_at:?}");
    assert!(completed_at > Duration::from_secs(2), "the task takes four 1 s stages: {completed_at:?}");
}
