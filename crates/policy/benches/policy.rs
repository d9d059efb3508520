//! Per-call cost of the policy chain (empty, one plugin of each contract version, and hints +
//! fs-keys + timeouts), and per `tools/list` of 50 tools rewritten for a client.

use std::path::Path;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use switchyard_config::{Config, PluginEntry};
use switchyard_core::decision::{CallInfo, Caller, Hints};
use switchyard_policy::annotate::rewrite_list;
use switchyard_policy::{Kind, PluginSet, Policy};
use tokio_util::sync::CancellationToken;

const EXAMPLES: &str = env!("SWITCHYARD_EXAMPLE_PLUGINS");

/// The `hints` example as built against contract 0.1.0 (a fixture kept from before 0.2).
const HINTS_0_1: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/hints-0.1.0.wasm");

/// Loads the named example plugins (with config) into a fresh plugins directory; a name that is
/// a path is loaded from there.
fn chain(rt: &tokio::runtime::Runtime, plugins: &[(&str, &str)]) -> (tempfile::TempDir, Arc<PluginSet>) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    for (from, json) in plugins {
        let from = Path::new(EXAMPLES).join(from);
        let file = from.file_name().unwrap().to_str().unwrap();
        std::fs::copy(&from, dir.path().join(file)).unwrap();
        let mut entry = PluginEntry::defaults_for(file);
        entry.config = Some(toml::Value::String(json.to_string()));
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

criterion_group!(benches, bench);
criterion_main!(benches);
