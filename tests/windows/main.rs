//! End-to-end tests of the Windows build, run under Wine by scripts/windows.sh (and on Windows
//! itself by `cargo test --test windows`): the real `switchyard.exe` against its own fixture
//! server (`switchyard.exe fixture`), through `run`, the daemon's named pipe, `stop`, and
//! `wrap`/`unwrap` of a Claude Desktop config under `%APPDATA%`.
//!
//! What Wine cannot show is listed in docs/platforms.md; these tests check nothing that
//! depends on it.
#![cfg(windows)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

/// How long any one answer may take (Wine starts processes slowly).
const WAIT: Duration = Duration::from_secs(60);

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_switchyard"))
}

/// A user profile of its own for each test: APPDATA, LOCALAPPDATA and USERPROFILE under `dir`.
fn profile(cmd: &mut Command, dir: &Path) {
    for (var, sub) in [("USERPROFILE", ""), ("APPDATA", "Roaming"), ("LOCALAPPDATA", "Local")] {
        let path = dir.join(sub);
        std::fs::create_dir_all(&path).unwrap();
        cmd.env(var, path);
    }
}

/// A process spoken to in newline-delimited JSON-RPC over its stdin and stdout.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Answers read while waiting for another id.
    early: Vec<Value>,
}

impl Peer {
    fn start(args: &[&str], dir: &Path) -> Peer {
        let mut cmd = Command::new(exe());
        cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        profile(&mut cmd, dir);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start switchyard {args:?}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer { stdin: child.stdin.take(), child, lines, early: Vec::new() }
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// The response to request `id`.
    fn answer(&mut self, id: i64) -> Value {
        if let Some(i) = self.early.iter().position(|m| m["id"] == json!(id)) {
            return self.early.remove(i);
        }
        loop {
            let line =
                self.lines.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no answer to request {id} within {WAIT:?}"));
            let message: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}"));
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
            if message.get("method").is_none() {
                self.early.push(message);
            }
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer(id)
    }

    fn initialize(&mut self) {
        let init = self.request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "wine-test", "version": "1"}}),
        );
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn call(&mut self, id: i64, tool: &str, arguments: Value) -> Value {
        self.request(id, "tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// Whether the process's stdout reaches its end (every holder of the pipe closed it)
    /// within `limit`, skipping what it still says.
    fn output_ends_within(&mut self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return true,
                Err(mpsc::RecvTimeoutError::Timeout) => return false,
            }
        }
    }

    /// Closes stdin and waits for the process to exit.
    fn finish(&mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "switchyard did not exit after its stdin closed");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text_of(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result: {response}"))
        .to_string()
}

/// The fixture's own process id, from its `pid` tool.
fn server_pid(peer: &mut Peer, id: i64) -> u32 {
    let said: Value = serde_json::from_str(&text_of(&peer.call(id, "pid", json!({})))).unwrap();
    said["pid"].as_u64().unwrap() as u32
}

fn wait_gone(pid: u32) {
    let deadline = std::time::Instant::now() + WAIT;
    while switchyard_os::process::running(pid) {
        assert!(std::time::Instant::now() < deadline, "process {pid} is still running");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn run_answers_calls_and_repeats_a_safe_call_when_its_server_dies() {
    let dir = tempfile::tempdir().unwrap();
    let me = exe();
    let me = me.to_str().unwrap();
    let mut run = Peer::start(&["run", "--", me, "fixture", "--name", "win"], dir.path());
    run.initialize();
    assert_eq!(text_of(&run.call(1, "echo", json!({"text": "über ✓"}))), "über ✓");
    let first = server_pid(&mut run, 2);
    // A read-only, idempotent call in flight when its server crashes is sent again to a new
    // instance; the crash itself may have run, and is answered with an error, never repeated.
    run.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 2000}}}));
    std::thread::sleep(Duration::from_millis(500));
    let crash = run.call(4, "crash", json!({"code": 9}));
    assert!(crash.get("error").is_some() || crash["result"]["isError"] == json!(true), "{crash}");
    let slept = run.answer(3);
    assert!(
        slept.get("result").is_some() && slept["result"]["isError"] != json!(true),
        "the safe call was not repeated: {slept}"
    );
    wait_gone(first);
    let second = server_pid(&mut run, 5);
    assert_ne!(first, second, "a new instance serves after the crash");
    assert!(run.finish().success());
    assert!(run.output_ends_within(Duration::from_secs(10)), "the server holds the client's output open");
    wait_gone(second);
}

#[test]
fn a_cmd_shim_on_path_starts_by_its_bare_name_with_its_arguments_intact() {
    // As npm installs `npx`: a `.cmd` file on PATH that CreateProcess alone would not find.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("shims");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("myserver.cmd"), format!("@echo off\r\n\"{}\" fixture %*\r\n", exe().display())).unwrap();
    let path = format!("{};{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new(exe());
    cmd.args(["run", "--", "myserver", "--name", "shim with spaces"])
        .env("PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    profile(&mut cmd, dir.path());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    let answer: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(answer["result"]["serverInfo"]["name"], "shim with spaces", "{answer}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

fn write_config(dir: &Path) -> PathBuf {
    let config = dir.join("switchyard.toml");
    let exe = exe().to_string_lossy().replace('\\', "\\\\");
    std::fs::write(
        &config,
        format!("[servers.echo]\ncommand = \"{exe}\"\nargs = [\"fixture\", \"--name\", \"echo\"]\n"),
    )
    .unwrap();
    config
}

fn switchyard(args: &[&str], dir: &Path) -> std::process::Output {
    let mut cmd = Command::new(exe());
    // What `wrap` writes into the entries: the binary under test, though it is in a build directory.
    cmd.args(args).stdin(Stdio::null()).env("SWITCHYARD_STABLE_BIN", std::path::absolute(exe()).unwrap());
    profile(&mut cmd, dir);
    cmd.output().unwrap()
}

#[test]
fn the_daemon_serves_two_connects_over_its_pipe_outlives_one_and_stop_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let config = config.to_str().unwrap();
    let mut a = Peer::start(&["connect", "echo", "--config", config], dir.path());
    a.initialize();
    let mut b = Peer::start(&["connect", "echo", "--config", config], dir.path());
    b.initialize();
    assert_eq!(text_of(&a.call(1, "echo", json!({"text": "from a"}))), "from a");
    assert_eq!(text_of(&b.call(1, "echo", json!({"text": "from b"}))), "from b");
    let server = server_pid(&mut b, 2);
    // One client leaves: the daemon and its server stay for the other. `a` started the daemon,
    // which must not have inherited `a`'s pipes: `a`'s output ends when `a` exits, and `a`
    // exits at once with nothing in flight (a named pipe has no half-close to wait on).
    let closed = std::time::Instant::now();
    assert!(a.finish().success());
    assert!(closed.elapsed() < Duration::from_secs(4), "connect took {:?} to exit", closed.elapsed());
    assert!(a.output_ends_within(Duration::from_secs(10)), "the client's output pipe is held open by another process");
    assert_eq!(text_of(&b.call(3, "echo", json!({"text": "still here"}))), "still here");
    assert_eq!(server_pid(&mut b, 4), server, "the server lived on");
    let status = switchyard(&["status", "--config", config], dir.path());
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success() && said.contains("echo"), "status: {said}");
    drop(b);
    let stopped = switchyard(&["stop", "--config", config], dir.path());
    assert!(stopped.status.success(), "stop: {}", String::from_utf8_lossy(&stopped.stderr));
    wait_gone(server);
    let after = switchyard(&["status", "--config", config], dir.path());
    let said = format!("{}{}", String::from_utf8_lossy(&after.stdout), String::from_utf8_lossy(&after.stderr));
    assert!(said.contains("no switchyard daemon runs"), "status after stop: {said}");
}

#[test]
fn wrap_and_unwrap_of_claude_desktop_under_appdata_round_trip_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let claude = dir.path().join("Roaming").join("Claude");
    std::fs::create_dir_all(&claude).unwrap();
    let file = claude.join("claude_desktop_config.json");
    let original = "{\r\n  \"mcpServers\": {\r\n    \"files\": {\r\n      \"command\": \"npx\",\r\n      \"args\": [\"-y\", \"@modelcontextprotocol/server-filesystem\", \"C:\\\\Users\\\\me\\\\work\"]\r\n    }\r\n  }\r\n}\r\n";
    std::fs::write(&file, original).unwrap();
    let wrapped = switchyard(&["wrap", "--client", "claude-desktop"], dir.path());
    assert!(wrapped.status.success(), "wrap: {}", String::from_utf8_lossy(&wrapped.stderr));
    let now = std::fs::read_to_string(&file).unwrap();
    assert!(now.contains("connect") && now.contains("switchyard"), "{now}");
    let toml = dir.path().join("Roaming").join("switchyard").join("switchyard.toml");
    assert!(std::fs::read_to_string(&toml).unwrap().contains("server-filesystem"));
    let unwrapped = switchyard(&["unwrap", "--client", "claude-desktop"], dir.path());
    assert!(unwrapped.status.success(), "unwrap: {}", String::from_utf8_lossy(&unwrapped.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), original);
}
