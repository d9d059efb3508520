//! The readers against fixture files shaped like each client's documented examples
//! (tests/clients/).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;

fn fixture(name: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients").join(name);
    let text = std::fs::read_to_string(&path).expect("read a fixture");
    (path, text)
}

fn read_fixture(client: Client, name: &str, scope: Scope) -> (String, Vec<Found>) {
    let (path, text) = fixture(name);
    let found = parse(client, &path, &text, scope).unwrap_or_else(|e| panic!("{e}"));
    (text, found)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn stdio(command: &str, args: &[&str], env: &[(&str, &str)]) -> Kind {
    Kind::Stdio { command: command.into(), args: strings(args), env: map(env), cwd: None }
}

/// Every entry's span is exactly its value: the text before it ends in `"NAME":`, and the span
/// alone reads as the same entry.
fn assert_spans(client: Client, text: &str, found: &Found) {
    for entry in &found.servers {
        let slice = &text[entry.span.clone()];
        assert!(slice.starts_with('{') && slice.ends_with('}'), "{}: {slice}", entry.name);
        let before = text[..entry.span.start].trim_end();
        let key = serde_json::to_string(&entry.name).unwrap();
        assert!(before.strip_suffix(':').unwrap().trim_end().ends_with(&key), "{}", entry.name);
        let alone = format!("{{\"{}\": {{\"x\": {slice}}}}}", client.servers_key());
        let again = parse(client, Path::new("span"), &alone, Scope::Project).unwrap();
        let mut same = again[0].servers[0].clone();
        // The places of its unknown keys, counted from the entry's start, are the same too.
        let from_start = |e: &Entry| -> Vec<(String, usize)> {
            e.unknown_at.iter().map(|(k, at)| (k.clone(), at - e.span.start)).collect()
        };
        assert_eq!(from_start(&same), from_start(entry), "{}", entry.name);
        same.name.clone_from(&entry.name);
        same.span.clone_from(&entry.span);
        same.unknown_at.clone_from(&entry.unknown_at);
        assert_eq!(&same, entry);
    }
}

#[test]
fn claude_desktop_reads_stdio_entries_and_a_wrapped_one() {
    let (text, found) = read_fixture(Client::ClaudeDesktop, "claude_desktop_config.json", Scope::User);
    assert_eq!(found.len(), 1);
    let f = &found[0];
    assert_eq!((f.client, &f.scope), (Client::ClaudeDesktop, &Scope::User));
    let names: Vec<_> = f.servers.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["filesystem", "github", "memory"]);
    let fs = &f.servers[0];
    let dirs =
        ["-y", "@modelcontextprotocol/server-filesystem", "/Users/username/Desktop", "/Users/username/Downloads"];
    assert_eq!(fs.kind, stdio("npx", &dirs, &[]));
    // Claude Desktop expands no variables: the text reaches the server as written.
    let github = &f.servers[1];
    assert!(github.variables.is_empty());
    let Kind::Stdio { env, .. } = &github.kind else { panic!("{:?}", github.kind) };
    assert_eq!(env["GITHUB_PERSONAL_ACCESS_TOKEN"], "${NOT_EXPANDED_BY_CLAUDE_DESKTOP}");
    assert_eq!(f.servers[2].wrapped.as_deref(), Some("memory"));
    assert!(f.servers[..2].iter().all(|e| e.wrapped.is_none() && e.unknown.is_empty()));
    assert_spans(Client::ClaudeDesktop, &text, f);
}

#[test]
fn claude_code_user_file_has_the_user_scope_and_each_project_with_servers() {
    let (text, found) = read_fixture(Client::ClaudeCode, "claude.json", Scope::User);
    let scopes: Vec<_> = found.iter().map(|f| f.scope.clone()).collect();
    // Projects without servers (none, or an empty map) are left out.
    assert_eq!(scopes, [Scope::User, Scope::ClaudeProject("/home/user/shop".into())]);
    let user = &found[0].servers;
    assert_eq!(user[0].name, "sentry");
    assert_eq!(user[0].kind, Kind::Http { url: "https://mcp.sentry.dev/mcp".into(), headers: BTreeMap::new() });
    assert_eq!(
        user[1].kind,
        stdio("npx", &["-y", "airtable-mcp-server"], &[("AIRTABLE_API_KEY", "${AIRTABLE_API_KEY}")])
    );
    assert_eq!(user[1].variables, ["${AIRTABLE_API_KEY}"]);
    let shop = &found[1].servers;
    assert_eq!(shop[0].name, "db");
    assert_eq!(shop[0].wrapped.as_deref(), Some("shop-db"));
    assert_eq!(
        shop[1].kind,
        Kind::Sse {
            url: "https://mcp.linear.app/sse".into(),
            headers: map(&[("Authorization", "Bearer ${LINEAR_TOKEN}")])
        }
    );
    assert_eq!(shop[1].variables, ["${LINEAR_TOKEN}"]);
    for f in &found {
        assert_spans(Client::ClaudeCode, &text, f);
    }
    // A project's `.mcp.json` has no `projects` to read, even when it holds the key.
    let project = parse(Client::ClaudeCode, Path::new(".mcp.json"), &text, Scope::Project).unwrap();
    assert_eq!(project.len(), 1);
}

#[test]
fn claude_code_project_file_reads_remote_entries_and_defaults() {
    let (text, found) = read_fixture(Client::ClaudeCode, "project.mcp.json", Scope::Project);
    let [f] = &found[..] else { panic!("{found:?}") };
    let api = &f.servers[0];
    assert_eq!(
        api.kind,
        Kind::Http {
            url: "${API_BASE_URL:-https://api.example.com}/mcp".into(),
            headers: map(&[("Authorization", "Bearer ${API_KEY}")])
        }
    );
    assert_eq!(api.variables, ["${API_BASE_URL:-https://api.example.com}", "${API_KEY}"]);
    let shared = &f.servers[1];
    assert_eq!(
        shared.kind,
        Kind::Stdio {
            command: "${TOOLS_DIR:-/opt/tools}/server".into(),
            args: strings(&["--port", "${PORT:-8080}", "--key", "${API_KEY}"]),
            env: BTreeMap::new(),
            cwd: Some("/srv/shared".into()),
        }
    );
    // Each variable once, in the order of the file.
    assert_eq!(shared.variables, ["${TOOLS_DIR:-/opt/tools}", "${PORT:-8080}", "${API_KEY}"]);
    assert_spans(Client::ClaudeCode, &text, f);
}

#[test]
fn cursor_reads_remote_types_and_keeps_the_keys_it_does_not_model() {
    let (text, found) = read_fixture(Client::Cursor, "cursor.mcp.json", Scope::User);
    let [f] = &found[..] else { panic!("{found:?}") };
    let s = &f.servers;
    assert_eq!(s[0].kind, stdio("npx", &["-y", "mcp-server"], &[("API_KEY", "${env:API_KEY}")]));
    assert_eq!(s[0].unknown, ["envFile"]);
    assert_eq!(s[0].variables, ["${env:API_KEY}", "${workspaceFolder}"]);
    // A `url` without a `type` is Streamable HTTP.
    assert_eq!(
        s[1].kind,
        Kind::Http { url: "http://localhost:3000/mcp".into(), headers: map(&[("API_KEY", "${env:MY_SERVICE_TOKEN}")]) }
    );
    assert_eq!(s[2].kind, Kind::Http { url: "https://api.example.com/mcp".into(), headers: BTreeMap::new() });
    assert_eq!(s[2].unknown, ["auth"]);
    assert_eq!(s[2].variables, ["${env:MCP_CLIENT_ID}"]);
    assert_eq!(s[3].kind, Kind::Sse { url: "http://localhost:8000/sse".into(), headers: BTreeMap::new() });
    assert_spans(Client::Cursor, &text, f);
}

#[test]
fn vscode_reads_comments_trailing_commas_inputs_and_variables() {
    let (text, found) = read_fixture(Client::VsCode, "vscode.mcp.json", Scope::Project);
    let [f] = &found[..] else { panic!("{found:?}") };
    assert_eq!(f.inputs, ["perplexity-key"]);
    let names: Vec<_> = f.servers.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["Perplexity", "workspace-tools", "github", "events", "fetch"]);
    let s = &f.servers;
    assert_eq!(
        s[0].kind,
        stdio(
            "npx",
            &["-y", "@modelcontextprotocol/server-perplexity-ask"],
            &[("PERPLEXITY_API_KEY", "${input:perplexity-key}")]
        )
    );
    assert_eq!(s[0].variables, ["${input:perplexity-key}"]);
    assert_eq!(s[1].variables, ["${workspaceFolder}", "${env:TOOLS_TOKEN}"]);
    assert_eq!(s[1].unknown, ["envFile"]);
    assert_eq!(s[2].variables, ["${input:perplexity-key}"]);
    assert_eq!(s[3].kind, Kind::Sse { url: "http://localhost:9000/sse".into(), headers: BTreeMap::new() });
    assert_eq!(s[4].wrapped.as_deref(), Some("fetch"));
    assert!(s[..4].iter().all(|e| e.wrapped.is_none()));
    // The span keeps the entry's own comment and trailing commas, byte for byte.
    let perplexity = &text[s[0].span.clone()];
    assert!(perplexity.starts_with("{\n      \"type\": \"stdio\","), "{perplexity}");
    assert!(perplexity.ends_with("// asked once, kept by VS Code\n      },\n    }"), "{perplexity}");
    assert_spans(Client::VsCode, &text, f);
}

#[test]
fn a_broken_file_is_an_error_naming_file_line_and_column() {
    let (path, text) = fixture("broken.vscode.mcp.json");
    let err = parse(Client::VsCode, &path, &text, Scope::Project).unwrap_err();
    let Error::Invalid { line, column, .. } = &err else { panic!("{err}") };
    assert_eq!((*line, *column), (9, 5), "{err}");
    let said = err.to_string();
    assert!(said.contains("broken.vscode.mcp.json, line 9, column 5: expected `,` or `}`"), "{said}");
}

#[test]
fn entries_switchyard_cannot_read_are_errors_at_their_place() {
    let cases = [
        ("{\"mcpServers\": {\"a\": {\"type\": \"ws\", \"url\": \"ws://x\"}}}", 1, 31, "`type` \"ws\""),
        ("{\"mcpServers\": {\n  \"a\": {\"args\": []}}}", 2, 8, "neither `command` nor `url`"),
        ("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"args\": \"-v\"}}}", 1, 47, "should be an array"),
        ("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"env\": {\"N\": 1}}}}", 1, 52, "`env.N`"),
        ("{\"mcpServers\": {\"a\": {\"type\": \"sse\"}}}", 1, 22, "has no `url`"),
        ("{\"mcpServers\": []}", 1, 16, "`mcpServers` should be an object"),
        ("[]", 1, 1, "the file should be an object"),
    ];
    for (i, (text, line, column, says)) in cases.into_iter().enumerate() {
        // An entry that does not read is an error of its own; the file and its other entries read.
        let err = match parse(Client::Cursor, Path::new("m.json"), text, Scope::User) {
            Ok(mut found) if i < 5 => found.remove(0).unreadable.remove(0),
            Ok(found) => panic!("{text} read: {found:?}"),
            Err(e) => {
                assert!(i >= 5, "{text}: the whole file failed: {e}");
                e.to_string()
            }
        };
        assert!(err.contains(&format!("line {line}, column {column}: ")), "{text}: {err}");
        assert!(err.contains(says), "{text}: {err}");
    }
    // A file without a server map has no servers, and is no error.
    let found = parse(Client::ClaudeDesktop, Path::new("c.json"), "{\"globalShortcut\": \"\"}", Scope::User).unwrap();
    assert!(found[0].servers.is_empty());
}

#[test]
fn wrapped_entries_name_their_switchyard_server() {
    let args = |a: &[&str]| strings(a);
    assert_eq!(wrapped("switchyard", &args(&["connect", "git"])).as_deref(), Some("git"));
    assert_eq!(wrapped("/usr/bin/switchyard", &args(&["connect", "--config=/c.toml", "git"])).as_deref(), Some("git"));
    assert_eq!(
        wrapped("C:\\bin\\switchyard.exe", &args(&["connect", "--socket", "/s", "git"])).as_deref(),
        Some("git")
    );
    assert_eq!(wrapped("switchyard", &args(&["connect", "--", "-odd"])).as_deref(), Some("-odd"));
    assert_eq!(wrapped("switchyard", &args(&["run", "git"])), None);
    assert_eq!(wrapped("switchyard", &args(&["connect"])), None);
    assert_eq!(wrapped("not-switchyard", &args(&["connect", "git"])), None);
}

#[test]
fn discover_finds_each_layout_under_a_home_and_a_project() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let put = |dir: &Path, rel: &str, fixture_name: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, fixture(fixture_name).1).unwrap();
        path
    };
    let h = home.path();
    let linux = put(h, ".config/Claude/claude_desktop_config.json", "claude_desktop_config.json");
    let mac = put(h, "Library/Application Support/Claude/claude_desktop_config.json", "claude_desktop_config.json");
    let claude = put(h, "claude-config/.claude.json", "claude.json");
    let cursor = put(h, ".cursor/mcp.json", "cursor.mcp.json");
    let vscode_user = put(h, "Library/Application Support/Code/User/mcp.json", "vscode.mcp.json");
    // Not read: CLAUDE_CONFIG_DIR moves Claude Code's file elsewhere.
    put(h, ".claude.json", "broken.vscode.mcp.json");
    let p = project.path();
    let mcp = put(p, ".mcp.json", "project.mcp.json");
    let vscode = put(p, ".vscode/mcp.json", "broken.vscode.mcp.json");
    // Codex's user file where CODEX_HOME says; Gemini CLI's project file.
    let codex = put(h, "codex-home/config.toml", "codex.config.toml");
    put(h, ".codex/config.toml", "broken.vscode.mcp.json");
    let gemini = put(p, ".gemini/settings.json", "gemini.settings.json");
    let appdata = h.join("roaming");
    let windows = put(&appdata, "Claude/claude_desktop_config.json", "claude_desktop_config.json");
    let vars: BTreeMap<&str, String> = [
        ("APPDATA", appdata.display().to_string()),
        ("CLAUDE_CONFIG_DIR", h.join("claude-config").display().to_string()),
        ("XDG_CONFIG_HOME", String::new()),
        ("CODEX_HOME", h.join("codex-home").display().to_string()),
    ]
    .into();
    let env = |name: &str| vars.get(name).cloned();
    let all = discover(h, Some(p), &env);
    let mut got = Vec::new();
    let mut errors = Vec::new();
    for r in all {
        match r {
            Ok(f) => got.push((f.client, f.path, f.scope, f.servers.len())),
            Err(e) => errors.push(e),
        }
    }
    let shop = Scope::ClaudeProject("/home/user/shop".into());
    let want = [
        (Client::ClaudeDesktop, linux, Scope::User, 3),
        (Client::ClaudeDesktop, mac, Scope::User, 3),
        (Client::ClaudeDesktop, windows, Scope::User, 3),
        (Client::ClaudeCode, claude.clone(), Scope::User, 2),
        (Client::ClaudeCode, claude, shop, 2),
        (Client::Cursor, cursor, Scope::User, 4),
        (Client::VsCode, vscode_user, Scope::User, 5),
        (Client::Codex, codex, Scope::User, 5),
        (Client::ClaudeCode, mcp, Scope::Project, 2),
        (Client::Gemini, gemini, Scope::Project, 5),
    ];
    assert_eq!(got, want);
    let [Error::Invalid { client: Client::VsCode, path, line: 9, column: 5, .. }] = &errors[..] else {
        panic!("{errors:?}")
    };
    assert_eq!(path, &vscode);
    // A project that is the home directory lists `~/.cursor/mcp.json` once, as the user's.
    let twice = locations(h, Some(h), &env);
    let cursors: Vec<_> = twice.iter().filter(|l| l.client == Client::Cursor).collect();
    assert_eq!(cursors.len(), 1);
    assert_eq!(cursors[0].scope, Scope::User);
}

#[test]
fn codex_reads_tables_inline_tables_and_what_codex_forwards() {
    let (text, found) = read_fixture(Client::Codex, "codex.config.toml", Scope::User);
    let [f] = &found[..] else { panic!("{found:?}") };
    let names: Vec<_> = f.servers.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["filesystem", "ünï code", "inline", "linear", "memory"]);
    let fs = &f.servers[0];
    let dirs = ["-y", "@modelcontextprotocol/server-filesystem", "/home/user/projects"];
    // What Codex forwards from its environment is the client's variable.
    assert_eq!(fs.kind, stdio("npx", &dirs, &[("GITHUB_TOKEN", "${GITHUB_TOKEN}"), ("LOG_LEVEL", "debug")]));
    assert_eq!(fs.variables, ["${GITHUB_TOKEN}"]);
    assert_eq!(fs.unknown, ["startup_timeout_sec", "enabled_tools", "tools"]);
    // The span is its table and its sub-table, up to the last value's line.
    let span = &text[fs.span.clone()];
    assert!(span.starts_with("[mcp_servers.filesystem]   #") && span.ends_with("LOG_LEVEL = \"debug\" # not a secret"));
    let remote = &f.servers[1];
    assert_eq!(
        remote.kind,
        Kind::Http {
            url: "https://mcp.example.com/mcp".into(),
            headers: map(&[
                ("Authorization", "Bearer ${EXAMPLE_TOKEN}"),
                ("X-Api-Key", "${EXAMPLE_KEY}"),
                ("X-Team", "core")
            ])
        }
    );
    assert_eq!(remote.variables, ["${EXAMPLE_KEY}", "${EXAMPLE_TOKEN}"]);
    assert_eq!(
        &text[f.servers[2].span.clone()],
        "{ command = \"uvx\", args = [\"mcp-server-time\"], enabled = false }"
    );
    assert_eq!(f.servers[3].unknown, ["scopes"]);
    assert_eq!(f.servers[4].wrapped.as_deref(), Some("memory"));
    assert!(f.servers.iter().all(|e| e.stuck.is_none()) && f.unreadable.is_empty());
    // Not TOML: an error naming line and column.
    let err = parse(Client::Codex, Path::new("c.toml"), "[mcp_servers.a]\ncommand = \n", Scope::User).unwrap_err();
    assert!(err.to_string().starts_with("c.toml, line 2, column"), "{err}");
}
