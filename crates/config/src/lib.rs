//! `switchyard.toml`: the servers (each a command or a URL), pools, limits, the plugin list and
//! the daemon's settings.

#![forbid(unsafe_code)]

mod audit;
mod budgets;
mod group;
mod http;
mod launch;
mod limits;
mod oauth;
pub mod paths;
mod server;
mod spans;
mod telemetry;
mod tolerant;
mod url;
mod vars;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use serde::Deserialize;

pub use self::audit::AuditConfig;
pub use self::budgets::{BudgetConfig, Expose};
pub use self::group::{ALL as ALL_GROUP, DEFAULT_SEPARATOR, Group, GroupConfig, Member, resolve_groups};
pub use self::http::{
    DEFAULT_HTTP_LISTEN, HostName, HttpConfig, WebOrigin, is_bearer_token, parse_authority, parse_listen,
};
pub use self::launch::{Launch, Share};
pub use self::limits::{Limits, LimitsPatch};
pub use self::oauth::{DEFAULT_LOGIN_TIMEOUT_MS, OAuthConfig};
pub use self::server::{
    Affinity, ClientValues, DaemonConfig, Fail, HookMode, MAX_SERVER_NAME, OnError, PAYLOAD_MEMORY_FACTOR, PluginEntry,
    PoolConfig, Refusals, ServerConfig, ServerEntry, TransportKind, check_server_name, derive_name,
};
pub use self::spans::line_col;
pub use self::telemetry::{TelemetryConfig, TelemetryTarget};
pub use self::tolerant::{BrokenPlugin, ReadFor, Tolerated, toml_headers};
pub use self::url::{display_url, is_loopback, parse_url, url_name};
pub use self::vars::{
    Expanded, HeaderValue, Source, about_header, check_header, check_header_name, expand, is_var_name, uses_vars,
};
use crate::server::check_pools;
use crate::spans::{FileSpans, ServerSpans, file_place, line_of, parse_error};
use crate::vars::{Piece, forbidden, pieces, substitute, uses_client_env};

/// The whole configuration file. Every section is optional.
///
/// A file names its server in one of two forms: one `[server]` (what `switchyard run` fronts),
/// or `[servers.NAME]` tables, one per server (what the daemon fronts). [`Config::servers`]
/// gives either as single-server configs.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    /// `[servers.NAME]`: the servers by name (empty in the `[server]` form).
    #[serde(default)]
    pub servers: BTreeMap<String, ServerEntry>,
    /// With `[servers]`: the defaults for every server, which its own `limits` override key by key.
    #[serde(default)]
    pub limits: Limits,
    /// Named pools of server instances; `default` always exists. With `[servers]`: the pools of
    /// every server, where a server's own pool of the same name replaces one as a whole.
    #[serde(default)]
    pub pools: BTreeMap<String, PoolConfig>,
    #[serde(default)]
    pub plugins: Vec<PluginEntry>,
    #[serde(default)]
    pub daemon: DaemonConfig,
    /// `[audit]`: the audit log of calls (on by default; read at start, see docs/audit.md).
    #[serde(default)]
    pub audit: AuditConfig,
    /// `[http]`: the daemon's Streamable HTTP front; None when the file has no such table.
    #[serde(default)]
    pub http: Option<HttpConfig>,
    /// `[telemetry]`: where traces go (read at start, see docs/telemetry.md).
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// `[budgets.KIND]`: a kind of client's limits on the tool list it is given, over those
    /// built in, and whether it is given a search instead (docs/budgets.md).
    #[serde(default)]
    pub budgets: BTreeMap<String, BudgetConfig>,
    /// `[groups.NAME]`: servers reached as one (see [`Config::groups`]).
    #[serde(default)]
    pub groups: BTreeMap<String, GroupConfig>,
    /// Directory of the config file, for resolving relative paths (not read from the file).
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read config file {}", path.display()))?;
        Config::load_text(path, &text)
    }

    /// [`Config::load`] of a file already read: `text` is its content, and `path` names it in
    /// errors and gives the directory that relative paths in it start from.
    pub fn load_text(path: &Path, text: &str) -> anyhow::Result<Config> {
        Config::load_known(path, text, &[])
    }

    /// [`Config::load_text`] of a file from which parts were taken out: `[[plugins]]` entries
    /// may name the servers in `also_known` too.
    fn load_known(path: &Path, text: &str, also_known: &[String]) -> anyhow::Result<Config> {
        let mut config: Config = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;
        // The same text again, only for where the server keys are (it parsed above, so this does too).
        let spans: FileSpans = toml::from_str(text).unwrap_or_default();
        let place = |offset: Option<usize>| file_place(path, offset.map(|o| line_of(text, o)));
        let no_keys = ServerSpans::default();
        let server_keys = spans.server.as_ref().map_or(&no_keys, |s| s.get_ref());
        if !config.servers.is_empty() && !config.server.is_unset() {
            let line = |offset: Option<usize>| offset.map_or("?".to_string(), |o| line_of(text, o).to_string());
            bail!(
                "config file {}: both [server] (line {}) and [servers] (line {}) are given: a file names its one server in [server], or its servers in [servers.NAME] tables; move the [server] keys into a [servers.NAME] table",
                path.display(),
                line(spans.server.as_ref().map(|s| s.span().start)),
                line(spans.servers.as_ref().map(|s| s.span().start)),
            );
        }
        for (name, value) in config.server.launch.headers.iter_mut() {
            let at = server_keys.headers.as_ref().and_then(|h| h.get(name));
            let line = at.map(|s| line_of(text, s.span().start));
            value.source = Source::File { path: path.to_path_buf(), line };
        }
        config.server.check(&|key| place(server_keys.offset(key)))?;
        let base_dir =
            path.parent().map(|p| if p.as_os_str().is_empty() { PathBuf::from(".") } else { p.to_path_buf() });
        config.base_dir = base_dir.clone();
        if let (Some(file), Some(base)) = (config.audit.path.as_mut(), &base_dir)
            && file.is_relative()
        {
            *file = base.join(&*file);
        }
        // A relative working directory is the config file's, like every other path in it.
        let resolve = |cwd: &mut Option<PathBuf>| {
            if let (Some(dir), Some(base)) = (cwd.as_ref(), &base_dir)
                && dir.is_relative()
            {
                *cwd = Some(base.join(dir));
            }
        };
        resolve(&mut config.server.launch.cwd);
        // A working directory with a client's value in it is resolved once the value is known.
        let resolve_entry = |cwd: &mut Option<PathBuf>, names: &[String]| {
            if !cwd.as_ref().and_then(|c| c.to_str()).is_some_and(|c| uses_client_env(c, names)) {
                resolve(cwd);
            }
        };
        // Where each entry starts: its table header, or its name.
        let entry_at = |name: &str| {
            let entry = spans.servers.as_ref().and_then(|s| s.get_ref().get(name));
            (entry.map(|e| e.span().start), entry.map(|e| e.get_ref()))
        };
        for (name, entry) in config.servers.iter_mut() {
            let (start, keys) = entry_at(name);
            check_server_name(name)
                .map_err(|e| anyhow!("{}: the server name `{}` {e}", place(start), name.escape_debug()))?;
            for (header, value) in entry.launch.headers.iter_mut() {
                let at = keys.and_then(|k| k.headers.as_ref()).and_then(|h| h.get(header));
                let line = at.map(|s| line_of(text, s.span().start));
                value.source = Source::File { path: path.to_path_buf(), line };
            }
            let at = |key: &str| format!("server `{name}` ({})", place(keys.and_then(|k| k.offset(key)).or(start)));
            entry.server(name).check_as(Some(name), &at)?;
            resolve_entry(&mut entry.launch.cwd, &entry.launch.client_env);
        }
        if let Some(http) = config.http.as_mut() {
            let keys = spans.http.as_ref();
            let at = |key: &str| {
                let key_at = keys.and_then(|k| k.get_ref().get(key)).map(|k| k.span().start);
                place(key_at.or(keys.map(|k| k.span().start)))
            };
            if let Some(token) = http.token.as_mut() {
                token.source = Source::File {
                    path: path.to_path_buf(),
                    line: keys.and_then(|k| k.get_ref().get("token")).map(|s| line_of(text, s.span().start)),
                };
            }
            let named = spans::token_lines(text);
            for (name, token) in http.tokens.iter_mut() {
                token.source = Source::File { path: path.to_path_buf(), line: named.get(name).copied() };
            }
            http.check(&at)?;
        }
        // Two entries for one file: which one applies would be a guess.
        for (n, entry) in config.plugins.iter().enumerate() {
            if let Some(first) = config.plugins[..n].iter().position(|e| e.file == entry.file) {
                let at = |i: usize| place(spans.plugins.get(i).and_then(|k| k.get("file")).map(|s| s.span().start));
                bail!(
                    "{}: a second [[plugins]] entry for {:?} (the first is at {}); give each plugin file one entry",
                    at(n),
                    entry.file,
                    at(first)
                );
            }
        }
        // Where each entry's config is, for its error (validate_defaults checks it again, without).
        for (n, entry) in config.plugins.iter().enumerate() {
            let at = spans.plugins.get(n).and_then(|k| k.get("config").or_else(|| k.get("file")));
            entry.config_json().map_err(|e| anyhow!("{}: {e:#}", place(at.map(|s| s.span().start))))?;
        }
        // A file that names no server (its server comes from the command line) is not checked.
        let mut known = config.server_names();
        known.extend(also_known.iter().filter(|n| !known.contains(n)).cloned().collect::<Vec<_>>());
        for (n, entry) in config.plugins.iter().enumerate().filter(|_| !known.is_empty()) {
            let at = spans.plugins.get(n).and_then(|k| k.get("servers").or_else(|| k.get("file")));
            entry.check_servers(&known).map_err(|e| anyhow!("{}: {e}", place(at.map(|s| s.span().start))))?;
        }
        if let Some((n, entry)) = config.plugins.iter().enumerate().find(|(_, e)| e.max_payload_kib == 0) {
            let at = spans.plugins.get(n).and_then(|k| k.get("max_payload_kib"));
            bail!(
                "{}: plugin {}: `max_payload_kib = 0` hands its content hooks nothing; give the largest params or result it may read, in KiB (default 4096)",
                place(at.map(|s| s.span().start)),
                entry.file
            );
        }
        config.validate_defaults().map_err(|e| anyhow!("config file {}: {e:#}", path.display()))?;
        if !config.groups.is_empty() {
            group::resolve_groups_keyed(&config.groups, &known).map_err(|(name, f)| {
                anyhow!("{}: {}", file_place(path, spans::group_key_line(text, &name, &f.key)), f.message)
            })?;
        }
        config.validate_servers(&|name| format!("server `{name}` ({})", place(entry_at(name).0)))?;
        Ok(config)
    }

    /// The names of the file's servers: its `[servers.NAME]`, or its one `[server]`'s name.
    pub fn server_names(&self) -> Vec<String> {
        if self.servers.is_empty() {
            return self.server.derived_name().into_iter().collect();
        }
        self.servers.keys().cloned().collect()
    }

    /// The groups clients may connect to: each `[groups.NAME]`, and the implicit group of every
    /// server ([`ALL_GROUP`]), checked against the file's servers.
    pub fn groups(&self) -> Result<BTreeMap<String, Group>, String> {
        resolve_groups(&self.groups, &self.server_names())
    }

    /// Fills in the `default` pool and checks values that would make the router misbehave,
    /// those of every server's own pools and limits included.
    pub fn validate(&mut self) -> anyhow::Result<()> {
        self.validate_defaults()?;
        self.validate_servers(&|name| format!("server `{name}`"))
    }

    /// The file's own pools, limits and plugins.
    fn validate_defaults(&mut self) -> anyhow::Result<()> {
        self.pools.entry("default".to_string()).or_default();
        check_pools(&self.pools)?;
        self.limits.check()?;
        self.audit.check()?;
        for p in &self.plugins {
            p.config_json()?;
            if p.deadline_ms == 0 || p.memory_mib == 0 {
                bail!("plugin {}: deadline_ms and memory_mib must be above 0", p.file);
            }
            if p.max_payload_kib == 0 {
                bail!(
                    "plugin {}: `max_payload_kib = 0` hands its content hooks nothing; give the largest params or result it may read, in KiB (default 4096)",
                    p.file
                );
            }
        }
        Ok(())
    }

    /// Each `[servers.NAME]`: its name, and its pools and limits merged over the file's.
    /// `at(name)` names the server (and where it is) in errors.
    fn validate_servers(&self, at: &dyn Fn(&str) -> String) -> anyhow::Result<()> {
        for (name, entry) in &self.servers {
            check_server_name(name)
                .map_err(|e| anyhow!("{}: the server name `{}` {e}", at(name), name.escape_debug()))?;
            let one = self.entry_config(name, entry);
            check_pools(&one.pools).and_then(|()| one.limits.check()).map_err(|e| anyhow!("{}: {e}", at(name)))?;
        }
        Ok(())
    }

    /// Every server as a config of its own, by name, each ready to run as a file of its own would: its
    /// `server` named, its pools and limits merged over the file's (the `default` pool filled in),
    /// and the file's plugins, daemon settings and directory. In the `[server]` form, that one
    /// server under the name `target` gives it; none when it has neither a command nor a URL.
    ///
    /// The merged settings are checked by [`Config::validate`] (and so by [`Config::load`]);
    /// call this on a config that passed it.
    pub fn servers(&self) -> BTreeMap<String, Config> {
        if self.servers.is_empty() {
            let Some(name) = self.server.derived_name() else { return BTreeMap::new() };
            let mut one = self.clone();
            one.server.name = Some(name.clone());
            one.pools.entry("default".to_string()).or_default();
            return BTreeMap::from([(name, one)]);
        }
        self.servers.iter().map(|(name, entry)| (name.clone(), self.entry_config(name, entry))).collect()
    }

    /// The `[servers.NAME]` entry `entry` as a single-server config.
    fn entry_config(&self, name: &str, entry: &ServerEntry) -> Config {
        let mut pools = self.pools.clone();
        // A server's own pool replaces the file's pool of that name as a whole.
        pools.extend(entry.pools.iter().map(|(k, v)| (k.clone(), v.clone())));
        pools.entry("default".to_string()).or_default();
        Config {
            server: entry.server(name),
            servers: BTreeMap::new(),
            limits: entry.limits.over(&self.limits),
            pools,
            plugins: self.plugins.clone(),
            daemon: self.daemon.clone(),
            audit: self.audit.clone(),
            http: self.http.clone(),
            telemetry: self.telemetry.clone(),
            budgets: self.budgets.clone(),
            groups: BTreeMap::new(),
            base_dir: self.base_dir.clone(),
        }
    }

    /// The server of this single-server config (one of [`Config::servers`]) as a client that
    /// supplied `values` gets it: each `${NAME}` of a name in its `client_env` replaced by the
    /// client's value in `command`, `args`, `env` values, `cwd` and `url`, and read from
    /// `values` before the environment in header values (see [`ServerConfig::client_values`]).
    /// Values of other names are ignored. The error names the server and what is wrong, never
    /// a value.
    pub fn for_client(&self, values: &BTreeMap<String, String>) -> anyhow::Result<Config> {
        let s = &self.server;
        let name = s.name.as_deref().unwrap_or("?");
        let missing: Vec<&str> =
            s.launch.client_env.iter().filter(|n| !values.contains_key(*n)).map(String::as_str).collect();
        if !missing.is_empty() {
            bail!(
                "server `{name}` takes {} from the client that connects, which did not send {}: connect with `switchyard connect {name} --env {}`, with {} set in its environment (in an MCP client's config, its `env`)",
                s.launch.client_env.join(", "),
                missing.join(", "),
                s.launch.client_env.join(","),
                s.launch.client_env.join(" and ")
            );
        }
        let mine: BTreeMap<String, String> =
            s.launch.client_env.iter().map(|n| (n.clone(), values[n].clone())).collect();
        for (header, value) in &s.launch.headers {
            for piece in pieces(&value.raw)
                .map_err(|e| anyhow!("server `{name}`: {} {e}", about_header(header, &value.source)))?
            {
                if let Piece::Var(var) = piece
                    && let Some(what) = mine.get(var).and_then(|v| forbidden(v))
                {
                    bail!(
                        "server `{name}`: {} uses ${{{var}}}, whose value from the client has {what}, which a header cannot carry",
                        about_header(header, &value.source)
                    );
                }
            }
        }
        let sub = |t: &str| substitute(t, &mine);
        let mut one = self.clone();
        let o = &mut one.server;
        o.launch.command = s.launch.command.as_deref().map(sub);
        o.launch.args = s.launch.args.iter().map(|a| sub(a)).collect();
        o.launch.env = s.launch.env.iter().map(|(k, v)| (k.clone(), sub(v))).collect();
        o.launch.url = s.launch.url.as_deref().map(sub);
        if let Some(cwd) =
            s.launch.cwd.as_ref().and_then(|c| c.to_str()).filter(|c| uses_client_env(c, &s.launch.client_env))
        {
            let dir = PathBuf::from(sub(cwd));
            o.launch.cwd = Some(match &self.base_dir {
                Some(base) if dir.is_relative() => base.join(dir),
                _ => dir,
            });
        }
        if let Some(url) = &o.launch.url {
            parse_url(url).map_err(|e| anyhow!("server `{name}`: its url, with the client's values in it, {e}"))?;
        }
        o.launch.client_env.clear();
        o.client_values = ClientValues(mine);
        Ok(one)
    }

    /// An error when this single-server config is a template (has `client_env`): only the
    /// daemon serves one, a server per client's values (`switchyard run` has no such client).
    pub fn refuse_client_env(&self) -> anyhow::Result<()> {
        let s = &self.server;
        if s.launch.client_env.is_empty() {
            return Ok(());
        }
        let name = s.name.as_deref().unwrap_or("?");
        bail!(
            "server `{name}` has `client_env` ({}): it takes values from the client that connects, so only the daemon serves it, through `switchyard connect {name} --env {}`; `switchyard run` has no such client",
            s.launch.client_env.join(", "),
            s.launch.client_env.join(",")
        )
    }

    /// Warnings for pools no call can reach: every call goes to `default` unless a policy plugin
    /// routes it elsewhere, so another pool with no plugin in force is dead weight (its `min`
    /// instances still start), and usually a misspelt `[pools.default]`.
    pub fn unreachable_pools(&self, plugins: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for name in self.pools.keys().filter(|n| *n != "default") {
            let hint =
                if strsim::damerau_levenshtein(name, "default") <= 2 { " (did you mean [pools.default]?)" } else { "" };
            let what = format!(
                "pool `{name}` is configured{hint}, but calls reach a pool other than `default` only when a policy plugin routes them there"
            );
            out.push(if plugins.is_empty() {
                format!("{what}, and no plugin is loaded: no call can reach it")
            } else {
                format!("{what}; make sure one of [{}] does", plugins.join(", "))
            });
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// Writes `text` as a config file in a fresh directory and loads it.
    pub(crate) fn load_text(text: &str) -> (tempfile::TempDir, anyhow::Result<Config>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchyard.toml");
        std::fs::write(&path, text).unwrap();
        let loaded = Config::load(&path);
        (dir, loaded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::load_text;

    #[test]
    fn full_file_parses_with_inline_and_string_plugin_config() {
        let mut c: Config = toml::from_str(
            r#"
            [server]
            command = "npx"
            args = ["-y", "x"]
            [limits]
            call_timeout_ms = 1000
            [pools.slow]
            max = 4
            max_inflight = 1
            affinity = "session"
            [[plugins]]
            file = "hints.wasm"
            priority = 10
            on_error = "closed"
            config = { tools = { "read_*" = { readOnlyHint = true } } }
            [[plugins]]
            file = "guard.wasm"
            config = '{"deny": ["rm*"]}'
            "#,
        )
        .unwrap();
        c.validate().unwrap();
        assert!(c.pools.contains_key("default"));
        assert_eq!(c.pools["slow"].affinity, Affinity::Session);
        assert_eq!(c.plugins[0].on_error, OnError::Closed);
        let v: serde_json::Value = serde_json::from_str(&c.plugins[0].config_json().unwrap()).unwrap();
        assert_eq!(v["tools"]["read_*"]["readOnlyHint"], true);
        assert_eq!(c.plugins[1].config_json().unwrap(), r#"{"deny": ["rm*"]}"#);
        assert_eq!(c.plugins[1].deadline_ms, 5);
    }

    #[test]
    fn a_plugin_entry_scoped_to_servers_keeps_their_names() {
        let (_dir, c) = load_text(
            "[servers.fs]\ncommand = \"fs-server\"\n[servers.github]\ncommand = \"gh-server\"\n\
             [[plugins]]\nfile = \"hints.wasm\"\nservers = [\"fs\"]\n[[plugins]]\nfile = \"guard.wasm\"\n",
        );
        let c = c.unwrap();
        assert_eq!(c.plugins[0].servers.as_deref(), Some(&["fs".to_string()][..]));
        assert_eq!(c.plugins[1].servers, None, "no `servers`: every server");
    }

    #[test]
    fn a_plugin_scoped_to_an_unknown_server_is_refused_with_the_file_line_and_the_known_ones() {
        let (dir, c) = load_text(
            "[servers.fs]\ncommand = \"fs-server\"\n[servers.github]\ncommand = \"gh-server\"\n\
             [[plugins]]\nfile = \"hints.wasm\"\nservers = [\"fs\", \"gihtub\"]\n",
        );
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml");
        assert!(e.contains(&format!("config file {}, line 7", file.display())), "{e}");
        assert!(e.contains("plugin hints.wasm") && e.contains("`gihtub`"), "{e}");
        assert!(e.contains("its servers: fs, github"), "{e}");
        let (_dir, c) =
            load_text("[servers.fs]\ncommand = \"fs-server\"\n[[plugins]]\nfile = \"hints.wasm\"\nservers = []\n");
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("line 5") && e.contains("`servers = []`"), "{e}");
    }

    #[test]
    fn a_second_entry_for_one_plugin_file_is_refused_naming_both_lines() {
        let (dir, c) = load_text(
            "[servers.fs]\ncommand = \"fs-server\"\n[[plugins]]\nfile = \"hints.wasm\"\nservers = [\"fs\"]\n\
             [[plugins]]\nfile = \"hints.wasm\"\npriority = 3\n",
        );
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml").display().to_string();
        assert!(
            e.starts_with(&format!("config file {file}, line 7: a second [[plugins]] entry for \"hints.wasm\"")),
            "{e}"
        );
        assert!(e.contains(&format!("the first is at config file {file}, line 4")), "{e}");
    }

    #[test]
    fn content_hook_mode_fail_and_payload_are_read_and_bad_ones_named_with_their_line() {
        let (_dir, c) = load_text(
            "[server]\ncommand = \"x\"\n[[plugins]]\nfile = \"a.wasm\"\nmode = \"audit\"\nfail = \"closed\"\nmax_payload_kib = 64\n\
             [[plugins]]\nfile = \"b.wasm\"\non_error = \"closed\"\n",
        );
        let c = c.unwrap();
        assert_eq!((c.plugins[0].mode, c.plugins[0].fails()), (HookMode::Audit, Fail::Closed));
        assert_eq!(c.plugins[0].max_payload_bytes(), 64 * 1024);
        // No `fail`: as on_error says; no mode: enforced; 4 MiB, and the memory for it.
        assert_eq!((c.plugins[1].mode, c.plugins[1].fails()), (HookMode::Enforce, Fail::Closed));
        assert_eq!(c.plugins[1].max_payload_bytes(), 4096 * 1024);
        assert_eq!((c.plugins[1].memory_mib, c.plugins[1].memory_limit_mib()), (16, 16 + 32));
        // A small payload limit adds little to memory_mib.
        assert_eq!(c.plugins[0].memory_limit_mib(), 16 + 1);
        for (text, line, words) in [
            ("mode = \"audt\"", 5, "`mode = \"audt\"` is not a mode"),
            ("fail = \"shut\"", 5, "`fail = \"shut\"` is not a way to fail"),
            ("max_payload_kib = 0", 5, "`max_payload_kib = 0` hands its content hooks nothing"),
        ] {
            let (dir, c) = load_text(&format!("[server]\ncommand = \"x\"\n[[plugins]]\nfile = \"a.wasm\"\n{text}\n"));
            let e = format!("{:#}", c.unwrap_err());
            let file = dir.path().join("switchyard.toml").display().to_string();
            assert!(e.contains(&file) && e.contains(&format!("line {line}")) && e.contains(words), "{text}: {e}");
        }
    }

    #[test]
    fn in_the_one_server_form_servers_names_that_server() {
        let (_dir, c) =
            load_text("[server]\nname = \"fs\"\ncommand = \"x\"\n[[plugins]]\nfile = \"a.wasm\"\nservers = [\"fs\"]\n");
        c.unwrap();
        let (_dir, c) =
            load_text("[server]\nname = \"fs\"\ncommand = \"x\"\n[[plugins]]\nfile = \"a.wasm\"\nservers = [\"gh\"]\n");
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("line 6") && e.contains("its servers: fs"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let mut c: Config = toml::from_str("[pools.p]\nmin = 3\nmax = 2\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("pool `p`") && e.contains("min (3)"), "{e}");
        let mut c: Config = toml::from_str("[[plugins]]\nfile = \"a.wasm\"\nconfig = \"{nope\"\n").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("a.wasm"));
        assert!(toml::from_str::<Config>("[limits]\ncall_timeout = 3\n").is_err());
    }

    #[test]
    fn every_table_refuses_unknown_keys_with_the_key_named() {
        for (text, key) in [
            ("bogus = 1\n", "bogus"),
            ("[server]\ncomand = \"x\"\n", "comand"),
            ("[limits]\ncall_timeout = 3\n", "call_timeout"),
            ("[pools.default]\nmxa = 3\n", "mxa"),
            ("[[plugins]]\nfile = \"a.wasm\"\npriorty = 1\n", "priorty"),
        ] {
            let e = toml::from_str::<Config>(text).unwrap_err().to_string();
            assert!(e.contains(&format!("unknown field `{key}`")), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_url_server_parses_with_transport_headers_and_the_new_limits() {
        let (dir, c) = load_text(
            "[server]\nurl = \"https://mcp.example.com/mcp\"\ntransport = \"streamable-http\"\n\
             headers = { Authorization = \"Bearer ${MCP_TOKEN}\", X-Team = \"core\" }\n\
             [limits]\nconnect_timeout_ms = 2500\n",
        );
        let c = c.unwrap();
        assert_eq!(c.server.launch.url.as_deref(), Some("https://mcp.example.com/mcp"));
        assert_eq!(c.server.launch.transport, Some(TransportKind::StreamableHttp));
        assert_eq!(c.server.launch.headers["Authorization"].raw, "Bearer ${MCP_TOKEN}");
        let path = dir.path().join("switchyard.toml");
        assert_eq!(c.server.launch.headers["X-Team"].source, Source::File { path, line: Some(4) });
        assert_eq!((c.limits.connect_timeout_ms, c.limits.post_timeout_ms), (2500, 10_000));
        for t in ["auto", "sse"] {
            let c: Config = toml::from_str(&format!("[server]\nurl = \"http://h/\"\ntransport = \"{t}\"\n")).unwrap();
            assert!(c.server.launch.transport.is_some());
        }
        let e = toml::from_str::<Config>("[server]\ntransport = \"websocket\"\n").unwrap_err().to_string();
        assert!(e.contains("streamable-http"), "{e}");
        let mut c = Config::default();
        c.limits.post_timeout_ms = 0;
        assert!(c.validate().unwrap_err().to_string().contains("post_timeout_ms"));
    }

    #[test]
    fn a_misspelt_default_pool_is_a_warning_that_names_it_and_the_plugins() {
        let mut c: Config = toml::from_str("[pools.defualt]\nmax = 4\n[pools.slow]\nmax = 2\n").unwrap();
        c.validate().unwrap();
        let w = c.unreachable_pools(&[]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("`defualt`") && w[0].contains("did you mean [pools.default]"), "{w:?}");
        assert!(w[0].contains("no plugin is loaded"), "{w:?}");
        assert!(!w[1].contains("did you mean"), "{w:?}");
        let w = c.unreachable_pools(&["timeouts.wasm".to_string()]);
        assert!(w[1].contains("`slow`") && w[1].contains("[timeouts.wasm]"), "{w:?}");
        let mut c = Config::default();
        c.validate().unwrap();
        assert!(c.unreachable_pools(&[]).is_empty());
    }

    /// The example of DAEMON-SPEC.md, trimmed: two servers over the file's limits and pools.
    const TWO_SERVERS: &str = r#"[daemon]
idle_exit_ms = 60000

[limits]
call_timeout_ms = 60000
connect_timeout_ms = 2000
[pools.default]
max = 2
min = 0
[pools.slow]
max = 3
max_inflight = 1

[servers.filesystem]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/work"]
env = { A = "b" }
cwd = "work"
[servers.filesystem.pools.default]
max = 4
[servers.filesystem.limits]
call_timeout_ms = 5000

[servers.tracker]
url = "https://mcp.example.com/mcp"
transport = "streamable-http"
headers = { Authorization = "Bearer ${TRACKER_TOKEN}" }

[[plugins]]
file = "hints.wasm"
"#;

    #[test]
    fn each_server_gets_the_file_s_limits_under_its_own_and_its_own_pools_in_place_of_the_file_s() {
        let (dir, c) = load_text(TWO_SERVERS);
        let c = c.unwrap();
        assert_eq!(c.daemon, DaemonConfig { idle_exit_ms: 60_000 });
        let all = c.servers();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["filesystem", "tracker"]);
        let fs = &all["filesystem"];
        // Key by key: its own call timeout, the file's connect timeout, the built-in rest.
        assert_eq!((fs.limits.call_timeout_ms, fs.limits.connect_timeout_ms), (5000, 2000));
        assert_eq!(fs.limits.max_retries, Limits::default().max_retries);
        // As a whole: its `default` pool is its own (min back to the built-in 1), `slow` is the file's.
        assert_eq!((fs.pools["default"].max, fs.pools["default"].min), (4, 1));
        assert_eq!(fs.pools["slow"].max_inflight, 1);
        assert_eq!(fs.server.name.as_deref(), Some("filesystem"));
        assert_eq!(fs.server.launch.cwd.as_deref(), Some(dir.path().join("work").as_path()));
        let tracker = &all["tracker"];
        assert_eq!(
            (tracker.limits.call_timeout_ms, tracker.pools["default"].max, tracker.pools["default"].min),
            (60000, 2, 0)
        );
        for one in all.values() {
            assert!(one.servers.is_empty());
            assert_eq!(one.plugins.len(), 1);
            assert_eq!(one.daemon.idle_exit_ms, 60_000);
            assert_eq!(one.base_dir.as_deref(), Some(dir.path()));
            one.clone().validate().unwrap();
        }
    }

    #[test]
    fn a_server_without_pools_gets_the_default_pool_and_the_daemon_exits_after_half_an_hour_idle() {
        let (_d, c) = load_text("[servers.a]\ncommand = \"x\"\n");
        let c = c.unwrap();
        assert_eq!(c.daemon.idle_exit_ms, 1_800_000);
        let a = &c.servers()["a"];
        assert_eq!(a.pools.keys().collect::<Vec<_>>(), ["default"]);
        assert_eq!(a.limits.call_timeout_ms, Limits::default().call_timeout_ms);
        // Built in code, unvalidated: `servers` still fills in `default`.
        let mut c = Config::default();
        let launch = Launch { command: Some("y".into()), ..Launch::default() };
        c.servers.insert("b".into(), ServerEntry { launch, ..ServerEntry::default() });
        assert!(c.servers()["b"].pools.contains_key("default"));
    }

    #[test]
    fn max_placements_defaults_to_16_and_must_allow_one() {
        let (_d, c) = load_text("[servers.a]\ncommand = \"x\"\n[servers.a.pools.default]\nmax_placements = 4\n");
        assert_eq!(c.unwrap().servers()["a"].pools["default"].max_placements, 4);
        let (_d, c) = load_text("[servers.a]\ncommand = \"x\"\n");
        assert_eq!(c.unwrap().servers()["a"].pools["default"].max_placements, 16);
        let (_d, c) = load_text("[servers.a]\ncommand = \"x\"\n[servers.a.pools.default]\nmax_placements = 0\n");
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("pool `default`: max_placements must be at least 1"), "{e}");
    }

    #[test]
    fn a_merged_pool_or_limit_that_cannot_work_names_the_server_and_its_line() {
        let (dir, c) = load_text(
            "[limits]\nmax_call_timeout_ms = 10000\ncall_timeout_ms = 5000\n[servers.a]\ncommand = \"x\"\n[servers.a.limits]\ncall_timeout_ms = 20000\n",
        );
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml");
        assert!(
            e.contains(&format!(
                "server `a` (config file {}, line 4): limits: call_timeout_ms (20000)",
                file.display()
            )),
            "{e}"
        );
        let (_d, c) = load_text(
            "[servers.a]\ncommand = \"x\"\n[servers.b]\ncommand = \"y\"\n[servers.b.pools.default]\nmin = 3\nmax = 2\n",
        );
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("server `b` (config file") && e.contains("line 3): pool `default`: min (3)"), "{e}");
        // The file's own defaults must work on their own, and say which file.
        let (_d, c) =
            load_text("[pools.default]\nmax = 0\n[servers.a]\ncommand = \"x\"\n[servers.a.pools.default]\nmax = 1\n");
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.starts_with("config file ") && e.contains("pool `default`: max must be at least 1"), "{e}");
        // validate() checks a config built in code the same way.
        let mut c = Config::default();
        let limits = LimitsPatch { max_message_bytes: Some(10), ..LimitsPatch::default() };
        let launch = Launch { command: Some("x".into()), ..Launch::default() };
        c.servers.insert("a".into(), ServerEntry { launch, limits, ..ServerEntry::default() });
        let e = c.validate().unwrap_err().to_string();
        assert!(e.starts_with("server `a`: limits: max_message_bytes"), "{e}");
    }

    #[test]
    fn both_server_forms_in_one_file_is_an_error_naming_both_with_their_lines() {
        let (dir, c) = load_text("[limits]\n\n[server]\ncommand = \"npx\"\n\n[servers.fs]\ncommand = \"npx\"\n");
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml");
        assert!(
            e.starts_with(&format!("config file {}: both [server] (line 3) and [servers] (line 6)", file.display())),
            "{e}"
        );
        assert!(e.contains("[servers.NAME]"), "{e}");
        // An inline table counts too; an empty [server] header does not.
        let (_d, c) = load_text("server = { url = \"https://h/\" }\nservers = { a = { command = \"x\" } }\n");
        assert!(format!("{:#}", c.unwrap_err()).contains("both [server] (line 1) and [servers] (line 2)"));
        let (_d, c) = load_text("[server]\n[servers.a]\ncommand = \"x\"\n");
        c.unwrap();
    }

    #[test]
    fn the_single_server_form_is_one_server_under_the_name_target_gives_it() {
        for (text, name) in [
            ("[server]\ncommand = \"npx\"\nargs = [\"-y\", \"@x/server-git\"]\n", "server-git"),
            ("[server]\nurl = \"http://127.0.0.1:3001/mcp\"\n", "127.0.0.1:3001"),
            ("[server]\nname = \"docs\"\nurl = \"https://h/mcp\"\n", "docs"),
        ] {
            let (_d, c) = load_text(&format!("{text}[pools.slow]\nmax = 2\n[daemon]\nidle_exit_ms = 5\n"));
            let c = c.unwrap();
            let all = c.servers();
            assert_eq!(all.keys().collect::<Vec<_>>(), [name], "{text}");
            let one = &all[name];
            assert_eq!(one.server.name.as_deref(), Some(name));
            assert!(one.pools.contains_key("slow") && one.pools.contains_key("default"));
            assert_eq!((one.daemon.idle_exit_ms, one.limits.call_timeout_ms), (5, c.limits.call_timeout_ms));
        }
        // No command and no URL (the command line gives one): no server yet.
        let (_d, c) = load_text("[server]\nname = \"x\"\n[limits]\ncall_timeout_ms = 1000\n");
        assert!(c.unwrap().servers().is_empty());
    }

    #[test]
    fn a_server_s_headers_carry_their_own_line_and_its_errors_name_it() {
        let (dir, c) = load_text(
            "[servers.a]\nurl = \"https://a/\"\nheaders = { X-A = \"1\" }\n\n[servers.b]\nurl = \"https://b/\"\n\
             [servers.b.headers]\nX-B = \"${NOPE}\"\nX-C = \"2\"\n",
        );
        let c = c.unwrap();
        let path = dir.path().join("switchyard.toml");
        let at = |line| Source::File { path: path.clone(), line: Some(line) };
        assert_eq!(c.servers["a"].launch.headers["X-A"].source, at(3));
        assert_eq!(c.servers["b"].launch.headers["X-B"].source, at(8));
        assert_eq!(c.servers["b"].launch.headers["X-C"].source, at(9));
        let all = c.servers();
        assert_eq!(all["b"].server.launch.headers["X-C"].source, at(9));
        // The rules of [server] hold for each entry, and the errors name the server and the line.
        for (text, says) in [
            (
                "[servers.fs]\nurl = \"https://h/\"\n\nargs = [\"-y\"]\n",
                "server `fs` (config file {F}, line 4): `args` applies to commands only",
            ),
            (
                "[servers.fs]\ncommand = \"npx\"\nurl = \"https://h/\"\n",
                "server `fs` (config file {F}, line 3): has both `command` and `url`",
            ),
            (
                "[servers.fs]\ncommand = \"npx\"\ntransport = \"sse\"\n",
                "server `fs` (config file {F}, line 3): `transport` applies to a remote server",
            ),
            (
                "[servers.fs]\n\nurl = \"ftp://h/\"\n",
                "server `fs` (config file {F}, line 3): url must start with https://",
            ),
            (
                "[servers.fs]\nurl = \"https://h/\"\nheaders = { X = \"a\\nb\" }\n",
                "server `fs`: header `X` (config file {F}, line 3) has a line feed",
            ),
        ] {
            let (dir, c) = load_text(text);
            let e = format!("{:#}", c.unwrap_err());
            let says = says.replace("{F}", &dir.path().join("switchyard.toml").display().to_string());
            assert!(e.contains(&says), "{text:?}: {e}");
        }
    }

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_template_gets_the_client_s_values_in_one_pass_and_other_text_stays_literal() {
        let (dir, loaded) = load_text(
            r#"
            [servers.tools]
            command = "${BIN}/python3"
            args = ["${workspaceFolder}/tools/server.py", "--token", "${TOOLS_TOKEN}", "${HOME}", "$${TOOLS_TOKEN}", "${TOOLS_TOKEN"]
            env = { TOKEN = "t=${TOOLS_TOKEN};", PLAIN = "${PATH}" }
            cwd = "${workspaceFolder}/sub"
            client_env = ["workspaceFolder", "TOOLS_TOKEN", "BIN"]
            [servers.rel]
            command = "x"
            cwd = "${DIR}"
            client_env = ["DIR"]
            "#,
        );
        let config = loaded.unwrap();
        let all = config.servers();
        let tools = &all["tools"];
        assert!(tools.refuse_client_env().unwrap_err().to_string().contains("--env workspaceFolder,TOOLS_TOKEN,BIN"));
        // A value holding `${OTHER}` (even a client name) is not read again.
        let got = tools
            .for_client(&values(&[
                ("workspaceFolder", "/ws"),
                ("TOOLS_TOKEN", "a${BIN}b"),
                ("BIN", "/usr/bin"),
                ("EXTRA", "ignored"),
            ]))
            .unwrap();
        let s = &got.server;
        assert_eq!(s.launch.command.as_deref(), Some("/usr/bin/python3"));
        assert_eq!(
            s.launch.args,
            ["/ws/tools/server.py", "--token", "a${BIN}b", "${HOME}", "${TOOLS_TOKEN}", "${TOOLS_TOKEN"]
        );
        assert_eq!(s.launch.env["TOKEN"], "t=a${BIN}b;");
        assert_eq!(s.launch.env["PLAIN"], "${PATH}");
        // `/ws` is absolute on Unix only (on Windows it is the config's drive, and joined).
        #[cfg(unix)]
        assert_eq!(s.launch.cwd.as_deref(), Some(Path::new("/ws/sub")));
        assert!(s.launch.client_env.is_empty() && s.client_values.0.len() == 3, "only its own names are kept");
        got.refuse_client_env().unwrap();
        // A relative directory from the client is the config file's, as every path in it.
        let rel = all["rel"].for_client(&values(&[("DIR", "here")])).unwrap();
        assert_eq!(rel.server.launch.cwd, Some(dir.path().join("here")));
        // A missing value names the server, what is missing and what to do.
        let e = format!("{:#}", tools.for_client(&values(&[("BIN", "/b")])).unwrap_err());
        for want in [
            "server `tools`",
            "did not send workspaceFolder, TOOLS_TOKEN",
            "connect tools --env workspaceFolder,TOOLS_TOKEN,BIN",
        ] {
            assert!(e.contains(want), "{want} missing from: {e}");
        }
    }

    #[test]
    fn a_remote_template_takes_client_values_in_its_url_and_headers() {
        let (_dir, loaded) = load_text(
            r#"
            [servers.web]
            url = "https://${HOST}/mcp"
            headers = { Authorization = "Bearer ${KEY}", X-Both = "${KEY}:${DAEMON_VAR}:$${KEY}" }
            client_env = ["HOST", "KEY"]
            "#,
        );
        let web = loaded.unwrap().servers().remove("web").unwrap();
        let got = web.for_client(&values(&[("HOST", "mcp.example.com"), ("KEY", "k${DAEMON_VAR}")])).unwrap();
        assert_eq!(got.server.launch.url.as_deref(), Some("https://mcp.example.com/mcp"));
        // Header values are read from the client's values first, then the environment, once.
        let env = |n: &str| if n == "DAEMON_VAR" { Ok("d".to_string()) } else { Err(std::env::VarError::NotPresent) };
        let client = &got.server.client_values.0;
        let lookup = |n: &str| client.get(n).cloned().map_or_else(|| env(n), Ok);
        assert_eq!(expand(&got.server.launch.headers["X-Both"].raw, &lookup).unwrap().value, "k${DAEMON_VAR}:d:${KEY}");
        // A value a header cannot carry is refused, without the value.
        let e = format!("{:#}", web.for_client(&values(&[("HOST", "h"), ("KEY", "line\nfeed")])).unwrap_err());
        assert!(e.contains("line feed") && e.contains("${KEY}") && e.contains("`Authorization`"), "{e}");
        assert!(!e.contains("feed\n") && !e.contains("line\n"), "{e}");
        // So is a URL the values make invalid, without repeating it.
        let e = format!("{:#}", web.for_client(&values(&[("HOST", "a b"), ("KEY", "k")])).unwrap_err());
        assert!(e.contains("server `web`") && e.contains("url"), "{e}");
    }
}
