//! Claude Code CLI, Codex CLI and Gemini CLI, the real ones from npm (tests/client-clis): servers
//! they add themselves (`claude mcp add`, `codex mcp add`, `gemini mcp add`) are wrapped, each CLI
//! connects to every one of them through one daemon, and unwrap gives their entries back.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::Home;
use switchyard_testkit::*;

use crate::npm_setup::{
    claude_cli, codex_cli, ensure_client_clis, ensure_npm, everything_entry, filesystem_entry, gemini_cli,
    memory_entry, sequential_thinking_entry,
};

/// A variable a Codex entry forwards that is set nowhere: Codex starts the server all the same.
const UNSET: &str = "SWITCHYARD_TEST_CODEX_UNSET_TOKEN";

/// `program ARGS` as the test's user (its HOME and XDG directories), in `cwd`.
fn command(home: &Home, program: &Path, cwd: &Path) -> Command {
    let mut c = Command::new(program);
    c.current_dir(cwd).envs(home.envs()).env_remove("CODEX_HOME").env_remove(UNSET).stdin(Stdio::null());
    // What `wrap` writes into the entries: the binary under test, though it is in a build directory.
    c.env("SWITCHYARD_STABLE_BIN", bin());
    c
}

/// Runs `c`; its stdout, or the test fails with what it said.
fn ok(c: &mut Command) -> String {
    ok_both(c).0
}

/// Runs `c`; its stdout and stderr, or the test fails with what it said.
fn ok_both(c: &mut Command) -> (String, String) {
    let out = c.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{c:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    (stdout.into_owned(), stderr.into_owned())
}

fn switchyard(home: &Home, cwd: &Path, args: &[&str]) -> String {
    let config = home.config_str();
    ok(command(home, Path::new(bin()), cwd).args(args).args(["--config", &config]))
}

/// What `codex app-server` says of every MCP server (`mcpServerStatus/list`): Codex starts each
/// one as it would for a session, completes the MCP handshake and lists its tools. `codex mcp
/// list` shows the configuration only, without connecting.
pub(super) fn codex_status(home: &Home) -> Vec<Value> {
    let mut child = command(home, &codex_cli(), home.path())
        .arg("app-server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": {"name": "switchyard-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "mcpServerStatus/list", "params": {}}),
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let answer = loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => match serde_json::from_str::<Value>(&line) {
                Ok(v) if v["id"] == 2 => break v,
                _ => seen.push(line),
            },
            Err(e) => panic!("codex app-server did not answer mcpServerStatus/list ({e}):\n{}", seen.join("\n")),
        }
    };
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    answer["result"]["data"].as_array().unwrap_or_else(|| panic!("{answer}")).clone()
}

/// Servers added with `codex mcp add` (one with `--env`, one with an allow list and a forwarded
/// variable that is unset added by hand) and a trusted project's (CRLF): after wrap, `codex mcp
/// list` shows each on `switchyard connect`, Codex connects to the user's through one daemon (the
/// allow list still picks the tools, the unset variable stops nothing), and unwrap gives both
/// files back.
#[tokio::test]
async fn codex_connects_to_every_wrapped_server_through_the_daemon() {
    ensure_client_clis();
    let home = Home::new();
    let codex = |args: &[&str]| ok(command(&home, &codex_cli(), home.path()).args(args));
    codex(&["mcp", "add", "fix", "--env", "LABEL=one", "--", bin(), "fixture", "--name", "fix-a"]);
    codex(&["mcp", "add", "other", "--", bin(), "fixture", "--name", "fix-b"]);
    let file = home.path().join(".codex/config.toml");
    let mut text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("[mcp_servers.fix.env]"), "codex mcp add writes env as a sub-table:\n{text}");
    // Codex's own setting, by hand: `other`'s table is the last one. And a project of the user's
    // with servers of its own, which Codex reads once the project is trusted.
    let project = home.path().join("work");
    text.push_str("enabled_tools = [\"pid\"] # only this one\n");
    text.push_str(&format!("env_vars = [\"{UNSET}\"]\n"));
    text.push_str(&format!("\n[projects.{}]\ntrust_level = \"trusted\"\n", json!(project.display().to_string())));
    std::fs::write(&file, &text).unwrap();
    let project_file = project.join(".codex/config.toml");
    std::fs::create_dir_all(project_file.parent().unwrap()).unwrap();
    let project_text = format!(
        "# the project's own\r\n[mcp_servers.local]\r\ncommand = {}\r\nargs = [\"fixture\", \"--name\", \"fix-c\"] # here\r\n",
        json!(bin())
    );
    std::fs::write(&project_file, &project_text).unwrap();
    let before = codex_status(&home);
    assert_eq!(before.len(), 2, "{before:#?}");

    let said = switchyard(&home, &project, &["wrap", "--client", "codex"]);
    assert!(said.contains("codex `fix` -> switchyard server `fix`"), "{said}");
    assert!(said.contains("codex `local` -> switchyard server `local`"), "{said}");
    assert!(said.contains("note: Codex starts servers with few variables"), "{said}");
    // Codex's listing in the project: the user's servers and the project's, each on `connect`.
    let listed = ok(command(&home, &codex_cli(), &project).args(["mcp", "list", "--json"]));
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let names: Vec<&str> = listed.as_array().unwrap().iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["fix", "local", "other"], "{listed:#}");
    for server in listed.as_array().unwrap() {
        assert_eq!(server["transport"]["command"], bin(), "{server:#}");
        assert_eq!(server["transport"]["args"][0], "connect", "{server:#}");
    }
    let status = codex_status(&home);
    for server in &status {
        let tools: Vec<&String> = server["tools"].as_object().map(|t| t.keys().collect()).unwrap_or_default();
        assert!(server["toolsError"].is_null() && !tools.is_empty(), "not connected: {server:#}");
        if server["name"] == "other" {
            assert_eq!(tools, ["pid"], "the allow list did not stay with Codex: {server:#}");
        }
    }
    assert_eq!(status.len(), 2, "{status:#?}");
    assert_eq!(home.daemons().len(), 1, "{}", switchyard_testkit::daemon::render(&home.processes()));

    let said = switchyard(&home, &project, &["unwrap", "--client", "codex"]);
    assert!(!said.contains("changed since"), "{said}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "unwrap did not give the file back");
    assert_eq!(std::fs::read_to_string(&project_file).unwrap(), project_text, "nor the project's");
    home.stop().await;
}

/// What docs/wrap.md says of Codex: `codex mcp list` connects to no server (no daemon starts),
/// the app server's `mcpServerStatus/list` starts each wrapped one, and `codex mcp add` writes
/// the file anew (a comment goes, `20` becomes `20.0`), so unwrap leaves the entry it changed,
/// and puts back the one it wrote as it was.
#[tokio::test]
async fn codex_lists_without_connecting_and_writes_the_file_anew_on_mcp_add() {
    ensure_client_clis();
    let home = Home::new();
    let file = home.path().join(".codex/config.toml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let text = format!(
        "[mcp_servers.timed]  # mine\ncommand = {b}\nargs = [\"fixture\", \"--name\", \"fix-a\"]\n\
         startup_timeout_sec = 20\n\n[mcp_servers.plain]\ncommand = {b}\nargs = [\"fixture\", \"--name\", \"fix-b\"]\n",
        b = json!(bin())
    );
    std::fs::write(&file, &text).unwrap();
    let said = switchyard(&home, home.path(), &["wrap", "--client", "codex"]);
    assert!(said.contains("codex `timed` -> switchyard server `timed`"), "{said}");

    let listed = ok(command(&home, &codex_cli(), home.path()).args(["mcp", "list", "--json"]));
    assert_eq!(listed.matches("\"connect\"").count(), 2, "{listed}");
    let rendered = switchyard_testkit::daemon::render(&home.processes());
    assert!(home.daemons().is_empty(), "`codex mcp list` started a server:\n{rendered}");
    let status = codex_status(&home);
    assert_eq!(status.len(), 2, "{status:#?}");
    for server in &status {
        assert!(server["serverInfo"].is_object() && server["toolsError"].is_null(), "not started: {server:#}");
    }

    ok(command(&home, &codex_cli(), home.path()).args(["mcp", "add", "added", "--", bin(), "fixture"]));
    let rewritten = std::fs::read_to_string(&file).unwrap();
    assert!(!rewritten.contains("# mine") && rewritten.contains("startup_timeout_sec = 20.0"), "{rewritten}");
    let said = switchyard(&home, home.path(), &["unwrap", "--client", "codex"]);
    assert!(said.contains("codex `timed`: left as it is: it was edited since wrap"), "{said}");
    assert!(said.contains("codex `plain`: restored"), "{said}");
    home.stop().await;
}

/// Servers added with `gemini mcp add` to the user's settings and a project's (one with a
/// `$VAR` Gemini expands): after wrap, `gemini mcp list` connects to each through one daemon;
/// unwrap gives both files back.
#[tokio::test]
async fn gemini_mcp_list_connects_to_every_wrapped_server_through_the_daemon() {
    ensure_client_clis();
    let home = Home::new();
    let project = home.path().join("work");
    std::fs::create_dir(&project).unwrap();
    // Gemini prints its messages, the listing too, on stderr.
    let gemini = |args: &[&str]| {
        // Trusted, as a user's own project is: Gemini starts no stdio server in an untrusted one.
        let mut c = command(&home, &gemini_cli(), &project);
        c.env("GEMINI_CLI_TRUST_WORKSPACE", "true").env("FIX_LABEL", "from-gemini").args(args);
        let (stdout, stderr) = ok_both(&mut c);
        stdout + &stderr
    };
    gemini(&["mcp", "add", "-s", "user", "-e", "LABEL=$FIX_LABEL", "fix", bin(), "--", "fixture", "--name", "fix-a"]);
    gemini(&["mcp", "add", "--timeout", "20000", "proj", bin(), "--", "fixture", "--name", "fix-b"]);
    let files = [home.path().join(".gemini/settings.json"), project.join(".gemini/settings.json")];
    let originals: Vec<String> = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect();
    let listed = gemini(&["mcp", "list"]);
    assert!(listed.contains("fix:") && listed.contains("Connected"), "{listed}");

    let said = switchyard(&home, &project, &["wrap", "--client", "gemini"]);
    assert!(said.contains("gemini `fix` -> switchyard server `fix`") && said.contains("gemini `proj`"), "{said}");
    assert!(said.contains("the client still supplies LABEL"), "{said}");
    let user = std::fs::read_to_string(&files[0]).unwrap();
    assert!(user.contains("\"LABEL\": \"$FIX_LABEL\""), "Gemini's variable is not left to Gemini:\n{user}");
    let listed = gemini(&["mcp", "list"]);
    for name in ["fix", "proj"] {
        let line = listed.lines().find(|l| l.contains(&format!("{name}: "))).unwrap_or_else(|| panic!("{listed}"));
        assert!(line.contains(" connect ") && line.ends_with("Connected"), "{name} not through switchyard:\n{listed}");
    }
    assert_eq!(home.daemons().len(), 1, "{}", switchyard_testkit::daemon::render(&home.processes()));

    let said = switchyard(&home, &project, &["unwrap", "--client", "gemini"]);
    assert!(!said.contains("changed since"), "{said}");
    for (file, original) in files.iter().zip(&originals) {
        assert_eq!(&std::fs::read_to_string(file).unwrap(), original, "{} is not as it was", file.display());
    }
    home.stop().await;
}

/// The line of `claude mcp list` that names `server`.
fn listed<'a>(listing: &'a str, server: &str) -> Option<&'a str> {
    listing.lines().find(|l| l.starts_with(&format!("{server}: ")))
}

/// The names of the servers the daemon runs (siblings included), sorted.
async fn daemon_servers(home: &Home) -> Vec<String> {
    let status = home.status_json().await;
    let mut names: Vec<String> =
        status["servers"].as_array().unwrap().iter().filter_map(|s| s["name"].as_str().map(String::from)).collect();
    names.sort();
    names
}

/// Servers added with `claude mcp add` (two of the user's, one of a project's): after wrap,
/// `claude mcp list`, which connects to every server and says whether it answered, reaches each
/// through one daemon. Run in two projects at once, it declares each project as its root, and
/// each project gets instances of its own (server-filesystem confines itself to its client's
/// roots); run again in the first, it is served by that project's. Unwrap puts the entries back.
#[tokio::test]
async fn claude_code_connects_to_every_wrapped_server_through_the_daemon() {
    ensure_client_clis();
    ensure_npm();
    let home = Home::new();
    let (a, b, allowed) = (home.path().join("project-a"), home.path().join("project-b"), home.path().join("allowed"));
    for d in [&a, &b, &allowed] {
        std::fs::create_dir(d).unwrap();
    }
    let claude = |cwd: &Path, args: &[&str]| ok(command(&home, &claude_cli(), cwd).args(args));
    let fs_entry = filesystem_entry().display().to_string();
    let allowed_dir = allowed.display().to_string();
    claude(&a, &["mcp", "add", "-s", "user", "fs", "--", "node", &fs_entry, &allowed_dir]);
    claude(&a, &["mcp", "add", "-s", "user", "fix", "--", bin(), "fixture", "--name", "fix-a"]);
    claude(&a, &["mcp", "add", "-s", "local", "proj", "--", bin(), "fixture", "--name", "fix-p"]);
    let direct = claude(&a, &["mcp", "list"]);
    for name in ["fs", "fix", "proj"] {
        assert!(listed(&direct, name).is_some_and(|l| l.ends_with("Connected")), "{name} directly:\n{direct}");
    }

    let said = switchyard(&home, &a, &["wrap", "--client", "claude-code"]);
    assert!(said.contains("claude-code `fs` -> switchyard server `fs`"), "{said}");
    assert!(said.contains("claude-code `proj` (project "), "{said}");
    let in_project = |dir: &Path| {
        let mut c = command(&home, &claude_cli(), dir);
        c.args(["mcp", "list"]);
        std::thread::spawn(move || ok(&mut c))
    };
    let (la, lb) = (in_project(&a), in_project(&b));
    let (la, lb) = (la.join().unwrap(), lb.join().unwrap());
    for (listing, names) in [(&la, &["fs", "fix", "proj"][..]), (&lb, &["fs", "fix"][..])] {
        for name in names {
            let line = listed(listing, name).unwrap_or_else(|| panic!("{name} not listed:\n{listing}"));
            assert!(line.contains(&format!(" connect {name} ")), "{name} not through switchyard:\n{listing}");
            assert!(line.ends_with("Connected"), "{name} did not answer through switchyard:\n{listing}");
        }
    }
    assert!(listed(&lb, "proj").is_none(), "another project's server:\n{lb}");
    let servers = daemon_servers(&home).await;
    assert_eq!(servers, ["fix", "fix~2", "fs", "fs~2", "proj"], "one instance set per project");
    let got = claude(&a, &["mcp", "get", "fs"]);
    assert!(got.contains("Status: ✔ Connected") && got.contains("connect fs"), "{got}");
    assert_eq!(daemon_servers(&home).await, servers, "project-a again got new instances");
    assert_eq!(home.daemons().len(), 1, "{}", switchyard_testkit::daemon::render(&home.processes()));

    let said = switchyard(&home, &a, &["unwrap", "--client", "claude-code"]);
    assert!(said.contains("3 entries put back"), "{said}");
    let got = claude(&a, &["mcp", "get", "fix"]);
    assert!(got.contains("Args: fixture --name fix-a"), "{got}");
    home.stop().await;
}

/// The servers of [`three_kinds_of_client_share_what_the_servers_cannot_tell_apart`]: name and
/// command line (server-filesystem confined to `project`).
fn four_servers(project: &Path) -> Vec<(&'static str, Vec<String>)> {
    let node = |entry: std::path::PathBuf, rest: &[&str]| {
        let mut argv = vec!["node".to_string(), entry.display().to_string()];
        argv.extend(rest.iter().map(|s| s.to_string()));
        argv
    };
    vec![
        ("memory", node(memory_entry(), &[])),
        ("thinking", node(sequential_thinking_entry(), &[])),
        ("fs", node(filesystem_entry(), &[&project.display().to_string()])),
        ("everything", node(everything_entry(), &["stdio"])),
    ]
}

/// Per server of the config: how many instances run, and the client names each server (base
/// or sibling) serves, by `status --json`.
fn by_server(status: &Value) -> std::collections::BTreeMap<String, (usize, Vec<Vec<String>>)> {
    let mut out: std::collections::BTreeMap<String, (usize, Vec<Vec<String>>)> = Default::default();
    for s in status["servers"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap_or_default();
        let base = name.split('~').next().unwrap_or(name).to_string();
        let entry = out.entry(base).or_default();
        entry.0 += s["instances"].as_array().map_or(0, Vec::len);
        let mut clients: Vec<String> = s["clients"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(String::from))
            .collect();
        clients.sort();
        entry.1.push(clients);
    }
    out
}

/// The total of instances and of instance starts status shows.
fn counts(status: &Value) -> (usize, u64) {
    let servers = status["servers"].as_array().unwrap();
    let instances = servers.iter().map(|s| s["instances"].as_array().map_or(0, Vec::len)).sum();
    (instances, servers.iter().filter_map(|s| s["starts"].as_u64()).sum())
}

/// Claude Code, Codex CLI and Gemini CLI, each with the same four servers from npm (memory,
/// sequential-thinking, filesystem on the project, everything), wrapped into one daemon. Run
/// directly they start 12 server processes; through switchyard the clients of the three kinds
/// share what the servers cannot tell them apart in: memory and sequential-thinking answer all
/// three alike and never ask a client anything (one instance each); server-filesystem asks a
/// client that declares roots for them (Claude Code: its own instance), and answers Codex and
/// Gemini alike (one); server-everything lists other tools to each kind (three). 7 instances,
/// each client shown what it is shown directly, and no client's roots on an instance another
/// kind of client uses. A daemon started again knows all that: it starts those 7 and no more.
#[tokio::test]
async fn three_kinds_of_client_share_what_the_servers_cannot_tell_apart() {
    ensure_client_clis();
    ensure_npm();
    let home = Home::new();
    let project = home.path().join("work");
    std::fs::create_dir(&project).unwrap();
    let servers = four_servers(&project);
    let in_project = |program: &Path| {
        let mut c = command(&home, program, &project);
        c.env("GEMINI_CLI_TRUST_WORKSPACE", "true");
        c
    };
    for (name, argv) in &servers {
        let rest: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
        let mut claude = vec!["mcp", "add", "-s", "user", name, "--", &argv[0]];
        claude.extend(&rest);
        ok(in_project(&claude_cli()).args(&claude));
        let mut codex = vec!["mcp", "add", name, "--", &argv[0]];
        codex.extend(&rest);
        ok(in_project(&codex_cli()).args(&codex));
        let mut gemini = vec!["mcp", "add", "-s", "user", name, &argv[0], "--"];
        gemini.extend(&rest);
        ok_both(in_project(&gemini_cli()).args(&gemini));
    }
    let claude_list = || ok(in_project(&claude_cli()).args(["mcp", "list"]));
    let gemini_list = || {
        let (out, err) = ok_both(in_project(&gemini_cli()).args(["mcp", "list"]));
        out + &err
    };
    let connected = |listing: &str, wrapped: bool| {
        for (name, _) in &servers {
            let line =
                listing.lines().find(|l| l.contains(&format!("{name}: "))).unwrap_or_else(|| panic!("{listing}"));
            assert!(line.contains("Connected"), "{name} not connected:\n{listing}");
            assert_eq!(line.contains(" connect "), wrapped, "{name}:\n{listing}");
        }
    };
    let tools = |status: &[Value]| -> std::collections::BTreeMap<String, Vec<String>> {
        status
            .iter()
            .map(|s| {
                let mut t: Vec<String> =
                    s["tools"].as_object().map(|t| t.keys().cloned().collect()).unwrap_or_default();
                t.sort();
                (s["name"].as_str().unwrap().to_string(), t)
            })
            .collect()
    };
    connected(&claude_list(), false);
    connected(&gemini_list(), false);
    let direct = tools(&codex_status(&home));
    assert_eq!(direct.len(), 4, "{direct:?}");

    for client in ["claude-code", "codex", "gemini"] {
        let said = switchyard(&home, &project, &["wrap", "--client", client]);
        assert!(said.contains(&format!("{client} `memory` -> switchyard server `memory`")), "{said}");
    }
    let config = std::fs::read_to_string(home.config_str()).unwrap();
    let tables = config.lines().filter(|l| l.starts_with("[servers.")).count();
    assert_eq!(tables, 4, "one server per definition, whichever client:\n{config}");

    // One after the other: each new kind is learned on instances of its own, which stop as it leaves.
    connected(&claude_list(), true);
    assert_eq!(tools(&codex_status(&home)), direct, "Codex is shown other tools through switchyard");
    connected(&gemini_list(), true);
    let want = |status: &Value| {
        let per = by_server(status);
        ["memory", "thinking", "fs", "everything"].map(|s| per.get(s).map_or(0, |p| p.0)) == [1, 1, 2, 3]
    };
    let status = home.wait_status("7 instances, as the rule says", Duration::from_secs(30), want).await;
    let siblings = home.logs().matches(" started: a client differs").count();
    eprintln!(
        "one run of each client (12 directly): {} instances now, {} started in all {:?}",
        counts(&status).0,
        4 + siblings,
        by_server(&status)
    );

    // Again, all at once, with a daemon started anew: it knows the servers, and learns nothing.
    home.stop().await;
    let (claude, gemini, codex) = std::thread::scope(|s| {
        let (claude, gemini) = (s.spawn(claude_list), s.spawn(gemini_list));
        let codex = codex_status(&home);
        (claude.join().unwrap(), gemini.join().unwrap(), codex)
    });
    connected(&claude, true);
    connected(&gemini, true);
    assert_eq!(tools(&codex), direct);
    let status = home.status_json().await;
    let per = by_server(&status);
    eprintln!("a daemon started again: {:?} (instances, instance starts) {per:?}", counts(&status));
    // The same servers serve the same clients; an instance may not have started at all (a
    // client answered from the remembered answers and lists, gone before it needed one).
    let families = ["memory", "thinking", "fs", "everything"].map(|s| per.get(s).map_or(0, |p| p.1.len()));
    assert_eq!(families, [1, 1, 2, 3], "{per:?}\n{status:#}");
    assert!(counts(&status).1 <= 7, "instances started to learn what was known: {status:#}");
    let logs = home.logs();
    let second = &logs[logs.rfind("switchyard daemon ready").expect("a daemon started")..];
    assert!(!second.contains("are not known yet"), "the daemon started again learned anew:\n{second}");
    let all = ["claude-code", "codex-mcp-client", "mcp-test-client"].map(String::from).to_vec();
    for server in ["memory", "thinking"] {
        assert_eq!(per[server].1, std::slice::from_ref(&all), "{status:#}");
    }
    let fs = &per["fs"].1;
    assert!(fs.contains(&vec!["claude-code".to_string()]), "Claude Code shares server-filesystem: {status:#}");
    assert!(fs.contains(&["codex-mcp-client", "mcp-test-client"].map(String::from).to_vec()), "{status:#}");
    assert!(per["everything"].1.iter().all(|c| c.len() == 1), "{status:#}");
    // server-filesystem took roots on Claude Code's instance only.
    let fs_claude = status["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"].as_str().is_some_and(|n| n.starts_with("fs")) && s["clients"][0]["name"] == "claude-code")
        .and_then(|s| s["name"].as_str())
        .unwrap()
        .to_string();
    let took_roots: Vec<&str> = second.lines().filter(|l| l.contains("from MCP roots")).collect();
    assert!(!took_roots.is_empty(), "server-filesystem never took Claude Code's roots:\n{second}");
    for line in &took_roots {
        assert!(line.contains(&format!("{fs_claude}#")), "roots on an instance another kind uses: {line}");
    }
    home.stop().await;
}

/// The story with Claude Code: three wrapped servers, a typo saved in one server's table
/// while the daemon runs, then `switchyard stop` (as an idle exit or a reboot would). `claude
/// mcp list` still connects to the two others through the daemon; the one with the typo is
/// refused, and `status` names its line. Before, the daemon did not start and all three failed.
#[tokio::test]
async fn claude_code_keeps_every_other_server_when_one_table_has_a_typo() {
    ensure_client_clis();
    let home = Home::new();
    let dir = home.path().join("project");
    std::fs::create_dir(&dir).unwrap();
    let claude = |args: &[&str]| ok(command(&home, &claude_cli(), &dir).args(args));
    for name in ["one", "two", "three"] {
        claude(&["mcp", "add", "-s", "user", name, "--", bin(), "fixture", "--name", name]);
    }
    switchyard(&home, &dir, &["wrap", "--client", "claude-code"]);
    let listing = claude(&["mcp", "list"]);
    for name in ["one", "two", "three"] {
        assert!(listed(&listing, name).is_some_and(|l| l.ends_with("Connected")), "{name}:\n{listing}");
    }
    let text = std::fs::read_to_string(&home.config).unwrap();
    let table = text.find("[servers.two]").unwrap_or_else(|| panic!("{text}"));
    let key = table + text[table..].find("command =").unwrap();
    home.write_config(&format!("{}comand ={}", &text[..key], &text[key + "command =".len()..]));
    let line = text[..key].lines().count() + 1;
    home.stop().await;

    let listing = claude(&["mcp", "list"]);
    for name in ["one", "three"] {
        assert!(listed(&listing, name).is_some_and(|l| l.ends_with("Connected")), "{name}:\n{listing}");
    }
    assert!(listed(&listing, "two").is_some_and(|l| !l.ends_with("Connected")), "{listing}");
    let status = home.status_json().await;
    let broken = status["broken"].to_string();
    assert!(
        broken.contains("two") && broken.contains(&format!("line {line}")) && broken.contains("did you mean"),
        "{status:#}"
    );
    home.stop().await;
}
