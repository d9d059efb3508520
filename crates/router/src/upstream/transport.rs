//! The transport seam: what carries messages between an `Instance` and one server instance
//! (a child's stdio, a Streamable HTTP session, a legacy SSE stream, an in-memory fake).
//!
//! An `Instance` owns the pending table, id and progress-token rewriting and the answer to
//! every call; a transport only moves messages and reports what happened to them. Sending
//! never waits: it queues, and failures come back through [`Inbound`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use switchyard_core::call::Call;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One message for the server.
#[derive(Debug, Clone)]
pub struct Outbound {
    /// One JSON-RPC message (never a batch), without a trailing newline.
    pub line: String,
    /// The upstream id when the message is a request that expects a reply (ids are unique per
    /// instance and were given by the `Instance`). `None` for notifications and for replies to
    /// the server's own requests.
    pub request: Option<u64>,
    /// switchyard's own health check: a refusal may renew a token by refresh, but starts no
    /// sign-in (no one waits on it, and no browser opens for a request no user made).
    pub quiet: bool,
    /// The W3C `traceparent` of switchyard's span for this request (the one in its `_meta` too),
    /// sent as the HTTP header of that name to a remote server. None when traces are off.
    pub traceparent: Option<String>,
}

/// The transport is closed: nothing more can be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

pub use switchyard_core::error::Delivery;

/// Why one request will get no answer on this link.
#[derive(Debug, Clone)]
pub struct Lost {
    /// What happened, for the client's error: e.g. "the response stream from
    /// https://mcp.example.com/mcp ended before the response (connection reset)".
    pub cause: String,
    pub delivery: Delivery,
}

/// How a transport ended.
#[derive(Debug, Clone)]
pub struct Ended {
    /// e.g. `exit status 3`, `killed by signal 9`, `the SSE stream from … ended`.
    pub status: String,
    /// The last lines of diagnostic output (a child's stderr), oldest first; may be empty.
    pub stderr: Vec<String>,
    /// How long the link had carried nothing when it was ended for that (a silent link found
    /// by the liveness probe); zero for an end that came when it happened.
    pub quiet_for: std::time::Duration,
}

/// What a transport reports, from its own tasks. Implemented by `Instance`.
pub trait Inbound: Send + Sync + 'static {
    /// One line from the server: a JSON-RPC message or a batch (the instance splits batches).
    fn message(&self, line: String);
    /// A message over `limit` bytes was skipped; `id` is the id it answered, when that could be
    /// read from its ends (then that call fails now rather than at its deadline).
    fn too_long(&self, bytes: usize, limit: usize, id: Option<u64>);
    /// Request `id` will get no answer on this link; the link itself lives on.
    fn lost(&self, id: u64, lost: Lost);
    /// The server-side session was replaced by a new one (the old one expired or the server
    /// restarted): whatever the router had set up there (log level, subscriptions) is gone.
    fn renewed(&self);
    /// The transport has ended, for good. Called exactly once; nothing is reported after it.
    fn ended(&self, how: Ended);
}

/// One live connection to one server instance, whatever carries it.
pub trait Transport: Send + Sync + 'static {
    /// Queues one message; never waits. `Err(Closed)` once the transport has ended or is closing.
    fn send(&self, msg: Outbound) -> Result<(), Closed>;
    /// [`Transport::send`] of a client's request, `msg` made from `call`: a transport that
    /// routes by the request (Streamable HTTP's headers) reads it from the `Call`, read once
    /// where the request came in, instead of parsing `msg` again.
    fn send_call(&self, msg: Outbound, _call: &Call) -> Result<(), Closed> {
        self.send(msg)
    }
    /// The router no longer waits for request `id` (the client cancelled, or it timed out);
    /// `notifications/cancelled` has been sent already where the protocol has it. Streamable
    /// HTTP closes that request's response stream (in the 2026-07-28 era that is the
    /// cancellation itself). A late answer is dropped by the instance either way.
    fn abandon(&self, _id: u64) {}
    /// Bytes queued and not yet taken by the server (0 where sending does not queue).
    fn backlog(&self) -> usize {
        0
    }
    /// Runs `hook` whenever the backlog falls back under [`super::WRITE_BACKLOG_LIMIT`] (set once).
    fn on_drain(&self, _hook: Box<dyn Fn() + Send + Sync>) {}
    /// Polite end (stdio: close stdin, wait, TERM, wait, KILL the group; HTTP: DELETE the
    /// session). Resolves once `Inbound::ended` has been called.
    fn close(&self) -> BoxFuture<'_, ()>;
    /// Immediate end (a hung instance being recycled). Resolves once `Inbound::ended` has been called.
    fn kill(&self) -> BoxFuture<'_, ()>;
    /// The process id, for a transport that runs a child.
    fn pid(&self) -> Option<u32> {
        None
    }
    /// Where the instance lives, for logs and errors: `pid 4242`, or the URL (never a header value).
    fn endpoint(&self) -> String;
    /// How long the link has carried nothing for request `id`, when the transport watches that
    /// (remote ones do), for status.
    fn silent_for(&self, _id: u64) -> Option<Duration> {
        None
    }
    /// Diagnostic lines seen so far (a child's stderr), oldest first.
    fn stderr_tail(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Opens connections for one configured server.
pub trait Connector: Send + Sync + 'static {
    /// Opens one connection. `label` (e.g. `fs#3`) names the instance in logs. The transport
    /// keeps `inbound` only in its own tasks (they end with it), so no cycle outlives it.
    /// Err: why it could not connect, saying what to check.
    fn connect(
        &self,
        label: &str,
        inbound: Arc<dyn Inbound>,
    ) -> BoxFuture<'static, Result<Arc<dyn Transport>, Failure>>;
    /// For logs: the command or the URL.
    fn describe(&self) -> String;
    /// What to check when instances keep failing to start (ends the "server is down" error).
    fn hint(&self) -> String {
        "Check the command and its stderr above".into()
    }
    /// Where a remote server's tool lists teach its transports which arguments to mirror in
    /// `Mcp-Param-*` headers (None: a transport without headers).
    fn tool_headers(&self) -> Option<Arc<super::remote::ToolHeaders>> {
        None
    }
    /// How much longer than `init_timeout_ms` a start may take because a user must sign in
    /// first (a remote server with no token yet): the sign-in's own bound.
    fn sign_in_wait(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// Where the server's sign-in stands (None: it does not sign in).
    fn sign_in(&self) -> Option<switchyard_oauth::Status> {
        None
    }
}

/// A connect that failed.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The whole message for the user: what, where, and what to do.
    pub reason: String,
    /// Whether trying again later may help (connect refused, 5xx) or not (401/403, a missing
    /// program, a bad URL): the latter stops retries at once.
    pub transient: bool,
}

/// How a remote server is reached (`switchyard run --url`, or `[server] url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteKind {
    /// Streamable HTTP; if the first POST is refused as legacy servers refuse it (400, 404,
    /// 405), legacy SSE at the same URL.
    Auto,
    StreamableHttp,
    Sse,
}

/// One configured header of a remote server.
#[derive(Clone, PartialEq, Eq)]
pub struct Header {
    pub name: String,
    /// With `${VAR}` already expanded: may hold a secret, so never logged (Debug hides it).
    pub value: String,
    /// The environment variables its value came from, to name in a 401/403 error.
    pub vars: Vec<String>,
}

impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Header")
            .field("name", &self.name)
            .field("value", &"<hidden>")
            .field("vars", &self.vars)
            .finish()
    }
}

/// How to reach instances of a remote server.
#[derive(Debug, Clone)]
pub struct RemoteSpec {
    pub server: String,
    /// `http://` or `https://` URL: the MCP endpoint (Streamable HTTP) or the SSE stream (legacy).
    pub url: String,
    pub kind: RemoteKind,
    pub headers: Vec<Header>,
    pub connect_timeout: Duration,
    pub max_message_bytes: usize,
    /// Legacy SSE: how long a POST to the endpoint may take to be accepted (a server that lost
    /// the session can accept the connection and never answer).
    pub post_timeout: Duration,
    /// How long a request may wait with nothing from its link before the link is probed
    /// (`None`: never).
    pub liveness: Option<Duration>,
    /// Signing in when the server asks (None: off; a 401 is reported as it is).
    pub oauth: Option<switchyard_oauth::Settings>,
}
