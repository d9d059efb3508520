//! The example content plugins (`redact`, `result-cap`) under the entry the docs give them:
//! what size of result they handle within the defaults.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::tests::{call, example};
use super::*;
use wasm::HookArgs;

const KEY: &str = "AKIAIOSFODNN7EXAMPLE";

/// A `read_text_file` result of server-filesystem for a file of about `kib` KiB with an AWS key
/// id at its end: the text twice, as content and as structuredContent.
fn file_result(kib: usize) -> String {
    let line = "an ordinary line of a source file, nothing secret in it at all\n";
    let mut text = line.repeat(kib * 1024 / line.len());
    text.push_str(&format!("aws_access_key_id = {KEY}\n"));
    json!({"content": [{"type": "text", "text": text}], "structuredContent": {"content": text}}).to_string()
}

/// `file` loaded with the entry `edit` makes of the defaults (the documented `[[plugins]]`).
fn documented(file: &str, edit: impl FnOnce(&mut PluginEntry)) -> PluginSet {
    let bytes = std::fs::read(example(file)).unwrap();
    let mut e = PluginEntry::defaults_for(file);
    edit(&mut e);
    let loaded = Loaded::load(file, &bytes, &e).unwrap_or_else(|e| panic!("{file} does not load: {e:#}"));
    PluginSet::new(vec![Arc::new(loaded)])
}

fn on_result(set: &PluginSet, result: String) -> Hooked {
    set.hook(Phase::Result, "filesystem", &HookArgs::new(&call("read_text_file", "{}")), result)
}

#[test]
fn redact_under_its_documented_entry_redacts_a_result_as_large_as_its_payload_limit() {
    let set = documented("redact.wasm", |e| e.fail = Some(switchyard_config::Fail::Closed));
    let limit_kib = PluginEntry::defaults_for("x").max_payload_kib as usize;
    // Each copy of the text a little under half the limit (a newline is two bytes in JSON):
    // the whole result just fits.
    let result = file_result(limit_kib * 63 / 128 - 8);
    assert!(result.len() <= limit_kib * 1024);
    let answer = on_result(&set, result);
    assert_eq!(answer.denied, None, "it failed closed instead of answering");
    let new: Value = serde_json::from_str(answer.changed.as_deref().expect("redacted")).unwrap();
    let text = new["content"][0]["text"].as_str().unwrap();
    assert!(!text.contains(KEY) && text.contains("[redacted: aws"), "{}", &text[text.len() - 80..]);
    assert!(!new["structuredContent"]["content"].as_str().unwrap().contains(KEY));
}

/// Prints how long `redact` takes per size of result, and the budget the host gives it:
/// `cargo test -p switchyard-policy [--release] --lib redact_rate -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn redact_rate() {
    for kib in [1, 100, 450, 1024, 2048, 4096, 8192] {
        let result = file_result(kib);
        let len = result.len();
        // The payload limit just above this result: the memory limit that follows from it.
        let set = documented("redact.wasm", |e| e.max_payload_kib = len.div_ceil(1024) as u64);
        let limits = wasm::Limits::from_entry(&PluginEntry::defaults_for("redact.wasm"));
        let _ = on_result(&set, result.clone());
        let started = Instant::now();
        let answer = on_result(&set, result);
        let took = started.elapsed();
        assert!(answer.changed.is_some(), "{kib} KiB: {:?}", answer.denied);
        println!(
            "file {kib} KiB, result {} KiB: {:.1} ms ({:.1} us/KiB), budget {} ms, memory {} MiB",
            len / 1024,
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e6 / (len / 1024) as f64,
            limits.hook_budget_ms(len),
            (16 + len.div_ceil(1024) * switchyard_config::PAYLOAD_MEMORY_FACTOR as usize / 1024)
        );
    }
}
