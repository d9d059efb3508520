//! Codex CLI's `config.toml`: its `[mcp_servers.NAME]` servers read with the byte span of each
//! one's text, and the text that replaces a server when it is wrapped. The document is edited
//! where the server is written, never serialised anew, so every other byte stays.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use anyhow::{anyhow, bail};
use switchyard_config::line_col;
use toml_edit::{Document, InlineTable, Item, Table, TableLike, Value};

use crate::{Client, Entry, Error, Found, Kind, Scope};

/// The keys of a Codex server that say how to reach it. Once wrapped, switchyard's config holds
/// them, so the wrapped entry drops them (`env_vars` comes back as the names it forwards).
pub(crate) const LAUNCH: &[&str] =
    &["command", "args", "env", "env_vars", "cwd", "url", "http_headers", "env_http_headers", "bearer_token_env_var"];

/// What `switchyard connect` reads of its environment for the daemon it starts: where its log
/// and HTTP token go. (The socket is found from the config path and the user id alone.)
const CONNECT_ENV: [&str; 1] = ["XDG_STATE_HOME"];

/// Codex's own settings of a server that mean the same on a wrapped entry (behind switchyard the
/// server's tools keep their names, so an allow list still picks the same tools): carried along
/// as written.
const CARRIED: &[&str] = &[
    "enabled",
    "required",
    "startup_timeout_sec",
    "tool_timeout_sec",
    "enabled_tools",
    "disabled_tools",
    "tools",
    "default_tools_approval_mode",
    "supports_parallel_tool_calls",
];

/// Why a Codex entry stays as it is, for a key it has that is neither how to reach the server
/// nor a setting that keeps its meaning on a wrapped entry.
pub(crate) fn leave_reason(entry: &Entry) -> Option<(String, String)> {
    // A launch key of the other transport (`command` beside `url`) is not Codex's setting:
    // `wrap` says what is wrong with such an entry.
    let key = entry.unknown.iter().find(|k| !CARRIED.contains(&k.as_str()) && !LAUNCH.contains(&k.as_str()))?;
    let why = match key.as_str() {
        "oauth" | "auth" | "scopes" | "oauth_resource" => {
            "Codex's own OAuth settings for it would not carry over; switchyard signs in to remote servers itself (`switchyard login NAME`): remove them and wrap again to use that".to_string()
        }
        "http_headers_helper" => "Codex runs a command for its headers on each connection; switchyard cannot".into(),
        other => format!(
            "switchyard does not know what `{other}` means to Codex, so it cannot tell whether the entry would keep its meaning behind switchyard"
        ),
    };
    Some((key.clone(), why))
}

fn invalid(path: &Path, text: &str, at: usize, message: String) -> Error {
    let (line, column) = line_col(text, at.min(text.len()));
    Error::Invalid { client: Client::Codex, path: path.into(), line, column, message }
}

/// The parsed document, or where it stops being TOML (Codex does not load it either).
fn document<'t>(path: &Path, text: &'t str) -> Result<Document<&'t str>, Error> {
    Document::parse(text).map_err(|e| {
        let at = e.span().map_or(0, |s| s.start);
        let message = e.message().trim_end().replace('\n', " ");
        invalid(path, text, at, message)
    })
}

/// The server map of `config.toml`: a line per server, or `mcp_servers = { ... }`.
fn servers_table(root: &Table) -> Option<&dyn TableLike> {
    root.get("mcp_servers").and_then(Item::as_table_like)
}

/// Reads `text`, the contents of `path`: its `mcp_servers`, each server with the span of its
/// text (its `[mcp_servers.NAME]` table and the sub-tables that follow, or its inline table).
pub(crate) fn parse(path: &Path, text: &str, scope: Scope) -> Result<Vec<Found>, Error> {
    let doc = document(path, text)?;
    let root = doc.as_table();
    let mut headers = Vec::new();
    switchyard_config::toml_headers(root, &mut headers);
    headers.sort_by_key(|h| h.start);
    let (mut servers, mut unreadable) = (Vec::new(), Vec::new());
    if let Some(item) = root.get("mcp_servers") {
        let Some(map) = servers_table(root) else {
            let at = item.span().map_or(0, |s| s.start);
            return Err(invalid(path, text, at, "`mcp_servers` should be a table".into()));
        };
        let dotted = matches!(item, Item::Table(t) if t.is_dotted());
        for (name, item) in map.iter() {
            let key_at = map.get_key_value(name).and_then(|(k, _)| k.span()).map_or(0, |s| s.start);
            match read(path, text, name, item, key_at) {
                Ok(mut entry) => {
                    let (span, stuck) = place(text, &headers, name, item, key_at, dotted);
                    entry.span = span;
                    entry.stuck = entry.stuck.or(stuck);
                    servers.push(entry);
                }
                Err(Error::Invalid { line, column, message, .. }) => {
                    unreadable.push(format!("{}, line {line}, column {column}: {message}", path.display()))
                }
                Err(e) => unreadable.push(e.to_string()),
            }
        }
    }
    Ok(vec![Found { client: Client::Codex, path: path.into(), scope, servers, unreadable, inputs: Vec::new() }])
}

/// The end of the last thing written under `item`: keys, values and headers, its sub-tables too.
fn extent(item: &Item) -> usize {
    match item {
        Item::Table(t) => table_extent(t, true),
        Item::ArrayOfTables(a) => a.iter().map(|t| table_extent(t, true)).max().unwrap_or(0),
        Item::Value(v) => v.span().map_or(0, |s| s.end),
        Item::None => 0,
    }
}

/// The end of what `t` holds; with `deep` false, only up to its own sub-tables' headers (what
/// stands under its own header).
fn table_extent(t: &Table, deep: bool) -> usize {
    let mut end = t.span().map_or(0, |s| s.end);
    for (k, item) in t.iter() {
        if let Some((key, _)) = t.get_key_value(k) {
            end = end.max(key.span().map_or(0, |s| s.end));
        }
        let header = matches!(item, Item::Table(s) if !s.is_dotted()) || matches!(item, Item::ArrayOfTables(_));
        if deep || !header {
            end = end.max(extent(item));
        }
    }
    end
}

/// The end of the line holding `at`, before its line break.
fn line_end(text: &str, at: usize) -> usize {
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    if text[..end].ends_with('\r') { end - 1 } else { end }
}

fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// After the line break of the line holding `at` (or the end of the text).
fn next_line(text: &str, at: usize) -> usize {
    text[at..].find('\n').map_or(text.len(), |i| at + i + 1)
}

/// Where a server's text is, and why it cannot be replaced as one piece when so.
fn place(
    text: &str,
    headers: &[Range<usize>],
    name: &str,
    item: &Item,
    key_at: usize,
    dotted_map: bool,
) -> (Range<usize>, Option<String>) {
    let dotted = || {
        Some(format!(
            "it is written as dotted keys (`mcp_servers.{name}.command = ...`); write it as a [mcp_servers.{name}] table and wrap again"
        ))
    };
    match item {
        // A `[mcp_servers.NAME]` table is one even when another server made `mcp_servers`
        // dotted (`mcp_servers.other.command = ...`).
        Item::Table(t) if t.is_dotted() || (dotted_map && (t.is_implicit() || t.span().is_none())) => {
            (key_at..line_end(text, extent(item)), dotted())
        }
        Item::Table(t) => {
            let Some(own) = t.span().filter(|_| !t.is_implicit()) else {
                let why = format!(
                    "it has no [mcp_servers.{name}] table of its own, only sub-tables; write one and wrap again"
                );
                return (key_at..line_end(text, extent(item)), Some(why));
            };
            let mut mine = Vec::new();
            switchyard_config::toml_headers(t, &mut mine);
            mine.push(own.clone());
            mine.sort_by_key(|h| h.start);
            let first = headers.iter().position(|h| *h == mine[0]).unwrap_or(0);
            let together = headers.get(first..first + mine.len()).is_some_and(|run| run == mine.as_slice());
            let span = own.start..line_end(text, extent(item));
            let why = (!together).then(|| {
                format!(
                    "its tables are apart in the file (another table stands between [mcp_servers.{name}] and its sub-tables); put them together and wrap again"
                )
            });
            (span, why)
        }
        Item::Value(Value::InlineTable(t)) => {
            let span = t.span().unwrap_or(key_at..key_at);
            let why = t.iter().any(|(_, v)| matches!(v, Value::InlineTable(i) if i.is_dotted())).then(|| {
                format!(
                    "its inline table has dotted keys; write `{name}` as a [mcp_servers.{name}] table and wrap again"
                )
            });
            (span, why)
        }
        _ => (key_at..key_at, Some("it is not a table".into())),
    }
}

/// One server as switchyard's model holds it. Codex expands no variables in its file; what it
/// hands the server from its own environment (`env_vars`, `bearer_token_env_var`,
/// `env_http_headers`) is written in the model as `${NAME}`, the variable the client supplies.
/// Codex leaves an unset variable of `env_vars` out of the server's environment and a header of
/// `env_http_headers` off the requests, and starts the server all the same: those are optional.
/// An unset `bearer_token_env_var` stops the server from starting: that one it needs.
fn read(path: &Path, text: &str, name: &str, item: &Item, key_at: usize) -> Result<Entry, Error> {
    let at = |i: &Item| i.span().map_or(key_at, |s| s.start);
    let fail = |i: &Item, message: String| invalid(path, text, at(i), message);
    let Some(t) = item.as_table_like() else {
        return Err(fail(item, format!("server `{name}` should be a table")));
    };
    let string = |key: &str| -> Result<Option<String>, Error> {
        match t.get(key) {
            None => Ok(None),
            Some(i) => match i.as_str() {
                Some(s) => Ok(Some(s.to_string())),
                None => Err(fail(i, format!("`{key}` of server `{name}` should be a string"))),
            },
        }
    };
    let strings = |key: &str| -> Result<Vec<String>, Error> {
        let Some(i) = t.get(key) else { return Ok(Vec::new()) };
        let Some(items) = i.as_array() else {
            return Err(fail(i, format!("`{key}` of server `{name}` should be an array")));
        };
        items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| fail(i, format!("`{key}` of server `{name}` should hold strings")))
    };
    let map = |key: &str| -> Result<BTreeMap<String, String>, Error> {
        let Some(i) = t.get(key) else { return Ok(BTreeMap::new()) };
        let Some(m) = i.as_table_like() else {
            return Err(fail(i, format!("`{key}` of server `{name}` should be a table")));
        };
        let mut out = BTreeMap::new();
        for (k, v) in m.iter() {
            let Some(s) = v.as_str() else {
                return Err(fail(v, format!("`{key}.{k}` of server `{name}` should be a string")));
            };
            out.insert(k.to_string(), s.to_string());
        }
        Ok(out)
    };
    let mut variables: Vec<String> = Vec::new();
    let mut stuck = None;
    let mut forward = |var: &str, variables: &mut Vec<String>| -> String {
        if !switchyard_config::is_var_name(var) && stuck.is_none() {
            stuck = Some(format!(
                "it forwards `{var}` from Codex's environment, which switchyard cannot pass on under that name"
            ));
        }
        let expr = format!("${{{var}}}");
        if !variables.contains(&expr) {
            variables.push(expr.clone());
        }
        expr
    };
    let command = string("command")?;
    let (mut optional, mut needed) = (Vec::new(), Vec::new());
    let kind = match (string("url")?, command) {
        (Some(url), _) => {
            let mut headers = map("http_headers")?;
            for (header, var) in map("env_http_headers")? {
                let v = forward(&var, &mut variables);
                optional.push(v.clone());
                headers.insert(header, v);
            }
            if let Some(var) = string("bearer_token_env_var")? {
                let v = forward(&var, &mut variables);
                needed.push(v.clone());
                headers.insert("Authorization".into(), format!("Bearer {v}"));
            }
            Kind::Http { url, headers }
        }
        (None, Some(command)) => {
            let mut env = map("env")?;
            for var in strings("env_vars")? {
                let v = forward(&var, &mut variables);
                optional.push(v.clone());
                env.entry(var).or_insert(v);
            }
            Kind::Stdio { command, args: strings("args")?, env, cwd: string("cwd")? }
        }
        (None, None) => return Err(fail(item, format!("server `{name}` has neither `command` nor `url`"))),
    };
    let launch: &[&str] = match kind {
        Kind::Stdio { .. } => &["command", "args", "env", "env_vars", "cwd"],
        _ => &["url", "http_headers", "env_http_headers", "bearer_token_env_var"],
    };
    let unknown: Vec<String> = t.iter().map(|(k, _)| k.to_string()).filter(|k| !launch.contains(&k.as_str())).collect();
    // A key's own place, else its value's, else the entry's.
    let key_at =
        |k: &str| t.key(k).and_then(|k| k.span()).or_else(|| t.get(k).and_then(Item::span)).map_or(key_at, |s| s.start);
    let unknown_at = unknown.iter().map(|k| (k.clone(), key_at(k))).collect();
    let group = match &kind {
        Kind::Stdio { command, args, .. } => crate::group_of(command, args),
        _ => None,
    };
    let wrapped = match &kind {
        Kind::Stdio { command, args, .. } => crate::wrapped(command, args),
        _ => None,
    };
    optional.retain(|v| !needed.contains(v));
    Ok(Entry {
        name: name.to_string(),
        kind,
        wrapped,
        group,
        variables,
        optional,
        unknown,
        unknown_at,
        stuck,
        span: 0..0,
    })
}

/// The text that replaces `entry` in `text`: `command` and `args` that run `switchyard connect`,
/// `env_vars` naming what Codex forwards (each client variable of `vars`, and what `connect`
/// needs to find the daemon), then the entry's
/// own settings as they were written. A table stays a table (its header line, comments and
/// carried sub-tables as they were); an inline table stays one line.
pub(crate) fn wrapped_entry(
    text: &str,
    entry: &Entry,
    connect: &[String],
    vars: &[(String, String)],
) -> anyhow::Result<String> {
    for (name, expr) in vars {
        if *expr != format!("${{{name}}}") {
            bail!("server `{}`: Codex forwards {expr}, which switchyard would name {name}", entry.name);
        }
    }
    let doc = Document::parse(text).map_err(|e| anyhow!("the file no longer reads: {}", e.message()))?;
    let item = servers_table(doc.as_table())
        .and_then(|m| m.get(&entry.name))
        .ok_or_else(|| anyhow!("server `{}` is not in the file", entry.name))?;
    let quoted = |items: &[String]| format!("[{}]", items.iter().map(|a| toml_str(a)).collect::<Vec<_>>().join(", "));
    let mut lines = vec![format!("command = {}", toml_str(&connect[0])), format!("args = {}", quoted(&connect[1..]))];
    // Codex starts a server with a few variables of its environment only (PATH, HOME, ...):
    // without these, `connect` would look for the daemon's socket elsewhere than the daemon the
    // user's shell started, and start another.
    let names: Vec<String> = vars.iter().map(|(n, _)| n.clone()).chain(CONNECT_ENV.map(String::from)).collect();
    lines.push(format!("env_vars = {}", quoted(&names)));
    match item {
        Item::Value(Value::InlineTable(t)) => Ok(inline(text, t, lines)),
        Item::Table(t) => Ok(table(text, entry.span.clone(), t, lines)),
        _ => bail!("server `{}` is not a table", entry.name),
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn inline(text: &str, t: &InlineTable, mut items: Vec<String>) -> String {
    for (k, v) in t.iter() {
        let key = t.get_key_value(k).and_then(|(key, _)| key.span());
        if let (false, Some(key), Some(value)) = (LAUNCH.contains(&k), key, v.span()) {
            items.push(text[key.start..value.end].to_string());
        }
    }
    format!("{{ {} }}", items.join(", "))
}

/// The server's table text with the launch keys' lines (and their sub-tables) taken out and the
/// new lines put right under its header.
fn table(text: &str, span: Range<usize>, t: &Table, lines: Vec<String>) -> String {
    let nl = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let header = t.span().unwrap_or(span.start..span.start);
    let mut cuts: Vec<Range<usize>> = Vec::new();
    let mut indent = None;
    for (k, item) in t.iter() {
        let key = t.get_key_value(k).and_then(|(key, _)| key.span()).unwrap_or(header.clone());
        if indent.is_none() && matches!(item, Item::Value(_)) {
            let from = line_start(text, key.start);
            indent = Some(text[from..key.start].to_string());
        }
        if LAUNCH.contains(&k) {
            cut(text, key.start, item, &mut cuts);
        }
    }
    let indent = indent.unwrap_or_default();
    let mut added: String = lines.iter().map(|l| format!("{indent}{l}{nl}")).collect();
    let at = next_line(text, header.end);
    let at = if at > span.end {
        // The header alone is the entry (nothing under it): the new lines go after it.
        added = format!("{nl}{}", added.trim_end_matches(['\r', '\n']));
        span.end
    } else {
        at
    };
    let mut edits: Vec<(Range<usize>, String)> =
        cuts.into_iter().map(|r| (r.start.max(span.start)..r.end.min(span.end), String::new())).collect();
    edits.push((at..at, added));
    edits.sort_by_key(|(r, _)| (r.start, r.end));
    let mut out = String::new();
    let mut done = span.start;
    for (r, with) in edits {
        if r.start >= done {
            out.push_str(&text[done..r.start]);
        }
        out.push_str(&with);
        done = done.max(r.end);
    }
    out.push_str(&text[done.min(span.end)..span.end]);
    out.trim_end_matches(['\r', '\n']).to_string()
}

/// The whole lines that write `item` (the value of a key starting at `key_at`): a value's lines,
/// each line of a dotted table, or a sub-table from its header to its last value.
fn cut(text: &str, key_at: usize, item: &Item, out: &mut Vec<Range<usize>>) {
    match item {
        Item::Value(v) => {
            let end = v.span().map_or(key_at, |s| s.end);
            out.push(line_start(text, key_at)..next_line(text, end));
        }
        Item::Table(t) if t.is_dotted() || t.is_implicit() => {
            for (k, child) in t.iter() {
                let at = t.get_key_value(k).and_then(|(key, _)| key.span()).map_or(key_at, |s| s.start);
                cut(text, at, child, out);
            }
        }
        Item::Table(t) => {
            let start = t.span().map_or(key_at, |s| s.start);
            out.push(line_start(text, start)..next_line(text, table_extent(t, false)));
            for (k, child) in t.iter() {
                if matches!(child, Item::Table(s) if !s.is_dotted()) || matches!(child, Item::ArrayOfTables(_)) {
                    let at = t.get_key_value(k).and_then(|(key, _)| key.span()).map_or(key_at, |s| s.start);
                    cut(text, at, child, out);
                }
            }
        }
        Item::ArrayOfTables(a) => {
            for t in a.iter() {
                let start = t.span().map_or(key_at, |s| s.start);
                out.push(line_start(text, start)..next_line(text, table_extent(t, true)));
            }
        }
        Item::None => {}
    }
}

/// Whether two texts of a server (a `[mcp_servers.NAME]` table with its sub-tables, or an
/// inline table) hold the same values, layout and comments aside.
pub(crate) fn same_entry(a: &str, b: &str) -> bool {
    let value = |s: &str| -> Option<toml::Table> {
        let doc = if s.trim_start().starts_with('{') { format!("x = {s}") } else { s.to_string() };
        doc.parse().ok()
    };
    matches!((value(a), value(b)), (Some(a), Some(b)) if a == b)
}
