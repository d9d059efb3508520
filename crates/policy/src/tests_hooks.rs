//! Content hooks (`switchyard:policy@0.3.0`) against the hook-probe fixture: order, enforce
//! against audit, fail open against closed, the payload limit, and calls outside the interest.

use std::sync::Arc;

use serde_json::{Value, json};

use super::tests::{call, entry, example, fixture, load_as};
use super::*;
use switchyard_config::{Fail, HookMode};
use switchyard_core::metrics::Metrics;
use wasm::HookArgs;

/// The hook probe loaded as `name` with `config`, at `priority`, its entry edited by `edit`.
fn probe(name: &str, config: Value, priority: i32, edit: impl FnOnce(&mut PluginEntry)) -> Arc<Loaded> {
    let bytes = std::fs::read(fixture("hook-probe.wasm")).unwrap();
    let mut e = entry(name, &config.to_string(), priority, OnError::Open);
    edit(&mut e);
    Arc::new(Loaded::load(name, &bytes, &e).unwrap_or_else(|e| panic!("{name} does not load: {e:#}")))
}

fn measured(chain: Vec<Arc<Loaded>>) -> (PluginSet, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new(Default::default));
    (PluginSet { metrics: Some(metrics.clone()), ..PluginSet::new(chain) }, metrics)
}

fn params(tool: &str) -> String {
    json!({"name": tool, "arguments": {"path": "/tmp/x"}}).to_string()
}

fn result() -> String {
    json!({"content": [{"type": "text", "text": "hello"}]}).to_string()
}

fn hook(set: &PluginSet, phase: Phase, tool: &str, payload: String) -> Hooked {
    set.hook(phase, "filesystem", &HookArgs::new(&call(tool, "{}")), payload)
}

/// How many times `plugin`'s `op` was entered, from the metrics.
fn entries(metrics: &Metrics, plugin: &str, op: &str) -> u64 {
    let text = metrics.encode();
    let prefix = format!(r#"switchyard_plugin_decision_seconds_count{{plugin="{plugin}",op="{op}"}} "#);
    text.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |n| n.parse().unwrap())
}

#[test]
fn request_hooks_run_in_chain_order_and_result_hooks_in_reverse() {
    let first = probe("a.wasm", json!({"tag": "a", "request": "modify", "result": "modify"}), 10, |_| {});
    let second = probe("b.wasm", json!({"tag": "b", "request": "modify", "result": "modify"}), 0, |_| {});
    let (set, metrics) = measured(vec![second, first]);
    let asked = hook(&set, Phase::Request, "read_file", params("read_file"));
    let new: Value = serde_json::from_str(asked.changed.as_deref().unwrap()).unwrap();
    assert_eq!(new["arguments"]["trail"], json!(["a", "b"]));
    assert_eq!(new["arguments"]["path"], "/tmp/x", "the rest of the params stays");
    let answered = hook(&set, Phase::Result, "read_file", result());
    let new: Value = serde_json::from_str(answered.changed.as_deref().unwrap()).unwrap();
    assert_eq!(new["trail"], json!(["b", "a"]));
    assert_eq!(new["content"][0]["text"], "hello [b] [a]");
    assert_eq!(answered.notes.len(), 2);
    assert!(metrics.encode().contains(
        r#"switchyard_plugin_hook_verdicts_total{plugin="a.wasm",phase="result",verdict="modify",mode="enforce"} 1"#
    ));
}

#[test]
fn a_denial_stops_the_chain_and_names_the_plugin() {
    let deny = probe("a.wasm", json!({"tag": "a", "request": "deny"}), 10, |_| {});
    let later = probe("b.wasm", json!({"tag": "b", "request": "modify"}), 0, |_| {});
    let (set, metrics) = measured(vec![deny, later]);
    let asked = hook(&set, Phase::Request, "write_file", params("write_file"));
    let r = asked.denied.unwrap();
    assert_eq!((r.plugin.as_str(), r.reason.as_str()), ("a.wasm", "a denies tools/call `write_file`"));
    assert_eq!(asked.changed, None);
    assert_eq!(entries(&metrics, "b.wasm", "on_request"), 0, "later plugins are not asked");
}

#[test]
fn audit_mode_runs_the_hook_changes_nothing_and_notes_what_it_would_have_done() {
    let audit = |e: &mut PluginEntry| e.mode = HookMode::Audit;
    let deny = probe("a.wasm", json!({"tag": "a", "request": "deny", "result": "modify"}), 10, audit);
    let (set, metrics) = measured(vec![deny]);
    let asked = hook(&set, Phase::Request, "write_file", params("write_file"));
    assert_eq!((asked.changed, asked.denied), (None, None));
    let note = &asked.notes[0];
    assert_eq!((note.verdict.as_str(), note.mode.as_str(), note.phase.as_str()), ("deny", "audit", "request"));
    let answered = hook(&set, Phase::Result, "write_file", result());
    assert_eq!((answered.changed, answered.notes[0].verdict.as_str()), (None, "modify"));
    let text = metrics.encode();
    assert!(text.contains(r#"plugin="a.wasm",phase="request",verdict="deny",mode="audit"} 1"#), "{text}");
}

#[test]
fn a_trap_passes_when_fail_is_open_and_refuses_when_closed() {
    let open = probe("open.wasm", json!({"request": "trap"}), 0, |e| e.fail = Some(Fail::Open));
    let asked = hook(&PluginSet::new(vec![open]), Phase::Request, "x", params("x"));
    assert_eq!((asked.changed, asked.denied), (None, None));
    assert_eq!(asked.notes[0].verdict, "failed");
    let closed = probe("closed.wasm", json!({"request": "trap"}), 0, |e| e.fail = Some(Fail::Closed));
    let r = hook(&PluginSet::new(vec![closed]), Phase::Request, "x", params("x")).denied.unwrap();
    assert_eq!(r.plugin, "closed.wasm");
    // The trap's text (the plugin's panic message, which may quote what it was reading) stays
    // in the log: the client, and so a model, reads a short reason.
    assert_eq!(r.reason, "plugin failed: it trapped (the router's log has the details)");
    // Without `fail`, on_error says.
    let inherit = probe("inherit.wasm", json!({"result": "trap"}), 0, |e| e.on_error = OnError::Closed);
    assert!(hook(&PluginSet::new(vec![inherit]), Phase::Result, "x", result()).denied.is_some());
}

#[test]
fn a_hook_past_its_deadline_fails_as_fail_says() {
    let spin = |fail| {
        probe("spin.wasm", json!({"result": "spin"}), 0, move |e| {
            e.fail = Some(fail);
            e.deadline_ms = 5;
        })
    };
    let open = hook(&PluginSet::new(vec![spin(Fail::Open)]), Phase::Result, "x", result());
    assert_eq!((open.changed, open.denied), (None, None));
    let r = hook(&PluginSet::new(vec![spin(Fail::Closed)]), Phase::Result, "x", result()).denied.unwrap();
    // deadline_ms and 0.1 ms for the 1 KiB (rounded up) it was handed.
    assert_eq!(r.reason, "plugin failed: it exceeded its deadline of 6 ms");
}

#[test]
fn a_payload_over_the_limit_is_not_handed_in_and_fails_as_fail_says() {
    let small = |fail| {
        probe("small.wasm", json!({"result": "modify"}), 0, move |e| {
            e.fail = Some(fail);
            e.max_payload_kib = 1;
        })
    };
    let big = json!({"content": [{"type": "text", "text": "x".repeat(2000)}]}).to_string();
    let (set, metrics) = measured(vec![small(Fail::Open)]);
    let open = hook(&set, Phase::Result, "x", big.clone());
    assert_eq!((open.changed, open.denied, open.notes[0].verdict.as_str()), (None, None, "failed"));
    assert_eq!(entries(&metrics, "small.wasm", "on_result"), 0, "the plugin was not entered");
    let r = hook(&PluginSet::new(vec![small(Fail::Closed)]), Phase::Result, "x", big).denied.unwrap();
    assert_eq!(r.reason, "plugin failed: it was not handed the result of 2 KiB: it is over its max_payload_kib (1)");
    // Under the limit it runs.
    assert!(hook(&PluginSet::new(vec![small(Fail::Closed)]), Phase::Result, "x", result()).changed.is_some());
}

#[test]
fn calls_outside_the_interest_never_enter_the_plugin() {
    let config = json!({"methods": ["tools/call"], "tools": ["read_*"], "request": "modify", "result": "modify"});
    let (set, metrics) = measured(vec![probe("p.wasm", config, 0, |_| {})]);
    assert!(set.hooked(Phase::Request, "filesystem", "tools/call", Some("read_file")));
    assert!(!set.hooked(Phase::Request, "filesystem", "tools/call", Some("write_file")));
    assert!(!set.hooked(Phase::Result, "filesystem", "resources/read", None));
    let outside = hook(&set, Phase::Request, "write_file", params("write_file"));
    assert_eq!(outside, Hooked::default());
    assert_eq!(entries(&metrics, "p.wasm", "on_request"), 0);
    hook(&set, Phase::Request, "read_file", params("read_file"));
    assert_eq!(entries(&metrics, "p.wasm", "on_request"), 1);
    // Scoped to other servers: not for this one.
    let scoped = probe("s.wasm", json!({}), 0, |e| e.servers = Some(vec!["github".into()]));
    assert!(!PluginSet::new(vec![scoped]).hooked(Phase::Request, "filesystem", "tools/call", Some("x")));
}

#[test]
fn plugins_of_0_1_and_0_2_have_no_hooks_and_0_3_decides_and_lists_as_0_2() {
    let old = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hints-0.1.0.wasm");
    let v1 = load_as("hints.wasm", &old, "{}", 0, OnError::Open);
    let v2 = load_as("tool-filter.wasm", &example("tool-filter.wasm"), "{}", 0, OnError::Open);
    assert_eq!((v1.plugin().contract(), v2.plugin().contract()), (Contract::V1, Contract::V2));
    let set = PluginSet::new(vec![v1, v2]);
    assert!(!set.hooks && !set.hooked(Phase::Request, "filesystem", "tools/call", Some("x")));
    let p = probe("p.wasm", json!({}), 0, |_| {});
    assert_eq!(p.plugin().contract(), Contract::V3);
    let set = PluginSet::new(vec![p]);
    assert!(set.may_hide_or_rename("filesystem"));
    assert_eq!(set.decide(&call("x", "{}")).unwrap(), Decision::default());
}

#[test]
fn a_modify_that_is_not_an_object_or_renames_the_tool_is_a_failure() {
    assert!(hooks_checked(Phase::Request, "tools/call", Some("a"), r#"{"name":"a"}"#).is_ok());
    assert!(hooks_checked(Phase::Request, "tools/call", Some("a"), r#"{"name":"b"}"#).unwrap_err().contains("rename"));
    assert!(hooks_checked(Phase::Result, "tools/call", Some("a"), "[1]").unwrap_err().contains("not an object"));
    assert!(hooks_checked(Phase::Result, "tools/call", Some("a"), "{").unwrap_err().contains("not JSON"));
}

use hooks::checked as hooks_checked;

#[test]
fn plugin_check_says_which_calls_a_0_3_plugin_s_hooks_are_for() {
    let config = r#"{"methods": ["tools/call", "resources/*"], "tools": ["read_*"]}"#;
    let opts = check::Options { config_json: Some(config), ..Default::default() };
    let r = check::run(&fixture("hook-probe.wasm"), &opts);
    r.result.unwrap();
    assert!(r.text.contains("contract: switchyard:policy@0.3.0"), "{}", r.text);
    let line = "hooks:    on-request and on-result for methods [tools/call, resources/*], tools [read_*]";
    assert!(r.text.contains(line), "{}", r.text);
    let r = check::run(
        &fixture("hook-probe.wasm"),
        &check::Options { config_json: Some(r#"{"methods": []}"#), ..Default::default() },
    );
    assert!(r.text.contains("hooks:    none (its interest names no method)"), "{}", r.text);
}

#[test]
fn an_interest_with_an_empty_or_foreign_glob_is_refused_at_load() {
    let bytes = std::fs::read(fixture("hook-probe.wasm")).unwrap();
    for (tools, says) in
        [(json!([""]), "`tools` holds an empty glob"), (json!(["[a-z]*"]), "`tools` glob `[a-z]*` holds `[`")]
    {
        let e = entry("p.wasm", &json!({"tools": tools}).to_string(), 0, OnError::Open);
        let err = format!("{:#}", Loaded::load("p.wasm", &bytes, &e).err().expect("refused"));
        assert!(err.contains("interest: ") && err.contains(says), "{err}");
    }
}
