//! Loading a config file in which one server table, one `[[plugins]]` entry or one
//! `[groups.NAME]` table is wrong: the rest loads, and each part that does not is named with its
//! own error (file, line, fix), so that a typo in one server never keeps every other server of
//! every client from starting.
//!
//! A part is taken out by blanking its lines (every byte but the line breaks becomes a space):
//! what is left is still TOML and every line keeps its number, so the errors of the parts that
//! stay name the lines the user sees in the file. A file that is not TOML at all, or whose
//! mistake is in no server and no plugin entry (`[limits]`, `[daemon]`, two entries
//! for one plugin file), is one error, as before. So is `[http]`, the daemon's HTTP front: a
//! mistake there leaves the front unserved and every server running.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use toml_edit::{Document, Item, Table};

use crate::Config;

/// A config file as far as it loads.
#[derive(Debug)]
pub struct Tolerated {
    /// Every part that loads (the whole file when nothing is wrong).
    pub config: Config,
    /// Servers whose table does not load, by name, with the error (file, line, what is wrong).
    pub broken_servers: BTreeMap<String, String>,
    /// `[[plugins]]` entries that do not load.
    pub broken_plugins: Vec<BrokenPlugin>,
    /// Why `[http]` does not load (then `config.http` is None: no front is served).
    pub broken_http: Option<String>,
    /// `[groups.NAME]` tables that do not load, by name, with the error (file, line, the key):
    /// they are not in `config.groups`.
    pub broken_groups: BTreeMap<String, String>,
}

/// A `[[plugins]]` entry that does not load. The calls its plugin would judge must not run
/// without it: the servers it names (every server when it names none, or when its `servers`
/// cannot be read) refuse them with `why`.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokenPlugin {
    /// Its `file`, when that much reads.
    pub file: Option<String>,
    /// Its `servers`, when they read; None: every server.
    pub servers: Option<Vec<String>>,
    /// The error: file, line, what is wrong.
    pub why: String,
}

impl BrokenPlugin {
    /// Whether the calls of `server` are among those it would judge.
    pub fn applies_to(&self, server: &str) -> bool {
        self.servers.as_ref().is_none_or(|s| s.iter().any(|n| n == server))
    }
}

impl Tolerated {
    /// Whether every part loaded.
    pub fn is_whole(&self) -> bool {
        self.broken_servers.is_empty()
            && self.broken_plugins.is_empty()
            && self.broken_http.is_none()
            && self.broken_groups.is_empty()
    }
}

impl Config {
    /// [`Config::load_text`], leaving out each `[servers.NAME]` table, `[[plugins]]` entry and
    /// `[groups.NAME]` table that does not load (see the module's documentation). An error when the mistake is
    /// elsewhere, or the file is not TOML: that of the whole file.
    pub fn load_tolerant(path: &Path, text: &str) -> anyhow::Result<Tolerated> {
        let whole = match Config::load_text(path, text) {
            Ok(config) => {
                return Ok(Tolerated {
                    config,
                    broken_servers: BTreeMap::new(),
                    broken_plugins: Vec::new(),
                    broken_http: None,
                    broken_groups: BTreeMap::new(),
                });
            }
            Err(e) => e,
        };
        let Ok(doc) = Document::parse(text) else { return Err(whole) };
        let Some(parts) = Parts::of(&doc, text) else { return Err(whole) };
        let known: Vec<String> = parts.servers.keys().cloned().collect();
        let load = |blanked: Vec<&Range<usize>>| Config::load_known(path, &blank(text, blanked), &known);
        let all_servers = || parts.servers.values().flatten();
        let all_groups = || parts.groups.values().flatten();
        // What is neither a server, a plugin entry, a group nor `[http]` must load by itself. When
        // it does not, its error is the one that stops the file, said first: the file's first
        // error may be a part's, which alone would be left out (said too).
        let all_plugins = || parts.plugins.iter().flatten();
        if let Err(rest) = load(all_servers().chain(all_plugins()).chain(&parts.http).chain(all_groups()).collect()) {
            let (rest, first) = (format!("{rest:#}"), format!("{whole:#}"));
            if rest == first {
                return Err(whole);
            }
            return Err(anyhow::anyhow!(
                "{rest}; once that is fixed, this table is left out until it is fixed too: {first}"
            ));
        }
        let broken_http =
            load(all_servers().chain(all_plugins()).chain(all_groups()).collect()).err().map(|e| format!("{e:#}"));
        let bad_http: Vec<&Range<usize>> = if broken_http.is_some() { parts.http.iter().collect() } else { Vec::new() };
        // A group is checked against every server's name, loaded or not: alone, its error is its own.
        let mut broken_groups = BTreeMap::new();
        for name in parts.groups.keys() {
            let others = parts.groups.iter().filter(|(n, _)| *n != name).flat_map(|(_, r)| r);
            if let Err(e) = load(all_servers().chain(all_plugins()).chain(&parts.http).chain(others).collect()) {
                broken_groups.insert(name.clone(), format!("{e:#}"));
            }
        }
        let bad_groups: Vec<&Range<usize>> = broken_groups.keys().flat_map(|n| &parts.groups[n]).collect();
        let mut broken_plugins = Vec::new();
        let mut bad_entries = Vec::new();
        for (n, entry) in parts.plugins.iter().enumerate() {
            let others = parts.plugins.iter().enumerate().filter(|(m, _)| *m != n).flat_map(|(_, r)| r);
            let blanked = all_servers().chain(others).chain(bad_http.iter().copied()).chain(bad_groups.iter().copied());
            if let Err(e) = load(blanked.collect()) {
                broken_plugins.push(plugin_of(&doc, n, format!("{e:#}"), &known));
                bad_entries.extend(entry);
            }
        }
        let mut broken_servers = BTreeMap::new();
        for name in parts.servers.keys() {
            let others = parts.servers.iter().filter(|(n, _)| *n != name).flat_map(|(_, r)| r);
            let blanked = others.chain(bad_entries.iter().copied()).chain(bad_http.iter().copied());
            if let Err(e) = load(blanked.chain(bad_groups.iter().copied()).collect()) {
                broken_servers.insert(name.clone(), format!("{e:#}"));
            }
        }
        if broken_plugins.is_empty() && broken_servers.is_empty() && broken_http.is_none() && broken_groups.is_empty() {
            return Err(whole);
        }
        let out: Vec<&Range<usize>> = broken_servers
            .keys()
            .flat_map(|n| &parts.servers[n])
            .chain(bad_entries.iter().copied())
            .chain(bad_http.iter().copied())
            .chain(bad_groups.iter().copied())
            .collect();
        match load(out) {
            Ok(config) => Ok(Tolerated { config, broken_servers, broken_plugins, broken_http, broken_groups }),
            // Parts that load alone but not together: the mistake is in how they meet.
            Err(_) => Err(whole),
        }
    }
}

/// A config file read for what one command needs of it: `[http]` for `switchyard token`,
/// `[audit]` for `switchyard calls`.
#[derive(Debug)]
pub struct ReadFor {
    /// The whole file when it loads; else only the `tables` asked for (all else left out).
    pub config: Config,
    /// Why the whole file does not load, when it does not: a mistake elsewhere, for the command
    /// to say as a warning (the daemon keeps the last config that loaded).
    pub elsewhere: Option<String>,
}

impl Config {
    /// [`Config::load_text`] of a read-only command that needs only the top-level `tables`: a
    /// mistake in another table (a misspelt server in `[groups]`, a broken `[servers.NAME]`)
    /// is that table's, and does not stop it. An error when the tables themselves do not load
    /// (theirs), or when the others cannot be taken out by whole lines (the whole file's).
    pub fn load_for(path: &Path, text: &str, tables: &[&str]) -> anyhow::Result<ReadFor> {
        let whole = match Config::load_text(path, text) {
            Ok(config) => return Ok(ReadFor { config, elsewhere: None }),
            Err(e) => e,
        };
        let Ok(doc) = Document::parse(text) else { return Err(whole) };
        let root = doc.as_table();
        let mut spans = Vec::new();
        toml_headers(root, &mut spans);
        let mut headers: Vec<usize> = spans.into_iter().map(|s| s.start).collect();
        headers.sort_unstable();
        let units = Units { text, headers };
        let mut others = Vec::new();
        for (key, item) in root.iter().filter(|(k, _)| !tables.contains(k)) {
            let key_at = root.key(key).and_then(|k| k.span()).map(|s| s.start);
            let Some(ranges) = units.of_item(item, key_at) else { return Err(whole) };
            others.extend(ranges);
        }
        let config = Config::load_text(path, &blank(text, others.iter().collect()))?;
        Ok(ReadFor { config, elsewhere: Some(format!("{whole:#}")) })
    }
}

/// The lines of each server table, each `[[plugins]]` entry, each group table and `[http]`.
struct Parts {
    servers: BTreeMap<String, Vec<Range<usize>>>,
    groups: BTreeMap<String, Vec<Range<usize>>>,
    plugins: Vec<Vec<Range<usize>>>,
    http: Vec<Range<usize>>,
}

impl Parts {
    /// None when a part cannot be taken out by whole lines (servers or plugins given inline).
    fn of(doc: &Document<&str>, text: &str) -> Option<Parts> {
        let root = doc.as_table();
        let mut spans = Vec::new();
        toml_headers(root, &mut spans);
        let mut headers: Vec<usize> = spans.into_iter().map(|s| s.start).collect();
        headers.sort_unstable();
        let units = Units { text, headers };
        let servers = units.of_entries(root.get("servers"))?;
        let groups = units.of_entries(root.get("groups"))?;
        let mut plugins = Vec::new();
        match root.get("plugins") {
            None => {}
            Some(Item::ArrayOfTables(entries)) => {
                for entry in entries.iter() {
                    let mut ranges = Vec::new();
                    units.of_table(entry, &mut ranges)?;
                    plugins.push(ranges);
                }
            }
            Some(_) => return None,
        }
        let http = match root.get_key_value("http") {
            None => Vec::new(),
            Some((key, item)) => units.of_item(item, key.span().map(|s| s.start))?,
        };
        Some(Parts { servers, groups, plugins, http })
    }
}

/// The span of every `[table]` and `[[array]]` header below `table` (a document's root, read
/// with spans), in the order of the document's tree.
pub fn toml_headers(table: &Table, out: &mut Vec<Range<usize>>) {
    for (_, item) in table.iter() {
        match item {
            Item::Table(t) => {
                if !t.is_implicit()
                    && !t.is_dotted()
                    && let Some(s) = t.span()
                {
                    out.push(s);
                }
                toml_headers(t, out);
            }
            Item::ArrayOfTables(a) => {
                for t in a.iter() {
                    out.extend(t.span());
                    toml_headers(t, out);
                }
            }
            _ => {}
        }
    }
}

/// Whole lines of the text, by what they hold.
struct Units<'t> {
    text: &'t str,
    /// Every header's start, in order.
    headers: Vec<usize>,
}

impl Units<'_> {
    /// The lines of each entry of a table of named tables (`[servers]`, `[groups]`), by name.
    fn of_entries(&self, item: Option<&Item>) -> Option<BTreeMap<String, Vec<Range<usize>>>> {
        let mut out = BTreeMap::new();
        match item {
            None => {}
            Some(Item::Table(table)) => {
                for (name, item) in table.iter() {
                    let key_at = table.key(name).and_then(|k| k.span()).map(|s| s.start);
                    out.insert(name.to_string(), self.of_item(item, key_at)?);
                }
            }
            Some(_) => return None,
        }
        Some(out)
    }

    /// The lines of `item`, the value of a key that starts at `key_at`.
    fn of_item(&self, item: &Item, key_at: Option<usize>) -> Option<Vec<Range<usize>>> {
        let mut ranges = Vec::new();
        match item {
            Item::Table(t) if !t.is_dotted() => self.of_table(t, &mut ranges)?,
            // `name = { ... }` in `[servers]`, or `servers.name.key = ...` at the top: from the
            // key to the end of the line its value ends on.
            Item::Table(_) | Item::Value(_) => {
                let start = self.line_start(key_at?);
                ranges.push(start..self.line_end(extent(item)?));
            }
            // `[[plugins]]` entries: each with its header, as a table.
            Item::ArrayOfTables(a) => {
                for t in a.iter() {
                    self.of_table(t, &mut ranges)?;
                }
            }
            Item::None => return None,
        }
        Some(ranges)
    }

    /// The lines of a table's own header (up to the next header) and of every table below it.
    fn of_table(&self, table: &Table, out: &mut Vec<Range<usize>>) -> Option<()> {
        if !table.is_implicit()
            && let Some(s) = table.span()
        {
            let next = self.headers.iter().find(|h| **h > s.start).copied().unwrap_or(self.text.len());
            out.push(self.line_start(s.start)..self.line_start(next));
        }
        for (name, item) in table.iter() {
            match item {
                Item::Table(t) if !t.is_dotted() => self.of_table(t, out)?,
                Item::ArrayOfTables(a) => {
                    for t in a.iter() {
                        self.of_table(t, out)?;
                    }
                }
                // Keys of a table with a header are in its header's lines; those of an implicit
                // one (`[a.b]` opens `a`) are not, and cannot be told apart from its parent's.
                _ if table.is_implicit() => {
                    let at = table.key(name).and_then(|k| k.span()).map(|s| s.start)?;
                    out.push(self.line_start(at)..self.line_end(extent(item)?));
                }
                _ => {}
            }
        }
        Some(())
    }

    fn line_start(&self, at: usize) -> usize {
        self.text[..at.min(self.text.len())].rfind('\n').map_or(0, |i| i + 1)
    }

    /// Just past the line break of the line `at` is on (the end of the text on its last line).
    fn line_end(&self, at: usize) -> usize {
        let at = at.min(self.text.len());
        self.text[at..].find('\n').map_or(self.text.len(), |i| at + i + 1)
    }
}

/// Where `item` ends in the text (its last key or value), when its parts have spans.
fn extent(item: &Item) -> Option<usize> {
    match item {
        Item::Value(v) => v.span().map(|s| s.end),
        Item::Table(t) => {
            let mut end = t.span().map(|s| s.end);
            for (key, item) in t.iter() {
                let key_end = t.key(key).and_then(|k| k.span()).map(|s| s.end);
                end = end.max(key_end).max(extent(item));
            }
            end
        }
        _ => None,
    }
}

/// `text` with every byte in `ranges` but line breaks turned into spaces.
fn blank(text: &str, ranges: Vec<&Range<usize>>) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for r in ranges {
        for b in &mut bytes[r.start.min(text.len())..r.end.min(text.len())] {
            if *b != b'\n' && *b != b'\r' {
                *b = b' ';
            }
        }
    }
    // Whole characters are blanked (ranges are whole lines), and spaces are ASCII.
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// What of entry `n` of `[[plugins]]` reads, with `why` it does not load. Its `servers` count
/// only when each is one of the file's (`known`): a misspelt name says the entry was meant for
/// some server, not which, so it stands for every server.
fn plugin_of(doc: &Document<&str>, n: usize, why: String, known: &[String]) -> BrokenPlugin {
    let entry = doc.as_table().get("plugins").and_then(Item::as_array_of_tables).and_then(|a| a.get(n));
    let file = entry.and_then(|e| e.get("file")).and_then(Item::as_str).map(str::to_string);
    let servers = entry.and_then(|e| e.get("servers")).and_then(Item::as_array).and_then(|a| {
        a.iter().map(|v| v.as_str().map(str::to_string)).collect::<Option<Vec<String>>>().filter(|s| !s.is_empty())
    });
    let servers = servers.filter(|s| s.iter().all(|n| known.contains(n)));
    BrokenPlugin { file, servers, why }
}

#[cfg(test)]
mod tests;
