//! Reaching the router of a `connect`: the daemon's socket, the daemon started when nobody
//! listens (one `connect` at a time, under a lock), and the hello that opens the session.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_os::endpoint::{self, ReadHalf as OwnedReadHalf, Stream as UnixStream, WriteHalf as OwnedWriteHalf};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

use switchyard_config::ClientValues;
use switchyard_core::codec::{self, Kind};
use switchyard_router::control::{self, Hello, Reply};

use super::Destination;

/// This binary's version, told to the router in the hello.
pub(super) const VERSION: &str = env!("CARGO_PKG_VERSION");
/// How long the router may take to answer the hello.
const HELLO_WAIT: Duration = Duration::from_secs(30);
/// How long a `connect` waits for another one that is starting the daemon.
const LOCK_WAIT: Duration = Duration::from_secs(30);
const LOCK_POLL: Duration = Duration::from_millis(25);
/// How long `daemon --detach` may take to start the daemon (it waits for the socket).
const START_WAIT: Duration = Duration::from_secs(60);
/// A router that vanished under a hello is tried again this many times in all, this far apart.
const VANISHED_TRIES: u32 = 5;
const VANISHED_PAUSE: Duration = Duration::from_millis(50);

/// A connection the router welcomed.
pub(super) struct Joined {
    pub(super) reader: BufReader<OwnedReadHalf>,
    pub(super) writer: OwnedWriteHalf,
    /// The router's version; None for a router older than the hello.
    pub(super) version: Option<String>,
    /// The router took the hand-off offered: connect's descriptors are to follow (Linux).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) handoff: bool,
    /// The router's process (0 when unknown).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) pid: u32,
}

/// Reaches the router at `destination` (starting the daemon when nobody listens and a config is
/// known) and says hello. The error says what failed, where, and what to do.
pub(super) async fn join(destination: &Destination, exe: &Path) -> Result<Joined, String> {
    join_offering(destination, exe, false).await
}

/// [`join`], offering the router the hand-off of connect's pipes when `handoff`.
pub(super) async fn join_offering(destination: &Destination, exe: &Path, handoff: bool) -> Result<Joined, String> {
    let mut tries = 1;
    loop {
        let stream = reach(destination, exe).await?;
        match greet(destination, stream, handoff).await {
            Ok(joined) => return Ok(joined),
            // A daemon that was just killed: soon its socket refuses, and reach starts a new one.
            Err(Greeting::Vanished(_)) if tries < VANISHED_TRIES => {
                tries += 1;
                tokio::time::sleep(VANISHED_PAUSE).await;
            }
            Err(Greeting::Vanished(why) | Greeting::Failed(why)) => return Err(why),
        }
    }
}

fn nobody_listens(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, NotFound};
    // A reset: a daemon that was just killed, whose socket still took the connection.
    matches!(e.kind(), NotFound | ConnectionRefused | ConnectionReset | ConnectionAborted)
}

async fn reach(destination: &Destination, exe: &Path) -> Result<UnixStream, String> {
    let socket = &destination.socket;
    let cannot = |e: std::io::Error| {
        format!("cannot connect to {} ({}): {e}", destination.session_label(), destination.socket_and_config())
    };
    match endpoint::connect(socket).await {
        Ok(s) => return Ok(s),
        Err(e) if nobody_listens(&e) => {
            if destination.config.is_none() {
                return Err(format!(
                    "cannot connect to {}: {e}; is `switchyard run --listen {}` (or a daemon on that socket) running?",
                    socket.display(),
                    socket.display()
                ));
            }
        }
        Err(e) => return Err(cannot(e)),
    }
    let config = destination.config.as_deref().expect("checked above");
    let canonical = switchyard_config::paths::canonical_config(config).map_err(|e| format!("{e:#}"))?;
    // One `connect` at a time starts the daemon; the others wait here and then find it running.
    let lock_path = switchyard_config::paths::lock_for(socket).map_err(|e| format!("{e:#}"))?;
    let _lock = lock(&lock_path, &canonical).await?;
    match endpoint::connect(socket).await {
        Ok(s) => return Ok(s),
        Err(e) if nobody_listens(&e) => {}
        Err(e) => return Err(cannot(e)),
    }
    start_daemon(exe, &canonical, socket, &destination.env).await?;
    endpoint::connect(socket).await.map_err(|e| {
        let log = switchyard_config::paths::log_for(&canonical)
            .map(|l| format!("; see its log {}", l.display()))
            .unwrap_or_default();
        format!(
            "the switchyard daemon for {} started, but its socket {} does not accept connections ({e}){log}",
            canonical.display(),
            socket.display()
        )
    })
}

/// Takes the start lock (an exclusive lock, given up and its file removed when it is dropped),
/// polling so that the runtime is never blocked and the wait stays bounded.
async fn lock(path: &Path, config: &Path) -> Result<switchyard_os::fs::LockFile, String> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match switchyard_os::fs::LockFile::try_take(path) {
            Ok(Some(lock)) => return Ok(lock),
            Ok(None) => {}
            Err(e) => return Err(format!("cannot take the daemon's start lock {}: {e}", path.display())),
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "another switchyard has held the start lock {} for {} s while starting the daemon for {}; see `switchyard status --config {}`, or stop the process that holds the lock",
                path.display(),
                LOCK_WAIT.as_secs(),
                config.display(),
                config.display()
            ));
        }
        tokio::time::sleep(LOCK_POLL).await;
    }
}

/// Runs `exe daemon --config C --socket S --detach`, which returns once the daemon accepts on its
/// socket (or fails with the reason on stderr).
async fn start_daemon(exe: &Path, config: &Path, socket: &Path, client: &ClientValues) -> Result<(), String> {
    use tokio::io::AsyncReadExt;
    let failed = |detail: String| {
        format!(
            "the switchyard daemon for {} could not start (socket {}): {detail}; run `switchyard daemon --config {}` in a terminal to see it fail, fix the cause, then reconnect",
            config.display(),
            socket.display(),
            config.display()
        )
    };
    let mut cmd = tokio::process::Command::new(exe);
    // This client's values are its own: the daemon (and every server it starts, for any client)
    // must not inherit them. PATH and HOME stay: without them nothing runs.
    for name in client.0.keys().filter(|k| *k != "PATH" && *k != "HOME") {
        cmd.env_remove(name);
    }
    #[cfg(unix)]
    cmd.arg0(switchyard_config::paths::program_name());
    // The `daemon --detach` in between must not flash a console window on Windows.
    #[cfg(windows)]
    cmd.creation_flags(0x0800_0000); // CREATE_NO_WINDOW (the binary crate names no Win32 crate)
    let mut child = cmd
        .arg("daemon")
        .arg("--config")
        .arg(config)
        .arg("--socket")
        .arg(socket)
        .arg("--detach")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("cannot run {}: {e}", exe.display())))?;
    // Read apart from the wait: the daemon it starts might keep the pipe open.
    let said = Arc::new(Mutex::new(Vec::new()));
    let stderr = child.stderr.take().map(|mut pipe| {
        let said = said.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf).await {
                let mut said = said.lock().expect("lock");
                if n == 0 || said.len() > 64 * 1024 {
                    break;
                }
                said.extend_from_slice(&buf[..n]);
            }
        })
    });
    let status = match tokio::time::timeout(START_WAIT, child.wait()).await {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => return Err(failed(format!("cannot wait for {}: {e}", exe.display()))),
        Err(_) => return Err(failed(format!("`daemon --detach` did not return within {} s", START_WAIT.as_secs()))),
    };
    if let Some(task) = stderr {
        let abort = task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(1), task).await.is_err() {
            abort.abort();
        }
    }
    if status.success() {
        return Ok(());
    }
    // One line: the daemon's lines joined, its "switchyard: error:" prefix dropped.
    let said = String::from_utf8_lossy(&said.lock().expect("lock")).into_owned();
    let said: Vec<&str> = said
        .lines()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.strip_prefix("switchyard: error: ").unwrap_or(l))
        .collect();
    match said.as_slice() {
        // The daemon said why in one line, with what to do: that is the whole message.
        [reason] => Err(format!("the switchyard daemon for {} could not start: {reason}", config.display())),
        [] => Err(failed(format!("`daemon --detach` exited with {status} and said nothing"))),
        lines => Err(failed(lines.join(" / "))),
    }
}

/// Says hello and reads the router's reply.
async fn greet(destination: &Destination, stream: UnixStream, handoff: bool) -> Result<Joined, Greeting> {
    let (r, mut writer) = endpoint::split(stream);
    let at = destination.socket.display();
    let hello = control::line(&Hello::Connect {
        server: destination.server.clone(),
        version: VERSION.to_string(),
        env: destination.env.0.clone(),
        dir: std::env::current_dir().ok().map(|d| d.display().to_string()),
        handoff,
        group: destination.group.clone(),
    });
    writer
        .write_all(hello.as_bytes())
        .await
        .map_err(|e| Greeting::io(format!("the router at {at} failed: {e}"), &e))?;
    let mut reader = BufReader::with_capacity(64 * 1024, r);
    let mut line = Vec::new();
    match tokio::time::timeout(HELLO_WAIT, reader.read_until(b'\n', &mut line)).await {
        Err(_) => {
            return Err(Greeting::Failed(format!(
                "the router at {at} did not answer within {} s",
                HELLO_WAIT.as_secs()
            )));
        }
        Ok(Err(e)) => return Err(Greeting::io(format!("the router at {at} failed: {e}"), &e)),
        Ok(Ok(0)) => {
            return Err(Greeting::Vanished(format!("the router at {at} closed the connection without a word")));
        }
        Ok(Ok(_)) => {}
    }
    let text = String::from_utf8_lossy(&line);
    if !control::is_control(&text) {
        // A router older than the hello reads it as a bad JSON-RPC message and answers an
        // error with id null; the session is open all the same, to its only server.
        let pre_hello =
            codec::parse(text.trim()).is_ok_and(|e| e.kind == Kind::Response && e.is_error && e.id.is_none());
        return match (&destination.server, pre_hello) {
            (None, true) => Ok(Joined { reader, writer, version: None, handoff: false, pid: 0 }),
            (Some(name), true) => Err(Greeting::Failed(format!(
                "the router at {at} is a switchyard older than `connect NAME` and cannot choose server `{name}`; stop it and connect again to start this version"
            ))),
            _ => Err(Greeting::Failed(format!(
                "the router at {at} answered something other than a switchyard welcome: {}",
                text.trim()
            ))),
        };
    }
    match control::reply(&text) {
        // A router older than the hand-off never says it took one.
        Ok(Reply::Welcome { version, pid, handoff: took, .. }) => {
            Ok(Joined { reader, writer, version: Some(version), handoff: handoff && took, pid })
        }
        Ok(Reply::Refused { error }) => {
            // The router's reason names the server already, as a rule: once is enough.
            let label = destination.session_label();
            let what = if error.contains(&label) { String::new() } else { format!(" {label}") };
            Err(Greeting::Failed(format!("the router at {at} refused{what}: {error}")))
        }
        Ok(other) => {
            Err(Greeting::Failed(format!("the router at {at} answered the hello with {other:?}, not a welcome")))
        }
        Err(e) => Err(Greeting::Failed(format!("the router at {at}: {e}"))),
    }
}

/// Why a hello got no welcome.
enum Greeting {
    /// The router went away under it (the connection reset, or closed without a word): a daemon
    /// being killed keeps its listening socket for a moment after it stopped serving.
    Vanished(String),
    Failed(String),
}

impl Greeting {
    fn io(why: String, e: &std::io::Error) -> Greeting {
        use std::io::ErrorKind::{BrokenPipe, ConnectionReset};
        if matches!(e.kind(), ConnectionReset | BrokenPipe) { Greeting::Vanished(why) } else { Greeting::Failed(why) }
    }
}

/// The line for a user whose daemon runs another version than this `connect`.
pub(super) fn version_note(socket: &Path, theirs: &str) -> Option<String> {
    (theirs != VERSION).then(|| {
        format!(
            "switchyard connect: the daemon at {} runs switchyard {theirs}, this is {VERSION}; `switchyard stop` (with the same --config or --socket) and then reconnecting restarts it with this version",
            socket.display()
        )
    })
}
