//! One MCP connection driven from the bench (a child's stdio or the router's socket), and the
//! latency table every section prints.

use super::*;

/// The argv of a `connect` (`env K=V ... switchyard connect ...`) that keeps the relay.
pub(crate) fn relayed(connect: &[String]) -> Vec<String> {
    let mut argv = connect.to_vec();
    argv.insert(1, "SWITCHYARD_HANDOFF=0".to_string());
    argv
}

/// One MCP connection over a child's stdin/stdout, driven with blocking I/O from this thread.
pub(crate) struct Conn {
    pub(crate) label: String,
    pub(crate) child: Child,
    /// None once closed (the MCP way to end a stdio session).
    pub(crate) w: Option<BufWriter<Box<dyn Write + Send>>>,
    pub(crate) r: BufReader<Box<dyn Read + Send>>,
    /// Connected to the router's --listen socket rather than to the child's stdio.
    pub(crate) socket: bool,
    pub(crate) line: String,
    pub(crate) next_id: u64,
    /// The argument of the server's `echo` tool.
    pub(crate) field: &'static str,
    /// What latency rounds echo (`hello` unless [`Conn::echoing`] said otherwise).
    pub(crate) text: String,
}

#[derive(Deserialize)]
pub(crate) struct Envelope<'a> {
    pub(crate) id: Option<u64>,
    #[serde(borrow)]
    pub(crate) method: Option<&'a str>,
}

impl Conn {
    pub(crate) fn spawn(label: &str, field: &'static str, argv: Vec<String>, stderr: &Path) -> Conn {
        let mut child = command(&argv, stderr).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let w: Box<dyn Write + Send> = Box::new(child.stdin.take().unwrap());
        let r: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        Conn::handshake(label, field, child, w, r, false, stderr)
    }

    /// A router started with `--listen socket --no-stdio`, reached over its Unix socket.
    pub(crate) fn socket(label: &str, field: &'static str, argv: Vec<String>, socket: &Path, stderr: &Path) -> Conn {
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

    pub(crate) fn handshake(
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
        let mut c = Conn {
            label: label.into(),
            child,
            w,
            r,
            socket,
            line: String::new(),
            next_id: 1 << 40,
            field,
            text: "hello".into(),
        };
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

    /// Latency rounds echo `text` from now on (a call of its size, both ways).
    pub(crate) fn echoing(mut self, text: &str) -> Conn {
        self.text = text.to_string();
        self
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn send(&mut self, line: &str) {
        let w = self.w.as_mut().expect("open");
        w.write_all(line.as_bytes()).unwrap();
        w.write_all(b"\n").unwrap();
    }

    pub(crate) fn flush(&mut self) {
        self.w.as_mut().expect("open").flush().unwrap();
    }

    /// The next response (notifications and server requests are skipped).
    pub(crate) fn recv(&mut self) -> String {
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

    pub(crate) fn call(&mut self, line: &str) -> String {
        self.send(line);
        self.flush();
        self.recv()
    }

    /// `n` sequential round trips; their durations.
    pub(crate) fn round_trips(&mut self, n: usize, out: &mut Vec<Duration>) {
        for _ in 0..n {
            let id = self.next_id;
            self.next_id += 1;
            let req = if self.text == "hello" {
                echo_request(id, self.field)
            } else {
                let params = serde_json::json!({"name": "echo", "arguments": {self.field: self.text}});
                format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
            };
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
    pub(crate) fn pipelined(&mut self, window: usize) -> f64 {
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
/// Its state (the audit logs of the `run`s measured) goes beside `stderr`, in the bench's own
/// directory, not the user's.
pub(crate) fn command(argv: &[String], stderr: &Path) -> Command {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).stderr(std::fs::File::create(stderr).unwrap()).process_group(0);
    if std::env::var_os("XDG_STATE_HOME").is_none()
        && let Some(dir) = stderr.parent()
    {
        cmd.env("XDG_STATE_HOME", dir.join("state"));
    }
    cmd
}

pub(crate) fn echo_request(id: u64, field: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"{field}":"hello"}}}}}}"#
    )
}

/// Something a latency table measures: sequential round trips, timed one by one.
pub(crate) trait Target {
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
pub(crate) fn latency_table<T: Target>(targets: &mut [(T, usize)]) {
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
