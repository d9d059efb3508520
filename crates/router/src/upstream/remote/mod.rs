//! Remote server instances: the Streamable HTTP and legacy SSE transports, and the connector
//! that opens them (choosing between the two for `transport = "auto"`).
//!
//! Each transport instance owns its own `reqwest::Client`, so the connections of a killed
//! instance (possibly black-holed ones) die with it instead of lingering in a shared pool and
//! being handed to the next instance. Every task a transport starts ends with it: they run
//! under its cancellation token, which `close`, `kill` and the end of the link trip.

mod event;
mod legacy;
mod liveness;
mod retry;
mod streamable;
#[cfg(all(test, unix))]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Duration;

use reqwest::header::{ACCEPT, HeaderMap, HeaderName, HeaderValue};
use reqwest::{RequestBuilder, Response, StatusCode, Url};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::transport::{BoxFuture, Connector, Ended, Failure, Inbound, Lost, RemoteKind, RemoteSpec, Transport};
use switchyard_config::display_url;
use switchyard_oauth::{Auth, Challenge, Secret, State, describe};

use legacy::Legacy;
use liveness::{Probe, ProbeKind, Watch};
use streamable::Streamable;
pub use streamable::ToolHeaders;

/// How much of an error body is quoted in a message.
const SNIPPET: usize = 200;

/// Opens Streamable HTTP or legacy SSE connections to one configured remote server.
pub struct RemoteConnector {
    spec: Arc<RemoteSpec>,
    url: Url,
    headers: HeaderMap,
    /// For `auto`: what the first instance found the server speaks, so later instances go
    /// straight to it.
    resolved: Arc<Mutex<Option<RemoteKind>>>,
    /// Where reconnections are counted.
    metrics: Option<Arc<switchyard_core::metrics::Metrics>>,
    /// The server's sign-in, shared by its instances (None: off).
    auth: Option<Arc<Auth>>,
    /// The arguments the server's tools mirror in `Mcp-Param-*` headers (2026-07-28).
    tool_headers: Arc<ToolHeaders>,
}

impl RemoteConnector {
    /// Counts its transports' reconnections in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<switchyard_core::metrics::Metrics>) -> RemoteConnector {
        self.metrics = Some(metrics);
        self
    }

    /// Checks the URL and the headers. Err: what is wrong, naming the server and the header
    /// (never its value).
    pub fn new(spec: RemoteSpec) -> Result<RemoteConnector, String> {
        let server = &spec.server;
        let url =
            Url::parse(&spec.url).map_err(|e| format!("server {server}: the URL {:?} is not valid: {e}", spec.url))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(format!("server {server}: the URL {} must start with http:// or https://", display_url(&url)));
        }
        if url.host_str().is_none() {
            return Err(format!("server {server}: the URL {} has no host", display_url(&url)));
        }
        let mut headers = HeaderMap::new();
        for h in &spec.headers {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|_| format!("server {server}: {:?} is not a valid HTTP header name", h.name))?;
            let mut value = HeaderValue::from_str(&h.value).map_err(|_| {
                let from = if h.vars.is_empty() {
                    String::new()
                } else {
                    format!(" (check {})", vars_list(&h.vars))
                };
                format!("server {server}: the value of header {} is not a valid HTTP header value: it must be printable ASCII on one line{from}", h.name)
            })?;
            value.set_sensitive(true);
            headers.append(name, value);
        }
        let auth = match &spec.oauth {
            Some(settings) => {
                let dir = switchyard_config::paths::oauth_dir()
                    .map_err(|e| format!("server {server}: no place for its sign-in tokens: {e:#}"))?;
                let auth =
                    Auth::new(url.clone(), settings.clone(), &dir).map_err(|e| format!("server {server}: {e}"))?;
                Some(Arc::new(auth))
            }
            None => None,
        };
        Ok(RemoteConnector {
            spec: Arc::new(spec),
            url,
            headers,
            resolved: Arc::new(Mutex::new(None)),
            metrics: None,
            tool_headers: Arc::default(),
            auth,
        })
    }

    /// The server's sign-in, when it is on.
    pub fn auth(&self) -> Option<Arc<Auth>> {
        self.auth.clone()
    }

    /// What `auto` found the server speaks, once an instance has found out.
    pub fn resolved_kind(&self) -> Option<RemoteKind> {
        self.resolved.lock().unwrap().clone()
    }
}

impl Connector for RemoteConnector {
    fn connect(
        &self,
        label: &str,
        inbound: Arc<dyn Inbound>,
    ) -> BoxFuture<'static, Result<Arc<dyn Transport>, Failure>> {
        let kind = match self.spec.kind {
            RemoteKind::Auto => self.resolved.lock().unwrap().clone().unwrap_or(RemoteKind::Auto),
            ref k => k.clone(),
        };
        let spec = self.spec.clone();
        let url = self.url.clone();
        let headers = self.headers.clone();
        let label = label.to_string();
        let resolved = self.resolved.clone();
        let metrics = self.metrics.clone();
        let tool_headers = self.tool_headers.clone();
        let auth = self.auth.clone();
        Box::pin(async move {
            let shared = Shared { metrics, auth, tool_headers };
            let core = Core::new(&spec, url, headers, label, inbound, shared)?;
            let transport: Arc<dyn Transport> = match kind {
                RemoteKind::Sse => Legacy::open(core.clone()).await?,
                RemoteKind::StreamableHttp => Streamable::new(core.clone(), None),
                RemoteKind::Auto => Streamable::new(core.clone(), Some(resolved)),
            };
            // Only a transport that was handed over reports its end; a failed connect is
            // reported by its Err alone.
            let _ = core.reports.send(Report::Handed);
            Ok(transport)
        })
    }

    fn describe(&self) -> String {
        display_url(&self.url)
    }

    fn sign_in_wait(&self) -> Duration {
        self.auth.as_ref().map_or(Duration::ZERO, |a| a.sign_in_wait())
    }

    fn sign_in(&self) -> Option<switchyard_oauth::Status> {
        self.auth.as_ref().map(|a| a.status())
    }

    fn hint(&self) -> String {
        // Starts that fail because no one is signed in are not a server that is down.
        if let Some(auth) = &self.auth
            && !matches!(auth.status().state, State::SignedIn | State::Expired)
        {
            return format!(
                "Sign in with `{}`, or check that {} is up and reachable from here",
                login_command(&self.spec.server, &self.url),
                display_url(&self.url)
            );
        }
        format!("Check that {} is up and reachable from here", display_url(&self.url))
    }

    fn tool_headers(&self) -> Option<Arc<ToolHeaders>> {
        Some(self.tool_headers.clone())
    }
}

/// What the instances of one remote server share, besides its configuration.
struct Shared {
    metrics: Option<Arc<switchyard_core::metrics::Metrics>>,
    auth: Option<Arc<Auth>>,
    tool_headers: Arc<ToolHeaders>,
}

/// What a transport reports, in order, to its `Inbound`.
enum Report {
    Message(String),
    TooLong {
        bytes: usize,
        limit: usize,
        id: Option<u64>,
    },
    Lost(u64, Lost),
    Renewed,
    Ended(Ended),
    /// The transport reached the instance: from now on its end must be reported.
    Handed,
}

/// The `switchyard login` that signs in to `server`: by name for a server of the config, by URL
/// for one named after its URL (`run --url`, which no config file names).
fn login_command(server: &str, url: &Url) -> String {
    match server == switchyard_config::url_name(url) {
        true => format!("switchyard login {}", display_url(url)),
        false => format!("switchyard login {server}"),
    }
}

/// What both transports share: the client, the configured headers, the reporting channel and
/// the token every task runs under.
struct Core {
    server: String,
    /// Where reconnections are counted (`switchyard_transport_reconnects_total`).
    metrics: Option<Arc<switchyard_core::metrics::Metrics>>,
    label: String,
    url: Url,
    /// Replaced (a new connection pool) when the watchdog found a request silent on a link that
    /// answers probes: its connection may be one that died, and later requests must not get it.
    client: Mutex<reqwest::Client>,
    headers: HeaderMap,
    /// Names of the configured headers and the variables their values came from.
    header_sources: Vec<(String, Vec<String>)>,
    /// The configured header values and their long words (a bare token), longest first: a
    /// server may echo them in an error body, which must not carry them into logs or errors.
    secrets: Vec<String>,
    limit: usize,
    connect_timeout: Duration,
    post_timeout: Duration,
    /// Reports go through one task, so they reach the instance in the order they were made
    /// and none follows `ended`; the instance is never called with a lock of ours held.
    reports: mpsc::UnboundedSender<Report>,
    /// True once the instance has been told the transport ended.
    delivered: watch::Receiver<bool>,
    cancel: CancellationToken,
    closed: AtomicBool,
    /// The requests in flight and what the link last carried for each.
    watch: Watch,
    /// How long a request may be silent before the link is probed (None: never).
    liveness: Option<Duration>,
    /// Whether the watchdog runs (it is started once, by the first transport on this core).
    watching: AtomicBool,
    /// A client that never reuses a connection, for probes: a pooled connection may be the dead one.
    fresh: OnceLock<reqwest::Client>,
    /// The server's sign-in: its token goes on every request, and a 401 starts it.
    auth: Option<Arc<Auth>>,
    /// The arguments the server's tools mirror in `Mcp-Param-*` headers (2026-07-28).
    tool_headers: Arc<ToolHeaders>,
}

/// What the bytes being read are for, so the watchdog knows whose link is alive.
#[derive(Clone, Copy)]
enum For {
    /// A request's own answer or response stream.
    Request(u64),
    /// The stream every answer comes on (legacy SSE).
    Stream,
    /// Nothing a request waits on (the standalone GET stream, an error body).
    Other,
}

impl Core {
    fn new(
        spec: &RemoteSpec,
        url: Url,
        headers: HeaderMap,
        label: String,
        inbound: Arc<dyn Inbound>,
        shared: Shared,
    ) -> Result<Arc<Core>, Failure> {
        let Shared { metrics, auth, tool_headers } = shared;
        let client = build_client(spec).map_err(|e| Failure {
            reason: format!("server {}: could not set up an HTTP client: {e}", spec.server),
            transient: false,
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = watch::channel(false);
        tokio::spawn(deliver_reports(rx, inbound, done_tx));
        Ok(Arc::new(Core {
            server: spec.server.clone(),
            label,
            url,
            client: Mutex::new(client),
            headers,
            header_sources: spec.headers.iter().map(|h| (h.name.clone(), h.vars.clone())).collect(),
            secrets: secrets_of(spec),
            limit: spec.max_message_bytes,
            connect_timeout: spec.connect_timeout,
            post_timeout: spec.post_timeout,
            reports: tx,
            delivered: done_rx,
            cancel: CancellationToken::new(),
            closed: AtomicBool::new(false),
            metrics,
            watch: Watch::new(false),
            liveness: spec.liveness,
            watching: AtomicBool::new(false),
            fresh: OnceLock::new(),
            auth,
            tool_headers,
        }))
    }

    /// Starts the watchdog (once per core) with this transport's probe, when liveness is on.
    fn watch_with(self: &Arc<Self>, probe: Probe, kind: ProbeKind) {
        let Some(window) = self.liveness else { return };
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        self.spawn(liveness::watchdog(self.clone(), window, probe, kind));
    }

    /// Later requests go on new connections: the pooled ones may include dead ones. Requests in
    /// flight keep theirs.
    fn renew_pool(&self) {
        match pooled_client(self.connect_timeout) {
            Ok(c) => *self.client.lock().unwrap() = c,
            Err(e) => tracing::debug!(instance = %self.label, "kept the connection pool: {e}"),
        }
    }

    /// The client for probes: every request on a new connection.
    fn fresh_client(&self) -> Result<&reqwest::Client, String> {
        if let Some(c) = self.fresh.get() {
            return Ok(c);
        }
        let c = client_builder(self.connect_timeout)
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| format!("could not set up an HTTP client: {e}"))?;
        Ok(self.fresh.get_or_init(|| c))
    }

    /// The link carried bytes for `what`.
    fn heard(&self, what: For) {
        match what {
            For::Request(id) => self.watch.heard(id),
            For::Stream => self.watch.heard_stream(),
            For::Other => {}
        }
    }

    /// The next event of an SSE body (Ok(None): the stream ended), noting the bytes as heard.
    async fn next_event(
        &self,
        resp: &mut Response,
        parser: &mut event::Parser,
        what: For,
    ) -> Result<Option<event::Event>, reqwest::Error> {
        loop {
            if let Some(e) = parser.next_event() {
                return Ok(Some(e));
            }
            match resp.chunk().await? {
                Some(chunk) => {
                    self.heard(what);
                    parser.feed(&chunk)
                }
                None => return Ok(None),
            }
        }
    }

    /// Reads at most `limit` bytes of a body, noting the bytes as heard. Ok(Err(n)): the body is
    /// `n` bytes, over the limit (read to its end so the count is right, without keeping it).
    async fn read_body(
        &self,
        resp: &mut Response,
        limit: usize,
        what: For,
    ) -> Result<Result<Vec<u8>, usize>, reqwest::Error> {
        if let Some(len) = resp.content_length()
            && len as usize > limit
        {
            return Ok(Err(len as usize));
        }
        let mut body = Vec::new();
        let mut total = 0usize;
        while let Some(chunk) = resp.chunk().await? {
            self.heard(what);
            total += chunk.len();
            if total <= limit {
                body.extend_from_slice(&chunk);
            } else {
                body = Vec::new();
            }
        }
        if total > limit { Ok(Err(total)) } else { Ok(Ok(body)) }
    }

    /// The Streamable HTTP transport reconnected (`kind`: resume, reinit_404, reconnect).
    fn reconnected(&self, kind: &'static str) {
        if let Some(m) = &self.metrics {
            m.reconnect(&self.server, "streamable_http", kind);
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The URL for messages: without its query or credentials, which may hold secrets.
    fn shown_url(&self) -> String {
        display_url(&self.url)
    }

    fn login_command(&self) -> String {
        login_command(&self.server, &self.url)
    }

    /// Runs `work` as one of this transport's tasks: it ends when the transport does.
    fn spawn(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let cancel = self.cancel.clone();
        tokio::spawn(async move {
            cancel.run_until_cancelled(work).await;
        });
    }

    /// A request with the configured headers, and the sign-in's token when there is one.
    fn request(&self, method: reqwest::Method, url: Url) -> RequestBuilder {
        let client = self.client.lock().unwrap().clone();
        let req = client.request(method, url).headers(self.headers.clone());
        match self.auth.as_ref().and_then(|a| a.current()) {
            Some(token) => with_bearer(req, &token),
            None => req,
        }
    }

    /// The token to send, refreshed first when it is about to expire (None: sign-in is off, or
    /// nobody has signed in yet).
    async fn bearer(&self) -> Option<Secret> {
        match &self.auth {
            Some(auth) => auth.bearer().await,
            None => None,
        }
    }

    /// After a 401, or a 403 asking for more scope: signs in (or refreshes, or steps up) when
    /// sign-in is on. Ok: send the request again. Err: why not, for the caller's error (None:
    /// sign-in is off, or this refusal is not one a sign-in answers).
    /// `interactive`: whether a sign-in may start (a client's request); else only a refresh.
    async fn sign_in(&self, resp: &Response, sent: Option<&Secret>, interactive: bool) -> Option<Result<(), String>> {
        let auth = self.auth.as_ref()?;
        let status = resp.status();
        let values: Vec<&str> =
            resp.headers().get_all(reqwest::header::WWW_AUTHENTICATE).iter().filter_map(|v| v.to_str().ok()).collect();
        // Without a Bearer challenge the server wants something else (an API key header, say):
        // the refusal is reported as it is, naming the headers.
        let challenge = Challenge::parse(values)?;
        if status == StatusCode::FORBIDDEN && !challenge.insufficient_scope() {
            return None;
        }
        let server = self.server.clone();
        let login = self.login_command();
        let announce = move |url: &str| {
            tracing::warn!(
                "server {server}: sign in at {url} (opening the browser unless open_browser = false; or run `{login}`)"
            )
        };
        let url = self.shown_url();
        let answer = match interactive {
            true => auth.refused(status.as_u16(), Some(&challenge), sent, &announce).await,
            false => auth.refused_quietly(status.as_u16(), Some(&challenge), sent).await,
        };
        Some(answer.map_err(|e| {
            let hint = if e.timed_out || !interactive {
                "sign in with"
            } else {
                "check the server's oauth settings, then sign in with"
            };
            format!("could not sign in to {url}: {e}; {hint} `{}`", self.login_command())
        }))
    }

    /// The GET that opens an SSE stream.
    fn get_stream(&self, url: Url) -> RequestBuilder {
        self.request(reqwest::Method::GET, url).header(ACCEPT, "text/event-stream")
    }

    fn message(&self, line: String) {
        let _ = self.reports.send(Report::Message(line));
    }

    fn too_long(&self, bytes: usize, id: Option<u64>) {
        tracing::warn!(instance = %self.label, "skipped a {bytes}-byte message from {} (limit {} bytes)", self.shown_url(), self.limit);
        let _ = self.reports.send(Report::TooLong { bytes, limit: self.limit, id });
    }

    fn lost(&self, id: u64, mut lost: Lost) {
        self.watch.settled(id);
        lost.cause = self.redact(lost.cause);
        tracing::debug!(instance = %self.label, "request {id} lost: {}", lost.cause);
        let _ = self.reports.send(Report::Lost(id, lost));
    }

    fn renewed(&self) {
        let _ = self.reports.send(Report::Renewed);
    }

    /// Ends the transport (the first call wins): stops every task, tells the instance, and
    /// resolves once it has been told.
    fn finish(&self, status: String) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.finish_quiet(status, Duration::ZERO)
    }

    /// [`Core::finish`] for a link that had carried nothing for `quiet_for`.
    fn finish_quiet(
        &self,
        status: String,
        quiet_for: Duration,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let status = self.redact(status);
        if !self.closed.swap(true, Ordering::AcqRel) {
            tracing::debug!(instance = %self.label, "transport ended: {status}");
            self.cancel.cancel();
            let _ = self.reports.send(Report::Ended(Ended { status, stderr: Vec::new(), quiet_for }));
        }
        let mut delivered = self.delivered.clone();
        async move {
            // Err: the reporting task is gone, which it only is after reporting the end.
            let _ = delivered.wait_for(|d| *d).await;
        }
    }

    /// Ends the transport from one of its own tasks (which the end cancels: nothing to wait for).
    fn end(&self, status: String) {
        drop(self.finish(status));
    }

    /// The error for a 401 or 403: which header to set, and where its value comes from.
    fn refused(&self, status: StatusCode) -> String {
        let url = self.shown_url();
        let what = if status == StatusCode::UNAUTHORIZED { "refused the credentials" } else { "forbade access" };
        let code = status.as_u16();
        if self.header_sources.is_empty() {
            return format!(
                "{url} {what} (HTTP {code}) and no header is configured: set one such as Authorization in the server's \
                 `headers` in switchyard.toml or with --header 'Authorization: Bearer ${{TOKEN}}'"
            );
        }
        let looks_like_auth = |name: &str| {
            let n = name.to_ascii_lowercase();
            n == "authorization" || n.contains("token") || n.contains("key") || n.contains("auth")
        };
        let mut chosen: Vec<&(String, Vec<String>)> =
            self.header_sources.iter().filter(|(n, _)| looks_like_auth(n)).collect();
        if chosen.is_empty() {
            chosen = self.header_sources.iter().collect();
        }
        let names: Vec<&str> = chosen.iter().map(|(n, _)| n.as_str()).collect();
        let vars: Vec<String> = chosen.iter().flat_map(|(_, v)| v.iter().cloned()).collect();
        let header = if names.len() == 1 { "header" } else { "headers" };
        let source = if vars.is_empty() {
            "whose value is written in the configuration itself".to_string()
        } else {
            format!("which comes from {}", vars_list(&vars))
        };
        format!(
            "{url} {what} (HTTP {code}): set the {} {header} (the server's `headers` in switchyard.toml, or --header), {source}",
            names.join(", ")
        )
    }
}

async fn deliver_reports(
    mut rx: mpsc::UnboundedReceiver<Report>,
    inbound: Arc<dyn Inbound>,
    done: watch::Sender<bool>,
) {
    let mut handed = false;
    while let Some(report) = rx.recv().await {
        match report {
            Report::Message(line) => inbound.message(line),
            Report::TooLong { bytes, limit, id } => inbound.too_long(bytes, limit, id),
            Report::Lost(id, lost) => inbound.lost(id, lost),
            Report::Renewed => inbound.renewed(),
            Report::Handed => handed = true,
            Report::Ended(how) => {
                inbound.ended(how);
                let _ = done.send(true);
                return;
            }
        }
    }
    // Every sender is gone without an end: the transport was dropped without close or kill
    // (or its connect failed or was given up, which the connect's caller knows of already).
    if handed {
        inbound.ended(Ended {
            status: "the transport was dropped".into(),
            stderr: Vec::new(),
            quiet_for: Duration::ZERO,
        });
    }
    let _ = done.send(true);
}

fn build_client(spec: &RemoteSpec) -> Result<reqwest::Client, reqwest::Error> {
    pooled_client(spec.connect_timeout)
}

/// The client requests go on: pooled connections, none reused after [`IDLE_CONNECTION`].
fn pooled_client(connect_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    client_builder(connect_timeout).pool_idle_timeout(IDLE_CONNECTION).build()
}

/// How long an idle pooled connection is kept for the next request. An idle connection may have
/// died unseen (a NAT that forgot it, a laptop that slept): one idle for a few seconds is not
/// reused, as the SDKs' HTTP stacks do.
const IDLE_CONNECTION: Duration = Duration::from_secs(4);

fn client_builder(connect_timeout: Duration) -> reqwest::ClientBuilder {
    static CRYPTO: Once = Once::new();
    // reqwest is built without a TLS crypto provider of its own (the default one needs a C
    // and CMake toolchain); ring is the one rustls uses here. Err: one is installed already.
    CRYPTO.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let builder = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        // The kernel finds a peer that vanished without a FIN (packets dropped by a NAT that
        // forgot the connection, a peer that slept): a quiet connection is probed after 10 s
        // and dropped after 3 unanswered probes 5 s apart; data unacknowledged for 20 s ends
        // it too. The liveness watchdog covers what the kernel cannot see (a middlebox that
        // acknowledges and forwards nothing).
        .tcp_keepalive(Duration::from_secs(10))
        .tcp_keepalive_interval(Duration::from_secs(5))
        .tcp_keepalive_retries(3);
    // Linux alone lets a socket give up on data unacknowledged for 20 s (TCP_USER_TIMEOUT);
    // elsewhere the keepalive probes and the liveness watchdog find a dead link.
    #[cfg(target_os = "linux")]
    let builder = builder.tcp_user_timeout(Duration::from_secs(20));
    builder
        // HTTP/2 (https servers that offer it): a PING on a quiet connection finds it dead per
        // connection, whatever else is reachable.
        .http2_keep_alive_interval(Duration::from_secs(10))
        .http2_keep_alive_timeout(Duration::from_secs(5))
        .http2_keep_alive_while_idle(true)
        // Redirects stay on the server's own origin: the configured headers (credentials) go
        // nowhere else.
        .redirect(reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt.previous().first().is_none_or(|first| first.origin() == attempt.url().origin());
            if attempt.previous().len() > 5 {
                attempt.error("more than 5 redirects")
            } else if same_origin {
                attempt.follow()
            } else {
                attempt.stop()
            }
        }))
        .user_agent(concat!("switchyard/", env!("CARGO_PKG_VERSION")))
}

/// `req` with `Authorization: Bearer TOKEN`, marked sensitive (never in Debug output).
fn with_bearer(req: RequestBuilder, token: &Secret) -> RequestBuilder {
    match HeaderValue::from_str(&format!("Bearer {}", token.expose())) {
        Ok(mut v) => {
            v.set_sensitive(true);
            req.header(reqwest::header::AUTHORIZATION, v)
        }
        Err(_) => req,
    }
}

fn vars_list(vars: &[String]) -> String {
    let named: Vec<String> = vars.iter().map(|v| format!("${v}")).collect();
    named.join(" and ")
}

/// Whether the error proves the request never left: no connection could be made.
fn never_sent(e: &reqwest::Error) -> bool {
    e.is_connect()
}

/// What of the configured headers must never be shown: each value, and each of its words of 8
/// characters or more (the token of `Bearer <token>`), longest first.
fn secrets_of(spec: &RemoteSpec) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for h in &spec.headers {
        let value = h.value.trim();
        if value.len() >= 8 {
            out.push(value.to_string());
        }
        out.extend(value.split_whitespace().filter(|w| w.len() >= 8).map(str::to_string));
    }
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

impl Core {
    /// `text` with every configured header value (or long word of one) replaced.
    fn redact(&self, text: String) -> String {
        if !self.secrets.iter().any(|s| text.contains(s.as_str())) {
            return text;
        }
        self.secrets.iter().fold(text, |t, s| t.replace(s.as_str(), "<redacted>"))
    }
}

/// The start of an error body, for a message: a JSON-RPC error's message when it is one.
async fn snippet(mut resp: Response) -> String {
    let mut body = Vec::new();
    while body.len() < 4096 {
        match resp.chunk().await {
            Ok(Some(c)) => body.extend_from_slice(&c),
            _ => break,
        }
    }
    snippet_of(&body)
}

fn snippet_of(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if let Some(msg) = jsonrpc_error_message(text) {
        return msg;
    }
    let mut cut: String = text.chars().take(SNIPPET).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut.replace(['\r', '\n'], " ")
}

/// `error.message` (with its code) when the body is a JSON-RPC error response.
fn jsonrpc_error_message(body: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Body {
        error: ErrorBody,
    }
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        code: i64,
        message: String,
    }
    let b: Body = serde_json::from_str(body).ok()?;
    Some(format!("{} (JSON-RPC error {})", b.error.message, b.error.code))
}

/// Lost in a way that proves the request was never delivered.
fn not_delivered(cause: String) -> Lost {
    Lost { cause, delivery: super::transport::Delivery::No }
}

/// Sign-ins one message (or the opening of a legacy stream) may cause: a 401, then a step-up or
/// two. A server that keeps refusing gets an error, not a loop of browser windows.
const MAX_SIGN_INS: u32 = 3;

/// Refused unrun by a server that no sign-in satisfied: final, not repeated.
fn refused(cause: String) -> Lost {
    Lost { cause, delivery: super::transport::Delivery::Refused }
}

/// Lost in a way that leaves open whether the request ran.
fn maybe_delivered(cause: String) -> Lost {
    Lost { cause, delivery: super::transport::Delivery::Maybe }
}

/// Whether a response carries an SSE stream.
fn is_event_stream(resp: &Response) -> bool {
    content_type(resp).starts_with("text/event-stream")
}

fn content_type(resp: &Response) -> String {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}
