//! What `--dry-run` shows: the diffs of the files `wrap` or `unwrap` would write, secrets hidden.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::emit::{json_str, toml_key, toml_str};
use super::plan::Change;
use crate::{Kind, Scope};

/// `text` (diffs to print) with every env value, header value and URL query of the entries of
/// `changes` (before and after) shown as `***`: a dry run is often pasted or shared, and
/// `switchyard clients` shows none of them either. Every value counts, however short (a PIN, a
/// three-letter key): only one that is just a client variable (`${input:key}`) holds no secret
/// and stays.
pub(super) fn hide_secrets(text: &str, changes: &[Change]) -> String {
    // A value as the files write it after its key (`"KEY": "VALUE"`, `KEY = "VALUE"`), so the
    // same text elsewhere (a `true` as a command, a path in an argument) is left alone; a query
    // as it ends a URL (`?QUERY"`).
    let mut keyed: BTreeSet<(Vec<String>, String)> = BTreeSet::new();
    let mut queries: BTreeSet<String> = BTreeSet::new();
    let secret = |v: &str| {
        let only_variable = v.starts_with("${") && v.ends_with('}') && v.matches("${").count() == 1;
        !v.is_empty() && !only_variable
    };
    for c in changes {
        for text in [&c.before, &c.after] {
            let Ok(found) = crate::parse(c.client, &c.path, text, Scope::User) else { continue };
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
    // A client variable's default may be a secret written in the file (`${TOKEN:-sk-...}`).
    out = crate::mask_defaults(&out);
    if out != before {
        out.push_str("\n(env and header values, URL queries and `${VAR:-default}` defaults are shown as ***)\n");
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
pub(super) fn dry_run(config: Option<&(PathBuf, Option<String>, String)>, changes: &[Change]) -> String {
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
