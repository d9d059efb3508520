//! Where things are in a config file, for errors that name the file, the line and the column.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::anyhow;
use serde::Deserialize;
use serde::de::IgnoredAny;
use toml::Spanned;

/// `config file X, line N` (the line when known).
pub(crate) fn file_place(path: &Path, line: Option<usize>) -> String {
    match line {
        Some(n) => format!("config file {}, line {n}", path.display()),
        None => format!("config file {}", path.display()),
    }
}

/// Where the server keys are in a config file, for errors that name the line.
#[derive(Default, Deserialize)]
pub(crate) struct FileSpans {
    /// The `[server]` table (its header, or the inline table).
    #[serde(default)]
    pub(crate) server: Option<Spanned<ServerSpans>>,
    /// `servers` where it first appears, and each entry's table header (or its name, when only
    /// a sub-table such as `[servers.x.pools.p]` opens it).
    #[serde(default)]
    pub(crate) servers: Option<Spanned<BTreeMap<String, Spanned<ServerSpans>>>>,
    /// The `[http]` table and its keys.
    #[serde(default)]
    pub(crate) http: Option<Spanned<BTreeMap<String, Spanned<IgnoredAny>>>>,
    /// Each `[[plugins]]` entry's keys.
    #[serde(default)]
    pub(crate) plugins: Vec<BTreeMap<String, Spanned<IgnoredAny>>>,
}

/// Where each launch key of a server table is (a test holds them to [`Launch::KEYS`]).
///
/// [`Launch::KEYS`]: crate::Launch::KEYS
#[derive(Default, Deserialize)]
pub(crate) struct ServerSpans {
    command: Option<Spanned<IgnoredAny>>,
    args: Option<Spanned<IgnoredAny>>,
    env: Option<Spanned<IgnoredAny>>,
    cwd: Option<Spanned<IgnoredAny>>,
    url: Option<Spanned<IgnoredAny>>,
    transport: Option<Spanned<IgnoredAny>>,
    pub(crate) headers: Option<BTreeMap<String, Spanned<IgnoredAny>>>,
    client_env: Option<Spanned<IgnoredAny>>,
    share: Option<Spanned<IgnoredAny>>,
    oauth: Option<Spanned<IgnoredAny>>,
}

impl ServerSpans {
    pub(crate) fn offset(&self, key: &str) -> Option<usize> {
        let span = match key {
            "command" => &self.command,
            "args" => &self.args,
            "env" => &self.env,
            "cwd" => &self.cwd,
            "url" => &self.url,
            "transport" => &self.transport,
            "client_env" => &self.client_env,
            "share" => &self.share,
            "oauth" => &self.oauth,
            // The table itself has no span here: its first entry stands for it.
            "headers" => return self.headers.iter().flat_map(|h| h.values()).map(|s| s.span().start).min(),
            _ => &None,
        };
        span.as_ref().map(|s| s.span().start)
    }
}

/// The line of each `[http.tokens]` entry in `text`, by name.
pub(crate) fn token_lines(text: &str) -> BTreeMap<String, usize> {
    #[derive(Default, Deserialize)]
    struct File {
        #[serde(default)]
        http: Option<Http>,
    }
    #[derive(Default, Deserialize)]
    struct Http {
        #[serde(default)]
        tokens: BTreeMap<String, Spanned<IgnoredAny>>,
    }
    let file: File = toml::from_str(text).unwrap_or_default();
    let tokens = file.http.map(|h| h.tokens).unwrap_or_default();
    tokens.into_iter().map(|(name, at)| (name, line_of(text, at.span().start))).collect()
}

/// The line in `text` of `key` of table `[groups.GROUP]` (else of the table), for the
/// errors about a group's content.
pub(crate) fn group_key_line(text: &str, group: &str, key: &crate::group::GroupKey) -> Option<usize> {
    use crate::group::GroupKey;
    #[derive(Default, Deserialize)]
    struct File {
        #[serde(default)]
        groups: BTreeMap<String, Spanned<Group>>,
    }
    #[derive(Default, Deserialize)]
    struct Group {
        #[serde(default)]
        servers: Option<Spanned<Vec<Spanned<IgnoredAny>>>>,
        #[serde(default)]
        separator: Option<Spanned<IgnoredAny>>,
        #[serde(default)]
        prefix: BTreeMap<String, Spanned<IgnoredAny>>,
    }
    let file: File = toml::from_str(text).ok()?;
    let table = file.groups.get(group)?;
    let g = table.get_ref();
    let at = match key {
        GroupKey::Table => None,
        GroupKey::Servers(n) => g.servers.as_ref().map(|list| match n.and_then(|n| list.get_ref().get(n)) {
            Some(entry) => entry.span().start,
            None => list.span().start,
        }),
        GroupKey::Separator => g.separator.as_ref().map(|s| s.span().start),
        GroupKey::Prefix(server) => g.prefix.get(server).map(|s| s.span().start),
    };
    Some(line_of(text, at.unwrap_or(table.span().start)))
}

/// The 1-based line of byte `offset` in `text`.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|b| **b == b'\n').count() + 1
}

/// The 1-based line and column (in characters) of byte `offset` in `text` (of the character
/// it falls in).
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut at = offset.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    (line_of(text, at), text[start..at].chars().count() + 1)
}

/// A config file that is not TOML, or not switchyard's: one line with the file, the line and the
/// column, and what is wrong there (the toml crate's own text spans several lines).
pub(crate) fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> anyhow::Error {
    let mut what = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(key) = did_you_mean(&what) {
        what = format!("{what}; did you mean `{key}`?");
    }
    match e.span() {
        Some(span) => {
            let (line, col) = line_col(text, span.start);
            anyhow!("config file {}, line {line}, column {col}: {what}", path.display())
        }
        None => anyhow!("config file {}: {what}", path.display()),
    }
}

/// For "unknown field `X`, expected one of `a`, `b`": the expected key `X` is most likely a typo
/// of (one or two letters off, or letters swapped), if one is.
fn did_you_mean(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected = rest.split_once("expected ")?.1;
    let keys = expected.split('`').skip(1).step_by(2);
    keys.map(|k| (edits(unknown, k), k)).filter(|(d, _)| *d <= 2).min_by_key(|(d, _)| *d).map(|(_, k)| k.to_string())
}

/// The edit distance of `a` and `b` (insertions, deletions, substitutions and swaps of two
/// neighbours), for the short keys of a config file.
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use crate::test_support::load_text;

    #[test]
    fn a_broken_file_is_one_line_naming_the_file_line_and_column() {
        for (text, line, col, says) in [
            ("[limits]\ncall_timeout_ms = 1000\n  bad key = 3\n", 3, 7, "expected"),
            ("[servers.fs]\ncommand = \n", 2, 11, "string values must be quoted"),
            ("[servers.fs]\ncommand = \"x\"\ncomand = \"y\"\n", 3, 1, "unknown field `comand`"),
            ("[servers.fs.limits]\ncall_timeout = 3\n", 2, 1, "unknown field `call_timeout`"),
            ("[servers.fs.pools.default]\nmxa = 3\n", 2, 1, "unknown field `mxa`"),
            ("[servers.fs]\nname = \"x\"\n", 2, 1, "unknown field `name`"),
            ("[daemon]\nidle_exit = 3\n", 2, 1, "unknown field `idle_exit`"),
            ("[daemon]\nidle_exit_ms = \"é\"\n", 2, 16, "invalid type"),
        ] {
            let (dir, c) = load_text(text);
            let e = format!("{:#}", c.unwrap_err());
            let file = dir.path().join("switchyard.toml");
            let want = format!("config file {}, line {line}, column {col}: ", file.display());
            assert!(e.starts_with(&want) && e.contains(says), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{text:?}: {e}");
        }
        // The column counts characters, not bytes.
        assert_eq!(line_col("a\né = x", 5), (2, 3));
        let e = parse_error(Path::new("f.toml"), "x", &toml::from_str::<Config>("x").unwrap_err()).to_string();
        assert!(e.starts_with("config file f.toml, line 1, column "), "{e}");
    }

    #[test]
    fn a_misspelt_key_gets_the_one_it_likely_meant() {
        for (text, says) in [
            ("[servers.fs]\ncomand = \"x\"\n", "did you mean `command`?"),
            ("[servers.fs]\ncommand = \"x\"\nsahre = \"all\"\n", "did you mean `share`?"),
            (
                "[servers.fs]\ncommand = \"x\"\n[servers.fs.limits]\ncall_timout_ms = 3\n",
                "did you mean `call_timeout_ms`?",
            ),
        ] {
            let (_dir, c) = load_text(text);
            let e = format!("{:#}", c.unwrap_err());
            assert!(e.contains(says), "{text:?}: {e}");
        }
        // Nothing near: no guess.
        let (_dir, c) = load_text("[servers.fs]\ncommand = \"x\"\nbanana = 1\n");
        assert!(!format!("{:#}", c.unwrap_err()).contains("did you mean"));
        assert_eq!(edits("comand", "command"), 1);
        assert_eq!(edits("sahre", "share"), 1);
    }

    #[test]
    fn every_launch_key_is_found_on_its_line() {
        let text: String = crate::Launch::KEYS.iter().map(|k| format!("{k} = {{ a = 1 }}\n")).collect();
        let spans: ServerSpans = toml::from_str(&text).unwrap();
        for (i, key) in crate::Launch::KEYS.iter().enumerate() {
            assert_eq!(spans.offset(key).map(|o| line_of(&text, o)), Some(i + 1), "{key}");
        }
    }
}
