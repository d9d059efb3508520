//! The demo's JSON-RPC client: a child process spoken to as an MCP server over its stdin/stdout.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};

/// No single request of the demo may take longer than this; past it the scenario fails.
const CALL_LIMIT: Duration = Duration::from_secs(15);
/// The MCP version the demo's client speaks.
const PROTOCOL_VERSION: &str = "2025-06-18";
/// Stderr kept per child, for the error message when something goes wrong.
const STDERR_KEEP: usize = 16 * 1024;

/// Why a request got no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unanswered {
    /// The server's stdout closed first.
    Closed,
    /// Nothing within `CALL_LIMIT`.
    TimedOut,
}

impl fmt::Display for Unanswered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unanswered::Closed => f.write_str("the pipe closed without an answer"),
            Unanswered::TimedOut => write!(f, "no answer within {} s", CALL_LIMIT.as_secs()),
        }
    }
}

impl std::error::Error for Unanswered {}

/// Requests awaiting their response, by id; `None` once the server's stdout has closed.
type Pending = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Value>>>>>;

/// A child process spoken to as an MCP server over its stdin/stdout: a minimal JSON-RPC client
/// that lets any number of requests be in flight at once.
pub(super) struct Peer {
    label: &'static str,
    child: Child,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: Pending,
    next_id: AtomicU64,
    notifications: tokio::sync::Mutex<mpsc::UnboundedReceiver<Value>>,
    closed_at: Arc<Mutex<Option<Instant>>>,
    /// The tail of the child's stderr: kept out of the table, shown when something fails.
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Peer {
    /// Starts `program args` in a process group of its own, so that everything it starts can
    /// be killed with it if it does not stop by itself.
    pub(super) fn spawn(label: &'static str, program: &Path, args: &[String]) -> anyhow::Result<Peer> {
        Peer::spawn_env(label, program, args, &[])
    }

    /// [`Peer::spawn`] with these variables added to the child's environment.
    pub(super) fn spawn_env(
        label: &'static str,
        program: &Path,
        args: &[String],
        envs: &[(&str, &str)],
    ) -> anyhow::Result<Peer> {
        let mut child = Command::new(program)
            .args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");

        let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
        let closed_at = Arc::new(Mutex::new(None));
        let (note_tx, note_rx) = mpsc::unbounded_channel();
        tokio::spawn(read_messages(stdout, pending.clone(), note_tx, closed_at.clone()));

        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        tokio::spawn(async move {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut chunk).await {
                let mut buf = sink.lock().expect("lock");
                buf.extend_from_slice(&chunk[..n]);
                let excess = buf.len().saturating_sub(STDERR_KEEP);
                buf.drain(..excess);
            }
        });

        Ok(Peer {
            label,
            child,
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            pending,
            next_id: AtomicU64::new(1),
            notifications: tokio::sync::Mutex::new(note_rx),
            closed_at,
            stderr,
        })
    }

    pub(super) async fn initialize(&self) -> anyhow::Result<()> {
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "switchyard-demo", "version": env!("CARGO_PKG_VERSION")},
        });
        let r = self.request("initialize", params).await.map_err(|e| self.failed("initialize", e))?;
        if r.get("result").is_none() {
            bail!("{}: initialize failed: {}\n{}", self.label, summary(&r), self.stderr_tail());
        }
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .map_err(|e| self.failed("notifications/initialized", e))?;
        Ok(())
    }

    /// A request and its response message (a result or an error).
    pub(super) async fn request(&self, method: &str, params: Value) -> Result<Value, Unanswered> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self.pending.lock().expect("lock").as_mut() {
            Some(pending) => pending.insert(id, tx),
            None => return Err(Unanswered::Closed),
        };
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        match tokio::time::timeout(CALL_LIMIT, rx).await {
            Ok(Ok(msg)) => Ok(msg),
            // The reader dropped the sender: stdout closed.
            Ok(Err(_)) => Err(Unanswered::Closed),
            Err(_) => {
                if let Some(p) = self.pending.lock().expect("lock").as_mut() {
                    p.remove(&id);
                }
                Err(Unanswered::TimedOut)
            }
        }
    }

    pub(super) async fn tool(&self, name: &str, arguments: Value) -> Result<Value, Unanswered> {
        self.request("tools/call", json!({"name": name, "arguments": arguments})).await
    }

    async fn send(&self, msg: &Value) -> Result<(), Unanswered> {
        let mut line = msg.to_string();
        line.push('\n');
        let mut stdin = self.stdin.lock().await;
        let w = stdin.as_mut().ok_or(Unanswered::Closed)?;
        // A failed write means the process is gone; its reader reports the rest.
        w.write_all(line.as_bytes()).await.map_err(|_| Unanswered::Closed)?;
        w.flush().await.map_err(|_| Unanswered::Closed)
    }

    /// The next notification with this method, skipping others; None after `limit`.
    pub(super) async fn notification(&self, method: &str, limit: Duration) -> Option<Value> {
        let mut rx = self.notifications.lock().await;
        tokio::time::timeout(limit, async {
            while let Some(n) = rx.recv().await {
                if n["method"] == method {
                    return Some(n);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
    }

    pub(super) fn closed_at(&self) -> Option<Instant> {
        *self.closed_at.lock().expect("lock")
    }

    fn stderr_tail(&self) -> String {
        let buf = self.stderr.lock().expect("lock");
        let text = String::from_utf8_lossy(&buf);
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n");
        format!("--- last stderr lines of {} ---\n{tail}", self.label)
    }

    fn failed(&self, what: &str, e: Unanswered) -> anyhow::Error {
        anyhow!("{}: {what}: {e}\n{}", self.label, self.stderr_tail())
    }

    /// Closes stdin (the polite MCP shutdown; the router then stops its instances) and waits;
    /// kills the process group if that takes too long.
    pub(super) async fn shutdown(mut self) {
        self.stdin.lock().await.take();
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await.is_err() {
            self.kill_group();
            let _ = self.child.wait().await;
        }
    }

    /// SIGTERM to the process itself (as a client ends its server command).
    pub(super) fn terminate(&self) {
        if let Some(pid) = self.child.id().and_then(|pid| rustix::process::Pid::from_raw(pid as i32)) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }

    fn kill_group(&self) {
        if let Some(pgid) = self.child.id().and_then(|pid| rustix::process::Pid::from_raw(pid as i32)) {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Only a peer that was not shut down (an early error) still runs: take its children too.
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill_group();
        }
    }
}

/// Reads the server's messages: responses go to their waiting request, notifications to the
/// queue. Requests from the server are not expected from the tools the demo calls.
async fn read_messages(
    stdout: ChildStdout,
    pending: Pending,
    notes: mpsc::UnboundedSender<Value>,
    closed_at: Arc<Mutex<Option<Instant>>>,
) {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
        if msg.get("method").is_some() {
            if msg.get("id").is_none() {
                let _ = notes.send(msg);
            }
            continue;
        }
        let Some(id) = msg["id"].as_u64() else { continue };
        let waiter = pending.lock().expect("lock").as_mut().and_then(|p| p.remove(&id));
        if let Some(tx) = waiter {
            let _ = tx.send(msg);
        }
    }
    *closed_at.lock().expect("lock") = Some(Instant::now());
    // Dropping the senders answers every waiting request with `Closed`.
    pending.lock().expect("lock").take();
}

/// A response in one short line, for messages.
pub(super) fn summary(resp: &Value) -> String {
    if let Some(e) = resp.get("error") {
        return format!("error {}: {}", e["code"], e["message"].as_str().unwrap_or("?"));
    }
    let mut s = resp["result"].to_string();
    if s.len() > 120 {
        s.truncate(s.floor_char_boundary(120));
        s.push('…');
    }
    s
}
