//! `switchyard demo`: the fixture server directly and behind switchyard, side by side, measured.
//!
//! Everything comes from this binary: it runs itself as the fixture MCP server and as the router,
//! writes the embedded example plugins into a scratch directory, and speaks MCP to both over
//! pipes with the small JSON-RPC client of [`peer`]. Six scenarios ([`scenarios`], [`silent`],
//! [`sigterm`]), each a pair of measurements from the same run; the exit status says whether
//! every one behaved as expected. The fifth reaches the fixture over HTTP, through `switchyard
//! daemon`'s front and a [`relay`] that can make a link go silent; the sixth goes through
//! `switchyard connect` and its daemon.

mod peer;
mod relay;
mod report;
mod scenarios;
mod sigterm;
mod silent;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};

use report::{Report, secs};

/// Runs the demo on a small runtime of its own; an error means a scenario misbehaved.
pub(crate) fn run_blocking() -> anyhow::Result<()> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(run())
}

/// Runs the six scenarios, prints progress and then the table.
async fn run() -> anyhow::Result<()> {
    let demo = Demo::new()?;
    let started = Instant::now();
    println!("switchyard demo: the fixture MCP server directly vs through switchyard");
    println!("(both are this binary: {})\n", demo.exe.display());

    let mut report = Report::default();
    let scenarios: [(&str, &str); 6] = [
        ("1 head-of-line", "a quick call behind a 3 s call on a serial server"),
        ("2 annotations", "hints makes tools parallel, fs-keys keeps writes to one path serial"),
        ("3 crash", "the server is killed (kill -9) with calls in flight"),
        ("4 hot reload", "hints.wasm is replaced by hints-v2.wasm while calls are running"),
        ("5 silent link", "a remote server's link goes silent (no FIN, no RST), then the network heals"),
        ("6 sigterm", "the client SIGTERMs its server command (a server that takes 2 s to start)"),
    ];
    for (i, (name, what)) in scenarios.iter().enumerate() {
        println!("[{}/{}] {what} ...", i + 1, scenarios.len());
        let t = Instant::now();
        let before = report.failures.len();
        let outcome = match i {
            0 => demo.head_of_line(&mut report, name).await,
            1 => demo.annotations(&mut report, name).await,
            2 => demo.crash(&mut report, name).await,
            3 => demo.hot_reload(&mut report, name).await,
            4 => demo.silent_link(&mut report, name).await,
            _ => demo.sigterm(&mut report, name).await,
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
        println!("all {} scenarios behaved as expected ({} in all)", scenarios.len(), secs(started.elapsed()));
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
