//! Planning `wrap` and `unwrap`: which entries become which switchyard servers, and the new text
//! of each file, from text alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use switchyard_config::{HeaderValue, Launch, TransportKind, is_loopback};

use super::Input;
use super::emit::{def_table, splice, toml_body, toml_key, toml_table, wrapped_entry};
use super::records::{GroupRecord, Record, State, sha256};
use crate::jsonc::Doc;
use crate::{Client, Entry, Kind, Scope};

/// Keys of an entry that change how the client starts the server and that a wrapped entry cannot
/// carry: such an entry is left as it is, with the reason.
pub(super) const LAUNCH_KEYS: &[(&str, &str)] = &[
    (
        "envFile",
        "the client loads its variables from a file that switchyard does not read; move them into `env` and wrap again",
    ),
    ("headersHelper", "the client runs a command for its headers on each connection; switchyard cannot"),
    (
        "oauth",
        "the client's own OAuth settings for it (a client id, scopes) would not carry over; switchyard signs in to remote servers itself (`switchyard login NAME`): remove `oauth` and wrap again to use that",
    ),
    ("auth", "the client signs in to it its own way, which a wrapped entry would not carry over"),
    ("dev", "the client restarts it when its files change (development mode)"),
    ("sandboxEnabled", "the client runs it in a sandbox, which it would leave under switchyard"),
    ("sandbox", "the client runs it in a sandbox, which it would leave under switchyard"),
];

/// The new text of one client file.
#[derive(Debug, Clone)]
pub struct Change {
    pub client: Client,
    pub path: PathBuf,
    pub before: String,
    pub after: String,
    /// Entries replaced now (wrap) or put back (unwrap).
    pub records: Vec<Record>,
    /// Entries replaced by one group entry now (`wrap --group`), or put back.
    pub groups: Vec<GroupRecord>,
}

/// Everything one `wrap` or `unwrap` would write, and what it tells the user.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub changes: Vec<Change>,
    /// switchyard.toml: path, text before (None: to be created), text after.
    pub config: Option<(PathBuf, Option<String>, String)>,
    pub lines: Vec<String>,
}

/// Plans `wrap` of `inputs` into the switchyard config at `config_path` (`config_text`: its text,
/// None when it does not exist yet). `exe` is the switchyard binary the entries run.
pub fn plan_wrap(
    inputs: &[Input],
    config_path: &Path,
    config_text: Option<&str>,
    exe: &Path,
    only: Option<&[String]>,
) -> anyhow::Result<Plan> {
    plan_wrap_picked(inputs, config_path, config_text, exe, only, &|_, e| only.is_none_or(|o| o.contains(&e.name)))
}

/// [`plan_wrap`] of the entries `pick` takes (by their map's scope and the entry); `only` is
/// what the user named, each of which must be in some file.
pub(super) fn plan_wrap_picked(
    inputs: &[Input],
    config_path: &Path,
    config_text: Option<&str>,
    exe: &Path,
    only: Option<&[String]>,
    pick: &dyn Fn(&Scope, &Entry) -> bool,
) -> anyhow::Result<Plan> {
    let existing = existing_servers(config_path, config_text)?;
    // The daemon's own HTTP front: an entry pointing there already runs through switchyard
    // (wrapping it would make the daemon a client of itself).
    let front_port = config_text
        .and_then(|t| switchyard_config::Config::load_text(config_path, t).ok())
        .and_then(|c| c.http)
        .map(|h| h.listen.port())
        .filter(|p| *p != 0);
    let mut planned: BTreeMap<String, Launch> = BTreeMap::new();
    let mut plan = Plan::default();
    let mut appended = String::new();
    let mut matched: BTreeSet<String> = BTreeSet::new();
    let (mut already, mut left) = (0, 0);
    let mut codex = false;
    for input in inputs {
        let found = match crate::parse(input.client, &input.path, &input.text, input.scope.clone()) {
            Ok(found) => found,
            // One file named: its error is the answer. Several: the others go on.
            Err(e) if inputs.len() == 1 => return Err(e.into()),
            Err(e) => {
                plan.lines.push(format!("left as it is: {e}"));
                continue;
            }
        };
        let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
        let mut records = Vec::new();
        for map in &found {
            for e in &map.unreadable {
                left += 1;
                plan.lines.push(format!("left as it is: {e}"));
            }
            let project = project_dir(input, &map.scope);
            for entry in &map.servers {
                if !pick(&map.scope, entry) {
                    continue;
                }
                matched.insert(entry.name.clone());
                let here = place(input.client, &entry.name, project_of(&map.scope).as_deref());
                if let Some(group) = &entry.group {
                    already += 1;
                    plan.lines.push(format!("{here}: already runs through switchyard (group `{group}`)"));
                    continue;
                }
                if let Some(server) = &entry.wrapped {
                    already += 1;
                    plan.lines.push(format!("{here}: already runs through switchyard (server `{server}`)"));
                    continue;
                }
                if let Kind::Http { url, .. } | Kind::Sse { url, .. } = &entry.kind
                    && front_port.is_some_and(|p| is_front(url, p))
                {
                    already += 1;
                    plan.lines.push(format!("{here}: already runs through switchyard (its HTTP front, {url})"));
                    continue;
                }
                // Where the entry is (or the key the reason is about), so the reader finds what to change.
                let mut leave = |at: usize, why: String| {
                    left += 1;
                    let line = switchyard_config::line_col(&input.text, at).0;
                    let at = format!("{}, line {line}", input.path.display());
                    plan.lines.push(format!("{here} ({at}): left as it is: {why}"));
                };
                let start = entry.span.start;
                if let Some(why) = &entry.stuck {
                    leave(start, why.clone());
                    continue;
                }
                if let Some((key, why)) = leave_reason(input, entry) {
                    leave(entry.unknown_at.get(&key).copied().unwrap_or(start), format!("it has `{key}`: {why}"));
                    continue;
                }
                if let Some(why) = unwrappable(entry).or_else(|| relative_cwd(entry, project.as_deref())) {
                    leave(start, why);
                    continue;
                }
                let (def, client_vars) = definition(input, entry, project.as_deref());
                if let Err(why) = runnable(&entry.name, &def) {
                    leave(start, format!("switchyard cannot run it as written: {why}"));
                    continue;
                }
                let (server, why) = choose_name(&entry.name, input.client, &def, &existing, &planned);
                if !existing.contains_key(&server) && !planned.contains_key(&server) {
                    appended.push_str(&toml_table(&server, &def, input, map));
                    planned.insert(server.clone(), def.clone());
                }
                let wrapped = wrapped_entry(input.client, &input.text, entry, exe, config_path, &server, &client_vars)?;
                let mut line = format!("{here} -> switchyard server `{server}`");
                if let Some(why) = why {
                    let _ = write!(line, " ({why})");
                }
                if !client_vars.is_empty() {
                    let names: Vec<&str> = client_vars.iter().map(|(n, _)| n.as_str()).collect();
                    let _ = write!(line, "; the client still supplies {}", names.join(", "));
                }
                plan.lines.push(line);
                codex |= input.client == Client::Codex;
                records.push(Record {
                    project: project_of(&map.scope),
                    name: entry.name.clone(),
                    server,
                    original: input.text[entry.span.clone()].to_string(),
                    wrapped: wrapped.clone(),
                });
                edits.push((entry.span.clone(), wrapped));
            }
        }
        if edits.is_empty() {
            continue;
        }
        let after = splice(&input.text, edits);
        // The result must read back as the client's format with every replaced entry wrapped.
        let reread = crate::parse(input.client, &input.path, &after, input.scope.clone())
            .map_err(|e| anyhow!("switchyard wrap made a file it cannot read back ({e}); nothing was written"))?;
        for r in &records {
            let ok = reread.iter().any(|m| {
                project_of(&m.scope) == r.project
                    && m.servers.iter().any(|e| e.name == r.name && e.wrapped.as_deref() == Some(&r.server))
            });
            if !ok {
                bail!("switchyard wrap did not produce a wrapped entry for `{}`; nothing was written", r.name);
            }
        }
        plan.changes.push(Change {
            client: input.client,
            path: input.path.clone(),
            before: input.text.clone(),
            after,
            records,
            groups: Vec::new(),
        });
    }
    if let Some(only) = only {
        let missing: Vec<&str> = only.iter().filter(|n| !matched.contains(*n)).map(String::as_str).collect();
        if !missing.is_empty() {
            bail!("--only names {} that no file here has; `switchyard clients` lists the servers", missing.join(", "));
        }
    }
    if !appended.is_empty() {
        let before = config_text.map(str::to_string);
        let mut after = before.clone().unwrap_or_else(|| {
            "# switchyard's servers: `switchyard connect NAME` joins [servers.NAME]. See README.md.\n".to_string()
        });
        let crlf = after.contains("\r\n");
        if !after.is_empty() && !after.ends_with('\n') {
            after.push_str(if crlf { "\r\n" } else { "\n" });
        }
        after.push_str(&if crlf { appended.replace('\n', "\r\n") } else { appended });
        switchyard_config::Config::load_text(config_path, &after).map_err(|e| {
            anyhow!(
                "the servers cannot be added to {}: with [servers.NAME] tables appended it does not load ({e:#}); if it writes `servers` as one inline table (`servers = {{ ... }}`), write a [servers.NAME] table per server instead. Nothing was written",
                config_path.display()
            )
        })?;
        plan.config = Some((config_path.to_path_buf(), before, after));
    }
    if codex {
        plan.lines.push(CODEX_NOTE.to_string());
    }
    if plan.changes.is_empty() {
        plan.lines.push(match (already, left) {
            (0, _) => "nothing to wrap".to_string(),
            (_, 0) => "nothing to wrap: every server here already runs through switchyard".to_string(),
            (a, l) => format!(
                "nothing to wrap: {a} server(s) already run through switchyard, and {l} cannot be wrapped (the reasons are above)"
            ),
        });
    }
    Ok(plan)
}

/// What a user who wraps Codex's servers should know: the daemon's servers get the environment
/// of the `connect` that started it, and Codex gives its servers few variables.
const CODEX_NOTE: &str = "note: Codex starts servers with few variables of its environment; if Codex starts the daemon, every client's servers get only those: put what servers need in their `env` in switchyard.toml, or start the daemon from a shell first (`switchyard daemon --detach`); see docs/wrap.md";

/// Why a user-level entry with a relative `cwd` stays as it is: the client resolves it against
/// the directory the client runs in, which switchyard cannot know (in switchyard.toml it would be
/// the config file's directory). A project's entry resolves it against the project.
fn relative_cwd(entry: &Entry, project: Option<&Path>) -> Option<String> {
    let Kind::Stdio { cwd: Some(cwd), .. } = &entry.kind else { return None };
    (project.is_none() && Path::new(cwd).is_relative() && !cwd.starts_with('$')).then(|| {
        format!(
            "its `cwd` \"{}\" is relative: the client resolves it against the directory the client runs in, which switchyard cannot know; make it absolute and wrap again",
            cwd.escape_debug()
        )
    })
}

/// Whether `url` is the daemon's HTTP front on `port` of this machine (`/mcp` or `/mcp/NAME`):
/// any loopback name reaches it, `*.localhost` too.
fn is_front(url: &str, port: u16) -> bool {
    let Ok(u) = url::Url::parse(url) else { return false };
    let path = u.path().trim_end_matches('/');
    is_loopback(&u) && u.port_or_known_default() == Some(port) && (path == "/mcp" || path.starts_with("/mcp/"))
}

/// The key of an entry that only its client can honour, and why it stays as it is.
fn leave_reason(input: &Input, entry: &Entry) -> Option<(String, String)> {
    if input.client == Client::Codex {
        return crate::codex::leave_reason(entry);
    }
    LAUNCH_KEYS
        .iter()
        .chain(if input.client == Client::Gemini { GEMINI_KEYS } else { &[] })
        .find(|(k, _)| entry.unknown.iter().any(|u| u == k) && !is_false(&input.text, entry, k))
        .map(|(k, why)| (k.to_string(), why.to_string()))
}

/// Gemini CLI's keys for signing in to a remote server with Google credentials.
const GEMINI_KEYS: &[(&str, &str)] = &[
    ("authProviderType", "Gemini CLI signs in to it with Google credentials, which switchyard does not do"),
    ("targetAudience", "Gemini CLI signs in to it with Google credentials, which switchyard does not do"),
    ("targetServiceAccount", "Gemini CLI signs in to it as a service account, which switchyard does not do"),
];

/// Whether `key` of the entry is `false` (`"sandboxEnabled": false` asks for nothing).
fn is_false(text: &str, entry: &Entry, key: &str) -> bool {
    Doc::parse(&text[entry.span.clone()])
        .is_ok_and(|d| d.root.get(key).is_some_and(|n| d.value(n) == serde_json::Value::Bool(false)))
}

/// Why an entry cannot be wrapped though it reads, if so.
fn unwrappable(entry: &Entry) -> Option<String> {
    match &entry.kind {
        Kind::Http { .. } | Kind::Sse { .. } if entry.unknown.iter().any(|k| k == "command") => Some(
            "it has both `command` and `url`: which one its client runs is not clear; keep one and wrap again".into(),
        ),
        Kind::Stdio { command, args, .. } => {
            (crate::is_switchyard(command) && args.first().is_some_and(|a| a == "run")).then(|| {
                "it already runs `switchyard run`; wrapping it would put a router in front of a router: put the server after `--` into the entry, then wrap".into()
            })
        }
        _ => None,
    }
}

/// Whether switchyard can run `def`: what its config loader says of it alone.
fn runnable(name: &str, def: &Launch) -> Result<(), String> {
    let name = server_name(name);
    let text = format!("[servers.{}]\n{}", toml_key(&name), toml_body(def));
    match switchyard_config::Config::load_text(Path::new("switchyard.toml"), &text) {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = format!("{e:#}");
            // The loader names a place in a file that does not exist yet: keep only the reason.
            Err(e.rsplit_once("): ").map_or(e.clone(), |(_, why)| why.to_string()))
        }
    }
}

/// Whether two texts of an entry of `client`'s file hold the same value (layout and comments
/// aside).
pub(super) fn same_entry(client: Client, a: &str, b: &str) -> bool {
    if client == Client::Codex { crate::codex::same_entry(a, b) } else { same_json(a, b) }
}

/// Whether two texts hold the same JSON value (layout, comments and trailing commas aside).
fn same_json(a: &str, b: &str) -> bool {
    match (Doc::parse(a), Doc::parse(b)) {
        (Ok(a), Ok(b)) => a.value(&a.root) == b.value(&b.root),
        _ => false,
    }
}

/// `client NAME` or `client NAME (project P)`, for messages.
pub(super) fn place(client: Client, name: &str, project: Option<&str>) -> String {
    match project {
        Some(p) => format!("{} `{name}` (project {p})", client.name()),
        None => format!("{} `{name}`", client.name()),
    }
}

pub(super) fn project_of(scope: &Scope) -> Option<String> {
    match scope {
        Scope::ClaudeProject(p) => Some(p.display().to_string()),
        _ => None,
    }
}

/// The servers already in switchyard.toml, by name, as far as their launch goes.
fn existing_servers(path: &Path, text: Option<&str>) -> anyhow::Result<BTreeMap<String, toml::Table>> {
    let Some(text) = text else { return Ok(BTreeMap::new()) };
    switchyard_config::Config::load_text(path, text)
        .map_err(|e| anyhow!("{e:#}; switchyard wrap adds servers to this file only once it loads"))?;
    let table: toml::Table = text.parse().with_context(|| format!("cannot read {}", path.display()))?;
    if table.contains_key("server") {
        bail!(
            "{} names its one server in [server]; wrap adds [servers.NAME] tables, which cannot stand beside it: move the [server] keys into a [servers.NAME] table first, or give another file with --config",
            path.display()
        );
    }
    let servers = match table.get("servers") {
        Some(toml::Value::Table(t)) => t.clone(),
        _ => toml::Table::new(),
    };
    Ok(servers
        .into_iter()
        .filter_map(|(name, v)| match v {
            toml::Value::Table(t) => Some((name, launch_part(&t))),
            _ => None,
        })
        .collect())
}

/// The keys of a `[servers.NAME]` table that say what runs: the ones two definitions must share
/// to be one server (pools and limits a user added by hand do not make it another).
fn launch_part(t: &toml::Table) -> toml::Table {
    let mut out: toml::Table =
        t.iter().filter(|(k, _)| Launch::KEYS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
    // Empty lists and tables say what their absence says.
    out.retain(|_, v| {
        !matches!(v, toml::Value::Array(a) if a.is_empty()) && !matches!(v, toml::Value::Table(t) if t.is_empty())
    });
    out
}

/// A switchyard server name from a client's entry name: what the name rule allows, else `-`.
pub(super) fn server_name(entry: &str) -> String {
    let mut name: String =
        entry.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '-' }).collect();
    while name.starts_with(['-', '.']) {
        name.remove(0);
    }
    // Room for `-claude-desktop-NN` after it.
    name.truncate(switchyard_config::MAX_SERVER_NAME - 20);
    if name.is_empty() { "server".to_string() } else { name }
}

/// The switchyard name for `def`: the entry's own name when it is free or already holds the
/// same server (two clients then share one server), else `NAME-CLIENT`, `NAME-CLIENT-2`, ...
fn choose_name(
    entry: &str,
    client: Client,
    def: &Launch,
    existing: &BTreeMap<String, toml::Table>,
    planned: &BTreeMap<String, Launch>,
) -> (String, Option<String>) {
    let base = server_name(entry);
    let mine = launch_part(&def_table(def));
    let fits = |name: &str| match (existing.get(name), planned.get(name)) {
        (Some(t), _) => *t == mine,
        (None, Some(d)) => d == def,
        (None, None) => true,
    };
    let shared = |name: &str| existing.contains_key(name) || planned.contains_key(name);
    let first = std::iter::once(base.clone());
    let others = std::iter::once(format!("{base}-{}", client.name()))
        .chain((2..).map(|n| format!("{base}-{}-{n}", client.name())));
    for name in first.chain(others) {
        if fits(&name) {
            let why = if name != base {
                Some(format!("`{base}` in switchyard's config is another server"))
            } else if name != entry {
                Some(format!("`{entry}` is not a switchyard server name"))
            } else if shared(&name) {
                Some(format!("the same server as `{name}` already in switchyard's config: one server, shared"))
            } else {
                None
            };
            return (name, why);
        }
    }
    unreachable!("the numbered names never end")
}

/// The entry as a switchyard server, and the client's variables it needs, as (NAME, expression
/// the client expands), in order.
fn definition(input: &Input, entry: &Entry, project: Option<&Path>) -> (Launch, Vec<(String, String)>) {
    let client = input.client;
    let mut vars: Vec<(String, String)> = Vec::new();
    let name_for = |expr: &str, vars: &mut Vec<(String, String)>, prefer: Option<&str>| -> String {
        if let Some((n, _)) = vars.iter().find(|(_, e)| e == expr) {
            return n.clone();
        }
        let base = prefer
            .filter(|p| switchyard_config::is_var_name(p))
            .map(str::to_string)
            .unwrap_or_else(|| var_name(client, expr));
        let mut name = base.clone();
        let mut n = 2;
        while vars.iter().any(|(v, _)| *v == name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        vars.push((name.clone(), expr.to_string()));
        name
    };
    // An env value that is one variable keeps its own name: `KEY = "${KEY}"` reads best.
    if let Kind::Stdio { env, .. } = &entry.kind {
        for (key, value) in env {
            if entry.variables.iter().any(|v| v == value) {
                name_for(value, &mut vars, Some(key));
            }
        }
    }
    let mut sub = |s: &str| -> String {
        let mut out = String::new();
        let mut done = 0;
        for span in crate::variable_spans(client, s) {
            let expr = &s[span.clone()];
            if entry.variables.iter().any(|v| v == expr) {
                // `$${VAR}` is a `$` and VAR's value to the client, but a literal `${VAR}` to
                // switchyard: the `$` goes into the client's value instead.
                let dollar = span.start > done && s[..span.start].ends_with('$');
                let start = if dollar { span.start - 1 } else { span.start };
                out.push_str(&s[done..start]);
                let name = if dollar {
                    let prefer = var_name(client, expr);
                    name_for(&s[start..span.end], &mut vars, Some(&prefer))
                } else {
                    name_for(expr, &mut vars, None)
                };
                let _ = write!(out, "${{{name}}}");
                done = span.end;
            }
        }
        out.push_str(&s[done..]);
        out
    };
    let mut def = match &entry.kind {
        Kind::Stdio { command, args, env, cwd } => Launch {
            // `./run.sh`, `.venv/bin/python`: the client found them from the project; the daemon
            // starts servers from `/`. A bare name (`npx`) is looked up on PATH, as before.
            command: Some(match (sub(command), project) {
                (c, Some(p)) if c.contains('/') && Path::new(&c).is_relative() && !c.starts_with("${") => {
                    p.join(c).display().to_string()
                }
                (c, _) => c,
            }),
            args: args.iter().map(|a| sub(a)).collect(),
            env: env.iter().map(|(k, v)| (k.clone(), sub(v))).collect(),
            // A project's servers run in the project (so `.` and `./x` mean what they meant to
            // the client); the daemon's own directory is `/`.
            cwd: match (cwd.as_deref().map(&mut sub), project) {
                (Some(c), Some(p)) if Path::new(&c).is_relative() && !c.starts_with("${") => {
                    Some(p.join(c).display().to_string())
                }
                (None, Some(p)) => Some(p.display().to_string()),
                (c, _) => c,
            }
            .map(PathBuf::from),
            ..Launch::default()
        },
        Kind::Http { url, headers } | Kind::Sse { url, headers } => Launch {
            url: Some(sub(url)),
            // None is switchyard's `auto` (Streamable HTTP, else legacy SSE), what VS Code and
            // Cursor do with an `http` entry; Claude Code's `http` is Streamable HTTP only.
            transport: match (&entry.kind, client) {
                (Kind::Sse { .. }, _) => Some(TransportKind::Sse),
                // Codex speaks Streamable HTTP only; Gemini CLI too for `httpUrl` and `"type":
                // "http"`, and falls back to SSE for a `url` without a type, as VS Code does.
                (_, Client::ClaudeCode | Client::Codex) => Some(TransportKind::StreamableHttp),
                (_, Client::Gemini) if gemini_streamable(&input.text[entry.span.clone()]) => {
                    Some(TransportKind::StreamableHttp)
                }
                _ => None,
            },
            headers: headers
                .iter()
                .map(|(k, v)| {
                    // A client that expands nothing means `${` literally; switchyard's headers
                    // read `${VAR}`, and `$${` is their literal `${`. Codex expands nothing
                    // either: only what it forwards from its environment (a whole value, or
                    // `Bearer ` and one) is its variable.
                    let forwarded = |v: &str| {
                        let var = v.strip_prefix("Bearer ").unwrap_or(v);
                        entry.variables.iter().any(|e| e == var)
                    };
                    let literal = client == Client::ClaudeDesktop || (client == Client::Codex && !forwarded(v));
                    let v = if literal { v.replace("${", "$${") } else { sub(v) };
                    (k.clone(), HeaderValue::from(v))
                })
                .collect(),
            ..Launch::default()
        },
    };
    def.client_env = vars.iter().map(|(n, _)| n.clone()).collect();
    (def, vars)
}

/// Whether a Gemini CLI entry (its text) asks for Streamable HTTP alone: `httpUrl`, or `"type":
/// "http"`.
fn gemini_streamable(entry: &str) -> bool {
    Doc::parse(entry).is_ok_and(|d| {
        d.root.get("httpUrl").is_some()
            || d.root.get("type").is_some_and(|t| d.value(t) == serde_json::Value::String("http".into()))
    })
}

/// The directory a client starts a project's servers in: the project's (Claude Code's
/// `projects.<path>`, the directory of `.mcp.json`, the parent of `.cursor/` and `.vscode/`).
/// None for a user's file, whose servers start wherever the client runs.
fn project_dir(input: &Input, scope: &Scope) -> Option<PathBuf> {
    match scope {
        Scope::User => None,
        Scope::ClaudeProject(p) => Some(p.clone()),
        Scope::Project => {
            let file = std::path::absolute(&input.path).ok()?;
            let dir = file.parent()?;
            let name = dir.file_name().and_then(|n| n.to_str());
            match name {
                Some(".cursor" | ".vscode" | ".codex" | ".gemini") => dir.parent().map(Path::to_path_buf),
                _ => Some(dir.to_path_buf()),
            }
        }
    }
}

/// The environment variable that carries a client's `${...}` to `connect`: `${VAR}`,
/// `${VAR:-x}` and `${env:VAR}` keep VAR; `${input:api-key}` becomes `input_api_key`;
/// `${workspaceFolder}` stays `workspaceFolder`.
fn var_name(client: Client, expr: &str) -> String {
    // Gemini CLI's `$VAR` besides `${VAR}`.
    let inner = match expr.strip_prefix("${") {
        Some(rest) => rest.strip_suffix('}').unwrap_or(rest),
        None => expr.strip_prefix('$').unwrap_or(expr),
    };
    let inner = if let Some(v) = inner.strip_prefix("env:") {
        v
    } else if matches!(client, Client::ClaudeCode | Client::Gemini) && inner.contains(":-") {
        inner.split(":-").next().unwrap_or(inner)
    } else {
        inner
    };
    if inner == "/" {
        return "pathSeparator".to_string();
    }
    let mut name: String = inner.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// Plans `unwrap` of one client file from what `wrap` recorded. Returns the change (None when
/// nothing is to be put back) and the records that stay (entries not unwrapped now).
pub fn plan_unwrap(
    input: &Input,
    state: &State,
    only: Option<&[String]>,
    lines: &mut Vec<String>,
) -> anyhow::Result<(Option<Change>, Vec<Record>)> {
    let found = crate::parse(input.client, &input.path, &input.text, input.scope.clone())?;
    let edited = sha256(&input.text) != state.written;
    let mut edits = Vec::new();
    let mut restored = Vec::new();
    let mut keep = Vec::new();
    for record in &state.entries {
        if only.is_some_and(|o| !o.contains(&record.name)) {
            keep.push(record.clone());
            continue;
        }
        let here = place(input.client, &record.name, record.project.as_deref());
        let current = found
            .iter()
            .filter(|m| project_of(&m.scope) == record.project)
            .flat_map(|m| m.servers.iter())
            .find(|e| e.name == record.name);
        match current {
            None => lines.push(format!(
                "{here}: no longer in the file; nothing to put back. The entry before wrap was:\n{}",
                record.original
            )),
            // The same entry, maybe laid out anew (Claude Code rewrites its file with its own
            // indentation): put back.
            Some(e) if same_entry(input.client, &input.text[e.span.clone()], &record.wrapped) => {
                edits.push((e.span.clone(), record.original.clone()));
                restored.push(record.clone());
                lines.push(format!("{here}: restored"));
            }
            Some(e) if e.wrapped.as_deref() == Some(&record.server) => {
                // Edited inside (a key added, say): putting the original back would lose that.
                keep.push(record.clone());
                lines.push(format!(
                    "{here}: left as it is: it was edited since wrap, and putting the original back would lose that edit. The entry before wrap was:\n{}",
                    record.original
                ));
            }
            Some(_) => {
                lines.push(format!(
                    "{here}: left as it is: it no longer runs switchyard server `{}`, so someone changed it since wrap. The entry before wrap was:\n{}",
                    record.server, record.original
                ));
            }
        }
    }
    for map in &found {
        for e in &map.servers {
            let recorded = state.entries.iter().any(|r| r.name == e.name && r.project == project_of(&map.scope));
            if let Some(server) = e.wrapped.as_ref().filter(|_| !recorded && only.is_none_or(|o| o.contains(&e.name))) {
                lines.push(format!(
                    "{} `{}`: runs switchyard server `{server}` but was not wrapped by `switchyard wrap` here (no record of its original): left as it is",
                    input.client.name(),
                    e.name
                ));
            }
        }
    }
    if edits.is_empty() {
        return Ok((None, keep));
    }
    if edited {
        lines.push(format!(
            "{} changed since switchyard wrote it: the wrapped entries were put back, the other changes kept",
            input.path.display()
        ));
    }
    let after = splice(&input.text, edits);
    Ok((
        Some(Change {
            client: input.client,
            path: input.path.clone(),
            before: input.text.clone(),
            after,
            records: restored,
            groups: Vec::new(),
        }),
        keep,
    ))
}
