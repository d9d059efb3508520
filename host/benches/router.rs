//! Round trips through real processes: switchyard vs a direct connection vs peer proxies.
//!
//! A plain bench binary (`cargo bench --bench router [-- SECTION...]`), not criterion: what is
//! measured is a JSON-RPC round trip through pipes and other processes, and the figures wanted
//! are percentiles and pairs from one run, which criterion's model does not give. Sections:
//! `latency`, `everything`, `plugins`, `throughput`, `memory` (default: all). Tables are printed
//! as Markdown, ready for BENCHMARKS.md.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Deserialize;

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
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
        println!("binary: {}", exe.display());
        Bench { exe, dir, repo }
    }

    fn s(&self, p: &Path) -> String {
        p.to_string_lossy().into_owned()
    }

    fn fixture_argv(&self) -> Vec<String> {
        vec![self.s(&self.exe), "fixture".into()]
    }

    fn everything_argv(&self) -> Option<Vec<String>> {
        let entry = self.repo.join("tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        entry.is_file().then(|| vec!["node".into(), self.s(&entry), "stdio".into()])
    }

    /// `switchyard run` in front of `server`, with `config` and these example plugins.
    fn router_argv(&self, name: &str, config: &str, plugins: &[&str], server: &[String]) -> Vec<String> {
        let dir = self.dir.join(name);
        let plugins_dir = dir.join("plugins");
        std::fs::create_dir_all(&plugins_dir).unwrap();
        std::fs::write(dir.join("switchyard.toml"), config).unwrap();
        for file in plugins {
            let bytes = switchyard::policy::embedded::EXAMPLES.iter().find(|(n, _)| n == file).unwrap().1;
            std::fs::write(plugins_dir.join(file), bytes).unwrap();
        }
        let mut argv = vec![self.s(&self.exe), "run".into(), "--log-level".into(), "warn".into()];
        argv.extend(["--name".into(), "bench".into()]);
        argv.extend(["--config".into(), self.s(&dir.join("switchyard.toml"))]);
        argv.extend(["--plugins".into(), self.s(&plugins_dir), "--".into()]);
        argv.extend(server.iter().cloned());
        argv
    }

    /// The shell logging proxy (benches/peers/log-proxy.sh) in front of `server`.
    fn shell_argv(&self, server: &[String]) -> Vec<String> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/log-proxy.sh");
        let mut argv = vec!["bash".into(), self.s(&script), self.s(&self.dir.join("shell-proxy.log"))];
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

    /// Added latency against the fast fixture's `echo`.
    fn latency_fixture(&self) {
        let fx = self.fixture_argv();
        let mut targets = vec![
            (self.conn("direct", "text", fx.clone()), BLOCK),
            (self.conn("switchyard", "text", self.router_argv("lat", "", &[], &fx)), BLOCK),
            (self.socket_conn("switchyard via its --listen socket", &fx), BLOCK),
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
        let mut targets = vec![
            (self.conn("direct", "message", ev.clone()), BLOCK / 2),
            (self.conn("switchyard", "message", self.router_argv("ev", "", &[], &ev)), BLOCK / 2),
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
        let mut targets: Vec<Conn> = vec![self.conn("direct", "text", fx.clone())];
        for n in [1, 2, 4] {
            let config = format!("[pools.default]\nmin = {n}\nmax = {n}\n");
            targets.push(self.conn(
                &format!("switchyard, pool of {n}"),
                "text",
                self.router_argv(&format!("t{n}"), &config, &[], &fx),
            ));
        }
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
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: killpg(2) on the group this bench created for the child.
        unsafe { libc::killpg(self.child.id() as i32, libc::SIGKILL) };
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

/// Runs ROUNDS rounds of alternating blocks and prints p50/p99 per target and the overhead
/// against the first target (the direct connection).
fn latency_table(targets: &mut [(Conn, usize)]) {
    let mut samples: Vec<Vec<Duration>> = targets.iter().map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for ((conn, block), out) in targets.iter_mut().zip(samples.iter_mut()) {
            conn.round_trips(*block, out);
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
    for (i, ((conn, _), (s, (p50, p99)))) in targets.iter().zip(samples.iter().zip(&stats)).enumerate() {
        let added = |a: Duration, b: Duration| match i {
            0 => "-".to_string(),
            _ => format!("{:+.1} µs", a.as_secs_f64() * 1e6 - b.as_secs_f64() * 1e6),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.2}× |",
            conn.label,
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
