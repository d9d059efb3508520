//! `[limits]`: the router's timeouts and sizes, and a server's own over the file's.

use anyhow::bail;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Deadline of a call when the policy sets none.
    pub call_timeout_ms: u64,
    /// No decision may set a longer deadline; progress extends a deadline up to this.
    pub max_call_timeout_ms: u64,
    /// No decision may ask for more retries than this.
    pub max_retries: u32,
    /// No decision may ask for a longer backoff than this.
    pub max_backoff_ms: u32,
    /// Largest JSON-RPC message accepted from a client or a server, in bytes.
    pub max_message_bytes: usize,
    /// Output waiting for all clients together, at most: past it, a session whose client is
    /// behind (more than 4 x max_message_bytes waiting) is closed at once.
    pub max_buffered_bytes: usize,
    /// How long `server/discover` may take upstream before it is answered -32601.
    pub discover_timeout_ms: u64,
    /// How long spawning and initialising an instance may take.
    pub init_timeout_ms: u64,
    /// Ping idle instances this often (0 = never).
    pub health_interval_ms: u64,
    /// An instance that does not answer a health ping within this is recycled.
    pub health_timeout_ms: u64,
    /// A remote server: how long opening a connection (TCP and TLS) may take.
    pub connect_timeout_ms: u64,
    /// A remote legacy SSE server: how long a POST of one message may take to be accepted.
    pub post_timeout_ms: u64,
    /// A remote server: how long a call may wait with nothing from its link before the link is
    /// probed on a fresh connection (0 = never). A link that fails the probe is replaced; one
    /// that passes it carries on (the call is a slow one, bounded by its own deadline).
    pub liveness_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            call_timeout_ms: 300_000,
            max_call_timeout_ms: 3_600_000,
            max_retries: 5,
            max_backoff_ms: 30_000,
            max_message_bytes: 64 * 1024 * 1024,
            max_buffered_bytes: 512 * 1024 * 1024,
            discover_timeout_ms: 1_000,
            init_timeout_ms: 60_000,
            health_interval_ms: 30_000,
            health_timeout_ms: 10_000,
            connect_timeout_ms: 10_000,
            post_timeout_ms: 10_000,
            liveness_ms: 10_000,
        }
    }
}

/// A server's own `[servers.NAME.limits]`: only the keys it gives, each over the file's `[limits]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsPatch {
    pub call_timeout_ms: Option<u64>,
    pub max_call_timeout_ms: Option<u64>,
    pub max_retries: Option<u32>,
    pub max_backoff_ms: Option<u32>,
    pub max_message_bytes: Option<usize>,
    pub max_buffered_bytes: Option<usize>,
    pub discover_timeout_ms: Option<u64>,
    pub init_timeout_ms: Option<u64>,
    pub health_interval_ms: Option<u64>,
    pub health_timeout_ms: Option<u64>,
    pub connect_timeout_ms: Option<u64>,
    pub post_timeout_ms: Option<u64>,
    pub liveness_ms: Option<u64>,
}

impl LimitsPatch {
    /// `base` with the keys given here in place of its own. Written as a struct literal so that
    /// a key added to [`Limits`] does not compile until it can be overridden here too.
    pub fn over(&self, base: &Limits) -> Limits {
        Limits {
            call_timeout_ms: self.call_timeout_ms.unwrap_or(base.call_timeout_ms),
            max_call_timeout_ms: self.max_call_timeout_ms.unwrap_or(base.max_call_timeout_ms),
            max_retries: self.max_retries.unwrap_or(base.max_retries),
            max_backoff_ms: self.max_backoff_ms.unwrap_or(base.max_backoff_ms),
            max_message_bytes: self.max_message_bytes.unwrap_or(base.max_message_bytes),
            max_buffered_bytes: self.max_buffered_bytes.unwrap_or(base.max_buffered_bytes),
            discover_timeout_ms: self.discover_timeout_ms.unwrap_or(base.discover_timeout_ms),
            init_timeout_ms: self.init_timeout_ms.unwrap_or(base.init_timeout_ms),
            health_interval_ms: self.health_interval_ms.unwrap_or(base.health_interval_ms),
            health_timeout_ms: self.health_timeout_ms.unwrap_or(base.health_timeout_ms),
            connect_timeout_ms: self.connect_timeout_ms.unwrap_or(base.connect_timeout_ms),
            post_timeout_ms: self.post_timeout_ms.unwrap_or(base.post_timeout_ms),
            liveness_ms: self.liveness_ms.unwrap_or(base.liveness_ms),
        }
    }
}

impl Limits {
    /// Values that would make the router misbehave.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        let l = self;
        if l.call_timeout_ms == 0 || l.max_call_timeout_ms < l.call_timeout_ms {
            bail!(
                "limits: call_timeout_ms ({}) must be above 0 and at most max_call_timeout_ms ({})",
                l.call_timeout_ms,
                l.max_call_timeout_ms
            );
        }
        if l.connect_timeout_ms == 0 || l.post_timeout_ms == 0 {
            bail!("limits: connect_timeout_ms and post_timeout_ms must be above 0");
        }
        if l.liveness_ms != 0 && l.liveness_ms < 500 {
            bail!("limits: liveness_ms ({}) must be 0 (off) or at least 500", l.liveness_ms);
        }
        if l.max_message_bytes < 1024 {
            bail!("limits: max_message_bytes must be at least 1024");
        }
        if l.max_buffered_bytes < l.max_message_bytes {
            bail!(
                "limits: max_buffered_bytes ({}) must be at least max_message_bytes ({})",
                l.max_buffered_bytes,
                l.max_message_bytes
            );
        }
        Ok(())
    }
}
