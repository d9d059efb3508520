//! The relay against a fake router in the test's process, and the command line's reading.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use switchyard_config::ClientValues;
use switchyard_router::control::{self, Reply};

use super::join::{VERSION, join, version_note};
use super::relay::{REPLAY_ID, RETRY_EVERY, relay};
use super::{Destination, Options};

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
        let welcome = Reply::Welcome { server: "fs".into(), version: VERSION.into(), pid: 1, handoff: false };
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
    fn start(place: Destination, exe: PathBuf) -> Client {
        let (input, relay_in) = tokio::io::duplex(64 * 1024);
        let (relay_out, output) = tokio::io::duplex(64 * 1024);
        let relay = tokio::spawn(async move {
            let first = super::join::join(&place, &exe).await;
            relay(place, exe, relay_in, relay_out, super::relay::Start::Fresh(first)).await
        });
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

fn named(socket: &Path, config: Option<PathBuf>) -> Destination {
    Destination {
        socket: socket.to_path_buf(),
        server: Some("fs".into()),
        config,
        env: ClientValues::default(),
        group: None,
    }
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
    let here = std::env::current_dir().unwrap().display().to_string();
    assert_eq!(got[0], json!({"switchyard": "connect", "server": "fs", "version": VERSION, "dir": here}));
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
    assert!(message.contains("refused: no server `fs` in") && message.contains("servers: git, web"), "{message}");
    assert_eq!(message.matches("`fs`").count(), 1, "{message}");
    let ended = tokio::time::timeout(Duration::from_secs(5), c.relay).await.expect("connect ends");
    assert!(ended.unwrap().unwrap_err().to_string().contains("servers: git, web"));
}

#[tokio::test]
async fn nobody_at_an_old_form_socket_is_an_error_for_the_first_request() {
    let (_d, socket) = dir();
    let mut c = Client::start(
        Destination { socket: socket.clone(), server: None, config: None, env: ClientValues::default(), group: None },
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
        Destination { socket: socket.clone(), server: None, config: None, env: ClientValues::default(), group: None },
        no_daemon(),
    );
    c.initialize().await;
    let here = std::env::current_dir().unwrap().display().to_string();
    assert_eq!(fake.got(1)[0], json!({"switchyard": "connect", "server": null, "version": VERSION, "dir": here}));
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
        Destination { socket: socket.clone(), server: None, config: None, env: ClientValues::default(), group: None },
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
        group: None,
    };
    // The old form: a socket, no server name, never a daemon start.
    let old = Destination::resolve(&opts("./r.sock", None, None)).unwrap();
    assert_eq!(
        old,
        Destination {
            socket: "./r.sock".into(),
            server: None,
            config: None,
            env: ClientValues::default(),
            group: None
        }
    );
    let e = Destination::resolve(&opts("/run/r.sock", Some("c.toml"), None)).unwrap_err().to_string();
    assert!(e.contains("go with a server name"), "{e}");
    // --socket: the config is read only when a daemon must be started.
    let given = Destination::resolve(&opts("fs", Some("/nowhere/c.toml"), Some("/run/s.sock"))).unwrap();
    let config = Some(PathBuf::from("/nowhere/c.toml"));
    let env = ClientValues::default();
    assert_eq!(
        given,
        Destination { socket: "/run/s.sock".into(), server: Some("fs".into()), config, env, group: None }
    );
    // Without it, the socket is named after the config file, which must be there.
    let e = Destination::resolve(&opts("fs", Some("/nowhere/c.toml"), None)).unwrap_err().to_string();
    assert!(e.contains("/nowhere/c.toml") && e.contains("--config"), "{e}");
    // --group: a group of the config's daemon, no server.
    let group = |g: &str| Options { group: Some(g.into()), ..opts("", Some("/nowhere/c.toml"), Some("/run/s.sock")) };
    let given = Destination::resolve(&group("work")).unwrap();
    assert_eq!((given.server, given.group.as_deref()), (None, Some("work")));
    let e = Destination::resolve(&group("a b")).unwrap_err().to_string();
    assert!(e.contains("--group") && e.contains("group name"), "{e}");
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
        group: None,
    };
    // Repeated and comma-separated alike; an empty value is a value.
    let place = Destination::resolve_with(&opts(&["A", "B_2"]), &getenv).unwrap();
    assert_eq!(place, Destination::resolve_with(&opts(&["A,B_2"]), &getenv).unwrap());
    let want = BTreeMap::from([("A".to_string(), "secret-a".to_string()), ("B_2".to_string(), String::new())]);
    assert_eq!(place.env.0, want);
    assert!(!format!("{place:?}").contains("secret-a"), "{place:?}");
    let e = Destination::resolve_with(&opts(&["A,MISSING"]), &getenv).unwrap_err().to_string();
    assert!(e.contains("MISSING is not set") && e.contains("`--env MISSING?`") && !e.contains("secret-a"), "{e}");
    // The hint fits any client's format: no JSON for a TOML file.
    assert!(!e.contains('{') && !e.contains('"'), "{e}");
    // `NAME?`: a variable that may be unset goes to the server empty (Codex's `env_vars` leave
    // an unset one out and still start the server); one that is set goes as it is.
    let place = Destination::resolve_with(&opts(&["A?,MISSING?"]), &getenv).unwrap();
    let want = BTreeMap::from([("A".to_string(), "secret-a".to_string()), ("MISSING".to_string(), String::new())]);
    assert_eq!(place.env.0, want);
    let e = Destination::resolve_with(&opts(&["?"]), &getenv).unwrap_err().to_string();
    assert!(e.contains("not a variable name"), "{e}");
    let e = Destination::resolve_with(&opts(&["9X"]), &getenv).unwrap_err().to_string();
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
    // The daemon's one line says why: that, and whose daemon, is the whole message.
    let want =
        format!("the switchyard daemon for {} could not start: servers.fs: unknown field `comand`", config.display());
    assert_eq!(message, want);
    assert!(tokio::time::timeout(Duration::from_secs(5), c.relay).await.unwrap().unwrap().is_err());

    // Lines that are not one reason come with the socket and what to do to see more.
    let exe = fake_daemon(d.path(), "echo 'starting' >&2\necho 'then it broke' >&2\nexit 1");
    let mut c = Client::start(named(&socket, Some(config.clone())), exe);
    c.request(json!(0), "initialize", json!({})).await;
    let answer = c.recv().await;
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not start") && message.contains("starting / then it broke"), "{message}");
    assert!(message.contains(&socket.display().to_string()) && message.contains("switchyard daemon --config"));
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
