//! Remote servers: `switchyard run --url` beside a bare HTTP client on the same server.

use super::*;

// ------------------------------------------------------------------------------------------------
// Remote servers: `switchyard run --url` beside a bare HTTP client on the same server.

/// Sequential calls per block against an HTTP server (each takes a millisecond or more).
pub(crate) const REMOTE_BLOCK: usize = 100;
/// Alternating rounds of the 64-outstanding throughput measurement, per server.
pub(crate) const REMOTE_RATE_ROUNDS: usize = 3;
/// Repetitions of the severed-link and restarted-server measurements.
pub(crate) const SEVERS: usize = 10;
pub(crate) const RESTARTS: usize = 5;
/// The tools' own time in the severed-link measurements.
pub(crate) const SLOW_COUNTER_MS: u64 = 5000;
pub(crate) const SLOW_ECHO_MS: u64 = 1000;
/// How long anything in the remote section may wait before the bench gives up.
pub(crate) const REMOTE_LIMIT: Duration = Duration::from_secs(60);

/// Ids of the bare HTTP client's requests, unique across its sessions.
pub(crate) static DIRECT_IDS: AtomicU64 = AtomicU64::new(1 << 50);

impl Bench {
    /// `switchyard run --url` against a bare HTTP client doing what an SDK's client does, on the
    /// same servers: latency, 64 outstanding calls, a severed link, a restarted server.
    pub(crate) fn remote(&self) {
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
    pub(crate) fn remote_sever(&self, rt: &tokio::runtime::Runtime, http: &reqwest::Client, python: &Path) {
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
    pub(crate) fn remote_restart(&self, rt: &tokio::runtime::Runtime, http: &reqwest::Client, python: &Path) {
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
pub(crate) fn routed_ok(c: &mut Conn) {
    let id = c.next_id;
    c.next_id += 1;
    let resp = c.call(&echo_request(id, c.field));
    assert!(resp.contains("\"result\""), "{}: echo failed: {resp}", c.label);
}

/// An `echo` from the bare client that must succeed; a second try is allowed, because a pooled
/// connection that the proxy reset a moment ago may be picked before its end is noticed.
pub(crate) fn direct_ok(rt: &tokio::runtime::Runtime, s: &HttpSession) {
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

pub(crate) fn tool_request(id: u64, tool: &str, args: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#)
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

pub(crate) fn median_f(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
