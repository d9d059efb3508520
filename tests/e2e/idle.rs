//! A router that serves no calls sleeps: no thread of it wakes on a timer while nothing is due.
//! A daemon runs all day on laptops; before, a loaded plugin's deadline clock ticked 1,000 times
//! a second, the plugins directory watcher 16 times and each server's upkeep once, whether
//! anything happened or not. Counted here as the context switches of all the process's threads
//! (`/proc/PID/task/*/status`) over a quiet stretch, after calls that ran a plugin.

use std::time::Duration;

use crate::setup::*;
use serde_json::json;
use switchyard_testkit::daemon::Home;

/// How long the process is watched, and the most wake-ups allowed in that time: a few for
/// threads of the runtime's blocking pool ending, none for timers (before: over 3,000).
const QUIET: Duration = Duration::from_secs(3);
const MOST_WAKE_UPS: u64 = 10;

/// The context switches of every thread of `pid` so far.
fn switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|s| {
            s.lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// The wake-ups of `pid` over [`QUIET`], after a moment for what the last call started to end.
async fn wake_ups(pid: u32) -> u64 {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = switches(pid);
    tokio::time::sleep(QUIET).await;
    let n = switches(pid).saturating_sub(before);
    eprintln!("pid {pid}: {n} context switches in {QUIET:?}");
    n
}

const HINTS: &str = r#"
[[plugins]]
file = "hints.wasm"
config = { tools = { "read" = { readOnlyHint = true } } }
"#;

#[tokio::test]
async fn an_idle_run_with_a_plugin_is_not_woken_by_timers() {
    let hints = switchyard_testkit::example_plugins().join("hints.wasm");
    let mut s = Setup::start(&[], &[], Some(HINTS), &[&hints]).await;
    s.client.initialize().await;
    let list = s.client.request("tools/list", json!({})).await;
    let read = list["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "read").unwrap().clone();
    assert_eq!(read["annotations"]["readOnlyHint"], true, "the plugin did not run: {list}");
    assert_eq!(s.client.call_text("echo", json!({"text": "hi"})).await, "hi");
    let n = wake_ups(s.router.pid).await;
    assert!(n <= MOST_WAKE_UPS, "`switchyard run` with a plugin woke {n} times in {QUIET:?} with nothing to do");
    // And the plugin still answers in time after its clock slept.
    assert_eq!(s.client.call_text("echo", json!({"text": "again"})).await, "again");
}

#[tokio::test]
async fn an_idle_daemon_with_servers_and_a_plugin_is_not_woken_by_timers() {
    let home = Home::new();
    // A daemon's plugins directory is beside its config file.
    let plugins = home.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(switchyard_testkit::example_plugins().join("hints.wasm"), plugins.join("hints.wasm")).unwrap();
    home.write_config(&format!("{}{}{HINTS}", home.fixture("alpha", &[]), home.fixture("beta", &[])));
    let (a, mut ca) = home.client("alpha").await;
    let (b, mut cb) = home.client("beta").await;
    assert_eq!(ca.call_text("echo", json!({"text": "a"})).await, "a");
    assert_eq!(cb.call_text("echo", json!({"text": "b"})).await, "b");
    let daemon = home.daemon_pid().await;
    let n = wake_ups(daemon).await;
    assert!(n <= MOST_WAKE_UPS, "the daemon woke {n} times in {QUIET:?} with two idle servers and nothing to do");
    assert_eq!(ca.call_text("echo", json!({"text": "still"})).await, "still");
    for (mut p, mut c) in [(a, ca), (b, cb)] {
        c.close().await;
        p.wait_timeout(Duration::from_secs(10)).await;
    }
    home.shutdown().await;
}

/// A `connect` that handed its client's pipes to the daemon is out of the message path: calls
/// do not wake it (a first version woke it at each read of the client's, holding a writer to the
/// client's output registered with its reactor).
#[tokio::test]
async fn calls_through_a_handed_off_connect_do_not_wake_it() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (a, mut ca) = home.client("alpha").await;
    assert_eq!(ca.call_text("echo", json!({"text": "warm"})).await, "warm");
    let before = switches(a.pid);
    for i in 0..200 {
        assert_eq!(ca.call_text("echo", json!({"text": i.to_string()})).await, i.to_string());
    }
    let woke = switches(a.pid).saturating_sub(before);
    eprintln!("connect: {woke} context switches over 200 calls");
    assert!(woke <= MOST_WAKE_UPS, "a handed-off connect woke {woke} times over 200 calls");
    drop(ca);
    drop(a);
    home.shutdown().await;
}
