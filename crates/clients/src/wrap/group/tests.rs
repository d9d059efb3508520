//! `wrap --group` and its `unwrap`, for each JSON client's file: the bytes back when the file is
//! as wrap left it, the same values when the client rewrote it.

use std::path::{Path, PathBuf};

use super::*;
use crate::wrap::{Change, plan_unwrap};

const EXE: &str = "/opt/switchyard/bin/switchyard";
const CONFIG: &str = "/home/user/.config/switchyard/switchyard.toml";

fn input(client: Client, path: &str, text: &str) -> Input {
    Input { client, path: PathBuf::from(path), scope: Scope::User, text: text.to_string() }
}

fn wrap(input: &Input, config: Option<&str>, group: &str) -> anyhow::Result<Plan> {
    plan_wrap_group(input, Path::new(CONFIG), config, Path::new(EXE), group)
}

fn state_of(change: &Change) -> State {
    State {
        file: change.path.clone(),
        client: change.client.name().into(),
        written: sha256(&change.after),
        entries: change.records.clone(),
        groups: change.groups.clone(),
    }
}

/// `unwrap` of `text` as `switchyard unwrap` plans it: per-server entries, then groups.
fn unwrap(input: &Input, text: &str, state: &State) -> (String, Vec<String>, Vec<GroupRecord>) {
    let now = Input { text: text.to_string(), ..input.clone() };
    let mut lines = Vec::new();
    let (change, _) = plan_unwrap(&now, state, None, &mut lines).unwrap();
    let after = change.map_or(now.text.clone(), |c| c.after);
    let (out, _, keep) = plan_unwrap_groups(&now, &after, state, None, &mut lines).unwrap();
    (out.unwrap_or(after), lines, keep)
}

fn servers(input: &Input, text: &str) -> Vec<Entry> {
    crate::parse(input.client, &input.path, text, Scope::User).unwrap().remove(0).servers
}

fn value(text: &str) -> serde_json::Value {
    let doc = Doc::parse(text).unwrap();
    doc.value(&doc.root)
}

const CLAUDE_CODE: &str = r#"{
  "numStartups": 7,
  "mcpServers": {
    "fs": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/user/notes"],
      "env": {}
    },
    "memory": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-memory"],
      "env": {
        "MEMORY_FILE_PATH": "${MEMORY_FILE:-/tmp/memory.json}"
      }
    },
    "sentry": {
      "type": "http",
      "url": "https://mcp.sentry.dev/mcp"
    }
  },
  "projects": {
    "/home/user/shop": {
      "mcpServers": {
        "db": { "type": "stdio", "command": "shop-db", "args": [] }
      }
    }
  }
}
"#;

/// Claude Code's `~/.claude.json`: one entry `work` in place of the three, the project's servers
/// untouched, the group in switchyard's config, and `unwrap` gives back the bytes.
#[test]
fn claude_code_group_wrap_then_unwrap_gives_the_original_bytes() {
    let input = input(Client::ClaudeCode, "/home/user/.claude.json", CLAUDE_CODE);
    let plan = wrap(&input, None, "work").unwrap();
    let change = &plan.changes[0];
    let after = servers(&input, &change.after);
    assert_eq!(after.len(), 1, "{}", change.after);
    assert_eq!((after[0].name.as_str(), after[0].group.as_deref()), ("work", Some("work")));
    let v = value(&change.after);
    assert_eq!(v["mcpServers"]["work"]["type"], "stdio");
    assert_eq!(
        v["mcpServers"]["work"]["args"],
        serde_json::json!(["connect", "--group", "work", "--config", CONFIG, "--env", "MEMORY_FILE_PATH"])
    );
    // The client's variable stays the client's to expand, as with a per-server entry.
    assert_eq!(v["mcpServers"]["work"]["env"]["MEMORY_FILE_PATH"], "${MEMORY_FILE:-/tmp/memory.json}");
    assert_eq!(v["projects"], value(CLAUDE_CODE)["projects"], "a project's servers changed");
    assert_eq!(v["numStartups"], 7);
    let (_, _, config) = plan.config.as_ref().unwrap();
    assert!(config.contains("[groups.work]\nservers = [\"fs\", \"memory\", \"sentry\"]\n"), "{config}");
    let loaded = switchyard_config::Config::load_text(Path::new(CONFIG), config).unwrap();
    assert_eq!(loaded.groups["work"].servers.as_deref().map(<[String]>::len), Some(3));
    let (text, lines, keep) = unwrap(&input, &change.after, &state_of(change));
    assert_eq!(text, CLAUDE_CODE, "{lines:?}");
    assert!(keep.is_empty());
}

/// Claude Code writes `~/.claude.json` anew (its own layout, keys it adds): `unwrap` then puts
/// every entry back by value where the group's entry is, and keeps what the client added.
#[test]
fn after_the_client_rewrote_the_file_unwrap_gives_the_same_values() {
    let input = input(Client::ClaudeCode, "/home/user/.claude.json", CLAUDE_CODE);
    let plan = wrap(&input, None, "work").unwrap();
    let change = &plan.changes[0];
    let mut rewritten = value(&change.after);
    rewritten["numStartups"] = 8.into();
    let rewritten = serde_json::to_string(&rewritten).unwrap();
    let (text, lines, keep) = unwrap(&input, &rewritten, &state_of(change));
    let mut expected = value(CLAUDE_CODE);
    expected["numStartups"] = 8.into();
    assert_eq!(value(&text), expected, "{lines:?}\n{text}");
    assert!(lines.iter().any(|l| l.contains("by value")), "{lines:?}");
    assert!(keep.is_empty());
    // The file the client reads: Claude Code's JSON, no comment or trailing comma.
    assert!(crate::parse(Client::ClaudeCode, &input.path, &text, Scope::User).is_ok(), "{text}");
}

const CURSOR: &str = r#"{
  // my servers
  "mcpServers": {
    "a": { "command": "a-server" }, // the first
    /* b needs a key */
    "b": {
      "command": "b-server",
      "env": { "KEY": "${env:B_KEY}" }
    },
    "c": { "url": "http://localhost:3000/mcp" },
    "d": { "command": "d-server", "args": ["--x"] }, // the last
  },
  "other": true, // kept
}
"#;

/// Every set of entries of a file with comments and a trailing comma: the wrapped file reads as
/// the client's, has the group's entry and the others, and `unwrap` gives back the bytes, or the
/// values when the file was edited elsewhere.
#[test]
fn any_set_of_entries_of_a_file_with_comments_comes_back() {
    let names = ["a", "b", "c", "d"];
    let input = input(Client::Cursor, "/home/user/.cursor/mcp.json", CURSOR);
    let entries = servers(&input, CURSOR);
    for set in 1..16u32 {
        let picked: Vec<&str> =
            names.iter().enumerate().filter(|(i, _)| set & (1 << i) != 0).map(|(_, n)| *n).collect();
        let removed: Vec<Record> = picked
            .iter()
            .map(|n| {
                let e = entries.iter().find(|e| e.name == *n).unwrap();
                Record {
                    project: None,
                    name: n.to_string(),
                    server: n.to_string(),
                    original: CURSOR[e.span.clone()].to_string(),
                    wrapped: String::new(),
                }
            })
            .collect();
        let vars = (Vec::new(), Vec::new());
        let (after, wrapped) =
            group_text(&input, &entries, &removed, &vars, Path::new(EXE), Path::new(CONFIG), "g").unwrap();
        check_reread(&input, &after, "g", &removed).unwrap_or_else(|e| panic!("{picked:?}: {e:#}\n{after}"));
        let left: Vec<String> = servers(&input, &after).into_iter().map(|e| e.name).collect();
        let kept: Vec<&str> = names.iter().filter(|n| !picked.contains(n)).copied().collect();
        assert_eq!(left.len(), kept.len() + 1, "{picked:?}\n{after}");
        assert!(after.contains("// my servers") && after.contains("// kept"), "{after}");
        let group = GroupRecord {
            name: "g".into(),
            group: "g".into(),
            wrapped,
            removed,
            before: CURSOR.into(),
            after: sha256(&after),
        };
        let state = State { groups: vec![group], ..State::default() };
        let (text, lines, _) = unwrap(&input, &after, &state);
        assert_eq!(text, CURSOR, "{picked:?}: {lines:?}");
        // Edited elsewhere since: each entry back by value, the edit kept.
        let edited = after.replace("\"other\": true", "\"other\": false");
        let (text, lines, _) = unwrap(&input, &edited, &state);
        let mut expected = value(CURSOR);
        expected["other"] = false.into();
        assert_eq!(value(&text), expected, "{picked:?}: {lines:?}\n{text}");
        assert!(text.contains("// my servers"), "{text}");
    }
}

/// VS Code's own `servers` map: the group's entry says `type`, and `${input:...}` stays VS
/// Code's, handed to `connect --env`.
#[test]
fn vscode_servers_are_one_entry_and_come_back() {
    let text = r#"{
  "inputs": [{ "type": "promptString", "id": "key", "password": true }],
  "servers": {
    // search
    "search": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "search-mcp"],
      "env": { "SEARCH_KEY": "${input:key}" }
    },
    "time": { "command": "uvx", "args": ["mcp-server-time"] }
  }
}
"#;
    let input = input(Client::VsCode, "/home/user/.config/Code/User/mcp.json", text);
    let plan = wrap(&input, None, "tools").unwrap();
    let change = &plan.changes[0];
    let v = value(&change.after);
    assert_eq!(v["servers"].as_object().unwrap().len(), 1, "{}", change.after);
    assert_eq!(v["servers"]["tools"]["type"], "stdio");
    assert_eq!(v["servers"]["tools"]["env"]["SEARCH_KEY"], "${input:key}");
    let args = v["servers"]["tools"]["args"].as_array().unwrap();
    assert_eq!(args[args.len() - 2..], [serde_json::json!("--env"), serde_json::json!("SEARCH_KEY")]);
    let (back, lines, _) = unwrap(&input, &change.after, &state_of(change));
    assert_eq!(back, text, "{lines:?}");
}

/// Claude Desktop's file: `--group` a second time finds its entry and changes nothing.
#[test]
fn wrap_group_twice_changes_nothing_the_second_time() {
    let text = "{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"a-server\" },\n    \"b\": { \"command\": \"b-server\" }\n  }\n}\n";
    let input = input(Client::ClaudeDesktop, "/home/user/.config/Claude/claude_desktop_config.json", text);
    let plan = wrap(&input, None, "mine").unwrap();
    let (_, _, config) = plan.config.clone().unwrap();
    let again = Input { text: plan.changes[0].after.clone(), ..input.clone() };
    let second = wrap(&again, Some(&config), "mine").unwrap();
    assert!(second.changes.is_empty() && second.config.is_none(), "{second:#?}");
    assert!(second.lines.iter().any(|l| l.contains("already runs group `mine`")), "{:?}", second.lines);
}

/// `--group` with another name on a file already wrapped as a group: nothing changes, and the
/// line says which group carries the servers and what to do.
#[test]
fn wrap_group_again_with_another_name_says_which_group_has_the_servers() {
    let text = "{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"a-server\" },\n    \"b\": { \"command\": \"b-server\" }\n  }\n}\n";
    let input = input(Client::ClaudeCode, "/home/user/.claude.json", text);
    let plan = wrap(&input, None, "team").unwrap();
    let (_, _, config) = plan.config.clone().unwrap();
    let again = Input { text: plan.changes[0].after.clone(), ..input.clone() };
    let second = wrap(&again, Some(&config), "other").unwrap();
    assert!(second.changes.is_empty() && second.config.is_none(), "{second:#?}");
    let said = second.lines.join("\n");
    assert!(said.contains("already run through group `team` (entry `team`)"), "{said}");
    assert!(said.contains("switchyard unwrap --group team /home/user/.claude.json"), "{said}");
    assert!(!second.lines.iter().any(|l| l == "nothing to wrap"), "{said}");
}

/// A group of the config names the servers: the entries it names go, the others stay; one the
/// file does not have is an error naming it.
#[test]
fn a_configured_group_takes_its_servers_and_names_the_ones_missing() {
    let text = "{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"a-server\" },\n    \"b\": { \"command\": \"b-server\" }\n  }\n}\n";
    let input = input(Client::Cursor, "/home/user/.cursor/mcp.json", text);
    let config =
        "[servers.a]\ncommand = \"a-server\"\n\n[servers.z]\ncommand = \"z-server\"\n\n[groups.g]\nservers = [\"a\"]\n";
    let plan = wrap(&input, Some(config), "g").unwrap();
    let left: Vec<String> = servers(&input, &plan.changes[0].after).into_iter().map(|e| e.name).collect();
    assert_eq!(left, ["g", "b"]);
    assert!(plan.config.is_none(), "the group and server were there: {:?}", plan.config);
    let missing = config.replace("servers = [\"a\"]", "servers = [\"a\", \"z\"]");
    let e = format!("{:#}", wrap(&input, Some(&missing), "g").unwrap_err());
    assert!(e.contains("group `g`") && e.contains("names z") && e.contains("its entries: a, b"), "{e}");
}

/// What `wrap --group` will not do, each said with what to do instead.
#[test]
fn what_wrap_group_refuses_says_what_to_do() {
    let wrapped = format!(
        "{{\"mcpServers\": {{\"a\": {{\"command\": \"{EXE}\", \"args\": [\"connect\", \"a\"]}}, \"b\": {{\"command\": \"b\"}}}}}}"
    );
    let file = input(Client::Cursor, "/home/user/.cursor/mcp.json", &wrapped);
    let e = format!("{:#}", wrap(&file, None, "g").unwrap_err());
    assert!(e.contains("already runs through switchyard on its own") && e.contains("switchyard unwrap"), "{e}");
    let taken = input(Client::Cursor, "/home/user/.cursor/mcp.json", "{\"mcpServers\": {\"g\": {\"command\": \"x\"}}}");
    let e = format!("{:#}", wrap(&taken, None, "g").unwrap_err());
    assert!(e.contains("already has an entry `g`"), "{e}");
    let inline = "[mcp_servers]\na = { command = \"a\" }\n\n[mcp_servers.b]\ncommand = \"b\"\n";
    let codex = input(Client::Codex, "/home/user/.codex/config.toml", inline);
    let e = format!("{:#}", wrap(&codex, None, "g").unwrap_err());
    assert!(e.contains("`a` is written inline") && e.contains("write it as one"), "{e}");
    // A client setting of one server cannot ride on the group's entry: that entry stays.
    let setting = input(
        Client::ClaudeDesktop,
        "/home/user/.config/Claude/claude_desktop_config.json",
        "{\"mcpServers\": {\"a\": {\"command\": \"a\", \"alwaysAllow\": [\"x\"]}, \"b\": {\"command\": \"b\"}}}",
    );
    let plan = wrap(&setting, None, "g").unwrap();
    let left: Vec<String> = servers(&setting, &plan.changes[0].after).into_iter().map(|e| e.name).collect();
    assert_eq!(left, ["a", "g"]);
    assert!(plan.lines.iter().any(|l| l.contains("`alwaysAllow`")), "{:?}", plan.lines);
}

const CODEX: &str = r#"model = "o4-mini" # mine

# the files
[mcp_servers.fs]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/home/user/notes"]

[mcp_servers.gh]
command = "gh-mcp"
env_vars = ["GH_TOKEN"]

[mcp_servers.gh.env]
LOG = "debug"

[mcp_servers.time]
command = "uvx"
args = ["mcp-server-time"]

[projects."/home/user/work"]
trust_level = "trusted"
"#;

/// Codex's TOML: the servers' tables (sub-tables too) go, `[mcp_servers.GROUP]` stands where the
/// first was with what Codex forwards in `env_vars`, and unwrap gives back the bytes; after
/// Codex wrote the file anew (`codex mcp add` drops comments, reorders keys), the same values.
#[test]
fn codex_tables_become_one_and_come_back() {
    let input = input(Client::Codex, "/home/user/.codex/config.toml", CODEX);
    let plan = wrap(&input, None, "work").unwrap();
    let change = &plan.changes[0];
    let after: toml::Table = change.after.parse().unwrap_or_else(|e| panic!("{e}\n{}", change.after));
    let servers = after["mcp_servers"].as_table().unwrap();
    assert_eq!(servers.keys().collect::<Vec<_>>(), ["work"], "{}", change.after);
    let work = &servers["work"];
    let args: Vec<&str> = work["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args, ["connect", "--group", "work", "--config", CONFIG, "--env", "GH_TOKEN?"]);
    assert_eq!(work["env_vars"], toml::Value::Array(vec!["GH_TOKEN".into(), "XDG_STATE_HOME".into()]));
    assert!(
        change.after.starts_with("model = \"o4-mini\" # mine\n\n# the files\n[mcp_servers.work]\n"),
        "{}",
        change.after
    );
    assert!(change.after.contains("[projects.\"/home/user/work\"]"), "{}", change.after);
    let (text, lines, _) = unwrap(&input, &change.after, &state_of(change));
    assert_eq!(text, CODEX, "{lines:?}");
    // As `codex mcp add` writes it: no comment, its own layout; then a server of its own.
    let mut rewritten = after.clone();
    rewritten["mcp_servers"].as_table_mut().unwrap().insert("later".into(), toml::toml! { command = "later" }.into());
    let rewritten = toml::to_string(&rewritten).unwrap();
    let (text, lines, _) = unwrap(&input, &rewritten, &state_of(change));
    let mut expected: toml::Table = CODEX.parse().unwrap();
    expected["mcp_servers"].as_table_mut().unwrap().insert("later".into(), toml::toml! { command = "later" }.into());
    let back: toml::Table = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back, expected, "{lines:?}\n{text}");
}

/// A plain `wrap` after `wrap --group` takes the entry the group left (a client setting of its
/// own) one by one; `unwrap` then puts back both kinds.
#[test]
fn a_per_server_wrap_after_a_group_wrap_is_undone_with_it() {
    let text = "{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"a\", \"alwaysAllow\": [\"x\"] },\n    \"b\": { \"command\": \"b\" },\n    \"c\": { \"command\": \"c\" }\n  }\n}\n";
    let input = input(Client::ClaudeDesktop, "/home/user/.config/Claude/claude_desktop_config.json", text);
    let grouped = wrap(&input, None, "g").unwrap();
    let (_, _, config) = grouped.config.clone().unwrap();
    let once = Input { text: grouped.changes[0].after.clone(), ..input.clone() };
    let plain =
        crate::wrap::plan_wrap(std::slice::from_ref(&once), Path::new(CONFIG), Some(&config), Path::new(EXE), None)
            .unwrap();
    let change = &plain.changes[0];
    let entries = servers(&input, &change.after);
    assert_eq!(
        entries.iter().map(|e| (e.wrapped.as_deref(), e.group.as_deref())).collect::<Vec<_>>(),
        [(Some("a"), None), (None, Some("g"))]
    );
    let state = State { groups: grouped.changes[0].groups.clone(), ..state_of(change) };
    let (back, lines, keep) = unwrap(&input, &change.after, &state);
    // By value (the file is not as `wrap --group` left it), here the same bytes: one entry a line.
    assert_eq!(back, text, "{lines:?}");
    assert!(keep.is_empty(), "{keep:?}");
}
