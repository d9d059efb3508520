//! Load on the daemon's HTTP front: 1,000 Streamable HTTP sessions at once, each making calls
//! that carry its own nonce, through the real binary. Every answer must reach its own session;
//! the daemon's memory is measured with the sessions idle (given per session in the output) and
//! bounded; DELETE frees them all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_testkit::daemon::Home;

const SESSIONS: usize = 1_000;
const CALLS: usize = 3;
/// What an idle session may cost the daemon. Measured: see the test's output and BENCHMARKS.md.
const PER_SESSION_LIMIT: u64 = 128 * 1024;

/// The daemon's resident memory, from /proc.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb * 1024
}

/// Every JSON message of an SSE body (or the body itself, when it is JSON).
fn messages(content_type: &str, body: &str) -> Vec<Value> {
    if content_type.starts_with("application/json") {
        return vec![serde_json::from_str(body).unwrap()];
    }
    body.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
            (!data.is_empty() && !data.concat().is_empty()).then(|| serde_json::from_str(&data.join("\n")).unwrap())
        })
        .collect()
}

struct Target {
    url: String,
    token: String,
}

impl Target {
    async fn post(
        &self,
        http: &reqwest::Client,
        sid: Option<&str>,
        body: Value,
    ) -> (reqwest::StatusCode, Option<String>, Vec<Value>) {
        let mut r = http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(s) = sid {
            r = r.header("mcp-session-id", s).header("mcp-protocol-version", "2025-11-25");
        }
        let resp = r.send().await.unwrap_or_else(|e| panic!("POST {body}: {e}"));
        let status = resp.status();
        let sid = resp.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_string());
        let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
        let text = resp.text().await.unwrap();
        let msgs = if status == 202 { Vec::new() } else { messages(&ct, &text) };
        (status, sid, msgs)
    }

    /// One session: initialize, initialized, CALLS echo calls with its nonce; its id.
    async fn session(&self, http: &reqwest::Client, n: usize) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": format!("load-{n}"), "version": "1"}}});
        let (status, sid, msgs) = self.post(http, None, init).await;
        assert_eq!(status, 200, "session {n}: initialize: {msgs:?}");
        let sid = sid.unwrap_or_else(|| panic!("session {n}: no Mcp-Session-Id"));
        assert!(msgs[0]["result"]["serverInfo"].is_object(), "session {n}: {msgs:?}");
        let (status, _, _) =
            self.post(http, Some(&sid), json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert_eq!(status, 202);
        for c in 0..CALLS {
            let nonce = format!("session {n} call {c}");
            // Every session uses the same request ids: only the session tells the answers apart.
            let call = json!({"jsonrpc": "2.0", "id": c + 1, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": nonce}}});
            let (status, _, msgs) = self.post(http, Some(&sid), call).await;
            assert_eq!(status, 200, "{nonce}: {msgs:?}");
            assert_eq!(msgs.len(), 1, "{nonce}: one message expected, got {msgs:?}");
            assert_eq!(msgs[0]["id"], json!(c + 1), "{nonce}: {msgs:?}");
            assert_eq!(msgs[0]["result"]["content"][0]["text"], json!(nonce), "{nonce} got another's answer");
        }
        sid
    }
}

/// Lets this test process hold a connection per session (the usual soft limit is 1024).
fn raise_open_files() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    l.current = l.maximum;
    setrlimit(Resource::Nofile, l).expect("raise RLIMIT_NOFILE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_http_sessions_each_get_their_own_answers_in_bounded_memory() {
    raise_open_files();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let home = Home::new();
    home.write_config(&format!(
        "{}[servers.load.pools.default]\nmin = 0\nmax = 4\n[http]\nlisten = \"127.0.0.1:0\"\nmax_sessions = {}\n",
        home.fixture("load", &[]),
        SESSIONS + 10
    ));
    let (base, token) = home.start_http().await;
    let target = Arc::new(Target { url: format!("{base}/mcp/load"), token });
    let pid = home.daemon_pid().await;

    // One session first, so the server runs and the front has served once.
    let warm = reqwest::Client::new();
    let first = target.session(&warm, usize::MAX).await;
    drop(warm);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss(pid);

    let started = Instant::now();
    let http = reqwest::Client::builder().pool_max_idle_per_host(SESSIONS).build().unwrap();
    let tasks: Vec<_> = (0..SESSIONS)
        .map(|n| {
            let (t, http) = (target.clone(), http.clone());
            tokio::spawn(async move { t.session(&http, n).await })
        })
        .collect();
    let mut sids = Vec::with_capacity(SESSIONS);
    for t in tasks {
        sids.push(t.await.expect("a session task failed"));
    }
    let elapsed = started.elapsed();
    // The connections go; the sessions stay (idle) in the daemon.
    drop(http);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = home.status_json().await;
    assert_eq!(status["http"]["sessions"], json!(SESSIONS + 1), "{status}");
    let idle = rss(pid);
    let per_session = idle.saturating_sub(before) / SESSIONS as u64;
    eprintln!(
        "{SESSIONS} sessions x {CALLS} calls in {:.2} s ({:.0} sessions/s); daemon RSS {:.1} MiB before, {:.1} MiB with them idle: {:.1} KiB per idle session",
        elapsed.as_secs_f64(),
        SESSIONS as f64 / elapsed.as_secs_f64(),
        before as f64 / 1048576.0,
        idle as f64 / 1048576.0,
        per_session as f64 / 1024.0
    );
    assert!(
        per_session < PER_SESSION_LIMIT,
        "an idle HTTP session costs the daemon {per_session} bytes (limit {PER_SESSION_LIMIT})"
    );

    // DELETE ends each; the daemon keeps serving and holds none of them.
    let http = reqwest::Client::new();
    for sid in sids.iter().chain([&first]) {
        let r = http
            .delete(format!("{base}/mcp/load"))
            .bearer_auth(&target.token)
            .header("mcp-session-id", sid)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
    }
    let status = home.status_json().await;
    assert_eq!(status["http"]["sessions"], 0, "{status}");
    let after = rss(pid);
    eprintln!("daemon RSS after DELETE of all: {:.1} MiB", after as f64 / 1048576.0);
    // Freed memory goes back to the allocator, not always to the system; it must not keep growing.
    assert!(after <= idle + 4 * 1024 * 1024, "RSS grew after every session ended: {idle} -> {after}");
    let again = target.session(&http, 0).await;
    assert!(!sids.contains(&again), "a session id was reused");
    home.shutdown().await;
}
