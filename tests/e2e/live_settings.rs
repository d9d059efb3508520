//! The daemon's own settings are live: `[http]` and `[daemon]` take effect on save, without a
//! `switchyard stop` and without restarting any server.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::*;

const SLOW: Duration = Duration::from_secs(20);

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// An `initialize` POSTed to the front at `port`: its HTTP status, or None when nothing listens.
async fn initialize_at(port: u16, token: &str) -> Option<u16> {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "live", "version": "1"}}});
    let sent = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/mcp/alpha"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await;
    match sent {
        Ok(r) => Some(r.status().as_u16()),
        Err(e) if e.is_connect() => None,
        Err(e) => panic!("POST to port {port}: {e}"),
    }
}

fn listening(status: &Value) -> Option<String> {
    status["http"]["listen"].as_str().map(str::to_string)
}

/// The front moves to a new address on save, goes away when `[http]` is removed and comes back
/// when it is added; a `[http]` that does not load leaves the front in force and says why. The
/// server and its stdio session go on throughout (the same process).
#[tokio::test]
async fn http_follows_the_file_and_no_server_restarts() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let home = Home::new();
    let alpha = home.fixture("alpha", &[]);
    let http = |port: u16| format!("{alpha}\n[http]\nlisten = \"127.0.0.1:{port}\"\n");
    let (first, second) = (free_port(), free_port());
    home.write_config(&http(first));
    let (_, token) = home.start_http().await;
    let (mut p, mut c) = home.client("alpha").await;
    let (pid, _) = fixture_pid(&mut c).await;
    assert_eq!(initialize_at(first, &token).await, Some(200));

    home.write_config(&http(second));
    let want = format!("127.0.0.1:{second}");
    home.wait_status("the new address", SLOW, |s| listening(s).as_deref() == Some(&want)).await;
    assert_eq!(initialize_at(second, &token).await, Some(200));
    assert_eq!(initialize_at(first, &token).await, None, "the old address still answers");

    // Not loadable: the front in force stays, and status says why.
    home.write_config(&format!("{alpha}\n[http]\nlisten = \"0.0.0.0:{first}\"\n"));
    let status = home.wait_status("the [http] problem", SLOW, |s| s.get("http_error").is_some()).await;
    assert!(status["http_error"].as_str().unwrap().contains("reachable from other machines"), "{status:#}");
    assert_eq!(listening(&status).as_deref(), Some(want.as_str()));
    assert_eq!(initialize_at(second, &token).await, Some(200));

    home.write_config(&alpha);
    home.wait_status("no front", SLOW, |s| s.get("http").is_none() && s.get("http_error").is_none()).await;
    assert_eq!(initialize_at(second, &token).await, None, "a removed front still answers");
    home.write_config(&http(first));
    home.wait_status("the front back", SLOW, |s| listening(s).is_some()).await;
    assert_eq!(initialize_at(first, &token).await, Some(200));

    assert_eq!(c.call_text("echo", json!({"text": "still"})).await, "still");
    assert_eq!(fixture_pid(&mut c).await.0, pid, "the server was restarted by a change of [http]");
    c.close().await;
    p.wait_timeout(SLOW).await;
    home.shutdown().await;
}

/// `[daemon] idle_exit_ms` set on save applies to the daemon running: one told never to exit
/// does, once the new idle time has passed without a session.
#[tokio::test]
async fn idle_exit_set_on_save_stops_an_idle_daemon() {
    let home = Home::new();
    let alpha = home.fixture("alpha", &[]);
    home.write_config(&format!("{alpha}\n[daemon]\nidle_exit_ms = 0\n"));
    let (mut p, mut c) = home.client("alpha").await;
    c.close().await;
    p.wait_timeout(SLOW).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(home.daemons().len(), 1, "a daemon told never to exit did");
    home.write_config(&format!("{alpha}\n[daemon]\nidle_exit_ms = 300\n"));
    home.wait_no_processes(SLOW).await;
    assert!(home.logs().contains("(idle_exit_ms); stopping"), "{}", home.logs());
    home.shutdown().await;
}
