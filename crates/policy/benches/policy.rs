//! Per-call cost of the policy chain (empty, one plugin of each contract version, and hints +
//! fs-keys + timeouts), per `tools/list` of 50 tools rewritten for a client, and the content
//! hooks of 0.3 on params and results of 1 KB to 1 MB.

use std::path::Path;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use switchyard_config::{Config, PluginEntry};
use switchyard_core::decision::{CallInfo, Caller, Hints};
use switchyard_policy::annotate::rewrite_list;
use switchyard_policy::{Kind, Phase, PluginSet, Policy};
use tokio_util::sync::CancellationToken;

const EXAMPLES: &str = env!("SWITCHYARD_EXAMPLE_PLUGINS");

/// The `hints` example as built against contract 0.1.0 (a fixture kept from before 0.2).
const HINTS_0_1: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/hints-0.1.0.wasm");

/// Loads the named example plugins (with config) into a fresh plugins directory; a name that is
/// a path is loaded from there.
fn chain(rt: &tokio::runtime::Runtime, plugins: &[(&str, &str)]) -> (tempfile::TempDir, Arc<PluginSet>) {
    chain_with(rt, plugins, |_| {})
}

/// [`chain`], with each entry as `adjust` leaves it (limits, mode).
fn chain_with(
    rt: &tokio::runtime::Runtime,
    plugins: &[(&str, &str)],
    adjust: impl Fn(&mut PluginEntry),
) -> (tempfile::TempDir, Arc<PluginSet>) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    for (from, json) in plugins {
        let from = Path::new(EXAMPLES).join(from);
        let file = from.file_name().unwrap().to_str().unwrap();
        std::fs::copy(&from, dir.path().join(file)).unwrap();
        let mut entry = PluginEntry::defaults_for(file);
        entry.config = Some(toml::Value::String(json.to_string()));
        adjust(&mut entry);
        config.plugins.push(entry);
    }
    let shutdown = CancellationToken::new();
    let policy = rt.block_on(Policy::start(&config, Some(dir.path().to_path_buf()), shutdown.clone())).unwrap();
    let set = policy.current();
    assert_eq!(set.names().len(), plugins.len(), "every plugin loads");
    shutdown.cancel();
    (dir, set)
}

fn call() -> CallInfo {
    CallInfo {
        server: "filesystem".into(),
        session: "s1".into(),
        caller: Default::default(),
        method: "tools/call".into(),
        tool: Some("write_file".into()),
        arguments: Some(r#"{"path":"/tmp/project/src/main.rs","content":"fn main() {}"}"#.into()),
        declared: Hints::default(),
        attempt: 0,
        task: None,
    }
}

/// A `tools/list` result of `n` tools of a filesystem-like server, half of them annotated.
fn tools_list(n: usize) -> String {
    let tools: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let (name, read) = if i % 2 == 0 { (format!("read_{i}"), true) } else { (format!("write_{i}"), false) };
            let mut t = serde_json::json!({
                "name": name,
                "description": format!("Tool number {i} of the benchmark server, described in a sentence or two."),
                "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            });
            if read {
                t["annotations"] = serde_json::json!({"readOnlyHint": true});
            }
            t
        })
        .collect();
    serde_json::json!({ "tools": tools }).to_string()
}

fn named(name: &str) -> Caller {
    Caller { name: Some(name.into()), ..Caller::default() }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let call = call();
    let mut g = c.benchmark_group("policy_decide");

    let (_d0, empty) = chain(&rt, &[]);
    g.bench_function("empty chain", |b| b.iter(|| empty.decide(std::hint::black_box(&call)).unwrap()));

    let hints_config = r#"{"tools":{"read_*":{"readOnlyHint":true}}}"#;
    let (_d01, one_v1) = chain(&rt, &[(HINTS_0_1, hints_config)]);
    g.bench_function("1 plugin (hints, contract 0.1)", |b| {
        b.iter(|| one_v1.decide(std::hint::black_box(&call)).unwrap())
    });

    let (_d1, one) = chain(&rt, &[("hints.wasm", hints_config)]);
    g.bench_function("1 plugin (hints, contract 0.2)", |b| b.iter(|| one.decide(std::hint::black_box(&call)).unwrap()));

    let (_d3, three) = chain(
        &rt,
        &[
            ("hints.wasm", r#"{"tools":{"read_*":{"readOnlyHint":true}}}"#),
            ("fs-keys.wasm", "{}"),
            (
                "timeouts.wasm",
                r#"{"tools":{"*":{"timeout_ms":60000},"write_*":{"timeout_ms":5000,"retry":{"attempts":1,"backoff_ms":100}}}}"#,
            ),
        ],
    );
    g.bench_function("3 plugins (hints+fs-keys+timeouts)", |b| {
        b.iter(|| three.decide(std::hint::black_box(&call)).unwrap())
    });
    g.finish();

    c.bench_function("policy_annotate 3 plugins", |b| {
        b.iter(|| three.annotate("filesystem", std::hint::black_box("read_file"), &Hints::default()))
    });

    // A tools/list of 50 tools rewritten for one client: `warm` asks again for a client the
    // chain has judged these tools for (its answers are kept), `cold` for a new client each time.
    let list = tools_list(50);
    let (_df, filter) = chain(&rt, &[("tool-filter.wasm", r#"{"clients":{"cursor":{"hide":["write_*"]}}}"#)]);
    let mut g = c.benchmark_group("policy_tools_list_50");
    let rewrite = |set: &Arc<PluginSet>, caller: &Caller| {
        rt.block_on(rewrite_list(set, "s1", caller, "filesystem", Kind::Tool, std::hint::black_box(&list))).unwrap()
    };
    let cursor = named("cursor");
    for (label, set) in [
        ("empty chain", &empty),
        ("hints, contract 0.1", &one_v1),
        ("hints, contract 0.2", &one),
        ("tool-filter", &filter),
    ] {
        g.bench_function(format!("{label}, warm"), |b| b.iter(|| rewrite(set, &cursor)));
        let mut n = 0u64;
        g.bench_function(format!("{label}, cold"), |b| {
            b.iter(|| {
                n += 1;
                rewrite(set, &named(&format!("client-{n}")))
            })
        });
    }
    g.finish();
}

/// A `tools/call` result whose JSON text is `size` bytes: one text item of filler, with a made-up
/// cloud key in the middle when `secret` (so `redact` has one thing to change).
fn result_of(size: usize, secret: bool) -> String {
    let empty = serde_json::json!({"content": [{"type": "text", "text": ""}]}).to_string();
    let line = "2026-11-29T18:00:00Z INFO request served in 12 ms from cache; ";
    let mut text: String = line.repeat((size - empty.len()) / line.len() + 1);
    text.truncate(size - empty.len());
    if secret {
        let at = text.len() / 2;
        text.replace_range(at..at + 22, " AKIAIOSFODNN7EXAMPLE ");
    }
    let out = serde_json::json!({"content": [{"type": "text", "text": text}]}).to_string();
    assert_eq!(out.len(), size);
    out
}

/// The content hooks (0.3): what the router pays per call for a plugin's `on-request` and
/// `on-result` (`hooked`, then `hook_async` on a plugin worker, as the call path does), at
/// 1 KB, 100 KB and 1 MB; and for a call outside every plugin's interest, the test alone.
fn hooks(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut call = call();
    call.arguments = Some(serde_json::json!({"path": "/tmp/project/notes.md", "content": "n".repeat(940)}).to_string());
    let params = serde_json::json!({"name": "write_file", "arguments": serde_json::from_str::<serde_json::Value>(call.arguments.as_deref().unwrap()).unwrap()}).to_string();
    assert!((1000..1100).contains(&params.len()), "1 KB of params: {}", params.len());
    // Larger payloads take longer than the 5 ms default deadline in a debug-sized budget: give
    // every plugin the room to finish, so the figure is its cost, not a failure.
    let roomy = |e: &mut PluginEntry| {
        e.deadline_ms = 1000;
        e.memory_mib = 64;
    };
    let (_d0, empty) = chain(&rt, &[]);
    let (_dt, pass) = chain_with(&rt, &[("template.wasm", "{}")], roomy);
    let (_dr, redact) = chain_with(&rt, &[("redact.wasm", "{}")], roomy);
    let (_de, elsewhere) = chain_with(&rt, &[("redact.wasm", r#"{"tools": ["search_*"]}"#)], roomy);
    assert!(pass.hooked(Phase::Result, "filesystem", "tools/call", Some("write_file")));
    assert!(!elsewhere.hooked(Phase::Result, "filesystem", "tools/call", Some("write_file")));
    // What the call path runs: the test, and the hooks when it holds.
    let run = |set: &Arc<PluginSet>, phase: Phase, payload: &str| {
        if set.hooked(phase, &call.server, &call.method, call.tool.as_deref()) {
            let out = rt.block_on(set.hook_async(phase, &call, std::hint::black_box(payload)));
            assert!(out.denied.is_none(), "{out:?}");
            out.changed.is_some()
        } else {
            false
        }
    };

    let mut g = c.benchmark_group("policy_hooks");
    g.bench_function("request 1 KB, no plugin", |b| b.iter(|| run(&empty, Phase::Request, &params)));
    g.bench_function("request 1 KB, pass-through (template)", |b| b.iter(|| run(&pass, Phase::Request, &params)));
    g.bench_function("request 1 KB, outside the interest (redact, tools = search_*)", |b| {
        b.iter(|| run(&elsewhere, Phase::Request, &params))
    });
    for (label, size) in [("1 KB", 1_000), ("100 KB", 100_000), ("1 MB", 1_000_000)] {
        let (clean, dirty) = (result_of(size, false), result_of(size, true));
        g.bench_function(format!("result {label}, no plugin"), |b| b.iter(|| run(&empty, Phase::Result, &clean)));
        g.bench_function(format!("result {label}, pass-through (template)"), |b| {
            b.iter(|| run(&pass, Phase::Result, &clean))
        });
        g.bench_function(format!("result {label}, outside the interest (redact, tools = search_*)"), |b| {
            b.iter(|| run(&elsewhere, Phase::Result, &dirty))
        });
        g.bench_function(format!("result {label}, redact, nothing found"), |b| {
            b.iter(|| run(&redact, Phase::Result, &clean))
        });
        g.bench_function(format!("result {label}, redact, one key replaced"), |b| {
            b.iter(|| assert!(run(&redact, Phase::Result, &dirty)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench, hooks);
criterion_main!(benches);
