//! Section `silent`: links that die without a word. For each fault, the time from the fault to
//! the client's answer through `switchyard run --url`, through mcp-remote, and from the
//! TypeScript and Python SDK clients connecting directly: the four clients on the same server,
//! behind the same fault proxy, hit by the same fault at the same moment, all with their
//! default settings.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_testkit::{proxy::FaultProxy, python_venv, signal_group};

use super::*;

/// Repetitions of each fault.
pub(crate) const REPS: usize = 3;
/// How long the bench waits for an answer after a fault; past it the call counts as hung.
pub(crate) const CAP: Duration = Duration::from_secs(75);
/// How long a client may take to start and connect (Python imports the SDK first).
pub(crate) const START_LIMIT: Duration = Duration::from_secs(60);
/// (a): how long the link stays idle after going silent before the next call.
pub(crate) const IDLE: Duration = Duration::from_secs(5);
/// (a'): the same, shorter than switchyard's idle-connection expiry (4 s).
pub(crate) const IDLE_SHORT: Duration = Duration::from_secs(1);
/// (b), (c): when the black hole lifts, counted from the fault.
pub(crate) const HEAL_AFTER_PROBE: Duration = Duration::from_secs(20);
pub(crate) const HEAL_AT_12: Duration = Duration::from_secs(12);
/// (e): how long the server stays down before it is started again.
pub(crate) const DOWN: Duration = Duration::from_millis(1500);
/// The MCP version the stdio clients ask for (the Python server numbers its stream events, so
/// a broken stream can be resumed, from 2025-11-25 on).
pub(crate) const PROTOCOL_VERSION: &str = "2025-11-25";

/// The faults measured, in the order of the table.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Fault {
    /// Every connection stranded while idle, new ones carry; the next call after `IDLE`.
    IdleStranded(Duration),
    /// A `slow_counter` (not safe to repeat) in flight; every connection stranded and new ones
    /// black-holed until `HEAL_AFTER_PROBE`.
    SilentUnsafe,
    /// A `slow_echo` (idempotent) in flight; stranded, new connections black-holed until `HEAL_AT_12`.
    SilentSafe,
    /// A `slow_echo` in flight on a server whose event store takes a resume and sends nothing;
    /// every connection reset.
    SilentResume,
    /// The server killed; an `echo` (read-only) sent; the server started again `DOWN` later.
    Restart,
}

impl Fault {
    pub(crate) fn label(self) -> String {
        match self {
            Fault::IdleStranded(idle) => {
                format!("(a) idle link stranded, network healed; `echo` {} s later", idle.as_secs())
            }
            Fault::SilentUnsafe => format!(
                "(b) link silent mid-call (stranded + black hole {} s); `slow_counter`, not safe to repeat",
                HEAL_AFTER_PROBE.as_secs()
            ),
            Fault::SilentSafe => {
                format!("(c) the same, path heals at {} s; `slow_echo` 3 s, idempotent", HEAL_AT_12.as_secs())
            }
            Fault::SilentResume => {
                "(d) stream cut mid-call, its resume stays silent (`--forgetful-store`); `slow_echo` 1.5 s".into()
            }
            Fault::Restart => {
                format!("(e) server killed, started again {:.1} s later; `echo`, read-only", DOWN.as_secs_f64())
            }
        }
    }

    /// What the Python server runs with for this fault.
    pub(crate) fn server_args(self) -> &'static [&'static str] {
        match self {
            Fault::SilentResume => &["--forgetful-store"],
            _ => &[],
        }
    }
}

/// One client kind, a column of the table.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Switchyard,
    McpRemote,
    TypeScript,
    Python,
}

pub(crate) const KINDS: [Kind; 4] = [Kind::Switchyard, Kind::McpRemote, Kind::TypeScript, Kind::Python];

impl Kind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Switchyard => "switchyard run --url",
            Kind::McpRemote => "mcp-remote 0.15.1",
            Kind::TypeScript => "TypeScript SDK 1.32.2, direct",
            Kind::Python => "Python SDK 2.3.0, direct",
        }
    }

    /// Whether it speaks MCP on stdio (a bridge) rather than the SDK drivers' line protocol.
    pub(crate) fn is_bridge(self) -> bool {
        matches!(self, Kind::Switchyard | Kind::McpRemote)
    }
}

/// How a call ended, and when (the reader thread's clock, so the order of waiting is no bias).
#[derive(Clone)]
pub(crate) enum Answer {
    Result(String),
    Error(String),
    Hung,
    /// The client process ended (its stdout closed) without answering.
    Exited,
}

pub(crate) struct Outcome {
    pub(crate) answer: Answer,
    /// From the fault; `CAP` when hung.
    pub(crate) after: Duration,
}

/// What the section needs besides the bench: the virtualenv's python and the peers' paths.
pub(crate) struct Tools {
    pub(crate) python: PathBuf,
    pub(crate) mcp_remote: PathBuf,
    pub(crate) ts_sdk: PathBuf,
}

impl Bench {
    /// The `silent` section: see the module documentation.
    pub(super) fn silent(&self) {
        let tools = match self.silent_tools() {
            Ok(t) => t,
            Err(why) => {
                println!("\n(silent: {why}; skipped)");
                return;
            }
        };
        let faults = [
            Fault::IdleStranded(IDLE),
            Fault::IdleStranded(IDLE_SHORT),
            Fault::SilentUnsafe,
            Fault::SilentSafe,
            Fault::SilentResume,
            Fault::Restart,
        ];
        let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let mut table: Vec<(Fault, Vec<Vec<Outcome>>)> = Vec::new();
        let mut messages: Vec<(String, String)> = Vec::new();
        for fault in faults {
            let mut server = HttpServer::python_with(
                &tools.python,
                &self.repo,
                &self.dir,
                &format!("silent-{}", table.len()),
                fault.server_args(),
            );
            let mut columns: Vec<Vec<Outcome>> = KINDS.iter().map(|_| Vec::new()).collect();
            for rep in 0..REPS {
                eprintln!("silent: {} — repetition {}", fault.label(), rep + 1);
                let outcomes = self.silent_once(&tools, &mut server, fault, rep);
                for (i, o) in outcomes.into_iter().enumerate() {
                    if rep == 0
                        && let Answer::Error(m) | Answer::Result(m) = &o.answer
                    {
                        messages.push((format!("{} — {}", short(fault), KINDS[i].label()), m.clone()));
                    }
                    columns[i].push(o);
                }
            }
            table.push((fault, columns));
        }
        let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

        println!("\n### Silent links: fault → the client's answer ({REPS} times each; min / median / max)\n");
        println!("Load average at the start: {}; at the end: {}.\n", load_before.trim(), load_after.trim());
        print!("| fault, call |");
        for k in KINDS {
            print!(" {} |", k.label());
        }
        println!("\n|---|{}", "---|".repeat(KINDS.len()));
        for (fault, columns) in &table {
            print!("| {} |", fault.label());
            for c in columns {
                print!(" {} |", cell(c));
            }
            println!();
        }
        println!("\nEach client's answer in the first repetition:\n");
        for (what, m) in messages {
            println!("- {what}: `{}`", clip(&m, 400));
        }
    }

    /// The virtualenv's python, mcp-remote (installed from its pinned lock file when missing)
    /// and the TypeScript SDK of tests/npm; Err: what is missing.
    pub(crate) fn silent_tools(&self) -> Result<Tools, String> {
        let python = std::panic::catch_unwind(python_venv::venv_python)
            .map_err(|_| "the Python SDK's virtualenv could not be made (see the message above)".to_string())?;
        let ts_sdk = self.repo.join("tests/npm/node_modules/@modelcontextprotocol/sdk");
        if !ts_sdk.join("package.json").is_file() {
            return Err("the TypeScript SDK is not installed: run `npm ci --ignore-scripts` in tests/npm".into());
        }
        let peer = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/mcp-remote");
        let mcp_remote = peer.join("node_modules/mcp-remote/dist/proxy.js");
        if !mcp_remote.is_file() {
            let status = Command::new("npm")
                .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
                .current_dir(&peer)
                .status()
                .map_err(|e| format!("cannot run npm to install mcp-remote: {e}"))?;
            if !status.success() || !mcp_remote.is_file() {
                return Err(format!("`npm ci` in {} failed ({status})", peer.display()));
            }
        }
        Ok(Tools { python, mcp_remote, ts_sdk })
    }

    /// One repetition of `fault`: a fresh proxy and fresh clients, one `echo` each to see that
    /// they work, then the fault and the call, the four clients at once.
    pub(crate) fn silent_once(&self, tools: &Tools, server: &mut HttpServer, fault: Fault, rep: usize) -> Vec<Outcome> {
        let proxy = FaultProxy::start(server.addr());
        let url = format!("http://{}/mcp", proxy.addr());
        let mut clients: Vec<Peer> =
            KINDS.iter().map(|&k| Peer::start(self, tools, k, &url, &format!("{}-{rep}", short(fault)))).collect();
        for c in &mut clients {
            c.ready();
            let id = c.send_call("echo", json!({"text": "before"}));
            let o = c.wait(id, Instant::now(), Instant::now() + START_LIMIT);
            assert!(
                matches!(&o.answer, Answer::Result(t) if t.contains("before")),
                "{}: the first echo failed",
                c.label
            );
        }
        let (tool, args) = match fault {
            Fault::IdleStranded(_) | Fault::Restart => ("echo", json!({"text": "after"})),
            Fault::SilentUnsafe => ("slow_counter", json!({"ms": 2 * CAP.as_millis() as u64})),
            Fault::SilentSafe => ("slow_echo", json!({"text": "kept", "ms": 3000})),
            Fault::SilentResume => ("slow_echo", json!({"text": "kept", "ms": 1500})),
        };
        let (ids, t0): (Vec<u64>, Instant) = match fault {
            Fault::IdleStranded(idle) => {
                proxy.strand();
                std::thread::sleep(idle);
                let t0 = Instant::now();
                (clients.iter_mut().map(|c| c.send_call(tool, args.clone())).collect(), t0)
            }
            Fault::SilentUnsafe | Fault::SilentSafe | Fault::SilentResume => {
                let before = server.runs(tool);
                let ids = clients.iter_mut().map(|c| c.send_call(tool, args.clone())).collect();
                server.wait_runs(tool, before + clients.len());
                let t0 = Instant::now();
                if fault == Fault::SilentResume {
                    proxy.sever();
                } else {
                    proxy.strand();
                    proxy.black_hole(true);
                }
                (ids, t0)
            }
            Fault::Restart => {
                server.stop();
                let t0 = Instant::now();
                (clients.iter_mut().map(|c| c.send_call(tool, args.clone())).collect(), t0)
            }
        };
        let deadline = t0 + CAP;
        std::thread::scope(|s| {
            // The fault's second act, while the clients wait.
            let proxy = &proxy;
            let server = &mut *server;
            s.spawn(move || match fault {
                Fault::SilentUnsafe | Fault::SilentSafe => {
                    let heal = if fault == Fault::SilentSafe { HEAL_AT_12 } else { HEAL_AFTER_PROBE };
                    std::thread::sleep(heal.saturating_sub(t0.elapsed()));
                    proxy.black_hole(false);
                }
                Fault::Restart => {
                    std::thread::sleep(DOWN.saturating_sub(t0.elapsed()));
                    server.start();
                }
                _ => {}
            });
            clients.iter_mut().zip(ids).map(|(c, id)| c.wait(id, t0, deadline)).collect()
        })
    }
}

/// A client process of one kind, its stdout read by a thread that stamps each line.
pub(crate) struct Peer {
    pub(crate) label: String,
    pub(crate) kind: Kind,
    pub(crate) child: Child,
    pub(crate) stdin: ChildStdin,
    pub(crate) lines: mpsc::Receiver<(Instant, String)>,
    pub(crate) next_id: u64,
    pub(crate) stderr: PathBuf,
}

impl Peer {
    pub(crate) fn start(b: &Bench, tools: &Tools, kind: Kind, url: &str, tag: &str) -> Peer {
        let argv: Vec<String> = match kind {
            Kind::Switchyard => b.remote_argv(&format!("silent-{tag}"), "", url),
            Kind::McpRemote => vec!["node".into(), b.s(&tools.mcp_remote), url.into()],
            Kind::TypeScript => {
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/sdk-client.mjs");
                vec!["node".into(), b.s(&script), b.s(&tools.ts_sdk), url.into()]
            }
            Kind::Python => {
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/sdk-client.py");
                vec![b.s(&tools.python), b.s(&script), url.into()]
            }
        };
        let label = kind.label().to_string();
        let stderr = b.dir.join(format!("silent-{tag}-{}.stderr", label.replace([' ', '/', ','], "_")));
        let mut cmd = command(&argv, &stderr);
        // mcp-remote keeps its state (OAuth clients, tokens) under this directory.
        cmd.env("MCP_REMOTE_CONFIG_DIR", b.dir.join("mcp-auth"));
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send((Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        Peer { label, kind, child, stdin, lines, next_id: 1, stderr }
    }

    pub(crate) fn send(&mut self, msg: &Value) {
        // A client that exited shows as such when its answer is awaited.
        let _ = writeln!(self.stdin, "{msg}").and_then(|()| self.stdin.flush());
    }

    /// Connected: the bridge initialised (as an MCP client would), or the driver's ready line.
    pub(crate) fn ready(&mut self) {
        let deadline = Instant::now() + START_LIMIT;
        if self.kind.is_bridge() {
            self.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                "clientInfo": {"name": "switchyard-bench", "version": "0"}}}));
            let o = self.wait(0, Instant::now(), deadline);
            assert!(matches!(o.answer, Answer::Result(_)), "{}: initialize failed ({})", self.label, self.tail());
            self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
            // The tools' annotations, as a client lists them before calling.
            let id = self.send_call_method("tools/list", json!({}));
            let o = self.wait(id, Instant::now(), deadline);
            assert!(matches!(o.answer, Answer::Result(_)), "{}: tools/list failed ({})", self.label, self.tail());
            return;
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((_, line)) if line.contains("\"ready\"") => return,
                Ok(_) => {}
                Err(_) => panic!("{}: never connected ({})", self.label, self.tail()),
            }
        }
    }

    pub(crate) fn send_call(&mut self, tool: &str, arguments: Value) -> u64 {
        self.send_call_method("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    pub(crate) fn send_call_method(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The answer to request `id`, timed from `t0`; hung at `deadline`.
    pub(crate) fn wait(&mut self, id: u64, t0: Instant, deadline: Instant) -> Outcome {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, line) = match self.lines.recv_timeout(left) {
                Ok(got) => got,
                Err(mpsc::RecvTimeoutError::Timeout) => return Outcome { answer: Answer::Hung, after: deadline - t0 },
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Outcome { answer: Answer::Exited, after: Instant::now().saturating_duration_since(t0) };
                }
            };
            let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
            if msg.get("method").is_some() || msg["id"].as_u64() != Some(id) {
                continue;
            }
            let after = at.saturating_duration_since(t0);
            let answer = match (msg.get("result"), msg.get("error")) {
                (Some(r), _) if r["isError"] == true => Answer::Error(format!("isError result: {r}")),
                (Some(r), _) => Answer::Result(r.to_string()),
                (_, Some(e)) => Answer::Error(e.to_string()),
                _ => Answer::Error(line),
            };
            return Outcome { answer, after };
        }
    }

    /// The last lines of its stderr, for a failure message.
    pub(crate) fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!("stderr in {}:\n{}", self.stderr.display(), lines[lines.len().saturating_sub(8)..].join("\n"))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // A hung client would wait for minutes more: its group goes at once.
        signal_group(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

pub(crate) fn short(fault: Fault) -> &'static str {
    match fault {
        Fault::IdleStranded(d) if d == IDLE => "a",
        Fault::IdleStranded(_) => "a-short",
        Fault::SilentUnsafe => "b",
        Fault::SilentSafe => "c",
        Fault::SilentResume => "d",
        Fault::Restart => "e",
    }
}

/// A table cell: the times and what the answers were.
pub(crate) fn cell(outcomes: &[Outcome]) -> String {
    let kind = |o: &Outcome| match o.answer {
        Answer::Result(_) => "result",
        Answer::Error(_) => "error",
        Answer::Hung => "hung",
        Answer::Exited => "client exited",
    };
    let first = kind(&outcomes[0]);
    if outcomes.iter().all(|o| kind(o) == first) {
        if first == "hung" {
            return format!("> {} s (hung)", CAP.as_secs());
        }
        let mut t: Vec<Duration> = outcomes.iter().map(|o| o.after).collect();
        t.sort();
        return format!("{} / {} / {}, {first}", secs(t[0]), secs(t[t.len() / 2]), secs(t[t.len() - 1]));
    }
    outcomes
        .iter()
        .map(|o| match o.answer {
            Answer::Hung => format!("> {} s hung", CAP.as_secs()),
            _ => format!("{} {}", secs(o.after), kind(o)),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub(crate) fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

pub(crate) fn clip(s: &str, n: usize) -> String {
    let s = s.replace('`', "'");
    if s.len() <= n {
        return s;
    }
    format!("{}…", &s[..s.floor_char_boundary(n)])
}
