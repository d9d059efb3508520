//! The MCP client configurations on this machine (Claude Desktop, Claude Code, Cursor, VS Code,
//! Codex, Gemini CLI): where they are and which servers they run, each entry with the byte span of
//! its text so a writer ([`wrap`]) can replace it and keep the rest of the file as it was.

#![forbid(unsafe_code)]

mod codex;
pub mod jsonc;
pub mod list;
pub mod wrap;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde_json::Value;

use self::jsonc::{Doc, Node, Tree};

/// An MCP client whose configuration switchyard reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Client {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    VsCode,
    /// Codex CLI: TOML, `[mcp_servers.NAME]` tables.
    Codex,
    /// Gemini CLI: `mcpServers` in its settings.json.
    Gemini,
}

impl Client {
    pub const ALL: [Client; 6] =
        [Client::ClaudeDesktop, Client::ClaudeCode, Client::Cursor, Client::VsCode, Client::Codex, Client::Gemini];

    /// The name a user types (`--client claude-code`).
    pub fn name(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "claude-desktop",
            Client::ClaudeCode => "claude-code",
            Client::Cursor => "cursor",
            Client::VsCode => "vscode",
            Client::Codex => "codex",
            Client::Gemini => "gemini",
        }
    }

    /// The key of the server map: VS Code's own `mcp.json` says `servers`, Codex's TOML
    /// `mcp_servers`, the others `mcpServers`.
    pub fn servers_key(self) -> &'static str {
        match self {
            Client::VsCode => "servers",
            Client::Codex => "mcp_servers",
            _ => "mcpServers",
        }
    }

    /// What the client's JSON allows beyond JSON, as tried with each CLI: Gemini CLI parses its
    /// settings with `JSON.parse` once comments are stripped (no trailing comma, no byte-order
    /// mark); Claude Code refuses comments and trailing commas (its user file stops loading, a
    /// project's `.mcp.json` is ignored). Wrapping such a file would hide that it does not load.
    fn dialect(self) -> jsonc::Dialect {
        let lenient = jsonc::Dialect::LENIENT;
        match self {
            Client::Gemini => jsonc::Dialect { trailing_commas: false, bom: false, ..lenient },
            Client::ClaudeCode => jsonc::Dialect { comments: false, trailing_commas: false, ..lenient },
            _ => lenient,
        }
    }
}

/// Whose servers a [`Found`] lists.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every session of the user (`~/.claude.json`, `~/.cursor/mcp.json`, ...).
    User,
    /// One project's file (`.mcp.json`, `.cursor/mcp.json`, `.vscode/mcp.json`).
    Project,
    /// Claude Code's "local" scope: `projects.<path>.mcpServers` in `~/.claude.json`.
    ClaudeProject(PathBuf),
}

/// A server map in a client's file.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub client: Client,
    pub path: PathBuf,
    pub scope: Scope,
    pub servers: Vec<Entry>,
    /// Entries of the map that are not a server switchyard can read (`"type": "ws"`, no
    /// `command`, `args` that are not strings, ...), each an [`Error::Invalid`]'s text:
    /// one such entry leaves the others readable. Each says file, line, column and why.
    pub unreadable: Vec<String>,
    /// VS Code's `inputs[].id`: what `${input:ID}` may name (empty for other clients).
    pub inputs: Vec<String>,
}

/// One server entry, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub name: String,
    pub kind: Kind,
    /// The switchyard server name when the entry already runs `switchyard connect NAME`.
    pub wrapped: Option<String>,
    /// The group when the entry runs `switchyard connect --group NAME` (`wrap --group`).
    pub group: Option<String>,
    /// The client-side variables in the entry's strings, as written (`${VAR}`, `${VAR:-x}`,
    /// `${input:key}`, `${env:X}`, `${workspaceFolder}`), each once, in file order. The client
    /// expands them, so a writer keeps them in the client's file rather than resolving them.
    pub variables: Vec<String>,
    /// Those of `variables` the client leaves out when they are unset, and starts the server all
    /// the same (Codex's `env_vars` and `env_http_headers`): the others it needs.
    pub optional: Vec<String>,
    /// Keys of the entry this model does not hold (`envFile`, `auth`, `headersHelper`, ...),
    /// which a writer must carry over or refuse to replace the entry.
    pub unknown: Vec<String>,
    /// Where each of `unknown` is written: the byte offset of its key in the file (in JSON, of
    /// its value, on the key's line as clients write them), so that a message about one names
    /// its own line.
    pub unknown_at: BTreeMap<String, usize>,
    /// Why a writer cannot replace the entry's text although it reads (a Codex server written as
    /// dotted keys, or as tables apart in the file): None for most.
    pub stuck: Option<String>,
    /// The bytes of the entry's value (`{` to `}`) in the file.
    pub span: Range<usize>,
}

/// The keys of an entry that [`Kind::Stdio`] holds, and those of a remote one: each but `type`
/// is the switchyard launch key of the same name ([`switchyard_config::Launch::KEYS`]).
pub(crate) const STDIO_KEYS: &[&str] = &["type", "command", "args", "env", "cwd"];
pub(crate) const REMOTE_KEYS: &[&str] = &["type", "url", "headers"];

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<String>,
    },
    /// Streamable HTTP (`"type": "http"`, Cursor's `"streamable-http"`, or a `url` without a type).
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
    /// Legacy HTTP+SSE (`"type": "sse"`).
    Sse {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read the {} config {}: {source}", client.name(), path.display())]
    Read { client: Client, path: PathBuf, source: std::io::Error },
    /// Not JSON with comments, or not the client's format: a file is read as a whole or not at all.
    #[error(
        "{}, line {line}, column {column}: {message}; switchyard leaves this {} config as it is",
        path.display(),
        client.name()
    )]
    Invalid { client: Client, path: PathBuf, line: usize, column: usize, message: String },
}

/// A file a client may keep its servers in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub client: Client,
    pub path: PathBuf,
    pub scope: Scope,
}

/// The user's home, under which the clients keep their configs (HOME; USERPROFILE on Windows).
pub(crate) fn home() -> anyhow::Result<PathBuf> {
    switchyard_os::dirs::home().ok_or_else(|| {
        anyhow::anyhow!("{} is not set; switchyard looks for client configs under it", switchyard_os::dirs::HOME_VAR)
    })
}

/// Every place the clients keep servers, for a user whose home is `home`, working in `project`
/// (when given); `env` answers environment variables (`APPDATA`, `XDG_CONFIG_HOME`,
/// `CLAUDE_CONFIG_DIR`). The three desktop layouts (Linux, macOS, Windows) are all listed, since
/// only the one of this system can exist. A path appears once, at its first place in this order.
pub fn locations(home: &Path, project: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> Vec<Location> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let config = set("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
    let support = home.join("Library").join("Application Support");
    let appdata = set("APPDATA").unwrap_or_else(|| home.join("AppData").join("Roaming"));
    let desktop_dirs = [config, support, appdata];
    let mut all = Vec::new();
    let mut add = |client, path: PathBuf, scope| all.push(Location { client, path, scope });
    for dir in &desktop_dirs {
        add(Client::ClaudeDesktop, dir.join("Claude").join("claude_desktop_config.json"), Scope::User);
    }
    let claude_dir = set("CLAUDE_CONFIG_DIR").unwrap_or_else(|| home.to_path_buf());
    add(Client::ClaudeCode, claude_dir.join(".claude.json"), Scope::User);
    add(Client::Cursor, home.join(".cursor").join("mcp.json"), Scope::User);
    for dir in &desktop_dirs {
        add(Client::VsCode, dir.join("Code").join("User").join("mcp.json"), Scope::User);
    }
    let codex_dir = set("CODEX_HOME").unwrap_or_else(|| home.join(".codex"));
    add(Client::Codex, codex_dir.join("config.toml"), Scope::User);
    add(Client::Gemini, home.join(".gemini").join("settings.json"), Scope::User);
    if let Some(project) = project {
        add(Client::ClaudeCode, project.join(".mcp.json"), Scope::Project);
        add(Client::Cursor, project.join(".cursor").join("mcp.json"), Scope::Project);
        add(Client::VsCode, project.join(".vscode").join("mcp.json"), Scope::Project);
        add(Client::Codex, project.join(".codex").join("config.toml"), Scope::Project);
        add(Client::Gemini, project.join(".gemini").join("settings.json"), Scope::Project);
    }
    let mut seen = std::collections::HashSet::new();
    all.retain(|l| seen.insert(l.path.clone()));
    all
}

/// The server maps in the files of [`locations`] that exist, or per file why it cannot be read.
pub fn discover(
    home: &Path,
    project: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<Result<Found, Error>> {
    let mut out = Vec::new();
    for Location { client, path, scope } in locations(home, project, env) {
        match std::fs::read_to_string(&path) {
            Ok(text) => match parse(client, &path, &text, scope) {
                Ok(found) => out.extend(found.into_iter().map(Ok)),
                Err(e) => out.push(Err(e)),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => out.push(Err(Error::Read { client, path, source })),
        }
    }
    out
}

/// Reads one client file. See [`parse`].
pub fn read(client: Client, path: &Path, scope: Scope) -> Result<Vec<Found>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { client, path: path.into(), source })?;
    parse(client, path, &text, scope)
}

/// The server maps in `text`, the contents of `path`: one [`Found`], and for Claude Code's user
/// file also one per project of `projects` that has servers. A file without a server map has
/// none; anything that is not the client's format is an error naming line and column.
pub fn parse(client: Client, path: &Path, text: &str, scope: Scope) -> Result<Vec<Found>, Error> {
    if client == Client::Codex {
        return codex::parse(path, text, scope);
    }
    let doc = Doc::parse_with(text, client.dialect()).map_err(|e| Error::Invalid {
        client,
        path: path.into(),
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    let reader = Reader { client, path, doc: &doc };
    let root = &doc.root;
    reader.object(root, "the file")?;
    let inputs = match root.get("inputs").filter(|_| client == Client::VsCode) {
        Some(node) => reader.inputs(node)?,
        None => Vec::new(),
    };
    let (servers, unreadable) = reader.servers(root.get(client.servers_key()))?;
    let mut out = vec![Found { client, path: path.into(), scope: scope.clone(), servers, unreadable, inputs }];
    let projects = root.get("projects").filter(|_| client == Client::ClaudeCode && scope == Scope::User);
    if let Some(projects) = projects {
        for member in reader.object(projects, "`projects`")? {
            let (servers, unreadable) = reader.servers(member.value.get("mcpServers"))?;
            if !servers.is_empty() || !unreadable.is_empty() {
                let scope = Scope::ClaudeProject(PathBuf::from(&member.key));
                out.push(Found { client, path: path.into(), scope, servers, unreadable, inputs: Vec::new() });
            }
        }
    }
    Ok(out)
}

struct Reader<'a> {
    client: Client,
    path: &'a Path,
    doc: &'a Doc,
}

impl Reader<'_> {
    fn invalid(&self, node: &Node, message: String) -> Error {
        let (line, column) = self.doc.position(node.span.start);
        Error::Invalid { client: self.client, path: self.path.into(), line, column, message }
    }

    fn object<'n>(&self, node: &'n Node, what: &str) -> Result<&'n [jsonc::Member], Error> {
        match &node.tree {
            Tree::Object(members) => Ok(members),
            _ => Err(self.invalid(node, format!("{what} should be an object"))),
        }
    }

    fn inputs(&self, node: &Node) -> Result<Vec<String>, Error> {
        let Tree::Array(items) = &node.tree else {
            return Err(self.invalid(node, "`inputs` should be an array".into()));
        };
        items
            .iter()
            .map(|item| match item.get("id").map(|id| (id, self.doc.value(id))) {
                Some((_, Value::String(id))) => Ok(id),
                Some((id, _)) => Err(self.invalid(id, "an input's `id` should be a string".into())),
                None => Err(self.invalid(item, "an input needs an `id`".into())),
            })
            .collect()
    }

    /// The entries of a server map that read, and an error for each that does not.
    fn servers(&self, map: Option<&Node>) -> Result<(Vec<Entry>, Vec<String>), Error> {
        let Some(map) = map else { return Ok((Vec::new(), Vec::new())) };
        let key = self.client.servers_key();
        let (mut entries, mut unreadable) = (Vec::new(), Vec::new());
        let members = self.object(map, &format!("`{key}`"))?;
        for member in members {
            // A name twice: the client runs the last one, and a writer could not tell the two
            // apart when it puts them back.
            let twice: Vec<&jsonc::Member> = members.iter().filter(|m| m.key == member.key).collect();
            if twice.len() > 1 {
                let lines: Vec<String> =
                    twice.iter().map(|m| self.doc.position(m.value.span.start).0.to_string()).collect();
                let (line, column) = self.doc.position(member.value.span.start);
                unreadable.push(format!(
                    "{}, line {line}, column {column}: server `{}` is in `{key}` {} times (lines {}); the client runs only the last: remove the others, then wrap",
                    self.path.display(),
                    member.key,
                    twice.len(),
                    lines.join(", ")
                ));
                continue;
            }
            match self.entry(&member.key, &member.value) {
                Ok(e) => entries.push(e),
                // Only this entry is left: not "this config", as the whole-file error says.
                Err(Error::Invalid { line, column, message, .. }) => {
                    unreadable.push(format!("{}, line {line}, column {column}: {message}", self.path.display()))
                }
                Err(e) => unreadable.push(e.to_string()),
            }
        }
        Ok((entries, unreadable))
    }

    fn entry(&self, name: &str, node: &Node) -> Result<Entry, Error> {
        let members = self.object(node, &format!("server `{name}`"))?;
        let field = |key: &str| node.get(key);
        let string = |key: &str| -> Result<Option<String>, Error> {
            match field(key).map(|n| (n, self.doc.value(n))) {
                None => Ok(None),
                Some((_, Value::String(s))) => Ok(Some(s)),
                Some((n, _)) => Err(self.invalid(n, format!("`{key}` of server `{name}` should be a string"))),
            }
        };
        let map = |key: &str| -> Result<BTreeMap<String, String>, Error> {
            let Some(n) = field(key) else { return Ok(BTreeMap::new()) };
            let mut out = BTreeMap::new();
            for m in self.object(n, &format!("`{key}` of server `{name}`"))? {
                match self.doc.value(&m.value) {
                    Value::String(v) => out.insert(m.key.clone(), v),
                    _ => {
                        let what = format!("`{key}.{}` of server `{name}` should be a string", m.key);
                        return Err(self.invalid(&m.value, what));
                    }
                };
            }
            Ok(out)
        };
        // Gemini CLI: `httpUrl` is Streamable HTTP and wins over `url`; `tcp` is a WebSocket.
        let gemini = self.client == Client::Gemini;
        if let Some(tcp) = field("tcp").filter(|_| gemini) {
            let what = format!("server `{name}` has `tcp` (a WebSocket); switchyard reads stdio, http and sse");
            return Err(self.invalid(tcp, what));
        }
        let http_url = if gemini { string("httpUrl")? } else { None };
        let url = http_url.clone().map_or_else(|| string("url"), |u| Ok(Some(u)))?;
        let kind_name = if http_url.is_some() { Some("http".to_string()) } else { string("type")? };
        let remote = |sse: bool| -> Result<Kind, Error> {
            let Some(url) = url.clone() else {
                return Err(self.invalid(node, format!("server `{name}` is remote but has no `url`")));
            };
            let headers = map("headers")?;
            Ok(if sse { Kind::Sse { url, headers } } else { Kind::Http { url, headers } })
        };
        let kind = match (kind_name.as_deref(), &url) {
            (Some("stdio"), _) | (None, None) => {
                let Some(command) = string("command")? else {
                    return Err(self.invalid(node, format!("server `{name}` has neither `command` nor `url`")));
                };
                let args = match field("args").map(|n| (n, self.doc.value(n))) {
                    None => Vec::new(),
                    Some((n, Value::Array(items))) => items
                        .into_iter()
                        .map(|v| match v {
                            Value::String(s) => Ok(s),
                            _ => Err(self.invalid(n, format!("`args` of server `{name}` should hold strings"))),
                        })
                        .collect::<Result<_, _>>()?,
                    Some((n, _)) => {
                        return Err(self.invalid(n, format!("`args` of server `{name}` should be an array")));
                    }
                };
                Kind::Stdio { command, args, env: map("env")?, cwd: string("cwd")? }
            }
            (Some("http" | "streamable-http"), _) | (None, Some(_)) => remote(false)?,
            (Some("sse"), _) => remote(true)?,
            (Some(other), _) => {
                let what = format!("server `{name}` has `type` \"{other}\"; switchyard reads stdio, http and sse");
                return Err(self.invalid(field("type").unwrap_or(node), what));
            }
        };
        let known = match kind {
            Kind::Stdio { .. } => STDIO_KEYS,
            _ => REMOTE_KEYS,
        };
        let (mut unknown, mut unknown_at) = (Vec::new(), BTreeMap::new());
        for m in members {
            let known = known.contains(&m.key.as_str()) || (gemini && m.key == "httpUrl" && http_url.is_some());
            if !known && !unknown.contains(&m.key) {
                unknown.push(m.key.clone());
                unknown_at.insert(m.key.clone(), m.value.span.start);
            }
        }
        let (wrapped, group) = match &kind {
            Kind::Stdio { command, args, .. } => (wrapped(command, args), group_of(command, args)),
            _ => (None, None),
        };
        let mut variables = Vec::new();
        // Claude Desktop expands nothing: a `${X}` there reaches the server as written.
        if self.client != Client::ClaudeDesktop {
            self.strings(node, &mut |s| find_variables(self.client, s, &mut variables));
        }
        Ok(Entry {
            name: name.to_string(),
            kind,
            wrapped,
            group,
            variables,
            optional: Vec::new(),
            unknown,
            unknown_at,
            stuck: None,
            span: node.span.clone(),
        })
    }

    /// Calls `f` on every string value (not key) under `node`, in file order.
    fn strings(&self, node: &Node, f: &mut dyn FnMut(&str)) {
        match &node.tree {
            Tree::Object(members) => members.iter().for_each(|m| self.strings(&m.value, f)),
            Tree::Array(items) => items.iter().for_each(|i| self.strings(i, f)),
            Tree::Scalar => {
                if let Value::String(s) = self.doc.value(node) {
                    f(&s)
                }
            }
        }
    }
}

/// The server name of `switchyard connect [--config FILE] [--socket PATH] NAME`.
fn wrapped(command: &str, args: &[String]) -> Option<String> {
    if !is_switchyard(command) || group_of(command, args).is_some() {
        return None;
    }
    let mut rest = args.strip_prefix(&["connect".to_string()])?.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--config" | "--socket" => {
                rest.next();
            }
            "--" => return rest.next().cloned(),
            a if a.starts_with('-') => {}
            name => return Some(name.to_string()),
        }
    }
    None
}

/// The group of `switchyard connect --group NAME [...]` (`--group=NAME` too).
pub(crate) fn group_of(command: &str, args: &[String]) -> Option<String> {
    if !is_switchyard(command) || args.first().is_none_or(|a| a != "connect") {
        return None;
    }
    let mut rest = args[1..].iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--" => return None,
            "--group" => return rest.next().cloned(),
            a => {
                if let Some(g) = a.strip_prefix("--group=") {
                    return Some(g.to_string());
                }
            }
        }
    }
    None
}

/// Whether a command runs the switchyard binary (`switchyard`, `/path/switchyard`,
/// `C:\\...\\switchyard.exe`), or this very binary under another name (a copy renamed `sy`, say):
/// `wrap` writes its own path into the entries it makes.
pub(crate) fn is_switchyard(command: &str) -> bool {
    let file = command.rsplit(['/', '\\']).next().unwrap_or(command);
    if file == "switchyard" || file.eq_ignore_ascii_case("switchyard.exe") {
        return true;
    }
    static THIS: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let this = THIS.get_or_init(|| std::env::current_exe().and_then(|e| switchyard_os::fs::canonicalize(&e)).ok());
    Path::new(command).is_absolute()
        && this.is_some()
        && switchyard_os::fs::canonicalize(Path::new(command)).ok() == *this
}

/// The byte ranges of the variables `client` expands in `s`, in order: each `${...}` (from `${`
/// to the first `}` after it), and for Gemini CLI also `$NAME` (a run of ASCII letters, digits
/// and `_`), as its settings loader reads them.
pub(crate) fn variable_spans(client: Client, s: &str) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        loop {
            let start = at + s[at..].find('$')?;
            let rest = &s[start + 1..];
            if rest.starts_with('{') {
                let end = start + s[start..].find('}')? + 1;
                at = end;
                return Some(start..end);
            }
            let word = rest.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
            at = start + 1;
            if client == Client::Gemini && word > 0 {
                at = start + 1 + word;
                return Some(start..at);
            }
        }
    })
}

/// `s` with the default of every `${VAR:-default}` shown as `***`: a default may be a secret
/// written in the file (`${TOKEN:-sk-live-...}`), and what switchyard shows of a client's file
/// holds no env or header value.
pub fn mask_defaults(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        let Some(end) = rest[start..].find('}').map(|e| start + e) else { break };
        let inner = &rest[start + 2..end];
        out.push_str(&rest[..start + 2]);
        match inner.split_once(":-") {
            Some((name, _)) => {
                out.push_str(name);
                out.push_str(":-***");
            }
            None => out.push_str(inner),
        }
        out.push('}');
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Adds each variable of `s` (see [`variable_spans`]) to `out` that is not there yet.
fn find_variables(client: Client, s: &str, out: &mut Vec<String>) {
    for span in variable_spans(client, s) {
        let var = &s[span];
        let named = if var.starts_with("${") { var.len() > 3 } else { var.len() > 1 };
        if named && !out.iter().any(|v| v == var) {
            out.push(var.to_string());
        }
    }
}

#[cfg(test)]
mod tests;
