//! switchyard's message path: a client's session in, a server instance out, and back.
//!
//! Messages flow downstream (stdio, the Unix socket, the HTTP front) -> session -> call (policy,
//! gate, pool) -> upstream (stdio or remote) and back; a server's own requests and notifications
//! go upstream -> server fan-out -> peer (the client's queue). [`registry`] holds the servers by
//! name; [`run`] serves one of them for `switchyard run`.

// Unsafe code only where no safe API exists, each allowed by name: the child's pre-exec hook
// (parent-death signal), signal dispositions in the supervisor, malloc_trim, and the shared
// memory of the hand-off's journal.
#![deny(unsafe_code)]

#[cfg(test)]
mod audit_tests;
pub(crate) mod budget;
pub(crate) mod call;
#[cfg(test)]
mod call_path_tests;
pub mod control;
pub mod downstream;
pub(crate) mod gate;
pub mod group;
pub mod handoff;
pub(crate) mod peer;
pub(crate) mod placement;
pub(crate) mod pool;
pub mod registry;
pub(crate) mod search;
pub(crate) mod server;
pub(crate) mod session;
#[cfg(test)]
mod sharing_tests;
#[cfg(test)]
mod test_log;
#[cfg(test)]
mod test_session;
pub mod upstream;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::registry::Servers;
use crate::upstream::target::Target;
use switchyard_config::Config;
use switchyard_policy::Policy;

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
    /// Record calls and tool annotations into this file (`--record-calls`).
    pub record_calls: Option<PathBuf>,
    /// Record the calls' arguments too (`--record-arguments`).
    pub record_arguments: bool,
    /// Where each call's end is logged (`[audit]`; None: off).
    pub audit: Option<Arc<switchyard_core::audit::AuditLog>>,
}

/// Runs the router until the stdio client leaves or `shutdown` fires, then cancels what is in
/// flight, stops every server instance and returns.
pub async fn run(config: Config, opts: RunOptions, shutdown: CancellationToken) -> anyhow::Result<()> {
    // Checked before the plugins load, so a bad server is reported first.
    Target::of(&config)?;
    let policy = Policy::start(&config, opts.plugins_dir.clone(), shutdown.child_token()).await?;
    if let Some(file) = &opts.record_calls {
        policy.attach_recorder(switchyard_policy::record::Recorder::start(file, opts.record_arguments)?);
    }
    let about = registry::About {
        config: None,
        socket: opts.listen.clone(),
        log: None,
        answers: None,
        audit: opts.audit.clone(),
    };
    let router = Servers::new(policy, about, opts.supervisor.clone(), shutdown.clone());
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
        downstream::stdio::serve(router.clone(), server.clone(), shutdown.clone()).await;
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

/// The router's own architecture as a test: a module may name only modules before it in
/// [`ORDER`](layering::ORDER). Between crates the compiler enforces the order; inside this crate
/// this test does.
#[cfg(test)]
mod layering {
    use std::path::{Path, PathBuf};

    /// The stages in the order of the message path, lowest first.
    pub const ORDER: &[&str] = &[
        // The Unix socket's control lines (hello, reply, drain): sessions send drains, the
        // socket listener and `connect` speak the rest.
        "control",
        "gate",
        // A client's limits on its tool list, and the search that stands for a long one: pure,
        // for sessions and groups alike.
        "budget",
        "search",
        // Which of a pool's instances serve a call (its scope), from policy and affinity.
        "placement",
        // The transports to servers; declare `Events` and `ProgressSink` for what they receive.
        "upstream",
        // A session's outbox and what servers may know of its client.
        "peer",
        "pool",
        // One server: its instances, initialisation, health, tools, and the fan-out of what it
        // sends on its own to its sessions.
        "server",
        // One forwarded call: decide, gate, pool, send, deadline, retry.
        "call",
        "session",
        // connect's pipes handed to the router: a session served on them, and the journal.
        "handoff",
        "registry",
        // One client of a group of servers: a session of each member, merged and routed.
        "group",
        // How clients reach the router: stdio, the Unix socket, HTTP.
        "downstream",
    ];

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
        let mut bad = Vec::new();
        for file in files {
            let rel = file.strip_prefix(&src).expect("under src");
            let module = rel.components().next().expect("a file").as_os_str().to_string_lossy().replace(".rs", "");
            let Some(me) = rank(&module) else { continue };
            let text = std::fs::read_to_string(&file).expect("read a source file");
            // Tests may reach anywhere.
            let text = text.split("#[cfg(test)]").next().unwrap_or("");
            for dep in named_modules(text) {
                if dep != module && rank(&dep).is_some_and(|d| d > me) {
                    bad.push(format!("{} names crate::{dep}", rel.display()));
                }
            }
        }
        bad.sort();
        bad.dedup();
        assert!(bad.is_empty(), "new back edges in the module order (see ORDER):\n{}", bad.join("\n"));
    }
}
