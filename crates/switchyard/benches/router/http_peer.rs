//! The HTTP side of the bench: a bare Streamable HTTP client and the HTTP servers it measures.

use super::*;

/// The bare client's HTTP client: reqwest as switchyard builds it, plain HTTP, connections kept.
pub(crate) fn http_client() -> reqwest::Client {
    // reqwest is built without a TLS provider of its own; only plain HTTP is used here, but the
    // builder wants one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().unwrap()
}

/// A bare MCP client over Streamable HTTP that does on the wire what an SDK's client does: POSTs
/// each message accepting JSON and SSE, keeps the session id and protocol version from the
/// initialize, and reads the answer as JSON or as the SSE event that carries the response.
/// Connections are kept alive and reused by reqwest's pool.
pub(crate) struct HttpSession {
    pub(crate) client: reqwest::Client,
    pub(crate) url: String,
    pub(crate) session: Option<String>,
    pub(crate) version: Option<String>,
}

/// A response, and the moment its last byte was read (before the rest of its stream was drained).
pub(crate) struct Answer {
    pub(crate) line: String,
    pub(crate) at: Instant,
}

impl HttpSession {
    pub(crate) async fn open(client: &reqwest::Client, url: &str) -> Result<HttpSession, String> {
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
    pub(crate) async fn delete(&self) {
        let mut req = self.client.delete(&self.url);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("DELETE {}: {}", self.url, chain(&e)));
        assert!(resp.status().is_success(), "DELETE {}: HTTP {}", self.url, resp.status());
    }

    /// POSTs one message; for a request (`id`), reads its response. Err: an HTTP status other
    /// than 2xx, with its body, or a transport error.
    pub(crate) async fn post(&self, body: String, id: Option<u64>) -> Result<Option<Answer>, String> {
        self.exchange(body, id).await.map(|(answer, _)| answer)
    }

    /// `post`, with the session id the server gave in its headers.
    pub(crate) async fn exchange(
        &self,
        body: String,
        id: Option<u64>,
    ) -> Result<(Option<Answer>, Option<String>), String> {
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
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
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
pub(crate) struct Sse {
    pub(crate) buf: Vec<u8>,
    pub(crate) data: String,
}

impl Sse {
    pub(crate) fn feed(&mut self, chunk: &[u8], out: &mut Vec<String>) {
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
pub(crate) struct Direct<'a> {
    pub(crate) label: String,
    pub(crate) rt: &'a tokio::runtime::Runtime,
    pub(crate) s: std::sync::Arc<HttpSession>,
    pub(crate) field: &'static str,
}

impl<'a> Direct<'a> {
    /// Initialised and warmed up with 200 calls, as a `Conn` is.
    pub(crate) fn open(
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
pub(crate) fn direct_rate(
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
pub(crate) struct HttpServer {
    pub(crate) label: String,
    pub(crate) argv: Vec<String>,
    pub(crate) envs: Vec<(String, String)>,
    pub(crate) port: u16,
    pub(crate) child: Option<Child>,
    pub(crate) log: PathBuf,
    pub(crate) runs: PathBuf,
}

impl HttpServer {
    /// tests/python/http_server.py (`echo(text)`, `slow_echo(text, ms)` idempotent,
    /// `slow_counter(ms)` not) on Streamable HTTP, without an event store: a broken stream
    /// cannot be resumed.
    pub(crate) fn python(python: &Path, repo: &Path, dir: &Path, label: &str) -> HttpServer {
        HttpServer::python_with(python, repo, dir, label, &[])
    }

    /// [`HttpServer::python`] with more of http_server.py's options (e.g. `--forgetful-store`).
    pub(crate) fn python_with(python: &Path, repo: &Path, dir: &Path, label: &str, options: &[&str]) -> HttpServer {
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
    pub(crate) fn everything(entry: &Path, dir: &Path) -> HttpServer {
        let port = free_port();
        let argv = vec!["node".into(), entry.display().to_string(), "streamableHttp".into()];
        let runs = dir.join("everything.runs.jsonl");
        HttpServer::launch("everything", argv, vec![("PORT".into(), port.to_string())], port, dir, runs)
    }

    pub(crate) fn launch(
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

    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr())
    }

    /// Starts the server and waits until its port accepts a connection; returns when it did
    /// (polled every 5 ms).
    pub(crate) fn start(&mut self) -> Instant {
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
    pub(crate) fn stop(&mut self) {
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
    pub(crate) fn runs(&self, tool: &str) -> usize {
        let text = std::fs::read_to_string(&self.runs).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|run| run["tool"] == tool)
            .count()
    }

    /// Polls (every 2 ms) until `tool` started `n` times.
    pub(crate) fn wait_runs(&self, tool: &str, n: usize) {
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
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
