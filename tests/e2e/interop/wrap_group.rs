//! `switchyard wrap --group` with the real Claude Code CLI (tests/client-clis): the servers it
//! added become one entry on `switchyard connect --group`, which `claude mcp list` and `get` see
//! connected and whose tools are every server's; `unwrap` gives the entries back. The same with
//! Codex's TOML, checked by Codex's app server.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::Home;
use switchyard_testkit::*;

use super::client_clis::codex_status;
use crate::npm_setup::{claude_cli, ensure_client_clis, ensure_npm, filesystem_entry, memory_entry};

/// `program ARGS` as the test's user (its HOME and XDG directories), in its home.
fn run(home: &Home, program: &Path, args: &[&str]) -> String {
    let mut c = Command::new(program);
    c.current_dir(home.path()).envs(home.envs()).env_remove("CODEX_HOME").stdin(Stdio::null()).args(args);
    // What `wrap` writes into the entries: the binary under test, though it is in a build directory.
    c.env("SWITCHYARD_STABLE_BIN", bin());
    let out = c.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{program:?} {args:?} failed ({}):\n{text}", out.status);
    text
}

fn mcp_servers(file: &Path) -> Value {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    v["mcpServers"].clone()
}

/// Three servers added with `claude mcp add` (two from npm and the fixture) and one of a
/// project: `wrap --group work` leaves one user entry `work`, connected, with every server's
/// tools; a second wrap changes nothing; `unwrap` puts the three back (by value after Claude Code
/// rewrote its file for `mcp add`, keeping the server it added, and byte for byte when the file is
/// as wrap left it).
#[tokio::test]
async fn claude_code_sees_one_group_entry_with_every_server_s_tools_and_unwrap_gives_them_back() {
    ensure_client_clis();
    ensure_npm();
    let home = Home::new();
    let allowed = home.path().join("allowed");
    std::fs::create_dir(&allowed).unwrap();
    let claude = |args: &[&str]| run(&home, &claude_cli(), args);
    let cfg = home.config_str();
    let switchyard = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", &cfg]);
        run(&home, Path::new(bin()), &all)
    };
    let (fs_entry, memory_entry) = (filesystem_entry().display().to_string(), memory_entry().display().to_string());
    let memory_file = format!("MEMORY_FILE_PATH={}", home.path().join("memory.jsonl").display());
    claude(&["mcp", "add", "-s", "user", "fs", "--", "node", &fs_entry, &allowed.display().to_string()]);
    claude(&["mcp", "add", "-s", "user", "memory", "-e", &memory_file, "--", "node", &memory_entry]);
    claude(&["mcp", "add", "-s", "user", "fix", "--", bin(), "fixture", "--name", "fix-a"]);
    claude(&["mcp", "add", "-s", "local", "proj", "--", bin(), "fixture", "--name", "fix-p"]);
    let file = home.path().join(".claude.json");
    let servers_before = mcp_servers(&file);

    let said = switchyard(&["wrap", "--client", "claude-code", "--group", "work"]);
    assert!(said.contains("fs, memory, fix -> one entry `work`"), "{said}");
    let entries = mcp_servers(&file);
    assert_eq!(entries.as_object().unwrap().keys().collect::<Vec<_>>(), ["work"], "{entries:#}");
    let config = std::fs::read_to_string(&cfg).unwrap();
    assert!(config.contains("[groups.work]\nservers = [\"fs\", \"memory\", \"fix\"]"), "{config}");

    let listing = claude(&["mcp", "list"]);
    let line = listing.lines().find(|l| l.starts_with("work: ")).unwrap_or_else(|| panic!("{listing}"));
    assert!(line.contains("connect --group work") && line.ends_with("Connected"), "{listing}");
    for gone in ["fs: ", "memory: ", "fix: "] {
        assert!(!listing.lines().any(|l| l.starts_with(gone)), "{gone} still listed:\n{listing}");
    }
    assert!(listing.lines().any(|l| l.starts_with("proj: ")), "the project's server went:\n{listing}");
    let got = claude(&["mcp", "get", "work"]);
    assert!(got.contains("Status: ✔ Connected") && got.contains("--group work"), "{got}");

    // The entry's own command line, as Claude Code runs it: every server's tools.
    let args: Vec<String> =
        entries["work"]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
    assert_eq!(entries["work"]["command"], bin());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut p = home.spawn("group entry", &args);
    let mut c = p.client();
    c.timeout = Duration::from_secs(60);
    c.initialize_with("2025-06-18").await;
    let list = c.request("tools/list", json!({})).await;
    let tools: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for prefix in ["fs__", "memory__", "fix__"] {
        assert!(tools.iter().any(|t| t.starts_with(prefix)), "no {prefix} tool in {tools:?}");
    }
    let r = c.request("tools/call", json!({"name": "fix__pid", "arguments": {}})).await;
    assert!(r["result"].is_object(), "{r}");
    c.close().await;
    p.wait_timeout(Duration::from_secs(30)).await;

    let again = switchyard(&["wrap", "--client", "claude-code", "--group", "work"]);
    assert!(again.contains("already runs group `work`"), "{again}");
    assert_eq!(mcp_servers(&file), entries, "a second wrap changed the entries");

    // Claude Code writes its whole file anew for `mcp add`: unwrap puts the entries back by
    // value, and the server added since stays.
    claude(&["mcp", "add", "-s", "user", "later", "--", bin(), "fixture", "--name", "fix-l"]);
    let said = switchyard(&["unwrap", "--client", "claude-code"]);
    assert!(said.contains("3 entries put back") && said.contains("by value"), "{said}");
    let mut expected = servers_before.clone();
    expected["later"] = mcp_servers(&file)["later"].clone();
    assert_eq!(mcp_servers(&file), expected, "{said}");
    let got = claude(&["mcp", "get", "fix"]);
    assert!(got.contains("Args: fixture --name fix-a"), "{got}");

    // Untouched in between: the very bytes.
    let before = std::fs::read_to_string(&file).unwrap();
    switchyard(&["wrap", "--client", "claude-code", "--group", "work"]);
    let said = switchyard(&["unwrap", "--client", "claude-code"]);
    assert!(said.contains("3 entries put back") && !said.contains("by value"), "{said}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    home.stop().await;
}

/// Codex's `config.toml`: two servers become one `[mcp_servers.work]`, which Codex's app server
/// starts and lists with both servers' tools; `unwrap` gives back the bytes.
#[tokio::test]
async fn codex_starts_one_group_entry_with_every_server_s_tools_and_unwrap_gives_them_back() {
    ensure_client_clis();
    let home = Home::new();
    let file = home.path().join(".codex/config.toml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let text = format!(
        "# mine\n[mcp_servers.one]\ncommand = {b}\nargs = [\"fixture\", \"--name\", \"fix-a\"]\n\n\
         [mcp_servers.two]\ncommand = {b}\nargs = [\"fixture\", \"--name\", \"fix-b\"]\n",
        b = json!(bin())
    );
    std::fs::write(&file, &text).unwrap();
    let cfg = home.config_str();
    let switchyard = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", &cfg]);
        run(&home, Path::new(bin()), &all)
    };
    let said = switchyard(&["wrap", "--client", "codex", "--group", "work"]);
    assert!(said.contains("one, two -> one entry `work`"), "{said}");
    let status = codex_status(&home);
    assert_eq!(status.len(), 1, "{status:#?}");
    let work = &status[0];
    assert_eq!(work["name"], "work", "{work:#}");
    let tools: Vec<&String> = work["tools"].as_object().map(|t| t.keys().collect()).unwrap_or_default();
    assert!(work["toolsError"].is_null(), "not connected: {work:#}");
    for tool in ["one__pid", "two__pid"] {
        assert!(tools.iter().any(|t| *t == tool), "no {tool} in {tools:?}");
    }
    let said = switchyard(&["unwrap", "--client", "codex"]);
    assert!(said.contains("2 entries put back"), "{said}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "unwrap did not give the file back");
    home.stop().await;
}
