//! `wrap --group NAME`: the entries of a client's server map replaced by one entry that runs
//! `switchyard connect --group NAME`, and `unwrap` of it.
//!
//! Per-server `wrap` edits each entry's value in place; a group entry takes the place of N
//! entries, so keys go with their values and commas. What is removed is recorded (each entry's
//! value, in file order, and the whole file before): `unwrap` gives the file back byte for byte
//! while it is as `wrap` left it, and otherwise puts each entry back by value where the group
//! entry is (a client that rewrote the file, as Claude Code does, kept its values).

use std::ops::Range;
use std::path::Path;

use anyhow::{anyhow, bail};

use super::Input;
use super::emit::{json_str, layout, replaced, splice, toml_key, toml_str};
use super::plan::{LAUNCH_KEYS, Plan, place, plan_wrap_picked, same_entry, server_name};
use super::records::{GroupRecord, Record, State, sha256};
use crate::jsonc::{Doc, Member, Tree};
use crate::{Client, Entry, Found, Scope};

/// The group every daemon has without a `[groups]` table: all of its servers.
const ALL: &str = "all";

/// Plans `wrap --group GROUP` of one client file (see [`super::plan_wrap`] for the rest).
pub fn plan_wrap_group(
    input: &Input,
    config_path: &Path,
    config_text: Option<&str>,
    exe: &Path,
    group: &str,
) -> anyhow::Result<Plan> {
    let path = input.path.display();
    let found = crate::parse(input.client, &input.path, &input.text, input.scope.clone())?;
    let Some(top) = found.iter().find(|m| !matches!(m.scope, Scope::ClaudeProject(_))) else {
        bail!("{path} has no server map");
    };
    if let Some(e) = top.servers.iter().find(|e| e.group.as_deref() == Some(group)) {
        let line =
            format!("{path}: entry `{}` already runs group `{group}` through switchyard: nothing to wrap", e.name);
        return Ok(Plan { lines: vec![line], ..Plan::default() });
    }
    if top.servers.iter().any(|e| e.name == group) {
        bail!(
            "{path} already has an entry `{group}`, the name the group's entry would take: rename that entry, or name another group"
        );
    }
    let members = group_servers(config_path, config_text, group)?;
    let named = |e: &Entry| in_group(members.as_deref(), e);
    let lines = preflight(input, top, members.as_deref(), group)?;
    let pick = |scope: &Scope, e: &Entry| {
        !matches!(scope, Scope::ClaudeProject(_)) && named(e) && e.group.is_none() && client_setting(e).is_none()
    };
    let mut plan = plan_wrap_picked(std::slice::from_ref(input), config_path, config_text, exe, None, &pick)?;
    plan.lines.splice(0..0, lines);
    let Some(mut change) = plan.changes.pop() else {
        carried_elsewhere(&mut plan, input, top, group);
        return Ok(plan);
    };
    if let Some(members) = &members {
        check_members(input, top, members, &change.records, &plan.lines, config_path, group)?;
    }
    let vars = client_vars(&change.records, &input.path)?;
    let removed: Vec<Record> = change.records.drain(..).map(|r| Record { wrapped: String::new(), ..r }).collect();
    let (after, value) = if input.client == Client::Codex {
        codex_group_text(input, &top.servers, &removed, &vars, exe, config_path, group)?
    } else {
        group_text(input, &top.servers, &removed, &vars, exe, config_path, group)?
    };
    check_reread(input, &after, group, &removed)?;
    if members.is_none() && group != ALL {
        add_group_table(&mut plan, config_path, config_text, group, &removed, input)?;
    }
    let names: Vec<&str> = removed.iter().map(|r| r.name.as_str()).collect();
    plan.lines.push(format!(
        "{path}: {} -> one entry `{group}`, running `switchyard connect --group {group}`",
        names.join(", ")
    ));
    change.groups.push(GroupRecord {
        name: group.to_string(),
        group: group.to_string(),
        wrapped: value,
        removed,
        before: input.text.clone(),
        after: sha256(&after),
    });
    change.after = after;
    plan.changes.push(change);
    Ok(plan)
}

/// When nothing was left to take because the file's servers already run through another
/// group's entry, the plan's "nothing to wrap" says so, and what to do.
fn carried_elsewhere(plan: &mut Plan, input: &Input, top: &Found, group: &str) {
    let carriers: Vec<(&str, &str)> =
        top.servers.iter().filter_map(|e| Some((e.name.as_str(), e.group.as_deref()?))).collect();
    let Some((entry, other)) = carriers.first().copied() else { return };
    let path = input.path.display();
    let why = format!(
        "{path}: nothing to wrap for group `{group}`: the servers here already run through group `{other}` (entry `{entry}`); connect to that group (`wrap --group {other}` keeps it), or put its entries back with `switchyard unwrap --group {other} {path}`, then wrap --group {group}"
    );
    match plan.lines.last_mut() {
        Some(last) if last.starts_with("nothing to wrap") => *last = why,
        _ => plan.lines.push(why),
    }
}

/// Whether the group (its `servers`; None: every entry) takes entry `e`, by its name or the
/// switchyard server name wrap gives it.
fn in_group(members: Option<&[String]>, e: &Entry) -> bool {
    members.is_none_or(|m| m.contains(&e.name) || m.contains(&server_name(&e.name)))
}

/// What stops `wrap --group` before anything is planned (an entry of the group already wrapped
/// on its own; a client setting of a server the group names), and the lines for entries left.
fn preflight(input: &Input, top: &Found, members: Option<&[String]>, group: &str) -> anyhow::Result<Vec<String>> {
    let path = input.path.display();
    let mut lines = Vec::new();
    for e in top.servers.iter().filter(|e| in_group(members, e)) {
        if let Some(server) = &e.wrapped {
            bail!(
                "{path}: `{}` already runs through switchyard on its own (server `{server}`): put the entries back with `switchyard unwrap {path}`, then wrap --group {group}",
                e.name
            );
        }
        if let Some(key) = client_setting(e) {
            let why = format!(
                "it has `{key}`, a setting of the client for this server alone, which one group entry cannot carry"
            );
            if members.is_some() {
                bail!(
                    "{path}: `{}` of group `{group}`: {why}; remove `{key}` from its entry, or the server from the group",
                    e.name
                );
            }
            lines.push(format!("{}: left as it is, not in the group: {why}", place(input.client, &e.name, None)));
        }
    }
    Ok(lines)
}

/// Each server the configured group names must be an entry wrapped now: else nothing is written.
fn check_members(
    input: &Input,
    top: &Found,
    members: &[String],
    records: &[Record],
    lines: &[String],
    config_path: &Path,
    group: &str,
) -> anyhow::Result<()> {
    let missing: Vec<&str> = members
        .iter()
        .filter(|m| !records.iter().any(|r| &r.server == *m || &r.name == *m))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let have: Vec<&str> = top.servers.iter().map(|e| e.name.as_str()).collect();
    let left: Vec<&str> = lines.iter().filter(|l| l.contains("left as it is")).map(String::as_str).collect();
    bail!(
        "group `{group}` in {} names {}, which {} does not have as entries switchyard can wrap (its entries: {}){}; change the group's `servers`, or name another group",
        config_path.display(),
        missing.join(", "),
        input.path.display(),
        have.join(", "),
        if left.is_empty() { String::new() } else { format!(" ({})", left.join("; ")) }
    )
}

/// The `servers` of `[groups.GROUP]` in the config; None when it has no such table (a group to
/// make from the client's entries) or for `all` without `servers` (every entry).
fn group_servers(config_path: &Path, config_text: Option<&str>, group: &str) -> anyhow::Result<Option<Vec<String>>> {
    let Some(text) = config_text else { return Ok(None) };
    let table: toml::Table = text.parse().map_err(|e| anyhow!("cannot read {}: {e}", config_path.display()))?;
    let servers = table.get("groups").and_then(|g| g.get(group)).and_then(|g| g.get("servers"));
    Ok(servers.and_then(|s| s.as_array()).map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()))
}

/// A key of the entry that is the client's setting for this server alone (`alwaysAllow`,
/// `disabled`, `timeout`): a group entry has one set for all of its servers.
fn client_setting(e: &Entry) -> Option<&str> {
    e.unknown.iter().map(String::as_str).find(|k| !replaced(k) && !LAUNCH_KEYS.iter().any(|(l, _)| l == k))
}

/// The file with the removed entries gone and the group's entry where the first of them was;
/// and the group entry's value.
fn group_text(
    input: &Input,
    entries: &[Entry],
    removed: &[Record],
    vars: &ClientVars,
    exe: &Path,
    config: &Path,
    group: &str,
) -> anyhow::Result<(String, String)> {
    let text = &input.text;
    let members = server_members(input.client, text)?;
    let gone = |m: &Member| removed.iter().any(|r| r.name == m.key);
    let first = members.iter().position(gone).ok_or_else(|| anyhow!("no entry to replace"))?;
    let entry = entries.iter().find(|e| e.name == members[first].key).ok_or_else(|| anyhow!("entry not read"))?;
    let value = group_value(input, entry, removed, vars, exe, config, group)?;
    let mut edits: Vec<(Range<usize>, String)> =
        vec![(members[first].key_span.start..members[first].value.span.end, format!("{}: {value}", json_str(group)))];
    // A removed entry goes from its key to the next entry's key (its comma and the comments after
    // it go with it); the entries at the end of the map, from the end of the entry before them.
    let last_kept = members.iter().rposition(|m| !gone(m)).unwrap_or(first).max(first);
    for (i, m) in members.iter().enumerate().skip(first + 1) {
        if !gone(m) {
            continue;
        }
        if i > last_kept {
            let from = members[i - 1].value.span.end;
            if i == last_kept + 1 {
                edits.push((from..members[members.len() - 1].value.span.end, String::new()));
            }
        } else {
            edits.push((m.key_span.start..members[i + 1].key_span.start, String::new()));
        }
    }
    Ok((splice(text, edits), value))
}

/// The members of the file's server map, in file order.
fn server_members(client: Client, text: &str) -> anyhow::Result<Vec<Member>> {
    let doc = Doc::parse(text).map_err(|e| anyhow!("line {}: {}", e.line, e.message))?;
    match doc.root.get(client.servers_key()).map(|n| &n.tree) {
        Some(Tree::Object(members)) => Ok(members.clone()),
        _ => bail!("no `{}` object", client.servers_key()),
    }
}

/// The group entry's value, laid out as `first` is: `type` when an entry said it (VS Code's
/// always), the command, and the client's variables the servers need in `env`.
fn group_value(
    input: &Input,
    first: &Entry,
    removed: &[Record],
    (env, names): &ClientVars,
    exe: &Path,
    config: &Path,
    group: &str,
) -> anyhow::Result<String> {
    let exe = exe.to_str().ok_or_else(|| anyhow!("{}: switchyard's path is not UTF-8", exe.display()))?;
    let config = config.to_str().ok_or_else(|| anyhow!("{}: the config's path is not UTF-8", config.display()))?;
    let mut args =
        vec!["connect", "--group", group, "--config", config].into_iter().map(String::from).collect::<Vec<_>>();
    if !names.is_empty() {
        args.push("--env".into());
        args.push(names.join(","));
    }
    let typed = input.client == Client::VsCode
        || removed.iter().any(|r| Doc::parse(&r.original).is_ok_and(|d| d.root.get("type").is_some()));
    let mut fields: Vec<String> = Vec::new();
    if typed {
        fields.push(format!("\"type\": {}", json_str("stdio")));
    }
    fields.push(format!("\"command\": {}", json_str(exe)));
    fields.push(format!("\"args\": [{}]", args.iter().map(|a| json_str(a)).collect::<Vec<_>>().join(", ")));
    let lay = layout(&input.text, first);
    let nl = lay.newline;
    let object = |items: &[String], inner: Option<&str>, outer: &str| match inner {
        None => format!("{{ {} }}", items.join(", ")),
        Some(inner) => {
            let items: Vec<String> = items.iter().map(|i| format!("{inner}{i}")).collect();
            format!("{{{nl}{}{nl}{outer}}}", items.join(&format!(",{nl}")))
        }
    };
    if !env.is_empty() {
        let items: Vec<String> = env.iter().map(|(n, e)| format!("{}: {}", json_str(n), json_str(e))).collect();
        let deeper = lay.inner.as_ref().map(|inner| format!("{inner}{}", &inner[lay.outer.len()..]));
        fields.push(format!("\"env\": {}", object(&items, deeper.as_deref(), lay.inner.as_deref().unwrap_or(""))));
    }
    Ok(object(&fields, lay.inner.as_deref(), &lay.outer))
}

/// The client's variables of a group entry: its `env` (NAME, what the client expands), and the
/// names `connect --env` takes.
type ClientVars = (Vec<(String, String)>, Vec<String>);

/// The client's variables the per-server entries (`wrapped` of each record, as `plan_wrap` made
/// them) hand to `connect --env`: their `env`, merged, and the names for `--env` (`NAME?` only
/// when no entry needs it).
fn client_vars(records: &[Record], path: &Path) -> anyhow::Result<ClientVars> {
    let (mut env, mut names): ClientVars = (Vec::new(), Vec::new());
    for r in records {
        let Some(value) = entry_value(&r.wrapped) else { continue };
        for (k, v) in value["env"].as_object().into_iter().flatten() {
            let v = v.as_str().unwrap_or_default().to_string();
            match env.iter().find(|(n, _)| n == k) {
                Some((_, e)) if *e != v => bail!(
                    "{}: the entries give `{k}` two values the client expands ({e} and {v}); one group entry has one `env`: wrap these servers one entry each",
                    path.display()
                ),
                Some(_) => {}
                None => env.push((k.clone(), v)),
            }
        }
        let args: Vec<&str> = value["args"].as_array().into_iter().flatten().filter_map(|a| a.as_str()).collect();
        if let Some(at) = args.iter().position(|a| *a == "--env") {
            for name in args.get(at + 1).map(|l| l.split(',')).into_iter().flatten() {
                let bare = name.trim_end_matches('?');
                match names.iter_mut().find(|n| n.trim_end_matches('?') == bare) {
                    // Needed by one entry: needed.
                    Some(n) if !name.ends_with('?') => *n = bare.to_string(),
                    Some(_) => {}
                    None => names.push(name.to_string()),
                }
            }
        }
    }
    Ok((env, names))
}

/// An entry's text as a value: JSON (with comments), or a Codex entry (a `[mcp_servers.NAME]`
/// table with its sub-tables, or an inline table).
fn entry_value(text: &str) -> Option<serde_json::Value> {
    if let Ok(doc) = Doc::parse(text) {
        return Some(doc.value(&doc.root));
    }
    let toml = if text.trim_start().starts_with('{') { format!("x = {text}") } else { text.to_string() };
    let table: toml::Table = toml.parse().ok()?;
    let entry = match table.get("x") {
        Some(x) => x.clone(),
        None => table.get("mcp_servers")?.as_table()?.values().next()?.clone(),
    };
    serde_json::to_value(entry).ok()
}

/// [`group_text`] for Codex's TOML: the removed servers' tables (with their sub-tables) go,
/// and `[mcp_servers.GROUP]` takes the place of the first. A server written inline stays (its
/// key shares a table with others'): wrap --group asks for it as a table.
fn codex_group_text(
    input: &Input,
    entries: &[Entry],
    removed: &[Record],
    (_, names): &ClientVars,
    exe: &Path,
    config: &Path,
    group: &str,
) -> anyhow::Result<(String, String)> {
    let text = &input.text;
    let nl = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let exe = exe.to_str().ok_or_else(|| anyhow!("{}: switchyard's path is not UTF-8", exe.display()))?;
    let config = config.to_str().ok_or_else(|| anyhow!("{}: the config's path is not UTF-8", config.display()))?;
    let mut args: Vec<String> = ["connect", "--group", group, "--config", config].map(String::from).to_vec();
    if !names.is_empty() {
        args.push("--env".into());
        args.push(names.join(","));
    }
    // What Codex forwards: the client's variables, and where `connect` finds the daemon's state.
    let mut forward: Vec<&str> = names.iter().map(|n| n.trim_end_matches('?')).collect();
    forward.push("XDG_STATE_HOME");
    let list = |items: &[&str]| items.iter().map(|a| toml_str(a)).collect::<Vec<_>>().join(", ");
    let value = [
        format!("[mcp_servers.{}]", toml_key(group)),
        format!("command = {}", toml_str(exe)),
        format!("args = [{}]", list(&args.iter().map(String::as_str).collect::<Vec<_>>())),
        format!("env_vars = [{}]", list(&forward)),
    ]
    .join(nl);
    let mut spans: Vec<Range<usize>> = Vec::new();
    for r in removed {
        let e = entries.iter().find(|e| e.name == r.name).ok_or_else(|| anyhow!("entry `{}` not read", r.name))?;
        if !text[e.span.clone()].starts_with('[') {
            bail!(
                "{}: `{}` is written inline (`{} = {{ ... }}`); wrap --group replaces [mcp_servers.NAME] tables: write it as one and wrap again",
                input.path.display(),
                r.name,
                r.name
            );
        }
        spans.push(e.span.clone());
    }
    spans.sort_by_key(|s| s.start);
    let mut edits = vec![(spans[0].clone(), value.clone())];
    for span in &spans[1..] {
        // The table's lines, and one blank line after it, so no gap grows where it was.
        let mut end = text[span.end..].find('\n').map_or(text.len(), |i| span.end + i + 1);
        if text[end..].starts_with(nl) {
            end += nl.len();
        }
        edits.push((span.start..end, String::new()));
    }
    Ok((splice(text, edits), value))
}

/// The new text must read back with the group's entry and none of the removed ones.
fn check_reread(input: &Input, after: &str, group: &str, removed: &[Record]) -> anyhow::Result<()> {
    let reread = crate::parse(input.client, &input.path, after, input.scope.clone())
        .map_err(|e| anyhow!("switchyard wrap --group made a file it cannot read back ({e}); nothing was written"))?;
    let top = reread.iter().find(|m| !matches!(m.scope, Scope::ClaudeProject(_)));
    let ok = top.is_some_and(|m| {
        m.servers.iter().any(|e| e.name == group && e.group.as_deref() == Some(group))
            && !m.servers.iter().any(|e| removed.iter().any(|r| r.name == e.name))
    });
    if !ok {
        bail!(
            "switchyard wrap --group did not produce the entry `{group}` in place of the others; nothing was written"
        );
    }
    Ok(())
}

/// Appends `[groups.GROUP]` with the wrapped servers to switchyard's config.
fn add_group_table(
    plan: &mut Plan,
    config_path: &Path,
    config_text: Option<&str>,
    group: &str,
    removed: &[Record],
    input: &Input,
) -> anyhow::Result<()> {
    let (before, mut after) = match plan.config.take() {
        Some((_, before, after)) => (before, after),
        None => (config_text.map(str::to_string), config_text.unwrap_or_default().to_string()),
    };
    let nl = if after.contains("\r\n") { "\r\n" } else { "\n" };
    if !after.is_empty() && !after.ends_with('\n') {
        after.push_str(nl);
    }
    let from: String = input.path.display().to_string().chars().map(|c| if c.is_control() { '?' } else { c }).collect();
    let servers: Vec<String> = removed.iter().map(|r| toml_str(&r.server)).collect();
    after.push_str(&format!(
        "{nl}# From {} {from} (switchyard wrap --group){nl}[groups.{}]{nl}servers = [{}]{nl}",
        input.client.name(),
        toml_key(group),
        servers.join(", ")
    ));
    switchyard_config::Config::load_text(config_path, &after).map_err(|e| {
        anyhow!("group `{group}` cannot be added to {} ({e:#}); nothing was written", config_path.display())
    })?;
    plan.config = Some((config_path.to_path_buf(), before, after));
    Ok(())
}

/// An entry of a server map as `unwrap` edits it: its whole text (JSON: key to value; Codex:
/// the table with its sub-tables) and its value's.
struct Place {
    name: String,
    whole: Range<usize>,
    value: Range<usize>,
}

fn places(input: &Input, text: &str) -> anyhow::Result<Vec<Place>> {
    if input.client == Client::Codex {
        let found = crate::parse(input.client, &input.path, text, input.scope.clone())?;
        let top = found.into_iter().find(|m| !matches!(m.scope, Scope::ClaudeProject(_)));
        let servers = top.map(|m| m.servers).unwrap_or_default();
        return Ok(servers.into_iter().map(|e| Place { name: e.name, whole: e.span.clone(), value: e.span }).collect());
    }
    Ok(server_members(input.client, text)?
        .into_iter()
        .map(|m| Place { name: m.key, whole: m.key_span.start..m.value.span.end, value: m.value.span })
        .collect())
}

/// An entry as it is put back: JSON's `"NAME": VALUE`, Codex's table as it was.
fn entry_text(client: Client, r: &Record) -> String {
    if client == Client::Codex { r.original.clone() } else { format!("{}: {}", json_str(&r.name), r.original) }
}

/// Plans `unwrap` of the group entries of one file, on `text` (the file with its per-server
/// entries put back already; `input.text` as read). Returns the new text when something is put
/// back, the groups put back, and those that stay recorded.
pub fn plan_unwrap_groups(
    input: &Input,
    text: &str,
    state: &State,
    only: Option<&[String]>,
    lines: &mut Vec<String>,
) -> anyhow::Result<(Option<String>, Vec<GroupRecord>, Vec<GroupRecord>)> {
    let (mut out, mut restored, mut keep) = (text.to_string(), Vec::new(), Vec::new());
    let path = input.path.display();
    for g in &state.groups {
        if only.is_some_and(|o| !o.contains(&g.name)) {
            keep.push(g.clone());
            continue;
        }
        let originals = || g.removed.iter().map(|r| entry_text(input.client, r)).collect::<Vec<_>>().join("\n");
        // Untouched since wrap: the file as it was, byte for byte.
        if out == input.text && sha256(&out) == g.after {
            out = g.before.clone();
            lines.push(format!("{path}: group entry `{}` replaced by its {} entries", g.name, g.removed.len()));
            restored.push(g.clone());
            continue;
        }
        let places = places(input, &out)?;
        let Some(at) = places.iter().position(|p| p.name == g.name) else {
            lines.push(format!(
                "{path}: group entry `{}` is no longer in the file; nothing to put back. The entries before wrap --group were:\n{}",
                g.name,
                originals()
            ));
            continue;
        };
        let here = &places[at];
        if !same_entry(input.client, &out[here.value.clone()], &g.wrapped) {
            keep.push(g.clone());
            lines.push(format!(
                "{path}: group entry `{}` was edited since wrap --group: left as it is, since putting the entries back would lose that edit. The entries before were:\n{}",
                g.name,
                originals()
            ));
            continue;
        }
        let mut back = Vec::new();
        for r in &g.removed {
            if places.iter().any(|p| p.name == r.name) {
                lines.push(format!(
                    "{path}: `{}` is in the file again: that one stays. The entry before wrap --group was:\n{}",
                    r.name, r.original
                ));
            } else {
                back.push(entry_text(input.client, r));
            }
        }
        // Each entry on a line of its own at the group entry's indentation (Codex: a table each).
        let line_start = out[..here.whole.start].rfind('\n').map_or(0, |i| i + 1);
        let indent: String = out[line_start..here.whole.start].chars().take_while(|c| c.is_whitespace()).collect();
        let nl = if out.contains("\r\n") { "\r\n" } else { "\n" };
        let joint = if input.client == Client::Codex { format!("{nl}{nl}") } else { format!(",{nl}{indent}") };
        let edit = if back.is_empty() {
            drop_place(input.client, &out, &places, at)
        } else {
            (here.whole.clone(), back.join(&joint))
        };
        out = splice(&out, vec![edit]);
        lines.push(format!(
            "{path}: changed since wrap --group: group entry `{}` replaced by its entries (by value), the other changes kept",
            g.name
        ));
        restored.push(g.clone());
    }
    Ok(((out != text).then_some(out), restored, keep))
}

/// The edit that removes entry `at` (and its comma).
fn drop_place(client: Client, text: &str, places: &[Place], at: usize) -> (Range<usize>, String) {
    let whole = places[at].whole.clone();
    if client == Client::Codex {
        let end = text[whole.end..].find('\n').map_or(text.len(), |i| whole.end + i + 1);
        return (whole.start..end, String::new());
    }
    match (at.checked_sub(1), places.get(at + 1)) {
        (_, Some(next)) => (whole.start..next.whole.start, String::new()),
        (Some(prev), None) => (places[prev].value.end..whole.end, String::new()),
        (None, None) => (whole, String::new()),
    }
}

#[cfg(test)]
mod tests;
