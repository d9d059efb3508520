//! The MCP conformance suite's client authorization scenarios (`auth/*`, the pinned version in
//! tests/conformance) with switchyard as the client under test. The suite starts a resource
//! server and an authorization server per scenario and runs `tests/conformance/oauth-client.mjs`,
//! which starts `switchyard run` on the scenario's URL with a browser command that only follows
//! redirects (curl) and sends initialize, tools/list and a tool call. The sign-in (discovery,
//! registration, PKCE, the redirect, `iss`, scopes, step-up) is all switchyard's.
//!
//! Every scenario the suite lists must pass, but for the exceptions named below with their
//! reason; an unlisted failure fails the test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::npm_setup::*;

/// One scenario may take this long (most take 1 to 3 s).
const SCENARIO_LIMIT: Duration = Duration::from_secs(90);

/// Scenarios switchyard does not claim, and why. All are extensions, not part of the MCP
/// authorization spec.
const EXCEPTIONS: &[(&str, &str)] = &[
    (
        "auth/client-credentials-jwt",
        "extension: the client credentials grant with a JWT assertion, for machine clients",
    ),
    ("auth/client-credentials-basic", "extension: the client credentials grant, for machine clients"),
    (
        "auth/enterprise-managed-authorization",
        "extension: enterprise-managed authorization (token exchange via an IdP)",
    ),
    ("auth/dpop", "extension: DPoP proof-of-possession tokens"),
    ("auth/dpop-nonce", "extension: DPoP proof-of-possession tokens with server nonces"),
    ("auth/wif-jwt-bearer", "extension: workload identity federation (JWT bearer grant)"),
];

/// The client scenarios whose names start with `auth/`, from `conformance list`.
fn auth_scenarios() -> Vec<String> {
    let out = Command::new(node22())
        .arg(conformance_cli())
        .arg("list")
        .current_dir(conformance_dir())
        .output()
        .expect("run `conformance list`");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut in_client = false;
    let mut names = Vec::new();
    for line in text.lines() {
        if !line.starts_with(' ') {
            in_client = line.starts_with("Client scenarios");
            continue;
        }
        if in_client
            && let Some(name) = line.trim().strip_prefix("- ").and_then(|l| l.split_whitespace().next())
            && name.starts_with("auth/")
        {
            names.push(name.to_string());
        }
    }
    names
}

/// Runs one scenario; Ok, or Err with the suite's report.
fn scenario(name: &str, out: &Path) -> Result<(), String> {
    let driver = conformance_dir().join("oauth-client.mjs");
    let node = node22();
    let mut cmd = Command::new(&node);
    cmd.arg(conformance_cli())
        .args(["client", "--scenario", name, "--timeout", "60000", "-o"])
        .arg(out)
        .arg("--command")
        .arg(format!("{} {}", node.display(), driver.display()))
        .env("SWITCHYARD", switchyard_testkit::bin())
        .current_dir(conformance_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let run = crate::transcript::run(cmd, name, SCENARIO_LIMIT);
    let text = format!("{}\n{}", run.stdout, run.stderr);
    if run.status == Some(0) && text.contains("OVERALL: PASSED") {
        Ok(())
    } else {
        let failed: Vec<&str> = text.lines().filter(|l| l.contains("FAILURE") || l.contains("WARNING")).collect();
        Err(format!("exit {:?}; {}", run.status, if failed.is_empty() { text.clone() } else { failed.join("\n") }))
    }
}

#[test]
fn every_auth_client_scenario_passes_with_switchyard_as_the_client() {
    ensure_npm();
    ensure_conformance();
    let curl = Command::new("curl").arg("--version").stdout(Stdio::null()).status();
    assert!(curl.is_ok_and(|s| s.success()), "the browser stand-in needs curl on PATH");
    let names = auth_scenarios();
    assert!(names.len() >= 20, "the suite lists only {names:?}");
    let out = switchyard_testkit::temp_dir();
    let results: Vec<(String, Result<(), String>)> = std::thread::scope(|s| {
        let chunks: Vec<Vec<String>> = names.chunks(names.len().div_ceil(3)).map(|c| c.to_vec()).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let dir = out.path().to_path_buf();
                s.spawn(move || chunk.into_iter().map(|n| (n.clone(), scenario(&n, &dir))).collect::<Vec<_>>())
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut unexpected = Vec::new();
    let mut passed = 0;
    for (name, result) in &results {
        let excepted = EXCEPTIONS.iter().find(|(n, _)| n == name);
        match (result, excepted) {
            (Ok(()), _) => passed += 1,
            (Err(why), None) => unexpected.push(format!("{name}: {why}")),
            (Err(_), Some((_, reason))) => eprintln!("{name}: not claimed ({reason})"),
        }
    }
    eprintln!("auth scenarios: {passed} of {} passed, {} excepted", results.len(), EXCEPTIONS.len());
    assert!(unexpected.is_empty(), "auth scenarios failed:\n{}", unexpected.join("\n\n"));
}

/// A scenario's servers held up for a test of its own: the suite runs a "client" that only
/// writes down the URL and waits. Ends when dropped.
struct HeldScenario {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl HeldScenario {
    fn start(name: &str) -> HeldScenario {
        let dir = switchyard_testkit::temp_dir();
        let script = dir.path().join("hold.sh");
        let url_file = dir.path().join("url");
        std::fs::write(&script, format!("#!/bin/sh\necho \"$1\" > {}\nsleep 120\n", url_file.display())).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let child = Command::new(node22())
            .arg(conformance_cli())
            .args(["client", "--scenario", name, "--timeout", "150000", "--command"])
            .arg(&script)
            .current_dir(conformance_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the conformance suite");
        // Held from here, so a failed start still ends it (Drop).
        let mut held = HeldScenario { child, url: String::new(), _dir: dir };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(url) = std::fs::read_to_string(&url_file)
                && !url.trim().is_empty()
            {
                held.url = url.trim().to_string();
                return held;
            }
            assert!(std::time::Instant::now() < deadline, "the suite did not start scenario {name}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for HeldScenario {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_signed_in_with_login_works_through_connect_and_logout_forgets_it() {
    ensure_npm();
    ensure_conformance();
    let held = HeldScenario::start("auth/metadata-default");
    let home = switchyard_testkit::daemon::Home::new();
    // The daemon never opens a browser here: only `login` signs in.
    home.write_config(&format!(
        "[servers.tracker]\nurl = {:?}\n[servers.tracker.oauth]\nopen_browser = false\nlogin_timeout_ms = 2000\n",
        held.url
    ));
    let config = home.config_str();
    let login = tokio::process::Command::new(switchyard_testkit::bin())
        .args(["login", "tracker", "--config", &config])
        .envs(home.envs())
        .env("BROWSER", "curl -sL -o /dev/null")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&login.stdout);
    assert!(login.status.success(), "login failed:\n{said}\n{}", String::from_utf8_lossy(&login.stderr));
    assert!(said.contains("Signed in to server `tracker`"), "{said}");

    let files = token_files(&home.path().join("state/switchyard/oauth"));
    assert_eq!(files.len(), 1, "{files:?}");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&files[0]).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let stored: serde_json::Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    let token = stored["tokens"]["access_token"].as_str().unwrap().to_string();

    let (_relay, mut c) = home.client("tracker").await;
    let listed = c.request("tools/list", serde_json::json!({})).await;
    assert_eq!(listed["result"]["tools"][0]["name"], "test-tool", "{listed}");
    assert_eq!(c.call_text("test-tool", serde_json::json!({})).await, "test");

    let text = home.status_text().await;
    assert!(text.contains("tracker: signed in (the token expires in"), "{text}");
    let json = home.status_json().await.to_string();
    assert!(!text.contains(&token) && !json.contains(&token), "status shows the token");

    let out = home.cli(&["logout", "tracker", "--config", &config]).await;
    assert!(out.status.success());
    assert!(home.status_text().await.contains("tracker: not signed in (`switchyard login tracker`)"));
    c.close().await;
    home.shutdown().await;
}

/// `switchyard run --config FILE` for `url` with these `[server.oauth]` lines, its tokens under
/// `state`.
fn run_signing_in(url: &str, oauth: &str, state: &Path, browser: &str) -> switchyard_testkit::Proc {
    let config = state.join("switchyard.toml");
    std::fs::write(&config, format!("[server]\nname = \"tracker\"\nurl = {url:?}\n[server.oauth]\n{oauth}")).unwrap();
    let argv: Vec<String> =
        [switchyard_testkit::bin(), "run", "--config", config.to_str().unwrap()].map(String::from).to_vec();
    let state_home = state.join("state");
    let envs = [("XDG_STATE_HOME", state_home.to_str().unwrap()), ("BROWSER", browser), ("RUST_LOG", "trace")];
    switchyard_testkit::Proc::spawn_env("run tracker", &argv, &envs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_nobody_completes_answers_the_call_within_the_bound_naming_login() {
    ensure_npm();
    ensure_conformance();
    let held = HeldScenario::start("auth/metadata-default");
    let dir = switchyard_testkit::temp_dir();
    // A browser that never arrives: the call must not wait on it past login_timeout_ms.
    let mut p = run_signing_in(&held.url, "login_timeout_ms = 1500\n", dir.path(), "true");
    let mut c = p.client();
    let started = std::time::Instant::now();
    let resp = c
        .request(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        )
        .await;
    let waited = started.elapsed();
    let why = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("an error: {resp}")).to_string();
    assert!(waited < Duration::from_secs(10), "the call waited {waited:?}");
    for part in
        [held.url.as_str(), "the browser sign-in failed", "nobody signed in within 1 s", "`switchyard login tracker`"]
    {
        assert!(why.contains(part), "the error says {part:?}: {why}");
    }
    c.close().await;
    p.wait_timeout(Duration::from_secs(10)).await;

    // A sign-in allowed longer than a server's start (the defaults are both a minute): the
    // start waits for it, and its failure is what the client is told, not a start timed out.
    let dir = switchyard_testkit::temp_dir();
    let slow = "login_timeout_ms = 2500\n[limits]\ninit_timeout_ms = 1000\n";
    let mut p = run_signing_in(&held.url, slow, dir.path(), "true");
    let mut c = p.client();
    let resp = c
        .request(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        )
        .await;
    let why = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("an error: {resp}")).to_string();
    for part in ["nobody signed in within 2 s", "`switchyard login tracker`"] {
        assert!(why.contains(part), "the error says {part:?}: {why}");
    }
    c.close().await;
    p.wait_timeout(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_never_reaches_the_logs_even_at_trace_level() {
    ensure_npm();
    ensure_conformance();
    let held = HeldScenario::start("auth/metadata-default");
    let dir = switchyard_testkit::temp_dir();
    let mut p = run_signing_in(&held.url, "", dir.path(), "curl -sL -o /dev/null");
    let mut c = p.client();
    c.initialize().await;
    assert_eq!(c.call_text("test-tool", serde_json::json!({})).await, "test");
    c.close().await;
    p.wait_timeout(Duration::from_secs(10)).await;
    let file = token_files(&dir.path().join("state/switchyard/oauth")).remove(0);
    let stored: serde_json::Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let token = stored["tokens"]["access_token"].as_str().unwrap();
    let log = p.stderr.text();
    assert!(log.contains("sign in at"), "the sign-in was logged:\n{log}");
    assert!(!log.contains(token), "the token is in the log:\n{log}");
    assert!(!log.contains("test-auth-code"), "the authorization code is in the log");
}

/// The token files under `dir` (beside them are the empty files that lock a sign-in).
fn token_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let all = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path());
    all.filter(|p| p.extension().is_some_and(|e| e == "json")).collect()
}
