//! Tests of `[[plugins]]` entries applied to a running policy ([`Policy::set_entries`]), of
//! plugins without an entry, and of [`problems::check`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::problems::Effect;
use super::tests::{call, entry, example, optional, rejects, wait_for};
use super::*;
use switchyard_core::decision::Caller;

/// The plugin of the chain named `name`.
fn member(set: &PluginSet, name: &str) -> Arc<Loaded> {
    set.chain.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name} not in {:?}", set.names())).clone()
}

fn effects(policy: &Policy) -> Vec<(String, Effect)> {
    policy.problems().iter().map(|p| (p.plugin.clone(), p.effect)).collect()
}

/// A changed entry loads its plugin again with it, and only that plugin; a new entry loads its
/// plugin; a config the plugin's `init` refuses keeps its last good version in force; a removed
/// entry's plugin is no longer applied, though its file stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_apply_live_and_only_changed_plugins_load_again() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["guard.wasm", "hints.wasm", "timeouts.wasm"] {
        std::fs::copy(example(name), dir.path().join(name)).unwrap();
    }
    let guard = |deny: &str| entry("guard.wasm", &format!(r#"{{"deny":["{deny}"]}}"#), 0, OnError::Open);
    let hints = entry("hints.wasm", r#"{"tools":{"read_*":{"readOnlyHint":true}}}"#, 0, OnError::Open);
    let config = Config { plugins: vec![guard("rm*"), hints.clone()], ..Config::default() };
    let shutdown = CancellationToken::new();
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), shutdown.clone()).await.unwrap();
    let before = policy.current();
    assert!(rejects(&before, "rm") && !rejects(&before, "ls"));

    policy.set_entries(vec![guard("ls"), hints.clone()]).await;
    let after = policy.current();
    assert!(rejects(&after, "ls") && !rejects(&after, "rm"), "the guard runs with its new config");
    assert!(Arc::ptr_eq(&member(&before, "hints.wasm"), &member(&after, "hints.wasm")), "hints was left as it was");
    assert!(rejects(&before, "rm"), "a call that started on the old set keeps it");
    assert_eq!(policy.entries().len(), 2);

    // A new entry: its plugin loads, with the entry's config and priority.
    let mut timeouts = entry("timeouts.wasm", r#"{"tools":{"*":{"timeout_ms":7}}}"#, 9, OnError::Open);
    policy.set_entries(vec![guard("ls"), hints.clone(), timeouts.clone()]).await;
    assert_eq!(policy.current().names(), ["timeouts.wasm", "guard.wasm", "hints.wasm"]);
    assert_eq!(policy.current().decide(&call("x", "{}")).unwrap().timeout_ms, Some(7));
    // Scoped to another server: the calls of `filesystem` go without it.
    timeouts.servers = Some(vec!["other".to_string()]);
    policy.set_entries(vec![guard("ls"), hints.clone(), timeouts.clone()]).await;
    assert_eq!(policy.current().decide(&call("x", "{}")).unwrap().timeout_ms, None);

    // A config its init refuses: the last good version stays in force, and says why.
    let typo = entry("guard.wasm", r#"{"denny":["cat"]}"#, 0, OnError::Open);
    policy.set_entries(vec![typo, hints.clone(), timeouts.clone()]).await;
    assert!(rejects(&policy.current(), "ls") && !rejects(&policy.current(), "cat"));
    let [p] = &policy.problems()[..] else { panic!("{:?}", policy.problems()) };
    assert_eq!((p.plugin.as_str(), p.effect), ("guard.wasm", Effect::KeptLastGood));
    assert!(p.sentence.contains("refused its config (") && p.sentence.contains("`denny`"), "{p}");
    assert!(p.to_string().ends_with("the last version that loaded stays in force"), "{p}");
    // Corrected: it loads, and the problem is gone.
    policy.set_entries(vec![guard("cat"), hints.clone(), timeouts.clone()]).await;
    assert!(rejects(&policy.current(), "cat") && policy.problems().is_empty());

    // Removed entries: their plugins are no longer applied; their files stay, without entries.
    policy.set_entries(vec![hints]).await;
    assert_eq!(policy.current().names(), ["hints.wasm"]);
    assert!(!rejects(&policy.current(), "cat"));
    let no_entry = [("guard.wasm".to_string(), Effect::NotApplied), ("timeouts.wasm".to_string(), Effect::NotApplied)];
    assert_eq!(effects(&policy), no_entry);
    shutdown.cancel();
}

/// A required plugin that did not load at start (its config refused) refuses calls until a
/// saved entry corrects the config; then it runs, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_plugin_refused_at_start_runs_once_its_entry_is_corrected() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(example("guard.wasm"), dir.path().join("guard.wasm")).unwrap();
    let typo = entry("guard.wasm", r#"{"denny":["rm*"]}"#, 0, OnError::Open);
    let config = Config { plugins: vec![typo], ..Config::default() };
    let shutdown = CancellationToken::new();
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), shutdown.clone()).await.unwrap();
    assert!(rejects(&policy.current(), "ls"), "every call it judges is refused");
    assert_eq!(effects(&policy), [("guard.wasm".to_string(), Effect::Refuses)]);
    policy.set_entries(vec![entry("guard.wasm", r#"{"deny":["rm*"]}"#, 0, OnError::Open)]).await;
    assert!(!rejects(&policy.current(), "ls") && rejects(&policy.current(), "rm"));
    assert!(policy.problems().is_empty());
    shutdown.cancel();
}

/// Issue 39: a tool filter dropped into the directory before its entry was written ran with
/// `{}` and hid nothing. Now a file without an entry is not applied, and runs once an entry
/// names it, with that entry's config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_dropped_in_before_its_entry_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let shutdown = CancellationToken::new();
    let policy = Policy::start(&Config::default(), Some(dir.path().to_path_buf()), shutdown.clone()).await.unwrap();
    std::fs::copy(example("tool-filter.wasm"), dir.path().join("tool-filter.wasm")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while effects(&policy) != [("tool-filter.wasm".to_string(), Effect::NotApplied)] {
        assert!(std::time::Instant::now() < deadline, "the file was not seen: {:?}", policy.problems());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(policy.current().is_empty(), "not applied without its entry");
    let filter = r#"{"clients": {"cursor": {"hide": ["write_*"]}}}"#;
    policy.set_entries(vec![entry("tool-filter.wasm", filter, 0, OnError::Closed)]).await;
    let cursor = Caller { name: Some("cursor".into()), ..Caller::default() };
    let tool = ListedTool {
        kind: Kind::Tool,
        server: "fs".into(),
        name: "write_file".into(),
        title: None,
        description: None,
        declared: Hints::default(),
    };
    let shown = policy.current().list_tool(&tool, &cursor, tokio::time::Instant::now(), false);
    assert_eq!(shown.hidden_by.as_deref(), Some("tool-filter.wasm"));
    assert!(policy.problems().is_empty());
    // The entry removed again: not applied, and said so.
    policy.set_entries(Vec::new()).await;
    assert!(policy.current().is_empty());
    wait_for(&policy, "still empty", |s| s.is_empty()).await;
    shutdown.cancel();
}

/// Two plugins whose entries change in one save: every call sees both old configs or both new
/// ones, never one of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_never_run_under_a_mix_of_old_and_new_entries() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(example("guard.wasm"), dir.path().join("guard.wasm")).unwrap();
    std::fs::copy(example("guard.wasm"), dir.path().join("guard2.wasm")).unwrap();
    let pair = |a: &str, b: &str| {
        vec![
            entry("guard.wasm", &format!(r#"{{"deny":["{a}"]}}"#), 0, OnError::Open),
            entry("guard2.wasm", &format!(r#"{{"deny":["{b}"]}}"#), 0, OnError::Open),
        ]
    };
    let config = Config { plugins: pair("a", "b"), ..Config::default() };
    let shutdown = CancellationToken::new();
    let policy = Policy::start(&config, Some(dir.path().to_path_buf()), shutdown.clone()).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (policy, stop, seen) = (policy.clone(), stop.clone(), seen.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let set = policy.current();
                let refused: String = ["a", "b", "c", "d"].into_iter().filter(|t| rejects(&set, t)).collect();
                assert!(refused == "ab" || refused == "cd", "a call saw a mix: it refused {refused}");
                seen.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    for round in 0..6 {
        let (a, b) = if round % 2 == 0 { ("c", "d") } else { ("a", "b") };
        policy.set_entries(pair(a, b)).await;
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().expect("no call saw a mix");
    assert!(seen.load(Ordering::Relaxed) > 50, "the reader ran");
    shutdown.cancel();
}

/// `switchyard check`'s look at the plugins: what a start would find, without creating the
/// directory or watching it.
#[test]
fn check_finds_what_a_start_would() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("plugins");
    let config =
        Config { plugins: vec![entry("guard.wasm", r#"{"deny":["rm*"]}"#, 0, OnError::Open)], ..Config::default() };
    let found = problems::check(&config, Some(&dir)).unwrap();
    assert!(!dir.exists(), "check creates nothing");
    let [p] = &found.problems[..] else { panic!("{:?}", found.problems) };
    assert!(p.effect == Effect::Refuses && p.sentence.contains("does not exist"), "{p}");

    std::fs::create_dir(&dir).unwrap();
    for name in ["guard.wasm", "hints.wasm", "tool-filter.wasm"] {
        std::fs::copy(example(name), dir.join(name)).unwrap();
    }
    let mut hints = optional("hints.wasm");
    hints.servers = Some(vec!["fs".to_string()]);
    let typo = entry("guard.wasm", r#"{"denny":["rm*"]}"#, 0, OnError::Open);
    let config = Config { plugins: vec![typo, hints], ..Config::default() };
    let found = problems::check(&config, Some(&dir)).unwrap();
    assert_eq!(found.applied, ["hints.wasm"]);
    let got: Vec<(&str, Effect)> = found.problems.iter().map(|p| (p.plugin.as_str(), p.effect)).collect();
    assert_eq!(got, [("guard.wasm", Effect::Refuses), ("tool-filter.wasm", Effect::NotApplied)]);
    assert!(found.problems[0].sentence.contains("unknown key `denny`"), "{}", found.problems[0]);
    assert_eq!(found.dir, dir);
}
