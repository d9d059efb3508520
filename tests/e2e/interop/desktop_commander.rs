//! Desktop Commander, the real one from npm (tests/desktop-commander): a server whose state is
//! the shell processes it started. With `share = "client"`, the chats of one client share it,
//! another client never sees (or can kill) those processes, and they outlive the client's
//! `connect`; when the daemon stops, none of them is left behind.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::Home;
use switchyard_testkit::{Client, Proc};

use crate::npm_setup::{desktop_commander_entry, ensure_desktop_commander};

const SLOW: Duration = Duration::from_secs(60);

/// `connect dc` and an initialized client named `name` on it.
async fn chat(home: &Home, name: &str) -> (Proc, Client) {
    let mut p = home.connect("dc");
    let mut c = p.client();
    c.timeout = SLOW;
    let params =
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": name, "version": "1"}});
    let r = c.request("initialize", params).await;
    assert_eq!(r["result"]["serverInfo"]["name"], "desktop-commander", "{r}");
    c.notify("notifications/initialized", json!({})).await;
    (p, c)
}

/// The PIDs `list_sessions` shows this client.
async fn sessions(c: &mut Client) -> Vec<u32> {
    let text = c.call_text("list_sessions", json!({})).await;
    text.lines()
        .filter_map(|l| l.strip_prefix("PID: "))
        .filter_map(|l| l.split(',').next()?.trim().parse().ok())
        .collect()
}

#[tokio::test]
async fn share_client_keeps_each_client_s_shell_processes_its_own() {
    ensure_desktop_commander();
    let home = Home::new();
    home.write_config(&format!(
        "[servers.dc]\ncommand = \"node\"\nargs = [{}]\nshare = \"client\"\n",
        Value::from(desktop_commander_entry().display().to_string())
    ));
    let (mut pa, mut a) = chat(&home, "claude-desktop").await;
    let started = a.call_text("start_process", json!({"command": "sleep 300", "timeout_ms": 1000})).await;
    let pid: u32 = started
        .split("PID ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no PID in {started:?}"));
    assert_eq!(sessions(&mut a).await, [pid]);

    // Another chat of the same client sees it; another client does not, and cannot end it.
    let (mut pa2, mut a2) = chat(&home, "claude-desktop").await;
    assert_eq!(sessions(&mut a2).await, [pid], "a second chat of the client");
    let (pb, mut b) = chat(&home, "cursor").await;
    assert_eq!(sessions(&mut b).await, Vec::<u32>::new(), "another client saw this client's process");
    let killed = b.call_tool("force_terminate", json!({"pid": pid})).await;
    assert!(switchyard_testkit::pid_alive(pid), "another client ended this client's process: {killed}");

    // The client's `connect`s are ended as a client ends its servers: the processes stay.
    pa.signal(libc::SIGTERM);
    pa2.signal(libc::SIGTERM);
    pa.wait_timeout(SLOW).await;
    pa2.wait_timeout(SLOW).await;
    let (back, mut again) = chat(&home, "claude-desktop").await;
    assert_eq!(sessions(&mut again).await, [pid], "the client's process did not outlive its connect");

    for (mut p, mut c) in [(back, again), (pb, b)] {
        c.close().await;
        p.wait_timeout(SLOW).await;
    }
    home.stop().await;
    home.wait_no_processes(SLOW).await;
}
