//! switchyard: an MCP policy router. Messages flow downstream -> codec -> session -> policy ->
//! gate -> pool -> upstream and back; a server's own requests and notifications go upstream ->
//! hub -> link (the client's queue). Each stage has a module of its own.

// Unsafe code only where no safe API exists, each allowed by name: the child's pre-exec hook
// (parent-death signal), signal dispositions in the supervisor, malloc_trim, loading the
// plugin compile cache, and marking inherited descriptors close-on-exec before the daemon starts.
#![deny(unsafe_code)]

pub mod cli;
pub mod client;
pub mod clients;
pub mod codec;
pub mod config;
pub mod daemon;
pub mod decision;
pub mod demo;
pub mod downstream;
pub mod engine;
pub mod error;
pub mod front;
pub mod gate;
pub mod hub;
pub mod ids;
pub mod link;
pub mod logging;
pub mod metrics;
pub mod places;
pub mod policy;
pub mod pool;
pub mod router;
pub mod server;
pub mod session;
pub mod supervise;
pub mod target;
pub mod upstream;
pub mod wire;

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::policy::Policy;
use crate::router::Router;

/// How long shutdown may take before switchyard stops waiting for its tasks.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(8);

/// Where clients connect.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub plugins_dir: Option<PathBuf>,
    /// Also serve sessions on this Unix socket.
    pub listen: Option<PathBuf>,
    /// Serve a session on stdin/stdout; the router exits when it ends.
    pub stdio: bool,
    /// The switchyard binary, to run each instance under `switchyard supervise` (see
    /// `upstream::Spec::supervisor`).
    pub supervisor: Option<PathBuf>,
}

/// Runs the router until the stdio client leaves or `shutdown` fires, then cancels what is in
/// flight, stops every server instance and returns.
pub async fn run(config: Config, opts: RunOptions, shutdown: CancellationToken) -> anyhow::Result<()> {
    // Checked before the plugins load, so a bad server is reported first.
    config.target()?;
    let policy = Policy::start(&config, opts.plugins_dir.clone(), shutdown.child_token()).await?;
    let about = router::About { config: None, socket: opts.listen.clone(), log: None };
    let router = Router::new(policy, about, opts.supervisor.clone(), shutdown.clone());
    let server = router.build(&config)?;
    let name = server.name.clone();
    // Bound before "ready" is logged: whoever waits for that line may connect at once.
    let bound = match &opts.listen {
        Some(path) => Some((downstream::bind(path).await?, path.clone())),
        None => None,
    };
    let front = server.describe();
    router.add(server.clone(), "");
    let listener = bound.map(|(l, path)| {
        tracing::info!("accepting sessions on {}", path.display());
        tokio::spawn(downstream::listen(router.clone(), l, path, shutdown.clone()))
    });
    tracing::info!(server = %name, "switchyard ready in front of {front}");
    if opts.stdio {
        downstream::stdio(router.clone(), server.clone(), shutdown.clone()).await;
    } else {
        shutdown.cancelled().await;
    }
    shutdown.cancel();
    if let Some(l) = listener {
        let _ = l.await;
    }
    router.stop(SHUTDOWN_GRACE).await;
    tracing::info!(server = %name, "switchyard stopped");
    Ok(())
}

/// The architecture as a test: a module may name only modules before it in [`ORDER`](layering::ORDER),
/// except for the back edges listed in `KNOWN`, which may only shrink (see
/// ../shared/reviews/architecture-2026-11.md, section 3: the transport seam removes them).
#[cfg(test)]
mod layering {
    use std::path::{Path, PathBuf};

    /// The stages in the order of the message path, lowest first.
    pub const ORDER: &[&str] = &[
        "ids",
        "codec",
        "config",
        "decision",
        "error",
        "logging",
        // The router's Prometheus metrics: names no other module.
        "metrics",
        "places",
        // The MCP clients' own config files (`switchyard clients`, `wrap`, `unwrap`): reads them,
        // and writes them and switchyard.toml for `wrap`; names only config and places.
        "clients",
        "wire",
        "gate",
        "policy",
        "upstream",
        "target",
        "supervise",
        "link",
        "pool",
        "hub",
        "server",
        "engine",
        "session",
        "router",
        // The Streamable HTTP front (issue 13): guard, token, sessions over HTTP; beside
        // downstream, the other way clients reach a router.
        "front",
        "downstream",
        "client",
        "demo",
        "cli",
        // `switchyard daemon`, `status`, `stop`: beside `run` (cli), whose tracing and signal set-up it shares.
        "daemon",
    ];

    /// Back edges that exist today. Remove an entry when its edge is gone; never add one.
    /// (None: `upstream -> hub/link` went with the transport seam, where upstream declares
    /// `Events` and `ProgressSink`; `hub -> server` with `hub::Upstreams`.)
    const KNOWN: &[(&str, &str)] = &[];

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The modules `text` names as `crate::a` or in `use crate::{a, b::c}`.
    fn named_modules(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for rest in text.split("crate::").skip(1) {
            if let Some(group) = rest.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or("");
                out.extend(group.split(',').map(|item| item.trim().split("::").next().unwrap_or("").to_string()));
            } else {
                out.push(rest.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or("").to_string());
            }
        }
        out
    }

    #[test]
    fn modules_name_only_earlier_modules() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let rank = |m: &str| ORDER.iter().position(|o| *o == m);
        let mut files = Vec::new();
        sources(&src, &mut files);
        let (mut found, mut bad) = (Vec::new(), Vec::new());
        for file in files {
            let rel = file.strip_prefix(&src).expect("under src");
            let module = rel.components().next().expect("a file").as_os_str().to_string_lossy().replace(".rs", "");
            let Some(me) = rank(&module) else { continue };
            let text = std::fs::read_to_string(&file).expect("read a source file");
            // Tests may reach anywhere.
            let text = text.split("#[cfg(test)]").next().unwrap_or("");
            for dep in named_modules(text) {
                if dep != module && rank(&dep).is_some_and(|d| d > me) {
                    found.push((module.clone(), dep.clone()));
                    if !KNOWN.contains(&(module.as_str(), dep.as_str())) {
                        bad.push(format!("{} names crate::{dep}", rel.display()));
                    }
                }
            }
        }
        bad.sort();
        bad.dedup();
        assert!(bad.is_empty(), "new back edges in the module order (see ORDER):\n{}", bad.join("\n"));
        let gone: Vec<_> =
            KNOWN.iter().filter(|k| !found.iter().any(|f| (f.0.as_str(), f.1.as_str()) == **k)).collect();
        assert!(gone.is_empty(), "these back edges are gone: remove them from KNOWN: {gone:?}");
    }
}
