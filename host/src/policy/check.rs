//! `switchyard plugin check`: load one plugin, run it on a sample call and explain the result.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::Value;

use super::annotate::declared_hints;
use super::wasm::{self, CallArgs, Limits, Verdict};
use crate::config::PluginEntry;
use crate::decision::{CallInfo, Concurrency, Decision, Hints};

/// Loads `file` with the same host code the router uses, runs `init` with `config_json`, then
/// `decide` and `annotate` on the sample call, printing each result and how long it took.
pub fn run(file: &Path, config_json: &str, call_json: Option<&str>) -> anyhow::Result<()> {
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| file.display().to_string());
    serde_json::from_str::<Value>(config_json).context("--config is not valid JSON")?;
    let call = sample_call(call_json)?;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let limits = Limits::from_entry(&PluginEntry::defaults_for(&name));

    let t = Instant::now();
    let hash = wasm::content_hash(&bytes);
    let plugin = wasm::Plugin::load(&name, &bytes, &hash, limits, config_json)
        .with_context(|| format!("{} is not a usable policy plugin", file.display()))?;
    println!("{name}: loaded, type-checked and init-ed in {} µs ({} bytes)", t.elapsed().as_micros(), bytes.len());
    println!(
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
            Ok(v) => println!("decide:   {} ({round} call, {us} µs)", describe(&v)),
            Err(e) => bail!("{}: decide failed: the plugin {e}", file.display()),
        }
    }

    let t = Instant::now();
    let hints =
        plugin.annotate(&call.server, call.tool.as_deref().unwrap_or("example"), &call.declared, &call.declared);
    let us = t.elapsed().as_micros();
    match hints {
        Ok(h) => println!("annotate: {} -> {} ({us} µs)", hints_text(&call.declared), hints_text(&h)),
        Err(e) => bail!("{}: annotate failed: the plugin {e}", file.display()),
    }
    Ok(())
}

/// The call to try: `--call` JSON (every field optional) or a `tools/call` of `example`.
/// Fields: server, session, method, tool, arguments (any JSON), annotations (the declared
/// hints, spec names), attempt.
fn sample_call(call_json: Option<&str>) -> anyhow::Result<CallInfo> {
    let v: Value = match call_json {
        Some(text) => serde_json::from_str(text).context("--call is not valid JSON")?,
        None => Value::Object(Default::default()),
    };
    if !v.is_object() {
        bail!("--call must be a JSON object like {{\"tool\": \"read_file\", \"arguments\": {{\"path\": \"/tmp/x\"}}}}");
    }
    let text = |k: &str, default: &str| v.get(k).and_then(Value::as_str).unwrap_or(default).to_string();
    Ok(CallInfo {
        server: text("server", "example-server"),
        session: text("session", "check"),
        method: text("method", "tools/call"),
        tool: Some(text("tool", "example")),
        arguments: Some(v.get("arguments").map(Value::to_string).unwrap_or_else(|| "{}".to_string())),
        declared: declared_hints(v.get("annotations")),
        attempt: v.get("attempt").and_then(Value::as_u64).unwrap_or(0) as u32,
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
