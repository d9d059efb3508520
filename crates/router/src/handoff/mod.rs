//! The hand-off (Linux): `connect` gives the router its client's stdin and stdout, so that the router
//! reads and writes the client's pipes itself and `connect` stays out of the message path.
//!
//! Relayed, every message crosses one more process (client -> connect -> router and back): two
//! more wake-ups and four more system calls per call. Handed off, a session through `connect`
//! costs what one through `switchyard run` costs.
//!
//! How it goes: the hello offers the hand-off (`Hello::Connect { handoff: true }`) when connect's
//! stdin and stdout are pipes or Unix stream sockets; a router that takes it says so in its
//! welcome, and connect sends, with one byte over the socket (`SCM_RIGHTS`), four descriptors:
//! the client's two (a pipe as an open description of connect's own), and two memfds that make
//! the journal ([`journal`]). From then on connect only waits on the socket, and the router
//! serves the session on the client's descriptors ([`serve`]).
//!
//! The router writes to the client in writes of at most 4 KiB, which the kernel never splits, so
//! the client's output never stops in the middle of a line, whatever happens to the router. A
//! longer line goes through connect, which writes it whole and says `.`; the router writes on
//! once it did.
//!
//! What each side promises:
//! - connect dies (SIGTERM, kill -9): the router sees the socket close and lets go of the pipes
//!   at once, so the client sees its output close as it would have; the server goes on.
//! - The client closes its input, or stops reading: the session ends as any session does, the
//!   router says [`Reply::Ended`](crate::control::Reply::Ended) and connect exits.
//! - The router must let go of a live session (its server's configuration changed, or it is
//!   stopping): at a moment when no request is in flight it stops reading and says
//!   [`Reply::Handback`](crate::control::Reply::Handback); connect reads the journal and carries
//!   the session on itself (relayed, with its set-up replayed to the router as now configured).
//! - The router dies: the socket closes without a word; connect reads the journal, which holds
//!   what the router had read and not yet taken up, the requests it had taken up and not yet
//!   answered, whether it was in the middle of writing a line, and the session's set-up. Each
//!   request taken up gets an error (it may have run; it is never sent again), what was not taken
//!   up is sent on, and the session is set up again on a new router.
//!
//! The journal is written with plain stores into shared memory, never a system call, so it costs
//! the message path next to nothing; it is read only once the router has let go.
//!
//! macOS and Windows relay every session (no memfd there, and Windows passes no descriptors);
//! what a relay needs of this module (the session's [`Memory`] and the id helpers) is built on
//! every OS.

#[cfg(target_os = "linux")]
mod fds;
#[cfg(target_os = "linux")]
pub mod journal;
#[cfg(target_os = "linux")]
pub mod serve;

#[cfg(target_os = "linux")]
pub use fds::*;
#[cfg(target_os = "linux")]
pub use journal::{Recovered, recover};

use serde::{Deserialize, Serialize};
use switchyard_core::codec::{self, Kind};

/// What a client set up in its session, for replay on a new connection.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// The client's `initialize` request, as sent.
    pub initialize: Option<String>,
    pub initialized: bool,
    /// The params of the latest `logging/setLevel`.
    pub level: Option<String>,
    /// Subscribed resource URIs, in order.
    pub subscribed: Vec<String>,
    /// The lists the client asked for (`tools/list`, `prompts/list`,
    /// `resources/templates/list`), first asked first: a policy may show a client a tool under
    /// another name, and the router learns which from the list it showed, so a new router is
    /// shown the lists again before the client's next call under such a name.
    pub listed: Vec<String>,
}

/// The list methods whose answers may rename what a client calls (see [`Memory::listed`]).
const LISTS: [&str; 3] = ["tools/list", "prompts/list", "resources/templates/list"];

impl Memory {
    /// Takes note of one message (not a batch) of the client's. True when something changed.
    pub fn note(&mut self, message: &str, env: &codec::Envelope) -> bool {
        let params = env.params.as_ref();
        match (env.kind, env.method.as_deref()) {
            (Kind::Request, Some("initialize")) => self.initialize = Some(message.to_string()),
            (Kind::Notification, Some("notifications/initialized")) if !self.initialized => self.initialized = true,
            (Kind::Request, Some("logging/setLevel")) => self.level = params.map(|p| message[p.clone()].to_string()),
            (Kind::Request, Some(m)) if LISTS.contains(&m) => {
                if self.listed.iter().any(|l| l == m) {
                    return false;
                }
                self.listed.push(m.to_string());
            }
            (Kind::Request, Some(m @ ("resources/subscribe" | "resources/unsubscribe"))) => {
                let Some(uri) = params.and_then(|p| codec::param_fields(message, p).uri) else { return false };
                self.subscribed.retain(|u| *u != uri);
                if m == "resources/subscribe" {
                    self.subscribed.push(uri);
                }
            }
            _ => return false,
        }
        true
    }

    /// Whether a line may hold something [`Memory::note`] keeps: a cheap test before a parse.
    pub fn may_note(line: &str) -> bool {
        ["initialize", "logging/setLevel", "resources/", "tools/list", "prompts/list"].iter().any(|m| line.contains(m))
    }
}

pub use crate::control::{REPLAY_ID, is_replay_id};

impl Memory {
    /// The lines, each with its newline, that set the client's session up again on a new
    /// router. `own(method)` gives each request of the replay its raw id (of [`REPLAY_ID`]).
    pub fn replay(&self, mut own: impl FnMut(&str) -> String) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(init) = &self.initialize
            && let Ok(env) = codec::parse(init)
            && let Some(span) = env.id
        {
            let id = own("initialize");
            lines.push(codec::splice(init, span, &id));
        }
        if self.initialized {
            lines.push(codec::notification("notifications/initialized", "{}"));
        }
        if let Some(params) = &self.level {
            let id = own("logging/setLevel");
            lines.push(codec::request(&id, "logging/setLevel", params));
        }
        for uri in &self.subscribed {
            let id = own("resources/subscribe");
            let params = format!(r#"{{"uri":{}}}"#, codec::json_string(uri));
            lines.push(codec::request(&id, "resources/subscribe", &params));
        }
        // Its first page: where a later page renamed something, the client's next list of it
        // teaches the router the rest.
        for method in &self.listed {
            let id = own(method);
            lines.push(codec::request(&id, method, "{}"));
        }
        for line in &mut lines {
            line.push('\n');
        }
        lines
    }
}

/// The answers owed for requests a router took up and can no longer answer (`open`, of which
/// `batches` came in batches, each answered as one array, as the router would have): an error
/// saying `why` and that the call may have run. Replayed requests are `connect`'s, and skipped.
pub fn lost_answers(why: &str, open: &[String], batches: &[Vec<String>]) -> Vec<String> {
    let msg = format!("{why}; this call's outcome is unknown");
    let error = |id: &str| codec::response_error(id, codec::INTERNAL_ERROR, &msg, None);
    let mut single: std::collections::BTreeSet<&str> =
        open.iter().map(String::as_str).filter(|id| !is_replay_id(id)).collect();
    let mut lines = Vec::new();
    for batch in batches {
        let errors: Vec<String> = batch.iter().filter(|id| single.remove(id.as_str())).map(|id| error(id)).collect();
        if !errors.is_empty() {
            lines.push(format!("[{}]", errors.join(",")));
        }
    }
    lines.extend(single.into_iter().map(error));
    lines
}

/// Calls `f` with each message of a line (each element of a batch) that parses.
pub fn for_each_message(text: &str, mut f: impl FnMut(&str, &codec::Envelope)) {
    let text = text.trim();
    let items = if codec::is_batch(text) { codec::split_batch(text).unwrap_or_default() } else { vec![text] };
    for m in items {
        if let Ok(env) = codec::parse(m) {
            f(m, &env);
        }
    }
}

/// Ids (raw JSON) of the requests in one line from the client, and whether it is a batch.
pub fn request_ids(line: &[u8]) -> (Vec<String>, bool) {
    let batch = std::str::from_utf8(line).is_ok_and(|t| codec::is_batch(t.trim()));
    (ids_of(line, Kind::Request), batch)
}

/// Ids (raw JSON) of the responses in one line to the client.
pub fn response_ids(line: &[u8]) -> Vec<String> {
    ids_of(line, Kind::Response)
}

fn ids_of(line: &[u8], kind: Kind) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(text) = std::str::from_utf8(line) {
        for_each_message(text, |m, env| {
            if env.kind == kind
                && let Some(r) = env.id.clone()
            {
                out.push(m[r].to_string());
            }
        });
    }
    out
}

/// The request ids a line of the client's cancels (`notifications/cancelled`).
pub fn cancelled_ids(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !text.contains("notifications/cancelled") {
        return out;
    }
    for_each_message(text, |m, env| {
        if env.method.as_deref() == Some("notifications/cancelled")
            && let Some(span) = env.params.as_ref().and_then(|p| codec::param_fields(m, p).request_id)
        {
            out.push(m[span].to_string());
        }
    });
    out
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
