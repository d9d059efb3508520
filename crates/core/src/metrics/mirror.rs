//! Where the MCP conventions' durations go besides the Prometheus registry: an OpenTelemetry
//! meter, when they are exported over OTLP. The telemetry crate sets it once at start; until
//! then (and for good when nothing is exported) reporting costs one load of an empty cell.

use std::sync::OnceLock;

/// Which side of the hop an operation was timed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A client's request to switchyard, to its response (`mcp.server.operation.duration`).
    Server,
    /// One attempt of switchyard's request to a server (`mcp.client.operation.duration`).
    Client,
}

/// One timed operation, with the labels the Prometheus histograms have (bounded the same way).
#[derive(Debug)]
pub struct Operation<'a> {
    pub side: Side,
    pub server: &'a str,
    /// An MCP method, or `other`.
    pub method: &'static str,
    /// The tool label, empty when not a tools/call.
    pub tool: &'a str,
    /// Empty on success.
    pub error_type: &'static str,
    /// `pipe`, `unix` or `tcp`.
    pub transport: &'static str,
    pub seconds: f64,
}

/// What takes the durations the registry records.
pub trait Mirror: Send + Sync {
    fn operation(&self, op: &Operation<'_>);
    /// A client session ended after `seconds` (`mcp.server.session.duration`).
    fn session(&self, transport: &'static str, seconds: f64);
}

static MIRROR: OnceLock<Box<dyn Mirror>> = OnceLock::new();

/// Sends every router's durations to `mirror` too, from now on. Once per process: false when
/// one was set already (it stays).
pub fn mirror_to(mirror: Box<dyn Mirror>) -> bool {
    MIRROR.set(mirror).is_ok()
}

pub(super) fn mirror() -> Option<&'static dyn Mirror> {
    MIRROR.get().map(|m| &**m)
}
