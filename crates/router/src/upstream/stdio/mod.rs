//! The stdio transport: a child process per instance, messages as lines on its stdin and stdout.

#[cfg(unix)]
pub mod supervisor;

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};

use super::WRITE_BACKLOG_LIMIT;
use super::transport::{BoxFuture, Closed, Connector, Ended, Failure, Inbound, Outbound, Transport};
use switchyard_core::codec::{self, Frame, LineReader};
use switchyard_os::process::{Stop, Tree};

/// How many stderr lines of an instance are kept for error messages.
const STDERR_TAIL: usize = 20;
/// Shutdown: after closing stdin, and after SIGTERM, wait this long before the next step.
const SHUTDOWN_STEP: Duration = Duration::from_secs(2);
/// After the process exits, how long its last output may take to be read before it is declared
/// dead even though its stdout is still open.
const EXIT_DRAIN: Duration = Duration::from_millis(200);

/// Variables of switchyard's own environment its servers do not get (the HTTP front's token
/// read from `${NAME}`), unless a server's own `env` sets them.
static WITHHELD: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Keeps `names` out of the environment of every server started from now on (set once).
pub fn withhold(names: Vec<String>) {
    let _ = WITHHELD.set(names);
}

/// How to start instances of a server.
#[derive(Debug, Clone)]
pub struct Spec {
    pub server: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<std::path::PathBuf>,
    pub max_message_bytes: usize,
    /// A program with the `supervise` subcommand (the switchyard binary): each instance runs
    /// under it, so its whole process group dies with the router (Linux, macOS). `None` (the
    /// library used in-process, where no such binary is at hand): the parent-death signal only,
    /// which reaches the server's own process but not what it starts. Windows needs neither:
    /// each instance's Job Object dies with the router.
    pub supervisor: Option<std::path::PathBuf>,
    /// Log a failed start here (false: whoever asked logs it, e.g. with a client's values
    /// blanked out of the command line).
    pub log_start_failure: bool,
}

/// Starts instances of a command.
pub struct StdioConnector {
    spec: Spec,
}

impl StdioConnector {
    pub fn new(spec: Spec) -> StdioConnector {
        StdioConnector { spec }
    }
}

impl Connector for StdioConnector {
    fn connect(
        &self,
        label: &str,
        inbound: Arc<dyn Inbound>,
    ) -> BoxFuture<'static, Result<Arc<dyn Transport>, Failure>> {
        let started = StdioTransport::spawn(&self.spec, label, inbound);
        Box::pin(async move { started.map(|t| t as Arc<dyn Transport>) })
    }

    fn describe(&self) -> String {
        let mut line = self.spec.command.clone();
        for a in &self.spec.args {
            line.push(' ');
            line.push_str(a);
        }
        format!("`{line}`")
    }
}

/// One child process.
struct StdioTransport {
    /// Lines to the child's stdin. Unbounded so a send never waits past a call's deadline when
    /// the server stops reading; the pool bounds what queues here by watching `backlog`.
    writer: Mutex<Option<mpsc::UnboundedSender<String>>>,
    backlog: Arc<Backlog>,
    shared: Arc<Shared>,
}

/// What the child's tasks share.
struct Shared {
    label: String,
    pid: Option<u32>,
    /// The instance's process tree: what `close` and `kill` end.
    tree: Arc<Tree>,
    exit_rx: watch::Receiver<Option<String>>,
    stderr_tail: Mutex<VecDeque<String>>,
    /// Set when the child's stderr reached EOF (every line is in `stderr_tail`).
    stderr_done: watch::Sender<bool>,
    /// Set by the first of stdout EOF or process exit to handle the end.
    gone: AtomicBool,
    /// Set once `Inbound::ended` was called.
    ended: watch::Sender<bool>,
}

impl StdioTransport {
    /// Starts the child process and its reader, writer and stderr tasks. A start that fails is
    /// logged, and the error says what to check.
    fn spawn(spec: &Spec, label: &str, inbound: Arc<dyn Inbound>) -> Result<Arc<StdioTransport>, Failure> {
        let (mut child, tree) = start_process(spec).map_err(|reason| {
            if spec.log_start_failure {
                tracing::error!(instance = %label, "{reason}");
            }
            Failure { reason, transient: false }
        })?;
        let pid = child.id();
        let tree = Arc::new(tree);
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (wtx, wrx) = mpsc::unbounded_channel::<String>();
        let (exit_tx, exit_rx) = watch::channel(None);
        let shared = Arc::new(Shared {
            label: label.to_string(),
            pid,
            tree: tree.clone(),
            exit_rx,
            stderr_tail: Mutex::new(VecDeque::new()),
            stderr_done: watch::channel(false).0,
            gone: AtomicBool::new(false),
            ended: watch::channel(false).0,
        });
        let t = Arc::new(StdioTransport {
            writer: Mutex::new(Some(wtx)),
            backlog: Arc::new(Backlog::default()),
            shared: shared.clone(),
        });
        tokio::spawn(write_loop(stdin, wrx, label.to_string(), t.backlog.clone()));
        tokio::spawn(wait_exit(child, tree, exit_tx));
        tokio::spawn(stderr_loop(stderr, shared.clone()));
        let limit = spec.max_message_bytes;
        let (s, i) = (shared.clone(), inbound.clone());
        tokio::spawn(async move {
            read_loop(&s, stdout, limit, &*i).await;
            s.on_eof(&*i).await;
        });
        // Stdout normally closes when the process exits, but a helper it started outside its
        // process group may hold it open: the exit is the instance's end all the same.
        tokio::spawn(async move {
            let mut exit = shared.exit_rx.clone();
            if exit.wait_for(|s| s.is_some()).await.is_ok() {
                tokio::time::sleep(EXIT_DRAIN).await;
                shared.on_eof(&*inbound).await;
            }
        });
        tracing::debug!(instance = %label, pid, "spawned");
        Ok(t)
    }
}

impl Transport for StdioTransport {
    fn send(&self, msg: Outbound) -> Result<(), Closed> {
        let tx = self.writer.lock().expect("lock").clone();
        let Some(tx) = tx else { return Err(Closed) };
        let bytes = msg.line.len() + 1;
        self.backlog.bytes.fetch_add(bytes, Ordering::AcqRel);
        tx.send(msg.line).map_err(|_| {
            self.backlog.bytes.fetch_sub(bytes, Ordering::AcqRel);
            Closed
        })
    }

    fn backlog(&self) -> usize {
        self.backlog.bytes.load(Ordering::Acquire)
    }

    fn on_drain(&self, hook: Box<dyn Fn() + Send + Sync>) {
        let _ = self.backlog.on_drain.set(hook);
    }

    /// Close stdin, wait, SIGTERM, wait, SIGKILL (Windows: close stdin, wait, end the job).
    /// Never leaves an orphan.
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.writer.lock().expect("lock").take();
            let s = &self.shared;
            if !s.exited_within(SHUTDOWN_STEP).await {
                tracing::info!(instance = %s.label, "did not exit after stdin closed; {}", Stop::Ask.describe());
                s.tree.stop(Stop::Ask);
                if !s.exited_within(SHUTDOWN_STEP).await {
                    tracing::warn!(instance = %s.label, "did not exit when asked to stop; {}", Stop::Kill.describe());
                    s.tree.stop(Stop::Kill);
                    s.exited_within(SHUTDOWN_STEP).await;
                }
            }
            // Whatever the leader left behind in its group goes too.
            s.tree.stop(Stop::Kill);
            s.ended_now().await;
        })
    }

    fn kill(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.shared.tree.stop(Stop::Kill);
            self.shared.ended_now().await;
        })
    }

    fn pid(&self) -> Option<u32> {
        self.shared.pid
    }

    fn endpoint(&self) -> String {
        match self.shared.pid {
            Some(pid) => format!("pid {pid}"),
            None => "a process that has exited".to_string(),
        }
    }

    fn stderr_tail(&self) -> Vec<String> {
        self.shared.tail()
    }
}

impl Shared {
    fn tail(&self) -> Vec<String> {
        self.stderr_tail.lock().expect("lock").iter().cloned().collect()
    }

    /// Resolves once `Inbound::ended` has been called.
    async fn ended_now(&self) {
        let mut rx = self.ended.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// The child is gone: stdout closed, or the process exited and `EXIT_DRAIN` passed.
    /// Runs once; whichever of the two comes first does the work.
    async fn on_eof(&self, inbound: &dyn Inbound) {
        if self.gone.swap(true, Ordering::AcqRel) {
            return;
        }
        // stdout closed: the process is exiting (or closed stdout, which is as bad).
        let status = match self.exit_status_within(Duration::from_millis(500)).await {
            Some(s) => s,
            None => {
                self.tree.stop(Stop::Kill);
                match self.exit_status_within(Duration::from_secs(1)).await {
                    Some(s) => format!("closed stdout, then {s}"),
                    None => "closed stdout".to_string(),
                }
            }
        };
        // The last lines the process wrote are what the error shows: wait for stderr to close
        // (at once, usually), but not long if something else holds the pipe open.
        let mut done = self.stderr_done.subscribe();
        let _ = tokio::time::timeout(Duration::from_millis(20), done.wait_for(|d| *d)).await;
        // What the leader left behind in its group (e.g. a server under a killed `npx` or `sh`)
        // would be an orphan: it goes too.
        self.tree.stop(Stop::Kill);
        inbound.ended(Ended { status, stderr: self.tail(), quiet_for: Duration::ZERO });
        self.ended.send_replace(true);
    }

    async fn exited_within(&self, limit: Duration) -> bool {
        self.exit_status_within(limit).await.is_some()
    }

    async fn exit_status_within(&self, limit: Duration) -> Option<String> {
        let mut exit = self.exit_rx.clone();
        match tokio::time::timeout(limit, exit.wait_for(|s| s.is_some())).await {
            Ok(Ok(s)) => s.clone(),
            _ => None,
        }
    }
}

async fn read_loop(shared: &Shared, stdout: tokio::process::ChildStdout, limit: usize, inbound: &dyn Inbound) {
    let mut reader = LineReader::new(BufReader::with_capacity(64 * 1024, stdout), limit);
    loop {
        match reader.next().await {
            Ok(Some(Frame::Line(line))) => inbound.message(line),
            Ok(Some(Frame::TooLong { bytes })) => {
                let (head, tail) = reader.skipped_ends();
                inbound.too_long(bytes, limit, codec::skipped_response_id(head, tail));
            }
            Ok(Some(Frame::NotUtf8)) => {
                tracing::warn!(instance = %shared.label, "skipped a stdout line that is not UTF-8")
            }
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(instance = %shared.label, "reading stdout failed: {e}");
                break;
            }
        }
    }
}

/// Spawns the server process as a tree of its own (a process group; a Job Object on Windows)
/// so that ending it reaches what it starts (`npx` -> `node`), with piped stdio, under the
/// supervisor when there is one (Unix).
fn start_process(spec: &Spec) -> Result<(Child, Tree), String> {
    // Found here, a missing program is an immediate error naming what to check, not the
    // supervisor's exit status. Windows also needs the file itself: `npx` is `npx.cmd`, which
    // CreateProcess would not find by its bare name.
    let program = switchyard_os::launch::resolve(
        &spec.command,
        spec.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()),
    )
    .map_err(|e| cannot_start(spec, &e))?;
    let mut cmd = command_for(spec, &program);
    for name in WITHHELD.get().into_iter().flatten() {
        cmd.env_remove(name);
    }
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    switchyard_os::process::prepare(&mut cmd);
    if let Some(cwd) = &spec.cwd {
        // Checked here because a missing directory fails the spawn with the same ENOENT as a
        // missing command, and would be reported as one.
        if !cwd.is_dir() {
            return Err(format!(
                "cannot start `{}`: its working directory {} (cwd in the server's table) does not exist or is not a directory",
                spec.command,
                cwd.display()
            ));
        }
        cmd.current_dir(cwd);
    }
    if spec.supervisor.is_none() {
        // The supervisor watches the router itself, and must not die with it before it could
        // end the group: only a server started without one gets the parent-death signal.
        switchyard_os::process::die_with_parent(&mut cmd);
    }
    let child = cmd.spawn().map_err(|e| cannot_start(spec, &e))?;
    let tree = switchyard_os::process::adopt(&child).map_err(|e| cannot_start(spec, &e))?;
    Ok((child, tree))
}

/// The command that starts the server: through the supervisor on Unix when there is one, by
/// its name as given either way (exec searches the server's own PATH as the check did).
#[cfg(unix)]
fn command_for(spec: &Spec, _program: &std::path::Path) -> Command {
    match &spec.supervisor {
        Some(supervisor) => {
            let mut cmd = Command::new(supervisor);
            cmd.arg0(switchyard_os::exe::program_name());
            cmd.arg("supervise").arg(std::process::id().to_string()).arg("--").arg(&spec.command);
            cmd
        }
        None => Command::new(&spec.command),
    }
}

/// The command that starts `program` (its resolved file: a `.cmd` shim runs through cmd.exe).
#[cfg(windows)]
fn command_for(_spec: &Spec, program: &std::path::Path) -> Command {
    Command::new(program)
}

fn cannot_start(spec: &Spec, e: &std::io::Error) -> String {
    let what =
        if spec.supervisor.is_some() || cfg!(windows) { "the server's command" } else { "the command after `--`" };
    format!("cannot start `{}`: {e}. Check {what} and that it is on PATH", spec.command)
}

/// The bytes queued for a child's stdin, shared by `send` and the writer task.
#[derive(Default)]
struct Backlog {
    bytes: AtomicUsize,
    /// Wakes the pool when the backlog falls under the limit again.
    on_drain: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Backlog {
    /// `bytes` left the queue (written, or dropped with the instance).
    fn taken(&self, bytes: usize) {
        let before = self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        if before >= WRITE_BACKLOG_LIMIT
            && before - bytes < WRITE_BACKLOG_LIMIT
            && let Some(hook) = self.on_drain.get()
        {
            hook();
        }
    }
}

async fn write_loop(stdin: ChildStdin, mut rx: mpsc::UnboundedReceiver<String>, label: String, backlog: Arc<Backlog>) {
    let mut w = BufWriter::with_capacity(64 * 1024, stdin);
    while let Some(line) = rx.recv().await {
        let mut batch = Some(line);
        // Write everything already queued, then flush once: pipelined calls share a syscall.
        while let Some(l) = batch {
            if w.write_all(l.as_bytes()).await.is_err() || w.write_all(b"\n").await.is_err() {
                tracing::debug!(instance = %label, "stdin write failed; the process is gone");
                return;
            }
            backlog.taken(l.len() + 1);
            batch = rx.try_recv().ok();
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    // Sender dropped: the instance is shutting down. Dropping stdin closes it.
    let _ = w.shutdown().await;
}

async fn wait_exit(mut child: Child, tree: Arc<Tree>, tx: watch::Sender<Option<String>>) {
    let mut group = TreeKill(Some(tree));
    let status = match child.wait().await {
        Ok(s) => switchyard_os::process::describe_exit(s),
        Err(e) => format!("wait failed: {e}"),
    };
    // Reaped: ending the tree is the transport's to do from here.
    group.0 = None;
    tx.send_replace(Some(status));
}

/// Ends a child's whole tree when dropped before the child was reaped: the router is going
/// away without having stopped the instance (its runtime drops this task at exit, say while
/// the instance was still starting). `kill_on_drop` alone would SIGKILL the supervisor only,
/// which then cannot kill the group, and the server would live on as an orphan.
struct TreeKill(Option<Arc<Tree>>);

impl Drop for TreeKill {
    fn drop(&mut self) {
        if let Some(tree) = &self.0 {
            tree.stop(Stop::Kill);
        }
    }
}

async fn stderr_loop(stderr: tokio::process::ChildStderr, shared: Arc<Shared>) {
    let mut reader = LineReader::new(BufReader::new(stderr), 16 * 1024);
    while let Ok(Some(frame)) = reader.next().await {
        let line = match frame {
            Frame::Line(l) => l,
            Frame::TooLong { bytes } => format!("<{bytes}-byte line skipped>"),
            Frame::NotUtf8 => "<line that is not UTF-8>".to_string(),
        };
        switchyard_core::logging::forward(&shared.label, &line);
        let mut t = shared.stderr_tail.lock().expect("lock");
        if t.len() == STDERR_TAIL {
            t.pop_front();
        }
        t.push_back(line);
    }
    shared.stderr_done.send_replace(true);
}

#[cfg(all(test, unix))]
mod tests {
    fn executable(command: &str, path: Option<&str>) -> std::io::Result<std::path::PathBuf> {
        switchyard_os::launch::resolve(command, path)
    }

    #[test]
    fn programs_are_found_like_exec_finds_them() {
        assert!(executable("sh", None).is_ok());
        assert!(executable("/bin/sh", None).is_ok());
        let missing = executable("no-such-server-xyz", Some("/usr/bin:/bin")).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(executable("/nonexistent/server", None).unwrap_err().kind(), std::io::ErrorKind::NotFound);
        // The server's own PATH decides, not switchyard's.
        assert!(executable("sh", Some("/nonexistent")).is_err());
        // There but not executable.
        let file = tempfile::NamedTempFile::new().unwrap();
        let e = executable(file.path().to_str().unwrap(), None).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    }
}
