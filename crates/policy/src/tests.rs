//! Tests of the policy stage against the real example and fixture plugins built by build.rs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::*;
use switchyard_core::decision::{Caller, Concurrency, Retry};

const EXAMPLES: &str = env!("SWITCHYARD_EXAMPLE_PLUGINS");
const FIXTURES: &str = env!("SWITCHYARD_TEST_PLUGINS");

pub(super) fn example(name: &str) -> PathBuf {
    Path::new(EXAMPLES).join(name)
}

pub(super) fn fixture(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(name)
}

pub(super) fn entry(file: &str, config: &str, priority: i32, on_error: OnError) -> PluginEntry {
    let mut e = PluginEntry::defaults_for(file);
    e.config = Some(toml::Value::String(config.to_string()));
    e.priority = priority;
    e.on_error = on_error;
    // Epoch deadlines count wall-clock time: on a busy test machine a thread can be descheduled
    // for longer than 5 ms. Only the deadline tests use the real default (see `spin`).
    e.deadline_ms = 1_000;
    e
}

/// The spin fixture with the default 5 ms deadline.
fn spin_fixture(on_error: OnError) -> Arc<Loaded> {
    let bytes = std::fs::read(fixture("spin.wasm")).unwrap();
    let mut e = PluginEntry::defaults_for("spin.wasm");
    e.on_error = on_error;
    Arc::new(Loaded::load("spin.wasm", &bytes, &e).unwrap())
}

/// Loads one plugin file under the name `name` (chain order ties are broken by name).
pub(super) fn load_as(name: &str, path: &Path, config: &str, priority: i32, on_error: OnError) -> Arc<Loaded> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Arc::new(
        Loaded::load(name, &bytes, &entry(name, config, priority, on_error))
            .unwrap_or_else(|e| panic!("{name} does not load: {e:#}")),
    )
}

pub(super) fn call(tool: &str, args: &str) -> CallInfo {
    CallInfo {
        server: "filesystem".into(),
        session: "s1".into(),
        caller: Default::default(),
        method: "tools/call".into(),
        tool: Some(tool.into()),
        arguments: Some(args.into()),
        declared: Hints::default(),
        attempt: 0,
        task: None,
    }
}

fn keyed(keys: &[&str]) -> Option<Concurrency> {
    Some(Concurrency::Keyed(keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>()))
}

#[test]
fn disabled_policy_is_transparent() {
    let p = Policy::disabled();
    let set = p.current();
    assert!(set.is_empty());
    assert_eq!(set.decide(&call("x", "{}")), Ok(Decision::default()));
    let declared = Hints { read_only: Some(false), ..Hints::default() };
    assert_eq!(set.annotate("s", "x", &declared), declared);
    assert!(p.dir().is_none());
    assert_eq!(*p.changes().borrow(), 0);
}

#[test]
fn each_plugin_sees_the_decision_so_far() {
    let hints = load_as(
        "a-hints.wasm",
        &example("hints.wasm"),
        r#"{"tools":{"read_*":{"readOnlyHint":true}}}"#,
        0,
        OnError::Open,
    );
    let timeouts = load_as(
        "b-timeouts.wasm",
        &example("timeouts.wasm"),
        r#"{"tools":{"read_*":{"timeout_ms":5000,"retry":{"attempts":2,"backoff_ms":100}}}}"#,
        0,
        OnError::Open,
    );
    let set = PluginSet::new(vec![timeouts, hints]);
    assert_eq!(set.names(), ["a-hints.wasm", "b-timeouts.wasm"], "ties are ordered by name");
    let d = set.decide(&call("read_file", r#"{"path":"/a"}"#)).unwrap();
    // timeouts ran second and kept the concurrency that hints set before it.
    assert_eq!(d.concurrency, Some(Concurrency::Shared));
    assert_eq!(d.timeout_ms, Some(5000));
    assert_eq!(d.retry, Some(Retry { attempts: 2, backoff_ms: 100 }));
    let d = set.decide(&call("write_file", "{}")).unwrap();
    assert_eq!(d, Decision::default(), "no rule matches write_file");
}

#[test]
fn the_judges_of_a_server_are_named_with_the_hash_of_their_file() {
    let mut scoped = entry("b-timeouts.wasm", "{}", 0, OnError::Open);
    scoped.servers = Some(vec!["git".into()]);
    let bytes = std::fs::read(example("timeouts.wasm")).unwrap();
    let timeouts = Arc::new(Loaded::load("b-timeouts.wasm", &bytes, &scoped).unwrap());
    let hints = load_as("a-hints.wasm", &example("hints.wasm"), "{}", 0, OnError::Open);
    let set = PluginSet::new(vec![timeouts, hints]);
    let judges = set.judges_of("git");
    let names: Vec<&str> = judges.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["a-hints.wasm", "b-timeouts.wasm"]);
    assert_eq!(judges[1].sha256, switchyard_core::audit::sha256_hex(&bytes));
    // A plugin scoped to other servers judges none of this one's calls.
    let names: Vec<String> = set.judges_of("filesystem").into_iter().map(|j| j.name).collect();
    assert_eq!(names, ["a-hints.wasm"]);
}

#[test]
fn priority_orders_the_chain() {
    // The spin fixture overwrites timeout_ms with 1234 for ordinary calls; timeouts sets 5000.
    // Whichever runs last wins, so the result shows the order.
    let cfg = r#"{"tools":{"*":{"timeout_ms":5000}}}"#;
    let set = PluginSet::new(vec![
        load_as("timeouts.wasm", &example("timeouts.wasm"), cfg, 10, OnError::Open),
        load_as("spin.wasm", &fixture("spin.wasm"), "{}", 0, OnError::Open),
    ]);
    assert_eq!(set.names(), ["timeouts.wasm", "spin.wasm"]);
    assert_eq!(set.decide(&call("x", "{}")).unwrap().timeout_ms, Some(1234));
    let set = PluginSet::new(vec![
        load_as("timeouts.wasm", &example("timeouts.wasm"), cfg, 0, OnError::Open),
        load_as("spin.wasm", &fixture("spin.wasm"), "{}", 10, OnError::Open),
    ]);
    assert_eq!(set.names(), ["spin.wasm", "timeouts.wasm"]);
    assert_eq!(set.decide(&call("x", "{}")).unwrap().timeout_ms, Some(5000));
}

#[test]
fn stop_ends_the_chain_and_reject_names_the_plugin() {
    let set = PluginSet::new(vec![
        load_as("trap.wasm", &fixture("trap.wasm"), "{}", 10, OnError::Open),
        load_as("guard.wasm", &example("guard.wasm"), r#"{"deny":["stop","rm*"]}"#, 0, OnError::Open),
    ]);
    // `stop` from the first plugin: the guard, which would reject `stop`, is never asked.
    let d = set.decide(&call("stop", "{}")).unwrap();
    assert_eq!(d.pool.as_deref(), Some("stopped"));
    let r = set.decide(&call("rm_rf", "{}")).unwrap_err();
    assert_eq!(r.plugin, "guard.wasm");
    assert_eq!(r.reason, "tool `rm_rf` is blocked by policy");

    let guard = load_as(
        "guard.wasm",
        &example("guard.wasm"),
        r#"{"deny":{"delete_*":"deleting is off here"},"reason":"unused"}"#,
        0,
        OnError::Open,
    );
    let set = PluginSet::new(vec![guard]);
    assert_eq!(set.decide(&call("delete_file", "{}")).unwrap_err().reason, "deleting is off here");
    assert!(set.decide(&call("read_file", "{}")).is_ok());
}

#[test]
fn failing_plugin_follows_on_error() {
    let timeouts =
        || load_as("timeouts.wasm", &example("timeouts.wasm"), r#"{"tools":{"*":{"timeout_ms":7}}}"#, 0, OnError::Open);
    let open = PluginSet::new(vec![load_as("trap.wasm", &fixture("trap.wasm"), "{}", 10, OnError::Open), timeouts()]);
    // open: the trapping plugin is skipped, the rest of the chain still runs.
    assert_eq!(open.decide(&call("trap", "{}")).unwrap().timeout_ms, Some(7));

    let closed =
        PluginSet::new(vec![load_as("trap.wasm", &fixture("trap.wasm"), "{}", 10, OnError::Closed), timeouts()]);
    let r = closed.decide(&call("trap", "{}")).unwrap_err();
    assert_eq!(r.plugin, "trap.wasm");
    assert!(r.reason.starts_with("plugin failed: trapped:"), "{}", r.reason);
    // annotate skips a failing plugin whatever its on_error.
    let declared = Hints { title: Some("T".into()), ..Hints::default() };
    assert_eq!(closed.annotate("s", "trap", &declared), declared);
}

#[test]
fn each_plugin_call_is_timed_and_a_failure_counted_by_kind() {
    let metrics = Arc::new(switchyard_core::metrics::Metrics::new(Default::default));
    let timeouts =
        load_as("timeouts.wasm", &example("timeouts.wasm"), r#"{"tools":{"*":{"timeout_ms":7}}}"#, 0, OnError::Open);
    let trap = load_as("trap.wasm", &fixture("trap.wasm"), "{}", 10, OnError::Open);
    let set = PluginSet { metrics: Some(metrics.clone()), ..PluginSet::new(vec![trap, timeouts]) };
    assert_eq!(set.decide(&call("trap", "{}")).unwrap().timeout_ms, Some(7));
    let text = metrics.encode();
    for line in [
        r#"switchyard_plugin_decision_seconds_count{plugin="trap.wasm",op="decide"} 1"#,
        r#"switchyard_plugin_decision_seconds_count{plugin="timeouts.wasm",op="decide"} 1"#,
        r#"switchyard_plugin_failures_total{plugin="trap.wasm",kind="trap"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    }
    assert!(!text.contains(r#"plugin_failures_total{plugin="timeouts.wasm""#), "{text}");
}

#[test]
fn deadline_stops_an_infinite_loop_and_the_next_call_works() {
    let spin = spin_fixture(OnError::Open);
    let args = wasm::CallArgs::new(&call("spin", "{}"));
    let t = Instant::now();
    let e = spin.plugin().decide(&args, &Decision::default()).unwrap_err();
    let took = t.elapsed();
    assert_eq!(e, PluginError::Deadline(5));
    assert!(took >= Duration::from_millis(4), "stopped too early: {took:?}");
    assert!(took < Duration::from_millis(500), "the deadline did not stop it in time: {took:?}");
    let ok = spin.plugin().decide(&wasm::CallArgs::new(&call("x", "{}")), &Decision::default()).unwrap();
    assert_eq!(ok, wasm::Verdict::Continue(Decision { timeout_ms: Some(1234), ..Decision::default() }));
    // Through a closed chain the same failure is a rejection naming the deadline.
    let closed = PluginSet::new(vec![spin_fixture(OnError::Closed)]);
    let r = closed.decide(&call("spin", "{}")).unwrap_err();
    assert_eq!(r.reason, "plugin failed: exceeded its deadline of 5 ms");
}

/// The deadline clock sleeps while no plugin code runs; a call that starts then wakes it, and
/// its deadline still stops it.
#[test]
fn a_deadline_holds_for_a_call_that_starts_while_the_clock_sleeps() {
    let spin = spin_fixture(OnError::Open);
    // Other tests of this process run plugins too: wait for a quiet moment.
    let quiet = Instant::now() + Duration::from_secs(60);
    while !wasm::deadline_clock_asleep() {
        assert!(Instant::now() < quiet, "the deadline clock never went to sleep");
        std::thread::sleep(Duration::from_millis(20));
    }
    // On a thread of its own: a clock that never wakes would leave the call looping for ever.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let t = Instant::now();
        let r = spin.plugin().decide(&wasm::CallArgs::new(&call("spin", "{}")), &Decision::default());
        let _ = tx.send((r, t.elapsed()));
    });
    let (r, took) = rx.recv_timeout(Duration::from_secs(10)).expect("the deadline never stopped the call");
    assert_eq!(r.unwrap_err(), PluginError::Deadline(5));
    assert!(took < Duration::from_millis(500), "the deadline did not stop it in time: {took:?}");
}

#[test]
fn a_trap_discards_the_instance() {
    let trap = load_as("trap.wasm", &fixture("trap.wasm"), "{}", 0, OnError::Open);
    let pool_of = |tool: &str| match trap.plugin().decide(&wasm::CallArgs::new(&call(tool, "{}")), &Decision::default())
    {
        Ok(wasm::Verdict::Continue(d)) => Ok(d.pool.unwrap()),
        Ok(v) => panic!("unexpected {v:?}"),
        Err(e) => Err(e),
    };
    // The instance is reused across calls: its call counter goes up.
    assert_eq!(pool_of("a").unwrap(), "calls-1");
    assert_eq!(pool_of("a").unwrap(), "calls-2");
    assert!(matches!(pool_of("trap"), Err(PluginError::Trap(_))));
    assert_eq!(trap.plugin().warm_count(), 0, "the trapped instance is gone");
    // A fresh instance (counter back at 1) serves the next call.
    assert_eq!(pool_of("a").unwrap(), "calls-1");
    assert_eq!(trap.plugin().warm_count(), 1);
}

#[test]
fn memory_is_bounded() {
    // A generous CPU budget (see `entry`), so the memory limit is what stops it.
    let mut e = entry("trap.wasm", "{}", 0, OnError::Open);
    e.max_payload_kib = 64;
    let trap = Loaded::load("trap.wasm", &std::fs::read(fixture("trap.wasm")).unwrap(), &e).unwrap();
    let args = wasm::CallArgs::new(&call("alloc", "{}"));
    assert_eq!(trap.plugin().decide(&args, &Decision::default()).unwrap_err(), PluginError::OutOfMemory(17));
    assert!(trap.plugin().decide(&wasm::CallArgs::new(&call("a", "{}")), &Decision::default()).is_ok());
}

#[test]
fn broken_files_are_refused_with_a_reason() {
    let load = |bytes: &[u8], config: &str| {
        Loaded::load("bad.wasm", bytes, &entry("bad.wasm", config, 0, OnError::Open))
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let wrong = std::fs::read(fixture("wrong-interface.wasm")).unwrap();
    let e = format!("{:#}", Loaded::load("w.wasm", &wrong, &PluginEntry::defaults_for("w.wasm")).err().unwrap());
    assert!(e.contains("wrong interface"), "{e}");
    let e = load(b"not wasm at all", "{}");
    assert!(e.contains("not a loadable WebAssembly component") && e.contains("not WebAssembly at all"), "{e}");
    assert!(!e.contains('\n'), "one line, not a dump of bytes: {e}");
    let trap = std::fs::read(fixture("trap.wasm")).unwrap();
    let e = load(&trap, r#"{"fail": "no config for me"}"#);
    assert!(e.contains("init failed") && e.contains("no config for me"), "{e}");
    // Example plugins validate their config in init.
    let hints = std::fs::read(example("hints.wasm")).unwrap();
    let e = load(&hints, r#"{"tools":{"x":{"readOnly":true}}}"#);
    assert!(e.contains("unknown hint `readOnly`"), "{e}");
    // Every example refuses a key it does not know, naming it.
    for (file, config, key) in [
        ("hints.wasm", r#"{"toolz":{}}"#, "toolz"),
        ("guard.wasm", r#"{"denny":["delete_*"]}"#, "denny"),
        ("timeouts.wasm", r#"{"tools":{},"timeout":5}"#, "timeout"),
        ("fs-keys.wasm", r#"{"write":["x"]}"#, "write"),
        ("template.wasm", r#"{"some":"setting"}"#, "some"),
    ] {
        let e = load(&std::fs::read(example(file)).unwrap(), config);
        assert!(e.contains("init failed") && e.contains(key), "{file}: {e}");
    }
}

#[test]
fn fs_keys_serialises_writes_per_path() {
    let set = PluginSet::new(vec![load_as("fs-keys.wasm", &example("fs-keys.wasm"), "{}", 0, OnError::Open)]);
    let d = |tool: &str, args: &str| set.decide(&call(tool, args)).unwrap().concurrency;
    assert_eq!(d("read_text_file", r#"{"path":"/a"}"#), Some(Concurrency::Shared));
    assert_eq!(d("list_directory", r#"{"path":"/a"}"#), Some(Concurrency::Shared));
    assert_eq!(d("write_file", r#"{"path":"/w/./x//y.txt","content":"hi"}"#), keyed(&["/w/x/y.txt"]));
    assert_eq!(d("move_file", r#"{"source":"/w/a/../b","destination":"/w/c/"}"#), keyed(&["/w/b", "/w/c"]));
    assert_eq!(d("edit_file", r#"{"paths":["/b","/a","/b"]}"#), keyed(&["/a", "/b"]));
    assert_eq!(d("write_file", "{}"), Some(Concurrency::Exclusive), "no path: the safe choice");
    assert_eq!(d("start_process", "{}"), None, "other tools are left alone");

    let custom = PluginSet::new(vec![load_as(
        "fs-keys.wasm",
        &example("fs-keys.wasm"),
        r#"{"writes":["put_*"],"reads":["get_*"],"path_args":["file"]}"#,
        0,
        OnError::Open,
    )]);
    assert_eq!(custom.decide(&call("put_object", r#"{"file":"k"}"#)).unwrap().concurrency, keyed(&["k"]));
    assert_eq!(custom.decide(&call("get_object", "{}")).unwrap().concurrency, Some(Concurrency::Shared));
    assert_eq!(custom.decide(&call("write_file", "{}")).unwrap().concurrency, None);
}

const TOOLS_LIST: &str = r#"{"tools":[{"name":"read_file","description":"Read a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]},"execution":{"taskSupport":"optional"}},{"name":"write_file","title":"Write","inputSchema":{"type":"object"},"annotations":{"destructiveHint":true,"x-vendor":1.50}},{"name":"list_directory","annotations":{"readOnlyHint":true},"inputSchema":{"type":"object"}}],"nextCursor":"abc","_meta":{"k":[1,2,3]}}"#;

#[tokio::test]
async fn tools_list_is_rewritten_with_the_chains_hints() {
    let hints = load_as(
        "hints.wasm",
        &example("hints.wasm"),
        r#"{"tools":{"read_*":{"readOnlyHint":true,"idempotentHint":true,"title":"Read"},"write_file":{"destructiveHint":false},"list_*":{"readOnlyHint":true}}}"#,
        0,
        OnError::Open,
    );
    let set = Arc::new(PluginSet::new(vec![hints]));
    let out = annotate::rewrite_tools_list(&set, "s1", &Caller::default(), "filesystem", TOOLS_LIST)
        .await
        .unwrap()
        .result
        .expect("changed");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let tools = v["tools"].as_array().unwrap();
    assert_eq!(
        tools[0]["annotations"],
        serde_json::json!({"readOnlyHint": true, "idempotentHint": true, "title": "Read"})
    );
    assert_eq!(tools[0]["execution"]["taskSupport"], "optional", "unknown newer fields survive");
    assert_eq!(tools[1]["annotations"]["destructiveHint"], false);
    assert_eq!(tools[1]["annotations"]["x-vendor"], 1.5, "other annotation fields survive");
    // Unchanged parts are copied byte for byte: the third tool and the tail.
    assert!(
        out.contains(
            r#"{"name":"list_directory","annotations":{"readOnlyHint":true},"inputSchema":{"type":"object"}}"#
        )
    );
    assert!(out.ends_with(r#""nextCursor":"abc","_meta":{"k":[1,2,3]}}"#), "{out}");
    assert!(out.contains(r#"{"name":"write_file","title":"Write","inputSchema":{"type":"object"},"annotations":{"#));

    let nothing = Arc::new(PluginSet::new(vec![load_as(
        "hints.wasm",
        &example("hints.wasm"),
        r#"{"tools":{"list_*":{"readOnlyHint":true}}}"#,
        0,
        OnError::Open,
    )]));
    assert_eq!(
        annotate::rewrite_tools_list(&nothing, "s1", &Caller::default(), "filesystem", TOOLS_LIST)
            .await
            .unwrap()
            .result,
        None
    );
    let empty = Arc::new(PluginSet::empty());
    assert_eq!(
        annotate::rewrite_tools_list(&empty, "s1", &Caller::default(), "filesystem", TOOLS_LIST).await.unwrap().result,
        None
    );
    assert!(annotate::rewrite_tools_list(&set, "s1", &Caller::default(), "filesystem", "{").await.is_err());
}

#[test]
fn declared_hints_read_the_spec_names() {
    let a = serde_json::json!({"readOnlyHint": true, "destructiveHint": false, "title": "T", "openWorldHint": "nope"});
    let h = annotate::declared_hints(Some(&a));
    assert_eq!(h.read_only, Some(true));
    assert_eq!(h.destructive, Some(false));
    assert_eq!(h.idempotent, None);
    assert_eq!(h.open_world, None, "a non-boolean is not a hint");
    assert_eq!(h.title.as_deref(), Some("T"));
    assert_eq!(annotate::declared_hints(None), Hints::default());
}

fn checked(file: &Path, config: Option<&str>, call: Option<&str>) -> check::Report {
    check::run(file, &check::Options { config_json: config, config_file: None, call_json: call, bench: 0 })
}

#[test]
fn plugin_check_shows_the_start_of_a_fresh_instance_and_times_decide_when_asked() {
    // Epoch deadlines count wall-clock time: one of 50 calls on a busy test machine can miss the
    // default 5 ms, and the deadline is not what this test is about.
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("switchyard.toml");
    std::fs::write(&toml, "[[plugins]]\nfile = \"template.wasm\"\ndeadline_ms = 1000\n").unwrap();
    let opts = check::Options { bench: 50, config_file: Some(&toml), ..check::Options::default() };
    let r = check::run(&example("template.wasm"), &opts);
    r.result.unwrap();
    assert!(r.text.contains("instance: a fresh one instantiated and init-ed in "), "{}", r.text);
    assert!(r.text.contains("bench:    decide x50: p50 "), "{}", r.text);
    let r = checked(&example("template.wasm"), None, None);
    assert!(!r.text.contains("bench:"), "{}", r.text);
}

#[test]
fn plugin_check_explains_and_names_broken_files() {
    let r = checked(&example("hints.wasm"), Some(r#"{"tools":{"example":{"readOnlyHint":true}}}"#), None);
    r.result.unwrap();
    assert!(r.text.contains("list:     tool `example` shown, annotations {} -> {readOnlyHint=true}"), "{}", r.text);
    let r = checked(&example("fs-keys.wasm"), None, Some(r#"{"tool":"write_file","arguments":{"path":"/x"}}"#));
    r.result.unwrap();
    assert!(r.text.contains("continue {concurrency=keyed[/x]}"), "{}", r.text);
    let e = format!("{:#}", checked(&fixture("wrong-interface.wasm"), None, None).result.unwrap_err());
    assert!(e.contains("wrong-interface.wasm") && e.contains("wrong interface"), "{e}");
    let e = format!("{:#}", checked(&fixture("spin.wasm"), None, Some(r#"{"tool":"spin"}"#)).result.unwrap_err());
    assert!(e.contains("spin.wasm") && e.contains("deadline"), "{e}");
    assert!(checked(&example("hints.wasm"), Some("{nope"), None).result.is_err());
    // A field the call does not have is an error, not silently ignored (`declared` was once
    // documented for what is read from `annotations`).
    let e = format!("{:#}", checked(&example("hints.wasm"), None, Some(r#"{"declared":{}}"#)).result.unwrap_err());
    assert!(e.contains("unknown field `declared`") && e.contains("annotations"), "{e}");
}

#[test]
fn plugin_check_shows_what_the_plugin_printed_and_why_it_panicked() {
    let r = checked(&fixture("noisy.wasm"), Some(r#"{"panic_in_decide":"boom"}"#), Some(r#"{"tool":"fine"}"#));
    r.result.unwrap();
    assert!(r.text.contains("plugin stdout: noisy: init (stdout)"), "{}", r.text);
    assert!(r.text.contains("plugin stderr: noisy: decide fine (stderr)"), "{}", r.text);
    assert!(r.text.contains("plugin stdout: noisy: annotate fine (stdout)"), "{}", r.text);
    let r = checked(&fixture("noisy.wasm"), Some(r#"{"panic_in_decide":"boom"}"#), Some(r#"{"tool":"boom"}"#));
    let e = format!("{:#}", r.result.unwrap_err());
    assert!(e.contains("decide failed") && e.contains("noisy panics in decide for boom"), "{e}");
    assert!(r.text.contains("plugin stderr: noisy panics in decide for boom"), "{}", r.text);
    let r = checked(&fixture("noisy.wasm"), Some(r#"{"panic_in_annotate":"boom"}"#), Some(r#"{"tool":"boom"}"#));
    let e = format!("{:#}", r.result.unwrap_err());
    assert!(e.contains("annotate failed") && e.contains("noisy panics in annotate for boom"), "{e}");
    // The log lines of `log` show too.
    let r = checked(&example("hints.wasm"), None, None);
    assert!(r.text.contains("plugin log warn: no `tools` configured"), "{}", r.text);
}

#[test]
fn plugin_check_takes_the_config_of_a_plugins_entry() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("switchyard.toml");
    std::fs::write(&toml, "[[plugins]]\nfile = \"guard.wasm\"\nconfig = { deny = [\"ex*\"] }\n").unwrap();
    let opts = check::Options { config_json: None, config_file: Some(&toml), call_json: None, bench: 0 };
    let r = check::run(&example("guard.wasm"), &opts);
    r.result.unwrap();
    assert!(r.text.contains("reject: tool `example` is blocked by policy"), "{}", r.text);
    let e = format!("{:#}", check::run(&example("hints.wasm"), &opts).result.unwrap_err());
    assert!(e.contains("no [[plugins]] entry") && e.contains("hints.wasm"), "{e}");
}

#[test]
fn embedded_examples_are_components() {
    assert_eq!(embedded::EXAMPLES.len(), 11);
    assert!(embedded::EXAMPLES.iter().any(|(n, _)| *n == "template.wasm"), "the docs list the template");
    for (name, bytes) in embedded::EXAMPLES {
        assert!(name.ends_with(".wasm"));
        assert_eq!(&bytes[..4], b"\0asm", "{name}");
        assert_ne!(&bytes[4..8], &[1, 0, 0, 0], "{name} is a component, not a core module");
    }
}

/// Polls until `pred` holds on the set in force (the watcher debounces for 250 ms).
pub(super) async fn wait_for(policy: &Policy, what: &str, pred: impl Fn(&PluginSet) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !pred(&policy.current()) {
        assert!(Instant::now() < deadline, "timed out waiting for: {what} (set: {:?})", policy.current().names());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes beside the target and renames into place, as careful deploy tools do.
pub(super) fn replace(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{name}.part"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// An entry with `{}` as config for a file that may be absent (`required = false`).
pub(super) fn optional(file: &str) -> PluginEntry {
    let mut e = entry(file, "{}", 0, OnError::Open);
    e.required = false;
    e
}

pub(super) fn rejects(set: &PluginSet, tool: &str) -> bool {
    set.decide(&call(tool, "{}")).is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_follows_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.plugins.push(entry("guard.wasm", r#"{"deny":["rm*"]}"#, 0, OnError::Open));
    // Dropped in later: an entry that does not require it.
    config.plugins.push(optional("hints.wasm"));
    // A required plugin must be there at start (or it refuses every call): the trap fixture (which accepts any config
    // and refuses nothing) stands in for the guard until the real one is dropped in.
    std::fs::copy(fixture("trap.wasm"), dir.path().join("guard.wasm")).unwrap();
    let shutdown = CancellationToken::new();
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), shutdown.clone()).await.unwrap();
    assert_eq!(policy.current().names(), ["guard.wasm"]);
    assert!(!rejects(&policy.current(), "rm"));
    assert_eq!(policy.dir(), Some(dir.path().canonicalize().unwrap().as_path()));
    let changes = policy.changes();

    // Modify (rename into place): the real guard, with the [[plugins]] entry's config.
    replace(dir.path(), "guard.wasm", &std::fs::read(example("guard.wasm")).unwrap());
    wait_for(&policy, "guard in place", |s| rejects(s, "rm")).await;
    // The set is stored before the generation is bumped (watchers must find the new set when
    // woken): on another thread the bump may land a moment after the set is seen.
    let end = std::time::Instant::now() + Duration::from_secs(2);
    while *changes.borrow() == 0 && std::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let gen_after_create = *changes.borrow();
    assert!(gen_after_create >= 1);

    // Under steady load, replacing the file loses and fails no call.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let load = {
        let (policy, stop, calls) = (policy.clone(), stop.clone(), calls.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let set = policy.current();
                set.decide(&call("read_file", "{}")).expect("no call fails during a reload");
                calls.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    // Modify again: back to the stand-in.
    let before = policy.current();
    replace(dir.path(), "guard.wasm", &std::fs::read(fixture("trap.wasm")).unwrap());
    wait_for(&policy, "stand-in in place of guard", |s| !rejects(s, "rm")).await;
    assert!(rejects(&before, "rm"), "a request that started on the old set keeps it");

    // A broken file leaves the last good version of that plugin in force, and no swap happens.
    // (The generation is read once the last swap's bump has surely landed; see above.)
    tokio::time::sleep(Duration::from_millis(100)).await;
    let generation = *changes.borrow();
    std::fs::write(dir.path().join("guard.wasm"), b"garbage, not wasm").unwrap();
    std::fs::copy(fixture("wrong-interface.wasm"), dir.path().join("other.wasm")).unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(policy.current().names(), ["guard.wasm"]);
    assert!(!rejects(&policy.current(), "rm"), "still the stand-in");
    assert_eq!(*changes.borrow(), generation, "nothing was swapped in");

    // Create a second plugin; the broken guard.wasm stays at its last good version. (other.wasm,
    // without an entry, is not applied.)
    std::fs::copy(example("hints.wasm"), dir.path().join("hints.wasm")).unwrap();
    wait_for(&policy, "hints added", |s| s.names() == ["guard.wasm", "hints.wasm"]).await;

    // Fix the file: the real guard comes back.
    replace(dir.path(), "guard.wasm", &std::fs::read(example("guard.wasm")).unwrap());
    wait_for(&policy, "guard back", |s| rejects(s, "rm")).await;

    // Rewriting identical bytes changes nothing (same hash: not recompiled, not swapped).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let generation = *changes.borrow();
    std::fs::write(dir.path().join("hints.wasm"), std::fs::read(example("hints.wasm")).unwrap()).unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(*changes.borrow(), generation);

    // Delete: a plugin whose entry does not require it goes; one whose entry does stays in
    // force (the log says so).
    std::fs::remove_file(dir.path().join("hints.wasm")).unwrap();
    std::fs::remove_file(dir.path().join("guard.wasm")).unwrap();
    wait_for(&policy, "hints removed", |s| s.names() == ["guard.wasm"]).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(rejects(&policy.current(), "rm"), "the configured guard is still in force");

    stop.store(true, Ordering::Relaxed);
    load.join().expect("the load thread saw no failure");
    assert!(calls.load(Ordering::Relaxed) > 100, "the load really ran");
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_survives_the_directory_being_deleted_renamed_or_replaced() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    let config =
        Config { plugins: ["hints.wasm", "timeouts.wasm", "fs-keys.wasm"].map(optional).to_vec(), ..Config::default() };
    let shutdown = CancellationToken::new();
    let policy = Policy::start(&config, Some(dir.clone()), shutdown.clone()).await.unwrap();
    // Deleted and created again: a plugin dropped in afterwards is applied.
    std::fs::remove_dir(&dir).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    std::fs::create_dir(&dir).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    std::fs::copy(example("hints.wasm"), dir.join("hints.wasm")).unwrap();
    wait_for(&policy, "hints in the recreated directory", |s| s.names() == ["hints.wasm"]).await;

    // Renamed away, and another directory renamed into its place (a deploy swapping releases).
    let next = root.path().join("next");
    std::fs::create_dir(&next).unwrap();
    std::fs::copy(example("hints.wasm"), next.join("hints.wasm")).unwrap();
    std::fs::copy(example("timeouts.wasm"), next.join("timeouts.wasm")).unwrap();
    std::fs::rename(&dir, root.path().join("old")).unwrap();
    std::fs::rename(&next, &dir).unwrap();
    wait_for(&policy, "the swapped-in directory", |s| s.names() == ["hints.wasm", "timeouts.wasm"]).await;
    // And it is watched: a file dropped into the new directory is applied.
    std::fs::copy(example("fs-keys.wasm"), dir.join("fs-keys.wasm")).unwrap();
    wait_for(&policy, "fs-keys in the swapped-in directory", |s| s.names().len() == 3).await;
    // Files changed in the old, renamed directory do not count.
    std::fs::remove_file(root.path().join("old/hints.wasm")).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(policy.current().names().len(), 3);
    shutdown.cancel();
}

/// At start a plugin applies under its entry only: files without one are not applied, and a
/// broken one whose entry lets it be left out is left out; each is a problem with its sentence.
#[tokio::test]
async fn start_applies_what_the_entries_name_and_lists_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(example("hints.wasm"), dir.path().join("hints.wasm")).unwrap();
    std::fs::copy(example("timeouts.wasm"), dir.path().join("timeouts.wasm")).unwrap();
    std::fs::copy(fixture("wrong-interface.wasm"), dir.path().join("broken.wasm")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a plugin").unwrap();
    // Plugins beside the config file when no --plugins is given; a missing one is created.
    let mut config = Config { base_dir: Some(dir.path().join("conf")), ..Config::default() };
    let shutdown = CancellationToken::new();
    let beside = Policy::start(&config, None, shutdown.clone()).await.unwrap();
    assert!(dir.path().join("conf/plugins").is_dir());
    assert!(beside.current().is_empty() && beside.problems().is_empty());

    config.plugins.push(entry("timeouts.wasm", r#"{"tools":{"*":{"timeout_ms":42}}}"#, 5, OnError::Open));
    config.plugins.push(optional("broken.wasm"));
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), shutdown.clone()).await.unwrap();
    let set = policy.current();
    assert_eq!(set.names(), ["timeouts.wasm"], "hints.wasm has no entry; broken.wasm does not load");
    assert_eq!(set.decide(&call("x", "{}")).unwrap().timeout_ms, Some(42));
    let problems = policy.problems();
    let found: Vec<(&str, problems::Effect)> = problems.iter().map(|p| (p.plugin.as_str(), p.effect)).collect();
    use problems::Effect::NotApplied;
    assert_eq!(found, [("broken.wasm", NotApplied), ("hints.wasm", NotApplied)]);
    let [broken, hints] = &problems[..] else { unreachable!() };
    assert!(broken.sentence.contains("does not implement switchyard:policy"), "{}", broken.sentence);
    assert!(broken.detail.as_deref().is_some_and(|d| d.contains("wrong interface")), "{broken:?}");
    let named = format!("plugin {} has no [[plugins]] entry", dir.path().join("hints.wasm").display());
    assert!(hints.sentence.starts_with(&named) && hints.sentence.contains(r#"file = "hints.wasm""#), "{hints}");
    assert!(hints.to_string().ends_with("calls go on without it"), "{hints}");
    shutdown.cancel();
}

/// A plugin that must run and cannot (file missing, not WebAssembly, `init` refuses its
/// config) no longer stops the start: the calls it would judge, on the servers its entry names,
/// are refused with one sentence naming the file, what is wrong and the fix.
#[tokio::test]
async fn a_required_plugin_that_cannot_run_refuses_the_calls_it_judges() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(example("guard.wasm"), dir.path().join("guard.wasm")).unwrap();
    let shutdown = CancellationToken::new();
    let start = |plugins: Vec<PluginEntry>| {
        let config = Config { plugins, ..Config::default() };
        let (dir, shutdown) = (dir.path().to_path_buf(), shutdown.clone());
        async move { Policy::start(&config, Some(dir), shutdown).await.unwrap() }
    };
    let refusal = |policy: &Policy, server: &str| {
        let mut c = call("read_file", "{}");
        c.server = server.into();
        policy.current().decide(&c).err().map(|r| format!("{}: {}", r.plugin, r.reason))
    };
    // The file is missing; the entry is for `fs` only.
    let mut missing = entry("gaurd.wasm", r#"{"deny":["delete_*"]}"#, 0, OnError::Open);
    missing.servers = Some(vec!["fs".to_string()]);
    let policy = start(vec![missing]).await;
    let r = refusal(&policy, "fs").expect("refused on fs");
    let named = format!("gaurd.wasm: plugin {} does not exist", dir.path().join("gaurd.wasm").display());
    assert!(r.starts_with(&named) && r.contains("remove its [[plugins]] entry"), "{r}");
    assert_eq!(refusal(&policy, "github"), None, "a server it is not for runs its calls");
    let found = policy.problems();
    let p = found.iter().find(|p| p.plugin == "gaurd.wasm").expect("a problem");
    assert_eq!((p.effect, p.servers.as_deref()), (problems::Effect::Refuses, Some(&["fs".to_string()][..])));
    assert!(p.to_string().ends_with("the calls it judges on fs are refused until it loads"), "{p}");
    // init refuses the config (a typo in a key), whatever on_error says.
    for on_error in [OnError::Open, OnError::Closed] {
        let policy = start(vec![entry("guard.wasm", r#"{"denny":["delete_*"]}"#, 0, on_error)]).await;
        let r = refusal(&policy, "fs").expect("refused");
        assert!(r.contains("guard.wasm refused its config (") && r.contains("unknown key `denny`"), "{r}");
        assert!(r.ends_with("correct the `config` of its [[plugins]] entry"), "{r}");
    }
    let good = start(vec![entry("guard.wasm", r#"{"deny":["delete_*"]}"#, 0, OnError::Closed)]).await;
    assert!(refusal(&good, "fs").is_none());
    assert!(good.problems().iter().all(|p| p.plugin != "guard.wasm"), "{:?}", good.problems());
    // A file that is not WebAssembly: one line, one sentence, without the file's bytes.
    std::fs::write(dir.path().join("bytes.wasm"), [0x8f_u8, 0xfe, 0x00, 0x1b, 0x9c].repeat(60)).unwrap();
    let r = refusal(&start(vec![entry("bytes.wasm", "{}", 0, OnError::Open)]).await, "fs").expect("refused");
    let named = format!("bytes.wasm: plugin {} is not WebAssembly", dir.path().join("bytes.wasm").display());
    assert!(r.starts_with(&named), "{r}");
    assert!(r.is_ascii() && !r.contains('\n') && r.len() < 400, "{r:?}");
    // An entry that only configures a file for when it is dropped in is no problem.
    let later = start(vec![optional("later.wasm")]).await;
    assert!(later.current().is_empty());
    assert!(later.problems().iter().all(|p| p.effect == problems::Effect::NotApplied && p.plugin != "later.wasm"));
    shutdown.cancel();
}

/// A configured plugin with on_error = closed that is dropped in broken, with no earlier
/// version to keep, rejects the calls it would judge until a good version arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_plugin_that_does_not_load_rejects_until_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut later = entry("later.wasm", r#"{"deny":["rm*"]}"#, 0, OnError::Closed);
    later.required = false;
    let config = Config { plugins: vec![later], ..Config::default() };
    let shutdown = CancellationToken::new();
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), shutdown.clone()).await.unwrap();
    assert!(policy.current().is_empty(), "not there yet, and not required");
    std::fs::write(dir.path().join("later.wasm"), b"not a component").unwrap();
    wait_for(&policy, "the broken plugin in the chain", |s| s.names() == ["later.wasm"]).await;
    let r = policy.current().decide(&call("read_file", "{}")).unwrap_err();
    assert_eq!(r.plugin, "later.wasm");
    // One sentence: the file, what is wrong, the fix; not the file's bytes (the log has them).
    let named = format!("plugin {} is not WebAssembly", dir.path().join("later.wasm").display());
    assert!(r.reason.starts_with(&named) && r.reason.contains("`switchyard plugin build`"), "{}", r.reason);
    assert!(!r.reason.contains("not a component") && r.reason.len() < 300, "{}", r.reason);
    replace(dir.path(), "later.wasm", &std::fs::read(example("guard.wasm")).unwrap());
    wait_for(&policy, "the good version", |s| s.decide(&call("read_file", "{}")).is_ok()).await;
    assert!(rejects(&policy.current(), "rm"), "the guard with the entry's config");
    shutdown.cancel();
}

/// A bug once: plugin output from inside the async runtime made the host
/// panic ("Cannot start a runtime from within a runtime") and lost the call. Through
/// `decide_async`, on the current-thread runtime the router uses, every call is answered.
#[tokio::test]
async fn printing_and_panicking_plugins_answer_every_call_inside_the_runtime() {
    // Loading runs `init`, which prints: like the router, load off the runtime thread.
    let noisy = |on_error| {
        std::thread::spawn(move || {
            let config = r#"{"panic_in_decide":"boom","panic_in_annotate":"boom"}"#;
            load_as("noisy.wasm", &fixture("noisy.wasm"), config, 0, on_error)
        })
        .join()
        .unwrap()
    };
    let open = Arc::new(PluginSet::new(vec![noisy(OnError::Open)]));
    let closed = Arc::new(PluginSet::new(vec![noisy(OnError::Closed)]));
    for _ in 0..50 {
        assert_eq!(open.decide_async(&call("fine", "{}")).await, Ok(Decision::default()));
        assert_eq!(open.decide_async(&call("boom", "{}")).await, Ok(Decision::default()), "skipped");
        assert!(closed.decide_async(&call("fine", "{}")).await.is_ok());
        let r = closed.decide_async(&call("boom", "{}")).await.unwrap_err();
        assert!(r.reason.contains("trapped") && r.reason.contains("noisy panics in decide for boom"), "{}", r.reason);
    }
    let declared = Hints { title: Some("T".into()), ..Hints::default() };
    let asked = vec![("boom".to_string(), declared.clone()), ("fine".to_string(), declared.clone())];
    assert_eq!(closed.annotate_async("s1", "srv", asked).await, [declared.clone(), declared]);
}

/// A plugin that always runs into its deadline is switched off after a few calls, so the
/// rest fail at once (on_error applies) instead of each burning a whole CPU budget.
#[tokio::test]
async fn a_plugin_that_keeps_hitting_its_deadline_is_switched_off() {
    for on_error in [OnError::Open, OnError::Closed] {
        let set = Arc::new(PluginSet::new(vec![spin_fixture(on_error)]));
        let started = Instant::now();
        let mut answers = Vec::new();
        for _ in 0..200 {
            answers.push(set.decide_async(&call("spin", "{}")).await);
        }
        let took = started.elapsed();
        // 200 deadlines of 5 ms would take a second; the breaker stops it after five.
        assert!(took < Duration::from_millis(800), "{on_error:?}: took {took:?}");
        match on_error {
            OnError::Open => assert!(answers.iter().all(|a| a.is_ok())),
            OnError::Closed => {
                let last = answers.last().unwrap().as_ref().unwrap_err();
                assert!(last.reason.contains("switched off"), "{}", last.reason);
            }
        }
    }
}

/// Measures what the worker thread adds to one plugin call: the same chain (the template
/// plugin) decided on this thread and through [`PluginSet::decide_async`] on a current-thread
/// runtime, as the router runs it. Not a pass/fail test: run it by hand with
/// `cargo test --lib -- --ignored --nocapture worker_hop_cost` (numbers from a debug build
/// overstate the host-side code, not the thread hand-over).
#[test]
#[ignore]
fn worker_hop_cost() {
    let set =
        Arc::new(PluginSet::new(vec![load_as("template.wasm", &example("template.wasm"), "{}", 0, OnError::Open)]));
    let c = call("read_file", r#"{"path":"/a"}"#);
    let percentiles = |mut v: Vec<Duration>| {
        v.sort();
        (v[v.len() / 2], v[v.len() * 9 / 10], v[v.len() * 99 / 100])
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for round in 0..3 {
        let mut here = Vec::new();
        for _ in 0..2000 {
            let t = Instant::now();
            set.decide(&c).unwrap();
            here.push(t.elapsed());
        }
        let mut hop = Vec::new();
        rt.block_on(async {
            for _ in 0..2000 {
                let t = Instant::now();
                set.decide_async(&c).await.unwrap();
                hop.push(t.elapsed());
            }
        });
        let empty = Arc::new(PluginSet::empty());
        let mut none = Vec::new();
        rt.block_on(async {
            for _ in 0..2000 {
                let t = Instant::now();
                empty.decide_async(&c).await.unwrap();
                none.push(t.elapsed());
            }
        });
        println!(
            "round {round}: (p50, p90, p99) on this thread {:?}, via the worker {:?}, empty chain {:?}",
            percentiles(here),
            percentiles(hop),
            percentiles(none)
        );
    }
}

/// A plugin path that never ends (`/dev/zero`) is refused at the size limit, with the file and
/// the limit named, instead of being read until memory runs out; a real plugin still reads.
#[test]
fn plugin_files_are_read_up_to_a_limit() {
    let started = Instant::now();
    let e = reload::read_plugin_file(Path::new("/dev/zero")).unwrap_err().to_string();
    assert!(e.contains("/dev/zero") && e.contains("64 MiB"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let hints = reload::read_plugin_file(&example("hints.wasm")).unwrap();
    assert_eq!(hints, std::fs::read(example("hints.wasm")).unwrap());
    let missing = reload::read_plugin_file(Path::new("/nonexistent/x.wasm")).unwrap_err();
    assert!(format!("{missing:#}").contains("cannot read /nonexistent/x.wasm"), "{missing:#}");
}
