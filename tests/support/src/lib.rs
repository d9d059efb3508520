//! What switchyard's end-to-end tests and benchmarks share: spawns the real `switchyard` binary
//! (router or fixture), talks MCP to it, and walks, signals and reaps the processes it started.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

pub use tempfile::TempDir;

// A user's daemon in a home of its own; see tests/e2e/daemon.rs.
pub mod daemon;
// Remote (HTTP) servers and the faults of their links; see tests/e2e/remote_fixtures.rs.
pub mod http_servers;
pub mod proxy;
pub mod python_venv;
pub mod sdk_clients;
// The one lock over what the tests' setup installs (npm, Python virtualenvs).
pub mod setup_lock;

/// How long `recv` and friends wait before failing the test.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The binary under test: cargo builds it before the test or bench binaries of its package,
/// which run from `deps/` beside it (`target/debug/deps/e2e-HASH` -> `target/debug/switchyard`).
pub fn bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let dir = exe.parent().and_then(Path::parent).expect("a test binary lives in target/PROFILE/deps");
        dir.join("switchyard").to_str().expect("a UTF-8 target directory").to_string()
    })
}

/// cargo's target directory: the ancestor of the running binary that cargo marked with
/// `CACHEDIR.TAG` (with and without `--target`).
pub fn target_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        exe.ancestors()
            .find(|p| p.join("CACHEDIR.TAG").is_file())
            .expect("a binary under cargo's target directory")
            .into()
    })
}

/// A directory for tests' files that outlive one run (virtualenvs, npm installs): `target/tmp`.
pub fn target_tmp() -> PathBuf {
    let dir = target_dir().join("tmp");
    std::fs::create_dir_all(&dir).expect("create target/tmp");
    dir
}

/// The example plugins as built for this run (`<name>.wasm`, by crates/policy/build.rs).
pub fn example_plugins() -> PathBuf {
    target_dir().join("plugins/examples")
}

/// Copies the plugin `from` into `dir` (made if missing) as `name`, written beside and renamed
/// into place as careful tools do, so that a router watching `dir` never reads half a file.
pub fn install_plugin(dir: &Path, from: &Path, name: &str) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let staged = dir.join(format!(".{name}.tmp"));
    std::fs::copy(from, &staged).unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), staged.display()));
    std::fs::rename(&staged, dir.join(name)).unwrap_or_else(|e| panic!("rename {} to {name}: {e}", staged.display()));
}

/// Runs one step of the tests' setup (a `pip install`, an `npm ci`), `what` naming it; the
/// error has its output and `hint` (what to install, say) when it fails.
pub fn run_step(cmd: &mut std::process::Command, what: &str, hint: &str) -> Result<(), String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}).{hint}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The deliberately broken plugins (spin, trap, noisy, wrong-interface), built beside them.
pub fn broken_plugins() -> PathBuf {
    target_dir().join("plugins/fixtures")
}

/// A child process started with `std::process::Command` (a server the test runs beside the
/// router), killed and reaped when the guard is dropped, also when the test panics.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends signal `sig` to process `pid`; one already gone is no error (a test kills what may have
/// exited).
pub fn signal_pid(pid: u32, sig: i32) {
    let sig = rustix::process::Signal::from_named_raw(sig).expect("a named signal");
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Sends signal `sig` to the process group `pgid` (a process started as its group's leader and
/// everything it started).
pub fn signal_group(pgid: u32, sig: i32) {
    let sig = rustix::process::Signal::from_named_raw(sig).expect("a named signal");
    if let Some(pid) = rustix::process::Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(pid, sig);
    }
}

/// A fresh temporary directory, removed when dropped.
pub fn temp_dir() -> TempDir {
    tempfile::Builder::new().prefix("switchyard-e2e-").tempdir().expect("create temp dir")
}

/// Everything a process wrote to stderr so far; filled by a reader thread.
#[derive(Clone, Default)]
pub struct Stderr {
    buf: Arc<Mutex<Vec<u8>>>,
    done: Arc<(Mutex<bool>, std::sync::Condvar)>,
}

impl Stderr {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap()).into_owned()
    }

    /// Waits until the stream hit EOF (the process and every holder of the pipe are gone).
    pub fn wait_closed(&self, limit: Duration) -> bool {
        let (lock, cvar) = &*self.done;
        let guard = lock.lock().unwrap();
        let (guard, _) = cvar.wait_timeout_while(guard, limit, |done| !*done).unwrap();
        *guard
    }

    /// Collects on a plain thread, so the output is complete even when the test's runtime is
    /// stuck or already gone, which is exactly when it is needed.
    fn collect(mut source: std::io::PipeReader, label: String) -> Stderr {
        let stderr = Stderr::default();
        let sink = stderr.clone();
        let echo = std::env::var_os("SWITCHYARD_E2E_ECHO").is_some();
        std::thread::Builder::new()
            .name(format!("stderr-{label}"))
            .spawn(move || {
                let mut chunk = [0u8; 8192];
                loop {
                    match source.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if echo {
                                eprint!("[{label}] {}", String::from_utf8_lossy(&chunk[..n]));
                            }
                            sink.buf.lock().unwrap().extend_from_slice(&chunk[..n]);
                        }
                    }
                }
                let (lock, cvar) = &*sink.done;
                *lock.lock().unwrap() = true;
                cvar.notify_all();
            })
            .expect("spawn stderr thread");
        stderr
    }
}

/// A child process under test. Dropping it kills its whole process group and, when the test is
/// failing, prints its stderr so the router's log is in the test output.
pub struct Proc {
    pub label: String,
    pub pid: u32,
    child: Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: Option<tokio::process::ChildStdout>,
    pub stderr: Stderr,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Spawns `argv` in a process group of its own with piped stdio.
    pub fn spawn(label: &str, argv: &[String]) -> Proc {
        Proc::spawn_env(label, argv, &[])
    }

    /// `spawn` with extra environment variables (e.g. `RUST_LOG`).
    pub fn spawn_env(label: &str, argv: &[String], envs: &[(&str, &str)]) -> Proc {
        Proc::spawn_with(label, argv, envs, false)
    }

    /// `spawn` with `envs` as the whole environment (as an SDK client starts its servers).
    pub fn spawn_only_env(label: &str, argv: &[String], envs: &[(&str, &str)]) -> Proc {
        Proc::spawn_with(label, argv, envs, true)
    }

    fn spawn_with(label: &str, argv: &[String], envs: &[(&str, &str)], clear: bool) -> Proc {
        // A plain blocking pipe for stderr (close-on-exec, so no other child inherits it and
        // EOF really means this process tree is gone).
        let (err_read, err_write) = std::io::pipe().expect("stderr pipe");
        let mut cmd = Command::new(&argv[0]);
        if clear {
            cmd.env_clear();
        }
        cmd.args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err_write))
            // Own group: Drop can kill the router together with every server it started.
            .process_group(0)
            .envs(envs.iter().copied())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
        // Our copy of the write end must go, or the reader never sees EOF.
        drop(cmd);
        let pid = child.id().expect("child pid");
        Proc {
            label: label.to_string(),
            pid,
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: Stderr::collect(err_read, label.to_string()),
            child,
            status: None,
        }
    }

    /// `switchyard run <args>`.
    pub fn router(args: &[&str]) -> Proc {
        Proc::router_env(args, &[])
    }

    /// `switchyard run <args>` with extra environment variables. Its state directory (where its
    /// audit log goes) is `target/tmp/e2e-state` unless `envs` names one: tests leave nothing in
    /// the user's own.
    pub fn router_env(args: &[&str], envs: &[(&str, &str)]) -> Proc {
        let mut argv = vec![bin().to_string(), "run".to_string()];
        argv.extend(args.iter().map(|s| s.to_string()));
        let state = target_tmp().join("e2e-state").display().to_string();
        let mut all = vec![("XDG_STATE_HOME", state.as_str())];
        all.extend(envs.iter().copied());
        Proc::spawn_env("router", &argv, &all)
    }

    /// The argv that runs the fixture server, for use after `--` in a router command line.
    pub fn fixture_cmd(args: &[&str]) -> Vec<String> {
        let mut argv = vec![bin().to_string(), "fixture".to_string()];
        argv.extend(args.iter().map(|s| s.to_string()));
        argv
    }

    /// The fixture server connected directly, without the router.
    pub fn fixture(args: &[&str]) -> Proc {
        Proc::spawn("fixture", &Proc::fixture_cmd(args))
    }

    /// A client over this process's stdin/stdout (can be taken once).
    pub fn client(&mut self) -> Client {
        let w = self.stdin.take().expect("stdin already taken");
        let r = self.stdout.take().expect("stdout already taken");
        Client::new(&self.label, r, w, Some(self.stderr.clone()))
    }

    /// Sends `sig` to the process itself (not its group), e.g. to test the router's own shutdown.
    pub fn signal(&self, sig: i32) {
        crate::signal_pid(self.pid, sig);
    }

    /// Waits for the process to exit (panics after `limit`, showing stderr); stderr is complete after.
    pub async fn wait_timeout(&mut self, limit: Duration) -> ExitStatus {
        if let Some(status) = self.status {
            return status;
        }
        let status = match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => status.expect("wait for child"),
            Err(_) => panic!(
                "{} (pid {}) did not exit within {limit:?}\n--- its stderr ---\n{}",
                self.label,
                self.pid,
                self.stderr.text()
            ),
        };
        self.status = Some(status);
        self.stderr.wait_closed(Duration::from_secs(2));
        status
    }

    pub async fn wait(&mut self) -> ExitStatus {
        self.wait_timeout(DEFAULT_TIMEOUT).await
    }

    /// Exit code, or `None` if it died by a signal (then see `ExitStatus::signal`).
    pub async fn exit_code(&mut self) -> Option<i32> {
        self.wait().await.code()
    }

    /// Whether the process is still running (without reaping anything else).
    pub fn is_running(&mut self) -> bool {
        match self.child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                self.status = Some(status);
                false
            }
            Err(_) => false,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            crate::signal_group(self.pid, libc::SIGKILL);
            let _ = self.child.start_kill();
        }
        if std::thread::panicking() {
            self.stderr.wait_closed(Duration::from_millis(500));
            let status = self.status.map(describe_status).unwrap_or_else(|| "killed by the harness".into());
            eprintln!(
                "--- stderr of {} (pid {}, {status}) ---\n{}--- end of stderr of {} ---",
                self.label,
                self.pid,
                self.stderr.text(),
                self.label
            );
        }
    }
}

pub fn describe_status(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => format!("{s}"),
    }
}

/// What one attempt to read a message produced.
enum Got {
    Msg(Value),
    Eof,
    Timeout,
}

/// A test MCP client: newline-delimited JSON-RPC over any byte stream.
pub struct Client {
    label: String,
    reader: BufReader<Box<dyn AsyncRead + Send + Unpin>>,
    writer: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Partial line kept across timeouts (read_until is cancel-safe only with a persistent buffer).
    line: Vec<u8>,
    /// Messages read while looking for something else, in arrival order.
    buffered: VecDeque<Value>,
    next_id: i64,
    pub timeout: Duration,
    stderr: Option<Stderr>,
    /// Non-JSON stdout lines; without `allow_non_json` the first one fails the test.
    pub non_json: Vec<String>,
    allow_non_json: bool,
    /// What a roots/list (switchyard's own, sent to place the client, or a server's) is
    /// answered with, as a real client answers it: no roots by default. None: such requests are
    /// received like any other message.
    pub roots: Option<Value>,
}

impl Client {
    pub fn new(
        label: &str,
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
        stderr: Option<Stderr>,
    ) -> Client {
        Client {
            label: label.to_string(),
            reader: BufReader::new(Box::new(reader)),
            writer: Some(Box::new(writer)),
            line: Vec::new(),
            buffered: VecDeque::new(),
            next_id: 0,
            timeout: DEFAULT_TIMEOUT,
            stderr,
            non_json: Vec::new(),
            allow_non_json: false,
            roots: Some(json!({"roots": []})),
        }
    }

    /// Collect non-JSON lines in `non_json` instead of failing (for servers that print garbage).
    pub fn allow_non_json(&mut self, allow: bool) {
        self.allow_non_json = allow;
    }

    fn fail(&self, what: &str) -> ! {
        // The tail only: the owning Proc prints the whole stderr when it is dropped.
        let stderr = self.stderr.as_ref().map(Stderr::text).unwrap_or_default();
        let lines: Vec<&str> = stderr.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        panic!(
            "{} client: {what}\n--- still buffered: {} message(s): {:?}\n--- last stderr lines ---\n{tail}",
            self.label,
            self.buffered.len(),
            self.buffered
        );
    }

    // ---- sending ----

    /// Writes one line (a newline is added if missing).
    pub async fn send_raw(&mut self, line: &str) {
        if let Err(e) = self.try_send_raw(line).await {
            self.fail(&format!("write failed: {e}"));
        }
    }

    /// Writes part of a message, without a newline (a client that pauses mid-message).
    pub async fn send_raw_partial(&mut self, part: &str) {
        let Some(w) = self.writer.as_mut() else { self.fail("send after close") };
        let written = async {
            w.write_all(part.as_bytes()).await?;
            w.flush().await
        };
        if let Err(e) = written.await {
            self.fail(&format!("write failed: {e}"));
        }
    }

    /// Like `send_raw`, for tests where the other side may close its input first.
    pub async fn try_send_raw(&mut self, line: &str) -> std::io::Result<()> {
        let Some(w) = self.writer.as_mut() else { self.fail("send after close") };
        let mut bytes = line.as_bytes().to_vec();
        if !bytes.ends_with(b"\n") {
            bytes.push(b'\n');
        }
        w.write_all(&bytes).await?;
        w.flush().await
    }

    pub async fn send(&mut self, msg: &Value) {
        self.send_raw(&msg.to_string()).await;
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params})).await;
    }

    /// Sends a request with the next numeric id (0, 1, 2… like the official SDKs) and returns the id.
    pub async fn send_request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        self.send_request_with_id(id.clone(), method, params).await;
        id
    }

    pub async fn send_request_with_id(&mut self, id: Value, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
    }

    /// Answers a server->client request.
    pub async fn respond(&mut self, id: Value, result: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result})).await;
    }

    pub async fn respond_error(&mut self, id: Value, code: i64, message: &str) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})).await;
    }

    /// Sends `notifications/cancelled` for one of our requests.
    pub async fn cancel(&mut self, id: &Value, reason: &str) {
        self.notify("notifications/cancelled", json!({"requestId": id, "reason": reason})).await;
    }

    /// Closes our end of stdin (the server sees EOF).
    pub async fn close(&mut self) {
        if let Some(mut w) = self.writer.take() {
            let _ = w.shutdown().await;
        }
    }

    // ---- request/response ----

    /// Sends a request and returns its full response message, buffering anything else that arrives.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
        self.wait_response(&id).await
    }

    pub async fn request_with_id(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send_request_with_id(id.clone(), method, params).await;
        self.wait_response(&id).await
    }

    /// The response (result or error) with this id; other messages stay buffered.
    pub async fn wait_response(&mut self, id: &Value) -> Value {
        let id = id.clone();
        self.recv_until(move |m| is_response(m) && m["id"] == id).await
    }

    /// `tools/call` and its full response.
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments})).await
    }

    /// `tools/call` expecting success; returns the first text block.
    pub async fn call_text(&mut self, name: &str, arguments: Value) -> String {
        let resp = self.call_tool(name, arguments).await;
        if resp.get("error").is_some() || resp["result"]["isError"] == true {
            self.fail(&format!("tool {name} failed: {resp}"));
        }
        tool_text(&resp).to_string()
    }

    /// initialize (declaring sampling, elicitation and roots) + notifications/initialized;
    /// returns the initialize response.
    pub async fn initialize(&mut self) -> Value {
        self.initialize_with("2025-06-18").await
    }

    pub async fn initialize_with(&mut self, protocol_version: &str) -> Value {
        let resp = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": protocol_version,
                    "capabilities": {"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}},
                    "clientInfo": {"name": "switchyard-e2e", "version": "0.0.0"},
                }),
            )
            .await;
        if resp.get("result").is_none() {
            self.fail(&format!("initialize failed: {resp}"));
        }
        self.notify("notifications/initialized", json!({})).await;
        resp
    }

    // ---- receiving ----

    async fn read_message(&mut self, limit: Duration) -> Got {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let read = tokio::time::timeout_at(deadline, self.reader.read_until(b'\n', &mut self.line)).await;
            match read {
                Err(_) => return Got::Timeout,
                Ok(Err(e)) => self.fail(&format!("read failed: {e}")),
                Ok(Ok(0)) if self.line.is_empty() => return Got::Eof,
                // EOF in the middle of a line: treat what we have as the last line.
                Ok(Ok(_)) => {}
            }
            let line = std::mem::take(&mut self.line);
            let text = String::from_utf8_lossy(&line);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(text) {
                Ok(v) if v["method"] == "roots/list" && !v["id"].is_null() && self.roots.is_some() => {
                    let answer = json!({"jsonrpc": "2.0", "id": v["id"], "result": self.roots});
                    self.send(&answer).await;
                }
                Ok(v) => return Got::Msg(v),
                Err(e) if self.allow_non_json => {
                    let _ = e;
                    self.non_json.push(text.to_string());
                }
                Err(e) => self.fail(&format!("non-JSON line on stdout ({e}): {text:?}")),
            }
        }
    }

    /// The next message (buffered ones first); fails the test after `timeout`.
    pub async fn recv(&mut self) -> Value {
        if let Some(m) = self.buffered.pop_front() {
            return m;
        }
        match self.read_message(self.timeout).await {
            Got::Msg(m) => m,
            Got::Eof => self.fail("stream closed while waiting for a message"),
            Got::Timeout => self.fail(&format!("no message within {:?}", self.timeout)),
        }
    }

    /// The next message if one arrives within `limit` (buffered ones first); fails on EOF.
    pub async fn recv_timeout(&mut self, limit: Duration) -> Option<Value> {
        if let Some(m) = self.buffered.pop_front() {
            return Some(m);
        }
        match self.read_message(limit).await {
            Got::Msg(m) => Some(m),
            Got::Eof => self.fail("stream closed while waiting for a message"),
            Got::Timeout => None,
        }
    }

    /// The first message matching `pred` (buffered ones included); the others stay buffered in order.
    pub async fn recv_until(&mut self, mut pred: impl FnMut(&Value) -> bool) -> Value {
        if let Some(pos) = self.buffered.iter().position(&mut pred) {
            return self.buffered.remove(pos).unwrap();
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read_message(left).await {
                Got::Msg(m) if pred(&m) => return m,
                Got::Msg(m) => self.buffered.push_back(m),
                Got::Eof => self.fail("stream closed before the awaited message"),
                Got::Timeout => self.fail(&format!("awaited message not seen within {:?}", self.timeout)),
            }
        }
    }

    /// Next server->client request with this method (e.g. "sampling/createMessage").
    pub async fn recv_request(&mut self, method: &str) -> Value {
        let method = method.to_string();
        self.recv_until(move |m| m["method"] == method.as_str() && m.get("id").is_some()).await
    }

    /// Next notification with this method.
    pub async fn recv_notification(&mut self, method: &str) -> Value {
        let method = method.to_string();
        self.recv_until(move |m| m["method"] == method.as_str() && m.get("id").is_none()).await
    }

    /// Asserts that nothing (buffered or new) arrives within `limit`.
    pub async fn expect_silence(&mut self, limit: Duration) {
        if let Some(m) = self.recv_timeout(limit).await {
            self.fail(&format!("expected no message, got {m}"));
        }
    }

    /// Waits for the server to close its output; messages read meanwhile are returned.
    pub async fn expect_eof(&mut self) -> Vec<Value> {
        let mut seen: Vec<Value> = self.buffered.drain(..).collect();
        loop {
            match self.read_message(self.timeout).await {
                Got::Msg(m) => seen.push(m),
                Got::Eof => return seen,
                Got::Timeout => self.fail("output not closed in time"),
            }
        }
    }

    /// Messages read but not yet consumed.
    pub fn buffered(&self) -> &VecDeque<Value> {
        &self.buffered
    }
}

pub fn is_response(m: &Value) -> bool {
    m.get("method").is_none() && (m.get("result").is_some() || m.get("error").is_some())
}

/// The first text block of a tools/call response (empty if none).
pub fn tool_text(resp: &Value) -> &str {
    resp["result"]["content"][0]["text"].as_str().unwrap_or_default()
}

/// The text of a policy plugin's refusal of a tools/call: a tool result with `isError: true`
/// (what clients hand to the model). Panics, showing `resp`, when it is anything else.
pub fn refusal_text(resp: &Value) -> &str {
    let text = tool_text(resp);
    assert!(
        resp["result"]["isError"] == true && text.contains("was refused by policy plugin"),
        "not a refusal as a tool result: {resp}"
    );
    text
}

/// Whether `resp` is a policy plugin's refusal of a tools/call (see [`refusal_text`]).
pub fn is_refusal(resp: &Value) -> bool {
    resp["result"]["isError"] == true && tool_text(resp).contains("was refused by policy plugin")
}

/// The fixture's journal: one JSON value per line; missing file = empty.
pub fn journal(path: impl AsRef<Path>) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path.as_ref()) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad journal line ({e}): {l}")))
        .collect()
}

/// Polls the journal until `pred` holds for it (the fixture writes asynchronously to the test).
pub async fn wait_journal(path: impl AsRef<Path>, limit: Duration, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + limit;
    loop {
        let entries = journal(path.as_ref());
        if pred(&entries) {
            return entries;
        }
        if Instant::now() >= deadline {
            panic!("journal condition not met within {limit:?}; journal:\n{}", render(&entries));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Journal entries that are events named `name`.
pub fn events<'a>(entries: &'a [Value], name: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    entries.iter().filter(move |e| e["event"] == name)
}

/// Messages the fixture received with this method.
pub fn received<'a>(entries: &'a [Value], method: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    entries.iter().filter(move |e| e["dir"] == "in" && e["msg"]["method"] == method).map(|e| &e["msg"])
}

fn render(entries: &[Value]) -> String {
    entries.iter().map(|e| format!("{e}\n")).collect()
}

/// A process's resident memory in KiB, from /proc (None once it is gone).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()
}

/// Whether `pid` is a live process (a zombie counts as dead: it no longer runs anything). Every
/// thread counts: after kill -9 the main thread may be a zombie while another is still exiting,
/// and until the last one is gone the process's descriptors (its sockets) are still open.
pub fn pid_alive(pid: u32) -> bool {
    let running =
        |stat: &str| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']));
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    // The state letter follows the parenthesised command name, which may contain spaces.
    tasks.flatten().any(|t| std::fs::read_to_string(t.path().join("stat")).is_ok_and(|s| running(&s)))
}

/// Live descendants of `pid` (children, grandchildren…), from /proc.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(p) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("Z");
            let ppid = fields.next().and_then(|f| f.parse::<u32>().ok()).unwrap_or(0);
            if state != "Z" && state != "X" {
                parent_of.push((p, ppid));
            }
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    found.remove(0);
    found
}

/// Waits until none of `pids` is alive; panics naming the survivors after `limit`.
pub async fn wait_all_dead(pids: &[u32], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|p| pid_alive(*p)).collect();
        if alive.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("processes still running after {limit:?}: {alive:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
