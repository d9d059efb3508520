//! The real MCP servers from npm (filesystem, everything, memory, sequential-thinking) in one
//! group: every tool of each is reached through the aggregate by a client on `connect --group`,
//! by the Claude Code CLI (`claude mcp list` and `get` say it is connected), and by the
//! TypeScript SDK over stdio and over the HTTP front; a member killed with SIGKILL leaves the
//! others' tools working.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::{Home, instance_pids};
use switchyard_testkit::*;

use crate::npm_setup::{
    claude_cli, ensure_client_clis, ensure_npm, everything_entry, filesystem_entry, memory_entry, npm_dir,
    sequential_thinking_entry,
};

const SLOW: Duration = Duration::from_secs(60);

/// The four servers and the group `real` of them, with the HTTP front on.
fn config(home: &Home, allowed: &Path) -> String {
    let node = |entry: &Path, extra: &[&str]| {
        let mut args = vec![entry.display().to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        format!("command = \"node\"\nargs = {}\n", json!(args))
    };
    let memory_file = home.path().join("memory.jsonl").display().to_string();
    format!(
        "[servers.filesystem]\n{}\n[servers.everything]\n{}\n[servers.memory]\n{}env = {{ MEMORY_FILE_PATH = {} }}\n\n\
         [servers.thinking]\n{}\n[groups.real]\nservers = [\"filesystem\", \"everything\", \"memory\", \"thinking\"]\n\n\
         [http]\nlisten = \"127.0.0.1:0\"\n",
        node(&filesystem_entry(), &[&allowed.display().to_string()]),
        node(&everything_entry(), &["stdio"]),
        node(&memory_entry(), &[]),
        json!(memory_file),
        node(&sequential_thinking_entry(), &[]),
    )
}

/// Arguments that make each tool do its work; others get `{}` (the server then says what is
/// missing, which still proves the call reached it).
fn arguments(tool: &str, allowed: &Path) -> Value {
    let file = allowed.join("note.txt").display().to_string();
    let dir = allowed.display().to_string();
    match tool {
        "filesystem__write_file" => json!({"path": file, "content": "written through a group"}),
        "filesystem__read_file" | "filesystem__read_text_file" | "filesystem__get_file_info" => json!({"path": file}),
        "filesystem__list_directory" | "filesystem__directory_tree" | "filesystem__list_directory_with_sizes" => {
            json!({"path": dir})
        }
        "filesystem__search_files" => json!({"path": dir, "pattern": "note"}),
        "everything__echo" => json!({"message": "hello group"}),
        "everything__add" | "everything__get-sum" => json!({"a": 2, "b": 3}),
        "memory__create_entities" => {
            json!({"entities": [{"name": "switchyard", "entityType": "router", "observations": ["groups servers"]}]})
        }
        "memory__search_nodes" => json!({"query": "switchyard"}),
        "thinking__sequentialthinking" => {
            json!({"thought": "one step", "nextThoughtNeeded": false, "thoughtNumber": 1, "totalThoughts": 1})
        }
        _ => json!({}),
    }
}

/// Calls `tool`, answering what the server asks the client meanwhile (sampling, elicitation);
/// the response.
async fn call_answering(c: &mut Client, tool: &str, args: Value) -> Value {
    let id = c.send_request("tools/call", json!({"name": tool, "arguments": args})).await;
    loop {
        let m = c.recv().await;
        if m["id"] == id && m.get("method").is_none() {
            return m;
        }
        match m["method"].as_str() {
            Some("sampling/createMessage") => {
                c.respond(
                    m["id"].clone(),
                    json!({"role": "assistant", "model": "m", "content": {"type": "text", "text": "sampled"}}),
                )
                .await
            }
            Some("elicitation/create") => c.respond(m["id"].clone(), json!({"action": "decline"})).await,
            Some("roots/list") => c.respond(m["id"].clone(), json!({"roots": []})).await,
            Some("ping") if !m["id"].is_null() => c.respond(m["id"].clone(), json!({})).await,
            _ => {}
        }
    }
}

/// Whether a response is the group's own refusal (the call never reached a server).
fn refused_by_group(resp: &Value) -> bool {
    let msg = resp["error"]["message"].as_str().unwrap_or_default();
    msg.contains("of group `real`")
}

/// A node script with the TypeScript SDK (from tests/npm): connects as `transport` says, lists
/// the tools, calls one of each server, and prints what it got as JSON.
fn sdk_client(transport: Value) -> Command {
    let script = r#"
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
const how = JSON.parse(process.argv[1]);
const transport = how.url
  ? new StreamableHTTPClientTransport(new URL(how.url), { requestInit: { headers: { Authorization: `Bearer ${how.token}` } } })
  : new StdioClientTransport({ command: how.command[0], args: how.command.slice(1), env: how.env, stderr: "inherit" });
const client = new Client({ name: "sdk-group-test", version: "1.0.0" });
await client.connect(transport);
const { tools } = await client.listTools();
const text = (r) => (r.content ?? []).map((c) => c.text ?? "").join("");
const out = { server: client.getServerVersion(), tools: tools.map((t) => t.name) };
out.echo = text(await client.callTool({ name: "everything__echo", arguments: { message: "from the sdk" } }));
out.dirs = text(await client.callTool({ name: "filesystem__list_allowed_directories", arguments: {} }));
out.graph = text(await client.callTool({ name: "memory__read_graph", arguments: {} }));
out.thought = text(await client.callTool({ name: "thinking__sequentialthinking", arguments: { thought: "t", nextThoughtNeeded: false, thoughtNumber: 1, totalThoughts: 1 } }));
console.log(JSON.stringify(out));
await client.close();
"#;
    let mut cmd = Command::new("node");
    cmd.current_dir(npm_dir())
        .args(["--input-type=module", "-e", script, "--"])
        .arg(transport.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn run_sdk(cmd: &mut Command) -> Value {
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the SDK client failed ({}):\n{stdout}\n{stderr}", out.status);
    serde_json::from_str(stdout.trim().lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the SDK client printed {stdout:?}: {e}\n{stderr}"))
}

fn assert_sdk_saw_every_server(got: &Value, allowed: &Path) {
    assert_eq!(got["server"]["name"], "switchyard group real", "{got}");
    let tools = got["tools"].as_array().unwrap();
    for prefix in ["filesystem__", "everything__", "memory__", "thinking__"] {
        assert!(tools.iter().any(|t| t.as_str().unwrap().starts_with(prefix)), "no {prefix} tool: {got}");
    }
    assert!(got["echo"].as_str().unwrap().contains("from the sdk"), "{got}");
    assert!(got["dirs"].as_str().unwrap().contains(&allowed.display().to_string()), "{got}");
    assert!(got["graph"].as_str().unwrap().contains("entities"), "{got}");
    assert!(got["thought"].as_str().unwrap().contains("thoughtNumber"), "{got}");
}

#[tokio::test]
async fn the_real_npm_servers_in_one_group_through_connect_claude_code_the_sdk_and_http() {
    ensure_npm();
    ensure_client_clis();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let home = Home::new();
    let allowed = home.path().join("allowed");
    std::fs::create_dir(&allowed).unwrap();
    home.write_config(&config(&home, &allowed));
    let (base, token) = home.start_http().await;
    let cfg = home.config_str();

    // A client on `connect --group`: every tool of every server reaches its server.
    let mut p = home.spawn("connect --group real", &["connect", "--group", "real", "--config", &cfg]);
    let mut c = p.client();
    c.timeout = SLOW;
    c.roots = Some(json!({"roots": [{"uri": format!("file://{}", allowed.display()), "name": "allowed"}]}));
    c.initialize_with("2025-06-18").await;
    let list = c.request("tools/list", json!({})).await;
    let tools: Vec<String> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    for prefix in ["filesystem__", "everything__", "memory__", "thinking__"] {
        assert!(tools.iter().filter(|t| t.starts_with(prefix)).count() >= 1, "no {prefix} tool in {tools:?}");
    }
    assert!(tools.len() >= 25, "{} tools: {tools:?}", tools.len());
    // Write first, so the reads find the file.
    let mut order = tools.clone();
    order.sort_by_key(|t| !t.ends_with("write_file") && !t.ends_with("create_entities"));
    let mut worked = Vec::new();
    for tool in &order {
        // Long on purpose (everything's longRunningOperation runs 10 s by default): a short one.
        let args = match tool.as_str() {
            "everything__longRunningOperation" => json!({"duration": 1, "steps": 1}),
            t => arguments(t, &allowed),
        };
        let resp = call_answering(&mut c, tool, args).await;
        assert!(!refused_by_group(&resp), "{tool} did not reach its server: {resp}");
        assert!(resp.get("result").is_some() || resp.get("error").is_some(), "{tool}: {resp}");
        if resp["result"].is_object() && resp["result"]["isError"] != true {
            worked.push(tool.clone());
        }
    }
    for must in [
        "filesystem__write_file",
        "filesystem__read_text_file",
        "everything__echo",
        "memory__read_graph",
        "thinking__sequentialthinking",
    ] {
        if tools.contains(&must.to_string()) {
            assert!(worked.contains(&must.to_string()), "{must} failed; worked: {worked:?}");
        }
    }
    eprintln!("{} tools through the group; {} did their work: {worked:?}", tools.len(), worked.len());
    assert_eq!(std::fs::read_to_string(allowed.join("note.txt")).unwrap(), "written through a group");

    // kill -9 of one member: the others' tools go on at once; it comes back.
    let status = home.status_json().await;
    let memory_pid = *instance_pids(&status, "memory").first().expect("memory runs");
    signal_pid(memory_pid, libc::SIGKILL);
    let r = call_answering(&mut c, "everything__echo", json!({"message": "after the kill"})).await;
    assert!(tool_text(&r).contains("after the kill"), "{r}");
    let r = call_answering(&mut c, "filesystem__list_allowed_directories", json!({})).await;
    assert!(tool_text(&r).contains(&allowed.display().to_string()), "{r}");
    let r = call_answering(&mut c, "memory__read_graph", json!({})).await;
    assert!(r["result"].is_object() || r["error"]["message"].as_str().unwrap_or_default().contains("memory"), "{r}");
    c.close().await;
    p.wait_timeout(SLOW).await;

    // Claude Code: one entry for the whole group, connected.
    let claude = |args: &[&str]| {
        let out = Command::new(claude_cli()).current_dir(home.path()).envs(home.envs()).args(args).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "claude {args:?} failed:\n{text}");
        text
    };
    claude(&["mcp", "add", "-s", "user", "real", "--", bin(), "connect", "--group", "real", "--config", &cfg]);
    let listing = claude(&["mcp", "list"]);
    let line = listing.lines().find(|l| l.starts_with("real: ")).unwrap_or_else(|| panic!("{listing}"));
    assert!(line.ends_with("Connected"), "{listing}");
    let got = claude(&["mcp", "get", "real"]);
    assert!(got.contains("Status: ✔ Connected") && got.contains("--group real"), "{got}");

    // The TypeScript SDK over stdio and over the HTTP front.
    let envs: serde_json::Map<String, Value> = home
        .envs()
        .into_iter()
        .chain([("PATH".to_string(), std::env::var("PATH").unwrap_or_default())])
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let stdio = json!({"command": [bin(), "connect", "--group", "real", "--config", cfg], "env": envs});
    assert_sdk_saw_every_server(&run_sdk(&mut sdk_client(stdio)), &allowed);
    let http = json!({"url": format!("{base}/groups/real/mcp"), "token": token});
    assert_sdk_saw_every_server(&run_sdk(&mut sdk_client(http)), &allowed);
    home.shutdown().await;
}
