//! A server's log lines that may come once per call or per message (a policy's refusals above
//! all), each logged at most once per period with a count, so that one client cannot push every
//! other line out of the log.

use std::time::Duration;

use super::Server;
use switchyard_core::decision::Rejection;
use switchyard_core::logging::{Hit, KeyedRepeats, Repeats, times};

/// Refusals kept apart in the log at once, per server (by session, call and plugin); a client
/// can make up any number of tool names, and those past this are counted together.
const REFUSAL_KEYS: usize = 256;

/// A server's warnings that may come once per call or per message, each logged at most once
/// per [`Repeated::EVERY`] with a count.
pub struct Repeated {
    /// A policy routed a call to a pool this server does not have.
    pub unknown_pool: Repeats,
    /// A client sent a request's method without an id (a notification named like a request).
    pub request_without_id: Repeats,
    /// A client notification was dropped: the instance it was for has this much unread already.
    pub notification_unread: Repeats,
    /// A plugin refused a call, by session, call and plugin (see [`Server::log_refusal`]).
    refusals: KeyedRepeats,
}

impl Repeated {
    pub const EVERY: Duration = Duration::from_secs(10);

    pub(super) fn new() -> Repeated {
        Repeated {
            unknown_pool: Repeats::new(Self::EVERY),
            request_without_id: Repeats::new(Self::EVERY),
            notification_unread: Repeats::new(Self::EVERY),
            refusals: KeyedRepeats::new(Self::EVERY, REFUSAL_KEYS),
        }
    }
}

impl Server {
    /// Logs that a plugin refused `what` (a method, or "tools/call `NAME`") of `session`: at
    /// info the first time for that session, call and plugin, then at debug, with a line at info
    /// at most every [`Repeated::EVERY`] that counts them. The metrics count every refusal; the
    /// log keeps room for other lines (a client that called a hidden tool in a loop wrote 3,000
    /// lines in 15 s).
    pub fn log_refusal(&self, session: &str, what: &str, rejection: &Rejection) {
        let Rejection { plugin, reason, retry_after } = rejection;
        let after = retry_after.map(|a| format!(" (allowed again in {} ms)", a.as_millis())).unwrap_or_default();
        match self.repeats.refusals.hit(&(session, what, plugin)) {
            Hit::Log(n) => {
                tracing::info!(server = %self.name, session, "{what} rejected by `{plugin}`: {reason}{after}{}", times(n))
            }
            Hit::Crowded(n) => tracing::info!(
                server = %self.name, session,
                "{what} rejected by `{plugin}`: {reason}{after} ({n} refusals since the last line like this one, of more different calls than the log keeps apart)"
            ),
            Hit::Held => {
                tracing::debug!(server = %self.name, session, "{what} rejected by `{plugin}`: {reason}{after}")
            }
        }
    }
}
