//! The demo's first four scenarios (the fifth, over HTTP, is in `silent`), each measured directly
//! and through switchyard, and the calls and figures they are made of.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use serde_json::{Value, json};

use switchyard_policy::embedded::EXAMPLES;

use super::Demo;
use super::peer::{Peer, Unanswered, summary};
use super::report::{Report, secs};

/// The slow call of the head-of-line scenario.
const SLOW_MS: u64 = 3000;
/// How long each `write` of the annotation scenario takes.
const WRITE_MS: u64 = 500;

impl Demo {
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
    pub(super) async fn head_of_line(&self, report: &mut Report, name: &str) -> anyhow::Result<()> {
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
    pub(super) async fn annotations(&self, report: &mut Report, name: &str) -> anyhow::Result<()> {
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
    pub(super) async fn crash(&self, report: &mut Report, name: &str) -> anyhow::Result<()> {
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
    pub(super) async fn hot_reload(&self, report: &mut Report, name: &str) -> anyhow::Result<()> {
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

/// Two concurrent writes; returns the wall time until both are answered.
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

pub(super) async fn fixture_pid(peer: &Peer) -> anyhow::Result<u32> {
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

fn example(file: &str) -> anyhow::Result<&'static [u8]> {
    EXAMPLES
        .iter()
        .find(|(name, _)| *name == file)
        .map(|(_, bytes)| *bytes)
        .ok_or_else(|| anyhow!("no embedded example plugin {file}"))
}
