//! `switchyard plugin check`: load one plugin, run it on a sample call and explain the result.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::Value;

use super::annotate::declared_hints;
use super::wasm::{self, CallArgs, Limits, Verdict};
use switchyard_config::{Config, PluginEntry};
use switchyard_core::decision::{CallInfo, Concurrency, Decision, Hints};

/// What to check a plugin with.
#[derive(Debug, Default, Clone, Copy)]
pub struct Options<'a> {
    /// JSON handed to `init` (default `{}`).
    pub config_json: Option<&'a str>,
    /// A switchyard.toml whose `[[plugins]]` entry for this file gives the config and limits.
    pub config_file: Option<&'a Path>,
    /// The sample call (see [`sample_call`]).
    pub call_json: Option<&'a str>,
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
    let entry = entry_for(&name, opts)?;
    let config_json = match opts.config_json {
        Some(json) => {
            serde_json::from_str::<Value>(json).context("--config is not valid JSON")?;
            json.to_string()
        }
        None => entry.config_json()?,
    };
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
    let _ = writeln!(out, "config:   {config_json}");
    printed(out, &plugin);
    let _ = writeln!(
        out,
        "call:     {} {} {}",
        call.method,
        call.tool.as_deref().unwrap_or("-"),
        call.arguments.as_deref().unwrap_or("")
    );

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

/// The plugin's `[[plugins]]` entry from `--config-file`, else the defaults.
fn entry_for(name: &str, opts: &Options<'_>) -> anyhow::Result<PluginEntry> {
    let Some(path) = opts.config_file else { return Ok(PluginEntry::defaults_for(name)) };
    if opts.config_json.is_some() {
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
pub const CALL_FIELDS: &[&str] = &["server", "session", "method", "tool", "arguments", "annotations", "attempt"];

/// The call to try: `--call` JSON (every field optional) or a `tools/call` of `example`.
/// Fields: server, session, method, tool, arguments (any JSON), annotations (the declared
/// hints, spec names), attempt. Any other field is an error, so a typo is not silently ignored.
fn sample_call(call_json: Option<&str>) -> anyhow::Result<CallInfo> {
    let v: Value = match call_json {
        Some(text) => serde_json::from_str(text).context("--call is not valid JSON")?,
        None => Value::Object(Default::default()),
    };
    let Some(obj) = v.as_object() else {
        bail!("--call must be a JSON object like {{\"tool\": \"read_file\", \"arguments\": {{\"path\": \"/tmp/x\"}}}}");
    };
    if let Some(k) = obj.keys().find(|k| !CALL_FIELDS.contains(&k.as_str())) {
        bail!("--call has an unknown field `{k}`; the fields are {}", CALL_FIELDS.join(", "));
    }
    let text = |k: &str, default: &str| -> anyhow::Result<String> {
        match v.get(k) {
            None => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => bail!("--call field `{k}` must be a string"),
        }
    };
    let attempt = match v.get("attempt") {
        None => 0,
        Some(a) => a
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .context("--call field `attempt` must be a small non-negative integer")?,
    };
    Ok(CallInfo {
        server: text("server", "example-server")?,
        session: text("session", "check")?,
        method: text("method", "tools/call")?,
        tool: Some(text("tool", "example")?),
        arguments: Some(v.get("arguments").map(Value::to_string).unwrap_or_else(|| "{}".to_string())),
        declared: declared_hints(v.get("annotations")),
        attempt,
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
    if parts.is_empty() { "{} (host defaults)".to_string() } else { format!("{{{}}}", parts.join(", ")) }
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
