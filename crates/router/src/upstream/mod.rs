//! Upstream: server instances and what carries messages to them.
//!
//! `Instance` (instance.rs) is transport-agnostic: the pending table, id and progress-token
//! rewriting, and "every call gets one answer" when a request or the whole link is lost. A
//! transport (stdio.rs: a child process; the remote ones: HTTP) only moves messages and reports
//! what happened to them through `Inbound`. What the server sends that is not a reply goes to
//! `Events` (implemented by the hub), declared here so this module never names the layers above.

use std::sync::Arc;
use std::time::Duration;

use switchyard_core::codec::Envelope;

pub mod instance;
pub mod remote;
pub mod stdio;
pub mod target;
pub mod transport;

#[cfg(test)]
pub mod fake;

pub use instance::{Applied, Instance, Owners, Reply, Sent, Trace};
pub use stdio::{Spec, StdioConnector};
pub use transport::{Closed, Connector, Ended, Inbound, Lost, Outbound, Transport};

/// Past this many bytes written to an instance and not yet taken by the server, the pool sends
/// it no more calls: a server that stops reading must not make the router buffer without bound.
/// A single larger message still goes, alone, once the backlog is empty.
pub const WRITE_BACKLOG_LIMIT: usize = 1 << 20;

/// Server-initiated traffic that is not a reply to a call. Implemented by the hub.
pub trait Events: Send + Sync + 'static {
    /// A request from the server to a client (sampling, elicitation, roots, ...).
    fn server_request(self: Arc<Self>, from: &Arc<Instance>, line: String, env: Envelope);
    /// A notification other than progress (log messages, list_changed, resources/updated, ...).
    fn server_notification(self: Arc<Self>, from: &Arc<Instance>, line: String, env: Envelope);
    /// How long an abandoned call still owns what its instance sends.
    fn linger(&self) -> Duration;
    /// The instance seems to answer one request at a time: calls sent while another ran took
    /// clearly longer than their kind takes alone (the last one `waited` that much longer), and
    /// no answer ever came out of order (see `instance::overlap`).
    fn answers_one_at_a_time(&self, _from: &Instance, _waited: Duration) {}
}

/// Where a call's progress notifications go (the client's session queue).
pub trait ProgressSink: Send + Sync + 'static {
    fn progress(&self, line: String);
}
