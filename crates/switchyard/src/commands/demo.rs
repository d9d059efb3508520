//! `switchyard demo`: the fixture server directly and behind switchyard, side by side, measured.
//!
//! Everything comes from this binary: it runs itself as the fixture MCP server and as the router,
//! writes the embedded example plugins into a scratch directory, and speaks MCP to both over
//! pipes with the small JSON-RPC client below. Four scenarios, each a pair of measurements from
//! the same run; the exit status says whether every one behaved as expected.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};

use switchyard_policy::embedded::EXAMPLES;

/// No single request of the demo may take longer than this; past it the scenario fails.
const CALL_LIMIT: Duration = Duration::from_secs(15);
/// The slow call of the head-of-line scenario.
const SLOW_MS: u64 = 3000;
/// How long each `write` of the annotation scenario takes.
const WRITE_MS: u64 = 500;
/// The MCP version the demo's client speaks.
const PROTOCOL_VERSION: &str = "2025-06-18";
/// Stderr kept per child, for the error message when something goes wrong.
const STDERR_KEEP: usize = 16 * 1024;

/// Runs the demo on a small runtime of its own; an error means a scenario misbehaved.
pub fn run_blocking() -> anyhow::Result<()> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(run())
}

/// Runs the four scenarios, prints progress and then the table.
pub async fn run() -> anyhow::Result<()> {
    let demo = Demo::new()?;
    let started = Instant::now();
    println!("switchyard demo: the fixture MCP server directly vs through switchyard");
    println!("(both are this binary: {})\n", demo.exe.display());

    let mut report = Report::default();
    let scenarios: [(&str, &str); 4] = [
        ("1 head-of-line", "a quick call behind a 3 s call on a serial server"),
        ("2 annotations", "hints makes tools parallel, fs-keys keeps writes to one path serial"),
        ("3 crash", "the server is killed (kill -9) with calls in flight"),
        ("4 hot reload", "hints.wasm is replaced by hints-v2.wasm while calls are running"),
    ];
    for (i, (name, what)) in scenarios.iter().enumerate() {
        println!("[{}/4] {what} ...", i + 1);
        let t = Instant::now();
        let before = report.failures.len();
        let outcome = match i {
            0 => demo.head_of_line(&mut report, name).await,
            1 => demo.annotations(&mut report, name).await,
            2 => demo.crash(&mut report, name).await,
            _ => demo.hot_reload(&mut report, name).await,
        };
        if let Err(e) = outcome {
            report.failures.push(format!("{name}: {e:#}"));
        }
        let verdict = if report.failures.len() == before { "ok" } else { "NOT AS EXPECTED" };
        println!("      {verdict} ({})", secs(t.elapsed()));
    }

    println!();
    report.print();
    println!();
    if report.failures.is_empty() {
        println!("all 4 scenarios behaved as expected ({} in all)", secs(started.elapsed()));
        Ok(())
    } else {
        for f in &report.failures {
            println!("not as expected: {f}");
        }
        bail!("{} check(s) of the demo failed (see above)", report.failures.len())
    }
}

/// The binary to run and the scratch directory for configs and plugins.
struct Demo {
    exe: PathBuf,
    scratch: Scratch,
}

impl Demo {
    fn new() -> anyhow::Result<Demo> {
        let exe = std::env::current_exe().context("cannot find this program's own path")?;
        Ok(Demo { exe, scratch: Scratch::new()? })
    }

    /// The fixture server on its own, as a client would run it.
    async fn direct(&self, fixture_args: &[&str]) -> anyhow::Result<Peer> {
        let mut args = vec!["fixture".to_string()];
        args.extend(fixture_args.iter().map(|s| s.to_string()));
        let peer = Peer::spawn("fixture", &self.exe, &args)?;
        peer.initialize().await?;
        Ok(peer)
    }

    /// The fixture behind `switchyard run`, with `config` and the named example plugins in a
    /// plugins directory of its own (`name` keeps scenarios apart in the scratch directory).
    async fn routed(
        &self,
        name: &str,
        config: &str,
        plugins: &[&str],
        fixture_args: &[&str],
    ) -> anyhow::Result<(Peer, PathBuf)> {
        let dir = self.scratch.0.join(name.replace(' ', "-"));
        let plugins_dir = dir.join("plugins");
        std::fs::create_dir_all(&plugins_dir)?;
        let config_file = dir.join("switchyard.toml");
        std::fs::write(&config_file, config)?;
        for file in plugins {
            std::fs::write(plugins_dir.join(file), example(file)?)?;
        }
        let exe = self.exe.to_string_lossy().into_owned();
        let mut args: Vec<String> = ["run", "--log-level", "warn", "--name", "fixture"].map(String::from).into();
        args.extend(["--config".into(), config_file.to_string_lossy().into_owned()]);
        args.extend(["--plugins".into(), plugins_dir.to_string_lossy().into_owned()]);
        args.extend(["--".into(), exe, "fixture".into()]);
        args.extend(fixture_args.iter().map(|s| s.to_string()));
        let peer = Peer::spawn("switchyard", &self.exe, &args)?;
        peer.initialize().await?;
        Ok((peer, plugins_dir))
    }

    /// 1: directly, a serial server makes the quick call wait; a pool of serial instances does not.
    async fn head_of_line(&self, report: &mut Report, name: &str) -> anyhow::Result<()> {
        let direct = self.direct(&["--serial"]).await?;
        let d = quick_behind_slow(&direct).await?;
        direct.shutdown().await;
        println!("      directly: the quick echo waited {}", secs(d));

        let config = "[pools.default]\nmin = 1\nmax = 4\nmax_inflight = 1\n";
        let (router, _) = self.routed(name, config, &[], &["--serial"]).await?;
        let s = quick_behind_slow(&router).await?;
        router.shutdown().await;
        println!("      through switchyard: {}", secs(s));

        report.check(d >= Duration::from_millis(SLOW_MS * 8 / 10), || {
            format!("{name}: directly the quick call did not wait ({})", secs(d))
        });
        report.check(s < Duration::from_millis(500), || {
            format!("{name}: through switchyard the quick call took {}", secs(s))
        });
        report.row(
            name,
            "quick echo behind a 3 s sleep",
            secs(d),
            format!("{} (pool of up to 4 serial instances)", secs(s)),
        );
        Ok(())
    }

    /// 2: the hints plugin marks `write` and `read` read-only (so a client runs them in
    /// parallel) and fs-keys keys `write` by its path, so the promise stays safe.
    async fn annotations(&self, report: &mut Report, name: &str) -> anyhow::Result<()> {
        let (d_tools, d_same, d_other) = annotation_figures(self.direct(&[]).await?, "directly").await?;

        let config = r#"
[[plugins]]
file = "hints.wasm"
priority = 20   # first: declares the tools read-only
config = { tools = { write = { readOnlyHint = true }, read = { readOnlyHint = true } } }

[[plugins]]
file = "fs-keys.wasm"
priority = 10   # then: turns each write into a call keyed by its path
config = { writes = ["write"], reads = ["read"], path_args = ["path"] }
"#;
        let (router, _) = self.routed(name, config, &["hints.wasm", "fs-keys.wasm"], &[]).await?;
        let (s_tools, s_same, s_other) = annotation_figures(router, "through switchyard").await?;

        let one = Duration::from_millis(WRITE_MS);
        report.check(!d_tools.iter().any(|t| t == "write"), || {
            format!("{name}: the fixture itself declares `write` read-only")
        });
        report.check(s_tools.iter().any(|t| t == "write") && s_tools.iter().any(|t| t == "read"), || {
            format!("{name}: hints did not mark write and read read-only: [{}]", s_tools.join(", "))
        });
        report.check(d_same < one * 3 / 2, || {
            format!("{name}: directly two writes to one path took {} (expected to overlap)", secs(d_same))
        });
        report.check(s_same >= one * 19 / 10, || {
            format!("{name}: through switchyard two writes to one path overlapped ({})", secs(s_same))
        });
        report.check(s_other < one * 3 / 2, || {
            format!("{name}: through switchyard writes to two paths did not run in parallel ({})", secs(s_other))
        });
        report.row(
            name,
            "tools run in parallel (readOnlyHint)",
            d_tools.join(", "),
            format!("{} (hints)", s_tools.join(", ")),
        );
        report.row(
            "",
            "2 writes, one path, 0.5 s each",
            format!("{}: overlapped", secs(d_same)),
            format!("{}: serialised (fs-keys)", secs(s_same)),
        );
        report.row("", "2 writes, two paths, 0.5 s each", secs(d_other), secs(s_other));
        Ok(())
    }

    /// 3: kill -9 with a write and a read-only sleep in flight. Directly, neither is ever
    /// answered; switchyard answers the write with an error and retries the sleep.
    async fn crash(&self, report: &mut Report, name: &str) -> anyhow::Result<()> {
        let direct = self.direct(&[]).await?;
        let d = crash_with_calls_in_flight(&direct).await?;
        let d_next = direct.tool("echo", json!({"text": "after"})).await;
        direct.shutdown().await;
        let d_write = match &d.write {
            Err(Unanswered::Closed) => format!("never (pipe EOF after {})", secs(d.eof_after.unwrap_or_default())),
            Err(e) => format!("never ({e})"),
            Ok(v) => format!("answered ({})", summary(v)),
        };
        println!("      directly: in-flight write answered after: {d_write}");

        let (router, _) = self.routed(name, "", &[], &[]).await?;
        let s = crash_with_calls_in_flight(&router).await?;
        let s_next_pid = fixture_pid(&router).await;
        router.shutdown().await;
        let s_write = match &s.write {
            Ok(v) if v.get("error").is_some() => format!("{}: error {}", secs(s.write_after), v["error"]["code"]),
            Ok(v) => format!("unexpected result ({})", summary(v)),
            Err(e) => format!("never ({e})"),
        };
        println!("      through switchyard: in-flight write answered after: {s_write}");
        if let Ok(v) = &s.write {
            // The stderr tail it carries is for the user's log, not for this table.
            let message = v["error"]["message"].as_str().unwrap_or("?");
            println!("      its message: {}", message.split("; last stderr").next().unwrap_or(message));
        }

        report.check(d.write.is_err() && d.sleep.is_err(), || {
            format!("{name}: directly a call was answered after the kill")
        });
        let error_fast =
            matches!(&s.write, Ok(v) if v.get("error").is_some()) && s.write_after < Duration::from_secs(1);
        report.check(error_fast, || format!("{name}: through switchyard the write got {s_write}"));
        let retried = matches!(&s.sleep, Ok(v) if tool_text(v) == Some("slept 1000 ms"));
        report.check(retried, || format!("{name}: the read-only sleep was not retried successfully: {:?}", s.sleep));
        let new_pid = s_next_pid.as_ref().ok().copied();
        report.check(new_pid.is_some() && new_pid != Some(s.pid), || {
            format!("{name}: no fresh instance after the crash: {s_next_pid:?}")
        });

        let d_sleep = if d.sleep.is_err() { "never" } else { "answered?" };
        let s_sleep = match &s.sleep {
            Ok(v) if tool_text(v).is_some() => format!("retried: ok at {}", secs(s.sleep_after)),
            Ok(v) => format!("failed: {}", summary(v)),
            Err(e) => format!("never ({e})"),
        };
        let d_next = match d_next {
            Ok(v) => summary(&v),
            Err(Unanswered::Closed) => "fails: server gone".to_string(),
            Err(e) => format!("fails ({e})"),
        };
        let s_next = match new_pid {
            Some(p) => format!("ok, new instance (pid {p})"),
            None => "failed".to_string(),
        };
        report.row(name, "in-flight write answered after", d_write, s_write);
        report.row("", "in-flight read-only sleep (1 s)", d_sleep, s_sleep);
        report.row("", "the next call", d_next, s_next);
        Ok(())
    }

    /// 4: a steady stream of calls while hints.wasm is replaced by hints-v2.wasm.
    async fn hot_reload(&self, report: &mut Report, name: &str) -> anyhow::Result<()> {
        // Two entries, so the swapped-in file loads with a visibly different config.
        let config = r#"
[[plugins]]
file = "hints.wasm"
config = { tools = { read = { readOnlyHint = true } } }

[[plugins]]
file = "hints-v2.wasm"
required = false   # not there yet: dropped in during the run
config = { tools = { read = { readOnlyHint = true }, write = { readOnlyHint = true } } }
"#;
        let (router, plugins_dir) = self.routed(name, config, &["hints.wasm"], &[]).await?;
        let before = parallel_tools(&router).await?;

        let stop = AtomicBool::new(false);
        let tally = Tally::default();
        let swap = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            // Written under a dot name and renamed in, so the watcher never sees half a file.
            let tmp = plugins_dir.join(".hints-v2.wasm.tmp");
            std::fs::write(&tmp, example("hints.wasm")?)?;
            std::fs::rename(&tmp, plugins_dir.join("hints-v2.wasm"))?;
            std::fs::remove_file(plugins_dir.join("hints.wasm"))?;
            let swapped = Instant::now();
            let note = router.notification("notifications/tools/list_changed", Duration::from_secs(5)).await;
            let seen = swapped.elapsed();
            // Keep calls running on the new set for a while too.
            tokio::time::sleep(Duration::from_millis(700)).await;
            stop.store(true, Ordering::Relaxed);
            anyhow::Ok(note.map(|_| seen))
        };
        let (noticed, (), (), (), ()) = tokio::join!(
            swap,
            call_stream(&router, 0, &stop, &tally),
            call_stream(&router, 1, &stop, &tally),
            call_stream(&router, 2, &stop, &tally),
            call_stream(&router, 3, &stop, &tally),
        );
        stop.store(true, Ordering::Relaxed);
        let noticed = noticed?;
        let after = parallel_tools(&router).await?;
        router.shutdown().await;

        let made = tally.made.load(Ordering::Relaxed);
        let failed = tally.failed.lock().expect("lock").clone();
        println!(
            "      {made} calls from 4 callers, {} failed; read-only tools [{}] -> [{}]",
            failed.len(),
            before.join(", "),
            after.join(", ")
        );
        report.check(failed.is_empty(), || format!("{name}: {} call(s) failed, first: {}", failed.len(), failed[0]));
        report.check(made >= 100, || format!("{name}: only {made} calls were made"));
        report.check(noticed.is_some(), || format!("{name}: no tools/list_changed within 5 s of the swap"));
        report.check(!before.iter().any(|t| t == "write") && after.iter().any(|t| t == "write"), || {
            format!("{name}: the new plugin is not in force: [{}] -> [{}]", before.join(", "), after.join(", "))
        });
        let changed = match noticed {
            Some(d) => format!("list_changed after {}", secs(d)),
            None => "no list_changed".to_string(),
        };
        let added: Vec<&str> = after.iter().filter(|t| !before.contains(t)).map(String::as_str).collect();
        report.row(
            name,
            "calls while hints.wasm is swapped",
            "-",
            format!("{made} made by 4 callers, {} failed", failed.len()),
        );
        report.row("", "read-only tools after the swap", "-", format!("+{} ({changed})", added.join(", +")));
        Ok(())
    }
}

/// Sends a 3 s sleep and, 0.1 s later, an echo; returns how long the echo took.
async fn quick_behind_slow(peer: &Peer) -> anyhow::Result<Duration> {
    let slow = peer.tool("sleep", json!({"ms": SLOW_MS}));
    let quick = async {
        // Let the slow call reach the server first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t = Instant::now();
        let r = peer.tool("echo", json!({"text": "quick"})).await;
        (r, t.elapsed())
    };
    let (slow, (quick, took)) = tokio::join!(slow, quick);
    expect_text(&quick?, "quick")?;
    expect_text(&slow?, &format!("slept {SLOW_MS} ms"))?;
    Ok(took)
}

/// Two concurrent writes; returns the wall time until both are answered.
/// Scenario 2's figures for one peer (then shut down): the tools a client would run in parallel,
/// and two concurrent writes to one path and to two paths.
async fn annotation_figures(peer: Peer, label: &str) -> anyhow::Result<(Vec<String>, Duration, Duration)> {
    let tools = parallel_tools(&peer).await?;
    let same = two_writes(&peer, "/demo/same", "/demo/same").await?;
    let other = two_writes(&peer, "/demo/a", "/demo/b").await?;
    peer.shutdown().await;
    println!(
        "      {label}: read-only tools [{}]; 2 writes, one path {}, two paths {}",
        tools.join(", "),
        secs(same),
        secs(other)
    );
    Ok((tools, same, other))
}

async fn two_writes(peer: &Peer, a: &str, b: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let write = |path: &str| peer.tool("write", json!({"path": path, "text": "x", "ms": WRITE_MS}));
    let (ra, rb) = tokio::join!(write(a), write(b));
    let took = t.elapsed();
    expect_text(&ra?, &format!("wrote {a}"))?;
    expect_text(&rb?, &format!("wrote {b}"))?;
    Ok(took)
}

/// What happened to the calls in flight when the server was killed.
struct Crash {
    pid: u32,
    write: Result<Value, Unanswered>,
    write_after: Duration,
    sleep: Result<Value, Unanswered>,
    sleep_after: Duration,
    /// When the connection's stdout closed, counted from the kill (directly: the only signal).
    eof_after: Option<Duration>,
}

async fn crash_with_calls_in_flight(peer: &Peer) -> anyhow::Result<Crash> {
    // A tools/list first, so a router knows which tools are read-only (and safe to retry).
    peer.request("tools/list", json!({})).await?;
    let pid = fixture_pid(peer).await?;
    let killed = std::sync::OnceLock::<Instant>::new();
    let since_kill = |at: Instant| at.saturating_duration_since(*killed.get().unwrap_or(&at));
    let write = async {
        let r = peer.tool("write", json!({"path": "/demo/c", "text": "x", "ms": 10_000})).await;
        (r, Instant::now())
    };
    let sleep = async {
        let r = peer.tool("sleep", json!({"ms": 1000})).await;
        (r, Instant::now())
    };
    let kill = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = killed.set(Instant::now());
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    };
    let ((write, w_at), (sleep, s_at), ()) = tokio::join!(write, sleep, kill);
    Ok(Crash {
        pid,
        write,
        write_after: since_kill(w_at),
        sleep,
        sleep_after: since_kill(s_at),
        eof_after: peer.closed_at().map(since_kill),
    })
}

/// Calls `echo` and `read` back to back until `stop`, counting every answer that is not a result.
async fn call_stream(peer: &Peer, caller: usize, stop: &AtomicBool, tally: &Tally) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let (tool, args) = if i.is_multiple_of(2) {
            ("echo", json!({"text": format!("{caller}-{i}")}))
        } else {
            ("read", json!({"path": "/demo/r"}))
        };
        let r = peer.tool(tool, args).await;
        tally.made.fetch_add(1, Ordering::Relaxed);
        match r {
            Ok(v) if v.get("result").is_some() => {}
            Ok(v) => tally.failed.lock().expect("lock").push(format!("{tool}: {}", summary(&v))),
            Err(e) => tally.failed.lock().expect("lock").push(format!("{tool}: {e}")),
        }
        i += 1;
    }
}

#[derive(Default)]
struct Tally {
    made: AtomicU64,
    failed: Mutex<Vec<String>>,
}

/// Names of the tools a client would run in parallel: those whose `readOnlyHint` is true.
async fn parallel_tools(peer: &Peer) -> anyhow::Result<Vec<String>> {
    let r = peer.request("tools/list", json!({})).await?;
    let tools = r["result"]["tools"].as_array().ok_or_else(|| anyhow!("tools/list: {}", summary(&r)))?;
    let mut names: Vec<String> = tools
        .iter()
        .filter(|t| t["annotations"]["readOnlyHint"] == true)
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    names.sort();
    Ok(names)
}

async fn fixture_pid(peer: &Peer) -> anyhow::Result<u32> {
    let r = peer.tool("pid", json!({})).await?;
    let text = tool_text(&r).ok_or_else(|| anyhow!("pid: {}", summary(&r)))?;
    let v: Value = serde_json::from_str(text)?;
    v["pid"].as_u64().map(|p| p as u32).ok_or_else(|| anyhow!("pid: {text}"))
}

fn tool_text(resp: &Value) -> Option<&str> {
    resp["result"]["content"][0]["text"].as_str()
}

fn expect_text(resp: &Value, want: &str) -> anyhow::Result<()> {
    match tool_text(resp) {
        Some(t) if t == want => Ok(()),
        _ => bail!("expected {want:?}, got {}", summary(resp)),
    }
}

/// A response in one short line, for messages.
fn summary(resp: &Value) -> String {
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

fn secs(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}

fn example(file: &str) -> anyhow::Result<&'static [u8]> {
    EXAMPLES
        .iter()
        .find(|(name, _)| *name == file)
        .map(|(_, bytes)| *bytes)
        .ok_or_else(|| anyhow!("no embedded example plugin {file}"))
}

/// The table and the failed expectations.
#[derive(Default)]
struct Report {
    rows: Vec<[String; 4]>,
    failures: Vec<String>,
}

impl Report {
    fn row(&mut self, scenario: &str, what: &str, direct: impl Into<String>, routed: impl Into<String>) {
        self.rows.push([scenario.into(), what.into(), direct.into(), routed.into()]);
    }

    fn check(&mut self, ok: bool, failure: impl FnOnce() -> String) {
        if !ok {
            self.failures.push(failure());
        }
    }

    fn print(&self) {
        let header = ["scenario", "measured", "directly", "through switchyard"].map(String::from);
        let mut widths = [0usize; 4];
        for row in std::iter::once(&header).chain(&self.rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |row: &[String; 4]| {
            let [a, b, c, d] = row;
            println!("{a:<w0$}  {b:<w1$}  {c:<w2$}  {d}", w0 = widths[0], w1 = widths[1], w2 = widths[2]);
        };
        line(&header);
        println!("{}", "-".repeat(widths.iter().sum::<usize>() + 6));
        for row in &self.rows {
            line(row);
        }
    }
}

/// A scratch directory for configs and plugin copies, removed when the demo ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("switchyard-demo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Why a request got no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unanswered {
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
struct Peer {
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
    fn spawn(label: &'static str, program: &Path, args: &[String]) -> anyhow::Result<Peer> {
        let mut child = Command::new(program)
            .args(args)
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

    async fn initialize(&self) -> anyhow::Result<()> {
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
    async fn request(&self, method: &str, params: Value) -> Result<Value, Unanswered> {
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

    async fn tool(&self, name: &str, arguments: Value) -> Result<Value, Unanswered> {
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
    async fn notification(&self, method: &str, limit: Duration) -> Option<Value> {
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

    fn closed_at(&self) -> Option<Instant> {
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
    async fn shutdown(mut self) {
        self.stdin.lock().await.take();
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await.is_err() {
            self.kill_group();
            let _ = self.child.wait().await;
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
