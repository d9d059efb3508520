//! The daemon: a first tool result through `connect` to a warm daemon, against `run` started
//! cold and the server started directly; the daemon's memory with ten idle servers.

use super::*;

// ------------------------------------------------------------------------------------------------
// The daemon: a client's first tool result through `switchyard connect NAME` to a warm
// daemon, against `switchyard run` started cold and the server started directly; the daemon's
// memory with ten idle servers.

/// Alternating rounds of the start-to-first-result measurement, per target.
pub(crate) const STARTS: usize = 20;
/// How long anything in the daemon section may wait before the bench gives up.
pub(crate) const DAEMON_LIMIT: Duration = Duration::from_secs(60);

/// A user of the daemon: every XDG directory under one bench directory, a config file, and a
/// `switchyard stop` when dropped (so the bench leaves no daemon behind, even when it panics).
pub(crate) struct DaemonHome {
    pub(crate) exe: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) config: PathBuf,
}

impl DaemonHome {
    pub(crate) fn new(exe: &Path, dir: PathBuf, config_text: &str) -> DaemonHome {
        for sub in ["run", "state", "config"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let config = dir.join("switchyard.toml");
        std::fs::write(&config, config_text).unwrap();
        DaemonHome { exe: exe.to_path_buf(), dir, config }
    }

    pub(crate) fn envs(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("XDG_RUNTIME_DIR", self.dir.join("run")),
            ("XDG_STATE_HOME", self.dir.join("state")),
            ("XDG_CONFIG_HOME", self.dir.join("config")),
            ("HOME", self.dir.clone()),
        ]
    }

    /// `switchyard connect NAME --config FILE`.
    pub(crate) fn connect_argv(&self, server: &str) -> Vec<String> {
        let exe = self.exe.display().to_string();
        vec![exe, "connect".into(), server.into(), "--config".into(), self.config.display().to_string()]
    }

    /// `switchyard ARGS... --config FILE`, run to completion; its stdout.
    pub(crate) fn cli(&self, args: &[&str]) -> String {
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

    pub(crate) fn status(&self) -> serde_json::Value {
        serde_json::from_str(self.cli(&["status", "--json"]).trim()).unwrap()
    }

    pub(crate) fn stop(&self) {
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
pub(crate) struct Start {
    pub(crate) label: &'static str,
    pub(crate) argv: Vec<String>,
    pub(crate) envs: Vec<(&'static str, PathBuf)>,
    /// What to do before each measurement, untimed.
    pub(crate) before: Before,
}

pub(crate) enum Before {
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
    pub(crate) fn daemon(&self) {
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
    pub(crate) fn daemon_memory(&self) {
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
pub(crate) fn server_table(name: &str, argv: &[String]) -> String {
    format!(
        "[servers.{name}]\ncommand = {}\nargs = {}\n",
        serde_json::Value::from(argv[0].as_str()),
        serde_json::Value::from(argv[1..].to_vec())
    )
}

/// Launches `argv` as a client launches its server command, and times it until the first
/// `tools/call echo` is answered (initialize, notifications/initialized, the call, one after the
/// other as a client does); then closes its stdin and waits for it to exit (untimed).
pub(crate) fn first_result(argv: &[String], envs: &[(&'static str, PathBuf)], field: &str, stderr: &Path) -> Duration {
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
pub(crate) fn pss_kib(pid: u32) -> u64 {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
