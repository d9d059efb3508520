//! A mistake in the config never takes every server down: a server table that does not load is
//! refused alone, with its line; a file that does not load at all gives way to the last version
//! that did; `[http]` that does not load leaves the front out; `status` says why, with no daemon
//! too; and `switchyard check` shows all of it before anything starts.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::*;

const SLOW: Duration = Duration::from_secs(20);

fn init_params() -> Value {
    json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}})
}

/// The error a `connect NAME` client gets for its initialize.
async fn refused(home: &Home, name: &str) -> String {
    let mut p = home.connect(name);
    let mut c = p.client();
    c.timeout = SLOW;
    let resp = c.request("initialize", init_params()).await;
    let message = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("{name} was served: {resp}"));
    p.wait_timeout(SLOW).await;
    message.to_string()
}

async fn echo(home: &Home, name: &str) {
    let (mut p, mut c) = home.client(name).await;
    assert_eq!(c.call_text("echo", json!({"text": name})).await, name);
    c.close().await;
    p.wait_timeout(SLOW).await;
}

async fn check(home: &Home) -> (bool, String) {
    let config = home.config_str();
    let out = home.cli(&["check", "--config", &config]).await;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The story: a typo in one server's table, saved while the daemon runs, waits for the
/// next start. The running daemon keeps that server as it was and says so in `status` and
/// `check`; after a restart, that server alone is refused with the file's line, and the others
/// serve.
#[tokio::test]
async fn a_typo_in_one_server_is_said_at_once_and_after_a_restart_refuses_only_that_server() {
    let home = Home::new();
    let good = format!("{}{}", home.fixture("alpha", &[]), home.fixture("beta", &[]));
    home.write_config(&good);
    echo(&home, "beta").await;
    let typo = good.replace("[servers.beta]\ncommand", "[servers.beta]\ncomand");
    let line = typo.lines().position(|l| l.starts_with("comand")).unwrap() + 1;
    home.write_config(&typo);
    let status = home.wait_status("the kept server", SLOW, |s| s.get("config_kept").is_some()).await;
    let kept = status["config_kept"].to_string();
    assert!(kept.contains("server `beta`") && kept.contains(&format!("line {line}")), "{kept}");
    assert!(home.status_text().await.contains("problem: server `beta` is not changed"));
    echo(&home, "beta").await;
    let (ok, said) = check(&home).await;
    assert!(!ok, "check passed a file with a typo:\n{said}");
    assert!(
        said.contains(&format!("server beta: does not load: config file {}, line {line}", home.config_str())),
        "{said}"
    );
    assert!(said.contains("server alpha: `") && said.contains("daemon: runs"), "{said}");

    home.stop().await;
    let message = refused(&home, "beta").await;
    assert!(message.contains(&format!("line {line}")) && message.contains("comand"), "{message}");
    echo(&home, "alpha").await;
    let status = home.status_json().await;
    assert_eq!(status["broken"][0]["name"], "beta", "{status:#}");
    // Fixed: served at once, without a restart.
    home.write_config(&good);
    home.wait_status("beta back", SLOW, |s| s["broken"].as_array().is_some_and(|b| b.is_empty())).await;
    echo(&home, "beta").await;
    assert!(check(&home).await.0);
    home.shutdown().await;
}

/// A file that does not load at all (not TOML) at a start: the daemon runs on the last version
/// that loaded, says so in `status`, and takes the file once it is fixed.
#[tokio::test]
async fn a_file_that_does_not_load_at_a_start_gives_way_to_the_last_that_did() {
    let home = Home::new();
    let good = home.fixture("alpha", &[]);
    home.write_config(&good);
    echo(&home, "alpha").await;
    home.stop().await;
    home.write_config(&format!("{good}\n[daemon\n"));
    echo(&home, "alpha").await;
    let status = home.status_json().await;
    let why = status["config_error"].as_str().unwrap_or_else(|| panic!("no config_error: {status:#}"));
    assert!(why.contains("line 5") && why.contains("the last one that loaded"), "{why}");
    assert!(home.logs().contains("runs on the last version of the file that loaded"));
    let (ok, said) = check(&home).await;
    assert!(!ok && said.contains("does not load: config file") && said.contains("line 5"), "{said}");
    // Put back as it was kept (what is in force): the problem is gone.
    home.write_config(&good);
    home.wait_status("the file back", SLOW, |s| s.get("config_error").is_none()).await;
    home.write_config(&format!("{good}\n[daemon\n"));
    home.wait_status("broken again", SLOW, |s| s.get("config_error").is_some()).await;
    home.write_config(&format!("{good}{}", home.fixture("beta", &[])));
    home.wait_status("the fixed file", SLOW, |s| s.get("config_error").is_none()).await;
    echo(&home, "beta").await;
    home.shutdown().await;
}

/// No daemon, and its start failed: `status` says why, not only that none runs.
#[tokio::test]
async fn status_without_a_daemon_says_why_its_last_start_failed() {
    let home = Home::new();
    home.write_config("[servers.alpha\ncommand = \"x\"\n");
    let message = refused(&home, "alpha").await;
    assert!(message.contains("line 1"), "{message}");
    let config = home.config_str();
    let out = home.cli(&["status", "--config", &config]).await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("no switchyard daemon runs") && said.contains("its last start failed ("), "{said}");
    assert!(said.contains(&format!("config file {config}, line 1")), "{said}");
    home.write_config(&home.fixture("alpha", &[]));
    echo(&home, "alpha").await;
    home.stop().await;
    let out = home.cli(&["status", "--config", &config]).await;
    assert!(!String::from_utf8_lossy(&out.stderr).contains("last start failed"), "a start that succeeded is forgotten");
    home.shutdown().await;
}

/// `[http]` that does not load (an address other machines reach, without the user's token):
/// the daemon serves its socket without the front, and says why.
#[tokio::test]
async fn an_http_table_that_does_not_load_leaves_the_front_out_and_the_servers_in() {
    let home = Home::new();
    home.write_config(&format!("{}\n[http]\nlisten = \"0.0.0.0:7070\"\n", home.fixture("alpha", &[])));
    echo(&home, "alpha").await;
    let status = home.status_json().await;
    assert!(status.get("http").is_none(), "{status:#}");
    let why = status["http_error"].as_str().unwrap_or_else(|| panic!("no http_error: {status:#}"));
    assert!(why.contains("line 6") && why.contains("reachable from other machines"), "{why}");
    home.shutdown().await;
}

/// `check` names a command that is not there, a plugin file that is not a plugin, and a server
/// table that does not load; it passes a good file; it starts nothing.
#[tokio::test]
async fn check_names_each_problem_and_starts_nothing() {
    let home = Home::new();
    let plugins = home.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::write(plugins.join("garbage.wasm"), b"not a component").unwrap();
    home.write_config(&format!(
        "{}[servers.gone]\ncommand = \"no-such-server-xyz\"\n[servers.typo]\ncommand = \"x\"\nshare = \"sometimes\"\n[[plugins]]\nfile = \"garbage.wasm\"\nservers = [\"alpha\"]\n",
        home.fixture("alpha", &[])
    ));
    let (ok, said) = check(&home).await;
    assert!(!ok, "{said}");
    assert!(said.contains("server gone: `no-such-server-xyz` cannot start"), "{said}");
    assert!(said.contains("server typo: does not load") && said.contains("sometimes"), "{said}");
    let plugin = said.lines().find(|l| l.starts_with("plugin garbage.wasm: ")).unwrap_or_else(|| panic!("{said}"));
    assert!(plugin.contains("on alpha are refused until it loads"), "{plugin}");
    assert!(said.contains("3 problem(s)"), "{said}");
    assert!(said.contains("daemon: not running"), "{said}");
    std::fs::remove_file(plugins.join("garbage.wasm")).unwrap();
    home.write_config(&home.fixture("alpha", &[]));
    let (ok, said) = check(&home).await;
    assert!(ok && said.contains("everything loads"), "{said}");
    assert!(home.processes().is_empty(), "check started something: {}", render(&home.processes()));
    home.shutdown().await;
}

/// A `[[plugins]]` entry that does not load (its config is not JSON) at a start: the servers it
/// names are refused with the reason, never served without it; the others serve; `check` says
/// it once.
#[tokio::test]
async fn a_plugin_entry_that_does_not_load_refuses_its_servers_at_a_start() {
    let home = Home::new();
    let plugins = home.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::write(plugins.join("guard.wasm"), b"never read").unwrap();
    let entry = "[[plugins]]\nfile = \"guard.wasm\"\nservers = [\"beta\"]\nconfig = '{\"hide\": [\"echo\"'\n";
    home.write_config(&format!("{}{}{entry}", home.fixture("alpha", &[]), home.fixture("beta", &[])));
    echo(&home, "alpha").await;
    let message = refused(&home, "beta").await;
    assert!(message.contains("guard.wasm") && message.contains("does not load"), "{message}");
    let status = home.status_json().await;
    assert_eq!(status["broken"][0]["name"], "beta", "{status:#}");
    assert!(status["plugin_problems"].as_array().unwrap().is_empty(), "said twice: {status:#}");
    let (ok, said) = check(&home).await;
    assert!(!ok, "{said}");
    assert_eq!(said.lines().filter(|l| l.starts_with("plugin guard.wasm")).count(), 1, "{said}");
    assert!(said.contains(&format!("config file {}, line 10", home.config_str())), "{said}");
    home.shutdown().await;
}

/// Saved while the daemon runs, an entry that does not load keeps the plugin entries in force
/// and the servers it names as they are; every other edit of the same save applies (a server
/// added is served, not refused as unknown).
#[tokio::test]
async fn a_plugin_entry_that_does_not_load_holds_back_only_what_it_names() {
    let home = Home::new();
    let (alpha, beta, gamma) = (home.fixture("alpha", &[]), home.fixture("beta", &[]), home.fixture("gamma", &[]));
    home.write_config(&format!("{alpha}{beta}"));
    echo(&home, "beta").await;
    let entry = "[[plugins]]\nfile = \"guard.wasm\"\nservers = [\"beta\"]\nconfig = '{\"hide\": ['\n";
    home.write_config(&format!("{alpha}{beta}{gamma}{entry}"));
    home.wait_status("the entry", SLOW, |s| s.get("plugin_entries").is_some()).await;
    echo(&home, "gamma").await;
    echo(&home, "beta").await;
    // Unscoped, it names every server: a server new in the same save is refused with the reason.
    let delta = home.fixture("delta", &[]);
    home.write_config(&format!("{alpha}{beta}{gamma}{delta}[[plugins]]\nfile = \"guard.wasm\"\nconfig = '{{'\n"));
    home.wait_status("delta refused", SLOW, |s| s["broken"].to_string().contains("delta")).await;
    let message = refused(&home, "delta").await;
    assert!(message.contains("guard.wasm") && !message.contains("no server named"), "{message}");
    echo(&home, "alpha").await;
    home.shutdown().await;
}

/// A file saved broken, then put back exactly as it is in force (an undo): the problem is gone.
#[tokio::test]
async fn a_file_put_back_as_it_is_in_force_clears_the_problem() {
    let home = Home::new();
    let good = home.fixture("alpha", &[]);
    home.write_config(&good);
    echo(&home, "alpha").await;
    home.write_config(&format!("{good}garbage = = =\n"));
    home.wait_status("the broken file", SLOW, |s| s.get("config_error").is_some()).await;
    home.write_config(&good);
    home.wait_status("the problem cleared", SLOW, |s| s.get("config_error").is_none()).await;
    home.shutdown().await;
}

/// `stop` with clients connected says that their `connect` starts the daemon again, and with
/// which environment: a user who stops it to change the environment is not left guessing.
#[tokio::test]
async fn stop_with_clients_connected_says_they_start_it_again() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (mut p, mut c) = home.client("alpha").await;
    let out = home.stop().await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("note: 1 client(s) were connected through `switchyard connect`"), "{said}");
    assert_eq!(c.call_text("echo", json!({"text": "again"})).await, "again");
    c.close().await;
    p.wait_timeout(SLOW).await;
    let out = home.stop().await;
    assert!(!String::from_utf8_lossy(&out.stderr).contains("note:"), "no client was connected");
    home.shutdown().await;
}
