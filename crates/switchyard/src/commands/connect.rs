//! `switchyard connect`: relays a client's stdin/stdout to a router over its Unix socket, starts
//! the user's daemon when none serves the config, and carries the session over router restarts.
//!
//! The relay has one controller (what goes to the router, and when) and a task per direction that
//! must not wait for the other: the client's lines come in through a reader task, the router's
//! lines go to the client through a writer task, fed by one reader task per connection. Requests
//! in flight are kept in a [`Ledger`] shared by the controller and the connection readers, so
//! that a router that goes away still leaves every request of the client answered once.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::anyhow;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use switchyard_config::ClientValues;
use switchyard_core::codec::{self, Kind};
use switchyard_router::downstream::control::{self, Hello, Reply};

/// This binary's version, told to the router in the hello.
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// How long the router may take to answer the hello.
const HELLO_WAIT: Duration = Duration::from_secs(30);
/// How long a `connect` waits for another one that is starting the daemon.
const LOCK_WAIT: Duration = Duration::from_secs(30);
const LOCK_POLL: Duration = Duration::from_millis(25);
/// How long `daemon --detach` may take to start the daemon (it waits for the socket).
const START_WAIT: Duration = Duration::from_secs(60);
/// After a failed reconnect, a new request tries again at most this often; the ones in between
/// get the last failure at once.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// After the client closed its input, how long answers still owed may take.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How long a drained connection may go on delivering the server's messages after it was closed.
const DRAINED_LINGER: Duration = Duration::from_secs(10);
/// At a start that failed, how long to wait for the client's first request, to answer it.
const FIRST_REQUEST_WAIT: Duration = Duration::from_secs(10);
/// Client lines that may wait for a connection; past this, requests are answered with an error
/// at once (a client that keeps sending while the router is away must not grow `connect`).
const QUEUE_MAX: usize = 1024;
/// A router that vanished under a hello is tried again this many times in all, this far apart.
const VANISHED_TRIES: u32 = 5;
const VANISHED_PAUSE: Duration = Duration::from_millis(50);
/// The id prefix of the requests `connect` makes itself when it replays a session.
const REPLAY_ID: &str = "switchyard-replay-";

/// `switchyard connect NAME [--config FILE] [--socket PATH] [--env NAME,...]` as given.
#[derive(Debug, Clone)]
pub struct Options {
    /// A server of the config, or (with a `/`) the socket of a router: the old form.
    pub name: PathBuf,
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    /// Variables of connect's own environment whose values go to the server (its `client_env`).
    pub env: Vec<String>,
}

/// Where `connect` goes, which server it asks for, and how to start the daemon if nobody is there.
#[derive(Debug, Clone, PartialEq)]
pub struct Place {
    pub socket: PathBuf,
    /// The server named in the hello; None for the old form (the router's only server).
    pub server: Option<String>,
    /// The config a daemon is started with; None for the old form, which never starts one.
    pub config: Option<PathBuf>,
    /// The values `--env` named, sent in every hello (Debug shows the names only).
    pub env: ClientValues,
}

impl Place {
    /// Reads the command line: `--socket` wins; a NAME with a `/` is a socket (the old form);
    /// else the config's daemon socket.
    pub fn resolve(opts: &Options) -> anyhow::Result<Place> {
        Place::resolve_with(opts, &|name| std::env::var_os(name))
    }

    /// [`Place::resolve`] with the environment given.
    pub fn resolve_with(opts: &Options, getenv: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> anyhow::Result<Place> {
        let env = client_values(&opts.env, getenv)?;
        let name = opts.name.to_str().ok_or_else(|| {
            anyhow!("{}: a server name must be UTF-8 (or give a socket path, with a `/`)", opts.name.display())
        })?;
        if name.contains('/') {
            if opts.socket.is_some() || opts.config.is_some() {
                anyhow::bail!(
                    "`switchyard connect {name}` names a socket; --config and --socket go with a server name: switchyard connect NAME --config FILE"
                );
            }
            return Ok(Place { socket: opts.name.clone(), server: None, config: None, env });
        }
        let config = match &opts.config {
            Some(c) => c.clone(),
            None => switchyard_config::paths::default_config()?,
        };
        let socket = match &opts.socket {
            Some(s) => s.clone(),
            // The socket is named after the config file, so the file must exist now. With
            // --socket it is needed only to start a daemon, and read then.
            None => switchyard_config::paths::socket_for(&switchyard_config::paths::canonical_config(&config)?)?,
        };
        Ok(Place { socket, server: Some(name.to_string()), config: Some(config), env })
    }

    /// "socket S, config C" for messages.
    fn whereabouts(&self) -> String {
        match &self.config {
            Some(c) => format!("socket {}, config {}", self.socket.display(), c.display()),
            None => format!("socket {}", self.socket.display()),
        }
    }

    /// The session, for messages: "server `fs`" or "the router".
    fn what(&self) -> String {
        match &self.server {
            Some(s) => format!("server `{s}`"),
            None => "the router".to_string(),
        }
    }
}

/// The values of the variables `--env` names, read from `getenv` (connect's environment). An
/// unset one is an error naming it; a value is never put in an error.
fn client_values(
    names: &[String],
    getenv: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> anyhow::Result<ClientValues> {
    let mut values = BTreeMap::new();
    for name in names.iter().flat_map(|n| n.split(',')).map(str::trim).filter(|n| !n.is_empty()) {
        if !switchyard_config::is_var_name(name) {
            anyhow::bail!(
                "--env {name:?}: not a variable name (ASCII letters, digits and `_`, not starting with a digit); --env takes names, and connect reads their values from its environment"
            );
        }
        match getenv(name) {
            Some(v) => match v.into_string() {
                Ok(v) => {
                    values.insert(name.to_string(), v);
                }
                Err(_) => {
                    anyhow::bail!("--env {name}: the value of {name} in connect's environment is not valid UTF-8")
                }
            },
            None => anyhow::bail!(
                "--env {name}: {name} is not set in connect's environment; the MCP client's entry for this server should set it in its `env` (e.g. \"env\": {{\"{name}\": \"...\"}})"
            ),
        }
    }
    Ok(ClientValues(values))
}

/// Runs `connect` on the process's stdin and stdout, starting the daemon with this very binary.
/// The reason of a failure is on stderr already when this returns.
pub async fn run(opts: &Options) -> anyhow::Result<()> {
    let (input, output, restore) = switchyard_router::downstream::stdio::open();
    let result = match Place::resolve(opts) {
        Ok(place) => relay(place, PathBuf::from("/proc/self/exe"), input, output).await,
        Err(e) => {
            let why = format!("{e:#}");
            let (lines, _) = spawn_reader(input);
            let (out, writer) = spawn_writer(output, None);
            refuse_first_request(lines, &out, &why).await;
            finish_writer(out, writer).await;
            Err(anyhow!(why))
        }
    };
    drop(restore);
    result
}

/// Relays `input` (the client's messages) to the router at `place` and the router's messages
/// to `output`, until the client closes `input`. `exe` is the switchyard binary that starts a
/// daemon (`exe daemon --config C --socket S --detach`).
///
/// Fails when the router cannot be reached (or refuses) at the start: the client's first
/// request is answered with the reason first. In the old form it also fails when the router
/// goes away and cannot be reached again at once (nothing would start it again). The reason of
/// a failure is on stderr already when this returns.
pub async fn relay<R, W>(place: Place, exe: PathBuf, input: R, output: W) -> anyhow::Result<()>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (lines, reader) = spawn_reader(input);
    let (events_tx, events) = mpsc::unbounded_channel();
    let (out, writer) = spawn_writer(output, Some(events_tx.clone()));
    let first = join(&place, &exe).await;
    let joined = match first {
        Ok(j) => j,
        Err(why) => {
            refuse_first_request(lines, &out, &why).await;
            finish_writer(out, writer).await;
            reader.abort();
            return Err(anyhow!(why));
        }
    };
    let mut relay = Relay {
        place,
        exe,
        out,
        events_tx,
        ledger: Arc::new(Mutex::new(Ledger::default())),
        idle: Arc::new(Notify::new()),
        memory: Memory::default(),
        queue: VecDeque::new(),
        conn: None,
        generation: 0,
        state: State::Live,
        readers: Vec::new(),
        warned_version: false,
        client_closed: false,
        closing: None,
        next_replay: 0,
    };
    relay.open(joined).await;
    let result = relay.run(lines, events).await;
    for r in relay.readers.drain(..) {
        r.abort();
    }
    finish_writer(relay.out, writer).await;
    reader.abort();
    result
}

/// The client's lines, one by one (each with its newline, if it had one), until it closes.
fn spawn_reader<R: AsyncRead + Send + Unpin + 'static>(input: R) -> (mpsc::Receiver<Vec<u8>>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(32);
    let task = tokio::spawn(async move {
        let mut input = BufReader::with_capacity(64 * 1024, input);
        loop {
            let mut line = Vec::new();
            match input.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if tx.send(line).await.is_err() {
                break;
            }
        }
    });
    (rx, task)
}

/// Writes whole lines to the client; tells the controller when the client stops taking them.
fn spawn_writer<W: AsyncWrite + Send + Unpin + 'static>(
    mut output: W,
    events: Option<mpsc::UnboundedSender<Event>>,
) -> (mpsc::Sender<Vec<u8>>, JoinHandle<()>) {
    // Room for one line: a client that stops reading must hold up the router's socket at once
    // (the router then applies its buffer budget), not find megabytes buffered in `connect`.
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(1);
    let task = tokio::spawn(async move {
        while let Some(mut line) = rx.recv().await {
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let mut ok = output.write_all(&line).await.is_ok();
            // One flush per burst, not per line.
            if ok && rx.is_empty() {
                ok = output.flush().await.is_ok();
            }
            if !ok {
                if let Some(events) = &events {
                    let _ = events.send(Event::ClientGone);
                }
                return;
            }
        }
        let _ = output.flush().await;
        let _ = output.shutdown().await;
    });
    (tx, task)
}

/// Lets the writer finish what it has (briefly: a client that does not read must not hold
/// `connect` up).
async fn finish_writer(out: mpsc::Sender<Vec<u8>>, writer: JoinHandle<()>) {
    drop(out);
    let abort = writer.abort_handle();
    if tokio::time::timeout(Duration::from_secs(2), writer).await.is_err() {
        abort.abort();
    }
}

/// At a failed start: answers the client's first request with `why` (one line on stderr says
/// it too), so that the client shows the reason rather than "server exited".
async fn refuse_first_request(mut lines: mpsc::Receiver<Vec<u8>>, out: &mpsc::Sender<Vec<u8>>, why: &str) {
    say(&format!("switchyard connect: {why}"));
    let deadline = Instant::now() + FIRST_REQUEST_WAIT;
    while let Ok(Some(line)) = tokio::time::timeout_at(deadline, lines.recv()).await {
        let (ids, batch) = request_ids(&line);
        if ids.is_empty() {
            continue;
        }
        let errors: Vec<String> =
            ids.iter().map(|id| codec::response_error(id, codec::SERVER_UNAVAILABLE, why, None)).collect();
        let text = if batch { format!("[{}]", errors.join(",")) } else { errors.join("\n") };
        let _ = out.send(text.into_bytes()).await;
        // Every request until the client's `initialize` is answered (a client may ping first),
        // so the one the client waits on carries the reason.
        if std::str::from_utf8(&line).is_ok_and(|t| t.contains("\"initialize\"")) {
            return;
        }
    }
}

/// One line on stderr.
fn say(text: &str) {
    let mut line = text.as_bytes().to_vec();
    line.push(b'\n');
    switchyard_core::logging::write(line);
}

/// A connection the router welcomed.
struct Joined {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// The router's version; None for a router older than the hello.
    version: Option<String>,
}

/// Reaches the router at `place` (starting the daemon when nobody listens and a config is
/// known) and says hello. The error says what failed, where, and what to do.
async fn join(place: &Place, exe: &Path) -> Result<Joined, String> {
    let mut tries = 1;
    loop {
        let stream = reach(place, exe).await?;
        match greet(place, stream).await {
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

async fn reach(place: &Place, exe: &Path) -> Result<UnixStream, String> {
    let socket = &place.socket;
    let cannot = |e: std::io::Error| format!("cannot connect to {} ({}): {e}", place.what(), place.whereabouts());
    match UnixStream::connect(socket).await {
        Ok(s) => return Ok(s),
        Err(e) if nobody_listens(&e) => {
            if place.config.is_none() {
                return Err(format!(
                    "cannot connect to {}: {e}; is `switchyard run --listen {}` (or a daemon on that socket) running?",
                    socket.display(),
                    socket.display()
                ));
            }
        }
        Err(e) => return Err(cannot(e)),
    }
    let config = place.config.as_deref().expect("checked above");
    let canonical = switchyard_config::paths::canonical_config(config).map_err(|e| format!("{e:#}"))?;
    // One `connect` at a time starts the daemon; the others wait here and then find it running.
    let lock_path = switchyard_config::paths::lock_for(socket).map_err(|e| format!("{e:#}"))?;
    let _lock = lock(&lock_path, &canonical).await?;
    match UnixStream::connect(socket).await {
        Ok(s) => return Ok(s),
        Err(e) if nobody_listens(&e) => {}
        Err(e) => return Err(cannot(e)),
    }
    start_daemon(exe, &canonical, socket, &place.env).await?;
    UnixStream::connect(socket).await.map_err(|e| {
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

/// Takes the start lock (an exclusive flock, released when the file closes), polling so that the
/// runtime is never blocked and the wait stays bounded.
async fn lock(path: &Path, config: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot open the daemon's start lock {}: {e}", path.display()))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("cannot lock the daemon's start lock {}: {e}", path.display())),
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
    let mut child = cmd
        .arg0(switchyard_config::paths::program_name())
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
    let said = said.join(" / ");
    Err(failed(if said.is_empty() { format!("`daemon --detach` exited with {status} and said nothing") } else { said }))
}

/// Says hello and reads the router's reply.
async fn greet(place: &Place, stream: UnixStream) -> Result<Joined, Greeting> {
    let (r, mut writer) = stream.into_split();
    let at = place.socket.display();
    let hello = control::line(&Hello::Connect {
        server: place.server.clone(),
        version: VERSION.to_string(),
        env: place.env.0.clone(),
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
        return match (&place.server, pre_hello) {
            (None, true) => Ok(Joined { reader, writer, version: None }),
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
        Ok(Reply::Welcome { version, .. }) => Ok(Joined { reader, writer, version: Some(version) }),
        Ok(Reply::Refused { error }) => {
            Err(Greeting::Failed(format!("the router at {at} refused {}: {error}", place.what())))
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

/// What reaches the controller from the other tasks.
#[derive(Debug)]
enum Event {
    /// Connection `generation` ended (EOF, or an error).
    Gone { generation: u64, why: String },
    /// The router asked connection `generation` to drain.
    Drain { generation: u64, reason: String },
    /// The client stopped reading its output.
    ClientGone,
}

/// What `connect` passed to the router and has not seen answered.
#[derive(Default)]
struct Ledger {
    /// The client's request ids (raw JSON).
    ids: HashSet<String>,
    /// The ids of each batch sent, to answer a batch as one array.
    batches: Vec<Vec<String>>,
    /// `connect`'s own replayed requests (raw id -> method): their answers are not the client's.
    replayed: HashMap<String, String>,
}

/// What the client set up in its session, for replay on a new connection.
#[derive(Default)]
struct Memory {
    /// The client's `initialize` request, as sent.
    initialize: Option<String>,
    initialized: bool,
    /// The params of the latest `logging/setLevel`.
    level: Option<String>,
    /// Subscribed resource URIs, in order.
    subscribed: Vec<String>,
}

impl Memory {
    fn note(&mut self, message: &str, env: &codec::Envelope) {
        let params = env.params.as_ref();
        match (env.kind, env.method.as_deref()) {
            (Kind::Request, Some("initialize")) => self.initialize = Some(message.to_string()),
            (Kind::Notification, Some("notifications/initialized")) => self.initialized = true,
            (Kind::Request, Some("logging/setLevel")) => self.level = params.map(|p| message[p.clone()].to_string()),
            (Kind::Request, Some(m @ ("resources/subscribe" | "resources/unsubscribe"))) => {
                let Some(uri) = params.and_then(|p| codec::param_fields(message, p).uri) else { return };
                self.subscribed.retain(|u| *u != uri);
                if m == "resources/subscribe" {
                    self.subscribed.push(uri);
                }
            }
            _ => {}
        }
    }
}

enum State {
    Live,
    /// The router asked for a new connection: the old one serves on until nothing is in flight.
    Draining,
    /// Reaching the router again.
    Joining(Pin<Box<dyn Future<Output = Result<Joined, String>> + Send>>),
    /// The last attempt to reach the router failed, at `at`.
    Down {
        why: String,
        at: Instant,
    },
}

/// The controller: the client's lines to the router, connections, replay, drain.
struct Relay {
    place: Place,
    exe: PathBuf,
    out: mpsc::Sender<Vec<u8>>,
    events_tx: mpsc::UnboundedSender<Event>,
    ledger: Arc<Mutex<Ledger>>,
    /// Woken when the ledger's last client request is answered (for a drain).
    idle: Arc<Notify>,
    memory: Memory,
    /// Client lines waiting for a connection (in order).
    queue: VecDeque<Vec<u8>>,
    /// The write half of the live connection.
    conn: Option<OwnedWriteHalf>,
    /// The live connection's number; events of older ones are stale.
    generation: u64,
    state: State,
    readers: Vec<JoinHandle<()>>,
    warned_version: bool,
    client_closed: bool,
    /// Set once the client closed its input and the connection's write half is shut: the end.
    closing: Option<Instant>,
    next_replay: u64,
}

impl Relay {
    async fn run(
        &mut self,
        mut lines: mpsc::Receiver<Vec<u8>>,
        mut events: mpsc::UnboundedReceiver<Event>,
    ) -> anyhow::Result<()> {
        loop {
            let idle = self.idle.clone();
            let draining = matches!(self.state, State::Draining);
            let closing = self.closing;
            tokio::select! {
                // What the router said comes first: a client line read after a drain request
                // must see the drain.
                biased;
                event = events.recv() => {
                    let event = event.expect("the controller holds a sender");
                    if let Some(end) = self.on_event(event).await {
                        return end;
                    }
                }
                joined = async {
                    match &mut self.state {
                        State::Joining(f) => f.await,
                        _ => std::future::pending().await,
                    }
                } => {
                    if let Some(end) = self.joined(joined).await {
                        return end;
                    }
                }
                line = lines.recv(), if !self.client_closed => match line {
                    Some(line) => self.client_line(line).await,
                    None => {
                        self.client_closed = true;
                        if self.maybe_close().await {
                            return Ok(());
                        }
                    }
                },
                _ = idle.notified(), if draining => self.drain_step().await,
                _ = tokio::time::sleep_until(closing.unwrap_or_else(Instant::now)), if closing.is_some() => return Ok(()),
            }
        }
    }

    /// Starts using a connection the router welcomed: its reader, the replay, then the queue.
    async fn open(&mut self, joined: Joined) {
        let Joined { reader, writer, version } = joined;
        if let Some(note) = version.and_then(|v| version_note(&self.place.socket, &v))
            && !self.warned_version
        {
            self.warned_version = true;
            say(&note);
        }
        self.generation += 1;
        self.readers.retain(|r| !r.is_finished());
        self.readers.push(tokio::spawn(read_router(
            self.generation,
            self.place.socket.display().to_string(),
            reader,
            self.ledger.clone(),
            self.idle.clone(),
            self.out.clone(),
            self.events_tx.clone(),
        )));
        self.conn = Some(writer);
        self.state = State::Live;
        for line in self.replay() {
            self.write(line.as_bytes()).await;
        }
        while let Some(line) = self.queue.pop_front() {
            self.send(line).await;
        }
    }

    /// The lines that set the client's session up again on a new connection; their answers are
    /// swallowed by the reader.
    fn replay(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        let mut ledger = self.ledger.lock().expect("lock");
        let mut own = |method: &str| {
            self.next_replay += 1;
            let id = codec::json_string(&format!("{REPLAY_ID}{}", self.next_replay));
            ledger.replayed.insert(id.clone(), method.to_string());
            id
        };
        if let Some(init) = &self.memory.initialize
            && let Ok(env) = codec::parse(init)
            && let Some(span) = env.id
        {
            let id = own("initialize");
            lines.push(codec::splice(init, span, &id));
        }
        if self.memory.initialized {
            lines.push(codec::notification("notifications/initialized", "{}"));
        }
        if let Some(params) = &self.memory.level {
            let id = own("logging/setLevel");
            lines.push(codec::request(&id, "logging/setLevel", params));
        }
        for uri in &self.memory.subscribed {
            let id = own("resources/subscribe");
            let params = format!(r#"{{"uri":{}}}"#, codec::json_string(uri));
            lines.push(codec::request(&id, "resources/subscribe", &params));
        }
        for line in &mut lines {
            line.push('\n');
        }
        lines
    }

    async fn client_line(&mut self, line: Vec<u8>) {
        // The usual case, at the cost of one parse.
        if matches!(self.state, State::Live) && self.queue.is_empty() {
            return self.send(line).await;
        }
        if self.unqueue_cancelled(&line) {
            return;
        }
        let request = !request_ids(&line).0.is_empty();
        if self.queue.len() >= QUEUE_MAX && !matches!(self.state, State::Draining) {
            let why = format!(
                "{QUEUE_MAX} messages already wait for the router at {} to come back; try again in a moment",
                self.place.socket.display()
            );
            return self.refuse(&line, &why).await;
        }
        match &self.state {
            State::Live | State::Joining(_) => self.queue.push_back(line),
            // The old connection's session still serves everything (on the server as it was
            // configured) until the first moment nothing is in flight: a quick call never waits
            // for a slow one because the configuration changed.
            State::Draining => self.send(line).await,
            // Nowhere to go (a notification, or an answer to a router that is gone).
            State::Down { .. } if !request => {}
            State::Down { why, at } => {
                let (why, retry) = (why.clone(), at.elapsed() >= RETRY_EVERY);
                if retry {
                    self.queue.push_back(line);
                    self.rejoin();
                } else {
                    self.refuse(&line, &why).await;
                }
            }
        }
    }

    /// A `notifications/cancelled` for a request still waiting in the queue takes that request
    /// out, and goes no further itself: the client wants no answer, and the router never saw it.
    fn unqueue_cancelled(&mut self, line: &[u8]) -> bool {
        if self.queue.is_empty() {
            return false;
        }
        let Ok(text) = std::str::from_utf8(line) else { return false };
        let Ok(env) = codec::parse(text.trim()) else { return false };
        if env.method.as_deref() != Some("notifications/cancelled") {
            return false;
        }
        let Some(span) = env.params.as_ref().and_then(|p| codec::param_fields(text.trim(), p).request_id) else {
            return false;
        };
        let id = &text.trim()[span];
        let waiting = self.queue.iter().position(|q| {
            let (ids, batch) = request_ids(q);
            !batch && ids.len() == 1 && ids[0] == id
        });
        waiting.map(|at| self.queue.remove(at)).is_some()
    }

    /// Passes one client line to the router, keeping its requests in the ledger and its session
    /// set-up in memory.
    async fn send(&mut self, line: Vec<u8>) {
        let (ids, batch) = request_ids(&line);
        if !ids.is_empty() {
            let mut ledger = self.ledger.lock().expect("lock");
            if batch {
                ledger.batches.push(ids.clone());
            }
            ledger.ids.extend(ids);
        }
        // A request the client cancels is owed no answer (the router sends none): it is no
        // longer in flight, or a drain would wait for it forever.
        if let Ok(text) = std::str::from_utf8(&line)
            && text.contains("notifications/cancelled")
        {
            let mut ledger = self.ledger.lock().expect("lock");
            for_each_message(text, |m, env| {
                if env.method.as_deref() == Some("notifications/cancelled")
                    && let Some(span) = env.params.as_ref().and_then(|p| codec::param_fields(m, p).request_id)
                {
                    ledger.ids.remove(&m[span]);
                }
            });
            if ledger.ids.is_empty() {
                self.idle.notify_one();
            }
        }
        // Parsed again only when it may hold what a replay needs.
        if let Ok(text) = std::str::from_utf8(&line)
            && ["initialize", "logging/setLevel", "resources/"].iter().any(|m| text.contains(m))
        {
            for_each_message(text, |m, env| self.memory.note(m, env));
        }
        self.write(&line).await;
    }

    async fn write(&mut self, line: &[u8]) {
        let Some(w) = self.conn.as_mut() else { return };
        // A failed write means the router is gone: its reader sees that too and says so, after
        // the answers it still got, so nothing is done here.
        if w.write_all(line).await.is_err() {
            self.conn = None;
        }
    }

    /// Answers the requests in `line` with an error at once.
    async fn refuse(&mut self, line: &[u8], why: &str) {
        let (ids, batch) = request_ids(line);
        let errors: Vec<String> =
            ids.iter().map(|id| codec::response_error(id, codec::SERVER_UNAVAILABLE, why, None)).collect();
        if errors.is_empty() {
            return;
        }
        let text = if batch { format!("[{}]", errors.join(",")) } else { errors.join("\n") };
        let _ = self.out.send(text.into_bytes()).await;
    }

    fn rejoin(&mut self) {
        let (place, exe) = (self.place.clone(), self.exe.clone());
        self.conn = None;
        self.state = State::Joining(Box::pin(async move { join(&place, &exe).await }));
    }

    /// A reconnect ended. Some(result) when `connect` is done.
    async fn joined(&mut self, joined: Result<Joined, String>) -> Option<anyhow::Result<()>> {
        match joined {
            Ok(j) => {
                self.open(j).await;
                self.maybe_close().await.then_some(Ok(()))
            }
            Err(why) => {
                for line in std::mem::take(&mut self.queue) {
                    self.refuse(&line, &why).await;
                }
                if self.place.config.is_none() {
                    // The old form: nothing will start that router again.
                    say(&format!("switchyard connect: {why}"));
                    return Some(Err(anyhow!("{why}")));
                }
                say(&format!("switchyard connect: cannot reach the router again: {why}"));
                self.state = State::Down { why, at: Instant::now() };
                self.client_closed.then_some(Ok(()))
            }
        }
    }

    async fn on_event(&mut self, event: Event) -> Option<anyhow::Result<()>> {
        match event {
            Event::ClientGone => Some(Ok(())),
            Event::Drain { generation, reason } if generation == self.generation => {
                if matches!(self.state, State::Live) && self.closing.is_none() {
                    say(&format!(
                        "switchyard connect: the router at {} asked for a new connection ({reason}); it moves at the first moment no call is in flight",
                        self.place.socket.display()
                    ));
                    self.state = State::Draining;
                    self.drain_step().await;
                }
                None
            }
            Event::Gone { generation, why } if generation == self.generation => self.gone(why).await,
            // A connection that is no longer the live one (drained, or already replaced).
            Event::Drain { .. } | Event::Gone { .. } => None,
        }
    }

    /// The live connection ended: every request in flight gets an error, then `connect`
    /// reconnects (unless the client is gone).
    async fn gone(&mut self, why: String) -> Option<anyhow::Result<()>> {
        self.conn = None;
        // No reader will report on this generation again.
        self.generation += 1;
        let count = self.answer_in_flight(&why).await;
        if self.client_closed {
            return Some(Ok(()));
        }
        let summary = format!("{why}; {count} call(s) in flight were answered with an error");
        if self.place.config.is_none() {
            // The old form: one attempt at once; a router that stopped is not started again.
            match join(&self.place, &self.exe).await {
                Ok(j) => {
                    say(&format!("switchyard connect: {summary}; reconnected"));
                    self.open(j).await;
                    None
                }
                Err(again) => {
                    for line in std::mem::take(&mut self.queue) {
                        self.refuse(&line, &again).await;
                    }
                    say(&format!("switchyard connect: {summary}"));
                    Some(Err(anyhow!("{summary}")))
                }
            }
        } else {
            say(&format!("switchyard connect: {summary}; reconnecting"));
            self.rejoin();
            None
        }
    }

    /// Errors for every client request in flight; how many there were.
    async fn answer_in_flight(&mut self, why: &str) -> usize {
        let (mut ids, batches) = {
            let mut ledger = self.ledger.lock().expect("lock");
            ledger.replayed.clear();
            (std::mem::take(&mut ledger.ids), std::mem::take(&mut ledger.batches))
        };
        let count = ids.len();
        let msg = format!("{why}; this call's outcome is unknown");
        let error = |id: &str| codec::response_error(id, codec::INTERNAL_ERROR, &msg, None);
        // A batch is answered as one array, as the router would have.
        let mut lines = Vec::new();
        for batch in batches {
            let open: Vec<String> = batch.iter().filter(|id| ids.remove(*id)).map(|id| error(id)).collect();
            if !open.is_empty() {
                lines.push(format!("[{}]", open.join(",")));
            }
        }
        lines.extend(ids.iter().map(|id| error(id)));
        for line in lines {
            let _ = self.out.send(line.into_bytes()).await;
        }
        count
    }

    /// During a drain: once nothing is in flight, closes the old connection and reconnects.
    async fn drain_step(&mut self) {
        if !matches!(self.state, State::Draining) || !self.ledger.lock().expect("lock").ids.is_empty() {
            return;
        }
        if let Some(mut w) = self.conn.take() {
            let _ = w.shutdown().await;
        }
        // The old reader goes on passing the server's messages until the router closes; bounded.
        if let Some(old) = self.readers.last() {
            let old = old.abort_handle();
            tokio::spawn(async move {
                tokio::time::sleep(DRAINED_LINGER).await;
                old.abort();
            });
        }
        self.generation += 1;
        self.rejoin();
    }

    /// After the client closed its input: once its queued lines went out, closes the write half
    /// and waits (bounded) for the router to close. True when there is nothing left to wait for.
    async fn maybe_close(&mut self) -> bool {
        if !self.client_closed || self.closing.is_some() {
            return false;
        }
        match self.state {
            State::Down { .. } => true,
            State::Live => {
                if let Some(w) = self.conn.as_mut() {
                    let _ = w.shutdown().await;
                }
                self.closing = Some(Instant::now() + CLOSE_GRACE);
                false
            }
            State::Draining | State::Joining(_) => false,
        }
    }
}

/// The line for a user whose daemon runs another version than this `connect`.
fn version_note(socket: &Path, theirs: &str) -> Option<String> {
    (theirs != VERSION).then(|| {
        format!(
            "switchyard connect: the daemon at {} runs switchyard {theirs}, this is {VERSION}; `switchyard stop` (with the same --config or --socket) and then reconnecting restarts it with this version",
            socket.display()
        )
    })
}

/// One connection's reader: the router's lines to the client, control lines to the controller,
/// answers to replayed requests swallowed.
async fn read_router(
    generation: u64,
    at: String,
    mut reader: BufReader<OwnedReadHalf>,
    ledger: Arc<Mutex<Ledger>>,
    idle: Arc<Notify>,
    out: mpsc::Sender<Vec<u8>>,
    events: mpsc::UnboundedSender<Event>,
) {
    let why = loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) => break None,
            Err(e) => break Some(e),
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        if control::is_control(&text) {
            match control::reply(&text) {
                Ok(Reply::Drain { reason }) => {
                    let _ = events.send(Event::Drain { generation, reason });
                }
                Ok(other) => say(&format!("switchyard connect: ignored a control line from the router: {other:?}")),
                Err(e) => say(&format!("switchyard connect: {e}")),
            }
            continue;
        }
        if !pass_on(&text, &ledger, &idle) {
            continue;
        }
        if out.send(line).await.is_err() {
            break None;
        }
    };
    let why = match why {
        None => format!("the router at {at} closed the connection (it stopped or was killed)"),
        Some(e) => format!("the connection to the router at {at} failed: {e}"),
    };
    let _ = events.send(Event::Gone { generation, why });
}

/// Books the answers in a router line; false for an answer to a replayed request (which is
/// `connect`'s, not the client's).
fn pass_on(text: &str, ledger: &Mutex<Ledger>, idle: &Notify) -> bool {
    let ids = response_ids(text.as_bytes());
    if ids.is_empty() {
        return true;
    }
    let mut ledger = ledger.lock().expect("lock");
    if !codec::is_batch(text.trim())
        && let Some(method) = ledger.replayed.remove(&ids[0])
    {
        if let Ok(env) = codec::parse(text.trim())
            && env.is_error
        {
            say(&format!("switchyard connect: the router refused the replayed {method}: {}", text.trim()));
        }
        return false;
    }
    for id in &ids {
        ledger.ids.remove(id);
    }
    if !ledger.batches.is_empty() {
        let Ledger { ids, batches, .. } = &mut *ledger;
        batches.retain(|b| b.iter().any(|id| ids.contains(id)));
    }
    if ledger.ids.is_empty() {
        idle.notify_one();
    }
    true
}

/// Calls `f` with each message of a line (each element of a batch) that parses.
fn for_each_message(text: &str, mut f: impl FnMut(&str, &codec::Envelope)) {
    let text = text.trim();
    let items = if codec::is_batch(text) { codec::split_batch(text).unwrap_or_default() } else { vec![text] };
    for m in items {
        if let Ok(env) = codec::parse(m) {
            f(m, &env);
        }
    }
}

/// Ids (raw JSON) of the requests in one line from the client, and whether it is a batch.
fn request_ids(line: &[u8]) -> (Vec<String>, bool) {
    let batch = std::str::from_utf8(line).is_ok_and(|t| codec::is_batch(t.trim()));
    (messages(line, Kind::Request), batch)
}

/// Ids (raw JSON) of the responses in one line from the router.
fn response_ids(line: &[u8]) -> Vec<String> {
    messages(line, Kind::Response)
}

fn messages(line: &[u8], kind: Kind) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(text) = std::str::from_utf8(line) {
        for_each_message(text, |m, env| {
            if env.kind == kind
                && let Some(r) = env.id.clone()
            {
                out.push(m[r].to_string());
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use tokio::io::{DuplexStream, Lines};
    use tokio::net::UnixListener;
    use tokio::sync::Semaphore;

    /// A router in the test's process: welcomes (or refuses) each connection, records every line
    /// it gets, answers requests (`tools/call` of `hang` never), and sends what the test says.
    struct Fake {
        socket: PathBuf,
        /// (connection number, line), in arrival order.
        log: Arc<Mutex<Vec<(usize, String)>>>,
        conns: Arc<Mutex<Vec<mpsc::UnboundedSender<Option<String>>>>>,
        /// One permit per welcome: a test holds back a reconnect's welcome by giving none.
        welcomes: Arc<Semaphore>,
        /// Lines written on the test's word (`send`), all connections together.
        written: Arc<std::sync::atomic::AtomicUsize>,
        accept: JoinHandle<()>,
    }

    impl Fake {
        async fn start(socket: &Path, refuse: Option<&str>) -> Fake {
            let listener = UnixListener::bind(socket).unwrap();
            let log = Arc::new(Mutex::new(Vec::new()));
            let conns = Arc::new(Mutex::new(Vec::new()));
            let welcomes = Arc::new(Semaphore::new(1000));
            let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let (l, c, w, refuse) = (log.clone(), conns.clone(), welcomes.clone(), refuse.map(str::to_string));
            let count = written.clone();
            let accept = tokio::spawn(async move {
                let mut n = 0;
                while let Ok((stream, _)) = listener.accept().await {
                    n += 1;
                    let (tx, rx) = mpsc::unbounded_channel();
                    c.lock().unwrap().push(tx);
                    tokio::spawn(Fake::serve(n, stream, rx, l.clone(), w.clone(), count.clone(), refuse.clone()));
                }
            });
            Fake { socket: socket.to_path_buf(), log, conns, welcomes, written, accept }
        }

        async fn serve(
            n: usize,
            stream: UnixStream,
            mut cmds: mpsc::UnboundedReceiver<Option<String>>,
            log: Arc<Mutex<Vec<(usize, String)>>>,
            welcomes: Arc<Semaphore>,
            written: Arc<std::sync::atomic::AtomicUsize>,
            refuse: Option<String>,
        ) {
            let (r, mut w) = stream.into_split();
            let mut lines = BufReader::new(r).lines();
            let Ok(Some(hello)) = lines.next_line().await else { return };
            log.lock().unwrap().push((n, hello));
            if let Some(error) = refuse {
                let _ = w.write_all(control::line(&Reply::Refused { error }).as_bytes()).await;
                return;
            }
            welcomes.acquire().await.unwrap().forget();
            let welcome = Reply::Welcome { server: "fs".into(), version: VERSION.into(), pid: 1 };
            w.write_all(control::line(&welcome).as_bytes()).await.unwrap();
            loop {
                tokio::select! {
                    line = lines.next_line() => {
                        let Ok(Some(line)) = line else { return };
                        log.lock().unwrap().push((n, line.clone()));
                        let Ok(m) = serde_json::from_str::<Value>(&line) else { continue };
                        let (Some(id), Some(method)) = (m.get("id"), m["method"].as_str()) else { continue };
                        if m["params"]["name"] == "hang" {
                            continue;
                        }
                        let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"method": method, "conn": n}});
                        if w.write_all(format!("{answer}\n").as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    cmd = cmds.recv() => match cmd {
                        Some(Some(line)) => {
                            w.write_all(format!("{line}\n").as_bytes()).await.unwrap();
                            written.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        // Close: the router goes away.
                        _ => return,
                    }
                }
            }
        }

        /// Sends a line on connection `n` (1-based).
        fn send(&self, n: usize, line: impl std::fmt::Display) {
            self.conns.lock().unwrap()[n - 1].send(Some(line.to_string())).unwrap();
        }

        fn close(&self, n: usize) {
            let _ = self.conns.lock().unwrap()[n - 1].send(None);
        }

        /// The lines connection `n` received, parsed (the hello first).
        fn got(&self, n: usize) -> Vec<Value> {
            let log = self.log.lock().unwrap();
            log.iter().filter(|(c, _)| *c == n).map(|(_, l)| serde_json::from_str(l).unwrap()).collect()
        }

        async fn wait_for(&self, what: &str, mut ok: impl FnMut(&Fake) -> bool) {
            let end = Instant::now() + Duration::from_secs(10);
            while !ok(self) {
                assert!(Instant::now() < end, "waited 10 s for {what}; the fake got {:?}", self.log.lock().unwrap());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }

        /// Stops listening and closes every connection: the router is gone.
        fn stop(&self) {
            self.accept.abort();
            for c in self.conns.lock().unwrap().iter() {
                let _ = c.send(None);
            }
            let _ = std::fs::remove_file(&self.socket);
        }
    }

    /// The client's side of a relay: its stdin to write, its stdout to read.
    struct Client {
        input: DuplexStream,
        output: Lines<BufReader<DuplexStream>>,
        relay: JoinHandle<anyhow::Result<()>>,
    }

    impl Client {
        fn start(place: Place, exe: PathBuf) -> Client {
            let (input, relay_in) = tokio::io::duplex(64 * 1024);
            let (relay_out, output) = tokio::io::duplex(64 * 1024);
            let relay = tokio::spawn(relay(place, exe, relay_in, relay_out));
            Client { input, output: BufReader::new(output).lines(), relay }
        }

        async fn send(&mut self, message: Value) {
            self.input.write_all(format!("{message}\n").as_bytes()).await.unwrap();
        }

        async fn request(&mut self, id: Value, method: &str, params: Value) {
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        }

        async fn recv(&mut self) -> Value {
            let line = tokio::time::timeout(Duration::from_secs(10), self.output.next_line())
                .await
                .expect("an answer within 10 s")
                .unwrap()
                .expect("a line, not the end of the output");
            serde_json::from_str(&line).unwrap()
        }

        /// Nothing arrives for a moment.
        async fn quiet(&mut self) {
            if let Ok(line) = tokio::time::timeout(Duration::from_millis(200), self.output.next_line()).await {
                panic!("expected nothing, got {line:?}");
            }
        }

        async fn initialize(&mut self) {
            self.request(json!(0), "initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}})).await;
            assert_eq!(self.recv().await["result"]["method"], "initialize");
            self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        }
    }

    fn dir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("r.sock");
        (dir, socket)
    }

    fn named(socket: &Path, config: Option<PathBuf>) -> Place {
        Place { socket: socket.to_path_buf(), server: Some("fs".into()), config, env: ClientValues::default() }
    }

    fn no_daemon() -> PathBuf {
        PathBuf::from("/nonexistent/switchyard")
    }

    #[tokio::test]
    async fn a_welcomed_session_is_relayed_both_ways_and_control_lines_stay_with_connect() {
        let (_d, socket) = dir();
        let fake = Fake::start(&socket, None).await;
        let mut c = Client::start(named(&socket, None), no_daemon());
        c.initialize().await;
        c.request(json!("a"), "tools/call", json!({"name": "echo"})).await;
        let answer = c.recv().await;
        assert_eq!((answer["id"].clone(), answer["result"]["conn"].clone()), (json!("a"), json!(1)), "{answer}");
        fake.wait_for("the initialized notification", |f| f.got(1).len() == 4).await;
        let got = fake.got(1);
        assert_eq!(got[0], json!({"switchyard": "connect", "server": "fs", "version": VERSION}));
        assert_eq!(got[2]["method"], "notifications/initialized");
        // The router's own lines: a control line is acted on (an unknown one is dropped), never passed on.
        fake.send(1, control::line(&Reply::Status { status: json!({}) }).trim());
        fake.send(1, json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        assert_eq!(c.recv().await["method"], "notifications/tools/list_changed");
        // A batch goes through as it is.
        c.send(json!([{"jsonrpc": "2.0", "id": 5, "method": "ping"}])).await;
        fake.wait_for("the batch", |f| f.got(1).iter().any(|m| m.is_array())).await;
        // The client leaves: connect closes its side, and ends once the router closes too.
        drop(c.input);
        fake.wait_for("the end", |f| f.got(1).len() == 5).await;
        fake.close(1);
        let ended = tokio::time::timeout(Duration::from_secs(5), c.relay).await.expect("connect ends");
        ended.unwrap().unwrap();
    }

    /// Found by the e2e buffer-budget test: `connect` must not absorb what its client does not
    /// read, or the router never sees a slow client (and never applies its budget).
    #[tokio::test]
    async fn a_client_that_stops_reading_holds_up_the_router_at_once() {
        let (_d, socket) = dir();
        let fake = Fake::start(&socket, None).await;
        let mut c = Client::start(named(&socket, None), no_daemon());
        c.initialize().await;
        let big = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x".repeat(1 << 20)}});
        for _ in 0..20 {
            fake.send(1, &big);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let written = fake.written.load(std::sync::atomic::Ordering::SeqCst);
        assert!(written < 8, "the router could write {written} MiB to a client that reads nothing");
        // Reading again lets everything through.
        for _ in 0..20 {
            assert_eq!(c.recv().await["method"], "notifications/message");
        }
    }

    #[tokio::test]
    async fn a_refused_session_answers_the_client_s_initialize_with_the_reason() {
        let (_d, socket) = dir();
        let _fake = Fake::start(&socket, Some("no server `fs` in /x/switchyard.toml; servers: git, web")).await;
        let mut c = Client::start(named(&socket, None), no_daemon());
        c.request(json!(1), "initialize", json!({})).await;
        let answer = c.recv().await;
        assert_eq!(answer["id"], 1, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("refused server `fs`") && message.contains("servers: git, web"), "{message}");
        let ended = tokio::time::timeout(Duration::from_secs(5), c.relay).await.expect("connect ends");
        assert!(ended.unwrap().unwrap_err().to_string().contains("servers: git, web"));
    }

    #[tokio::test]
    async fn nobody_at_an_old_form_socket_is_an_error_for_the_first_request() {
        let (_d, socket) = dir();
        let mut c = Client::start(
            Place { socket: socket.clone(), server: None, config: None, env: ClientValues::default() },
            no_daemon(),
        );
        c.send(json!({"jsonrpc": "2.0", "method": "notifications/whatever"})).await;
        c.request(json!("init"), "initialize", json!({})).await;
        let answer = c.recv().await;
        assert_eq!(answer["id"], "init");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(&socket.display().to_string()) && message.contains("run --listen"), "{message}");
        assert!(tokio::time::timeout(Duration::from_secs(5), c.relay).await.unwrap().unwrap().is_err());
    }

    #[tokio::test]
    async fn a_router_that_goes_away_mid_call_is_rejoined_and_the_session_replayed() {
        let (d, socket) = dir();
        let fake = Fake::start(&socket, None).await;
        // A config is known: connect reconnects (the fake still listens, so no daemon is started).
        let mut place = named(&socket, Some(d.path().join("switchyard.toml")));
        place.env = ClientValues(BTreeMap::from([("TOKEN".to_string(), "t-1".to_string())]));
        let mut c = Client::start(place, no_daemon());
        c.initialize().await;
        c.request(json!(1), "logging/setLevel", json!({"level": "info"})).await;
        c.request(json!(2), "logging/setLevel", json!({"level": "debug"})).await;
        c.request(json!(3), "resources/subscribe", json!({"uri": "file:///a"})).await;
        c.request(json!(4), "resources/subscribe", json!({"uri": "file:///b"})).await;
        c.request(json!(5), "resources/unsubscribe", json!({"uri": "file:///a"})).await;
        for _ in 1..=5 {
            c.recv().await;
        }
        c.request(json!("long"), "tools/call", json!({"name": "hang"})).await;
        fake.wait_for("the long call", |f| f.got(1).iter().any(|m| m["id"] == "long")).await;
        // The next welcome waits until the test lets it go.
        let permits = fake.welcomes.available_permits();
        fake.welcomes.acquire_many(permits as u32).await.unwrap().forget();
        fake.close(1);
        let lost = c.recv().await;
        assert_eq!(lost["id"], "long", "{lost}");
        let message = lost["error"]["message"].as_str().unwrap();
        assert!(message.contains("closed the connection") && message.contains("outcome is unknown"), "{message}");
        // Reconnecting: a request waits for the new connection.
        fake.wait_for("the second hello", |f| f.got(2).len() == 1).await;
        c.request(json!("during"), "tools/call", json!({"name": "echo"})).await;
        c.quiet().await;
        fake.welcomes.add_permits(1);
        let answer = c.recv().await;
        assert_eq!((answer["id"].clone(), answer["result"]["conn"].clone()), (json!("during"), json!(2)), "{answer}");
        // The new connection got the session set up again, in order, before the waiting request;
        // the client saw none of the replay's answers.
        let got = fake.got(2);
        // Both hellos carry the client's values: the new connection may reach a new daemon.
        assert_eq!(fake.got(1)[0]["env"], json!({"TOKEN": "t-1"}));
        assert_eq!(got[0]["env"], json!({"TOKEN": "t-1"}));
        let methods: Vec<&str> = got[1..].iter().map(|m| m["method"].as_str().unwrap()).collect();
        assert_eq!(
            methods,
            ["initialize", "notifications/initialized", "logging/setLevel", "resources/subscribe", "tools/call"]
        );
        assert!(got[1]["id"].as_str().unwrap().starts_with(REPLAY_ID), "{}", got[1]);
        assert_eq!(got[1]["params"], json!({"protocolVersion": "2025-06-18", "capabilities": {}}));
        assert_eq!(got[3]["params"], json!({"level": "debug"}));
        assert_eq!(got[4]["params"], json!({"uri": "file:///b"}));
        c.quiet().await;
    }

    #[tokio::test]
    async fn a_drain_never_holds_a_call_and_moves_once_nothing_is_in_flight_a_cancel_included() {
        let (d, socket) = dir();
        let fake = Fake::start(&socket, None).await;
        let mut c = Client::start(named(&socket, Some(d.path().join("switchyard.toml"))), no_daemon());
        c.initialize().await;
        c.request(json!("old"), "tools/call", json!({"name": "hang"})).await;
        fake.wait_for("the old call", |f| f.got(1).iter().any(|m| m["id"] == "old")).await;
        fake.send(1, control::line(&Reply::Drain { reason: "server fs changed".into() }).trim());
        // Once the line after it reached the client, connect has the drain in hand.
        fake.send(1, json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        assert_eq!(c.recv().await["method"], "notifications/tools/list_changed");
        // A quick call during the drain is served at once, by the old connection.
        c.request(json!("quick"), "tools/call", json!({"name": "echo"})).await;
        let quick = c.recv().await;
        assert_eq!((quick["id"].clone(), quick["result"]["conn"].clone()), (json!("quick"), json!(1)), "{quick}");
        assert_eq!(fake.conns.lock().unwrap().len(), 1, "still on the old connection while the slow call runs");
        // The client gives up on the slow call: nothing is owed any more, so connect moves on
        // (the cancellation itself still reaches the old session, which must stop the call).
        c.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "old"}})).await;
        fake.wait_for("the replay on a new connection", |f| {
            f.got(2).iter().any(|m| m["method"] == "notifications/initialized")
        })
        .await;
        assert!(fake.got(1).iter().any(|m| m["method"] == "notifications/cancelled"));
        c.request(json!("after"), "tools/call", json!({"name": "echo"})).await;
        let after = c.recv().await;
        assert_eq!((after["id"].clone(), after["result"]["conn"].clone()), (json!("after"), json!(2)), "{after}");
        let methods: Vec<Value> = fake.got(2)[1..].iter().map(|m| m["method"].clone()).collect();
        assert_eq!(methods, [json!("initialize"), json!("notifications/initialized"), json!("tools/call")]);
        c.quiet().await;
    }

    #[tokio::test]
    async fn an_old_form_connect_ends_with_an_error_when_its_router_is_gone() {
        let (_d, socket) = dir();
        let fake = Fake::start(&socket, None).await;
        let mut c = Client::start(
            Place { socket: socket.clone(), server: None, config: None, env: ClientValues::default() },
            no_daemon(),
        );
        c.initialize().await;
        assert_eq!(fake.got(1)[0], json!({"switchyard": "connect", "server": null, "version": VERSION}));
        c.request(json!(7), "tools/call", json!({"name": "hang"})).await;
        fake.wait_for("the call", |f| f.got(1).iter().any(|m| m["id"] == 7)).await;
        fake.stop();
        let lost = c.recv().await;
        assert_eq!(lost["id"], 7);
        let ended = tokio::time::timeout(Duration::from_secs(5), c.relay).await.expect("connect ends");
        let e = ended.unwrap().unwrap_err().to_string();
        assert!(e.contains("closed the connection") && e.contains("1 call(s)"), "{e}");
    }

    #[test]
    fn another_version_of_the_daemon_is_told_once_with_what_to_do() {
        assert_eq!(version_note(Path::new("/run/s.sock"), VERSION), None);
        let note = version_note(Path::new("/run/s.sock"), "0.0.1").unwrap();
        assert!(note.contains("runs switchyard 0.0.1") && note.contains("`switchyard stop`"), "{note}");
    }

    /// A router older than the hello answers it as a bad JSON-RPC message (an error with id
    /// null) and serves the session all the same: the old form goes on, a server name cannot.
    #[tokio::test]
    async fn a_router_older_than_the_hello_serves_the_old_form_only() {
        let (_d, socket) = dir();
        let listener = UnixListener::bind(&socket).unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (r, mut w) = stream.into_split();
                    let mut lines = BufReader::new(r).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let m: Value = serde_json::from_str(&line).unwrap();
                        let answer = match m.get("id") {
                            Some(id) => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
                            None => {
                                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request"}})
                            }
                        };
                        w.write_all(format!("{answer}\n").as_bytes()).await.unwrap();
                    }
                });
            }
        });
        let mut old = Client::start(
            Place { socket: socket.clone(), server: None, config: None, env: ClientValues::default() },
            no_daemon(),
        );
        old.request(json!(1), "ping", json!({})).await;
        assert_eq!(old.recv().await, json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        let mut named = Client::start(named(&socket, None), no_daemon());
        named.request(json!(1), "initialize", json!({})).await;
        let refused = named.recv().await;
        assert!(refused["error"]["message"].as_str().unwrap().contains("older than `connect NAME`"), "{refused}");
    }

    #[test]
    fn the_command_line_says_where_to_connect() {
        let opts = |name: &str, config: Option<&str>, socket: Option<&str>| Options {
            name: name.into(),
            config: config.map(PathBuf::from),
            socket: socket.map(PathBuf::from),
            env: Vec::new(),
        };
        // The old form: a socket, no server name, never a daemon start.
        let old = Place::resolve(&opts("./r.sock", None, None)).unwrap();
        assert_eq!(old, Place { socket: "./r.sock".into(), server: None, config: None, env: ClientValues::default() });
        let e = Place::resolve(&opts("/run/r.sock", Some("c.toml"), None)).unwrap_err().to_string();
        assert!(e.contains("go with a server name"), "{e}");
        // --socket: the config is read only when a daemon must be started.
        let given = Place::resolve(&opts("fs", Some("/nowhere/c.toml"), Some("/run/s.sock"))).unwrap();
        let config = Some(PathBuf::from("/nowhere/c.toml"));
        let env = ClientValues::default();
        assert_eq!(given, Place { socket: "/run/s.sock".into(), server: Some("fs".into()), config, env });
        // Without it, the socket is named after the config file, which must be there.
        let e = Place::resolve(&opts("fs", Some("/nowhere/c.toml"), None)).unwrap_err().to_string();
        assert!(e.contains("/nowhere/c.toml") && e.contains("--config"), "{e}");
    }

    #[test]
    fn env_names_are_read_from_connect_s_environment_and_a_missing_one_is_named() {
        let getenv = |n: &str| match n {
            "A" => Some("secret-a".into()),
            "B_2" => Some("".into()),
            _ => None,
        };
        let opts = |env: &[&str]| Options {
            name: "fs".into(),
            config: Some("/nowhere/c.toml".into()),
            socket: Some("/run/s.sock".into()),
            env: env.iter().map(|s| s.to_string()).collect(),
        };
        // Repeated and comma-separated alike; an empty value is a value.
        let place = Place::resolve_with(&opts(&["A", "B_2"]), &getenv).unwrap();
        assert_eq!(place, Place::resolve_with(&opts(&["A,B_2"]), &getenv).unwrap());
        let want = BTreeMap::from([("A".to_string(), "secret-a".to_string()), ("B_2".to_string(), String::new())]);
        assert_eq!(place.env.0, want);
        assert!(!format!("{place:?}").contains("secret-a"), "{place:?}");
        let e = Place::resolve_with(&opts(&["A,MISSING"]), &getenv).unwrap_err().to_string();
        assert!(e.contains("MISSING is not set") && e.contains("`env`") && !e.contains("secret-a"), "{e}");
        let e = Place::resolve_with(&opts(&["9X"]), &getenv).unwrap_err().to_string();
        assert!(e.contains("not a variable name"), "{e}");
    }

    /// A stand-in for `switchyard daemon ... --detach`: `body` runs with $5 = the socket.
    fn fake_daemon(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let exe = dir.join("daemon.sh");
        std::fs::write(&exe, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        exe
    }

    #[tokio::test]
    async fn ten_joins_at_once_start_one_daemon() {
        let (d, socket) = dir();
        let config = d.path().join("switchyard.toml");
        std::fs::write(&config, "").unwrap();
        let starts = d.path().join("starts");
        // It records its start, then returns once the "daemon" (the fake, below) listens.
        let exe = fake_daemon(
            d.path(),
            &format!(
                "echo \"$@\" >> {}\ni=0\nwhile [ ! -S \"$5\" ]; do sleep 0.02; i=$((i+1)); [ $i -gt 500 ] && exit 3; done\nexit 0",
                starts.display()
            ),
        );
        let place = named(&socket, Some(config.clone()));
        let joins: Vec<_> = (0..10)
            .map(|_| {
                let (place, exe) = (place.clone(), exe.clone());
                tokio::spawn(async move { join(&place, &exe).await.map(|_| ()) })
            })
            .collect();
        let end = Instant::now() + Duration::from_secs(10);
        while !starts.exists() {
            assert!(Instant::now() < end, "no daemon was started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let fake = Fake::start(&socket, None).await;
        for j in joins {
            tokio::time::timeout(Duration::from_secs(20), j).await.expect("joined").unwrap().unwrap();
        }
        let started = std::fs::read_to_string(&starts).unwrap();
        let canonical = std::fs::canonicalize(&config).unwrap();
        assert_eq!(
            started.lines().collect::<Vec<_>>(),
            [format!("daemon --config {} --socket {} --detach", canonical.display(), socket.display())]
        );
        assert_eq!(fake.log.lock().unwrap().len(), 10, "every join said hello");
    }

    #[tokio::test]
    async fn a_daemon_that_cannot_start_is_the_answer_to_initialize() {
        let (d, socket) = dir();
        let config = d.path().join("switchyard.toml");
        std::fs::write(&config, "").unwrap();
        let exe = fake_daemon(d.path(), "echo 'switchyard: error: servers.fs: unknown field `comand`' >&2\nexit 1");
        let mut c = Client::start(named(&socket, Some(config.clone())), exe);
        c.request(json!(0), "initialize", json!({})).await;
        let answer = c.recv().await;
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("could not start") && message.contains("unknown field `comand`"), "{message}");
        assert!(message.contains(&socket.display().to_string()) && message.contains("switchyard daemon --config"));
        assert!(tokio::time::timeout(Duration::from_secs(5), c.relay).await.unwrap().unwrap().is_err());
    }

    #[tokio::test]
    async fn a_failed_reconnect_answers_requests_with_the_reason_and_a_later_request_tries_again() {
        let (d, socket) = dir();
        let config = d.path().join("switchyard.toml");
        std::fs::write(&config, "").unwrap();
        let exe = fake_daemon(d.path(), "echo 'port in use' >&2\nexit 1");
        let fake = Fake::start(&socket, None).await;
        let mut c = Client::start(named(&socket, Some(config)), exe);
        c.initialize().await;
        fake.stop();
        // The reconnect fails (the "daemon" cannot start): the request gets the reason at once.
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.request(json!(1), "tools/call", json!({"name": "echo"})).await;
        let refused = c.recv().await;
        assert!(refused["error"]["message"].as_str().unwrap().contains("port in use"), "{refused}");
        // The router is back: a request a second later reaches it, after the replay.
        let fake = Fake::start(&socket, None).await;
        tokio::time::sleep(RETRY_EVERY).await;
        c.request(json!(2), "tools/call", json!({"name": "echo"})).await;
        let answer = c.recv().await;
        assert_eq!((answer["id"].clone(), answer["result"]["conn"].clone()), (json!(2), json!(1)), "{answer}");
        assert_eq!(fake.got(1)[1]["method"], "initialize");
    }
}
