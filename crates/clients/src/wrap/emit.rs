//! The text `wrap` writes: a server's `[servers.NAME]` table for switchyard.toml, and the JSON
//! entry that replaces the client's.

use std::path::Path;

use anyhow::{anyhow, bail};
use switchyard_config::Launch;

use super::Input;
use crate::jsonc::{Doc, Tree};
use crate::{Client, Entry, Found, REMOTE_KEYS, STDIO_KEYS, Scope};

/// Whether a wrapped entry writes `key` itself, or it describes the server the entry replaces
/// (switchyard's config holds that now): never carried over from the original.
pub(super) fn replaced(key: &str) -> bool {
    // Gemini CLI's `httpUrl` is its Streamable HTTP `url`.
    STDIO_KEYS.contains(&key) || REMOTE_KEYS.contains(&key) || key == "httpUrl"
}

/// A TOML string (basic, escaped).
pub(super) fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A TOML key: bare when it can be.
pub(super) fn toml_key(k: &str) -> String {
    if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        k.to_string()
    } else {
        toml_str(k)
    }
}

/// A value on one line, tables inline, strings as [`toml_str`] writes them.
fn toml_value(value: &toml::Value) -> String {
    match value {
        toml::Value::Table(t) => {
            let items: Vec<String> = t.iter().map(|(k, v)| format!("{} = {}", toml_key(k), toml_value(v))).collect();
            format!("{{ {} }}", items.join(", "))
        }
        toml::Value::Array(items) => format!("[{}]", items.iter().map(toml_value).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

/// `def` as the value of a `[servers.NAME]` table, for comparing with one in the file.
pub(super) fn def_table(def: &Launch) -> toml::Table {
    toml::Table::try_from(def).expect("a launch is a table of strings")
}

/// `def` as the body of a `[servers.NAME]` table: a line per key it sets, in the order of
/// [`Launch::KEYS`].
pub(super) fn toml_body(def: &Launch) -> String {
    let table = def_table(def);
    Launch::KEYS.iter().filter_map(|k| table.get(*k).map(|v| format!("{k} = {}\n", toml_value(v)))).collect()
}

pub(super) fn toml_table(name: &str, def: &Launch, input: &Input, map: &Found) -> String {
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
pub(super) struct Layout {
    pub(super) outer: String,
    pub(super) inner: Option<String>,
    pub(super) newline: &'static str,
}

pub(super) fn layout(text: &str, entry: &Entry) -> Layout {
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

pub(super) fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// The text of the stdio entry that replaces `entry`: `type` when the original said it,
/// `command`, `args`, `env` with the client's variables, then the original's other keys as they
/// were written (client settings such as `disabled` or `autoApprove`).
pub(super) fn wrapped_entry(
    client: Client,
    text: &str,
    entry: &Entry,
    exe: &Path,
    config: &Path,
    server: &str,
    vars: &[(String, String)],
) -> anyhow::Result<String> {
    let exe = exe.to_str().ok_or_else(|| {
        anyhow!("{}: switchyard's path is not UTF-8, which a client's file cannot hold", exe.display())
    })?;
    let config = config.to_str().ok_or_else(|| {
        anyhow!("{}: the config's path is not UTF-8, which a client's file cannot hold", config.display())
    })?;
    let mut args = vec!["connect".to_string(), server.to_string(), "--config".to_string(), config.to_string()];
    if !vars.is_empty() {
        // `NAME?`: the client starts the server without it, so `connect` must too.
        let names: Vec<String> =
            vars.iter().map(|(n, e)| if entry.optional.contains(e) { format!("{n}?") } else { n.clone() }).collect();
        args.push("--env".into());
        args.push(names.join(","));
    }
    if client == Client::Codex {
        let connect: Vec<String> = std::iter::once(exe.to_string()).chain(args).collect();
        return crate::codex::wrapped_entry(text, entry, &connect, vars);
    }
    let original = &text[entry.span.clone()];
    let doc = Doc::parse(original).map_err(|e| anyhow!("entry `{}` does not read alone: {}", entry.name, e.message))?;
    let Tree::Object(members) = &doc.root.tree else { bail!("entry `{}` is not an object", entry.name) };
    let mut fields: Vec<(String, String)> = Vec::new();
    if members.iter().any(|m| m.key == "type") {
        fields.push(("type".into(), json_str("stdio")));
    }
    fields.push(("command".into(), json_str(exe)));
    let args_text = format!("[{}]", args.iter().map(|a| json_str(a)).collect::<Vec<_>>().join(", "));
    fields.push(("args".into(), args_text));
    let carried: Vec<&crate::jsonc::Member> =
        members.iter().filter(|m| entry.unknown.contains(&m.key) && !replaced(&m.key)).collect();
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
pub(super) fn splice(text: &str, mut edits: Vec<(std::ops::Range<usize>, String)>) -> String {
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = text.to_string();
    for (range, with) in edits {
        out.replace_range(range, &with);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_a_wrapped_entry_drops_are_switchyard_s_launch_keys_but_type() {
        for key in STDIO_KEYS.iter().chain(REMOTE_KEYS).filter(|k| **k != "type") {
            assert!(Launch::KEYS.contains(key), "{key}");
        }
    }
}
