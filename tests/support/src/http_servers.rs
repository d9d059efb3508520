//! Real MCP servers over HTTP, run as child processes for the remote-server tests: the Python
//! SDK's server (tests/python/http_server.py) and `@modelcontextprotocol/server-everything` in
//! its `streamableHttp` and `sse` modes; with a free-port helper, a port poller and a restart that
//! keeps the port.
//!
//! Everything here is synchronous and tokio-free, so sync tests and async tests alike can use it.
//!
//! By hand, from the repository root (after a test run made the venv and node_modules):
//! - `target/tmp/python-venv/bin/python tests/python/http_server.py --port 8000
//!   --transport streamable-http --runs-file /tmp/runs.jsonl` (then `http://127.0.0.1:8000/mcp`;
//!   `--transport sse` serves `/sse`);
//! - `PORT=3001 node tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js
//!   streamableHttp` (`/mcp`; or `sse`: `/sse`).

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::python_venv::{python_dir, venv_python};
use super::{Stderr, TempDir, describe_status, temp_dir};

/// How long a server may take from spawn to accepting connections (Python imports the SDK first;
/// shared machines are slow).
pub const READY_LIMIT: Duration = Duration::from_secs(60);

/// The two HTTP transports of MCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteTransport {
    /// Streamable HTTP, at /mcp.
    StreamableHttp,
    /// Legacy HTTP+SSE, GET at /sse.
    Sse,
}

impl RemoteTransport {
    /// The name on command lines (`--transport`): `streamable-http` or `sse`.
    pub fn arg(self) -> &'static str {
        match self {
            RemoteTransport::StreamableHttp => "streamable-http",
            RemoteTransport::Sse => "sse",
        }
    }

    /// The endpoint path both test servers use for it.
    pub fn path(self) -> &'static str {
        match self {
            RemoteTransport::StreamableHttp => "/mcp",
            RemoteTransport::Sse => "/sse",
        }
    }
}

/// A port on 127.0.0.1 that was free a moment ago (bound to port 0, then released), for a server
/// that must be told its port.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
    listener.local_addr().expect("local address").port()
}

/// 127.0.0.1:`port`.
pub fn local(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

/// Polls until `addr` accepts a TCP connection; false if it did not within `limit`.
pub fn wait_for_port(addr: SocketAddr, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Polls until `addr` refuses connections (a server is really down); false if it still accepts
/// after `limit`.
pub fn wait_port_closed(addr: SocketAddr, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return true,
            _ if Instant::now() >= deadline => return false,
            _ => std::thread::sleep(Duration::from_millis(25)),
        }
    }
}

/// Options of the Python SDK server (tests/python/http_server.py).
#[derive(Clone, Debug, Default)]
pub struct PythonServerOptions {
    /// Streamable HTTP without sessions (`--stateless`).
    pub stateless: bool,
    /// Streamable HTTP answering plain JSON instead of an SSE stream (`--json-response`).
    pub json_response: bool,
    /// Streamable HTTP with an in-memory event store (`--event-store`): every SSE event has an id
    /// and a broken stream can be resumed with `Last-Event-ID`. Off: nothing is resumable.
    pub event_store: bool,
    /// An event store that takes a resume and replays nothing (`--forgetful-store`), as a buggy
    /// one does: the resumed stream stays silent.
    pub forgetful_store: bool,
    /// Require `Authorization: Bearer <token>` on every request, else 401 (`--bearer`).
    pub bearer: Option<String>,
}

/// An MCP server over HTTP in a process group of its own, on a fixed port of 127.0.0.1.
///
/// Dropping it kills the whole group (SIGKILL) and reaps it, so no server outlives its test; when
/// the test is failing, the server's output (stdout and stderr, every incarnation) is printed.
pub struct HttpServer {
    label: String,
    argv: Vec<String>,
    envs: Vec<(String, String)>,
    transport: RemoteTransport,
    port: u16,
    child: Option<Child>,
    /// Output of the running incarnation.
    output: Stderr,
    /// Output of the incarnations before the last (re)start.
    earlier: String,
    /// Holds the runs file, which outlives restarts.
    dir: TempDir,
    has_runs_file: bool,
}

impl HttpServer {
    /// The Python SDK server (`http_server.py`) on a free port, ready when this returns. Its tools:
    /// `echo(text)` read-only; `slow_echo(text, ms)` idempotent; `slow_counter(ms)` neither (it
    /// returns how many times it started); the slow ones log each start in `runs_file()`.
    pub fn python(transport: RemoteTransport, options: &PythonServerOptions) -> HttpServer {
        let port = free_port();
        let dir = temp_dir();
        let runs = dir.path().join("runs.jsonl");
        let mut argv = vec![
            venv_python().display().to_string(),
            python_dir().join("http_server.py").display().to_string(),
            "--port".into(),
            port.to_string(),
            "--transport".into(),
            transport.arg().into(),
            "--runs-file".into(),
            runs.display().to_string(),
        ];
        if options.stateless {
            argv.push("--stateless".into());
        }
        if options.json_response {
            argv.push("--json-response".into());
        }
        if options.event_store {
            argv.push("--event-store".into());
        }
        if options.forgetful_store {
            argv.push("--forgetful-store".into());
        }
        if let Some(token) = &options.bearer {
            argv.extend(["--bearer".to_string(), token.clone()]);
        }
        let envs = vec![("PYTHONUNBUFFERED".to_string(), "1".to_string())];
        HttpServer::launch(&format!("python-{}", transport.arg()), argv, envs, transport, port, dir, true)
    }

    /// `@modelcontextprotocol/server-everything` (`entry` is its dist/index.js, see
    /// `npm_setup::everything_entry`; call `npm_setup::ensure_npm` first) in its `streamableHttp`
    /// (/mcp, with an event store: its streams are resumable) or `sse` mode (/sse, messages POSTed
    /// to /message), on a free port passed in `PORT`, ready when this returns.
    pub fn everything(entry: &Path, transport: RemoteTransport) -> HttpServer {
        let port = free_port();
        let mode = match transport {
            RemoteTransport::StreamableHttp => "streamableHttp",
            RemoteTransport::Sse => "sse",
        };
        let argv = vec!["node".to_string(), entry.display().to_string(), mode.to_string()];
        let envs = vec![("PORT".to_string(), port.to_string())];
        HttpServer::launch(&format!("everything-{mode}"), argv, envs, transport, port, temp_dir(), false)
    }

    fn launch(
        label: &str,
        argv: Vec<String>,
        envs: Vec<(String, String)>,
        transport: RemoteTransport,
        port: u16,
        dir: TempDir,
        has_runs_file: bool,
    ) -> HttpServer {
        let mut server = HttpServer {
            label: label.to_string(),
            argv,
            envs,
            transport,
            port,
            child: None,
            output: Stderr::default(),
            earlier: String::new(),
            dir,
            has_runs_file,
        };
        server.start();
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// 127.0.0.1:port.
    pub fn addr(&self) -> SocketAddr {
        local(self.port)
    }

    pub fn transport(&self) -> RemoteTransport {
        self.transport
    }

    /// The MCP endpoint: `http://127.0.0.1:PORT/mcp` or `…/sse`.
    pub fn url(&self) -> String {
        self.url_via(self.addr())
    }

    /// The same endpoint at another address, e.g. a `FaultProxy` in front of this server.
    pub fn url_via(&self, addr: SocketAddr) -> String {
        format!("http://{addr}{}", self.transport.path())
    }

    /// The process id of the running incarnation.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The Python server's runs file: one JSON line (`{"tool", "pid"}`) per start of `slow_echo`
    /// or `slow_counter`, kept across restarts.
    pub fn runs_file(&self) -> PathBuf {
        assert!(self.has_runs_file, "{} keeps no runs file (only the Python server does)", self.label);
        self.dir.path().join("runs.jsonl")
    }

    /// How many times `tool` started so far, by the runs file (0 before the first run).
    pub fn runs(&self, tool: &str) -> usize {
        let text = std::fs::read_to_string(self.runs_file()).unwrap_or_default();
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("bad runs line ({e}): {l}"))
            })
            .filter(|run| run["tool"] == tool)
            .count()
    }

    /// Polls the runs file until `tool` started at least `count` times; false after `limit`.
    pub fn wait_runs(&self, tool: &str, count: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.runs(tool) < count {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Everything the server printed (stdout and stderr), earlier incarnations first.
    pub fn log(&self) -> String {
        format!("{}{}", self.earlier, self.output.text())
    }

    /// Whether the current incarnation still runs.
    pub fn is_running(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else { return false };
        if matches!(child.try_wait(), Ok(None)) {
            return true;
        }
        // Reaped: its pid (and group id) may be reused now, so it must never be signalled again.
        self.child = None;
        false
    }

    /// Kills the server (SIGKILL to its process group: a crash, not a shutdown) and waits until
    /// its port refuses connections. A no-op when it is not running.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        kill_group(&mut child);
        // Gone from the port too, so a caller can rely on "down" when this returns.
        assert!(
            wait_port_closed(self.addr(), Duration::from_secs(10)),
            "{} still accepts connections on {} after SIGKILL",
            self.label,
            self.addr()
        );
    }

    /// Starts the server (again) with the same command line on the same port, and waits until it
    /// accepts connections; fails the test with its output if it exits or never listens.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running; stop() it first", self.label);
        self.earlier.push_str(&self.output.text());
        let (read, write) = std::io::pipe().expect("output pipe");
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(write.try_clone().expect("clone output pipe")))
            .stderr(Stdio::from(write))
            // Own group: stop() and Drop kill it with anything it started.
            .process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("{}: spawn {:?}: {e}", self.label, self.argv));
        // Our copies of the write end must go, or the reader never sees EOF.
        drop(cmd);
        self.output = Stderr::collect(read, self.label.clone());
        self.child = Some(child);
        let deadline = Instant::now() + READY_LIMIT;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                self.output.wait_closed(Duration::from_secs(2));
                panic!(
                    "{} exited ({}) before listening on {}\n--- its output ---\n{}",
                    self.label,
                    describe_status(status),
                    self.addr(),
                    self.log()
                );
            }
            if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(500)).is_ok() {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} did not listen on {} within {READY_LIMIT:?}\n--- its output ---\n{}",
                    self.label,
                    self.addr(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// `stop()` then `start()`: the "server restarted" case (sessions and streams gone, same port,
    /// runs file kept).
    pub fn restart(&mut self) {
        self.stop();
        self.start();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_group(&mut child);
        }
        if std::thread::panicking() {
            self.output.wait_closed(Duration::from_millis(500));
            eprintln!(
                "--- output of {} (port {}) ---\n{}--- end of output of {} ---",
                self.label,
                self.port,
                self.log(),
                self.label
            );
        }
    }
}

/// SIGKILL to the child's process group, then reap the child.
fn kill_group(child: &mut Child) {
    crate::signal_group(child.id(), libc::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}
