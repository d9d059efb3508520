//! What the policy chain decides for one request, in plain Rust types shared by policy and engine.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;

/// MCP tool annotation hints (spec `ToolAnnotations`). `None` means "not said".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Hints {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
    pub open_world: Option<bool>,
    pub title: Option<String>,
}

impl Hints {
    /// Read-only as a client would judge it: the spec default for `readOnlyHint` is false.
    pub fn is_read_only(&self) -> bool {
        self.read_only == Some(true)
    }

    /// Idempotent as a client would judge it; read-only tools are idempotent by definition.
    pub fn is_idempotent(&self) -> bool {
        self.idempotent == Some(true) || self.is_read_only()
    }
}

/// How a call may overlap other calls on the same server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Concurrency {
    /// Runs alongside every other shared call.
    Shared,
    /// Waits until the server's in-flight calls drain; nothing else starts while it runs.
    Exclusive,
    /// Exclusive only against calls that share at least one key (e.g. a file path).
    Keyed(BTreeSet<String>),
}

impl Concurrency {
    /// Its kind, as metrics label it and the audit log writes it (`keyed` without the keys).
    pub fn kind(&self) -> &'static str {
        match self {
            Concurrency::Shared => "shared",
            Concurrency::Exclusive => "exclusive",
            Concurrency::Keyed(_) => "keyed",
        }
    }
}

/// Retry rule for transport failures and timeouts. `attempts` counts retries, not the first try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub attempts: u32,
    pub backoff_ms: u32,
}

/// The decision so far; `None` fields fall back to the host defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    pub concurrency: Option<Concurrency>,
    pub pool: Option<String>,
    pub timeout_ms: Option<u64>,
    pub retry: Option<Retry>,
    /// Which instances of the pool run the call (None: shared).
    pub placement: Option<Placement>,
}

/// Which instances of a pool run one call. The server's `share` says which clients may share an
/// instance at all; a placement narrows that for one call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Any instance of the pool.
    Shared,
    /// Instances of the calling client's own (its name, project and token).
    Client,
    /// Instances of the calling session's own, stopped when it ends.
    Session,
    /// Instances of their own for every call placed under this key.
    Key(String),
}

impl Placement {
    /// How the decision is written for people (`plugin check`, logs).
    pub fn describe(&self) -> String {
        match self {
            Placement::Shared => "shared".into(),
            Placement::Client => "client".into(),
            Placement::Session => "session".into(),
            Placement::Key(k) => format!("key({k})"),
        }
    }
}

/// What carries a client's session to switchyard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Transport {
    /// The client started switchyard itself (`switchyard run`), over its stdin and stdout.
    #[default]
    Stdio,
    /// The daemon's Unix socket (`switchyard connect`, which a wrapped client starts).
    Socket,
    /// The daemon's Streamable HTTP front.
    Http,
}

impl Transport {
    /// From the first part of a session's label (`stdio`, `unix`, `pipe` for Windows' named
    /// pipe, `http`).
    pub fn of_label(label: &str) -> Transport {
        match label.split('-').next().unwrap_or_default() {
            "unix" | "pipe" => Transport::Socket,
            "http" => Transport::Http,
            _ => Transport::Stdio,
        }
    }

    /// Its name in recorded calls, `plugin check` and the audit log.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Socket => "socket",
            Transport::Http => "http",
        }
    }
}

/// Who is calling: what a policy of `switchyard:policy@0.2.0` is told about the client. Every
/// call of a session is told it, so it is cheap to clone (its texts are shared).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Caller {
    /// `clientInfo.name` of the client's initialize, when it gave one.
    pub name: Option<Arc<str>>,
    /// `clientInfo.version`, when it gave one.
    pub version: Option<Arc<str>>,
    pub transport: Transport,
    /// The project directory `switchyard connect` ran in, when known.
    pub dir: Option<Arc<str>>,
    /// The name of the `[http.tokens]` entry whose token the HTTP front was sent, when one was.
    pub token: Option<Arc<str>>,
    /// The protocol version the client speaks (its initialize's, or a 2026-07-28-era
    /// request's own); empty before it said one.
    pub era: Arc<str>,
}

/// The task a request is about (a task's get, result, cancel or update).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskRef {
    /// The task id the client sent (the one switchyard handed it, not the server's own).
    pub id: String,
    /// The server's name of the tool whose call created the task; None once switchyard no
    /// longer holds the task (past its time to live).
    pub tool: Option<String>,
}

/// What the chain is told about one request. Its texts are shared with the server, the session
/// and the call's other stages, so that telling it costs a request little.
#[derive(Debug, Clone)]
pub struct CallInfo {
    pub server: Arc<str>,
    /// The session's label (`stdio-1`).
    pub session: Arc<str>,
    /// Who sent it.
    pub caller: Caller,
    /// Borrowed for MCP's own methods, owned for any other a client sends.
    pub method: Cow<'static, str>,
    /// `params.name` for `tools/call`.
    pub tool: Option<Arc<str>>,
    /// `params.arguments` as JSON text, for `tools/call`.
    pub arguments: Option<String>,
    /// The annotations the server declared for the tool (all `None` when unknown).
    pub declared: Hints,
    /// 0 for the first try, 1 for the first retry, ...
    pub attempt: u32,
    /// The task the request is about, for a request about one task.
    pub task: Option<TaskRef>,
}

/// A plugin said no: the client is told which plugin and why (a tool result for `tools/call`,
/// else a JSON-RPC error; see `error::refusal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub plugin: String,
    pub reason: String,
    /// When the call would be allowed again: the plugin refused it after the host told it that
    /// one of its rate limits (`host.take`) was used up, and the limit frees a token then.
    pub retry_after: Option<std::time::Duration>,
}

impl Rejection {
    /// A refusal that says nothing of when to try again.
    pub fn new(plugin: impl Into<String>, reason: impl Into<String>) -> Rejection {
        Rejection { plugin: plugin.into(), reason: reason.into(), retry_after: None }
    }
}
