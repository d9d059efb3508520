//! Scenario 5: a remote server's link goes silent (no FIN, no RST) and the network heals. An
//! HTTP client that keeps its connection alive sends its next call on the dead connection and
//! waits; switchyard does not reuse a connection idle that long and answers at once.
//!
//! The remote server is this binary too: `switchyard daemon` serving the fixture over its HTTP
//! front, reached through a [`Relay`] per side that can strand its connections.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use super::Demo;
use super::peer::{Peer, summary};
use super::relay::Relay;
use super::report::{Report, secs};

/// How long both links stay idle after going silent: longer than switchyard keeps an idle
/// pooled connection (4 s), shorter than most HTTP clients do (reqwest and Go: 90 s).
const IDLE: Duration = Duration::from_secs(5);
/// How long the demo waits for the direct client's call before it stops waiting.
const DIRECT_LIMIT: Duration = Duration::from_secs(20);
/// Through switchyard the call must be answered within this (the bound).
const ROUTED_BOUND: Duration = Duration::from_secs(2);
/// The variable `switchyard run --header` reads the front's token from.
const TOKEN_VAR: &str = "SWITCHYARD_DEMO_TOKEN";
/// The MCP version the demo's HTTP client speaks.
const PROTOCOL_VERSION: &str = "2025-06-18";

impl Demo {
    /// 5: both links go silent while idle; the next call directly hangs, through switchyard it
    /// is answered on a new connection.
    pub(super) async fn silent_link(&self, report: &mut Report, name: &str) -> anyhow::Result<()> {
        let dir = self.scratch.0.join(name.replace(' ', "-"));
        std::fs::create_dir_all(&dir)?;
        let remote = RemoteServer::start(&self.exe, &dir).await?;
        let (direct_relay, routed_relay) = (Relay::start(remote.addr).await?, Relay::start(remote.addr).await?);
        let url = |relay: &Relay| format!("http://{}/mcp/fixture", relay.addr());

        let _ = rustls::crypto::ring::default_provider().install_default();
        // reqwest as it comes: connections kept alive for reuse, idle ones for up to 90 s.
        let http = reqwest::Client::builder().build().context("cannot build an HTTP client")?;
        let direct = HttpSession::open(http, url(&direct_relay), remote.token.clone()).await?;
        expect_echo(&direct.call("echo", json!({"text": "before"})).await?, "before")?;

        let config = dir.join("switchyard.toml");
        let plugins = dir.join("plugins");
        std::fs::write(&config, "")?;
        std::fs::create_dir_all(&plugins)?;
        let args: Vec<String> = vec![
            "run".into(),
            "--log-level".into(),
            "warn".into(),
            "--name".into(),
            "remote".into(),
            "--config".into(),
            config.to_string_lossy().into_owned(),
            "--plugins".into(),
            plugins.to_string_lossy().into_owned(),
            "--url".into(),
            url(&routed_relay),
            "--transport".into(),
            "streamable-http".into(),
            "--header".into(),
            format!("Authorization: Bearer ${{{TOKEN_VAR}}}"),
        ];
        let router = Peer::spawn_env("switchyard", &self.exe, &args, &[(TOKEN_VAR, &remote.token)])?;
        router.initialize().await?;
        expect_echo(&router.tool("echo", json!({"text": "before"})).await?, "before")?;
        println!(
            "      both linked to the fixture over HTTP (switchyard daemon's front, through a TCP relay each); an echo works"
        );

        direct_relay.strand();
        routed_relay.strand();
        println!(
            "      the links go silent (no FIN, no RST) and new connections work again; idle for {} s",
            IDLE.as_secs()
        );
        tokio::time::sleep(IDLE).await;

        let started = Instant::now();
        let routed_call = async {
            let r = router.tool("echo", json!({"text": "after"})).await;
            let took = started.elapsed();
            println!("      through switchyard: the next echo answered after {}", secs(took));
            (r, took)
        };
        let direct_call = async {
            let call = direct.call("echo", json!({"text": "after"}));
            let mut call = std::pin::pin!(tokio::time::timeout(DIRECT_LIMIT, call));
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + IDLE, IDLE);
            loop {
                tokio::select! {
                    biased;
                    r = &mut call => break (r, started.elapsed()),
                    _ = tick.tick(), if started.elapsed() + IDLE <= DIRECT_LIMIT => println!(
                        "      directly: no answer after {} s (the demo waits up to {} s)",
                        started.elapsed().as_secs(),
                        DIRECT_LIMIT.as_secs()
                    ),
                }
            }
        };
        let ((routed, s), (direct_outcome, d)) = tokio::join!(routed_call, direct_call);
        router.shutdown().await;
        drop((direct_relay, routed_relay));
        remote.stop().await;

        let d_cell = match &direct_outcome {
            Err(_) => format!("no answer in {} s (hung)", DIRECT_LIMIT.as_secs()),
            Ok(Ok(v)) => format!("{}: {}", secs(d), summary(v)),
            Ok(Err(e)) => format!("{}: {e:#}", secs(d)),
        };
        match &direct_outcome {
            Err(_) => println!(
                "      directly: no answer in {} s: the call went out on the pooled, dead connection; the demo stops waiting",
                DIRECT_LIMIT.as_secs()
            ),
            _ => println!("      directly: {d_cell}"),
        }
        let answered = matches!(&routed, Ok(v) if expect_echo(v, "after").is_ok());
        report.check(direct_outcome.is_err(), || {
            format!("{name}: directly the call did not hang: {d_cell} (did the link go silent?)")
        });
        report.check(answered && s <= ROUTED_BOUND, || {
            let what = match &routed {
                Ok(v) => summary(v),
                Err(e) => e.to_string(),
            };
            format!("{name}: through switchyard the next call got {what} after {}", secs(s))
        });
        let s_cell = match &routed {
            Ok(v) if answered => format!("{}: result (new connection)", secs(s)),
            Ok(v) => format!("{}: {}", secs(s), summary(v)),
            Err(e) => format!("{e}"),
        };
        report.row(name, format!("next echo, link silent {} s", IDLE.as_secs()).as_str(), d_cell, s_cell);
        Ok(())
    }
}

fn expect_echo(resp: &Value, want: &str) -> anyhow::Result<()> {
    match resp["result"]["content"][0]["text"].as_str() {
        Some(t) if t == want => Ok(()),
        _ => bail!("expected the echo {want:?}, got {}", summary(resp)),
    }
}

/// `switchyard daemon` serving the fixture over its HTTP front on 127.0.0.1, with a token of
/// its own and every file of its own in the scenario's directory.
struct RemoteServer {
    child: Child,
    addr: SocketAddr,
    token: String,
    log: PathBuf,
}

impl RemoteServer {
    async fn start(exe: &Path, dir: &Path) -> anyhow::Result<RemoteServer> {
        let addr = free_port()?;
        let token = random_token()?;
        let exe_toml = toml::Value::String(exe.to_string_lossy().into_owned());
        let config = dir.join("remote.toml");
        std::fs::write(
            &config,
            format!(
                "[http]\nlisten = \"{addr}\"\ntoken = \"{token}\"\n\n[servers.fixture]\ncommand = {exe_toml}\nargs = [\"fixture\"]\n"
            ),
        )?;
        let log = dir.join("remote.log");
        let child = Command::new(exe)
            .arg("daemon")
            .arg("--config")
            .arg(&config)
            .arg("--socket")
            .arg(dir.join("remote.sock"))
            .args(["--log-level", "warn"])
            .env("XDG_STATE_HOME", dir)
            .env("XDG_RUNTIME_DIR", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {} daemon", exe.display()))?;
        let mut server = RemoteServer { child, addr, token, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            if let Some(status) = server.child.try_wait()? {
                bail!("the remote server (switchyard daemon) exited ({status}):\n{}", server.log_tail());
            }
            if Instant::now() > deadline {
                bail!("the remote server never listened on {addr}:\n{}", server.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Ok(server)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// SIGTERM (the daemon stops its server), then the whole group if that takes too long.
    async fn stop(mut self) {
        let Some(pid) = self.child.id().and_then(|pid| rustix::process::Pid::from_raw(pid as i32)) else { return };
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await.is_err() {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            let _ = self.child.wait().await;
        }
    }
}

impl Drop for RemoteServer {
    fn drop(&mut self) {
        // Only a server that was not stopped (an early error) still runs: take its children too.
        if matches!(self.child.try_wait(), Ok(None))
            && let Some(pid) = self.child.id().and_then(|pid| rustix::process::Pid::from_raw(pid as i32))
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

/// A port of 127.0.0.1 that was free a moment ago.
fn free_port() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind 127.0.0.1")?;
    Ok(listener.local_addr()?)
}

/// 32 hex digits from the kernel's random source.
fn random_token() -> anyhow::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// An MCP client over Streamable HTTP as an SDK's is on the wire: POSTs each message accepting
/// JSON and SSE, keeps the session id, and reuses its pooled keep-alive connections.
struct HttpSession {
    http: reqwest::Client,
    url: String,
    token: String,
    session: Option<String>,
}

impl HttpSession {
    async fn open(http: reqwest::Client, url: String, token: String) -> anyhow::Result<HttpSession> {
        let mut s = HttpSession { http, url, token, session: None };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "switchyard-demo", "version": env!("CARGO_PKG_VERSION")},
        }});
        let resp = s.post(&init).await?;
        s.session = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(String::from);
        let answer = response_of(resp).await?;
        if answer.get("result").is_none() {
            bail!("initialize over HTTP failed: {}", summary(&answer));
        }
        let note = s.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await?;
        if !note.status().is_success() {
            bail!("notifications/initialized over HTTP: HTTP {}", note.status());
        }
        Ok(s)
    }

    async fn call(&self, tool: &str, arguments: Value) -> anyhow::Result<Value> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        response_of(self.post(&body).await?).await
    }

    async fn post(&self, body: &Value) -> anyhow::Result<reqwest::Response> {
        let mut req = self
            .http
            .post(&self.url)
            .header(AUTHORIZATION, format!("Bearer {}", self.token))
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s).header("mcp-protocol-version", PROTOCOL_VERSION);
        }
        req.send().await.with_context(|| format!("POST {}", self.url))
    }
}

/// The JSON-RPC response in an answer: a JSON body, or the SSE event that carries it (the
/// stream ends after it).
async fn response_of(resp: reqwest::Response) -> anyhow::Result<Value> {
    let status = resp.status();
    let text = resp.text().await.context("reading the answer")?;
    if !status.is_success() {
        bail!("HTTP {status}: {}", text.trim());
    }
    let mut messages: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    if messages.is_empty() {
        messages.push(serde_json::from_str(&text).with_context(|| format!("not JSON: {text}"))?);
    }
    messages
        .into_iter()
        .find(|m| m.get("id").is_some() && m.get("method").is_none())
        .ok_or_else(|| anyhow!("no response in the answer: {text}"))
}
