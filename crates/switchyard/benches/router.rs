//! Round trips through real processes: switchyard vs a direct connection vs peer proxies.
//!
//! A plain bench binary (`cargo bench --bench router [-- SECTION...]`), not criterion: what is
//! measured is a JSON-RPC round trip through pipes and other processes, and the figures wanted
//! are percentiles and pairs from one run, which criterion's model does not give. Sections:
//! `latency`, `everything`, `plugins`, `throughput`, `memory`, `remote`, `daemon`, `http`,
//! `silent` (default: all; `silent` alone takes about a quarter of an hour). Tables are printed
//! as Markdown, ready for BENCHMARKS.md.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use switchyard_testkit::{descendants, proxy, python_venv, signal_group, signal_pid};

// Not `mod silent;`: cargo would take benches/silent.rs for a bench target of its own.
#[path = "silent/mod.rs"]
mod silent;

/// Sequential round trips per block; blocks of all targets alternate, so drift hits all alike.
const BLOCK: usize = 500;
const ROUNDS: usize = 8;
/// Throughput: measured after a warm-up, for this long, per cell.
const WARMUP: Duration = Duration::from_millis(300);
const MEASURE: Duration = Duration::from_millis(1500);

fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let run = |s: &str| wanted.is_empty() || wanted.iter().any(|w| w == s);
    let b = Bench::new();
    machine();
    if run("latency") {
        b.latency_fixture();
    }
    if run("everything") {
        b.latency_everything();
    }
    if run("plugins") {
        b.plugins();
    }
    if run("throughput") {
        b.throughput();
    }
    if run("memory") {
        b.memory();
    }
    if run("remote") {
        b.remote();
    }
    if run("daemon") {
        b.daemon();
    }
    if run("http") {
        b.http();
    }
    if run("silent") {
        b.silent();
    }
    let _ = std::fs::remove_dir_all(&b.dir);
}

/// The binary under test and a scratch directory for configs, plugins and logs.
struct Bench {
    exe: PathBuf,
    dir: PathBuf,
    repo: PathBuf,
}

impl Bench {
    fn new() -> Bench {
        let exe = std::env::var_os("SWITCHYARD_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_switchyard")));
        let dir = std::env::temp_dir().join(format!("switchyard-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf();
        println!("binary: {}", exe.display());
        Bench { exe, dir, repo }
    }

    fn s(&self, p: &Path) -> String {
        p.to_string_lossy().into_owned()
    }

    fn fixture_argv(&self) -> Vec<String> {
        vec![self.s(&self.exe), "fixture".into()]
    }

    fn everything_entry(&self) -> Option<PathBuf> {
        let entry = self.repo.join("tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        entry.is_file().then_some(entry)
    }

    fn everything_argv(&self) -> Option<Vec<String>> {
        self.everything_entry().map(|entry| vec!["node".into(), self.s(&entry), "stdio".into()])
    }

    /// `switchyard run` in front of `server`, with `config` and these example plugins.
    fn router_argv(&self, name: &str, config: &str, plugins: &[&str], server: &[String]) -> Vec<String> {
        let mut argv = self.router_base(name, config, plugins);
        argv.push("--".into());
        argv.extend(server.iter().cloned());
        argv
    }

    /// `switchyard run --url URL` (Streamable HTTP) with `config` and no plugins.
    fn remote_argv(&self, name: &str, config: &str, url: &str) -> Vec<String> {
        let mut argv = self.router_base(name, config, &[]);
        argv.extend(["--url".into(), url.into(), "--transport".into(), "streamable-http".into()]);
        argv
    }

    /// `switchyard run` with its options, before the server.
    fn router_base(&self, name: &str, config: &str, plugins: &[&str]) -> Vec<String> {
        let dir = self.dir.join(name);
        let plugins_dir = dir.join("plugins");
        std::fs::create_dir_all(&plugins_dir).unwrap();
        std::fs::write(dir.join("switchyard.toml"), config).unwrap();
        for file in plugins {
            let bytes = switchyard_policy::embedded::EXAMPLES.iter().find(|(n, _)| n == file).unwrap().1;
            std::fs::write(plugins_dir.join(file), bytes).unwrap();
        }
        let mut argv = vec![self.s(&self.exe), "run".into(), "--log-level".into(), "warn".into()];
        argv.extend(["--name".into(), "bench".into()]);
        argv.extend(["--config".into(), self.s(&dir.join("switchyard.toml"))]);
        argv.extend(["--plugins".into(), self.s(&plugins_dir)]);
        argv
    }

    /// The shell logging proxy (benches/peers/log-proxy.sh) in front of `server`.
    fn shell_argv(&self, server: &[String]) -> Vec<String> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/log-proxy.sh");
        let mut argv = vec!["bash".into(), self.s(&script), self.s(&self.dir.join("shell-proxy.log"))];
        argv.extend(server.iter().cloned());
        argv
    }

    /// The line-copying proxy (benches/peers/line-proxy.py) in front of `server`: the least a
    /// proxy does, the baseline of the stdio path.
    fn line_proxy_argv(&self, server: &[String]) -> Vec<String> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/line-proxy.py");
        let mut argv = vec!["python3".into(), self.s(&script)];
        argv.extend(server.iter().cloned());
        argv
    }

    /// A connection to `argv`, whose `echo` tool takes its text in `field`.
    fn conn(&self, label: &str, field: &'static str, argv: Vec<String>) -> Conn {
        let stderr = self.dir.join(format!("{}.stderr", label.replace([' ', '/', ','], "_")));
        Conn::spawn(label, field, argv, &stderr)
    }

    /// The router on `--listen SOCKET --no-stdio`, connected to from this process: the same
    /// router without stdin/stdout in the path.
    fn socket_conn(&self, label: &str, server: &[String]) -> Conn {
        let sock = self.dir.join("router.sock");
        let mut argv = self.router_argv("sock", "", &[], server);
        let at = argv.iter().position(|a| a == "--").unwrap();
        argv.splice(at..at, ["--listen".to_string(), self.s(&sock), "--no-stdio".to_string()]);
        Conn::socket(label, "text", argv, &sock, &self.dir.join("socket.stderr"))
    }

    /// `switchyard connect NAME` to a daemon serving `server` as NAME (started by that connect),
    /// through `env` so the daemon's home is the bench's own; the home stops the daemon when dropped.
    fn daemon_argv(&self, name: &str, server: &[String]) -> (DaemonHome, Vec<String>) {
        let home = DaemonHome::new(&self.exe, self.dir.join(format!("lat-daemon-{name}")), &server_table(name, server));
        let mut argv = vec!["env".to_string()];
        argv.extend(home.envs().into_iter().map(|(k, v)| format!("{k}={}", v.display())));
        argv.extend(home.connect_argv(name));
        (home, argv)
    }

    /// Added latency against the fast fixture's `echo`.
    fn latency_fixture(&self) {
        let fx = self.fixture_argv();
        let (_home, connect) = self.daemon_argv("fx", &fx);
        let relayed = relayed(&connect);
        let mut targets = vec![
            (self.conn("direct", "text", fx.clone()), BLOCK),
            (self.conn("switchyard", "text", self.router_argv("lat", "", &[], &fx)), BLOCK),
            (self.socket_conn("switchyard via its --listen socket", &fx), BLOCK),
            (self.conn("switchyard connect, to the daemon", "text", connect), BLOCK),
            (self.conn("switchyard connect, relayed (SWITCHYARD_HANDOFF=0)", "text", relayed), BLOCK),
            (self.conn("line-copying proxy (Python)", "text", self.line_proxy_argv(&fx)), BLOCK),
            (self.conn("shell log proxy", "text", self.shell_argv(&fx)), BLOCK / 10),
        ];
        println!("\n### Round-trip latency, fixture `echo` ({ROUNDS} alternating rounds; sequential calls)\n");
        latency_table(&mut targets);
    }

    /// Added latency against @modelcontextprotocol/server-everything `echo` (node).
    fn latency_everything(&self) {
        let Some(ev) = self.everything_argv() else {
            println!("\n(server-everything not installed: run `npm ci --ignore-scripts` in tests/npm)");
            return;
        };
        let (_home, connect) = self.daemon_argv("ev", &ev);
        let relayed = relayed(&connect);
        let mut targets = vec![
            (self.conn("direct", "message", ev.clone()), BLOCK / 2),
            (self.conn("switchyard", "message", self.router_argv("ev", "", &[], &ev)), BLOCK / 2),
            (self.conn("switchyard connect, to the daemon", "message", connect), BLOCK / 2),
            (self.conn("switchyard connect, relayed (SWITCHYARD_HANDOFF=0)", "message", relayed), BLOCK / 2),
            (self.conn("line-copying proxy (Python)", "message", self.line_proxy_argv(&ev)), BLOCK / 2),
            (self.conn("shell log proxy", "message", self.shell_argv(&ev)), BLOCK / 10),
        ];
        println!(
            "\n### Round-trip latency, server-everything `echo` ({ROUNDS} alternating rounds; sequential calls)\n"
        );
        latency_table(&mut targets);
    }

    /// The whole router's latency with 0, 1 and 3 example plugins in the chain.
    fn plugins(&self) {
        let fx = self.fixture_argv();
        let one = "[[plugins]]\nfile = \"hints.wasm\"\nconfig = { tools = { \"read*\" = { readOnlyHint = true } } }\n";
        let three = format!(
            "{one}\n[[plugins]]\nfile = \"fs-keys.wasm\"\nconfig = {{ writes = [\"write\"], reads = [\"read\"] }}\n\n[[plugins]]\nfile = \"timeouts.wasm\"\nconfig = {{ tools = {{ \"*\" = {{ timeout_ms = 60000 }} }} }}\n"
        );
        let mut targets = vec![
            (self.conn("direct", "text", fx.clone()), BLOCK),
            (self.conn("switchyard, no plugins", "text", self.router_argv("p0", "", &[], &fx)), BLOCK),
            (self.conn("switchyard, hints", "text", self.router_argv("p1", one, &["hints.wasm"], &fx)), BLOCK),
            (
                self.conn(
                    "switchyard, hints+fs-keys+timeouts",
                    "text",
                    self.router_argv("p3", &three, &["hints.wasm", "fs-keys.wasm", "timeouts.wasm"], &fx),
                ),
                BLOCK,
            ),
        ];
        println!("\n### Plugin chain, end to end: fixture `echo` through the router ({ROUNDS} alternating rounds)\n");
        latency_table(&mut targets);
    }

    /// Calls/s with 1, 8 and 64 requests outstanding on one connection.
    fn throughput(&self) {
        let fx = self.fixture_argv();
        // Made before the targets, so dropped after them: stopped with its connects still live,
        // the daemon would be started again by them (as a live connect does).
        let (_home, connect) = self.daemon_argv("tc", &fx);
        let mut targets: Vec<Conn> = vec![self.conn("direct", "text", fx.clone())];
        for n in [1, 2, 4] {
            let config = format!("[pools.default]\nmin = {n}\nmax = {n}\n");
            targets.push(self.conn(
                &format!("switchyard, pool of {n}"),
                "text",
                self.router_argv(&format!("t{n}"), &config, &[], &fx),
            ));
        }
        targets.push(self.conn("switchyard connect, relayed (SWITCHYARD_HANDOFF=0)", "text", relayed(&connect)));
        targets.push(self.conn("switchyard connect, to the daemon", "text", connect));
        targets.push(self.conn("line-copying proxy (Python)", "text", self.line_proxy_argv(&fx)));
        targets.push(self.conn("shell log proxy", "text", self.shell_argv(&fx)));
        let windows = [1usize, 8, 64];
        let mut rates = vec![vec![0.0f64; windows.len()]; targets.len()];
        // Windows outermost: every target is measured at one window before the next window.
        for (wi, &w) in windows.iter().enumerate() {
            for (ti, t) in targets.iter_mut().enumerate() {
                rates[ti][wi] = t.pipelined(w);
            }
        }
        println!(
            "\n### Throughput, fixture `echo`, requests outstanding on one connection ({} s per cell)\n",
            MEASURE.as_secs_f64()
        );
        println!("| target | 1 | 8 | 64 |");
        println!("|---|---:|---:|---:|");
        for (t, r) in targets.iter().zip(&rates) {
            println!("| {} | {} | {} | {} |", t.label, rate(r[0]), rate(r[1]), rate(r[2]));
        }
        let direct = &rates[0];
        for (t, r) in targets.iter().zip(&rates).skip(1) {
            println!(
                "\n{} / direct: {:.2} / {:.2} / {:.2}",
                t.label,
                r[0] / direct[0],
                r[1] / direct[1],
                r[2] / direct[2]
            );
        }
    }

    /// Router RSS idle and with 1,000 calls in flight.
    fn memory(&self) {
        let fx = self.fixture_argv();
        let mut c = self.conn("switchyard", "text", self.router_argv("mem", "", &[], &fx));
        for id in 0..100 {
            c.call(&echo_request(id, c.field));
        }
        let idle = rss_kib(c.pid());
        let n = 1000u64;
        let sleep_ms = 3000;
        let started = Instant::now();
        for id in 1000..1000 + n {
            c.send(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":{sleep_ms}}}}}}}"#
            ));
        }
        c.flush();
        // Every call has reached the server by now (it answers each after 3 s).
        std::thread::sleep(Duration::from_millis(1000));
        let busy = rss_kib(c.pid());
        let fixture_busy = child_rss_kib(c.pid());
        let mut ok = 0;
        for _ in 0..n {
            if c.recv().contains("slept") {
                ok += 1;
            }
        }
        let took = started.elapsed();
        std::thread::sleep(Duration::from_millis(200));
        let after = rss_kib(c.pid());
        println!("\n### Memory (VmRSS of the router process)\n");
        println!("| state | router RSS |");
        println!("|---|---:|");
        println!("| idle, after 100 calls | {} |", mib(idle));
        println!("| {n} calls in flight (`sleep` {sleep_ms} ms) | {} |", mib(busy));
        println!("| after they all returned | {} |", mib(after));
        println!(
            "\n{ok}/{n} answered ok in {:.2} s; per in-flight call: {:.1} KiB; the fixture instance itself: {}",
            took.as_secs_f64(),
            (busy.saturating_sub(idle)) as f64 / n as f64,
            mib(fixture_busy)
        );
    }
}

/// The argv of a `connect` (`env K=V ... switchyard connect ...`) that keeps the relay.
fn relayed(connect: &[String]) -> Vec<String> {
    let mut argv = connect.to_vec();
    argv.insert(1, "SWITCHYARD_HANDOFF=0".to_string());
    argv
}

/// One MCP connection over a child's stdin/stdout, driven with blocking I/O from this thread.
struct Conn {
    label: String,
    child: Child,
    /// None once closed (the MCP way to end a stdio session).
    w: Option<BufWriter<Box<dyn Write + Send>>>,
    r: BufReader<Box<dyn Read + Send>>,
    /// Connected to the router's --listen socket rather than to the child's stdio.
    socket: bool,
    line: String,
    next_id: u64,
    /// The argument of the server's `echo` tool.
    field: &'static str,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    method: Option<&'a str>,
}

impl Conn {
    fn spawn(label: &str, field: &'static str, argv: Vec<String>, stderr: &Path) -> Conn {
        let mut child = command(&argv, stderr).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let w: Box<dyn Write + Send> = Box::new(child.stdin.take().unwrap());
        let r: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        Conn::handshake(label, field, child, w, r, false, stderr)
    }

    /// A router started with `--listen socket --no-stdio`, reached over its Unix socket.
    fn socket(label: &str, field: &'static str, argv: Vec<String>, socket: &Path, stderr: &Path) -> Conn {
        let child = command(&argv, stderr).stdin(Stdio::null()).stdout(Stdio::null()).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let stream = loop {
            match std::os::unix::net::UnixStream::connect(socket) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => panic!("{label}: cannot connect to {}: {e}", socket.display()),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let r: Box<dyn Read + Send> = Box::new(stream.try_clone().unwrap());
        Conn::handshake(label, field, child, Box::new(stream), r, true, stderr)
    }

    fn handshake(
        label: &str,
        field: &'static str,
        child: Child,
        w: Box<dyn Write + Send>,
        r: Box<dyn Read + Send>,
        socket: bool,
        stderr: &Path,
    ) -> Conn {
        let w = Some(BufWriter::with_capacity(64 * 1024, w));
        let r = BufReader::with_capacity(64 * 1024, r);
        let mut c = Conn { label: label.into(), child, w, r, socket, line: String::new(), next_id: 1 << 40, field };
        let init = c.call(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#);
        assert!(init.contains("\"result\""), "{label}: initialize failed: {init} (stderr in {})", stderr.display());
        c.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        c.flush();
        // Warm up: first calls spawn instances and fill caches.
        for _ in 0..200 {
            let id = c.next_id;
            c.next_id += 1;
            c.call(&echo_request(id, field));
        }
        c
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, line: &str) {
        let w = self.w.as_mut().expect("open");
        w.write_all(line.as_bytes()).unwrap();
        w.write_all(b"\n").unwrap();
    }

    fn flush(&mut self) {
        self.w.as_mut().expect("open").flush().unwrap();
    }

    /// The next response (notifications and server requests are skipped).
    fn recv(&mut self) -> String {
        loop {
            self.line.clear();
            let n = self.r.read_line(&mut self.line).unwrap();
            assert!(n > 0, "{}: connection closed", self.label);
            let env: Envelope = serde_json::from_str(&self.line).unwrap_or(Envelope { id: None, method: None });
            if env.method.is_none() && env.id.is_some() {
                return self.line.clone();
            }
        }
    }

    fn call(&mut self, line: &str) -> String {
        self.send(line);
        self.flush();
        self.recv()
    }

    /// `n` sequential round trips; their durations.
    fn round_trips(&mut self, n: usize, out: &mut Vec<Duration>) {
        for _ in 0..n {
            let id = self.next_id;
            self.next_id += 1;
            let req = echo_request(id, self.field);
            let t = Instant::now();
            self.send(&req);
            self.flush();
            let resp = self.recv();
            out.push(t.elapsed());
            debug_assert!(resp.contains("\"result\""));
        }
    }

    /// Calls/s with `window` requests kept outstanding: a writer thread sends while fewer are
    /// in flight, a reader thread counts responses; counted over MEASURE after WARMUP.
    fn pipelined(&mut self, window: usize) -> f64 {
        let (stop, writer_done) = (&AtomicBool::new(false), &AtomicBool::new(false));
        let (sent, done, errors) = (&AtomicU64::new(0), &AtomicU64::new(0), &AtomicU64::new(0));
        // One token per request that may be outstanding; the reader hands them back.
        let (tokens_tx, tokens_rx) = mpsc::sync_channel::<()>(window);
        for _ in 0..window {
            tokens_tx.send(()).unwrap();
        }
        let tokens_tx = &tokens_tx;
        let (first_id, field, label) = (self.next_id, self.field, self.label.as_str());
        let (w, r, line) = (self.w.as_mut().expect("open"), &mut self.r, &mut self.line);
        let rate = std::thread::scope(|s| {
            s.spawn(move || {
                let mut id = first_id;
                while !stop.load(Ordering::Relaxed) {
                    // Writes are batched while tokens are at hand; flushed before blocking.
                    if tokens_rx.try_recv().is_err() {
                        w.flush().unwrap();
                        if tokens_rx.recv_timeout(Duration::from_millis(50)).is_err() {
                            continue;
                        }
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    w.write_all(echo_request(id, field).as_bytes()).unwrap();
                    w.write_all(b"\n").unwrap();
                    id += 1;
                }
                // A last request, so a reader blocked on an empty pipe always wakes up.
                sent.fetch_add(1, Ordering::Relaxed);
                writeln!(w, r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#).unwrap();
                w.flush().unwrap();
                writer_done.store(true, Ordering::Release);
            });
            s.spawn(move || {
                while !(writer_done.load(Ordering::Acquire)
                    && done.load(Ordering::Relaxed) == sent.load(Ordering::Relaxed))
                {
                    line.clear();
                    let n = r.read_line(line).unwrap();
                    assert!(n > 0, "{label}: connection closed");
                    if line.contains("\"method\"") {
                        continue;
                    }
                    if !line.contains("\"result\"") {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    let _ = tokens_tx.try_send(());
                }
            });
            std::thread::sleep(WARMUP);
            let (c0, t0) = (done.load(Ordering::Relaxed), Instant::now());
            std::thread::sleep(MEASURE);
            let (c1, t1) = (done.load(Ordering::Relaxed), Instant::now());
            stop.store(true, Ordering::Relaxed);
            (c1 - c0) as f64 / (t1 - t0).as_secs_f64()
        });
        self.next_id += sent.load(Ordering::Relaxed) + 1;
        let errors = errors.load(Ordering::Relaxed);
        assert_eq!(errors, 0, "{}: {errors} error responses at window {window}", self.label);
        rate
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Closing stdin is the MCP shutdown; the group kill covers a peer that ignores it.
        drop(self.w.take());
        if self.socket {
            // SAFETY: kill(2) of the router this bench started; SIGTERM is its clean shutdown.
            signal_pid(self.child.id(), libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: killpg(2) on the group this bench created for the child.
        signal_group(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

/// `argv` in a process group of its own (so Drop can take its children too), stderr to a file.
fn command(argv: &[String], stderr: &Path) -> Command {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).stderr(std::fs::File::create(stderr).unwrap()).process_group(0);
    cmd
}

fn echo_request(id: u64, field: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"{field}":"hello"}}}}}}"#
    )
}

/// Something a latency table measures: sequential round trips, timed one by one.
trait Target {
    fn label(&self) -> &str;
    /// `n` sequential round trips; their durations are pushed to `out`.
    fn round_trips(&mut self, n: usize, out: &mut Vec<Duration>);
}

impl Target for Conn {
    fn label(&self) -> &str {
        &self.label
    }

    fn round_trips(&mut self, n: usize, out: &mut Vec<Duration>) {
        Conn::round_trips(self, n, out)
    }
}

impl<T: Target + ?Sized> Target for &mut T {
    fn label(&self) -> &str {
        (**self).label()
    }

    fn round_trips(&mut self, n: usize, out: &mut Vec<Duration>) {
        (**self).round_trips(n, out)
    }
}

/// Runs ROUNDS rounds of alternating blocks and prints p50/p99 per target and the overhead
/// against the first target (the direct connection).
fn latency_table<T: Target>(targets: &mut [(T, usize)]) {
    let mut samples: Vec<Vec<Duration>> = targets.iter().map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for ((target, block), out) in targets.iter_mut().zip(samples.iter_mut()) {
            target.round_trips(*block, out);
        }
    }
    let stats: Vec<(Duration, Duration)> = samples
        .iter_mut()
        .map(|s| {
            s.sort();
            (pct(s, 0.50), pct(s, 0.99))
        })
        .collect();
    let (d50, d99) = stats[0];
    println!("| target | calls | p50 | p99 | p50 added | p99 added | p50 ratio |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (i, ((target, _), (s, (p50, p99)))) in targets.iter().zip(samples.iter().zip(&stats)).enumerate() {
        let added = |a: Duration, b: Duration| match i {
            0 => "-".to_string(),
            _ => format!("{:+.1} µs", a.as_secs_f64() * 1e6 - b.as_secs_f64() * 1e6),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.2}× |",
            target.label(),
            s.len(),
            us(*p50),
            us(*p99),
            added(*p50, d50),
            added(*p99, d99),
            p50.as_secs_f64() / d50.as_secs_f64()
        );
    }
}

fn pct(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn rate(r: f64) -> String {
    format!("{:.0}/s", r)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// RSS of the process's children (the router's server instances), found by their parent pid.
fn child_rss_kib(pid: u32) -> u64 {
    let Ok(procs) = std::fs::read_dir("/proc") else { return 0 };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            // Fields after the parenthesised command name: state, then the parent's pid.
            let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
            after.split_whitespace().nth(1).and_then(|pp| pp.parse::<u32>().ok()) == Some(pid)
        })
        .map(rss_kib)
        .sum()
}

/// What this ran on, for the record.
fn machine() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']))
        .unwrap_or("?");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:")).map(str::trim).unwrap_or("?");
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("machine: {cpus} CPUs, {model}, MemTotal {mem}; load average at start: {}", load.trim());
}

// ------------------------------------------------------------------------------------------------
// Remote servers: `switchyard run --url` beside a bare HTTP client on the same server.

/// Sequential calls per block against an HTTP server (each takes a millisecond or more).
const REMOTE_BLOCK: usize = 100;
/// Alternating rounds of the 64-outstanding throughput measurement, per server.
const REMOTE_RATE_ROUNDS: usize = 3;
/// Repetitions of the severed-link and restarted-server measurements.
const SEVERS: usize = 10;
const RESTARTS: usize = 5;
/// The tools' own time in the severed-link measurements.
const SLOW_COUNTER_MS: u64 = 5000;
const SLOW_ECHO_MS: u64 = 1000;
/// How long anything in the remote section may wait before the bench gives up.
const REMOTE_LIMIT: Duration = Duration::from_secs(60);

/// Ids of the bare HTTP client's requests, unique across its sessions.
static DIRECT_IDS: AtomicU64 = AtomicU64::new(1 << 50);

impl Bench {
    /// `switchyard run --url` against a bare HTTP client doing what an SDK's client does, on the
    /// same servers: latency, 64 outstanding calls, a severed link, a restarted server.
    fn remote(&self) {
        let python = match std::panic::catch_unwind(python_venv::venv_python) {
            Ok(p) => p,
            Err(_) => {
                println!("\n(remote: the Python SDK's virtualenv could not be made, see the message above; skipped)");
                return;
            }
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let http = http_client();
        let mut servers = Vec::new();
        match self.everything_entry() {
            Some(entry) => servers.push(("server-everything", HttpServer::everything(&entry, &self.dir), "message")),
            None => println!("\n(server-everything not installed: run `npm ci --ignore-scripts` in tests/npm)"),
        }
        servers.push(("Python SDK server", HttpServer::python(&python, &self.repo, &self.dir, "python"), "text"));

        let mut rates = Vec::new();
        for (name, server, field) in servers.iter().map(|(n, s, f)| (*n, s, *f)) {
            let url = server.url();
            let mut direct = Direct::open("direct (bare HTTP client)", &rt, &http, &url, field);
            let mut routed =
                self.conn(&format!("switchyard run --url ({name})"), field, self.remote_argv(&server.label, "", &url));
            routed.label = "switchyard run --url".into();
            println!(
                "\n### Remote, {name} `echo` over Streamable HTTP ({ROUNDS} alternating rounds; sequential calls)\n"
            );
            let mut targets =
                [(&mut direct as &mut dyn Target, REMOTE_BLOCK), (&mut routed as &mut dyn Target, REMOTE_BLOCK)];
            latency_table(&mut targets);
            let (mut d, mut r) = (Vec::new(), Vec::new());
            for _ in 0..REMOTE_RATE_ROUNDS {
                d.push(direct_rate(&rt, &direct.s, field, 64));
                r.push(routed.pipelined(64));
            }
            rates.push((name, d, r));
        }
        println!(
            "\n### Remote, throughput with 64 calls outstanding on one session ({REMOTE_RATE_ROUNDS} alternating rounds of {} s)\n",
            MEASURE.as_secs_f64()
        );
        println!("| server | direct, calls/s | switchyard run --url, calls/s | ratio of medians |");
        println!("|---|---:|---:|---:|");
        for (name, d, r) in &rates {
            let show = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" / ");
            println!("| {name} | {} | {} | {:.2}× |", show(&d[..]), show(&r[..]), median_f(r) / median_f(d));
        }
        drop(servers);
        self.remote_sever(&rt, &http, &python);
        self.remote_restart(&rt, &http, &python);
    }

    /// A link severed (every TCP connection reset by the fault proxy) while a call runs: how long
    /// until the client has its answer, through switchyard and from a bare HTTP client.
    fn remote_sever(&self, rt: &tokio::runtime::Runtime, http: &reqwest::Client, python: &Path) {
        let server = HttpServer::python(python, &self.repo, &self.dir, "python-sever");
        let proxy = proxy::FaultProxy::start(server.addr());
        let url = format!("http://{}/mcp", proxy.addr());
        let mut c = self.conn("switchyard (sever)", "text", self.remote_argv("sever", "", &url));
        let direct = rt.block_on(HttpSession::open(http, &url)).unwrap_or_else(|e| panic!("direct via the proxy: {e}"));
        let counter_args = format!(r#"{{"ms":{SLOW_COUNTER_MS}}}"#);
        let echo_args = format!(r#"{{"text":"kept","ms":{SLOW_ECHO_MS}}}"#);
        let (mut counter, mut recover, mut bare, mut echo) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut counter_error, mut bare_error) = (String::new(), String::new());
        let mut ran_twice = 0;
        for _ in 0..SEVERS {
            // Through switchyard, the call that is not safe to repeat.
            routed_ok(&mut c);
            let before = server.runs("slow_counter");
            let id = c.next_id;
            c.next_id += 1;
            c.send(&tool_request(id, "slow_counter", &counter_args));
            c.flush();
            server.wait_runs("slow_counter", before + 1);
            let t = Instant::now();
            proxy.sever();
            let resp = c.recv();
            counter.push(t.elapsed());
            assert!(
                resp.contains("\"error\"") && resp.contains(&format!("\"id\":{id}")),
                "not an error for {id}: {resp}"
            );
            counter_error = resp.trim().to_string();
            // The next call, on a new connection.
            let t = Instant::now();
            routed_ok(&mut c);
            recover.push(t.elapsed());

            // The bare client, the same call: its POST fails when its connection is reset.
            direct_ok(rt, &direct);
            let before = server.runs("slow_counter");
            let id = DIRECT_IDS.fetch_add(1, Ordering::Relaxed);
            let (took, outcome) = std::thread::scope(|s| {
                let severer = s.spawn(|| {
                    server.wait_runs("slow_counter", before + 1);
                    let t = Instant::now();
                    proxy.sever();
                    t
                });
                let outcome = rt.block_on(direct.post(tool_request(id, "slow_counter", &counter_args), Some(id)));
                let end = Instant::now();
                (end - severer.join().unwrap(), outcome)
            });
            bare.push(took);
            bare_error = match outcome {
                Err(e) => e,
                Ok(answer) => format!("(an answer: {:?})", answer.map(|a| a.line)),
            };
        }
        for _ in 0..SEVERS {
            // Through switchyard, the idempotent call: repeated on a new connection.
            routed_ok(&mut c);
            let before = server.runs("slow_echo");
            let id = c.next_id;
            c.next_id += 1;
            c.send(&tool_request(id, "slow_echo", &echo_args));
            c.flush();
            server.wait_runs("slow_echo", before + 1);
            let t = Instant::now();
            proxy.sever();
            let resp = c.recv();
            echo.push(t.elapsed());
            assert!(resp.contains("\"result\"") && resp.contains("kept"), "slow_echo was not answered: {resp}");
            if server.runs("slow_echo") == before + 2 {
                ran_twice += 1;
            }
        }
        let counter_runs = server.runs("slow_counter");
        println!("\n### Remote, a severed link: sever → the client's answer ({SEVERS} times each)\n");
        println!("| call, client | answer | min | median | max |");
        println!("|---|---|---:|---:|---:|");
        fn row(what: &str, answer: &str, v: &mut [Duration]) {
            v.sort();
            println!("| {what} | {answer} | {} | {} | {} |", ms(v[0]), ms(pct(v, 0.5)), ms(v[v.len() - 1]));
        }
        row(
            &format!("`slow_counter` ({SLOW_COUNTER_MS} ms, not idempotent), switchyard"),
            "JSON-RPC error",
            &mut counter,
        );
        row("the next `echo` through switchyard, after it", "result", &mut recover);
        row(
            &format!("`slow_counter` ({SLOW_COUNTER_MS} ms), bare HTTP client"),
            "transport error, no JSON-RPC answer",
            &mut bare,
        );
        row(&format!("`slow_echo` ({SLOW_ECHO_MS} ms, idempotent), switchyard"), "result (repeated)", &mut echo);
        let less: Vec<Duration> = echo.iter().map(|d| d.saturating_sub(Duration::from_millis(SLOW_ECHO_MS))).collect();
        row(&format!("the same minus the repeat's own {SLOW_ECHO_MS} ms"), "", &mut less.clone());
        println!(
            "\n`slow_counter` started {counter_runs} times for {} calls; `slow_echo` ran twice (first try, repeat) for {ran_twice} of {SEVERS} calls.",
            2 * SEVERS
        );
        println!("switchyard's error: `{counter_error}`");
        println!("the bare client's error: `{bare_error}`");
    }

    /// The server killed (SIGKILL to its process group) and started again on the same port: how
    /// long from its port accepting again until a call through switchyard is answered well.
    fn remote_restart(&self, rt: &tokio::runtime::Runtime, http: &reqwest::Client, python: &Path) {
        let mut server = HttpServer::python(python, &self.repo, &self.dir, "python-restart");
        let url = server.url();
        let mut c = self.conn("switchyard (restart)", "text", self.remote_argv("restart", "", &url));
        let (mut took, mut errors, mut direct_saw) = (Vec::new(), 0, String::new());
        for _ in 0..RESTARTS {
            let direct = rt.block_on(HttpSession::open(http, &url)).unwrap_or_else(|e| panic!("direct: {e}"));
            direct_ok(rt, &direct);
            routed_ok(&mut c);
            server.stop();
            let ready = server.start();
            loop {
                let id = c.next_id;
                c.next_id += 1;
                let resp = c.call(&echo_request(id, "text"));
                if resp.contains("\"result\"") {
                    break;
                }
                errors += 1;
                assert!(ready.elapsed() < REMOTE_LIMIT, "no good answer through switchyard after a restart: {resp}");
            }
            took.push(ready.elapsed());
            let id = DIRECT_IDS.fetch_add(1, Ordering::Relaxed);
            direct_saw = match rt.block_on(direct.post(echo_request(id, "text"), Some(id))) {
                Err(e) => e,
                Ok(answer) => format!("(an answer: {:?})", answer.map(|a| a.line)),
            };
        }
        took.sort();
        println!("\n### Remote, a restarted server: its port accepts again → first good answer ({RESTARTS} times)\n");
        println!("| client | answer | min | median | max |");
        println!("|---|---|---:|---:|---:|");
        println!(
            "| switchyard run --url, `echo` | result | {} | {} | {} |",
            ms(took[0]),
            ms(pct(&took, 0.5)),
            ms(took[took.len() - 1])
        );
        println!("\nError answers through switchyard before the good one: {errors} in {RESTARTS} restarts.");
        println!("The bare client's `echo` on its old session after the restart: `{direct_saw}`");
    }
}

/// An `echo` through switchyard that must succeed.
fn routed_ok(c: &mut Conn) {
    let id = c.next_id;
    c.next_id += 1;
    let resp = c.call(&echo_request(id, c.field));
    assert!(resp.contains("\"result\""), "{}: echo failed: {resp}", c.label);
}

/// An `echo` from the bare client that must succeed; a second try is allowed, because a pooled
/// connection that the proxy reset a moment ago may be picked before its end is noticed.
fn direct_ok(rt: &tokio::runtime::Runtime, s: &HttpSession) {
    let mut last = String::new();
    for _ in 0..2 {
        let id = DIRECT_IDS.fetch_add(1, Ordering::Relaxed);
        match rt.block_on(s.post(echo_request(id, "text"), Some(id))) {
            Ok(Some(a)) if a.line.contains("\"result\"") => return,
            Ok(a) => last = format!("{:?}", a.map(|a| a.line)),
            Err(e) => last = e,
        }
    }
    panic!("direct echo failed: {last}");
}

fn tool_request(id: u64, tool: &str, args: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn median_f(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The bare client's HTTP client: reqwest as switchyard builds it, plain HTTP, connections kept.
fn http_client() -> reqwest::Client {
    // reqwest is built without a TLS provider of its own; only plain HTTP is used here, but the
    // builder wants one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().unwrap()
}

/// A bare MCP client over Streamable HTTP that does on the wire what an SDK's client does: POSTs
/// each message accepting JSON and SSE, keeps the session id and protocol version from the
/// initialize, and reads the answer as JSON or as the SSE event that carries the response.
/// Connections are kept alive and reused by reqwest's pool.
struct HttpSession {
    client: reqwest::Client,
    url: String,
    session: Option<String>,
    version: Option<String>,
}

/// A response, and the moment its last byte was read (before the rest of its stream was drained).
struct Answer {
    line: String,
    at: Instant,
}

impl HttpSession {
    async fn open(client: &reqwest::Client, url: &str) -> Result<HttpSession, String> {
        let mut s = HttpSession { client: client.clone(), url: url.into(), session: None, version: None };
        let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#;
        let (answer, session) = s.exchange(init.into(), Some(0)).await?;
        let answer = answer.ok_or("initialize: no answer")?;
        let v: serde_json::Value =
            serde_json::from_str(&answer.line).map_err(|e| format!("initialize answer ({e}): {}", answer.line))?;
        s.version = v["result"]["protocolVersion"].as_str().map(String::from);
        s.session = session;
        s.exchange(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(), None).await?;
        Ok(s)
    }

    /// Ends the session (DELETE), as a client that closes does.
    async fn delete(&self) {
        let mut req = self.client.delete(&self.url);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("DELETE {}: {}", self.url, chain(&e)));
        assert!(resp.status().is_success(), "DELETE {}: HTTP {}", self.url, resp.status());
    }

    /// POSTs one message; for a request (`id`), reads its response. Err: an HTTP status other
    /// than 2xx, with its body, or a transport error.
    async fn post(&self, body: String, id: Option<u64>) -> Result<Option<Answer>, String> {
        self.exchange(body, id).await.map(|(answer, _)| answer)
    }

    /// `post`, with the session id the server gave in its headers.
    async fn exchange(&self, body: String, id: Option<u64>) -> Result<(Option<Answer>, Option<String>), String> {
        use reqwest::header::{ACCEPT, CONTENT_TYPE};
        let mut req = self
            .client
            .post(&self.url)
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        if let Some(v) = &self.version {
            req = req.header("mcp-protocol-version", v);
        }
        let mut resp = req.send().await.map_err(|e| format!("POST {}: {}", self.url, chain(&e)))?;
        let status = resp.status();
        let session = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(String::from);
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(format!("HTTP {}: {}", status.as_u16(), body.trim()));
        }
        let Some(id) = id else {
            let _ = resp.bytes().await;
            return Ok((None, session));
        };
        let sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !sse {
            let body = resp.bytes().await.map_err(|e| format!("reading the answer: {}", chain(&e)))?;
            let line = String::from_utf8_lossy(&body).into_owned();
            return Ok((Some(Answer { line, at: Instant::now() }), session));
        }
        let (mut parser, mut events, mut answer) = (Sse::default(), Vec::new(), None);
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) if answer.is_none() => {
                    parser.feed(&chunk, &mut events);
                    for data in events.drain(..) {
                        let env: Envelope = serde_json::from_str(&data).unwrap_or(Envelope { id: None, method: None });
                        if answer.is_none() && env.method.is_none() && env.id == Some(id) {
                            answer = Some(Answer { line: data, at: Instant::now() });
                        }
                    }
                }
                // Drained so the connection is reused: the server ends the stream after the response.
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) if answer.is_some() => break,
                Err(e) => return Err(format!("reading the answer's event stream: {}", chain(&e))),
            }
        }
        match answer {
            Some(a) => Ok((Some(a), session)),
            None => Err("the event stream ended without the response".into()),
        }
    }
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Splits a `text/event-stream` body into the `data` of its events.
#[derive(Default)]
struct Sse {
    buf: Vec<u8>,
    data: String,
}

impl Sse {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<String>) {
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        while let Some(n) = memchr::memchr(b'\n', &self.buf[start..]) {
            let line = &self.buf[start..start + n];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                if !self.data.is_empty() {
                    out.push(std::mem::take(&mut self.data));
                }
            } else if let Some(rest) = line.strip_prefix(b"data:") {
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(&String::from_utf8_lossy(rest));
            }
            start += n + 1;
        }
        self.buf.drain(..start);
    }
}

/// The bare HTTP client as a latency-table target, on a current-thread runtime of the bench.
struct Direct<'a> {
    label: String,
    rt: &'a tokio::runtime::Runtime,
    s: std::sync::Arc<HttpSession>,
    field: &'static str,
}

impl<'a> Direct<'a> {
    /// Initialised and warmed up with 200 calls, as a `Conn` is.
    fn open(
        label: &str,
        rt: &'a tokio::runtime::Runtime,
        http: &reqwest::Client,
        url: &str,
        field: &'static str,
    ) -> Self {
        let s = rt.block_on(HttpSession::open(http, url)).unwrap_or_else(|e| panic!("{label} at {url}: {e}"));
        let mut d = Direct { label: label.into(), rt, s: std::sync::Arc::new(s), field };
        d.round_trips(200, &mut Vec::new());
        d
    }
}

impl Target for Direct<'_> {
    fn label(&self) -> &str {
        &self.label
    }

    fn round_trips(&mut self, n: usize, out: &mut Vec<Duration>) {
        let (s, field, label) = (&self.s, self.field, &self.label);
        self.rt.block_on(async {
            for _ in 0..n {
                let id = DIRECT_IDS.fetch_add(1, Ordering::Relaxed);
                let req = echo_request(id, field);
                let t = Instant::now();
                let answer = s.post(req, Some(id)).await.unwrap_or_else(|e| panic!("{label}: {e}"));
                let answer = answer.expect("a request is answered");
                out.push(answer.at - t);
                debug_assert!(answer.line.contains("\"result\""));
            }
        });
    }
}

/// Calls/s with `window` POSTs at once on the bare client's one session (each task sends its next
/// call when its last is answered), counted over MEASURE after WARMUP, as `Conn::pipelined` does.
fn direct_rate(
    rt: &tokio::runtime::Runtime,
    s: &std::sync::Arc<HttpSession>,
    field: &'static str,
    window: usize,
) -> f64 {
    use std::sync::Arc;
    rt.block_on(async {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(std::sync::Mutex::new(None::<String>));
        let tasks: Vec<_> = (0..window)
            .map(|_| {
                let (s, stop, done, failed) = (s.clone(), stop.clone(), done.clone(), failed.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let id = DIRECT_IDS.fetch_add(1, Ordering::Relaxed);
                        match s.post(echo_request(id, field), Some(id)).await {
                            Ok(Some(a)) if a.line.contains("\"result\"") => {
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                            other => {
                                let why = match other {
                                    Ok(a) => format!("{:?}", a.map(|a| a.line)),
                                    Err(e) => e,
                                };
                                failed.lock().unwrap().get_or_insert(why);
                                return;
                            }
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(WARMUP).await;
        let (c0, t0) = (done.load(Ordering::Relaxed), Instant::now());
        tokio::time::sleep(MEASURE).await;
        let (c1, t1) = (done.load(Ordering::Relaxed), Instant::now());
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        if let Some(why) = failed.lock().unwrap().take() {
            panic!("direct, {window} outstanding: a call failed: {why}");
        }
        (c1 - c0) as f64 / (t1 - t0).as_secs_f64()
    })
}

/// An MCP server over HTTP on a fixed port of 127.0.0.1, in a process group of its own (a kill
/// takes anything it started), its output appended to a log file that outlives restarts.
struct HttpServer {
    label: String,
    argv: Vec<String>,
    envs: Vec<(String, String)>,
    port: u16,
    child: Option<Child>,
    log: PathBuf,
    runs: PathBuf,
}

impl HttpServer {
    /// tests/python/http_server.py (`echo(text)`, `slow_echo(text, ms)` idempotent,
    /// `slow_counter(ms)` not) on Streamable HTTP, without an event store: a broken stream
    /// cannot be resumed.
    fn python(python: &Path, repo: &Path, dir: &Path, label: &str) -> HttpServer {
        HttpServer::python_with(python, repo, dir, label, &[])
    }

    /// [`HttpServer::python`] with more of http_server.py's options (e.g. `--forgetful-store`).
    fn python_with(python: &Path, repo: &Path, dir: &Path, label: &str, options: &[&str]) -> HttpServer {
        let port = free_port();
        let runs = dir.join(format!("{label}.runs.jsonl"));
        let mut argv = vec![
            python.display().to_string(),
            repo.join("tests/python/http_server.py").display().to_string(),
            "--port".into(),
            port.to_string(),
            "--transport".into(),
            "streamable-http".into(),
            "--runs-file".into(),
            runs.display().to_string(),
        ];
        argv.extend(options.iter().map(|o| o.to_string()));
        HttpServer::launch(label, argv, vec![("PYTHONUNBUFFERED".into(), "1".into())], port, dir, runs)
    }

    /// `@modelcontextprotocol/server-everything streamableHttp` (`echo(message)`), port in `PORT`.
    fn everything(entry: &Path, dir: &Path) -> HttpServer {
        let port = free_port();
        let argv = vec!["node".into(), entry.display().to_string(), "streamableHttp".into()];
        let runs = dir.join("everything.runs.jsonl");
        HttpServer::launch("everything", argv, vec![("PORT".into(), port.to_string())], port, dir, runs)
    }

    fn launch(
        label: &str,
        argv: Vec<String>,
        envs: Vec<(String, String)>,
        port: u16,
        dir: &Path,
        runs: PathBuf,
    ) -> HttpServer {
        let log = dir.join(format!("{label}.log"));
        let mut s = HttpServer { label: label.into(), argv, envs, port, child: None, log, runs };
        s.start();
        s
    }

    fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr())
    }

    /// Starts the server and waits until its port accepts a connection; returns when it did
    /// (polled every 5 ms).
    fn start(&mut self) -> Instant {
        assert!(self.child.is_none(), "{} runs already", self.label);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: spawn {:?}: {e}", self.label, self.argv));
        let deadline = Instant::now() + REMOTE_LIMIT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{} exited ({status}) before listening on {}; its output is in {}",
                    self.label,
                    self.addr(),
                    self.log.display()
                );
            }
            if std::net::TcpStream::connect_timeout(&self.addr(), Duration::from_millis(500)).is_ok() {
                self.child = Some(child);
                return Instant::now();
            }
            assert!(
                Instant::now() < deadline,
                "{} never listened on {}; see {}",
                self.label,
                self.addr(),
                self.log.display()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL to its process group (a crash, not a shutdown); returns once its port refuses.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        // SAFETY: killpg(2) on the group this bench created for the server.
        signal_group(child.id(), libc::SIGKILL);
        let _ = child.wait();
        let deadline = Instant::now() + REMOTE_LIMIT;
        while std::net::TcpStream::connect_timeout(&self.addr(), Duration::from_millis(500)).is_ok() {
            assert!(Instant::now() < deadline, "{} still accepts on {} after SIGKILL", self.label, self.addr());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// How many times `tool` started (the Python server's runs file: one JSON line per start).
    fn runs(&self, tool: &str) -> usize {
        let text = std::fs::read_to_string(&self.runs).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|run| run["tool"] == tool)
            .count()
    }

    /// Polls (every 2 ms) until `tool` started `n` times.
    fn wait_runs(&self, tool: &str, n: usize) {
        let deadline = Instant::now() + REMOTE_LIMIT;
        while self.runs(tool) < n {
            assert!(Instant::now() < deadline, "{}: {tool} never started {n} times", self.label);
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: killpg(2) on the group this bench created for the server.
            signal_group(child.id(), libc::SIGKILL);
            let _ = child.wait();
        }
    }
}

/// A port of 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

// ------------------------------------------------------------------------------------------------
// The daemon: a client's first tool result through `switchyard connect NAME` to a warm
// daemon, against `switchyard run` started cold and the server started directly; the daemon's
// memory with ten idle servers.

/// Alternating rounds of the start-to-first-result measurement, per target.
const STARTS: usize = 20;
/// How long anything in the daemon section may wait before the bench gives up.
const DAEMON_LIMIT: Duration = Duration::from_secs(60);

/// A user of the daemon: every XDG directory under one bench directory, a config file, and a
/// `switchyard stop` when dropped (so the bench leaves no daemon behind, even when it panics).
struct DaemonHome {
    exe: PathBuf,
    dir: PathBuf,
    config: PathBuf,
}

impl DaemonHome {
    fn new(exe: &Path, dir: PathBuf, config_text: &str) -> DaemonHome {
        for sub in ["run", "state", "config"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let config = dir.join("switchyard.toml");
        std::fs::write(&config, config_text).unwrap();
        DaemonHome { exe: exe.to_path_buf(), dir, config }
    }

    fn envs(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("XDG_RUNTIME_DIR", self.dir.join("run")),
            ("XDG_STATE_HOME", self.dir.join("state")),
            ("XDG_CONFIG_HOME", self.dir.join("config")),
            ("HOME", self.dir.clone()),
        ]
    }

    /// `switchyard connect NAME --config FILE`.
    fn connect_argv(&self, server: &str) -> Vec<String> {
        let exe = self.exe.display().to_string();
        vec![exe, "connect".into(), server.into(), "--config".into(), self.config.display().to_string()]
    }

    /// `switchyard ARGS... --config FILE`, run to completion; its stdout.
    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(&self.exe)
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .envs(self.envs())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "switchyard {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn status(&self) -> serde_json::Value {
        serde_json::from_str(self.cli(&["status", "--json"]).trim()).unwrap()
    }

    fn stop(&self) {
        self.cli(&["stop"]);
    }
}

impl Drop for DaemonHome {
    fn drop(&mut self) {
        let _ = Command::new(&self.exe)
            .args(["stop", "--config"])
            .arg(&self.config)
            .envs(self.envs())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// One way of reaching a server from a fresh client process.
struct Start {
    label: &'static str,
    argv: Vec<String>,
    envs: Vec<(&'static str, PathBuf)>,
    /// What to do before each measurement, untimed.
    before: Before,
}

enum Before {
    Nothing,
    /// Make sure the daemon runs and the server has answered a call (one `connect` and a call).
    Warm,
    /// Stop the daemon, so the measured `connect` has to start it.
    StopDaemon,
}

impl Bench {
    /// Start → first tool result: `connect` to a warm daemon, to a daemon it has to start,
    /// `switchyard run` cold, and the server directly; for the fixture and for server-everything.
    /// Then the daemon's memory with ten idle fixture servers.
    fn daemon(&self) {
        let fx = self.fixture_argv();
        let mut config = server_table("fixture", &fx);
        let ev = self.everything_argv();
        match &ev {
            Some(ev) => config += &server_table("everything", ev),
            None => println!("\n(server-everything not installed: run `npm ci --ignore-scripts` in tests/npm)"),
        }
        let home = DaemonHome::new(&self.exe, self.dir.join("daemon"), &config);
        println!(
            "\n### Daemon: launching the client's server command → first tool result ({STARTS} alternating rounds)\n"
        );
        println!("| server | target | min | median | p90 | max | median ratio to direct |");
        println!("|---|---|---:|---:|---:|---:|---:|");
        let mut servers = vec![("fixture", fx, "text")];
        if let Some(ev) = ev {
            servers.push(("everything", ev, "message"));
        }
        for (name, argv, field) in servers {
            let connect = |label, before| Start { label, argv: home.connect_argv(name), envs: home.envs(), before };
            let starts = [
                Start { label: "server directly", argv: argv.clone(), envs: vec![], before: Before::Nothing },
                Start {
                    label: "`switchyard run`, cold",
                    argv: self.router_argv(&format!("run-{name}"), "", &[], &argv),
                    envs: vec![],
                    before: Before::Nothing,
                },
                connect("`switchyard connect`, daemon and server warm", Before::Warm),
                connect("`switchyard connect`, no daemon running", Before::StopDaemon),
            ];
            let mut times: Vec<Vec<Duration>> = starts.iter().map(|_| Vec::new()).collect();
            for _ in 0..STARTS {
                for (s, out) in starts.iter().zip(times.iter_mut()) {
                    match s.before {
                        Before::Nothing => {}
                        Before::Warm => {
                            first_result(&s.argv, &s.envs, field, &self.dir.join("warm.stderr"));
                        }
                        Before::StopDaemon => home.stop(),
                    }
                    out.push(first_result(&s.argv, &s.envs, field, &self.dir.join("start.stderr")));
                }
            }
            for t in times.iter_mut() {
                t.sort();
            }
            let direct = pct(&times[0], 0.5);
            for (s, t) in starts.iter().zip(&times) {
                println!(
                    "| {name} | {} | {} | {} | {} | {} | {:.2}× |",
                    s.label,
                    ms(t[0]),
                    ms(pct(t, 0.5)),
                    ms(pct(t, 0.9)),
                    ms(t[t.len() - 1]),
                    pct(t, 0.5).as_secs_f64() / direct.as_secs_f64()
                );
            }
        }
        drop(home);
        self.daemon_memory();
    }

    /// VmRSS and PSS of a daemon serving ten fixture servers, each started by one call and then
    /// idle, beside one fixture process started directly.
    fn daemon_memory(&self) {
        let fx = self.fixture_argv();
        let names: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
        let config: String = names.iter().map(|n| server_table(n, &fx)).collect();
        let home = DaemonHome::new(&self.exe, self.dir.join("daemon-memory"), &config);
        let stderr = self.dir.join("memory.stderr");
        // One call each; the first one starts the daemon.
        first_result(&home.connect_argv(&names[0]), &home.envs(), "text", &stderr);
        let daemon = home.status()["pid"].as_u64().unwrap() as u32;
        let idle_one = (rss_kib(daemon), pss_kib(daemon));
        for n in &names[1..] {
            first_result(&home.connect_argv(n), &home.envs(), "text", &stderr);
        }
        std::thread::sleep(Duration::from_millis(500));
        let status = home.status();
        let instances: usize = status["servers"]
            .as_array()
            .map(|ss| ss.iter().map(|s| s["instances"].as_array().map_or(0, Vec::len)).sum())
            .unwrap_or(0);
        let with_ten = (rss_kib(daemon), pss_kib(daemon));
        let (mut supervisors, mut servers, mut n_servers) = ((0, 0), (0, 0), 0);
        for pid in descendants(daemon) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let sum = |(rss, pss): (u64, u64)| (rss + rss_kib(pid), pss + pss_kib(pid));
            match argv.get(1).copied() {
                Some(b"supervise") => supervisors = sum(supervisors),
                Some(b"fixture") => {
                    servers = sum(servers);
                    n_servers += 1;
                }
                _ => {}
            }
        }
        let mut direct = self.conn("direct", "text", fx);
        let fixture = (rss_kib(direct.pid()), pss_kib(direct.pid()));
        let id = direct.next_id;
        direct.call(&echo_request(id, "text"));
        home.stop();
        println!("\n### Daemon memory, ten fixture servers each started by one call, then idle\n");
        println!("| process | RSS | PSS |");
        println!("|---|---:|---:|");
        let row = |what: &str, (rss, pss): (u64, u64)| println!("| {what} | {} | {} |", mib(rss), mib(pss));
        row("daemon, one server started", idle_one);
        row(&format!("daemon, ten servers started ({instances} instances in status)"), with_ten);
        row("their `supervise` processes, together", supervisors);
        row(&format!("their {n_servers} fixture processes, together"), servers);
        row("one fixture process started directly, for scale", fixture);
        println!(
            "\nPer added server, in the daemon itself: {:.0} KiB RSS.",
            with_ten.0.saturating_sub(idle_one.0) as f64 / 9.0
        );
    }
}

/// A `[servers.NAME]` table for `argv`.
fn server_table(name: &str, argv: &[String]) -> String {
    format!(
        "[servers.{name}]\ncommand = {}\nargs = {}\n",
        serde_json::Value::from(argv[0].as_str()),
        serde_json::Value::from(argv[1..].to_vec())
    )
}

/// Launches `argv` as a client launches its server command, and times it until the first
/// `tools/call echo` is answered (initialize, notifications/initialized, the call, one after the
/// other as a client does); then closes its stdin and waits for it to exit (untimed).
fn first_result(argv: &[String], envs: &[(&'static str, PathBuf)], field: &str, stderr: &Path) -> Duration {
    let started = Instant::now();
    let mut child = command(argv, stderr)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
    let mut w = child.stdin.take().unwrap();
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut answer = |w: &mut std::process::ChildStdin, request: &str, id: u64| {
        writeln!(w, "{request}").unwrap();
        w.flush().unwrap();
        loop {
            line.clear();
            let n = r.read_line(&mut line).unwrap();
            assert!(n > 0, "{argv:?}: output closed (stderr in {})", stderr.display());
            let env: Envelope = serde_json::from_str(&line).unwrap_or(Envelope { id: None, method: None });
            if env.method.is_none() && env.id == Some(id) {
                assert!(line.contains("\"result\""), "{argv:?}: {line} (stderr in {})", stderr.display());
                return;
            }
        }
    };
    answer(
        &mut w,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#,
        0,
    );
    writeln!(w, r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#).unwrap();
    answer(&mut w, &echo_request(1, field), 1);
    let took = started.elapsed();
    drop(w);
    let deadline = Instant::now() + DAEMON_LIMIT;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: killpg(2) on the group this bench created for the child.
            signal_group(child.id(), libc::SIGKILL);
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    took
}

/// A process's proportional set size in KiB (its shared pages divided among their sharers), from
/// /proc/PID/smaps_rollup: what processes running the same binary add up to, unlike their RSS.
fn pss_kib(pid: u32) -> u64 {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

// ------------------------------------------------------------------------------------------------
// The daemon's HTTP front: server-everything behind the front (over stdio) against
// server-everything's own Streamable HTTP transport, reached by the same bare HTTP client.

/// Sessions opened and ended (initialize, initialized, DELETE) per measurement of sessions/s.
const HTTP_SESSIONS: usize = 300;
/// Idle sessions held open for the memory measurement.
const IDLE_SESSIONS: usize = 1000;

impl Bench {
    fn http(&self) {
        let Some(entry) = self.everything_entry() else {
            println!("\n(http: server-everything not installed: run `npm ci --ignore-scripts` in tests/npm)");
            return;
        };
        let ev = self.everything_argv().expect("entry exists");
        let config = format!(
            "{}{}[http]\nlisten = \"127.0.0.1:0\"\nmax_sessions = {}\n",
            server_table("everything", &ev),
            server_table("fixture", &self.fixture_argv()),
            IDLE_SESSIONS * 3
        );
        let home = DaemonHome::new(&self.exe, self.dir.join("http"), &config);
        home.cli(&["daemon", "--detach"]);
        let status = home.status();
        let daemon = status["pid"].as_u64().unwrap() as u32;
        let base = format!("http://{}", status["http"]["listen"].as_str().expect("the daemon serves HTTP"));
        let token = home.cli(&["token"]).trim().to_string();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let bare = http_client();
        let front = http_client_with_token(&token);
        let own = HttpServer::everything(&entry, &self.dir);

        let mut direct = Direct::open("server-everything's own Streamable HTTP", &rt, &bare, &own.url(), "message");
        let mut routed = Direct::open(
            "the front, server-everything over stdio behind it",
            &rt,
            &front,
            &format!("{base}/mcp/everything"),
            "message",
        );
        let mut floor = Direct::open(
            "the front, switchyard's fixture behind it",
            &rt,
            &front,
            &format!("{base}/mcp/fixture"),
            "text",
        );
        println!(
            "\n### HTTP front, `echo` over Streamable HTTP ({ROUNDS} alternating rounds; sequential calls, one session each)\n"
        );
        let mut targets = [(&mut direct, REMOTE_BLOCK), (&mut routed, REMOTE_BLOCK), (&mut floor, REMOTE_BLOCK)];
        latency_table(&mut targets);

        let (mut d, mut r) = (Vec::new(), Vec::new());
        for _ in 0..REMOTE_RATE_ROUNDS {
            d.push(direct_rate(&rt, &direct.s, "message", 64));
            r.push(direct_rate(&rt, &routed.s, "message", 64));
        }
        println!(
            "\n### HTTP front, throughput with 64 calls outstanding on one session ({REMOTE_RATE_ROUNDS} alternating rounds of {} s)\n",
            MEASURE.as_secs_f64()
        );
        println!("| server-everything's own HTTP, calls/s | through the front, calls/s | ratio of medians |");
        println!("|---:|---:|---:|");
        let show = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" / ");
        println!("| {} | {} | {:.2}× |", show(&d), show(&r), median_f(&r) / median_f(&d));

        // Sessions per second: initialize + initialized + DELETE, one after the other.
        let churn = |client: &reqwest::Client, url: &str| -> f64 {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..HTTP_SESSIONS {
                    let s = HttpSession::open(client, url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
                    s.delete().await;
                }
                HTTP_SESSIONS as f64 / t.elapsed().as_secs_f64()
            })
        };
        let (mut d, mut r) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            d.push(churn(&bare, &own.url()));
            r.push(churn(&front, &format!("{base}/mcp/everything")));
        }
        println!(
            "\n### HTTP front, sessions per second (initialize, initialized, DELETE; {HTTP_SESSIONS} in a row, 3 alternating rounds)\n"
        );
        println!("| server-everything's own HTTP | through the front | ratio of medians |");
        println!("|---:|---:|---:|");
        println!("| {} | {} | {:.2}× |", show(&d), show(&r), median_f(&r) / median_f(&d));

        // Memory: IDLE_SESSIONS sessions opened (one call each) and left idle, on each side; a
        // server-everything of its own, so that nothing of the rounds above is in its figure.
        drop(own);
        let own = HttpServer::everything(&entry, &self.dir);
        let own_pid = own.child.as_ref().expect("runs").id();
        let hold = |client: &reqwest::Client, url: &str, pid: u32| -> (u64, u64) {
            rt.block_on(async {
                let before = rss_kib(pid);
                let mut held = Vec::with_capacity(IDLE_SESSIONS);
                for _ in 0..IDLE_SESSIONS {
                    let s = HttpSession::open(client, url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
                    let id = DIRECT_IDS.fetch_add(1, Ordering::Relaxed);
                    s.post(echo_request(id, "message"), Some(id)).await.unwrap();
                    held.push(s);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                let with = rss_kib(pid);
                for s in held {
                    s.delete().await;
                }
                (before, with)
            })
        };
        let (own_before, own_with) = hold(&bare, &own.url(), own_pid);
        let (front_before, front_with) = hold(&front, &format!("{base}/mcp/everything"), daemon);
        println!("\n### HTTP front, memory of {IDLE_SESSIONS} idle sessions (one call each, then idle)\n");
        println!("| process | RSS before | RSS with them | per idle session |");
        println!("|---|---:|---:|---:|");
        let per = |a: u64, b: u64| format!("{:.1} KiB", b.saturating_sub(a) as f64 / IDLE_SESSIONS as f64);
        println!(
            "| server-everything (its own HTTP) | {} | {} | {} |",
            mib(own_before),
            mib(own_with),
            per(own_before, own_with)
        );
        println!(
            "| switchyard daemon (the front; server-everything behind it is one process for all) | {} | {} | {} |",
            mib(front_before),
            mib(front_with),
            per(front_before, front_with)
        );
        drop(home);
    }
}

/// The bare client's HTTP client, sending the front's bearer token on every request.
fn http_client_with_token(token: &str) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
    value.set_sensitive(true);
    headers.insert(reqwest::header::AUTHORIZATION, value);
    reqwest::Client::builder().default_headers(headers).build().unwrap()
}
