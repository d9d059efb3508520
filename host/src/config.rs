//! `switchyard.toml`: the server command, pools, limits and the plugin list.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

/// The whole configuration file. Every section is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub limits: Limits,
    /// Named pools of server instances; `default` always exists.
    #[serde(default)]
    pub pools: BTreeMap<String, PoolConfig>,
    #[serde(default)]
    pub plugins: Vec<PluginEntry>,
    /// Directory of the config file, for resolving relative paths (not read from the file).
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Name used in logs and errors; defaults to the command's file name.
    pub name: Option<String>,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Deadline of a call when the policy sets none.
    pub call_timeout_ms: u64,
    /// No decision may set a longer deadline; progress extends a deadline up to this.
    pub max_call_timeout_ms: u64,
    /// No decision may ask for more retries than this.
    pub max_retries: u32,
    /// No decision may ask for a longer backoff than this.
    pub max_backoff_ms: u32,
    /// Largest JSON-RPC message accepted from a client or a server, in bytes.
    pub max_message_bytes: usize,
    /// Output waiting for all clients together, at most: past it, a session whose client is
    /// behind (more than 4 x max_message_bytes waiting) is closed at once.
    pub max_buffered_bytes: usize,
    /// How long `server/discover` may take upstream before it is answered -32601.
    pub discover_timeout_ms: u64,
    /// How long spawning and initialising an instance may take.
    pub init_timeout_ms: u64,
    /// Ping idle instances this often (0 = never).
    pub health_interval_ms: u64,
    /// An instance that does not answer a health ping within this is recycled.
    pub health_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            call_timeout_ms: 300_000,
            max_call_timeout_ms: 3_600_000,
            max_retries: 5,
            max_backoff_ms: 30_000,
            max_message_bytes: 64 * 1024 * 1024,
            max_buffered_bytes: 512 * 1024 * 1024,
            discover_timeout_ms: 1_000,
            init_timeout_ms: 60_000,
            health_interval_ms: 30_000,
            health_timeout_ms: 10_000,
        }
    }
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

/// One `[[plugins]]` entry. Plugins in the directory without an entry load with defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginEntry {
    /// File name inside the plugins directory (or a path relative to it).
    pub file: String,
    /// Higher runs first; ties are broken by file name.
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub on_error: OnError,
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
    /// The plugin must run: a missing file stops the start, and deleting it later keeps the
    /// loaded version in force. `false`: the entry only configures the file when it is there.
    #[serde(default = "default_required")]
    pub required: bool,
}

fn default_deadline_ms() -> u64 {
    5
}
fn default_memory_mib() -> u64 {
    16
}
fn default_required() -> bool {
    true
}

impl PluginEntry {
    /// An entry with every default, for a file found in the directory without a config entry.
    pub fn defaults_for(file: &str) -> PluginEntry {
        PluginEntry {
            file: file.to_string(),
            priority: 0,
            on_error: OnError::default(),
            config: None,
            deadline_ms: default_deadline_ms(),
            memory_mib: default_memory_mib(),
            allow_clock: false,
            allow_random: false,
            required: default_required(),
        }
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

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read config file {}", path.display()))?;
        let mut config: Config =
            toml::from_str(&text).with_context(|| format!("config file {} is not valid", path.display()))?;
        config.base_dir =
            path.parent().map(|p| if p.as_os_str().is_empty() { PathBuf::from(".") } else { p.to_path_buf() });
        // A relative working directory is the config file's, like every other path in it.
        if let (Some(cwd), Some(base)) = (&config.server.cwd, &config.base_dir)
            && cwd.is_relative()
        {
            config.server.cwd = Some(base.join(cwd));
        }
        config.validate()?;
        Ok(config)
    }

    /// Fills in the `default` pool and checks values that would make the router misbehave.
    pub fn validate(&mut self) -> anyhow::Result<()> {
        self.pools.entry("default".to_string()).or_default();
        for (name, pool) in &self.pools {
            if pool.max == 0 {
                bail!("pool `{name}`: max must be at least 1");
            }
            if pool.min > pool.max {
                bail!("pool `{name}`: min ({}) is larger than max ({})", pool.min, pool.max);
            }
        }
        let l = &self.limits;
        if l.call_timeout_ms == 0 || l.max_call_timeout_ms < l.call_timeout_ms {
            bail!(
                "limits: call_timeout_ms ({}) must be above 0 and at most max_call_timeout_ms ({})",
                l.call_timeout_ms,
                l.max_call_timeout_ms
            );
        }
        if l.max_message_bytes < 1024 {
            bail!("limits: max_message_bytes must be at least 1024");
        }
        if l.max_buffered_bytes < l.max_message_bytes {
            bail!(
                "limits: max_buffered_bytes ({}) must be at least max_message_bytes ({})",
                l.max_buffered_bytes,
                l.max_message_bytes
            );
        }
        for p in &self.plugins {
            p.config_json()?;
            if p.deadline_ms == 0 || p.memory_mib == 0 {
                bail!("plugin {}: deadline_ms and memory_mib must be above 0", p.file);
            }
        }
        Ok(())
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
mod tests {
    use super::*;

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
}
