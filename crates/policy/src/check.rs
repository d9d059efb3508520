//! `switchyard plugin check`: load one plugin, run it on a sample call and explain the result.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::{Map, Value};

use super::annotate::declared_hints;
use super::wasm::{self, CallArgs, Limits, Verdict};
use super::{ListedTool, Listing};
use switchyard_config::{Config, PluginEntry};
use switchyard_core::decision::{CallInfo, Caller, Concurrency, Decision, Hints, TaskRef, Transport};

/// What to check a plugin with.
#[derive(Debug, Default, Clone, Copy)]
pub struct Options<'a> {
    /// JSON handed to `init` (default `{}`).
    pub config_json: Option<&'a str>,
    /// A switchyard.toml whose `[[plugins]]` entry for this file gives the config and limits.
    pub config_file: Option<&'a Path>,
    /// The sample call (see [`sample_call`]).
    pub call_json: Option<&'a str>,
    /// Also time this many warm `decide` calls and print their p50 and p99 (0: do not).
    pub bench: u32,
}

/// What `plugin check` found: the transcript to print, and whether the plugin passed.
pub struct Report {
    pub text: String,
    pub result: anyhow::Result<()>,
}

/// Loads `file` with the same host code the router uses, runs `init`, then `decide` and
/// `annotate` on the sample call, noting each result, how long it took, and every line the
/// plugin logged or printed (a panic's message among them).
pub fn run(file: &Path, opts: &Options<'_>) -> Report {
    let mut text = String::new();
    let result = check(file, opts, &mut text);
    Report { text, result }
}

fn check(file: &Path, opts: &Options<'_>, out: &mut String) -> anyhow::Result<()> {
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| file.display().to_string());
    let (entry, config_json) = entry_and_config(&name, opts.config_json, opts.config_file)?;
    let call = sample_call(opts.call_json)?;
    let bytes = super::reload::read_plugin_file(file)?;

    let t = Instant::now();
    let hash = wasm::content_hash(&bytes);
    let loaded = wasm::Plugin::load(&name, &bytes, &hash, Limits::from_entry(&entry), &config_json, true);
    let plugin = match loaded {
        Ok(p) => p,
        Err(e) => return Err(e.context(format!("{} is not a usable policy plugin", file.display()))),
    };
    let _ = writeln!(
        out,
        "{name}: loaded, type-checked and init-ed in {} µs ({} bytes)",
        t.elapsed().as_micros(),
        bytes.len()
    );
    let _ = writeln!(out, "contract: {}", plugin.contract());
    let _ = writeln!(out, "config:   {config_json}");
    if let Some(i) = plugin.interest() {
        let _ = writeln!(out, "hooks:    {}", i.describe());
    } else if plugin.contract() == wasm::Contract::V3 {
        let _ = writeln!(out, "hooks:    none (its interest names no method)");
    }
    printed(out, &plugin);
    // What each new instance costs (the host starts one per concurrent call, and after a trap):
    // for Python and JavaScript this is their runtime's start.
    let t = Instant::now();
    let fresh = plugin.start_fresh_instance();
    let us = t.elapsed().as_micros();
    printed(out, &plugin);
    match fresh {
        Ok(()) => {
            let _ = writeln!(out, "instance: a fresh one instantiated and init-ed in {us} µs");
        }
        Err(e) => bail!("{}: a second instance failed: the plugin {e}", file.display()),
    }
    let _ = writeln!(
        out,
        "call:     {} {} {}",
        call.method,
        call.tool.as_deref().unwrap_or("-"),
        call.arguments.as_deref().unwrap_or("")
    );
    if plugin.contract().lists() {
        let _ = writeln!(out, "client:   {}", caller_text(&call.caller));
        if let Some(task) = &call.task {
            let tool = task.tool.as_deref().map(|t| format!(", created by `{t}`")).unwrap_or_default();
            let _ = writeln!(out, "task:     {}{tool}", task.id);
        }
    }

    let args = CallArgs::new(&call);
    // The first call may pay for lazy initialisation inside the plugin; the second shows the
    // steady per-call cost the router sees.
    for round in ["first", "warm"] {
        let t = Instant::now();
        let verdict = plugin.decide(&args, &Decision::default());
        let us = t.elapsed().as_micros();
        match verdict {
            Ok(v) => {
                let _ = writeln!(out, "decide:   {} ({round} call, {us} µs)", describe(&v));
                printed(out, &plugin);
            }
            Err(e) => {
                printed(out, &plugin);
                bail!("{}: decide failed: the plugin {e}", file.display());
            }
        }
    }

    if opts.bench > 0 {
        let mut times = Vec::with_capacity(opts.bench as usize);
        for _ in 0..opts.bench {
            let t = Instant::now();
            let verdict = plugin.decide(&args, &Decision::default());
            times.push(t.elapsed().as_nanos());
            if let Err(e) = verdict {
                printed(out, &plugin);
                bail!("{}: decide failed during --bench: the plugin {e}", file.display());
            }
        }
        drop(plugin.output().take_captured());
        times.sort_unstable();
        let at = |q: usize| times[(times.len() * q / 100).min(times.len() - 1)] as f64 / 1000.0;
        let _ = writeln!(out, "bench:    decide x{}: p50 {:.1} µs, p99 {:.1} µs", times.len(), at(50), at(99));
    }

    if plugin.contract().lists() {
        let tool = ListedTool {
            kind: super::Kind::Tool,
            server: call.server.to_string(),
            name: call.tool.as_deref().unwrap_or("example").to_string(),
            title: None,
            description: None,
            declared: call.declared.clone(),
        };
        let t = Instant::now();
        let listed = plugin.list_tool(&tool, &call.caller, &Listing::of(&tool), tokio::time::Instant::now());
        let us = t.elapsed().as_micros();
        return match listed {
            Ok(l) => {
                let _ = writeln!(out, "list:     {} ({us} µs)", listing_text(&tool, &l));
                printed(out, &plugin);
                Ok(())
            }
            Err(e) => {
                printed(out, &plugin);
                bail!("{}: list-tool failed: the plugin {e}", file.display());
            }
        };
    }
    let t = Instant::now();
    let hints =
        plugin.annotate(&call.server, call.tool.as_deref().unwrap_or("example"), &call.declared, &call.declared);
    let us = t.elapsed().as_micros();
    match hints {
        Ok(h) => {
            let _ = writeln!(out, "annotate: {} -> {} ({us} µs)", hints_text(&call.declared), hints_text(&h));
            printed(out, &plugin);
        }
        Err(e) => {
            printed(out, &plugin);
            bail!("{}: annotate failed: the plugin {e}", file.display());
        }
    }
    Ok(())
}

/// Notes what the plugin logged or printed since the last note.
fn printed(out: &mut String, plugin: &wasm::Plugin) {
    for line in plugin.output().take_captured() {
        let _ = writeln!(out, "  plugin {line}");
    }
}

/// The limits and the `init` config to run plugin `name` with: its `[[plugins]]` entry in
/// `config_file` (`--config-file`), else the defaults; `config_json` (`--config`) else the
/// entry's config.
pub(crate) fn entry_and_config(
    name: &str,
    config_json: Option<&str>,
    config_file: Option<&Path>,
) -> anyhow::Result<(PluginEntry, String)> {
    let entry = entry_for(name, config_json, config_file)?;
    let config_json = match config_json {
        Some(json) => {
            serde_json::from_str::<Value>(json).context("--config is not valid JSON")?;
            json.to_string()
        }
        None => entry.config_json()?,
    };
    Ok((entry, config_json))
}

/// The plugin's `[[plugins]]` entry from `--config-file`, else the defaults.
fn entry_for(name: &str, config_json: Option<&str>, config_file: Option<&Path>) -> anyhow::Result<PluginEntry> {
    let Some(path) = config_file else { return Ok(PluginEntry::defaults_for(name)) };
    if config_json.is_some() {
        bail!("give --config or --config-file, not both");
    }
    let config = Config::load(path)?;
    let found = config.plugins.iter().find(|e| e.file == name || Path::new(&e.file).file_name() == Some(name.as_ref()));
    match found {
        Some(e) => Ok(e.clone()),
        None => {
            let names: Vec<&str> = config.plugins.iter().map(|e| e.file.as_str()).collect();
            bail!(
                "{} has no [[plugins]] entry with file = \"{name}\" (its entries: [{}])",
                path.display(),
                names.join(", ")
            )
        }
    }
}

/// The fields `--call` may have.
pub const CALL_FIELDS: &[&str] =
    &["server", "session", "client", "era", "method", "tool", "arguments", "annotations", "attempt", "task"];

/// The fields `client` in `--call` may have (or it is a string: the client's name).
const CLIENT_FIELDS: &[&str] = &["name", "version", "transport", "dir", "token"];

/// The caller of a `--call` (or of a recorded line's `tool`): `client` as a name, or an object of
/// [`CLIENT_FIELDS`], and `era`.
pub(crate) fn caller_from_json(v: &Value, what: &str) -> anyhow::Result<Caller> {
    let era = match v.get("era") {
        None => Arc::default(),
        Some(Value::String(s)) => s.as_str().into(),
        Some(_) => bail!("{what} field `era` must be a string (a protocol version, e.g. \"2025-11-25\")"),
    };
    let client = match v.get("client") {
        None => return Ok(Caller { era, ..Caller::default() }),
        Some(Value::String(name)) => return Ok(Caller { name: Some(name.as_str().into()), era, ..Caller::default() }),
        Some(Value::Object(c)) => c,
        Some(_) => bail!(
            "{what} field `client` must be a name or an object like {{\"name\": \"cursor\", \"version\": \"1.2\"}}"
        ),
    };
    if let Some(k) = client.keys().find(|k| !CLIENT_FIELDS.contains(&k.as_str())) {
        bail!("{what} field `client` has an unknown field `{k}`; the fields are {}", CLIENT_FIELDS.join(", "));
    }
    let text = |k: &str| optional_string(client, k, &format!("{what} field `client.{k}`"));
    let transport = match text("transport")?.as_deref() {
        None | Some("stdio") => Transport::Stdio,
        Some("socket") => Transport::Socket,
        Some("http") => Transport::Http,
        Some(other) => bail!("{what} field `client.transport` is `{other}`; it is one of stdio, socket, http"),
    };
    Ok(Caller {
        name: text("name")?.map(Into::into),
        version: text("version")?.map(Into::into),
        transport,
        dir: text("dir")?.map(Into::into),
        token: text("token")?.map(Into::into),
        era,
    })
}

/// The string at `key` of `obj`, None when it is absent or null; `what` names it in the error.
pub(crate) fn optional_string(obj: &Map<String, Value>, key: &str, what: &str) -> anyhow::Result<Option<String>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => bail!("{what} must be a string"),
    }
}

/// The task of a `--call`: `{"id": "...", "tool": "..."}` (`tool` optional), or the id alone.
fn task_from_json(v: &Value, what: &str) -> anyhow::Result<Option<TaskRef>> {
    const TASK_FIELDS: &[&str] = &["id", "tool"];
    let task = match v.get("task") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(id)) => return Ok(Some(TaskRef { id: id.clone(), tool: None })),
        Some(Value::Object(t)) => t,
        Some(_) => {
            bail!("{what} field `task` must be a task id or an object like {{\"id\": \"t-1\", \"tool\": \"research\"}}")
        }
    };
    if let Some(k) = task.keys().find(|k| !TASK_FIELDS.contains(&k.as_str())) {
        bail!("{what} field `task` has an unknown field `{k}`; the fields are {}", TASK_FIELDS.join(", "));
    }
    let Some(Value::String(id)) = task.get("id") else { bail!("{what} field `task.id` must be a string") };
    let tool = match task.get("tool") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(t.clone()),
        Some(_) => bail!("{what} field `task.tool` must be a string"),
    };
    Ok(Some(TaskRef { id: id.clone(), tool }))
}

/// The call to try: `--call` JSON (every field optional) or a `tools/call` of `example`.
fn sample_call(call_json: Option<&str>) -> anyhow::Result<CallInfo> {
    let v: Value = match call_json {
        Some(text) => serde_json::from_str(text).context("--call is not valid JSON")?,
        None => Value::Object(Default::default()),
    };
    call_from_json(&v, "--call")
}

/// A call from JSON, every field optional: server, session, method, tool, arguments (any
/// JSON), annotations (the declared hints, spec names), attempt. Any other field is an error,
/// so a typo is not silently ignored. `what` names the JSON in messages.
pub(crate) fn call_from_json(v: &Value, what: &str) -> anyhow::Result<CallInfo> {
    let Some(obj) = v.as_object() else {
        bail!("{what} must be a JSON object like {{\"tool\": \"read_file\", \"arguments\": {{\"path\": \"/tmp/x\"}}}}");
    };
    if let Some(k) = obj.keys().find(|k| !CALL_FIELDS.contains(&k.as_str())) {
        bail!("{what} has an unknown field `{k}`; the fields are {}", CALL_FIELDS.join(", "));
    }
    let text = |k: &str, default: &str| -> anyhow::Result<String> {
        match v.get(k) {
            None => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => bail!("{what} field `{k}` must be a string"),
        }
    };
    let attempt = match v.get("attempt") {
        None => 0,
        Some(a) => a
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .with_context(|| format!("{what} field `attempt` must be a small non-negative integer"))?,
    };
    let method = text("method", "tools/call")?;
    // Only a tools/call names a tool and carries arguments (as the router sees it).
    let is_tool_call = method == "tools/call";
    Ok(CallInfo {
        server: text("server", "example-server")?.into(),
        session: text("session", "check")?.into(),
        caller: caller_from_json(v, what)?,
        tool: if is_tool_call || v.get("tool").is_some() { Some(text("tool", "example")?.into()) } else { None },
        arguments: match v.get("arguments") {
            Some(a) => Some(a.to_string()),
            None => is_tool_call.then(|| "{}".to_string()),
        },
        method: method.into(),
        declared: declared_hints(v.get("annotations")),
        attempt,
        task: task_from_json(v, what)?,
    })
}

fn describe(v: &Verdict) -> String {
    match v {
        Verdict::Continue(d) => format!("continue {}", decision_text(d)),
        Verdict::Stop(d) => format!("stop {}", decision_text(d)),
        Verdict::Reject(reason) => format!("reject: {reason}"),
    }
}

fn decision_text(d: &Decision) -> String {
    let mut parts = Vec::new();
    if let Some(c) = &d.concurrency {
        parts.push(match c {
            Concurrency::Shared => "concurrency=shared".to_string(),
            Concurrency::Exclusive => "concurrency=exclusive".to_string(),
            Concurrency::Keyed(keys) => {
                format!("concurrency=keyed[{}]", keys.iter().cloned().collect::<Vec<_>>().join(", "))
            }
        });
    }
    if let Some(p) = &d.pool {
        parts.push(format!("pool={p}"));
    }
    if let Some(t) = d.timeout_ms {
        parts.push(format!("timeout_ms={t}"));
    }
    if let Some(r) = d.retry {
        parts.push(format!("retry={}x/{}ms", r.attempts, r.backoff_ms));
    }
    if let Some(p) = &d.placement {
        parts.push(format!("placement={}", p.describe()));
    }
    if parts.is_empty() { "{} (host defaults)".to_string() } else { format!("{{{}}}", parts.join(", ")) }
}

fn caller_text(c: &Caller) -> String {
    let mut text = match (&c.name, &c.version) {
        (Some(n), Some(v)) => format!("{n} {v}"),
        (Some(n), None) => n.to_string(),
        (None, _) => "(no name)".to_string(),
    };
    let _ = write!(text, " over {}", c.transport.name());
    if let Some(d) = &c.dir {
        let _ = write!(text, " in {d}");
    }
    if let Some(t) = &c.token {
        let _ = write!(text, " with token {t}");
    }
    if !c.era.is_empty() {
        let _ = write!(text, ", era {}", c.era);
    }
    text
}

/// What `list-tool` made of a tool, against what the server listed.
fn listing_text(tool: &ListedTool, l: &Listing) -> String {
    if l.hidden {
        return format!("tool `{}` hidden from this client", tool.name);
    }
    let mut text = if l.name == tool.name {
        format!("tool `{}` shown", tool.name)
    } else {
        format!("tool `{}` shown as `{}`", tool.name, l.name)
    };
    if l.title != tool.title {
        let _ = write!(text, ", title {:?}", l.title.as_deref().unwrap_or(""));
    }
    if l.description != tool.description {
        let _ = write!(text, ", description {:?}", l.description.as_deref().unwrap_or(""));
    }
    let _ = write!(text, ", annotations {} -> {}", hints_text(&tool.declared), hints_text(&l.hints));
    text
}

fn hints_text(h: &Hints) -> String {
    let mut parts = Vec::new();
    for (k, v) in [
        ("readOnlyHint", h.read_only),
        ("destructiveHint", h.destructive),
        ("idempotentHint", h.idempotent),
        ("openWorldHint", h.open_world),
    ] {
        if let Some(v) = v {
            parts.push(format!("{k}={v}"));
        }
    }
    if let Some(t) = &h.title {
        parts.push(format!("title={t:?}"));
    }
    format!("{{{}}}", parts.join(", "))
}
