//! `switchyard clients`: the MCP client configs found, their servers, and which already run
//! through switchyard. Read-only; secrets (header and env values, URL queries, the defaults of
//! `${VAR:-default}`) are never shown.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Client, Entry, Error, Found, Kind, Scope, mask_defaults};

/// What `switchyard clients` found, as JSON (`--json`): one object per server map, or per file
/// that could not be read.
pub fn to_json(found: &[Result<Found, Error>]) -> Value {
    Value::Array(
        found
            .iter()
            .map(|f| match f {
                Ok(f) => json!({
                    "client": f.client.name(),
                    "path": f.path.display().to_string(),
                    "scope": scope_text(&f.scope),
                    "servers": f.servers.iter().map(entry_json).collect::<Vec<_>>(),
                    "unreadable": f.unreadable,
                }),
                Err(e) => json!({"client": error_client(e).name(), "path": error_path(e).display().to_string(), "error": e.to_string()}),
            })
            .collect(),
    )
}

fn entry_json(e: &Entry) -> Value {
    let mut v = json!({
        "name": e.name,
        "wrapped": e.wrapped,
        "group": e.group,
        "variables": e.variables.iter().map(|v| mask_defaults(v)).collect::<Vec<_>>(),
        "stuck": e.stuck,
    });
    match &e.kind {
        Kind::Stdio { command, args, env, cwd } => {
            v["transport"] = json!("stdio");
            v["command"] = json!(mask_defaults(command));
            v["args"] = json!(args.iter().map(|a| mask_defaults(a)).collect::<Vec<_>>());
            v["env_keys"] = json!(env.keys().collect::<Vec<_>>());
            v["cwd"] = json!(cwd.as_deref().map(mask_defaults));
        }
        Kind::Http { url, headers } | Kind::Sse { url, headers } => {
            v["transport"] = json!(if matches!(e.kind, Kind::Http { .. }) { "http" } else { "sse" });
            v["url"] = json!(shown_url(url));
            v["header_keys"] = json!(headers.keys().collect::<Vec<_>>());
        }
    }
    v
}

fn error_client(e: &Error) -> Client {
    match e {
        Error::Read { client, .. } | Error::Invalid { client, .. } => *client,
    }
}

fn error_path(e: &Error) -> &Path {
    match e {
        Error::Read { path, .. } | Error::Invalid { path, .. } => path,
    }
}

fn scope_text(scope: &Scope) -> String {
    match scope {
        Scope::User => "user".into(),
        Scope::Project => "project".into(),
        Scope::ClaudeProject(p) => format!("project {}", p.display()),
    }
}

/// A URL without its query, fragment or credentials (any of which may hold a key).
fn shown_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(u) => switchyard_config::display_url(&u),
        // A variable in place of the URL (`${API_URL}`): as written, it holds no secret itself.
        Err(_) if raw.starts_with("${") => mask_defaults(raw),
        Err(_) => "(not a URL)".to_string(),
    }
}

/// `~/x` for a path under `home` (`~\x` on Windows).
fn short(path: &Path, home: &Path) -> String {
    match path.strip_prefix(home) {
        Ok(rest) => format!("~{}{}", std::path::MAIN_SEPARATOR, rest.display()),
        Err(_) => path.display().to_string(),
    }
}

/// What `switchyard clients` prints for people.
pub fn to_text(found: &[Result<Found, Error>], home: &Path) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let (mut files, mut servers, mut wrapped) = (std::collections::BTreeSet::<PathBuf>::new(), 0, 0);
    // One name column for the whole listing, as wide as its longest name.
    let width =
        found.iter().flatten().flat_map(|f| &f.servers).map(|e| shown(&e.name).chars().count()).max().unwrap_or(0);
    for f in found {
        match f {
            Ok(f) => {
                files.insert(f.path.clone());
                let _ = writeln!(out, "{} {} ({})", f.client.name(), short(&f.path, home), scope_text(&f.scope));
                for e in &f.unreadable {
                    let _ = writeln!(out, "  cannot be read: {e}");
                }
                if f.servers.is_empty() && f.unreadable.is_empty() {
                    let _ = writeln!(out, "  no servers");
                }
                for e in &f.servers {
                    servers += 1;
                    let what = match &e.kind {
                        Kind::Stdio { command, args, .. } => {
                            let line = std::iter::once(command.as_str())
                                .chain(args.iter().map(String::as_str))
                                .map(shown_word)
                                .collect::<Vec<_>>()
                                .join(" ");
                            // Whole: a command cut short cannot be told from another.
                            format!("stdio  {}", mask_defaults(&line))
                        }
                        Kind::Http { url, .. } => format!("http   {}", shown_url(url)),
                        Kind::Sse { url, .. } => format!("sse    {}", shown_url(url)),
                    };
                    let state = match (&e.wrapped, &e.group) {
                        (Some(name), _) => {
                            wrapped += 1;
                            format!("through switchyard (server `{name}`)")
                        }
                        (None, Some(group)) => {
                            wrapped += 1;
                            format!("through switchyard (group `{group}`)")
                        }
                        (None, None) => match &e.stuck {
                            Some(why) => format!("direct; wrap leaves it: {why}"),
                            None => "direct".to_string(),
                        },
                    };
                    let _ = writeln!(out, "  {:<width$} {what}\n  {:<width$} {state}", shown(&e.name), "");
                }
            }
            Err(e) => {
                files.insert(error_path(e).to_path_buf());
                let _ = writeln!(out, "{} {}: cannot be read: {e}", error_client(e).name(), short(error_path(e), home));
            }
        }
    }
    if files.is_empty() {
        let _ = writeln!(
            out,
            "no MCP client config found (Claude Desktop, Claude Code, Cursor, VS Code, Codex, Gemini CLI)"
        );
    } else {
        let _ = writeln!(out, "\n{} file(s), {servers} server(s), {wrapped} through switchyard", files.len());
    }
    out
}

/// `text` as it may go to a terminal: a config file is anyone's to write, and a control
/// character in it (an escape sequence, a line break) must not act on the user's terminal or
/// break the listing; each is shown escaped.
fn shown(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// One word of a command line as [`shown`], quoted when it holds a space (so it reads as one).
fn shown_word(word: &str) -> String {
    let text = shown(word);
    if word.is_empty() || word.contains(' ') { format!("{text:?}") } else { text }
}

/// `switchyard clients [--project DIR] [--json]`.
pub fn run(project: Option<&Path>, json: bool) -> anyhow::Result<String> {
    let home = crate::home()?;
    let cwd = std::env::current_dir().ok();
    let project = project.map(Path::to_path_buf).or(cwd);
    let env = |k: &str| std::env::var(k).ok();
    let found = super::discover(&home, project.as_deref(), &env);
    Ok(if json { format!("{:#}\n", to_json(&found)) } else { to_text(&found, &home) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients").join(name)).unwrap()
    }

    #[test]
    fn the_listing_names_each_server_and_whether_it_runs_through_switchyard_and_shows_no_secret() {
        let home = Path::new("/home/user");
        let path = home.join(".claude.json");
        let found: Vec<Result<Found, Error>> =
            super::super::parse(Client::ClaudeCode, &path, &fixture("claude.json"), Scope::User)
                .unwrap()
                .into_iter()
                .map(Ok)
                .collect();
        let text = to_text(&found, home);
        let sep = std::path::MAIN_SEPARATOR;
        assert!(text.contains(&format!("claude-code ~{sep}.claude.json (user)")), "{text}");
        assert!(text.contains("sentry") && text.contains("https://mcp.sentry.dev/mcp"), "{text}");
        assert!(text.contains("through switchyard (server `shop-db`)"), "{text}");
        assert!(!text.contains("Bearer"), "a header value was shown:\n{text}");
        let json = to_json(&found);
        let all: Vec<&Value> = json.as_array().unwrap().iter().flat_map(|f| f["servers"].as_array().unwrap()).collect();
        let linear = all.iter().find(|s| s["name"] == "linear").unwrap();
        assert_eq!(linear["transport"], "sse");
        assert_eq!(linear["header_keys"], json!(["Authorization"]));
        assert!(!json.to_string().contains("Bearer"));
    }

    /// A config file is anyone's to write: control characters in a server's name or arguments
    /// (an escape sequence, a line break) are shown escaped, never sent to the terminal, and an
    /// argument with a space is quoted.
    #[test]
    fn control_characters_in_a_config_never_reach_the_terminal() {
        let text = serde_json::to_string(&json!({"mcpServers": {
            "red\u{1b}[31mname": {"command": "tool", "args": ["a\nb", "my dir"]},
        }}))
        .unwrap();
        let path = Path::new("/home/user/.cursor/mcp.json");
        let found: Vec<Result<Found, Error>> =
            super::super::parse(Client::Cursor, path, &text, Scope::User).unwrap().into_iter().map(Ok).collect();
        let listed = to_text(&found, Path::new("/home/user"));
        assert!(!listed.contains('\u{1b}'), "{listed:?}");
        assert!(
            listed.contains("red\\u{1b}[31mname") && listed.contains("a\\nb") && listed.contains("\"my dir\""),
            "{listed}"
        );
        assert_eq!(
            listed.lines().filter(|l| l.contains("tool")).count(),
            1,
            "a line break in an argument split the line:\n{listed}"
        );
    }

    /// Issue 43: names over 16 characters pushed their line's columns out of line with the
    /// others, and commands were cut at 72 characters.
    #[test]
    fn the_columns_fit_the_longest_name_and_commands_are_whole() {
        let long_args: Vec<String> = (1..=12).map(|n| format!("--flag-number-{n}")).collect();
        let text = serde_json::to_string(&json!({"mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/w"]},
            "a-rather-long-server-name": {"command": "long-tool", "args": long_args},
            "remote": {"url": "https://h.example/mcp"},
        }}))
        .unwrap();
        let path = Path::new("/home/user/.cursor/mcp.json");
        let found: Vec<Result<Found, Error>> =
            super::super::parse(Client::Cursor, path, &text, Scope::User).unwrap().into_iter().map(Ok).collect();
        let shown = to_text(&found, Path::new("/home/user"));
        let whole = format!("long-tool {}", long_args.join(" "));
        assert!(whole.len() > 72 && shown.contains(&whole), "the command was cut:\n{shown}");
        // Every transport and every state starts in one column, just past the longest name.
        let column = 2 + "a-rather-long-server-name".len() + 1;
        let rows: Vec<&str> = shown.lines().filter(|l| l.starts_with("  ")).collect();
        assert_eq!(rows.len(), 6, "{shown}");
        for row in rows {
            let (name, rest) = row.split_at(column);
            assert!(name.ends_with(' ') && !rest.starts_with(' '), "out of column:\n{row}\nin\n{shown}");
        }
    }

    #[test]
    fn a_codex_server_wrap_cannot_replace_says_why() {
        let text = "[mcp_servers.a]\ncommand = \"x\"\n[other]\n[mcp_servers.a.env]\nK = \"v\"\n";
        let path = Path::new("/home/user/.codex/config.toml");
        let found: Vec<Result<Found, Error>> =
            super::super::parse(Client::Codex, path, text, Scope::User).unwrap().into_iter().map(Ok).collect();
        let shown = to_text(&found, Path::new("/home/user"));
        // `~` and the OS's separator, then the rest of the path as it was written.
        let sep = std::path::MAIN_SEPARATOR;
        assert!(shown.contains(&format!("codex ~{sep}.codex/config.toml (user)")), "{shown}");
        assert!(shown.contains("direct; wrap leaves it: its tables are apart"), "{shown}");
        assert!(to_json(&found)[0]["servers"][0]["stuck"].as_str().is_some_and(|s| s.contains("apart")));
    }

    #[test]
    fn a_default_in_a_client_variable_is_not_shown() {
        let text = r#"{"mcpServers": {"a": {"command": "x", "env": {"T": "${TOK:-sk-live-DEFAULTSECRET}", "H": "${HOME}"}, "args": ["--k", "${K:-sk-live-ARGSECRET}"]}}}"#;
        let path = Path::new("/home/user/.gemini/settings.json");
        let found: Vec<Result<Found, Error>> =
            super::super::parse(Client::Gemini, path, text, Scope::User).unwrap().into_iter().map(Ok).collect();
        let json = to_json(&found);
        assert!(!json.to_string().contains("DEFAULTSECRET") && !json.to_string().contains("ARGSECRET"), "{json:#}");
        assert_eq!(json[0]["servers"][0]["variables"], json!(["${TOK:-***}", "${HOME}", "${K:-***}"]));
        let text = to_text(&found, Path::new("/home/user"));
        assert!(!text.contains("ARGSECRET") && text.contains("${K:-***}"), "{text}");
    }

    #[test]
    fn a_url_is_shown_without_what_may_hold_a_key() {
        assert_eq!(shown_url("https://u:p@h.example/mcp?key=s3cret#x"), "https://h.example/mcp");
        assert_eq!(shown_url("${API_URL}"), "${API_URL}");
        assert_eq!(shown_url("not a url"), "(not a URL)");
    }
}
