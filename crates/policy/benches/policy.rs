//! Per-call cost of the policy chain: empty, one plugin, and hints + fs-keys + timeouts.

use std::path::Path;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use switchyard_config::{Config, PluginEntry};
use switchyard_core::decision::{CallInfo, Hints};
use switchyard_policy::{PluginSet, Policy};
use tokio_util::sync::CancellationToken;

const EXAMPLES: &str = env!("SWITCHYARD_EXAMPLE_PLUGINS");

/// Loads the named example plugins (with config) into a fresh plugins directory.
fn chain(rt: &tokio::runtime::Runtime, plugins: &[(&str, &str)]) -> (tempfile::TempDir, Arc<PluginSet>) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    for (file, json) in plugins {
        std::fs::copy(Path::new(EXAMPLES).join(file), dir.path().join(file)).unwrap();
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

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let call = call();
    let mut g = c.benchmark_group("policy_decide");

    let (_d0, empty) = chain(&rt, &[]);
    g.bench_function("empty chain", |b| b.iter(|| empty.decide(std::hint::black_box(&call)).unwrap()));

    let (_d1, one) = chain(&rt, &[("hints.wasm", r#"{"tools":{"read_*":{"readOnlyHint":true}}}"#)]);
    g.bench_function("1 plugin (hints)", |b| b.iter(|| one.decide(std::hint::black_box(&call)).unwrap()));

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
}

criterion_group!(benches, bench);
criterion_main!(benches);
