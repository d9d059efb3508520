//! `wrap` and `unwrap` planned over the fixture files of every client (tests/clients/).

use std::path::{Path, PathBuf};

use super::plan::LAUNCH_KEYS;
use super::report::hide_secrets;
use super::*;
use crate::Entry;

const EXE: &str = "/opt/switchyard/bin/switchyard";
const CONFIG: &str = "/home/user/.config/switchyard/switchyard.toml";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients").join(name)).unwrap()
}

fn input(client: Client, name: &str, scope: Scope) -> Input {
    Input { client, path: PathBuf::from("/home/user/x").join(name), scope, text: fixture(name) }
}

fn all() -> Vec<Input> {
    vec![
        input(Client::ClaudeDesktop, "claude_desktop_config.json", Scope::User),
        input(Client::ClaudeCode, "claude.json", Scope::User),
        input(Client::ClaudeCode, "project.mcp.json", Scope::Project),
        input(Client::Cursor, "cursor.mcp.json", Scope::User),
        input(Client::VsCode, "vscode.mcp.json", Scope::Project),
    ]
}

fn wrap_all(inputs: &[Input], config: Option<&str>) -> Plan {
    plan_wrap(inputs, Path::new(CONFIG), config, Path::new(EXE), None).unwrap_or_else(|e| panic!("{e:#}"))
}

/// What `wrap` records for a change, as `apply` does.
fn state_of(change: &Change) -> State {
    State {
        file: change.path.clone(),
        client: change.client.name().into(),
        written: sha256(&change.after),
        entries: change.records.clone(),
        groups: change.groups.clone(),
    }
}

fn after(input: &Input, change: &Change) -> Input {
    Input { text: change.after.clone(), ..input.clone() }
}

fn entries(input: &Input) -> Vec<Entry> {
    super::super::parse(input.client, &input.path, &input.text, input.scope.clone())
        .unwrap()
        .into_iter()
        .flat_map(|f| f.servers)
        .collect()
}

/// Every client's file: the wrapped file reads back with each server on `switchyard connect`,
/// keeps every byte outside the replaced entries, and unwrap gives the file back byte for byte.
#[test]
fn every_fixture_wraps_and_unwraps_to_the_same_bytes() {
    let inputs = all();
    let plan = wrap_all(&inputs, None);
    assert_eq!(plan.changes.len(), inputs.len(), "{:#?}", plan.lines);
    for (input, change) in inputs.iter().zip(&plan.changes) {
        let wrapped = after(input, change);
        for e in entries(&wrapped) {
            let skipped = e.unknown.iter().any(|k| LAUNCH_KEYS.iter().any(|(l, _)| l == k));
            assert!(
                e.wrapped.is_some() || skipped,
                "{}: `{}` not wrapped:\n{}",
                input.path.display(),
                e.name,
                change.after
            );
        }
        // Outside the replaced spans, not a byte changed: a comment, a key order, a trailing comma.
        let mut rest = change.after.as_str();
        for r in &change.records {
            let at = rest.find(&r.wrapped).unwrap();
            rest = &rest[at + r.wrapped.len()..];
        }
        let restored_text = {
            let mut lines = Vec::new();
            let (c, keep) = plan_unwrap(&wrapped, &state_of(change), None, &mut lines).unwrap();
            assert!(keep.is_empty(), "{keep:?}");
            assert!(lines.iter().all(|l| !l.contains("changed since")), "{lines:?}");
            c.unwrap().after
        };
        assert_eq!(restored_text, input.text, "{}: unwrap did not give the file back", input.path.display());
    }
    let (_, before, config) = plan.config.unwrap();
    assert!(before.is_none());
    switchyard_config::Config::load_text(Path::new(CONFIG), &config).unwrap_or_else(|e| panic!("{e:#}\n{config}"));
}

/// A second wrap changes nothing: not the client files, not switchyard.toml.
#[test]
fn wrap_twice_changes_nothing_the_second_time() {
    let inputs = all();
    let first = wrap_all(&inputs, None);
    let config = first.config.as_ref().unwrap().2.clone();
    let again: Vec<Input> = inputs.iter().zip(&first.changes).map(|(i, c)| after(i, c)).collect();
    let second = wrap_all(&again, Some(&config));
    assert!(second.changes.is_empty(), "{:#?}", second.changes);
    assert!(second.config.is_none());
    assert!(second.lines.iter().any(|l| l.contains("already runs through switchyard")), "{:#?}", second.lines);
}

/// VS Code's `${input:...}` and `${workspaceFolder}` stay in the client's file (in the wrapped
/// entry's env), never in switchyard.toml; the server reads them as `client_env`.
#[test]
fn client_variables_stay_with_the_client_and_reach_the_server_through_connect() {
    let vscode = input(Client::VsCode, "vscode.mcp.json", Scope::Project);
    let plan = wrap_all(std::slice::from_ref(&vscode), None);
    let change = &plan.changes[0];
    let perplexity = change.records.iter().find(|r| r.name == "Perplexity").unwrap();
    let v: serde_json::Value = serde_json::from_str(&perplexity.wrapped).unwrap();
    assert_eq!(v["command"], EXE);
    assert_eq!(
        v["args"],
        serde_json::json!(["connect", "Perplexity", "--config", CONFIG, "--env", "PERPLEXITY_API_KEY"])
    );
    assert_eq!(v["env"], serde_json::json!({"PERPLEXITY_API_KEY": "${input:perplexity-key}"}));
    assert_eq!(v["type"], "stdio");
    let github = change.records.iter().find(|r| r.name == "github").unwrap();
    let v: serde_json::Value = serde_json::from_str(&github.wrapped).unwrap();
    assert_eq!(v["env"], serde_json::json!({"input_perplexity_key": "${input:perplexity-key}"}));
    let config = &plan.config.as_ref().unwrap().2;
    assert!(!config.contains("${input:"), "a client variable went into switchyard.toml:\n{config}");
    assert!(config.contains("env = { PERPLEXITY_API_KEY = \"${PERPLEXITY_API_KEY}\" }"), "{config}");
    assert!(config.contains("client_env = [\"PERPLEXITY_API_KEY\"]"), "{config}");
    assert!(config.contains("headers = { Authorization = \"Bearer ${input_perplexity_key}\" }"), "{config}");
    // `envFile` only VS Code reads: that entry stays as it was, and the user is told why.
    assert!(!change.records.iter().any(|r| r.name == "workspace-tools"));
    assert!(plan.lines.iter().any(|l| l.contains("workspace-tools") && l.contains("envFile")), "{:#?}", plan.lines);
    // The comments outside the entries are all still there.
    assert!(change.after.contains("// 💡 Inputs are prompted") && change.after.contains("/* A local server"));
}

/// Claude Code's `${VAR:-default}` is expanded by Claude Code, default included, and passed on.
#[test]
fn claude_code_defaults_are_left_to_claude_code() {
    let project = input(Client::ClaudeCode, "project.mcp.json", Scope::Project);
    let plan = wrap_all(std::slice::from_ref(&project), None);
    let shared = plan.changes[0].records.iter().find(|r| r.name == "shared-server").unwrap();
    let v: serde_json::Value = serde_json::from_str(&shared.wrapped).unwrap();
    assert_eq!(
        v["env"],
        serde_json::json!({"TOOLS_DIR": "${TOOLS_DIR:-/opt/tools}", "PORT": "${PORT:-8080}", "API_KEY": "${API_KEY}"})
    );
    let config = &plan.config.as_ref().unwrap().2;
    assert!(config.contains("command = \"${TOOLS_DIR}/server\""), "{config}");
    assert!(config.contains("args = [\"--port\", \"${PORT}\", \"--key\", \"${API_KEY}\"]"), "{config}");
}

/// Claude Desktop expands nothing: `${X}` in its file is text, and stays text.
#[test]
fn claude_desktop_text_is_never_read_as_a_variable() {
    let desktop = input(Client::ClaudeDesktop, "claude_desktop_config.json", Scope::User);
    let plan = wrap_all(std::slice::from_ref(&desktop), None);
    let github = plan.changes[0].records.iter().find(|r| r.name == "github").unwrap();
    let v: serde_json::Value = serde_json::from_str(&github.wrapped).unwrap();
    assert!(v.get("env").is_none(), "{v}");
    let config = &plan.config.as_ref().unwrap().2;
    assert!(config.contains("GITHUB_PERSONAL_ACCESS_TOKEN = \"${NOT_EXPANDED_BY_CLAUDE_DESKTOP}\""), "{config}");
    assert!(!config.contains("client_env"), "{config}");
}

/// The same name with another definition gets a name of its own, said; the same definition is
/// shared, said too.
#[test]
fn two_clients_with_one_name_share_a_server_or_get_distinct_names() {
    let a = Input {
        client: Client::Cursor,
        path: "/home/user/.cursor/mcp.json".into(),
        scope: Scope::User,
        text: r#"{"mcpServers": {"fs": {"command": "npx", "args": ["fs", "/a"]}}}"#.into(),
    };
    let same = Input {
        client: Client::ClaudeDesktop,
        path: "/home/user/.config/Claude/claude_desktop_config.json".into(),
        scope: Scope::User,
        text: r#"{"mcpServers": {"fs": {"command": "npx", "args": ["fs", "/a"]}}}"#.into(),
    };
    let other = Input {
        client: Client::VsCode,
        path: "/w/.vscode/mcp.json".into(),
        scope: Scope::Project,
        text: r#"{"servers": {"fs": {"command": "npx", "args": ["fs", "/b"]}}}"#.into(),
    };
    let plan = wrap_all(&[a.clone(), same, other], None);
    let names: Vec<&str> = plan.changes.iter().map(|c| c.records[0].server.as_str()).collect();
    assert_eq!(names, ["fs", "fs", "fs-vscode"]);
    let config = &plan.config.as_ref().unwrap().2;
    assert_eq!(config.matches("[servers.fs]").count(), 1, "{config}");
    assert!(config.contains("[servers.fs-vscode]"), "{config}");
    assert!(plan.lines.iter().any(|l| l.contains("fs-vscode") && l.contains("another server")), "{:#?}", plan.lines);
    assert!(plan.lines.iter().any(|l| l.contains("shared")), "{:#?}", plan.lines);
    // Against a file that already has `fs` as something else (pools added by hand do not count).
    let existing = "[servers.fs]\ncommand = \"npx\"\nargs = [\"fs\", \"/a\"]\n[servers.fs.pools.default]\nmax = 2\n";
    let plan = wrap_all(std::slice::from_ref(&a), Some(existing));
    assert_eq!(plan.changes[0].records[0].server, "fs");
    assert!(plan.config.is_none(), "the same server was added again");
    let existing = "[servers.fs]\ncommand = \"uvx\"\n";
    let plan = wrap_all(std::slice::from_ref(&a), Some(existing));
    assert_eq!(plan.changes[0].records[0].server, "fs-cursor");
    let (_, before, after) = plan.config.unwrap();
    assert!(after.starts_with(before.unwrap().as_str()), "the file's text was not kept:\n{after}");
}

/// A name switchyard cannot use (a space, a slash) becomes one it can, said.
#[test]
fn an_entry_name_that_is_no_server_name_is_made_one() {
    let a = Input {
        client: Client::ClaudeDesktop,
        path: "/c.json".into(),
        scope: Scope::User,
        text: r#"{"mcpServers": {"My Files/2": {"command": "x"}, "-x": {"command": "y"}}}"#.into(),
    };
    let plan = wrap_all(&[a], None);
    let names: Vec<&str> = plan.changes[0].records.iter().map(|r| r.server.as_str()).collect();
    assert_eq!(names, ["My-Files-2", "x"]);
    for name in names {
        switchyard_config::check_server_name(name).unwrap();
    }
    // A long name, taken by another server: the distinct name is still a valid one.
    let long = "n".repeat(100);
    let a = Input {
        client: Client::ClaudeDesktop,
        path: "/c.json".into(),
        scope: Scope::User,
        text: format!(r#"{{"mcpServers": {{"{long}": {{"command": "x"}}}}}}"#),
    };
    let existing = format!(
        "[servers.{}]\ncommand = \"y\"\n[servers.{}-claude-desktop]\ncommand = \"z\"\n",
        &long[..44],
        &long[..44]
    );
    let plan = wrap_all(&[a], Some(&existing));
    let name = &plan.changes[0].records[0].server;
    assert_eq!(*name, format!("{}-claude-desktop-2", &long[..44]));
    switchyard_config::check_server_name(name).unwrap();
}

/// An entry on one line stays on one line; a CRLF file keeps CRLF; tabs stay tabs; keys of the
/// client (`disabled`, `alwaysAllow`) go along as written.
#[test]
fn the_wrapped_entry_follows_the_file_layout_and_keeps_client_keys() {
    let text = "{\r\n\t\"mcpServers\": {\r\n\t\t\"a\": {\r\n\t\t\t\"command\": \"x\",\r\n\t\t\t\"disabled\": true,\r\n\t\t\t\"alwaysAllow\": [\"t\"]\r\n\t\t},\r\n\t\t\"b\": { \"command\": \"y\" }\r\n\t}\r\n}\r\n";
    let a = Input { client: Client::ClaudeDesktop, path: "/c.json".into(), scope: Scope::User, text: text.into() };
    let plan = wrap_all(std::slice::from_ref(&a), None);
    let after = &plan.changes[0].after;
    assert!(!after.replace("\r\n", "").contains('\n'), "a bare LF in a CRLF file:\n{after:?}");
    assert!(
        after.contains(&format!(
            "\"a\": {{\r\n\t\t\t\"command\": \"{EXE}\",\r\n\t\t\t\"args\": [\"connect\", \"a\", \"--config\", \"{CONFIG}\"],\r\n\t\t\t\"disabled\": true,\r\n\t\t\t\"alwaysAllow\": [\"t\"]\r\n\t\t}},"
        )),
        "{after}"
    );
    assert!(
        after.contains(&format!(
            "\"b\": {{ \"command\": \"{EXE}\", \"args\": [\"connect\", \"b\", \"--config\", \"{CONFIG}\"] }}"
        )),
        "{after}"
    );
    let config = &plan.config.as_ref().unwrap().2;
    assert!(!config.contains("disabled"), "a client setting went into switchyard.toml:\n{config}");
}

/// After an edit elsewhere in the file, unwrap puts the entries back and keeps the edit, and
/// says so; an entry someone changed into something else is left alone, said too.
#[test]
fn unwrap_after_edits_keeps_them_and_says_so() {
    let desktop = input(Client::ClaudeDesktop, "claude_desktop_config.json", Scope::User);
    let plan = wrap_all(std::slice::from_ref(&desktop), None);
    let change = &plan.changes[0];
    let edited = change.after.replace("\"globalShortcut\": \"Alt+Space\"", "\"globalShortcut\": \"Ctrl+Space\"");
    assert_ne!(edited, change.after);
    let edited_input = Input { text: edited, ..desktop.clone() };
    let mut lines = Vec::new();
    let (c, _) = plan_unwrap(&edited_input, &state_of(change), None, &mut lines).unwrap();
    let restored = c.unwrap().after;
    assert_eq!(restored, desktop.text.replace("Alt+Space", "Ctrl+Space"));
    assert!(lines.iter().any(|l| l.contains("changed since switchyard wrote it")), "{lines:?}");

    // `filesystem` replaced by hand with another command: not switchyard's to put back.
    let fs = change.records.iter().find(|r| r.name == "filesystem").unwrap();
    let replaced = change.after.replace(&fs.wrapped, "{\"command\": \"mine\"}");
    let mut lines = Vec::new();
    let (c, keep) =
        plan_unwrap(&Input { text: replaced, ..desktop.clone() }, &state_of(change), None, &mut lines).unwrap();
    let restored = c.unwrap().after;
    assert!(restored.contains("{\"command\": \"mine\"}") && restored.contains("docker"), "{restored}");
    assert!(lines.iter().any(|l| l.contains("filesystem") && l.contains("left as it is")), "{lines:?}");
    assert!(keep.is_empty());

    // `--only`: the others stay wrapped and recorded.
    let mut lines = Vec::new();
    let only = vec!["github".to_string()];
    let (c, keep) = plan_unwrap(&after(&desktop, change), &state_of(change), Some(&only), &mut lines).unwrap();
    assert_eq!(c.unwrap().records.len(), 1);
    assert_eq!(keep.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["filesystem"]);
}

/// A file that does not parse: an error naming file, line and column, nothing planned.
#[test]
fn a_broken_file_is_named_with_line_and_column() {
    let broken = input(Client::VsCode, "broken.vscode.mcp.json", Scope::Project);
    let e = plan_wrap(&[broken], Path::new(CONFIG), None, Path::new(EXE), None).unwrap_err().to_string();
    assert!(e.contains("broken.vscode.mcp.json") && e.contains("line 9, column 5"), "{e}");
}

/// A switchyard config that does not load, or names a single `[server]`, receives nothing.
#[test]
fn a_config_that_cannot_take_servers_is_refused() {
    let desktop = input(Client::ClaudeDesktop, "claude_desktop_config.json", Scope::User);
    let single = "[server]\ncommand = \"x\"\n";
    let e = plan_wrap(std::slice::from_ref(&desktop), Path::new(CONFIG), Some(single), Path::new(EXE), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[server]") && e.contains(CONFIG), "{e}");
    let broken = "[servers.x\n";
    let e = plan_wrap(&[desktop], Path::new(CONFIG), Some(broken), Path::new(EXE), None).unwrap_err();
    assert!(format!("{e:#}").contains("line 1"), "{e:#}");
}

/// `--only` names entries; one that no file has is an error.
#[test]
fn only_picks_entries_and_refuses_unknown_names() {
    let inputs = all();
    let only = vec!["github".to_string(), "sentry".to_string()];
    let plan = plan_wrap(&inputs, Path::new(CONFIG), None, Path::new(EXE), Some(&only)).unwrap();
    let names: Vec<&str> = plan.changes.iter().flat_map(|c| c.records.iter().map(|r| r.name.as_str())).collect();
    assert_eq!(names, ["github", "sentry", "github"]);
    let only = vec!["nope".to_string()];
    let e = plan_wrap(&inputs, Path::new(CONFIG), None, Path::new(EXE), Some(&only)).unwrap_err().to_string();
    assert!(e.contains("nope"), "{e}");
}

/// Which client reads a file, from its name and place.
#[test]
fn a_file_says_which_client_reads_it() {
    let home = Path::new("/home/u");
    let g = |p: &str| guess_client(Path::new(p), home).map(|l| (l.client, l.scope));
    assert_eq!(g("/x/Claude/claude_desktop_config.json"), Some((Client::ClaudeDesktop, Scope::User)));
    assert_eq!(g("/home/u/.claude.json"), Some((Client::ClaudeCode, Scope::User)));
    assert_eq!(g("/w/.mcp.json"), Some((Client::ClaudeCode, Scope::Project)));
    assert_eq!(g("/home/u/.cursor/mcp.json"), Some((Client::Cursor, Scope::User)));
    assert_eq!(g("/w/.cursor/mcp.json"), Some((Client::Cursor, Scope::Project)));
    assert_eq!(g("/w/.vscode/mcp.json"), Some((Client::VsCode, Scope::Project)));
    assert_eq!(g("/home/u/.config/Code/User/mcp.json"), Some((Client::VsCode, Scope::User)));
    assert_eq!(g("/home/u/.codex/config.toml"), Some((Client::Codex, Scope::User)));
    assert_eq!(g("/w/.codex/config.toml"), Some((Client::Codex, Scope::Project)));
    assert_eq!(g("/home/u/.gemini/settings.json"), Some((Client::Gemini, Scope::User)));
    assert_eq!(g("/w/.gemini/settings.json"), Some((Client::Gemini, Scope::Project)));
    assert_eq!(g("/w/config.toml"), None);
    assert_eq!(g("/w/servers.json"), None);
}

fn one(client: Client, path: &str, scope: Scope, text: &str) -> Input {
    Input { client, path: path.into(), scope, text: text.into() }
}

/// A project's servers ran in the project: wrapped, they still do (`.` is the project, not the
/// daemon's `/`), and the same entry in two projects is two servers.
// Unix paths (`/w/p`) in the files and the expected output.
#[cfg(unix)]
#[test]
fn a_project_s_servers_keep_running_in_the_project() {
    let entry = r#"{"mcpServers": {"fs": {"command": "node", "args": ["fs.js", "."]}, "sub": {"command": "x", "cwd": "tools"}}}"#;
    let a = one(Client::ClaudeCode, "/w/a/.mcp.json", Scope::Project, entry);
    let b = one(Client::ClaudeCode, "/w/b/.mcp.json", Scope::Project, entry);
    let vs = one(Client::VsCode, "/w/c/.vscode/mcp.json", Scope::Project, r#"{"servers": {"v": {"command": "y"}}}"#);
    let cur =
        one(Client::Cursor, "/w/d/.cursor/mcp.json", Scope::Project, r#"{"mcpServers": {"c": {"command": "z"}}}"#);
    let user = one(
        Client::ClaudeCode,
        "/home/u/.claude.json",
        Scope::User,
        r#"{"mcpServers": {"mine": {"command": "m"}}, "projects": {"/home/u/p": {"mcpServers": {"pp": {"command": "q"}}}}}"#,
    );
    let plan = wrap_all(&[a, b, vs, cur, user], None);
    let config = &plan.config.as_ref().unwrap().2;
    let parsed: toml::Table = config.parse().unwrap();
    let cwd = |name: &str| parsed["servers"][name].get("cwd").and_then(|c| c.as_str()).map(str::to_string);
    assert_eq!(cwd("fs").as_deref(), Some("/w/a"), "{config}");
    assert_eq!(cwd("fs-claude-code").as_deref(), Some("/w/b"), "{config}");
    assert_eq!(cwd("sub").as_deref(), Some("/w/a/tools"), "{config}");
    assert_eq!(cwd("v").as_deref(), Some("/w/c"), "{config}");
    assert_eq!(cwd("c").as_deref(), Some("/w/d"), "{config}");
    // `projects.<path>` of ~/.claude.json: that path; the user's own servers: none.
    assert_eq!(cwd("pp").as_deref(), Some("/home/u/p"), "{config}");
    assert_eq!(cwd("mine"), None, "{config}");
}

/// VS Code and Cursor fall back to legacy SSE for an `http` entry; Claude Code does not.
#[test]
fn a_remote_entry_keeps_its_client_s_transport_rule() {
    let vs = one(
        Client::VsCode,
        "/w/.vscode/mcp.json",
        Scope::Project,
        r#"{"servers": {"a": {"type": "http", "url": "http://h/mcp"}}}"#,
    );
    let cur =
        one(Client::Cursor, "/home/u/.cursor/mcp.json", Scope::User, r#"{"mcpServers": {"b": {"url": "http://h/b"}}}"#);
    let cc = one(
        Client::ClaudeCode,
        "/p/.mcp.json",
        Scope::Project,
        r#"{"mcpServers": {"c": {"type": "http", "url": "http://h/c"}}}"#,
    );
    let plan = wrap_all(&[vs, cur, cc], None);
    let parsed: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
    let transport = |n: &str| parsed["servers"][n].get("transport").and_then(|t| t.as_str()).map(str::to_string);
    assert_eq!(transport("a"), None);
    assert_eq!(transport("b"), None);
    assert_eq!(transport("c").as_deref(), Some("streamable-http"));
}

/// An entry switchyard cannot take is left with the reason, and the others are wrapped; a file
/// that does not parse among several is left, and the others are wrapped.
#[test]
fn one_entry_or_file_that_cannot_be_wrapped_does_not_stop_the_others() {
    let text = r#"{"mcpServers": {
        "both": {"command": "x", "url": "http://h/mcp"},
        "secret-url": {"url": "https://user:pw@h/mcp"},
        "nested": {"command": "/usr/bin/switchyard", "args": ["run", "--", "srv"]},
        "boxed": {"command": "x", "sandboxEnabled": true},
        "fine": {"command": "ok"}
    }}"#;
    let good = one(Client::Cursor, "/home/u/.cursor/mcp.json", Scope::User, text);
    let broken = one(Client::Cursor, "/w/.cursor/mcp.json", Scope::Project, "{\"mcpServers\": {\n  \"x\": [}\n");
    let plan = wrap_all(&[broken, good], None);
    let names: Vec<&str> = plan.changes.iter().flat_map(|c| c.records.iter().map(|r| r.name.as_str())).collect();
    assert_eq!(names, ["fine"], "{:#?}", plan.lines);
    let said = plan.lines.join("\n");
    for want in [
        "/w/.cursor/mcp.json, line 2",
        "`both` (/home/u/.cursor/mcp.json, line 2): left as it is: it has both `command` and `url`",
        "`secret-url` (/home/u/.cursor/mcp.json, line 3): left as it is: switchyard cannot run it as written",
        "`nested` (/home/u/.cursor/mcp.json, line 4): left as it is: it already runs `switchyard run`",
        "`boxed` (/home/u/.cursor/mcp.json, line 5): left as it is: it has `sandboxEnabled`",
    ] {
        assert!(said.contains(want), "{want:?} not said:\n{said}");
    }
    assert!(!said.contains("switchyard.toml, line"), "a place in a file that does not exist:\n{said}");
}

/// Issue 43: an entry left for a key switchyard does not know is reported at that key's own
/// line, not at the line its entry starts on (TOML and JSON alike).
#[test]
fn an_unknown_key_is_reported_at_its_own_line() {
    let codex = "# mine\n[mcp_servers.q]\ncommand = \"x\"\nargs = [\"a\"]\n\nweird_key = 1\n";
    let json = "{\"mcpServers\": {\n  \"boxed\": {\n    \"command\": \"x\",\n    \"sandboxEnabled\": true\n  }\n}}";
    let plan = wrap_all(
        &[
            one(Client::Codex, "/home/u/.codex/config.toml", Scope::User, codex),
            one(Client::Cursor, "/home/u/.cursor/mcp.json", Scope::User, json),
        ],
        None,
    );
    let said = plan.lines.join("\n");
    for want in [
        "codex `q` (/home/u/.codex/config.toml, line 6): left as it is: it has `weird_key`",
        "`boxed` (/home/u/.cursor/mcp.json, line 4): left as it is: it has `sandboxEnabled`",
    ] {
        assert!(said.contains(want), "{want:?} not said:\n{said}");
    }
}

/// unwrap puts back an entry that only its layout changed (Claude Code rewrites its file), and
/// leaves one edited inside, showing its original, kept on record for later.
#[test]
fn unwrap_tells_a_new_layout_from_an_edit() {
    let cursor = one(
        Client::Cursor,
        "/home/u/.cursor/mcp.json",
        Scope::User,
        "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"},\n    \"b\": {\n      \"command\": \"y\"\n    }\n  }\n}\n",
    );
    let plan = wrap_all(std::slice::from_ref(&cursor), None);
    let change = &plan.changes[0];
    let wrapped: serde_json::Value = serde_json::from_str(&change.after).unwrap();
    // Laid out anew (one line), and `a` edited inside (a client setting added).
    let mut edited = wrapped.clone();
    edited["mcpServers"]["a"]["disabled"] = serde_json::json!(true);
    let text = serde_json::to_string(&edited).unwrap();
    let mut lines = Vec::new();
    let (c, keep) = plan_unwrap(&Input { text, ..cursor.clone() }, &state_of(change), None, &mut lines).unwrap();
    let after: serde_json::Value = serde_json::from_str(&c.unwrap().after).unwrap();
    assert_eq!(after["mcpServers"]["b"], serde_json::json!({"command": "y"}), "b was not put back");
    assert_eq!(after["mcpServers"]["a"]["disabled"], true, "the edit of a was lost");
    assert_eq!(keep.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["a"]);
    let said = lines.join("\n");
    assert!(
        said.contains("`a`: left as it is: it was edited since wrap") && said.contains("{\"command\": \"x\"}"),
        "{said}"
    );
    assert!(said.contains("`b`: restored"), "{said}");
}

/// A CRLF switchyard.toml gets CRLF lines.
#[test]
fn servers_appended_to_a_crlf_config_use_crlf() {
    let desktop = input(Client::ClaudeDesktop, "claude_desktop_config.json", Scope::User);
    let existing = "# mine\r\n[servers.other]\r\ncommand = \"o\"\r\n";
    let plan = wrap_all(&[desktop], Some(existing));
    let after = &plan.config.unwrap().2;
    assert!(!after.replace("\r\n", "").contains('\n'), "{after:?}");
}

/// A project's relative command (`./run.sh`, `.venv/bin/python`) is the project's file; a bare
/// name stays a PATH lookup; `"sandboxEnabled": false` asks for nothing and is wrapped.
// Unix paths (`/w/p`) in the files and the expected output.
#[cfg(unix)]
#[test]
fn a_project_s_relative_command_is_the_project_s_file() {
    let text = r#"{"mcpServers": {"r": {"command": "./run.sh"}, "v": {"command": ".venv/bin/python", "args": ["-m", "srv"]}, "n": {"command": "npx"}, "s": {"command": "x", "sandboxEnabled": false}}}"#;
    let plan = wrap_all(&[one(Client::ClaudeCode, "/w/p/.mcp.json", Scope::Project, text)], None);
    let parsed: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
    let command = |n: &str| parsed["servers"][n]["command"].as_str().unwrap().to_string();
    assert_eq!(command("r"), "/w/p/./run.sh");
    assert_eq!(command("v"), "/w/p/.venv/bin/python");
    assert_eq!(command("n"), "npx");
    assert!(parsed["servers"].get("s").is_some(), "{:#?}", plan.lines);
}

/// An entry that does not read (`"type": "ws"`, no command) is left with its place; the others
/// in the file are wrapped.
#[test]
fn an_entry_that_does_not_read_leaves_the_others_wrappable() {
    let text = "{\"mcpServers\": {\n  \"good\": {\"command\": \"g\"},\n  \"ws\": {\"type\": \"ws\", \"url\": \"ws://h/\"},\n  \"bare\": {\"type\": \"stdio\"}\n}}";
    let plan = wrap_all(&[one(Client::ClaudeCode, "/w/p/.mcp.json", Scope::Project, text)], None);
    let names: Vec<&str> = plan.changes[0].records.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["good"]);
    let said = plan.lines.join("\n");
    assert!(said.contains("line 3, column 18") && said.contains("\"ws\""), "{said}");
    assert!(!said.contains("leaves this claude-code config as it is"), "the whole file is said to be left:\n{said}");
    assert!(said.contains("line 4") && said.contains("neither `command` nor `url`"), "{said}");
}

/// A dry run's diffs show env values, header values and URL queries as `***` (in the client's
/// file and in switchyard.toml), and leave the same text elsewhere alone.
#[test]
fn a_dry_run_diff_hides_values_that_may_be_secrets() {
    let text = r#"{"mcpServers": {
  "gh": {"command": "true", "args": ["--flag", "true"], "env": {"TOKEN": "ghp_s3cr3t", "DEBUG": "true", "KEY": "${input:k}"}},
  "api": {"url": "https://h.example/mcp?key=q5ecret", "headers": {"Authorization": "Bearer sk-live-1"}}
}}"#;
    let cursor = one(Client::Cursor, "/home/u/.cursor/mcp.json", Scope::User, text);
    let plan = wrap_all(std::slice::from_ref(&cursor), None);
    let (path, before, after) = plan.config.as_ref().unwrap();
    let mut diffs = diff(path, before.as_deref().unwrap_or(""), after);
    diffs.push_str(&diff(&cursor.path, &plan.changes[0].before, &plan.changes[0].after));
    assert!(diffs.contains("ghp_s3cr3t") && diffs.contains("q5ecret"), "the test's diffs hold the values");
    let shown = hide_secrets(&diffs, &plan.changes);
    for secret in ["ghp_s3cr3t", "q5ecret", "sk-live-1"] {
        assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
    }
    assert!(shown.contains("TOKEN = \"***\"") && shown.contains("mcp?***\""), "{shown}");
    // `true` as a command and an argument is not a secret because DEBUG is `true`.
    assert!(shown.contains("command = \"true\"") && shown.contains("\"--flag\", \"true\""), "{shown}");
    assert!(shown.contains("${input_k}") || shown.contains("${input:k}"), "{shown}");
    assert!(shown.contains("shown as ***"), "{shown}");
}

/// A short value is as secret as a long one: `FOO=bar`, a two-digit PIN in a header and a short
/// query are all `***`, in the client's file and in switchyard.toml.
#[test]
fn a_dry_run_diff_hides_short_values_too() {
    let text = r#"{"mcpServers": {
  "think": {"command": "npx", "args": ["bar"], "env": {"FOO": "bar", "X": "1"}},
  "api": {"url": "https://h.example/mcp?k=9", "headers": {"Pin": "42"}}
}}"#;
    let cursor = one(Client::Cursor, "/home/u/.cursor/mcp.json", Scope::User, text);
    let plan = wrap_all(std::slice::from_ref(&cursor), None);
    let (path, before, after) = plan.config.as_ref().unwrap();
    let mut diffs = diff(path, before.as_deref().unwrap_or(""), after);
    diffs.push_str(&diff(&cursor.path, &plan.changes[0].before, &plan.changes[0].after));
    let shown = hide_secrets(&diffs, &plan.changes);
    for clear in ["FOO = \"bar\"", "\"FOO\": \"bar\"", "X = \"1\"", "\"42\"", "?k=9"] {
        assert!(!shown.contains(clear), "{clear} shown:\n{shown}");
    }
    assert!(shown.contains("FOO = \"***\"") && shown.contains("\"FOO\": \"***\""), "{shown}");
    assert!(shown.contains("\"Pin\": \"***\"") && shown.contains("mcp?***\""), "{shown}");
    // The same text as an argument is no value: it stays.
    assert!(shown.contains("\"bar\"]"), "{shown}");
}

/// An entry that reaches the daemon's own HTTP front already runs through switchyard: wrapping
/// it would make the daemon a client of itself. A local server on another port is wrapped.
#[test]
fn an_entry_on_the_daemon_s_http_front_is_already_through_switchyard() {
    let cc = one(
        Client::ClaudeCode,
        "/p/.mcp.json",
        Scope::Project,
        r#"{"mcpServers": {
            "fix": {"type": "http", "url": "http://127.0.0.1:7070/mcp/fix", "headers": {"Authorization": "Bearer ${SWITCHYARD_TOKEN}"}},
            "one": {"type": "http", "url": "http://localhost:7070/mcp/"},
            "sub": {"type": "http", "url": "http://app.localhost:7070/mcp"},
            "local": {"type": "http", "url": "http://localhost:3000/mcp"},
            "elsewhere": {"type": "http", "url": "http://mcp.example.com:7070/mcp/fix"}
        }}"#,
    );
    let config = "[http]\nlisten = \"127.0.0.1:7070\"\n";
    let plan = wrap_all(std::slice::from_ref(&cc), Some(config));
    let text = plan.lines.join("\n");
    assert_eq!(text.matches("already runs through switchyard (its HTTP front").count(), 3, "{text}");
    let parsed: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
    let servers = parsed["servers"].as_table().unwrap();
    assert!(servers.contains_key("local") && servers.contains_key("elsewhere"), "{parsed}");
    assert!(["fix", "one", "sub"].iter().all(|s| !servers.contains_key(*s)), "{parsed}");
    // Without an [http] table nothing is the front: all five are wrapped.
    let plan = wrap_all(&[cc], None);
    let parsed: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
    assert_eq!(parsed["servers"].as_table().unwrap().len(), 5, "{parsed}");
}

/// Every byte of `after` outside the records' wrapped texts is `before`'s: the records' texts
/// are found in order, and putting the originals back gives `before`.
fn only_entries_changed(before: &str, after: &str, records: &[Record]) {
    let mut rebuilt = String::new();
    let mut rest = after;
    for r in records {
        let at = rest.find(&r.wrapped).unwrap_or_else(|| panic!("`{}` not found in:\n{after}", r.name));
        rebuilt.push_str(&rest[..at]);
        rebuilt.push_str(&r.original);
        rest = &rest[at + r.wrapped.len()..];
    }
    rebuilt.push_str(rest);
    assert_eq!(rebuilt, before, "bytes outside the entries changed");
}

fn unwrapped(input: &Input, change: &Change) -> String {
    let mut lines = Vec::new();
    let (c, keep) = plan_unwrap(&after(input, change), &state_of(change), None, &mut lines).unwrap();
    assert!(keep.is_empty(), "{keep:?}");
    assert!(lines.iter().all(|l| !l.contains("changed since")), "{lines:?}");
    c.unwrap().after
}

/// Codex's TOML is edited where each server is written: its table keeps its header line (with
/// its comment), Codex's own settings (an allow list, a timeout, per-tool approval) and nothing
/// of how to start the server; env forwarded by Codex stays Codex's (`env_vars`) and reaches the
/// server through `connect --env`. Everything else, byte for byte; unwrap gives the file back.
#[test]
fn codex_config_is_edited_in_place_and_unwraps_to_the_same_bytes() {
    let codex = Input {
        client: Client::Codex,
        path: "/home/user/.codex/config.toml".into(),
        scope: Scope::User,
        text: fixture("codex.config.toml"),
    };
    let plan = wrap_all(std::slice::from_ref(&codex), None);
    let change = &plan.changes[0];
    let names: Vec<&str> = change.records.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["filesystem", "ünï code", "inline"], "{:#?}", plan.lines);
    only_entries_changed(&codex.text, &change.after, &change.records);
    let fs = &change.records[0];
    assert_eq!(
        fs.wrapped,
        format!(
            "[mcp_servers.filesystem]   # the filesystem server\ncommand = \"{EXE}\"\nargs = [\"connect\", \"filesystem\", \"--config\", \"{CONFIG}\", \"--env\", \"GITHUB_TOKEN?\"]\nenv_vars = [\"GITHUB_TOKEN\", \"XDG_STATE_HOME\"]\nstartup_timeout_sec = 20\nenabled_tools = [\"read_file\", \"list_directory\"] # allow list: stays with Codex\ntools.read_file.approval_mode = \"approve\""
        )
    );
    let remote = &change.records[1];
    assert!(remote.wrapped.starts_with("[mcp_servers.\"ünï code\"]\ncommand = "), "{}", remote.wrapped);
    assert!(
        remote.wrapped.contains("env_vars = [\"EXAMPLE_TOKEN\", \"EXAMPLE_KEY\", \"XDG_STATE_HOME\"]"),
        "{}",
        remote.wrapped
    );
    assert!(remote.wrapped.ends_with("\ntool_timeout_sec = 90.5"), "{}", remote.wrapped);
    assert_eq!(
        change.records[2].wrapped,
        format!(
            "{{ command = \"{EXE}\", args = [\"connect\", \"inline\", \"--config\", \"{CONFIG}\"], env_vars = [\"XDG_STATE_HOME\"], enabled = false }}"
        )
    );
    let said = plan.lines.join("\n");
    assert!(
        said.contains("codex `linear` (/home/user/.codex/config.toml, line ")
            && said
                .contains("): left as it is: it has `scopes`: Codex's own OAuth settings for it would not carry over"),
        "{said}"
    );
    assert!(said.contains("codex `memory`: already runs through switchyard"), "{said}");
    let config = &plan.config.as_ref().unwrap().2;
    let parsed: toml::Table = config.parse().unwrap();
    let fs = &parsed["servers"]["filesystem"];
    assert_eq!(fs["env"]["GITHUB_TOKEN"].as_str(), Some("${GITHUB_TOKEN}"), "{config}");
    assert_eq!(fs["env"]["LOG_LEVEL"].as_str(), Some("debug"), "{config}");
    assert_eq!(fs["client_env"].as_array().unwrap().len(), 1, "{config}");
    assert!(fs.get("enabled_tools").is_none(), "a Codex setting went into switchyard.toml:\n{config}");
    let remote = &parsed["servers"]["n--code"];
    assert_eq!(remote["transport"].as_str(), Some("streamable-http"), "{config}");
    assert_eq!(remote["headers"]["Authorization"].as_str(), Some("Bearer ${EXAMPLE_TOKEN}"), "{config}");
    assert_eq!(remote["headers"]["X-Api-Key"].as_str(), Some("${EXAMPLE_KEY}"), "{config}");
    assert_eq!(remote["headers"]["X-Team"].as_str(), Some("core"), "{config}");
    assert_eq!(unwrapped(&codex, change), codex.text, "unwrap did not give the file back");
    // A second wrap changes nothing.
    let again = wrap_all(&[after(&codex, change)], Some(config));
    assert!(again.changes.is_empty() && again.config.is_none(), "{:#?}", again.lines);
}

/// Hostile Codex files: CRLF with a byte-order mark keeps both; a server whose tables stand apart
/// or that is written as dotted keys is left with the reason; a duplicate table or broken TOML is
/// an error naming line and column, as Codex refuses the file too.
// Unix paths (`/w/p`) in the files and the expected output.
#[cfg(unix)]
#[test]
fn hostile_codex_files() {
    let codex = |text: &str| Input {
        client: Client::Codex,
        path: "/w/.codex/config.toml".into(),
        scope: Scope::Project,
        text: text.into(),
    };
    let crlf =
        codex("\u{feff}# mine\r\n[mcp_servers.a]\r\ncommand = \"x\" # c\r\n\r\n[mcp_servers.a.env]\r\nK = \"v\"\r\n");
    let plan = wrap_all(std::slice::from_ref(&crlf), None);
    let after = &plan.changes[0].after;
    assert!(after.starts_with("\u{feff}# mine\r\n[mcp_servers.a]\r\ncommand = "), "{after:?}");
    assert!(!after.replace("\r\n", "").contains('\n'), "a bare LF in a CRLF file:\n{after:?}");
    assert!(!after.contains("[mcp_servers.a.env]"), "{after}");
    assert_eq!(unwrapped(&crlf, &plan.changes[0]), crlf.text);
    // The project's servers run in the project.
    let parsed: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
    assert_eq!(parsed["servers"]["a"]["cwd"].as_str(), Some("/w"));

    let apart = codex(
        "[mcp_servers.a]\ncommand = \"x\"\n[other]\nk = 1\n[mcp_servers.a.env]\nK = \"v\"\n[mcp_servers.b]\ncommand = \"y\"\n",
    );
    let dotted = codex("mcp_servers.c.command = \"z\"\n");
    let plan = wrap_all(&[apart.clone(), dotted], None);
    let names: Vec<&str> = plan.changes.iter().flat_map(|c| c.records.iter().map(|r| r.name.as_str())).collect();
    assert_eq!(names, ["b"], "{:#?}", plan.lines);
    let said = plan.lines.join("\n");
    assert!(said.contains("`a` (/w/.codex/config.toml, line 1): left as it is: its tables are apart"), "{said}");
    assert!(
        said.contains("`c` (/w/.codex/config.toml, line 1): left as it is: it is written as dotted keys"),
        "{said}"
    );
    only_entries_changed(&apart.text, &plan.changes[0].after, &plan.changes[0].records);

    for (text, line, says) in [
        ("[mcp_servers.a]\ncommand = \"x\"\n\n[mcp_servers.a]\ncommand = \"y\"\n", 4, "duplicate"),
        ("[mcp_servers.a]\ncommand = \"x\n", 2, ""),
        ("[mcp_servers.a]\ncommand = \"x\"\nurl = \"http://h/\"\n", 0, "both `command` and `url`"),
    ] {
        let input = codex(text);
        match plan_wrap(std::slice::from_ref(&input), Path::new(CONFIG), None, Path::new(EXE), None) {
            Err(e) if line > 0 => {
                let e = e.to_string();
                assert!(e.contains(&format!("config.toml, line {line}, column")) && e.contains(says), "{text}: {e}");
            }
            Ok(plan) if line == 0 => assert!(plan.lines.join("\n").contains(says), "{:#?}", plan.lines),
            other => panic!("{text}: {:?}", other.map(|p| p.lines)),
        }
    }
}

/// Gemini CLI's settings: `$VAR` and `${VAR}` stay Gemini's to expand (in the wrapped entry's
/// `env`), `httpUrl` is a remote server, Gemini's own settings (`trust`, `timeout`, tool lists)
/// stay on its entry, Google sign-in keeps an entry as it is, and unwrap gives the bytes back.
// Unix paths (`/w/p`) in the files and the expected output.
#[cfg(unix)]
#[test]
fn gemini_settings_wrap_and_unwrap_to_the_same_bytes() {
    let gemini = Input {
        client: Client::Gemini,
        path: "/home/user/.gemini/settings.json".into(),
        scope: Scope::User,
        text: fixture("gemini.settings.json"),
    };
    let plan = wrap_all(std::slice::from_ref(&gemini), None);
    let change = &plan.changes[0];
    let names: Vec<&str> = change.records.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["github", "docs", "events"], "{:#?}", plan.lines);
    only_entries_changed(&gemini.text, &change.after, &change.records);
    let github: serde_json::Value = serde_json::from_str(&change.records[0].wrapped).unwrap();
    assert_eq!(github["env"], serde_json::json!({"GITHUB_PERSONAL_ACCESS_TOKEN": "$GITHUB_TOKEN"}));
    assert_eq!(github["args"][5], "GITHUB_PERSONAL_ACCESS_TOKEN", "{github}");
    assert_eq!(github["includeTools"], serde_json::json!(["search_repositories", "get_file_contents"]));
    assert_eq!((github["timeout"].as_u64(), github["trust"].as_bool()), (Some(30000), Some(false)));
    let docs: serde_json::Value = serde_json::from_str(&change.records[1].wrapped).unwrap();
    assert!(docs.get("httpUrl").is_none() && docs["description"] == "the team's docs", "{docs}");
    let said = plan.lines.join("\n");
    // A user's entry with a relative `cwd`: where the client runs is not switchyard's to know.
    assert!(
        said.contains(
            "gemini `tools` (/home/user/.gemini/settings.json, line 22): left as it is: its `cwd` \"./sub\" is relative"
        ),
        "{said}"
    );
    assert!(
        said.contains("gemini `cloud` (/home/user/.gemini/settings.json, line ")
            && said.contains("): left as it is: it has `authProviderType`"),
        "{said}"
    );
    assert!(said.contains("`tcp` (a WebSocket)"), "{said}");
    let config = &plan.config.as_ref().unwrap().2;
    assert!(!config.contains("$GITHUB_TOKEN\"") && !config.contains(":-/opt/tools"), "{config}");
    let parsed: toml::Table = config.parse().unwrap();
    let servers = &parsed["servers"];
    assert_eq!(
        servers["github"]["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"].as_str(),
        Some("${GITHUB_PERSONAL_ACCESS_TOKEN}")
    );
    assert_eq!(servers["docs"]["url"].as_str(), Some("https://docs.example.com/mcp"));
    assert_eq!(servers["docs"]["headers"]["Authorization"].as_str(), Some("Bearer ${DOCS_TOKEN}"));
    assert_eq!(servers["events"]["transport"].as_str(), Some("sse"));
    assert!(servers.get("cloud").is_none() && servers.get("socket").is_none(), "{config}");
    assert_eq!(unwrapped(&gemini, change), gemini.text, "unwrap did not give the file back");
    // The same file as a project's: `./sub` is the project's, and `tools` is wrapped.
    let project = Input { path: "/w/.gemini/settings.json".into(), scope: Scope::Project, ..gemini.clone() };
    let plan = wrap_all(std::slice::from_ref(&project), None);
    let tools = plan.changes[0].records.iter().find(|r| r.name == "tools").unwrap();
    let tools: serde_json::Value = serde_json::from_str(&tools.wrapped).unwrap();
    assert_eq!(tools["env"], serde_json::json!({"TOOLS_DIR": "${TOOLS_DIR:-/opt/tools}", "HOME": "$HOME"}));
    let parsed: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
    let tools = &parsed["servers"]["tools"];
    assert_eq!(tools["command"].as_str(), Some("${TOOLS_DIR}/server"));
    assert_eq!(tools["args"][1].as_str(), Some("${HOME}"));
    assert_eq!(tools["cwd"].as_str(), Some("/w/./sub"));
    // A trailing comma breaks Gemini CLI's settings: switchyard leaves the file, saying where.
    let broken = Input { text: gemini.text.replace("\"vimMode\": true}", "\"vimMode\": true,}"), ..gemini.clone() };
    let e = plan_wrap(&[broken], Path::new(CONFIG), None, Path::new(EXE), None).unwrap_err().to_string();
    assert!(e.contains("settings.json, line 33, column 30: a trailing comma"), "{e}");
}

/// Hostile Gemini CLI settings: CRLF, tabs, comments inside the entry and a unicode name keep
/// their bytes; a byte-order mark, which Gemini CLI cannot read either, is an error at its place.
// Unix paths (`/w/p`) in the files and the expected output.
#[cfg(unix)]
#[test]
fn hostile_gemini_settings() {
    let text = "{\r\n\t// ü\r\n\t\"mcpServers\": {\r\n\t\t\"ünï code\": {\r\n\t\t\t\"command\": \"x\", /* c */\r\n\t\t\t\"trust\": true\r\n\t\t}\r\n\t}\r\n}\r\n";
    let gemini = one(Client::Gemini, "/w/.gemini/settings.json", Scope::Project, text);
    let plan = wrap_all(std::slice::from_ref(&gemini), None);
    let change = &plan.changes[0];
    assert_eq!(change.records[0].name, "ünï code");
    assert!(!change.after.replace("\r\n", "").contains('\n'), "a bare LF in a CRLF file:\n{:?}", change.after);
    assert!(
        change.records[0].wrapped.ends_with(",\r\n\t\t\t\"trust\": true\r\n\t\t}"),
        "{:?}",
        change.records[0].wrapped
    );
    only_entries_changed(&gemini.text, &change.after, &change.records);
    assert_eq!(unwrapped(&gemini, change), gemini.text);
    let parsed: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
    assert_eq!(parsed["servers"]["n--code"]["cwd"].as_str(), Some("/w"));

    let bom = one(Client::Gemini, "/w/.gemini/settings.json", Scope::Project, &format!("\u{feff}{text}"));
    let e = plan_wrap(&[bom], Path::new(CONFIG), None, Path::new(EXE), None).unwrap_err().to_string();
    assert!(e.contains("settings.json, line 1, column 1: a byte-order mark"), "{e}");
}

/// A server name twice in one map: the client runs the last, and unwrap could not tell the two
/// apart. Both stay as they are, said with their lines; the other servers are wrapped and the
/// file comes back byte for byte.
#[test]
fn a_server_name_twice_is_left_and_unwrap_gives_the_file_back() {
    let text = "{\"mcpServers\": {\n  \"a\": {\"command\": \"x\"},\n  \"b\": {\"command\": \"z\"},\n  \"a\": {\"command\": \"y\"}\n}}\n";
    let cursor = one(Client::Cursor, "/home/u/.cursor/mcp.json", Scope::User, text);
    let plan = wrap_all(std::slice::from_ref(&cursor), None);
    let change = &plan.changes[0];
    assert_eq!(change.records.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["b"], "{:#?}", plan.lines);
    let said = plan.lines.join("\n");
    assert!(said.contains("line 2, column 8: server `a` is in `mcpServers` 2 times (lines 2, 4)"), "{said}");
    assert_eq!(unwrapped(&cursor, change), cursor.text);
}

/// Claude Code refuses a file with a trailing comma or a comment: wrap leaves it, naming the
/// place, rather than rewriting a file that does not load. Cursor reads both, and its file is
/// wrapped.
#[test]
fn a_claude_code_file_with_a_trailing_comma_or_a_comment_is_left_with_its_place() {
    let text = "{\"mcpServers\": {\n  \"a\": {\"command\": \"x\", \"args\": [\"-v\",]}\n}}\n";
    let cc = one(Client::ClaudeCode, "/w/p/.mcp.json", Scope::Project, text);
    let e = plan_wrap(&[cc], Path::new(CONFIG), None, Path::new(EXE), None).unwrap_err().to_string();
    assert!(e.contains("/w/p/.mcp.json, line 2, column 38: a trailing comma"), "{e}");
    let cursor = one(Client::Cursor, "/w/p/.cursor/mcp.json", Scope::Project, text);
    assert_eq!(wrap_all(&[cursor], None).changes.len(), 1);
    // Nor does Claude Code read a comment (its user file stops loading; a project's is ignored).
    let commented = "{\n  // mine\n  \"mcpServers\": {\"a\": {\"command\": \"x\"}}\n}\n";
    let cc = one(Client::ClaudeCode, "/home/u/.claude.json", Scope::User, commented);
    let e = plan_wrap(&[cc], Path::new(CONFIG), None, Path::new(EXE), None).unwrap_err().to_string();
    assert!(e.contains("/home/u/.claude.json, line 2, column 3: a comment"), "{e}");
}

/// `$${VAR}` is a `$` and VAR's value to Claude Code (tried with `claude mcp list`), but
/// `$${VAR}` in switchyard.toml is a literal `${VAR}`: the `$` stays on the client's side, so
/// the server gets what Claude Code gave it before.
#[test]
fn a_dollar_before_a_client_variable_stays_a_dollar() {
    let text = r#"{"mcpServers": {"a": {"command": "x", "args": ["--price", "$${PRICE}"], "env": {"P": "${PRICE}", "Q": "$${PRICE}"}}}}"#;
    let cc = one(Client::ClaudeCode, "/w/p/.mcp.json", Scope::Project, text);
    let plan = wrap_all(&[cc], None);
    let wrapped: serde_json::Value = serde_json::from_str(&plan.changes[0].records[0].wrapped).unwrap();
    let env = wrapped["env"].as_object().unwrap();
    let parsed: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
    let a = &parsed["servers"]["a"];
    assert!(!plan.config.as_ref().unwrap().2.contains("$${"), "{}", plan.config.as_ref().unwrap().2);
    // Each `${NAME}` in switchyard's table is the client's expression of the same name.
    let client_expr = |value: &str| -> String {
        let name = value.trim_start_matches("${").trim_end_matches('}');
        env[name].as_str().unwrap_or_else(|| panic!("{name} not in {wrapped}")).to_string()
    };
    assert_eq!(client_expr(a["env"]["P"].as_str().unwrap()), "${PRICE}");
    assert_eq!(client_expr(a["env"]["Q"].as_str().unwrap()), "$${PRICE}");
    assert_eq!(client_expr(a["args"][1].as_str().unwrap()), "$${PRICE}");
}

/// Codex expands nothing in its file: a `${X}` in a header it sends is text, and stays text in
/// switchyard's header (`$${X}`), while what Codex forwards from its environment is a variable.
#[test]
fn a_codex_header_is_text_unless_codex_forwards_it() {
    let text = "[mcp_servers.r]\nurl = \"https://h.example/mcp\"\nbearer_token_env_var = \"TOKEN\"\nhttp_headers = { \"X-Literal\" = \"${NOT_A_VARIABLE}\" }\n";
    let codex = one(Client::Codex, "/home/u/.codex/config.toml", Scope::User, text);
    let plan = wrap_all(&[codex], None);
    let parsed: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
    let headers = &parsed["servers"]["r"]["headers"];
    assert_eq!(headers["X-Literal"].as_str(), Some("$${NOT_A_VARIABLE}"));
    assert_eq!(headers["Authorization"].as_str(), Some("Bearer ${TOKEN}"));
    assert_eq!(parsed["servers"]["r"]["client_env"].as_array().unwrap().len(), 1);
}

/// The other ways TOML lets Codex's servers be written: a dotted `env.K` inside the table, one
/// `mcp_servers = { ... }` inline table, an indented table. Each is wrapped where it is and
/// comes back byte for byte.
#[test]
fn codex_servers_written_other_ways_wrap_in_place() {
    let cases = [
        "[mcp_servers.a]\ncommand = \"x\"\nenv.K = \"v\" # dotted\nenabled = true\n",
        "mcp_servers = { a = { command = \"x\", env = { K = \"v\" }, enabled = true } }\nmodel = \"m\"\n",
        "  [mcp_servers.a]\n  command = \"x\"\n  enabled = true\n\n  [mcp_servers.a.env]\n  K = \"v\"\n",
    ];
    for text in cases {
        let codex = one(Client::Codex, "/home/u/.codex/config.toml", Scope::User, text);
        let plan = wrap_all(std::slice::from_ref(&codex), None);
        let change = plan.changes.first().unwrap_or_else(|| panic!("{text}: {:#?}", plan.lines));
        let wrapped = &change.records[0].wrapped;
        assert!(wrapped.contains("enabled = true") && !wrapped.contains("K = "), "{text}:\n{wrapped}");
        // New lines take the table's indentation.
        let indent: String = text.chars().take_while(|c| *c == ' ').collect();
        assert!(wrapped.lines().skip(1).all(|l| l.starts_with(&indent)), "{wrapped}");
        only_entries_changed(&codex.text, &change.after, &change.records);
        let parsed: toml::Table = change.after.parse().unwrap_or_else(|e| panic!("{e}\n{}", change.after));
        assert_eq!(parsed["mcp_servers"]["a"]["args"][0].as_str(), Some("connect"), "{}", change.after);
        let config: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
        assert_eq!(config["servers"]["a"]["env"]["K"].as_str(), Some("v"));
        assert_eq!(unwrapped(&codex, change), codex.text);
    }
}

/// A file named on the command line where a client keeps it (Codex's under `CODEX_HOME`) is that
/// client's user file, though its name alone does not say so.
#[test]
fn a_named_file_in_a_client_s_place_is_that_client_s() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("codex-home/config.toml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "").unwrap();
    let codex_home = file.parent().unwrap().display().to_string();
    let env = |k: &str| (k == "CODEX_HOME").then(|| codex_home.clone());
    let opts = Options {
        client: None,
        path: Some(file.clone()),
        project: Some(home.path().to_path_buf()),
        config: None,
        only: None,
        dry_run: true,
        include_tracked: false,
        group: None,
    };
    let [l] = &select(&opts, home.path(), &env).unwrap()[..] else { panic!() };
    assert_eq!((l.client, &l.scope), (Client::Codex, &Scope::User));
    // Elsewhere, a `config.toml` is nobody's until --client says.
    let e = select(&opts, home.path(), &|_| None).unwrap_err().to_string();
    assert!(e.contains("say it with --client"), "{e}");
}

/// A variable Codex forwards from its environment and starts the server without when it is
/// unset (`env_vars`, `env_http_headers`) is optional to `connect` too (`--env NAME?`); the
/// variable of `bearer_token_env_var`, without which Codex does not start the server, is not.
#[test]
fn a_variable_codex_may_leave_unset_stays_optional_behind_switchyard() {
    let text = "[mcp_servers.gh]\ncommand = \"npx\"\nenv_vars = [\"GITHUB_TOKEN\"]\n\n[mcp_servers.r]\nurl = \"https://h.example/mcp\"\nbearer_token_env_var = \"TOKEN\"\nenv_http_headers = { \"X-Key\" = \"KEY\", \"X-Also\" = \"TOKEN\" }\n";
    let codex = one(Client::Codex, "/home/u/.codex/config.toml", Scope::User, text);
    let plan = wrap_all(std::slice::from_ref(&codex), None);
    let after: toml::Table = plan.changes[0].after.parse().unwrap();
    let args = |name: &str| -> Vec<String> {
        after["mcp_servers"][name]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().into()).collect()
    };
    assert_eq!(args("gh")[4..], ["--env", "GITHUB_TOKEN?"]);
    assert_eq!(args("r")[4..], ["--env", "TOKEN,KEY?"]);
    // Codex forwards them under their own names, without the mark.
    let forwarded = after["mcp_servers"]["gh"]["env_vars"].as_array().unwrap();
    assert_eq!(forwarded[0].as_str(), Some("GITHUB_TOKEN"));
    assert_eq!(unwrapped(&codex, &plan.changes[0]), codex.text);
}

/// Every wrap of a Codex file says, once, that a daemon Codex starts gives every client's
/// servers Codex's few variables.
#[test]
fn a_codex_wrap_says_whose_environment_the_daemon_gets() {
    let codex = one(Client::Codex, "/home/u/.codex/config.toml", Scope::User, "[mcp_servers.a]\ncommand = \"x\"\n");
    let plan = wrap_all(std::slice::from_ref(&codex), None);
    let notes: Vec<&String> = plan.lines.iter().filter(|l| l.starts_with("note: Codex starts servers")).collect();
    assert_eq!(notes.len(), 1, "{:#?}", plan.lines);
    let cursor =
        one(Client::Cursor, "/home/u/.cursor/mcp.json", Scope::User, r#"{"mcpServers": {"a": {"command": "x"}}}"#);
    assert!(!wrap_all(&[cursor], None).lines.iter().any(|l| l.contains("note: Codex")));
}

/// A dry run shows no `${VAR:-default}`'s default: it may be a secret written in the file.
#[test]
fn a_dry_run_hides_the_defaults_of_client_variables() {
    let text = r#"{"mcpServers": {"a": {"command": "x", "args": ["--k", "${TOK:-sk-live-DEFAULTSECRET}"], "env": {"T": "${TOK2:-sk-live-OTHER}"}}}}"#;
    let cc = one(Client::ClaudeCode, "/w/p/.mcp.json", Scope::Project, text);
    let plan = wrap_all(std::slice::from_ref(&cc), None);
    let shown = dry_run(plan.config.as_ref(), &plan.changes);
    assert!(!shown.contains("DEFAULTSECRET") && !shown.contains("sk-live-OTHER"), "{shown}");
    assert!(shown.contains("${TOK:-***}") && shown.contains("${TOK2:-***}"), "{shown}");
}

/// A user-level entry's relative `cwd` meant the directory the client runs in, which
/// switchyard cannot know: the entry stays as it is, said with its line. A project's relative
/// `cwd` is the project's, as before.
// Unix paths (`/w/p`) in the files and the expected output.
#[cfg(unix)]
#[test]
fn a_user_level_relative_cwd_is_left_with_the_reason() {
    let text = "{\n  \"mcpServers\": {\n    \"rel\": {\"command\": \"x\", \"cwd\": \"sub\"},\n    \"abs\": {\"command\": \"x\", \"cwd\": \"/srv\"}\n  }\n}\n";
    let user = one(Client::Gemini, "/home/u/.gemini/settings.json", Scope::User, text);
    let plan = wrap_all(std::slice::from_ref(&user), None);
    assert_eq!(plan.changes[0].records.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["abs"]);
    let said = plan.lines.join("\n");
    assert!(
        said.contains(
            "gemini `rel` (/home/u/.gemini/settings.json, line 3): left as it is: its `cwd` \"sub\" is relative"
        ),
        "{said}"
    );
    let project = one(Client::Gemini, "/w/.gemini/settings.json", Scope::Project, text);
    let plan = wrap_all(std::slice::from_ref(&project), None);
    let parsed: toml::Table = plan.config.as_ref().unwrap().2.parse().unwrap();
    assert_eq!(parsed["servers"]["rel"]["cwd"].as_str(), Some("/w/sub"));
}

/// Gemini CLI's `httpUrl` and `"type": "http"` are Streamable HTTP alone, as Codex's remote
/// servers are: the same remote in both is one shared server. A `url` without a type is `auto`.
#[test]
fn gemini_streamable_http_entries_say_so_and_share_a_server_with_codex() {
    let text = r#"{"mcpServers": {
  "docs": {"httpUrl": "https://docs.example.com/mcp"},
  "typed": {"type": "http", "url": "https://t.example.com/mcp"},
  "either": {"url": "https://e.example.com/mcp"}
}}"#;
    let gemini = one(Client::Gemini, "/home/u/.gemini/settings.json", Scope::User, text);
    let codex = one(
        Client::Codex,
        "/home/u/.codex/config.toml",
        Scope::User,
        "[mcp_servers.docs]\nurl = \"https://docs.example.com/mcp\"\n",
    );
    let plan = wrap_all(&[gemini, codex], None);
    let config = &plan.config.as_ref().unwrap().2;
    let parsed: toml::Table = config.parse().unwrap();
    let servers = &parsed["servers"];
    assert_eq!(servers["docs"]["transport"].as_str(), Some("streamable-http"), "{config}");
    assert_eq!(servers["typed"]["transport"].as_str(), Some("streamable-http"), "{config}");
    assert!(servers["either"].get("transport").is_none(), "{config}");
    assert_eq!(servers.as_table().unwrap().len(), 3, "{config}");
    assert_eq!(plan.changes[1].records[0].server, "docs");
}

/// A Codex file with one server written as dotted keys and another as a table: only the dotted
/// one is left (with its line), and the table is wrapped.
#[test]
fn a_dotted_codex_server_leaves_its_table_neighbour_wrappable() {
    let text = "mcp_servers.dotted.command = \"x\"\n\n[mcp_servers.ok]\ncommand = \"y\"\n";
    let codex = one(Client::Codex, "/home/u/.codex/config.toml", Scope::User, text);
    let plan = wrap_all(std::slice::from_ref(&codex), None);
    let names: Vec<&str> = plan.changes.iter().flat_map(|c| c.records.iter().map(|r| r.name.as_str())).collect();
    assert_eq!(names, ["ok"], "{:#?}", plan.lines);
    let said = plan.lines.join("\n");
    assert!(
        said.contains(
            "codex `dotted` (/home/u/.codex/config.toml, line 1): left as it is: it is written as dotted keys"
        ),
        "{said}"
    );
    assert!(!said.contains("`ok` ("), "{said}");
    only_entries_changed(&codex.text, &plan.changes[0].after, &plan.changes[0].records);
    assert_eq!(unwrapped(&codex, &plan.changes[0]), codex.text);
}

/// A second wrap that finds some servers wrapped and others it cannot wrap says both, not that
/// every server runs through switchyard.
#[test]
fn nothing_to_wrap_says_what_was_left() {
    let text = r#"{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y", "envFile": ".env"}}}"#;
    let cursor = one(Client::Cursor, "/home/u/.cursor/mcp.json", Scope::User, text);
    let first = wrap_all(std::slice::from_ref(&cursor), None);
    let config = first.config.as_ref().unwrap().2.clone();
    let second = wrap_all(&[after(&cursor, &first.changes[0])], Some(&config));
    let last = second.lines.last().unwrap();
    assert!(!last.contains("every server"), "{last}");
    assert!(last.contains("1 server(s) already run through switchyard, and 1 cannot be wrapped"), "{last}");
}
