//! What `connect`, `status` and `stop` say to a router over its Unix socket, besides MCP.
//!
//! A connection opens with one hello line from the client and one reply line from the router;
//! both are JSON objects tagged by a `"switchyard"` key, which no JSON-RPC message has. After a
//! `connect` is welcomed, the connection carries the client's MCP session as newline-delimited
//! JSON-RPC, except for control lines from the router (again tagged `"switchyard"`), which
//! `connect` acts on and never passes to its client.
//!
//! A client that sends no hello (a raw socket client, or `connect` of an older version) joins
//! the router's only server, when it has exactly one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The first line a client sends. Debug shows the names of `env`, never its values.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "switchyard", rename_all = "snake_case")]
pub enum Hello {
    /// Join server `server` (None: the router's only server) as one more session.
    Connect {
        server: Option<String>,
        /// The client's switchyard version, to tell a user whose daemon is older than the binary.
        version: String,
        /// Values for the server's `client_env`, read by `connect` from its own environment
        /// (`--env NAME,...`); sent again on every reconnect. Absent in hellos of older clients.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
        /// The directory `connect` runs in (the client's project): with `share = "client"` a
        /// client's instances are its own, by client name and this directory.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dir: Option<String>,
        /// `connect` offers to hand its stdin and stdout to the router (see the `handoff` module).
        /// Absent (false) in hellos of older clients.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        handoff: bool,
        /// Join group `group` instead of one server (`connect --group NAME`); `server` is None
        /// then. Absent in hellos of older clients.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
    },
    /// One status snapshot, then the router closes the connection.
    Status,
    /// Stop the router: its servers are stopped and it exits.
    Stop,
}

impl std::fmt::Debug for Hello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hello::Connect { server, version, env, dir, handoff, group } => f
                .debug_struct("Connect")
                .field("server", server)
                .field("group", group)
                .field("version", version)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("dir", dir)
                .field("handoff", handoff)
                .finish(),
            Hello::Status => f.write_str("Status"),
            Hello::Stop => f.write_str("Stop"),
        }
    }
}

/// The router's lines to a client that said hello.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "switchyard", rename_all = "snake_case")]
pub enum Reply {
    /// The session is open: MCP follows, or, with `handoff`, the client's descriptors (see
    /// the `handoff` module). A router older than the hand-off never says `handoff`.
    Welcome {
        server: String,
        version: String,
        pid: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        handoff: bool,
    },
    /// Nothing follows; the router closes the connection. `error` says why and what to do.
    Refused { error: String },
    /// The answer to [`Hello::Status`].
    Status { status: serde_json::Value },
    /// The answer to [`Hello::Stop`]: the router stops now; the connection closes when it is gone.
    Stopping { pid: u32 },
    /// On a live session: the server's configuration changed. The session goes on serving (on
    /// the server as it was); at its first moment with no request in flight, the client should
    /// close this connection and connect again (replaying its initialize) to reach the server
    /// as now configured. Until then everything still goes on this connection.
    Drain { reason: String },
    /// On a handed-off session: it ended (the client closed its input or stopped reading, or,
    /// with `reason`, the router ended it); `connect` exits.
    Ended {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// On a handed-off session: the router let go of the client's descriptors with nothing in
    /// flight, and `connect` carries the session on from the journal (`reason` says why).
    Handback { reason: String },
}

/// Whether a line is a switchyard control line rather than JSON-RPC: a JSON object whose first
/// key is `"switchyard"` (as [`Hello`] and [`Reply`] serialise). Cheap: no parse.
pub fn is_control(line: &str) -> bool {
    line.trim_start().strip_prefix('{').is_some_and(|rest| rest.trim_start().starts_with("\"switchyard\""))
}

/// One line, with its newline.
pub fn line<T: Serialize>(message: &T) -> String {
    let mut s = serde_json::to_string(message).expect("wire messages always serialise");
    s.push('\n');
    s
}

/// Parses a hello; `None` for anything that is not one (an MCP message, say).
pub fn hello(line: &str) -> Option<Result<Hello, String>> {
    if !is_control(line) {
        return None;
    }
    // The line is not repeated in the error: a connect hello may carry a client's secrets.
    Some(serde_json::from_str(line.trim()).map_err(|e| {
        let kind = serde_json::from_str::<serde_json::Value>(line.trim())
            .ok()
            .and_then(|v| v["switchyard"].as_str().map(|k| format!(" `{}`", k.chars().take(32).collect::<String>())))
            .unwrap_or_default();
        format!("a switchyard hello{kind} this router does not understand ({e})")
    }))
}

/// Parses a router's reply or control line.
pub fn reply(line: &str) -> Result<Reply, String> {
    serde_json::from_str(line.trim()).map_err(|e| format!("unexpected line from the router ({e}): {}", line.trim()))
}

/// The id prefix of the requests `connect` makes itself when it replays a session on a new
/// connection (or router): their answers are `connect`'s, never the client's.
pub const REPLAY_ID: &str = "switchyard-replay-";

/// Whether a raw JSON id is one of a replay's.
pub fn is_replay_id(raw: &str) -> bool {
    raw.strip_prefix('"').is_some_and(|r| r.starts_with(REPLAY_ID))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_lines_are_told_from_json_rpc_by_their_first_key() {
        let h = line(&Hello::Connect {
            server: Some("fs".into()),
            version: "0.1.0".into(),
            env: BTreeMap::new(),
            dir: None,
            handoff: false,
            group: None,
        });
        assert!(is_control(&h));
        assert!(!h.contains("handoff"), "no offer is left out, as older hellos have it: {h}");
        assert!(!h.contains("env"), "an empty env is left out, as older hellos have it: {h}");
        assert_eq!(
            hello(&h),
            Some(Ok(Hello::Connect {
                server: Some("fs".into()),
                version: "0.1.0".into(),
                env: BTreeMap::new(),
                dir: None,
                handoff: false,
                group: None,
            }))
        );
        assert!(is_control(&line(&Reply::Drain { reason: "x".into() })));
        assert!(!is_control(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#));
        // A JSON-RPC message carrying a "switchyard" key somewhere else is still JSON-RPC.
        assert!(!is_control(r#"{"jsonrpc":"2.0","method":"x","params":{"switchyard":1}}"#));
        assert_eq!(hello(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), None);
        assert!(matches!(hello(r#"{"switchyard":"dance"}"#), Some(Err(e)) if e.contains("does not understand")));
        assert_eq!(reply(r#"{"switchyard":"stopping","pid":7}"#), Ok(Reply::Stopping { pid: 7 }));
        assert_eq!(hello(r#" {"switchyard":"status"}"#), Some(Ok(Hello::Status)));
    }

    #[test]
    fn a_hello_carries_client_values_that_debug_and_errors_never_show() {
        let env = BTreeMap::from([("TOKEN".to_string(), "s3cr3t".to_string())]);
        let h = Hello::Connect {
            server: Some("fs".into()),
            version: "0.1.0".into(),
            env,
            dir: Some("/w".into()),
            handoff: false,
            group: None,
        };
        let text = line(&h);
        assert_eq!(hello(&text), Some(Ok(h.clone())));
        assert!(!format!("{h:?}").contains("s3cr3t") && format!("{h:?}").contains("TOKEN"));
        // A hello this router cannot read is refused without being repeated.
        let bad = r#"{"switchyard":"connect","server":"fs","version":1,"env":{"TOKEN":"s3cr3t"}}"#;
        let Some(Err(e)) = hello(bad) else { panic!("parsed: {bad}") };
        assert!(!e.contains("s3cr3t") && e.contains("`connect`"), "{e}");
    }
}
