//! Round trips through real processes: switchyard vs a direct connection vs peer proxies.
//!
//! A plain bench binary (`cargo bench --bench router [-- SECTION...]`), not criterion: what is
//! measured is a JSON-RPC round trip through pipes and other processes, and the figures wanted
//! are percentiles and pairs from one run, which criterion's model does not give. Sections:
//! `floor`, `latency`, `everything`, `plugins`, `content`, `throughput`, `memory`, `remote`, `daemon`, `http`,
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

mod conn;
mod daemon;
mod floor;
mod http;
mod http_peer;
mod remote;
mod silent;
mod stdio;

use conn::*;
use daemon::*;
use http_peer::*;
use remote::*;

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
    if run("floor") {
        b.floor();
    }
    if run("latency") {
        b.latency_fixture();
    }
    if run("everything") {
        b.latency_everything();
    }
    if run("plugins") {
        b.plugins();
    }
    if run("content") {
        b.content();
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

    /// The compiled byte relay (benches/peers/relay.c, built here with `cc -O2`) in front of
    /// `server`: the floor of any process in the middle.
    fn relay_argv(&self, server: &[String]) -> Vec<String> {
        let exe = self.dir.join("relay");
        if !exe.exists() {
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/relay.c");
            let built = Command::new("cc").args(["-O2", "-o"]).arg(&exe).arg(&source).status();
            assert!(built.is_ok_and(|s| s.success()), "cannot build {} with cc", source.display());
        }
        let mut argv = vec![self.s(&exe)];
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
