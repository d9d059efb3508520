//! The audit log: one JSON line for each request that reached the policy (and each refusal),
//! written when the call ends: who asked, which server and instance ran it, what the plugins
//! decided, how long it waited and how it ended. [`Record`] is that line; [`AuditLog`] writes
//! lines through a bounded queue to a thread of its own into a size-rotated file.
//!
//! A record never holds a token, a header or an environment value: the client is named by what
//! it says of itself and by the name of the `[http.tokens]` entry it used; a call's arguments
//! appear as their SHA-256 only, unless the config asks for the arguments themselves.

mod arguments;
mod file;
mod json;
mod queue;
pub mod time;
mod writer;

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::metrics::Outcome;
pub use arguments::{ARGUMENTS_DEPTH, LeftOut, arguments_of, depth, lossy};
pub use file::{numbered, same_file};
#[doc(hidden)]
pub use queue::Queue;
pub use writer::{AuditLog, Deferred, Losses, MAX_LINE, Refused, Settings, Ticket};

/// One call, as the audit log keeps it (one JSON object per line). Its texts are shared with
/// the call (`Arc<str>`) or fixed words (`Cow<'static, str>`), so recording a call copies few.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// When the call ended, RFC 3339 in UTC.
    pub time: String,
    /// The W3C trace id of the call's span, when the call is traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    pub client: Client,
    /// The session's label (`unix-4`, `http-7`, `stdio-1`).
    pub session: Arc<str>,
    /// The server by its name in the config.
    pub server: Arc<str>,
    /// The instance that ran the call's last attempt (`NAME#N`), when one was reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    pub method: Cow<'static, str>,
    /// The tool of a `tools/call`, by the server's name for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<Arc<str>>,
    /// SHA-256 of `params.arguments` as the client sent them (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_sha256: Option<String>,
    /// The arguments themselves, only with `[audit] arguments = true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// What the policy decided for the last attempt, with the host's defaults and limits applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decided>,
    /// The plugins of the chain that judged the call, in chain order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginRef>,
    /// The plugin that refused the call (`switchyard` for a refusal of the host's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_by: Option<String>,
    /// What content hooks did to the call's params or result, one entry per hook that did
    /// more than pass it on (or, in audit mode, would have).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookNote>,
    #[serde(default)]
    pub wait_ms: Waits,
    pub outcome: Ended,
    /// Attempts sent or tried (0: refused before any).
    pub attempts: u32,
    pub duration_ms: f64,
    /// The client's request line and the answer it got, in bytes (0: no answer).
    pub request_bytes: u64,
    pub response_bytes: u64,
}

/// Who called.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Client {
    /// `clientInfo.name` and `.version`, as the client gave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Arc<str>>,
    /// `stdio`, `socket` or `http`.
    pub transport: Cow<'static, str>,
    /// The project directory `switchyard connect` ran in, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<Arc<str>>,
    /// The server's label for the instances serving this client's profile (`NAME~2` for a
    /// client whose roots or capabilities differ from the first one's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The name of the `[http.tokens]` entry the client used (never the token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<Arc<str>>,
}

/// A decision as the call ran with it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Decided {
    /// `shared`, `exclusive` or `keyed`.
    pub concurrency: Cow<'static, str>,
    /// How many gate keys a keyed call held (the keys may be paths; they are not written).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub keys: usize,
    pub pool: Cow<'static, str>,
    pub timeout_ms: u64,
    /// Retries a plugin asked for (None: the host's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<u32>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A plugin by its file name and the SHA-256 of the file that ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginRef {
    pub name: String,
    pub sha256: String,
}

/// What one plugin's content hook did, or in audit mode would have done, to a call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HookNote {
    pub plugin: String,
    /// `request` or `result`.
    pub phase: String,
    /// `modify`, `deny`, or `failed` (it could not answer: trap, deadline, payload too large).
    pub verdict: String,
    /// `enforce` (applied) or `audit` (logged only).
    pub mode: String,
}

/// Time a call spent waiting, in milliseconds, over all its attempts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Waits {
    /// For an instance of the pool.
    pub queue: f64,
    /// For the server's concurrency gate.
    pub gate: f64,
}

/// How a call ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ended {
    /// `ok`, `error` (a JSON-RPC error), `tool_error` (`isError: true`), `rejected` (it did not
    /// run), `withheld` (it ran; a plugin withheld its result), `timeout`, `cancelled`, `lost`
    /// (its instance died or its link was lost), `shutting_down`.
    pub result: Cow<'static, str>,
    /// The tool's result said `isError: true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// The JSON-RPC error code the client got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timeout: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
    /// The request reached the server and no answer came back: it may or may not have run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unknown: bool,
}

impl Ended {
    /// How a call that ended with `outcome` (and `code`) is written; `sent`: it reached an
    /// instance, so a call lost with its link may have run.
    pub fn of(outcome: Outcome, code: Option<i64>, sent: bool) -> Ended {
        Ended {
            result: Cow::Borrowed(outcome.label()),
            is_error: outcome == Outcome::ToolError,
            code,
            timeout: outcome == Outcome::Timeout,
            cancelled: outcome == Outcome::Cancelled,
            unknown: sent && matches!(outcome, Outcome::Lost | Outcome::ShuttingDown | Outcome::Timeout),
        }
    }

    /// Whether the call failed: anything but `ok` (a tool's own error included).
    pub fn failed(&self) -> bool {
        self.result != "ok"
    }
}

/// SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    crate::ids::hex(&sha256(bytes))
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

impl Record {
    /// The record as one line of JSON (no newline).
    pub fn line(&self) -> String {
        let mut out = Vec::with_capacity(512);
        self.write_line(&mut out, None);
        String::from_utf8(out).expect("a record's line is its texts' UTF-8 and ASCII")
    }

    /// Appends the record as one line of JSON (no newline) to `out`, with what `deferred` fills
    /// in (the time, the arguments' hash) when given: the bytes `serde_json::to_writer` writes
    /// for the record so filled, written by hand (the audit writer does this for every call).
    pub fn write_line(&self, out: &mut Vec<u8>, deferred: Option<&Deferred>) {
        json::write_record(out, self, deferred);
    }
}

#[cfg(test)]
mod tests;
