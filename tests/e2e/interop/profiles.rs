//! One daemon, clients that differ: each client reaches server instances that see what a server
//! of its own would (its roots, its capabilities), through `switchyard connect` and the real
//! TypeScript SDK client (`tests/npm/profiles.mjs`), against real servers from npm.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use switchyard_testkit::bin;
use switchyard_testkit::daemon::Home;

use crate::npm_setup::*;

const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);
/// Must match SAMPLING_REPLY in profiles.mjs.
const SAMPLING_REPLY: &str = "switchyard sampled reply";

/// The SDK client with `options`, started (not waited for) against `server_cmd`.
fn client(home: Option<&Home>, options: &[&str], server_cmd: &[&str]) -> Command {
    ensure_npm();
    let mut cmd = Command::new("node");
    cmd.arg(npm_dir().join("profiles.mjs"))
        .args(options)
        .arg("--")
        .args(server_cmd)
        .current_dir(npm_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(home) = home {
        cmd.envs(home.envs());
    }
    cmd
}

/// Runs the clients at once and returns what each saw.
fn run_all(clients: Vec<(&'static str, Command)>) -> Vec<Value> {
    let handles: Vec<_> = clients
        .into_iter()
        .map(|(what, cmd)| {
            let what = what.to_string();
            std::thread::spawn(move || {
                let run = crate::transcript::run(cmd, "profiles.mjs", CLIENT_TIMEOUT);
                run.transcript(&what)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("a client thread panicked")).collect()
}

fn call<'a>(seen: &'a Value, tool: &str) -> &'a Value {
    seen["calls"].as_array().and_then(|c| c.iter().find(|c| c["tool"] == tool)).unwrap_or(&Value::Null)
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The daemon's log, for a failure's message.
async fn daemon_log(home: &Home) -> String {
    let status = home.status_json().await;
    status["log"].as_str().map(|p| std::fs::read_to_string(p).unwrap_or_default()).unwrap_or_default()
}

/// The instances of every server (siblings included) status shows.
fn instances(status: &Value) -> usize {
    status["servers"].as_array().unwrap().iter().map(|s| s["instances"].as_array().map_or(0, Vec::len)).sum()
}

/// [`run_all`] off the async runtime.
async fn run_all_async(clients: Vec<(&'static str, Command)>) -> Vec<Value> {
    tokio::task::spawn_blocking(move || run_all(clients)).await.unwrap()
}

/// server-filesystem confines itself to the roots its client gives. Two clients in two
/// projects start at once through one daemon: each lists only its own project and is refused
/// the other's, as each would be with a server of its own.
#[tokio::test]
async fn two_clients_with_different_roots_each_reach_only_their_own() {
    let home = Home::new();
    let entry = filesystem_entry();
    home.write_config(&format!("[servers.fs]\ncommand = \"node\"\nargs = [{:?}]\n", entry.to_str().unwrap()));
    let (a, b) = (home.path().join("project-a"), home.path().join("project-b"));
    for d in [&a, &b] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("mine.txt"), d.display().to_string()).unwrap();
    }
    let config = home.config_str();
    let connect = [bin(), "connect", "fs", "--config", config.as_str()];
    let opts = |mine: &std::path::Path, other: &std::path::Path| -> Vec<String> {
        let list = |d: &std::path::Path| format!(r#"{{"path":{:?}}}"#, d.to_str().unwrap());
        [
            "--caps",
            "roots",
            "--roots",
            mine.to_str().unwrap(),
            "--hold-ms",
            "1500",
            "--settle-ms",
            "300",
            "--call",
            "list_allowed_directories",
            "--call",
            "list_directory",
            "--args",
            &list(mine),
            "--call",
            "list_directory",
            "--args",
            &list(other),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let (oa, ob) = (opts(&a, &b), opts(&b, &a));
    let seen = run_all_async(vec![
        ("client in project-a", client(Some(&home), &as_strs(&oa), &connect)),
        ("client in project-b", client(Some(&home), &as_strs(&ob), &connect)),
    ])
    .await;
    let log = daemon_log(&home).await;
    for (s, (mine, other)) in seen.iter().zip([(&a, &b), (&b, &a)]) {
        let calls = s["calls"].as_array().unwrap();
        let allowed = calls[0]["text"].as_str().unwrap_or_else(|| panic!("{s}\n{log}"));
        assert!(allowed.contains(mine.to_str().unwrap()), "{s}\n{log}");
        assert!(!allowed.contains(other.to_str().unwrap()), "another client's roots: {s}\n{log}");
        assert!(calls[1]["text"].as_str().is_some_and(|t| t.contains("mine.txt")), "{s}\n{log}");
        let refused = calls[2]["error"].as_str().unwrap_or_default();
        assert!(refused.contains("Access denied") || refused.contains("outside allowed"), "{s}\n{log}");
    }
    let status = home.status_json().await;
    assert_eq!(instances(&status), 2, "one instance per set of roots: {status:#}");
    home.stop().await;
}

/// server-everything registers its sampling, elicitation and roots tools only for a client
/// that declared them. A client without them connects first; a sampling client after it still
/// sees every tool it would see directly, and its sampling call reaches it; the first client's
/// view is unchanged. Two clients alike share one instance.
#[tokio::test]
async fn a_sampling_client_sees_the_sampling_tools_whatever_connected_first() {
    let home = Home::new();
    let entry = everything_entry();
    let entry = entry.to_str().unwrap();
    home.write_config(&format!("[servers.everything]\ncommand = \"node\"\nargs = [{entry:?}, \"stdio\"]\n"));
    let full = ["--caps", "sampling,elicitation,roots", "--roots", "/tmp"];
    let sample = r#"{"prompt":"hello","maxTokens":10}"#;
    let mut direct_opts = full.to_vec();
    direct_opts.extend(["--call", "trigger-sampling-request", "--args", sample]);
    let direct = run_all_async(vec![
        ("bare client, direct", client(None, &[], &["node", entry, "stdio"])),
        ("full client, direct", client(None, &direct_opts, &["node", entry, "stdio"])),
    ])
    .await;
    assert!(direct[1]["tools"].as_array().unwrap().len() > direct[0]["tools"].as_array().unwrap().len());
    let config = home.config_str();
    let connect = [bin(), "connect", "everything", "--config", config.as_str()];
    let bare = run_all_async(vec![("bare client first", client(Some(&home), &["--hold-ms", "500"], &connect))]).await;
    let later = run_all_async(vec![
        ("full client second", client(Some(&home), &direct_opts, &connect)),
        ("bare client again", client(Some(&home), &[], &connect)),
    ])
    .await;
    let log = daemon_log(&home).await;
    assert_eq!(bare[0]["tools"], direct[0]["tools"], "{log}");
    assert_eq!(later[0]["tools"], direct[1]["tools"], "{log}");
    assert_eq!(later[1]["tools"], direct[0]["tools"], "{log}");
    let sampled = call(&later[0], "trigger-sampling-request");
    assert!(sampled["text"].as_str().is_some_and(|t| t.contains(SAMPLING_REPLY)), "{sampled}\n{log}");
    let status = home.status_json().await;
    assert_eq!(instances(&status), 2, "the two bare clients share one instance: {status:#}");
    home.stop().await;
}
