//! `switchyard wrap` and `unwrap`: every server of a client's config moved behind switchyard in
//! one step, and back.
//!
//! `wrap` replaces the text of each server entry (and nothing else: other keys, their order,
//! comments and spacing stay byte for byte) with a stdio entry that runs `switchyard connect
//! NAME --config FILE`, and appends the server's definition to switchyard.toml as
//! `[servers.NAME]`. What the client alone can resolve (`${input:key}`, `${workspaceFolder}`,
//! Claude Code's `${VAR}`) stays in the client's file, in the wrapped entry's `env`, and reaches
//! the server through `connect --env` (the server's `client_env`). Each replaced entry's text is
//! recorded, so `unwrap` puts it back exactly: the file comes back byte for byte when nothing
//! else changed, and with the other changes kept when something did.
//!
//! Planning is pure (text in, text out) so every case is tested without a file system; [`wrap`]
//! writes: switchyard.toml first (a client restarted meanwhile finds its servers there), then each
//! client file, each atomically (a temporary file renamed over it) after a backup beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use serde::{Deserialize, Serialize};

use super::jsonc::{Doc, Tree};
use super::{Client, Entry, Found, Kind, Location, Scope};

/// Keys of an entry that change how the client starts the server and that a wrapped entry cannot
/// carry: such an entry is left as it is, with the reason.
const LAUNCH_KEYS: &[(&str, &str)] = &[
    (
        "envFile",
        "the client loads its variables from a file that switchyard does not read; move them into `env` and wrap again",
    ),
    ("headersHelper", "the client runs a command for its headers on each connection; switchyard cannot"),
    ("oauth", "the client signs in to it with OAuth, which switchyard does not do yet"),
    ("auth", "the client signs in to it, which switchyard does not do yet"),
    ("dev", "the client restarts it when its files change (development mode)"),
    ("sandboxEnabled", "the client runs it in a sandbox, which it would leave under switchyard"),
    ("sandbox", "the client runs it in a sandbox, which it would leave under switchyard"),
];

/// The keys a wrapped entry writes itself (or that describe the server it replaces): never
/// carried over from the original.
const ENTRY_KEYS: &[&str] = &["type", "command", "args", "env", "cwd", "url", "headers"];

/// What `wrap` and `unwrap` act on: the files of one client, or one file.
#[derive(Debug, Clone)]
pub struct Options {
    pub client: Option<Client>,
    pub path: Option<PathBuf>,
    pub project: Option<PathBuf>,
    /// The switchyard config that receives the servers (`wrap`); default the user's.
    pub config: Option<PathBuf>,
    /// Only these entries (by their name in the client's file).
    pub only: Option<Vec<String>>,
    pub dry_run: bool,
}

/// One client file to work on, with its text as read.
#[derive(Debug, Clone)]
pub struct Input {
    pub client: Client,
    pub path: PathBuf,
    pub scope: Scope,
    pub text: String,
}

/// A replaced entry: where it is, what it was, what it became.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Claude Code's project path for an entry of `projects.<path>.mcpServers`; None for the
    /// file's own server map.
    pub project: Option<String>,
    pub name: String,
    /// The switchyard server the entry runs.
    pub server: String,
    pub original: String,
    pub wrapped: String,
}

/// What `wrap` recorded for one client file, kept in switchyard's state directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub file: PathBuf,
    pub client: String,
    /// SHA-256 of the file as switchyard last wrote it: another hash means someone else edited it.
    pub written: String,
    pub entries: Vec<Record>,
}

/// The new text of one client file.
#[derive(Debug, Clone)]
pub struct Change {
    pub client: Client,
    pub path: PathBuf,
    pub before: String,
    pub after: String,
    /// Entries replaced now (wrap) or put back (unwrap).
    pub records: Vec<Record>,
}

/// Everything one `wrap` or `unwrap` would write, and what it tells the user.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub changes: Vec<Change>,
    /// switchyard.toml: path, text before (None: to be created), text after.
    pub config: Option<(PathBuf, Option<String>, String)>,
    pub lines: Vec<String>,
}

/// A server's definition as it goes into switchyard.toml.
#[derive(Debug, Clone, PartialEq)]
struct Def {
    kind: DefKind,
    client_env: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum DefKind {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<String>,
    },
    /// `transport`: None is switchyard's `auto` (Streamable HTTP, else legacy SSE), what VS Code
    /// and Cursor do with an `http` entry; Claude Code's `http` is Streamable HTTP only.
    Remote {
        url: String,
        transport: Option<&'static str>,
        headers: BTreeMap<String, String>,
    },
}

// ---------------------------------------------------------------------------------------------
// wrap

/// Plans `wrap` of `inputs` into the switchyard config at `config_path` (`config_text`: its text,
/// None when it does not exist yet). `exe` is the switchyard binary the entries run.
pub fn plan_wrap(
    inputs: &[Input],
    config_path: &Path,
    config_text: Option<&str>,
    exe: &Path,
    only: Option<&[String]>,
) -> anyhow::Result<Plan> {
    let existing = existing_servers(config_path, config_text)?;
    // The daemon's own HTTP front: an entry pointing there already runs through switchyard
    // (wrapping it would make the daemon a client of itself).
    let front_port = config_text
        .and_then(|t| switchyard_config::Config::load_text(config_path, t).ok())
        .and_then(|c| c.http)
        .map(|h| h.listen.port())
        .filter(|p| *p != 0);
    let mut planned: BTreeMap<String, Def> = BTreeMap::new();
    let mut plan = Plan::default();
    let mut appended = String::new();
    let mut matched: BTreeSet<String> = BTreeSet::new();
    let mut already = 0;
    for input in inputs {
        let found = match super::parse(input.client, &input.path, &input.text, input.scope.clone()) {
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
                plan.lines.push(format!("left as it is: {e}"));
            }
            let project = project_dir(input, &map.scope);
            for entry in &map.servers {
                if only.is_some_and(|o| !o.contains(&entry.name)) {
                    continue;
                }
                matched.insert(entry.name.clone());
                let here = place(input.client, &entry.name, project_of(&map.scope).as_deref());
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
                if let Some((key, why)) = LAUNCH_KEYS
                    .iter()
                    .find(|(k, _)| entry.unknown.iter().any(|u| u == k) && !is_false(&input.text, entry, k))
                {
                    plan.lines.push(format!("{here}: left as it is: it has `{key}`: {why}"));
                    continue;
                }
                if let Some(why) = unwrappable(entry) {
                    plan.lines.push(format!("{here}: left as it is: {why}"));
                    continue;
                }
                let (def, client_vars) = definition(input.client, entry, project.as_deref());
                if let Err(why) = runnable(&entry.name, &def) {
                    plan.lines.push(format!("{here}: left as it is: switchyard cannot run it as written: {why}"));
                    continue;
                }
                let (server, why) = choose_name(&entry.name, input.client, &def, &existing, &planned);
                if !existing.contains_key(&server) && !planned.contains_key(&server) {
                    appended.push_str(&toml_table(&server, &def, input, map));
                    planned.insert(server.clone(), def.clone());
                }
                let wrapped = wrapped_entry(&input.text, entry, exe, config_path, &server, &client_vars)?;
                let mut line = format!("{here} -> switchyard server `{server}`");
                if let Some(why) = why {
                    let _ = write!(line, " ({why})");
                }
                if !client_vars.is_empty() {
                    let names: Vec<&str> = client_vars.iter().map(|(n, _)| n.as_str()).collect();
                    let _ = write!(line, "; the client still supplies {}", names.join(", "));
                }
                plan.lines.push(line);
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
        let reread = super::parse(input.client, &input.path, &after, input.scope.clone())
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
    if plan.changes.is_empty() {
        plan.lines.push(if already > 0 {
            "nothing to wrap: every server here already runs through switchyard".to_string()
        } else {
            "nothing to wrap".to_string()
        });
    }
    Ok(plan)
}

/// Whether `url` is the daemon's HTTP front on `port` of this machine (`/mcp` or `/mcp/NAME`).
fn is_front(url: &str, port: u16) -> bool {
    let Ok(u) = url::Url::parse(url) else { return false };
    let loopback = match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    };
    let path = u.path().trim_end_matches('/');
    loopback && u.port_or_known_default() == Some(port) && (path == "/mcp" || path.starts_with("/mcp/"))
}

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
            (super::is_switchyard(command) && args.first().is_some_and(|a| a == "run")).then(|| {
                "it already runs `switchyard run`; wrapping it would put a router in front of a router: put the server after `--` into the entry, then wrap".into()
            })
        }
        _ => None,
    }
}

/// Whether switchyard can run `def`: what its config loader says of it alone.
fn runnable(name: &str, def: &Def) -> Result<(), String> {
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

/// Whether two texts hold the same JSON value (layout, comments and trailing commas aside).
fn same_json(a: &str, b: &str) -> bool {
    match (Doc::parse(a), Doc::parse(b)) {
        (Ok(a), Ok(b)) => a.value(&a.root) == b.value(&b.root),
        _ => false,
    }
}

/// `client NAME` or `client NAME (project P)`, for messages.
fn place(client: Client, name: &str, project: Option<&str>) -> String {
    match project {
        Some(p) => format!("{} `{name}` (project {p})", client.name()),
        None => format!("{} `{name}`", client.name()),
    }
}

fn project_of(scope: &Scope) -> Option<String> {
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
    const LAUNCH: &[&str] = &["command", "args", "env", "cwd", "url", "transport", "headers", "client_env"];
    let mut out: toml::Table =
        t.iter().filter(|(k, _)| LAUNCH.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
    // Empty lists and tables say what their absence says.
    out.retain(|_, v| {
        !matches!(v, toml::Value::Array(a) if a.is_empty()) && !matches!(v, toml::Value::Table(t) if t.is_empty())
    });
    out
}

/// A switchyard server name from a client's entry name: what the name rule allows, else `-`.
fn server_name(entry: &str) -> String {
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
    def: &Def,
    existing: &BTreeMap<String, toml::Table>,
    planned: &BTreeMap<String, Def>,
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
fn definition(client: Client, entry: &Entry, project: Option<&Path>) -> (Def, Vec<(String, String)>) {
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
        for span in super::variable_spans(s) {
            let expr = &s[span.clone()];
            if entry.variables.iter().any(|v| v == expr) {
                out.push_str(&s[done..span.start]);
                let _ = write!(out, "${{{}}}", name_for(expr, &mut vars, None));
                done = span.end;
            }
        }
        out.push_str(&s[done..]);
        out
    };
    let kind = match &entry.kind {
        Kind::Stdio { command, args, env, cwd } => DefKind::Stdio {
            // `./run.sh`, `.venv/bin/python`: the client found them from the project; the daemon
            // starts servers from `/`. A bare name (`npx`) is looked up on PATH, as before.
            command: match (sub(command), project) {
                (c, Some(p)) if c.contains('/') && Path::new(&c).is_relative() && !c.starts_with("${") => {
                    p.join(c).display().to_string()
                }
                (c, _) => c,
            },
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
            },
        },
        Kind::Http { url, headers } | Kind::Sse { url, headers } => DefKind::Remote {
            url: sub(url),
            transport: match (&entry.kind, client) {
                (Kind::Sse { .. }, _) => Some("sse"),
                (_, Client::ClaudeCode) => Some("streamable-http"),
                _ => None,
            },
            headers: headers
                .iter()
                .map(|(k, v)| {
                    // A client that expands nothing means `${` literally; switchyard's headers
                    // read `${VAR}`, and `$${` is their literal `${`.
                    let v = if client == Client::ClaudeDesktop { v.replace("${", "$${") } else { sub(v) };
                    (k.clone(), v)
                })
                .collect(),
        },
    };
    let client_env = vars.iter().map(|(n, _)| n.clone()).collect();
    (Def { kind, client_env }, vars)
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
                Some(".cursor" | ".vscode") => dir.parent().map(Path::to_path_buf),
                _ => Some(dir.to_path_buf()),
            }
        }
    }
}

/// The environment variable that carries a client's `${...}` to `connect`: `${VAR}`,
/// `${VAR:-x}` and `${env:VAR}` keep VAR; `${input:api-key}` becomes `input_api_key`;
/// `${workspaceFolder}` stays `workspaceFolder`.
fn var_name(client: Client, expr: &str) -> String {
    let inner = &expr[2..expr.len() - 1];
    let inner = if let Some(v) = inner.strip_prefix("env:") {
        v
    } else if client == Client::ClaudeCode && inner.contains(":-") {
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

/// A TOML string (basic, escaped).
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A TOML key: bare when it can be.
fn toml_key(k: &str) -> String {
    if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        k.to_string()
    } else {
        toml_str(k)
    }
}

fn toml_inline(map: &BTreeMap<String, String>) -> String {
    let items: Vec<String> = map.iter().map(|(k, v)| format!("{} = {}", toml_key(k), toml_str(v))).collect();
    format!("{{ {} }}", items.join(", "))
}

fn toml_list(items: &[String]) -> String {
    format!("[{}]", items.iter().map(|s| toml_str(s)).collect::<Vec<_>>().join(", "))
}

/// `def` as the value of a `[servers.NAME]` table, for comparing with one in the file.
fn def_table(def: &Def) -> toml::Table {
    let text = toml_body(def);
    text.parse().expect("switchyard writes TOML it reads")
}

fn toml_body(def: &Def) -> String {
    let mut out = String::new();
    match &def.kind {
        DefKind::Stdio { command, args, env, cwd } => {
            let _ = writeln!(out, "command = {}", toml_str(command));
            if !args.is_empty() {
                let _ = writeln!(out, "args = {}", toml_list(args));
            }
            if !env.is_empty() {
                let _ = writeln!(out, "env = {}", toml_inline(env));
            }
            if let Some(cwd) = cwd {
                let _ = writeln!(out, "cwd = {}", toml_str(cwd));
            }
        }
        DefKind::Remote { url, transport, headers } => {
            let _ = writeln!(out, "url = {}", toml_str(url));
            if let Some(t) = transport {
                let _ = writeln!(out, "transport = {}", toml_str(t));
            }
            if !headers.is_empty() {
                let _ = writeln!(out, "headers = {}", toml_inline(headers));
            }
        }
    }
    if !def.client_env.is_empty() {
        let _ = writeln!(out, "client_env = {}", toml_list(&def.client_env));
    }
    out
}

fn toml_table(name: &str, def: &Def, input: &Input, map: &Found) -> String {
    let from = match &map.scope {
        Scope::ClaudeProject(p) => format!("{} (project {})", input.path.display(), p.display()),
        _ => input.path.display().to_string(),
    };
    // A comment line cannot hold a line break; a path may.
    let from: String = from.chars().map(|c| if c.is_control() { '?' } else { c }).collect();
    format!(
        "\n# From {} {from} (switchyard wrap)\n[servers.{}]\n{}",
        input.client.name(),
        toml_key(name),
        toml_body(def)
    )
}

/// How the file lays out an entry: the indentation of the line it starts on, that of its
/// members (None: it is written on one line), and the line break.
struct Layout {
    outer: String,
    inner: Option<String>,
    newline: &'static str,
}

fn layout(text: &str, entry: &Entry) -> Layout {
    let line_start = text[..entry.span.start].rfind('\n').map_or(0, |i| i + 1);
    let outer: String = text[line_start..].chars().take_while(|c| *c == ' ' || *c == '\t').collect();
    let body = &text[entry.span.clone()];
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let inner = body.find('\n').map(|nl| {
        let next = &body[nl + 1..];
        let indent: String = next.chars().take_while(|c| *c == ' ' || *c == '\t').collect();
        if indent.len() > outer.len() && indent.starts_with(&outer) { indent } else { format!("{outer}  ") }
    });
    Layout { outer, inner, newline }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// The text of the stdio entry that replaces `entry`: `type` when the original said it,
/// `command`, `args`, `env` with the client's variables, then the original's other keys as they
/// were written (client settings such as `disabled` or `autoApprove`).
fn wrapped_entry(
    text: &str,
    entry: &Entry,
    exe: &Path,
    config: &Path,
    server: &str,
    vars: &[(String, String)],
) -> anyhow::Result<String> {
    let original = &text[entry.span.clone()];
    let doc = Doc::parse(original).map_err(|e| anyhow!("entry `{}` does not read alone: {}", entry.name, e.message))?;
    let Tree::Object(members) = &doc.root.tree else { bail!("entry `{}` is not an object", entry.name) };
    let exe = exe
        .to_str()
        .ok_or_else(|| anyhow!("{}: switchyard's path is not UTF-8, which JSON cannot hold", exe.display()))?;
    let config = config
        .to_str()
        .ok_or_else(|| anyhow!("{}: the config's path is not UTF-8, which JSON cannot hold", config.display()))?;
    let mut args = vec!["connect".to_string(), server.to_string(), "--config".to_string(), config.to_string()];
    if !vars.is_empty() {
        args.push("--env".into());
        args.push(vars.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(","));
    }
    let mut fields: Vec<(String, String)> = Vec::new();
    if members.iter().any(|m| m.key == "type") {
        fields.push(("type".into(), json_str("stdio")));
    }
    fields.push(("command".into(), json_str(exe)));
    let args_text = format!("[{}]", args.iter().map(|a| json_str(a)).collect::<Vec<_>>().join(", "));
    fields.push(("args".into(), args_text));
    let carried: Vec<&super::jsonc::Member> =
        members.iter().filter(|m| entry.unknown.contains(&m.key) && !ENTRY_KEYS.contains(&m.key.as_str())).collect();
    // One line (`{ "a": 1, "b": 2 }`) or one member per line at the file's indentation.
    let lay = layout(text, entry);
    let object = |items: Vec<String>, indent: Option<(&str, &str)>| match indent {
        None => format!("{{ {} }}", items.join(", ")),
        Some((inner, outer)) => {
            let nl = lay.newline;
            let items: Vec<String> = items.iter().map(|i| format!("{inner}{i}")).collect();
            format!("{{{nl}{}{nl}{outer}}}", items.join(&format!(",{nl}")))
        }
    };
    let deeper = lay.inner.as_ref().map(|inner| format!("{inner}{}", &inner[lay.outer.len()..]));
    if !vars.is_empty() {
        let items = vars.iter().map(|(n, e)| format!("{}: {}", json_str(n), json_str(e))).collect();
        fields.push(("env".into(), object(items, deeper.as_deref().zip(lay.inner.as_deref()))));
    }
    for m in carried {
        fields.push((m.key.clone(), original[m.value.span.clone()].to_string()));
    }
    let items = fields.iter().map(|(k, v)| format!("{}: {v}", json_str(k))).collect();
    Ok(object(items, lay.inner.as_deref().map(|inner| (inner, lay.outer.as_str()))))
}

/// `text` with each range replaced (ranges do not overlap).
fn splice(text: &str, mut edits: Vec<(std::ops::Range<usize>, String)>) -> String {
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = text.to_string();
    for (range, with) in edits {
        out.replace_range(range, &with);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// unwrap

/// Plans `unwrap` of one client file from what `wrap` recorded. Returns the change (None when
/// nothing is to be put back) and the records that stay (entries not unwrapped now).
pub fn plan_unwrap(
    input: &Input,
    state: &State,
    only: Option<&[String]>,
    lines: &mut Vec<String>,
) -> anyhow::Result<(Option<Change>, Vec<Record>)> {
    let found = super::parse(input.client, &input.path, &input.text, input.scope.clone())?;
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
            Some(e) if same_json(&input.text[e.span.clone()], &record.wrapped) => {
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
        }),
        keep,
    ))
}

// ---------------------------------------------------------------------------------------------
// files

/// `~/x` as a shell would have expanded it (`--config=~/x` reaches switchyard as written).
fn tilde(path: &Path, home: &Path) -> PathBuf {
    match path.strip_prefix("~") {
        Ok(rest) => home.join(rest),
        Err(_) => path.to_path_buf(),
    }
}

/// Whether a path names something, a dangling or looping link included (reading it then says
/// what is wrong).
fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The files `opts` names: PATH (its client from `--client` or from where it is), or every file
/// of `--client` that exists here.
pub fn select(opts: &Options, home: &Path, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Vec<Location>> {
    let project = match &opts.project {
        Some(p) => {
            let p = tilde(p, home);
            if !p.is_dir() {
                bail!("--project {}: no such directory", p.display());
            }
            Some(p)
        }
        None => std::env::current_dir().ok(),
    };
    if let Some(path) = &opts.path {
        let path = tilde(path, home);
        let guessed = guess(&path, home);
        let client = opts.client.or(guessed.as_ref().map(|l| l.client)).ok_or_else(|| {
            anyhow!(
                "cannot tell which client reads {}; say it with --client (claude-desktop, claude-code, cursor, vscode)",
                path.display()
            )
        })?;
        let scope = match &guessed {
            Some(l) if l.client == client => l.scope.clone(),
            _ => Scope::Project,
        };
        if !present(&path) {
            bail!("{}: no such file", path.display());
        }
        return Ok(vec![Location { client, path, scope }]);
    }
    let Some(client) = opts.client else {
        bail!(
            "name a client (--client claude-desktop|claude-code|cursor|vscode) or a file; `switchyard clients` lists them"
        );
    };
    let all: Vec<Location> =
        super::locations(home, project.as_deref(), env).into_iter().filter(|l| l.client == client).collect();
    let here: Vec<Location> = all.iter().filter(|l| present(&l.path)).cloned().collect();
    if here.is_empty() {
        let looked: Vec<String> = all.iter().map(|l| l.path.display().to_string()).collect();
        bail!("no {} config found; looked at: {}", client.name(), looked.join(", "));
    }
    Ok(here)
}

/// Which client reads `path`, from its name and place.
fn guess(path: &Path, home: &Path) -> Option<Location> {
    let name = path.file_name()?.to_str()?;
    let parent = path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("");
    let (client, scope) = match name {
        "claude_desktop_config.json" => (Client::ClaudeDesktop, Scope::User),
        ".claude.json" => (Client::ClaudeCode, Scope::User),
        ".mcp.json" => (Client::ClaudeCode, Scope::Project),
        "mcp.json" if parent == ".cursor" => {
            let user = std::path::absolute(path).ok()? == std::path::absolute(home.join(".cursor/mcp.json")).ok()?;
            (Client::Cursor, if user { Scope::User } else { Scope::Project })
        }
        "mcp.json" if parent == ".vscode" => (Client::VsCode, Scope::Project),
        "mcp.json" if parent == "User" && path.parent()?.parent()?.file_name()? == "Code" => {
            (Client::VsCode, Scope::User)
        }
        _ => return None,
    };
    Some(Location { client, path: path.to_path_buf(), scope })
}

pub fn sha256(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Where `wrap` keeps its records, one per client file (made by [`records_locked`]).
fn records_dir() -> anyhow::Result<PathBuf> {
    Ok(switchyard_config::paths::state_dir_path()?.join("wrapped"))
}

/// The record of one client file.
fn state_path(real: &Path) -> anyhow::Result<PathBuf> {
    Ok(records_dir()?.join(format!("{}.json", switchyard_config::paths::short_hash(real, 12))))
}

fn read_state(real: &Path) -> anyhow::Result<Option<State>> {
    let path = state_path(real)?;
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("{}: switchyard's record of what wrap changed is damaged", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn write_state(real: &Path, state: &State) -> anyhow::Result<()> {
    let path = state_path(real)?;
    if state.entries.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove {}", path.display()))
            }
            _ => Ok(()),
        };
    }
    // Its directory exists: `records_locked` made it before anything was written.
    let text = serde_json::to_string_pretty(state).expect("state serialises");
    replace_file(&path, text.as_bytes(), Some(0o600))
}

/// The file a path names, links followed (a dotfile manager's link stays a link; its target
/// changes).
fn real_path(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    // A link to a file not made yet (a dotfile manager's link to a new config): its target.
    let mut at = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    for _ in 0..40 {
        match std::fs::read_link(&at) {
            Ok(target) => at = at.parent().unwrap_or(Path::new("/")).join(target),
            Err(_) => break,
        }
    }
    at
}

/// Writes `bytes` to `path` through a temporary file in its directory renamed over it: a reader
/// sees the old file or the new one, never a part. Keeps the old file's permissions (`mode` for
/// a new file).
fn replace_file(path: &Path, bytes: &[u8], mode: Option<u32>) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| anyhow!("{}: not a file name", path.display()))?;
    let tmp = dir.join(format!(".{}.switchyard-{}.tmp", name.to_string_lossy(), std::process::id()));
    let perms = std::fs::metadata(path).ok().map(|m| m.permissions().mode() & 0o7777);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(perms.or(mode).unwrap_or(0o644))
            .open(&tmp)?;
        f.write_all(bytes)?;
        if let Some(p) = perms {
            f.set_permissions(std::fs::Permissions::from_mode(p))?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow!("cannot write {}: {e}; it is as it was", path.display())
    })
}

/// The backup beside a client file: its text before switchyard's last write.
pub fn backup_path(real: &Path) -> PathBuf {
    let mut name = real.file_name().unwrap_or_default().to_os_string();
    name.push(".switchyard-backup");
    real.with_file_name(name)
}

/// Writes a client file's new text: its current text must still be what was planned on (a
/// client that wrote it meanwhile, as Claude Code does to `~/.claude.json`, wins; nothing is
/// written), the old text goes to the backup, then the new text replaces the file.
fn write_client_file(change: &Change) -> anyhow::Result<PathBuf> {
    let real = real_path(&change.path);
    let now = std::fs::read_to_string(&real).with_context(|| format!("cannot read {}", real.display()))?;
    if now != change.before {
        bail!(
            "{} changed while switchyard was working on it (its client may have written it); it was not written: run the command again",
            change.path.display()
        );
    }
    let backup = backup_path(&real);
    replace_file(&backup, change.before.as_bytes(), Some(0o600))?;
    replace_file(&real, change.after.as_bytes(), None)?;
    Ok(backup)
}

/// `text` (diffs to print) with every env value, header value and URL query of the entries of
/// `changes` (before and after) shown as `***`: a dry run is often pasted or shared, and
/// `switchyard clients` shows none of them either. A value that is only a client variable
/// (`${input:key}`) holds no secret and stays.
fn hide_secrets(text: &str, changes: &[Change]) -> String {
    // A value as the files write it after its key (`"KEY": "VALUE"`, `KEY = "VALUE"`), so the
    // same text elsewhere (a `true` as a command, a path in an argument) is left alone; a query
    // as it ends a URL (`?QUERY"`).
    let mut keyed: BTreeSet<(Vec<String>, String)> = BTreeSet::new();
    let mut queries: BTreeSet<String> = BTreeSet::new();
    let secret = |v: &str| {
        let only_variable = v.starts_with("${") && v.ends_with('}') && v.matches("${").count() == 1;
        v.len() >= 4 && !only_variable
    };
    for c in changes {
        for text in [&c.before, &c.after] {
            let Ok(found) = super::parse(c.client, &c.path, text, Scope::User) else { continue };
            for e in found.iter().flat_map(|f| &f.servers) {
                let map = match &e.kind {
                    Kind::Stdio { env, .. } => env,
                    Kind::Http { url, headers } | Kind::Sse { url, headers } => {
                        if let Some((_, query)) = url.split_once('?').filter(|(_, q)| secret(q)) {
                            queries.insert(format!("?{}", &json_str(query)[1..]));
                            queries.insert(format!("?{}", &toml_str(query)[1..]));
                        }
                        headers
                    }
                };
                for (k, v) in map.iter().filter(|(_, v)| secret(v)) {
                    let keys = vec![json_str(k), toml_key(k)];
                    keyed.insert((keys.clone(), json_str(v)));
                    keyed.insert((keys, toml_str(v)));
                }
            }
        }
    }
    let mut out = text.to_string();
    let before = out.clone();
    for q in &queries {
        out = out.replace(q.as_str(), "?***\"");
    }
    for (keys, quoted) in &keyed {
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(quoted.as_str()) {
            let head = &rest[..at];
            let lead = head.trim_end_matches([' ', '\t']);
            let lead = lead.strip_suffix([':', '=']).map(|l| l.trim_end_matches([' ', '\t']));
            let after_key = lead.is_some_and(|l| keys.iter().any(|k| l.ends_with(k.as_str())));
            result.push_str(head);
            result.push_str(if after_key { "\"***\"" } else { quoted.as_str() });
            rest = &rest[at + quoted.len()..];
        }
        result.push_str(rest);
        out = result;
    }
    if out != before {
        out.push_str("\n(env and header values and URL queries are shown as ***)\n");
    }
    out
}

/// A unified diff of one file, for `--dry-run`.
pub fn diff(path: &Path, before: &str, after: &str) -> String {
    let shown = path.display().to_string();
    similar::TextDiff::from_lines(before, after).unified_diff().context_radius(3).header(&shown, &shown).to_string()
}

/// What `--dry-run` prints: the diff of switchyard.toml (`config`: path, text before, after) and
/// of each client file, secrets hidden.
fn dry_run(config: Option<&(PathBuf, Option<String>, String)>, changes: &[Change]) -> String {
    let mut diffs = String::new();
    if let Some((path, before, after)) = config {
        let _ = write!(diffs, "\n{}", diff(path, before.as_deref().unwrap_or(""), after));
    }
    for c in changes {
        let _ = write!(diffs, "\n{}", diff(&c.path, &c.before, &c.after));
    }
    let mut out = hide_secrets(&diffs, changes);
    out.push_str("\n(dry run: nothing was written)\n");
    out
}

/// The files' texts. A file that cannot be read or written is left out, said in `lines`; when
/// it is the only file, that is the error.
fn read_inputs(locations: &[Location], lines: &mut Vec<String>) -> anyhow::Result<Vec<Input>> {
    let mut out = Vec::new();
    for l in locations {
        let read = std::fs::read_to_string(&l.path)
            .map_err(|e| format!("cannot read {}: {e}", l.path.display()))
            .and_then(|text| writable(&l.path).map(|()| text));
        match read {
            Ok(text) => out.push(Input { client: l.client, path: l.path.clone(), scope: l.scope.clone(), text }),
            Err(e) if locations.len() == 1 => bail!("{e}"),
            Err(e) => lines.push(format!("left as it is: {e}")),
        }
    }
    Ok(out)
}

/// Whether this user may replace `path` (a link's target) as `wrap` does: write the file, and
/// make and rename files in its directory.
fn writable(path: &Path) -> Result<(), String> {
    use rustix::fs::{Access, access};
    let real = real_path(path);
    let dir = real.parent().unwrap_or(Path::new("/"));
    if access(&real, Access::WRITE_OK).is_err() {
        return Err(format!(
            "{} is read-only for you; switchyard changes only files you may write (make it writable to wrap it)",
            path.display()
        ));
    }
    if access(dir, Access::WRITE_OK).is_err() {
        return Err(format!(
            "{} is in a directory you may not write ({}); switchyard replaces a file through a new one beside it",
            path.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// Holds an exclusive lock on directory `dir` (made if missing) while the file lives: one
/// `wrap` or `unwrap` at a time per switchyard config (its directory) and per record directory.
/// Two wraps at once would otherwise each append servers to switchyard.toml from the text they
/// read, and one's would be lost. A directory, not a lock file, so the lock is the same whatever
/// environment each process has, and nothing is left behind.
fn exclusive(dir: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let file = std::fs::File::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .with_context(|| format!("cannot lock {}", dir.display()))?;
    Ok(file)
}

/// The directory of `wrap`'s records, made (0700) and locked: before anything is written, so a
/// record that cannot be kept stops the run before a client file changes.
fn records_locked() -> anyhow::Result<std::fs::File> {
    switchyard_config::paths::state_dir()?;
    let dir = records_dir()?;
    switchyard_config::paths::private_dir(&dir)?;
    exclusive(&dir)
}

/// An error of a write, with what was written before it.
fn after_writes(e: anyhow::Error, written: &[String]) -> anyhow::Error {
    if written.is_empty() {
        e
    } else {
        anyhow!(
            "{e:#}. Already written before this: {} (a file that existed has its backup beside it; `switchyard unwrap` puts client entries back)",
            written.join(", ")
        )
    }
}

fn home() -> anyhow::Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("HOME is not set; switchyard looks for client configs under it"))
}

/// `switchyard wrap`: returns what to print.
pub fn wrap(opts: &Options) -> anyhow::Result<String> {
    let home = home()?;
    let env = |k: &str| std::env::var(k).ok();
    let config = match &opts.config {
        Some(c) => {
            let c = tilde(c, &home);
            std::path::absolute(&c).with_context(|| format!("{}: not a usable path", c.display()))?
        }
        None => switchyard_config::paths::default_config()?,
    };
    // Locks before anything is read: what is read is what is written to.
    let _locks = if opts.dry_run {
        None
    } else {
        let dir = real_path(&config).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"));
        Some((exclusive(&dir)?, records_locked()?))
    };
    let locations = select(opts, &home, &env)?;
    let mut lines = Vec::new();
    let inputs = read_inputs(&locations, &mut lines)?;
    let config_text = match std::fs::read_to_string(&config) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", config.display())),
    };
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("cannot tell where the switchyard binary is, which the wrapped entries run")?;
    let plan = plan_wrap(&inputs, &config, config_text.as_deref(), &exe, opts.only.as_deref())?;
    let mut out = String::new();
    for line in lines.iter().chain(&plan.lines) {
        let _ = writeln!(out, "{line}");
    }
    if opts.dry_run {
        out.push_str(&dry_run(plan.config.as_ref(), &plan.changes));
        return Ok(out);
    }
    let mut written: Vec<String> = Vec::new();
    if let Some((path, before, after)) = &plan.config {
        // Its directory exists: the lock on it made it.
        let now = std::fs::read_to_string(path).ok();
        if now != *before {
            bail!(
                "{} changed while switchyard was working on it; nothing was written: run the command again",
                path.display()
            );
        }
        // A linked config (dotfiles) stays a link: its target is written.
        let real = real_path(path);
        let backup = match before {
            Some(before) => {
                let backup = backup_path(&real);
                replace_file(&backup, before.as_bytes(), Some(0o600))?;
                format!(" (the file as it was is in {})", backup.display())
            }
            None => String::new(),
        };
        // It may hold a server's env values and headers: only its user reads a new one.
        replace_file(&real, after.as_bytes(), Some(0o600))?;
        written.push(path.display().to_string());
        let _ = writeln!(out, "\nadded the servers to {}{backup}", path.display());
        let added = &after[before.as_deref().map_or(0, str::len)..];
        let open =
            std::fs::metadata(path).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o077 != 0);
        if open.unwrap_or(false) && (added.contains("\nenv = ") || added.contains("\nheaders = ")) {
            let _ = writeln!(
                out,
                "note: {} is readable by other users and now holds servers' env or header values (API keys, often): `chmod 600 {}`",
                path.display(),
                path.display()
            );
        }
    }
    for change in &plan.changes {
        let real = real_path(&change.path);
        let mut state = read_state(&real).map_err(|e| after_writes(e, &written))?.unwrap_or_else(|| State {
            file: real.clone(),
            client: change.client.name().to_string(),
            ..State::default()
        });
        let backup = write_client_file(change).map_err(|e| after_writes(e, &written))?;
        written.push(change.path.display().to_string());
        state.written = sha256(&change.after);
        state.entries.retain(|r| !change.records.iter().any(|n| n.name == r.name && n.project == r.project));
        state.entries.extend(change.records.iter().cloned());
        write_state(&real, &state).map_err(|e| after_writes(e, &written))?;
        let _ = writeln!(
            out,
            "wrote {} ({} server(s) wrapped; the file as it was is in {})",
            change.path.display(),
            change.records.len(),
            backup.display()
        );
    }
    if !plan.changes.is_empty() {
        let _ = writeln!(
            out,
            "\nRestart the client (or reload its MCP servers) to use them. `switchyard unwrap` puts the entries back."
        );
    }
    Ok(out)
}

/// `switchyard unwrap`: returns what to print.
pub fn unwrap(opts: &Options) -> anyhow::Result<String> {
    let home = home()?;
    let env = |k: &str| std::env::var(k).ok();
    let _lock = if opts.dry_run { None } else { Some(records_locked()?) };
    let locations = select(opts, &home, &env)?;
    let mut lines = Vec::new();
    let inputs = read_inputs(&locations, &mut lines)?;
    let mut out = String::new();
    let mut planned = Vec::new();
    let mut recorded: BTreeSet<String> = BTreeSet::new();
    for input in &inputs {
        let real = real_path(&input.path);
        let Some(state) = read_state(&real)? else {
            let backup = backup_path(&real);
            let backup = if present(&backup) {
                format!("; {} holds its text before switchyard's last write to it", backup.display())
            } else {
                String::new()
            };
            lines.push(format!(
                "{}: no record of a switchyard wrap of it (records are in {}): left as it is{backup}",
                input.path.display(),
                records_dir().map(|d| d.display().to_string()).unwrap_or_default()
            ));
            continue;
        };
        recorded.extend(state.entries.iter().map(|r| r.name.clone()));
        let (change, keep) = match plan_unwrap(input, &state, opts.only.as_deref(), &mut lines) {
            Ok(planned) => planned,
            Err(e) if inputs.len() == 1 => return Err(e),
            Err(e) => {
                lines.push(format!("left as it is: {e:#}"));
                continue;
            }
        };
        planned.push((real, state, change, keep));
    }
    if let Some(only) = &opts.only {
        let missing: Vec<&str> = only.iter().filter(|n| !recorded.contains(*n)).map(String::as_str).collect();
        if !missing.is_empty() {
            bail!("--only names {} that switchyard wrap has no record of in these files", missing.join(", "));
        }
    }
    for line in &lines {
        let _ = writeln!(out, "{line}");
    }
    if opts.dry_run {
        let changes: Vec<Change> = planned.iter().filter_map(|(_, _, c, _)| c.clone()).collect();
        out.push_str(&dry_run(None, &changes));
        return Ok(out);
    }
    let mut written: Vec<String> = Vec::new();
    for (real, mut state, change, keep) in planned {
        if let Some(change) = &change {
            let backup = write_client_file(change).map_err(|e| after_writes(e, &written))?;
            written.push(change.path.display().to_string());
            state.written = sha256(&change.after);
            let _ = writeln!(
                out,
                "wrote {} ({} entr{} put back; the file as it was is in {})",
                change.path.display(),
                change.records.len(),
                if change.records.len() == 1 { "y" } else { "ies" },
                backup.display()
            );
        }
        state.entries = keep;
        write_state(&real, &state).map_err(|e| after_writes(e, &written))?;
    }
    if !written.is_empty() {
        let _ = writeln!(
            out,
            "\nThe servers stay in switchyard's config (another client may use them); restart the client to use the entries as they were."
        );
    } else {
        let _ = writeln!(out, "nothing to unwrap");
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
