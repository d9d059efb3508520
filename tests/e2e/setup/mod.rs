//! Shared set-up of end-to-end tests: a router in front of the fixture, and process checks.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use switchyard_testkit::*;

/// A router in front of the fixture, with an empty plugins directory (so a user's own plugins
/// never leak into a test) and any extra router arguments.
pub struct Setup {
    pub router: Proc,
    pub client: Client,
    pub dir: TempDir,
}

impl Setup {
    pub async fn new(fixture_args: &[&str], router_args: &[&str]) -> Setup {
        Setup::with_config(fixture_args, router_args, None).await
    }

    pub async fn with_config(fixture_args: &[&str], router_args: &[&str], config: Option<&str>) -> Setup {
        Setup::start(fixture_args, router_args, config, &[]).await
    }

    /// A router whose plugins directory holds copies of `plugins` from the start.
    pub async fn start(
        fixture_args: &[&str],
        router_args: &[&str],
        config: Option<&str>,
        plugins: &[&std::path::Path],
    ) -> Setup {
        Setup::in_front_of(&Proc::fixture_cmd(fixture_args), router_args, config, plugins).await
    }

    /// A router in front of any server command (`server` is its argv).
    pub async fn in_front_of(
        server: &[String],
        router_args: &[&str],
        config: Option<&str>,
        plugins: &[&std::path::Path],
    ) -> Setup {
        let dir = temp_dir();
        let plugins_dir = dir.path().join("plugins");
        std::fs::create_dir(&plugins_dir).unwrap();
        for p in plugins {
            std::fs::copy(p, plugins_dir.join(p.file_name().unwrap())).unwrap();
        }
        let plugins = plugins_dir;
        let mut args: Vec<String> = vec!["--plugins".into(), plugins.display().to_string()];
        if let Some(text) = config {
            let p = dir.path().join("switchyard.toml");
            std::fs::write(&p, text).unwrap();
            args.extend(["--config".to_string(), p.display().to_string()]);
        }
        args.extend(router_args.iter().map(|s| s.to_string()));
        args.push("--".into());
        args.extend(server.iter().cloned());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut router = Proc::router(&argv);
        let client = router.client();
        Setup { router, client, dir }
    }

    pub fn plugins_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("plugins")
    }
}

/// Params of an initialize that declares the given client capabilities (and nothing else).
pub fn init_params(capabilities: Value) -> Value {
    json!({"protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {"name": "e2e", "version": "1"}})
}

/// Every message that arrives within `limit`.
pub async fn drain(c: &mut Client, limit: Duration) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    while let Some(m) = c.recv_timeout(limit).await {
        out.push(m);
    }
    out
}

pub async fn wait_gone(pid: u32, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if !pid_alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    !pid_alive(pid)
}

pub async fn fixture_pid(c: &mut Client) -> u32 {
    let text = c.call_text("pid", json!({})).await;
    serde_json::from_str::<Value>(&text).unwrap()["pid"].as_u64().unwrap() as u32
}

/// A second client session: `switchyard connect SOCKET` (waits for the socket to appear).
pub async fn connect(socket: &std::path::Path) -> (Proc, Client) {
    let end = Instant::now() + Duration::from_secs(10);
    while !socket.exists() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut p = Proc::spawn("connect", &[bin().to_string(), "connect".into(), socket.display().to_string()]);
    let c = p.client();
    (p, c)
}

/// The argv of a router in front of the fixture, as strings, for tests that build their own.
pub fn journal_in(dir: &TempDir) -> String {
    dir.path().join("journal.jsonl").display().to_string()
}

/// A router in front of a pool of two fixture instances (`min = max = 2`) that write `journal`,
/// once both are initialised; the client is initialised too.
pub async fn pool_of_two(journal: &str) -> Setup {
    let cfg = "[pools.default]\nmin = 2\nmax = 2\n";
    let mut s = Setup::with_config(&["--journal", journal], &[], Some(cfg)).await;
    s.client.initialize().await;
    wait_journal(journal, Duration::from_secs(10), |e| received(e, "notifications/initialized").count() >= 2).await;
    s
}
