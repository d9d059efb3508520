//! The facts of the MCP specification that switchyard relies on, stated once: the protocol
//! versions it serves and the era each belongs to, the Streamable HTTP header names and the
//! `_meta` keys of the stateless era. No dependencies, so every crate can name them.

#![forbid(unsafe_code)]

/// Protocol versions and their eras.
pub mod version {
    /// The versions of the initialize era switchyard serves (a session begins with `initialize`),
    /// oldest first. 2024-10-07 is not a released version, but the TypeScript SDK still sends it.
    pub const SESSION_ERA: &[&str] = &["2024-10-07", "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

    /// The newest version of the initialize era: what a server of that era is told a client of
    /// the stateless era would need instead.
    pub const LATEST_SESSION: &str = "2025-11-25";

    /// The first version of the stateless era: no `initialize`, no session; every request carries
    /// its version and the client's capabilities in `_meta`.
    pub const STATELESS_ERA: &str = "2026-07-28";

    /// The versions of the stateless era switchyard serves.
    pub const STATELESS: &[&str] = &["2026-07-28"];

    /// The newest version of the stateless era: what switchyard asks a server for until a client
    /// names another.
    pub const LATEST_STATELESS: &str = "2026-07-28";

    /// Whether `v` has the form of a protocol version (`YYYY-MM-DD`).
    pub fn is_dated(v: &str) -> bool {
        v.len() == 10
            && v.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() })
    }

    /// Whether `v` is a version of the stateless era, served or not (a later one is too).
    pub fn is_stateless(v: &str) -> bool {
        is_dated(v) && v >= STATELESS_ERA
    }

    /// Every version switchyard serves, both eras, oldest first.
    pub fn served() -> impl Iterator<Item = &'static str> {
        SESSION_ERA.iter().chain(STATELESS).copied()
    }
}

/// Header names of the Streamable HTTP transport, lower case (as `http` stores them).
pub mod header {
    /// The session a request belongs to (initialize era).
    pub const SESSION_ID: &str = "mcp-session-id";
    /// The protocol version of the request.
    pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
    /// The request's method (stateless era).
    pub const METHOD: &str = "mcp-method";
    /// The tool, resource or prompt a request names (stateless era; may be `=?base64?...?=`).
    pub const NAME: &str = "mcp-name";
    /// The last SSE event a resuming client saw.
    pub const LAST_EVENT_ID: &str = "last-event-id";

    /// The headers of the protocol itself: switchyard sets them, a configured header may not.
    pub const PROTOCOL: &[&str] = &[SESSION_ID, PROTOCOL_VERSION, METHOD, NAME, LAST_EVENT_ID];
}

/// Keys of a stateless-era request's `params._meta`.
pub mod meta {
    /// The request's protocol version.
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// The client's capabilities (required on every request).
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// On every notification of a `subscriptions/listen` stream, its acknowledgement included:
    /// the JSON-RPC id of that listen request (so a client correlates them, on stdio too).
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
    /// Who sent the request (`name`, `version`): a stateless-era client has no initialize to say so.
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// The W3C trace context of the request (`_meta` keys the 2026-07-28 revision reserves).
    pub const TRACEPARENT: &str = "traceparent";
    pub const TRACESTATE: &str = "tracestate";
}

#[cfg(test)]
mod tests {
    use super::version::*;

    #[test]
    fn the_eras_meet_where_the_stateless_era_begins() {
        assert!(SESSION_ERA.iter().all(|v| is_dated(v) && !is_stateless(v)));
        assert!(STATELESS.iter().all(|v| is_stateless(v)));
        assert!(SESSION_ERA.windows(2).all(|w| w[0] < w[1]), "oldest first");
        assert_eq!(SESSION_ERA.last(), Some(&LATEST_SESSION));
        assert_eq!(STATELESS.last(), Some(&LATEST_STATELESS));
        assert_eq!(STATELESS.first(), Some(&STATELESS_ERA));
        assert!(is_stateless("2027-01-01") && !is_stateless("x") && !is_stateless("2026-7-28"));
        assert_eq!(served().count(), SESSION_ERA.len() + STATELESS.len());
    }
}
