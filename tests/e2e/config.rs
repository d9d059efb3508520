//! Configuration mistakes a user makes in the first hour, seen through the real binary.

use std::time::{Duration, Instant};

use crate::setup::*;

/// `[pools.defualt]` parses (pool names are free), but no call can reach it: the router must say
/// so on stderr, naming the pool and the likely fix, and still serve calls on `default`.
#[tokio::test]
async fn a_misspelt_default_pool_is_named_in_a_warning() {
    let mut s = Setup::with_config(&[], &[], Some("[pools.defualt]\nmax = 4\nmax_inflight = 1\n")).await;
    s.client.initialize().await;
    assert_eq!(s.client.call_text("echo", serde_json::json!({"text": "hi"})).await, "hi");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let log = s.router.stderr.text();
        if log.contains("pool `defualt`") {
            assert!(log.contains("did you mean [pools.default]?"), "{log}");
            assert!(log.contains("no call can reach it"), "{log}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no warning about [pools.defualt]:\n{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `switchyard run ARGS` with `envs` set (and MCP_TOKEN-like variables of the test's own
/// environment removed), stdin closed: its exit code, stdout and stderr.
async fn run_to_exit(args: &[&str], envs: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = tokio::process::Command::new(switchyard_testkit::bin());
    cmd.arg("run")
        .args(args)
        .env_remove("MCP_TOKEN")
        .env_remove("MCP_TEAM")
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("switchyard did not exit within 30 s on a config error")
        .expect("run switchyard");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A header that uses an unset variable stops the start: the error names the variable, the
/// header and the file (with its line), nothing reaches stdout (the client's channel), and the
/// value of a variable that is set never appears, even at debug level.
#[tokio::test]
async fn a_missing_header_variable_stops_the_start_naming_it_and_the_file() {
    let dir = switchyard_testkit::temp_dir();
    let file = dir.path().join("switchyard.toml");
    std::fs::write(
        &file,
        "[server]\nurl = \"https://mcp.example.com/mcp\"\n\n[server.headers]\n\
         Authorization = \"Bearer ${MCP_TOKEN}\"\nX-Team = \"${MCP_TEAM}\"\n",
    )
    .unwrap();
    let secret = "sk-live-5ecret-e2e";
    let (code, stdout, stderr) =
        run_to_exit(&["--config", file.to_str().unwrap()], &[("MCP_TOKEN", secret), ("RUST_LOG", "debug")]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "", "stdout carries protocol only");
    assert!(stderr.contains("${MCP_TEAM}") && stderr.contains("not set"), "{stderr}");
    assert!(stderr.contains(&format!("header `X-Team` (config file {}, line 6)", file.display())), "{stderr}");
    assert!(!stderr.contains(secret), "the secret reached stderr:\n{stderr}");
}

/// A variable whose value a header cannot carry (a token read from a file with its trailing
/// newline) is named, and its value is not shown; the same for `--header`.
#[tokio::test]
async fn a_header_variable_with_a_line_break_is_named_without_its_value() {
    let secret = "sk-live-5ecret-e2e";
    let with_newline = format!("{secret}\n");
    let (code, stdout, stderr) = run_to_exit(
        &["--url", "https://mcp.example.com/mcp", "--header", "Authorization: Bearer ${MCP_TOKEN}"],
        &[("MCP_TOKEN", &with_newline), ("RUST_LOG", "debug")],
    )
    .await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("header `Authorization` (--header) uses ${MCP_TOKEN}"), "{stderr}");
    assert!(stderr.contains("line feed"), "{stderr}");
    assert!(!stderr.contains(secret), "the secret reached stderr:\n{stderr}");
}

/// A server given both ways is refused before anything starts: in the file, naming it and the
/// line; on the command line, as a usage error.
#[tokio::test]
async fn a_server_given_as_both_command_and_url_is_refused() {
    let dir = switchyard_testkit::temp_dir();
    let file = dir.path().join("switchyard.toml");
    std::fs::write(&file, "[server]\ncommand = \"npx\"\nurl = \"https://mcp.example.com/mcp\"\n").unwrap();
    let (code, stdout, stderr) = run_to_exit(&["--config", file.to_str().unwrap()], &[]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains(&format!("config file {}, line 3", file.display())), "{stderr}");
    assert!(stderr.contains("both `command` and `url`"), "{stderr}");

    let (code, stdout, stderr) = run_to_exit(&["--url", "https://mcp.example.com/mcp", "--", "npx", "srv"], &[]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("--url") && stderr.contains("cannot be used with"), "{stderr}");
}

/// `run` fronts one server: a file of several `[servers.NAME]` is refused with their names and
/// the two ways on (`connect NAME`, `--name NAME`), and `--name` picks one, which then serves
/// calls (the other, whose command does not exist, is never started).
#[tokio::test]
async fn run_picks_one_of_the_file_s_servers_by_name() {
    let dir = switchyard_testkit::temp_dir();
    let file = dir.path().join("switchyard.toml");
    let fixture = switchyard_testkit::Proc::fixture_cmd(&[]);
    let text = format!(
        "[limits]\ncall_timeout_ms = 60000\n\n[servers.broken]\ncommand = \"/nonexistent/switchyard-e2e\"\n\n\
         [servers.fix]\ncommand = {:?}\nargs = {:?}\n[servers.fix.limits]\ncall_timeout_ms = 20000\n",
        fixture[0],
        &fixture[1..]
    );
    std::fs::write(&file, text).unwrap();
    let (code, stdout, stderr) = run_to_exit(&["--config", file.to_str().unwrap()], &[]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("has 2 servers (broken, fix)"), "{stderr}");
    assert!(stderr.contains("switchyard connect NAME") && stderr.contains("--name NAME"), "{stderr}");

    let mut router = switchyard_testkit::Proc::router(&["--config", file.to_str().unwrap(), "--name", "fix"]);
    let mut client = router.client();
    client.initialize().await;
    assert_eq!(client.call_text("echo", serde_json::json!({"text": "hi"})).await, "hi");
}

/// A file that is not TOML is one line on stderr: the file, the line and the column.
#[tokio::test]
async fn a_broken_config_file_is_named_with_its_line_and_column() {
    let dir = switchyard_testkit::temp_dir();
    let file = dir.path().join("switchyard.toml");
    std::fs::write(&file, "[servers.fs]\ncommand = \"npx\"\nargs = [\"-y\",\n").unwrap();
    let (code, stdout, stderr) = run_to_exit(&["--config", file.to_str().unwrap()], &[]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stdout, "");
    let want = format!("switchyard: error: config file {}, line 3, column 14: unclosed array", file.display());
    assert!(stderr.starts_with(&want) && stderr.lines().count() == 1, "{stderr}");
}

/// Why a `tools/call` was refused (a JSON-RPC error, or a result marked `isError`); None when
/// it ran.
fn refusal(r: &serde_json::Value) -> Option<String> {
    if let Some(m) = r["error"]["message"].as_str() {
        return Some(m.to_string());
    }
    (r["result"]["isError"] == true).then(|| r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string())
}

/// Found from outside: a save that put a guard plugin in force beside a broken `[groups.NAME]`
/// table was applied, but the last-good file (what a start falls back on when the file does not
/// load) was only kept for a file of which every part loads; so, once the file stopped loading
/// and the daemon started again, it ran the older version, with no guard. Each applied save is
/// kept, as saved, and so is the version a start runs on; a save that is not applied is not.
#[tokio::test]
async fn a_save_applied_with_a_broken_group_is_what_a_later_start_falls_back_on() {
    use switchyard_testkit::daemon::{Home, leave};
    let slow = Duration::from_secs(20);
    let home = Home::new();
    home.install_plugins(&[("guard.wasm", switchyard_testkit::example_plugins().join("guard.wasm"))]);
    let server = home.fixture("a", &[]);
    // A start on a file with a group that does not load: kept too, as it is in force.
    let first = format!("{server}[daemon]\nidle_exit_ms = 0\n[groups.h]\nservers = [\"nope\"]\n");
    home.write_config(&first);
    let (p, mut c) = home.client("a").await;
    assert_eq!(c.call_text("echo", serde_json::json!({"text": "hi"})).await, "hi");
    let kept = || {
        let dir = home.path().join("state/switchyard");
        let file = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .find(|e| e.file_name().to_string_lossy().ends_with(".last-good.toml"))?;
        std::fs::read_to_string(file.path()).ok()
    };
    assert_eq!(kept().as_deref(), Some(first.as_str()), "the version a start runs on is not kept");

    let guard =
        "[[plugins]]\nfile = \"guard.wasm\"\nfail = \"closed\"\nconfig = { deny = { \"echo\" = \"no echo here\" } }\n";
    let saved = format!("{server}[daemon]\nidle_exit_ms = 0\n{guard}[groups.g]\nservers = [\"a\", \"typo\"]\n");
    home.write_config(&saved);
    let deadline = Instant::now() + slow;
    loop {
        let r = c.call_tool("echo", serde_json::json!({"text": "hi"})).await;
        if refusal(&r).is_some_and(|w| w.contains("no echo here")) && kept().as_deref() == Some(saved.as_str()) {
            break;
        }
        assert!(Instant::now() < deadline, "the guard in force is not kept: {r}; kept {:?}\n{}", kept(), home.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    leave(p, c).await;

    // The whole file stops loading: that save is not applied, and not kept.
    home.write_config(&saved.replace("idle_exit_ms", "idle_exit_mss"));
    home.wait_status("the file's error", slow, |s| s.to_string().contains("idle_exit_mss")).await;
    assert_eq!(kept().as_deref(), Some(saved.as_str()), "a save that was not applied was kept");

    // The next start runs on what was in force: the guard judges the call.
    home.stop().await;
    let (p, mut c) = home.client("a").await;
    let r = c.call_tool("echo", serde_json::json!({"text": "hi"})).await;
    assert!(refusal(&r).is_some_and(|w| w.contains("no echo here")), "a call ran without the guard in force: {r}");
    leave(p, c).await;
    home.shutdown().await;
}

/// Found from outside: with a typo in `[groups.all]` and one in `[telemetry]`, `check` named only
/// the group's, the first in the file, which alone would be left out; the `[telemetry]` typo that
/// stops the file loading was not said. Both are now, that one first, each with its line.
#[tokio::test]
async fn check_names_the_error_that_stops_the_file_first() {
    let home = switchyard_testkit::daemon::Home::new();
    let text =
        format!("{}[groups.all]\nseprator = \"_\"\n[telemetry]\nendpont = \"http://x\"\n", home.fixture("a", &[]));
    home.write_config(&text);
    let line = |key: &str| text.lines().position(|l| l.starts_with(key)).unwrap() + 1;
    let config = home.config_str();
    let out = home.cli(&["check", "--config", &config]).await;
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    let stops = said.find(&format!("line {}", line("endpont"))).unwrap_or_else(|| panic!("{said}"));
    let part = said.find(&format!("line {}", line("seprator"))).unwrap_or_else(|| panic!("{said}"));
    assert!(stops < part && said[stops..part].contains("endpont"), "{said}");
}
