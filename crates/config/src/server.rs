//! The server tables (`[server]`, `[servers.NAME]`) and the pools, plugins and daemon settings.

use std::collections::BTreeMap;

use anyhow::{Context, anyhow, bail};
use serde::de::{Deserializer, MapAccess};
use serde::{Deserialize, Serialize};

use crate::launch::{self, Launch, WithLaunch, keys};
use crate::limits::LimitsPatch;
use crate::url::{parse_url, url_name};
use crate::vars::{about_header, check_header, is_var_name, uses_client_env};

/// The server: either a `command` switchyard starts, or a `url` it connects to. Reads as its
/// [`Launch`] (`server.command`).
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    /// Name used in logs and errors; defaults to the command's file name, or the URL's host.
    pub name: Option<String>,
    /// What runs: `command` or `url`, and the keys that go with it.
    pub launch: Launch,
    /// The client's values of a server made by [`Config::for_client`], read before the
    /// environment by `${VAR}` in header values (not read from the file).
    ///
    /// [`Config::for_client`]: crate::Config::for_client
    pub client_values: ClientValues,
    /// `expose`: how its tools are given to clients (its list, or a search over it); None: as
    /// the client's budget says (docs/budgets.md).
    pub expose: Option<crate::Expose>,
}

/// One `[servers.NAME]` table: the keys of `[server]` but `name` (the table's name is the
/// server's), and the server's own pools and limits over the file's. Reads as its [`Launch`].
#[derive(Debug, Clone, Default)]
pub struct ServerEntry {
    /// What runs: `command` or `url`, and the keys that go with it.
    pub launch: Launch,
    /// Replace the file's pools of the same name, each as a whole.
    pub pools: BTreeMap<String, PoolConfig>,
    /// Override the file's `[limits]`, only the keys given.
    pub limits: LimitsPatch,
    /// `expose`: how its tools are given to clients (see [`ServerConfig::expose`]).
    pub expose: Option<crate::Expose>,
}

impl ServerEntry {
    /// The entry as a `[server]` named `name`.
    pub fn server(&self, name: &str) -> ServerConfig {
        ServerConfig {
            name: Some(name.to_string()),
            launch: self.launch.clone(),
            client_values: ClientValues::default(),
            expose: self.expose,
        }
    }
}

const SERVER_KEYS: [&str; 2 + Launch::KEYS.len()] = keys(&["name"], &["expose"]);
const ENTRY_KEYS: [&str; Launch::KEYS.len() + 3] = keys(&[], &["pools", "limits", "expose"]);

impl WithLaunch for ServerConfig {
    const NAME: &'static str = "ServerConfig";
    const KEYS: &'static [&'static str] = &SERVER_KEYS;

    fn read_value<'de, A: MapAccess<'de>>(&mut self, key: &'static str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.name = map.next_value()?,
            "expose" => self.expose = map.next_value()?,
            _ => unreachable!("`{key}` is not a key of ServerConfig"),
        }
        Ok(())
    }

    fn launch_mut(&mut self) -> &mut Launch {
        &mut self.launch
    }
}

impl WithLaunch for ServerEntry {
    const NAME: &'static str = "ServerEntry";
    const KEYS: &'static [&'static str] = &ENTRY_KEYS;

    fn read_value<'de, A: MapAccess<'de>>(&mut self, key: &'static str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "pools" => self.pools = map.next_value()?,
            "limits" => self.limits = map.next_value()?,
            "expose" => self.expose = map.next_value()?,
            _ => unreachable!("`{key}` is not a key of ServerEntry"),
        }
        Ok(())
    }

    fn launch_mut(&mut self) -> &mut Launch {
        &mut self.launch
    }
}

impl<'de> Deserialize<'de> for ServerConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        launch::deserialize(d)
    }
}

impl<'de> Deserialize<'de> for ServerEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        launch::deserialize(d)
    }
}

/// Values a client supplied for a server's `client_env`, by name. Debug shows the names only:
/// the values may be secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientValues(pub BTreeMap<String, String>);

impl std::fmt::Debug for ClientValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// `[daemon]`: settings of the long-lived router that fronts every server of the file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Exit after this long without a client session (0 = never).
    pub idle_exit_ms: u64,
}

impl Default for DaemonConfig {
    /// A daemon nobody uses any more (every client unwrapped or closed) does not keep its
    /// servers running for ever: it exits after half an hour without a session, and the next
    /// `connect` starts it again.
    fn default() -> Self {
        DaemonConfig { idle_exit_ms: 30 * 60 * 1000 }
    }
}

/// The longest server name: it appears in URLs (`/mcp/NAME`), socket paths and command lines.
pub const MAX_SERVER_NAME: usize = 64;

/// A server name is 1 to 64 ASCII letters, digits, `-`, `_` and `.`, and starts with a letter, a
/// digit or `_` (`-x` reads as an option on a command line, `.` and `..` as path steps in a URL).
/// The error completes "the server name `x` ...".
pub fn check_server_name(name: &str) -> Result<(), String> {
    const RULE: &str = "a server name is 1 to 64 ASCII letters, digits, `-`, `_` and `.`, starting with a letter, a digit or `_`, as it appears in URLs and on command lines";
    if name.is_empty() {
        return Err(format!("is empty; {RULE}"));
    }
    if name.len() > MAX_SERVER_NAME {
        return Err(format!("is {} bytes long; {RULE}", name.len()));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if let Some(c) = name.chars().find(|c| !allowed(*c)) {
        let what = match c {
            ' ' => "a space".to_string(),
            c if c.is_control() => "a control character".to_string(),
            c => format!("`{c}`"),
        };
        return Err(format!("has {what} in it; {RULE}"));
    }
    if name.starts_with(['-', '.']) {
        return Err(format!("starts with `{}`; {RULE}", &name[..1]));
    }
    Ok(())
}

/// How a remote server is reached (`[server] transport`, `--transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// Streamable HTTP, falling back to legacy SSE when the first POST is refused the way legacy servers refuse it
    #[default]
    Auto,
    /// Streamable HTTP only
    StreamableHttp,
    /// Legacy HTTP+SSE only
    Sse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Affinity {
    /// Any instance of the pool serves any session.
    #[default]
    None,
    /// Each session gets instances of its own (for stateful servers).
    Session,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// Instances kept running even when idle.
    pub min: usize,
    /// Instances at most.
    pub max: usize,
    /// Calls in flight per instance at most; 0 = unlimited (pipelining), 1 = the server is serial.
    pub max_inflight: usize,
    pub affinity: Affinity,
    /// Instances above `min` idle this long are shut down (0 = never).
    pub idle_timeout_ms: u64,
    /// Calls waiting for this pool at most; past it a call is answered "server busy" at once.
    pub max_queue: usize,
    /// Scopes of instances of their own that policies may place calls on at once (a client's,
    /// a session's, a key's; each up to `max` instances); past it a call so placed is answered
    /// "server busy". Bounds a policy that names a key per argument value.
    pub max_placements: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            min: 1,
            max: 1,
            max_inflight: 0,
            affinity: Affinity::None,
            idle_timeout_ms: 300_000,
            max_queue: 1024,
            max_placements: 16,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// A failing plugin is skipped for that call.
    #[default]
    Open,
    /// A failing plugin rejects the call.
    Closed,
}

/// How a plugin's refusal of a `tools/call` reaches the client (`[[plugins]] refusals`).
/// Requests of other methods are always refused with a JSON-RPC error: only tools have results
/// that can say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Refusals {
    /// A tool result with `isError: true` whose text says which plugin refused and why (and
    /// when to try again, for a rate limit): clients hand it to the model, which can adapt.
    #[default]
    Result,
    /// A JSON-RPC error (-32004) with the plugin and reason in its `data`, for programs that
    /// read errors; clients may not show it to the model.
    Error,
}

impl<'de> Deserialize<'de> for Refusals {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "result" => Ok(Refusals::Result),
            "error" => Ok(Refusals::Error),
            other => Err(serde::de::Error::custom(format!(
                "`refusals = {other:?}` is not a way to refuse: use \"result\" (the default: a refused tools/call is answered with a tool result the model reads) or \"error\" (a JSON-RPC error -32004)"
            ))),
        }
    }
}

/// What a plugin's content hooks (`switchyard:policy@0.3.0`) do to the calls they see
/// (`[[plugins]] mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HookMode {
    /// What a hook answers is applied: a modified request or result replaces it, a denial
    /// refuses the call.
    #[default]
    Enforce,
    /// The hook runs and what it would have done is logged and counted; nothing changes.
    Audit,
}

impl<'de> Deserialize<'de> for HookMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "enforce" => Ok(HookMode::Enforce),
            "audit" => Ok(HookMode::Audit),
            other => Err(serde::de::Error::custom(format!(
                "`mode = {other:?}` is not a mode: use \"enforce\" (the default: what the plugin's hooks answer is applied) or \"audit\" (they run, and what they would have done is logged only)"
            ))),
        }
    }
}

/// What a content hook that cannot answer (it trapped, ran past its deadline, or the payload
/// is over `max_payload_kib`) does to the call (`[[plugins]] fail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// The call passes as if the hook had answered continue (and it is logged).
    Open,
    /// The call is refused, naming the plugin and what went wrong.
    Closed,
}

impl<'de> Deserialize<'de> for Fail {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "open" => Ok(Fail::Open),
            "closed" => Ok(Fail::Closed),
            other => Err(serde::de::Error::custom(format!(
                "`fail = {other:?}` is not a way to fail: use \"open\" (a hook that cannot answer lets the call pass) or \"closed\" (it refuses the call)"
            ))),
        }
    }
}

/// One `[[plugins]]` entry: a plugin in the directory runs only under its entry, with its config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginEntry {
    /// File name inside the plugins directory (or a path relative to it).
    pub file: String,
    /// Higher runs first; ties are broken by file name.
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub on_error: OnError,
    /// How its refusals of `tools/call` are answered.
    #[serde(default)]
    pub refusals: Refusals,
    /// Handed to the plugin's `init` as JSON: a JSON string, or an inline TOML table.
    #[serde(default)]
    pub config: Option<toml::Value>,
    /// CPU budget per call, enforced by epoch deadlines.
    #[serde(default = "default_deadline_ms")]
    pub deadline_ms: u64,
    /// Linear memory at most, in MiB.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: u64,
    /// Give the plugin a wall and monotonic clock (off: they read as zero).
    #[serde(default)]
    pub allow_clock: bool,
    /// Give the plugin random numbers (off: a fixed stream).
    #[serde(default)]
    pub allow_random: bool,
    /// The plugin must run: while it cannot (file missing or broken, config refused), the calls
    /// it would judge are refused, and deleting its file later keeps the loaded version in
    /// force. `false`: the entry only configures the file for when it is there.
    #[serde(default = "default_required")]
    pub required: bool,
    /// The servers (by name) whose calls and tool lists it judges; None: every server.
    #[serde(default)]
    pub servers: Option<Vec<String>>,
    /// Whether its content hooks' answers are applied or only logged.
    #[serde(default)]
    pub mode: HookMode,
    /// What a content hook that cannot answer does to the call; None: as `on_error` says.
    #[serde(default)]
    pub fail: Option<Fail>,
    /// The largest params or result, in KiB, handed to its content hooks; a larger one is
    /// not handed in, and `fail` applies.
    #[serde(default = "default_max_payload_kib")]
    pub max_payload_kib: u64,
}

/// How many times a content hook's payload its memory limit allows for (see
/// [`PluginEntry::memory_limit_mib`]).
pub const PAYLOAD_MEMORY_FACTOR: u64 = 8;

fn default_deadline_ms() -> u64 {
    5
}
fn default_memory_mib() -> u64 {
    16
}
fn default_required() -> bool {
    true
}
fn default_max_payload_kib() -> u64 {
    4096
}

impl PluginEntry {
    /// An entry with every default (what `plugin check` runs a file with when no config names it).
    pub fn defaults_for(file: &str) -> PluginEntry {
        PluginEntry {
            file: file.to_string(),
            priority: 0,
            on_error: OnError::default(),
            refusals: Refusals::default(),
            config: None,
            deadline_ms: default_deadline_ms(),
            memory_mib: default_memory_mib(),
            allow_clock: false,
            allow_random: false,
            required: default_required(),
            servers: None,
            mode: HookMode::default(),
            fail: None,
            max_payload_kib: default_max_payload_kib(),
        }
    }

    /// What its content hooks do when they cannot answer: `fail`, else as `on_error` says.
    pub fn fails(&self) -> Fail {
        self.fail.unwrap_or(match self.on_error {
            OnError::Open => Fail::Open,
            OnError::Closed => Fail::Closed,
        })
    }

    /// The memory its instances may grow to, in MiB: `memory_mib`, and at least what a content
    /// hook needs to hold a payload of `max_payload_kib` (the host copies it in, the plugin
    /// parses it and writes its answer: [`PAYLOAD_MEMORY_FACTOR`] times the payload, plus the
    /// default 16 MiB for the rest). A limit, not a reservation: memory is taken as it is used.
    pub fn memory_limit_mib(&self) -> u64 {
        let payload_mib = self.max_payload_kib.saturating_mul(PAYLOAD_MEMORY_FACTOR).div_ceil(1024);
        self.memory_mib.max(default_memory_mib().saturating_add(payload_mib)).max(1)
    }

    /// The largest params or result its content hooks are handed, in bytes.
    pub fn max_payload_bytes(&self) -> usize {
        usize::try_from(self.max_payload_kib.saturating_mul(1024)).unwrap_or(usize::MAX)
    }

    /// Whether the servers it is scoped to (`servers`) are among `known`, the file's servers.
    pub fn check_servers(&self, known: &[String]) -> anyhow::Result<()> {
        let Some(servers) = &self.servers else { return Ok(()) };
        if servers.is_empty() {
            anyhow::bail!(
                "plugin {}: `servers = []` scopes it to no server, so it would never run; list the servers it is for, or remove `servers` for every server",
                self.file
            );
        }
        for name in servers {
            if !known.iter().any(|k| k == name) {
                anyhow::bail!(
                    "plugin {}: `servers` names `{}`, which is not a server of this file (its servers: {}); fix the name or remove it",
                    self.file,
                    name.escape_debug(),
                    known.join(", ")
                );
            }
        }
        Ok(())
    }

    /// The `config` value as JSON text for `init` (`{}` when absent).
    pub fn config_json(&self) -> anyhow::Result<String> {
        match &self.config {
            None => Ok("{}".to_string()),
            Some(toml::Value::String(s)) => {
                serde_json::from_str::<serde_json::Value>(s)
                    .with_context(|| format!("plugin {}: `config` is a string but not valid JSON", self.file))?;
                Ok(s.clone())
            }
            Some(other) => Ok(serde_json::to_string(other)?),
        }
    }
}

/// Pools that cannot work: no instance at all, or more kept running than allowed.
pub(crate) fn check_pools(pools: &BTreeMap<String, PoolConfig>) -> anyhow::Result<()> {
    for (name, pool) in pools {
        if pool.max == 0 {
            bail!("pool `{name}`: max must be at least 1");
        }
        if pool.min > pool.max {
            bail!("pool `{name}`: min ({}) is larger than max ({})", pool.min, pool.max);
        }
        if pool.max_placements == 0 {
            bail!(
                "pool `{name}`: max_placements must be at least 1 (the scopes of instances a policy may place calls on at once; default 16)"
            );
        }
    }
    Ok(())
}

impl ServerConfig {
    /// Whether no key of `[server]` is given.
    pub(crate) fn is_unset(&self) -> bool {
        let ServerConfig { name, launch, client_values, expose } = self;
        name.is_none() && *launch == Launch::default() && client_values.0.is_empty() && expose.is_none()
    }

    /// The rules of `[server]` on its own: a command or a URL, not both, only the keys that fit
    /// it, a usable URL and well-formed headers. `at(key)` says where `key` was written.
    pub fn check(&self, at: &dyn Fn(&str) -> String) -> anyhow::Result<()> {
        self.check_as(None, at)
    }

    /// [`ServerConfig::check`] for `[server]` (`entry` None) or the `[servers.NAME]` entry named
    /// `entry`, whose `at(key)` already names the server.
    pub(crate) fn check_as(&self, entry: Option<&str>, at: &dyn Fn(&str) -> String) -> anyhow::Result<()> {
        let table = if entry.is_some() { "" } else { "[server] " };
        self.check_client_env(entry.is_some(), at)?;
        let Some(url) = &self.launch.url else {
            if self.launch.command.as_deref().is_some_and(|c| c.trim().is_empty()) {
                bail!("{}: {table}`command` is empty; give the program to run (e.g. \"npx\")", at("command"));
            }
            if self.launch.command.is_some() {
                for (key, set) in [
                    ("transport", self.launch.transport.is_some()),
                    ("headers", !self.launch.headers.is_empty()),
                    ("oauth", self.launch.oauth.is_some()),
                ] {
                    if set {
                        bail!(
                            "{}: {table}`{key}` applies to a remote server (`url`), and this server is the command `{}`; remove it",
                            at(key),
                            self.launch.command.as_deref().unwrap_or_default()
                        );
                    }
                }
            }
            return self.check_headers(entry);
        };
        if self.launch.command.is_some() {
            bail!(
                "{}: {table}has both `command` and `url`: a server is either a command switchyard starts or a URL it connects to; keep one",
                at("url")
            );
        }
        for (key, set) in [
            ("args", !self.launch.args.is_empty()),
            ("env", !self.launch.env.is_empty()),
            ("cwd", self.launch.cwd.is_some()),
        ] {
            if set {
                bail!("{}: {table}`{key}` applies to commands only, and this server is a `url`; remove it", at(key));
            }
        }
        // A URL with a client's value in it is checked once the value is known (`for_client`).
        if !uses_client_env(url, &self.launch.client_env) {
            parse_url(url).map_err(|e| anyhow!("{}: {table}url {e}", at("url")))?;
        }
        if let Some(oauth) = &self.launch.oauth {
            oauth.check().map_err(|e| anyhow!("{}: {table}`oauth` {e}", at("oauth")))?;
        }
        self.check_headers(entry)
    }

    /// `client_env`: only in `[servers.NAME]` (`in_entry`), variable names, each once.
    fn check_client_env(&self, in_entry: bool, at: &dyn Fn(&str) -> String) -> anyhow::Result<()> {
        if self.launch.client_env.is_empty() {
            return Ok(());
        }
        if !in_entry {
            bail!(
                "{}: [server] `client_env` takes values from the client that connects to the daemon (`switchyard connect NAME --env ...`), and `switchyard run` has no such client; move the server into a [servers.NAME] table, or remove `client_env`",
                at("client_env")
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for name in &self.launch.client_env {
            if !is_var_name(name) {
                let shown: String = name.chars().take(64).collect();
                bail!(
                    "{}: `client_env` has {:?}, which is not a variable name (ASCII letters, digits and `_`, not starting with a digit)",
                    at("client_env"),
                    shown
                );
            }
            if !seen.insert(name) {
                bail!("{}: `client_env` names `{name}` twice; keep one", at("client_env"));
            }
        }
        Ok(())
    }

    fn check_headers(&self, entry: Option<&str>) -> anyhow::Result<()> {
        let who = entry.map(|n| format!("server `{n}`: ")).unwrap_or_default();
        let mut seen = std::collections::BTreeSet::new();
        for (name, value) in &self.launch.headers {
            check_header(name, &value.raw).map_err(|e| anyhow!("{who}{} {e}", about_header(name, &value.source)))?;
            if !seen.insert(name.to_ascii_lowercase()) {
                bail!("{who}{} is given twice (header names ignore case); keep one", about_header(name, &value.source));
            }
        }
        Ok(())
    }
}

impl ServerConfig {
    /// The server's name as `Target::of` (in the router) gives it: `name`, else one from the command, else
    /// the URL's host. None without a command or a URL, or with a URL that is not valid.
    pub fn derived_name(&self) -> Option<String> {
        let derived = match (&self.launch.url, &self.launch.command) {
            (Some(url), _) => url_name(&parse_url(url).ok()?),
            (None, Some(command)) => derive_name(command, &self.launch.args),
            (None, None) => return None,
        };
        Some(self.name.clone().unwrap_or(derived))
    }
}

/// A readable server name from a command line: `npx -y @scope/server-x dir` -> `server-x`,
/// `node node_modules/@scope/server-y/dist/index.js` -> `server-y`.
pub fn derive_name(command: &str, args: &[String]) -> String {
    // Path parts that say nothing about which server it is.
    const GENERIC: &[&str] = &["index", "main", "cli", "server", "dist", "build", "lib", "src", "bin", "out"];
    // The last part of a path, Unix or Windows, without a Windows program's extension.
    let base = |s: &str| {
        let s = s.trim_end_matches(['/', '\\']);
        let name = s.rsplit(['/', '\\']).next().unwrap_or(s);
        let lower = name.to_ascii_lowercase();
        match [".exe", ".cmd", ".bat"].iter().find(|ext| lower.ends_with(*ext)) {
            Some(ext) => name[..name.len() - ext.len()].to_string(),
            None => name.to_string(),
        }
    };
    let cmd = base(command);
    let launchers = ["npx", "node", "uvx", "uv", "python", "python3", "deno", "bunx", "bun", "pipx"];
    if !launchers.contains(&cmd.as_str()) {
        return cmd;
    }
    let Some(arg) = args.iter().find(|a| !a.starts_with('-') && *a != "run" && *a != "exec") else {
        return cmd;
    };
    let strip = |p: &str| {
        let p = p.split('@').find(|p| !p.is_empty()).unwrap_or(p).to_string();
        p.trim_end_matches(".js").trim_end_matches(".mjs").trim_end_matches(".py").to_string()
    };
    // The last path part that names something: a file, else the package directory above it.
    let parts: Vec<String> = arg.trim_end_matches(['/', '\\']).split(['/', '\\']).map(strip).collect();
    parts
        .iter()
        .rev()
        .find(|p| !p.is_empty() && !GENERIC.contains(&p.as_str()))
        .cloned()
        .unwrap_or_else(|| strip(&base(arg)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use crate::test_support::load_text;

    #[test]
    fn names_come_from_the_package_not_the_launcher() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            derive_name("npx", &a(&["-y", "@modelcontextprotocol/server-filesystem", "/w"])),
            "server-filesystem"
        );
        assert_eq!(derive_name("/usr/bin/node", &a(&["dist/index.js", "stdio"])), "index");
        let nm = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";
        assert_eq!(derive_name("node", &a(&[nm, "stdio"])), "server-everything");
        assert_eq!(derive_name("python3", &a(&["-m", "weather_server.py"])), "weather_server");
        assert_eq!(derive_name("uvx", &a(&["mcp-server-git@1.2"])), "mcp-server-git");
        assert_eq!(derive_name("/opt/bin/my-server", &a(&["--port", "3"])), "my-server");
        // Windows: backslashes, drive letters and program extensions.
        assert_eq!(derive_name(r"C:\Tools\weather.EXE", &a(&[])), "weather");
        assert_eq!(
            derive_name(r"C:\Program Files\nodejs\npx.cmd", &a(&["-y", "@modelcontextprotocol/server-memory"])),
            "server-memory"
        );
        assert_eq!(derive_name("node", &a(&[r"C:\srv\server-git\dist\index.js"])), "server-git");
    }

    #[test]
    fn an_empty_command_is_an_error_naming_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "[servers.gamma]\ncommand = \"\"\n").unwrap();
        let e = format!("{:#}", Config::load(&path).unwrap_err());
        assert!(e.contains("`command` is empty") && e.contains("line 2") && e.contains("gamma"), "{e}");
    }

    #[test]
    fn both_command_and_url_is_an_error_naming_the_file_and_line() {
        let (dir, c) = load_text("[server]\ncommand = \"npx\"\n\nurl = \"https://mcp.example.com/mcp\"\n");
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml");
        assert!(e.contains(&format!("config file {}, line 4", file.display())), "{e}");
        assert!(e.contains("both `command` and `url`"), "{e}");
        // Neither in the file is fine: the command line may give one.
        let (_d, c) = load_text("[limits]\ncall_timeout_ms = 1000\n");
        c.unwrap();
    }

    #[test]
    fn command_keys_with_a_url_and_url_keys_with_a_command_are_errors() {
        for (extra, key, line) in
            [("args = [\"-y\"]", "args", 3), ("env = { A = \"1\" }", "env", 3), ("cwd = \"/tmp\"", "cwd", 3)]
        {
            let (_d, c) = load_text(&format!("[server]\nurl = \"https://h/mcp\"\n{extra}\n"));
            let e = format!("{:#}", c.unwrap_err());
            assert!(e.contains(&format!("line {line}: [server] `{key}` applies to commands only")), "{e}");
        }
        for (extra, key) in [("transport = \"sse\"", "transport"), ("headers = { A = \"b\" }", "headers")] {
            let (_d, c) = load_text(&format!("[server]\ncommand = \"npx\"\n{extra}\n"));
            let e = format!("{:#}", c.unwrap_err());
            assert!(e.contains(&format!("line 3: [server] `{key}` applies to a remote server")), "{e}");
        }
    }

    #[test]
    fn server_names_follow_the_rule_and_a_bad_one_names_the_file_line_and_rule() {
        for good in ["fs", "a.b-c_d", "_x", "9", &"x".repeat(64)] {
            assert!(check_server_name(good).is_ok(), "{good}");
        }
        for (bad, says) in [
            ("", "is empty"),
            ("my server", "a space"),
            ("a/b", "`/`"),
            ("é", "`é`"),
            ("a\u{1}", "a control character"),
            (&"x".repeat(65), "65 bytes long"),
            ("-x", "starts with `-`"),
            ("..", "starts with `.`"),
        ] {
            let e = check_server_name(bad).unwrap_err();
            assert!(e.contains(says) && e.contains("1 to 64 ASCII letters, digits"), "{bad:?}: {e}");
        }
        let (dir, c) = load_text("[servers.ok]\ncommand = \"x\"\n\n[servers.\"my fs\"]\ncommand = \"y\"\n");
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml");
        assert!(
            e.starts_with(&format!("config file {}, line 4: the server name `my fs` has a space", file.display())),
            "{e}"
        );
        // A name that only a sub-table opens is found at that line.
        let (_d, c) = load_text("[servers.\"a/b\".pools.default]\nmax = 1\n");
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("line 1: the server name `a/b` has `/`"), "{e}");
        let mut c = Config::default();
        c.servers.insert("".into(), ServerEntry::default());
        assert!(c.validate().unwrap_err().to_string().contains("the server name `` is empty"));
    }

    #[test]
    fn refusals_are_results_unless_the_entry_asks_for_errors_and_a_bad_value_is_named_at_its_line() {
        let (_d, c) = load_text(
            "[servers.fs]\ncommand = \"x\"\n[[plugins]]\nfile = \"a.wasm\"\n[[plugins]]\nfile = \"b.wasm\"\nrefusals = \"error\"\n",
        );
        let c = c.unwrap();
        assert_eq!((c.plugins[0].refusals, c.plugins[1].refusals), (Refusals::Result, Refusals::Error));
        assert_eq!(PluginEntry::defaults_for("c.wasm").refusals, Refusals::Result);
        let (dir, c) = load_text("[[plugins]]\nfile = \"a.wasm\"\nrefusals = \"errors\"\n");
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml");
        assert!(e.starts_with(&format!("config file {}, line 3, column 12: ", file.display())), "{e}");
        assert!(e.contains("`refusals = \"errors\"`") && e.contains("\"result\"") && e.contains("\"error\""), "{e}");
    }

    #[test]
    fn client_env_is_checked_where_it_is_written() {
        for (text, says) in [
            (
                "[servers.a]\ncommand = \"x\"\nclient_env = [\"OK\", \"9bad\"]\n",
                "server `a` (config file {F}, line 3): `client_env` has \"9bad\", which is not a variable name",
            ),
            ("[servers.a]\ncommand = \"x\"\nclient_env = [\"A\", \"A\"]\n", "line 3): `client_env` names `A` twice"),
            ("[server]\ncommand = \"x\"\nclient_env = [\"A\"]\n", "line 3: [server] `client_env` takes values"),
        ] {
            let (dir, loaded) = load_text(text);
            let e = format!("{:#}", loaded.unwrap_err());
            let says = says.replace("{F}", &dir.path().join("switchyard.toml").display().to_string());
            assert!(e.contains(&says), "{text:?}: {e}");
        }
    }
}
