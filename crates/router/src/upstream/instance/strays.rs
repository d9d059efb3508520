//! What a server sends that names no call: a reply over the size limit, an error with id null,
//! and a log that trails the call it was about.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::{Instance, Pending, Reply};
use switchyard_core::codec;
use switchyard_core::ids::SessionId;

/// How long after a call ended a log of the server is still taken to be about it (servers log
/// a call's last steps after answering it), when no other session's call could have caused it.
pub const LOG_TRAIL: Duration = Duration::from_secs(2);
/// How many ended calls are remembered for [`LOG_TRAIL`] at most.
const TRAIL_KEPT: usize = 64;

/// What an instance keeps for the messages that name no call.
#[derive(Default)]
pub(super) struct Strays {
    /// Errors with id null not yet matched: the calls in flight when each came (by upstream id),
    /// and the error. The server answers every request once, so once all but one of those calls
    /// got their own answer, the one left is the request the error was about.
    unmatched: Mutex<Vec<(Vec<u64>, serde_json::Value)>>,
    /// The sessions whose calls here ended lately, and when.
    ended: Mutex<VecDeque<(SessionId, Instant)>>,
}

impl Strays {
    /// A call of `session` ended.
    pub(super) fn call_ended(&self, session: SessionId) {
        let mut ended = self.ended.lock().expect("lock");
        ended.retain(|(s, at)| *s != session && at.elapsed() < LOG_TRAIL);
        if ended.len() >= TRAIL_KEPT {
            ended.pop_front();
        }
        ended.push_back((session, Instant::now()));
    }

    /// Sessions whose calls ended within [`LOG_TRAIL`].
    pub(super) fn lately(&self) -> Vec<SessionId> {
        let mut ended = self.ended.lock().expect("lock");
        ended.retain(|(_, at)| at.elapsed() < LOG_TRAIL);
        ended.iter().map(|(s, _)| *s).collect()
    }
}

impl Instance {
    /// A message over the size limit was skipped. When it was the reply to a call, that call
    /// fails now with an error saying why, instead of waiting for its timeout.
    pub(super) fn on_too_long(&self, bytes: usize, limit: usize, id: Option<u64>) {
        let entry = id.and_then(|id| self.pending.lock().expect("lock").remove(&id).map(|p| (id, p)));
        let Some((id, p)) = entry else {
            tracing::warn!(
                instance = %self.label,
                "skipped a {bytes}-byte message from the server: over limits.max_message_bytes ({limit}); it answered no call switchyard could identify"
            );
            return;
        };
        let why = format!(
            "server instance {} answered with a {bytes}-byte message, over limits.max_message_bytes ({limit} bytes); switchyard dropped it. Raise the limit if answers this large are expected",
            self.label
        );
        tracing::warn!(instance = %self.label, "{why}");
        self.answer_with_error(id, p, codec::response_error(&id.to_string(), codec::INTERNAL_ERROR, &why, None));
        self.settle_strays();
    }

    /// Resolves a call with an error response made by switchyard (the server's own reply to it
    /// could not be routed).
    fn answer_with_error(&self, id: u64, p: Pending, line: String) {
        match codec::parse(&line) {
            Ok(env) => {
                let _ = p.reply.send(Ok(Reply { line, env }));
            }
            Err(e) => tracing::warn!(instance = %self.label, "could not answer call {id}: {}", e.message()),
        }
    }

    /// An error response with id null: the server could not tell which request it answers. It
    /// answers one of the calls in flight now: the one of them left once the others got their
    /// own answers (at once, with one call in flight).
    pub(super) fn on_null_id_error(&self, line: &str) {
        let error = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("error").cloned())
            .unwrap_or_else(|| serde_json::json!({"code": codec::INTERNAL_ERROR, "message": "error"}));
        let in_flight: Vec<u64> = self.pending.lock().expect("lock").keys().copied().collect();
        if in_flight.is_empty() {
            tracing::warn!(instance = %self.label, "dropped an error response with id null from the server: no call is in flight: {line}");
            return;
        }
        if in_flight.len() > 1 {
            tracing::info!(
                instance = %self.label,
                "the server answered with id null while {} calls were in flight; it goes to the one of them left once the others are answered: {line}",
                in_flight.len()
            );
        }
        self.strays.unmatched.lock().expect("lock").push((in_flight, error));
        self.settle_strays();
    }

    /// Matches errors with id null to the call each is about, where that is clear by now (see
    /// [`Strays::unmatched`]): called whenever a call leaves the in-flight table.
    pub(super) fn settle_strays(&self) {
        let mut unmatched = self.strays.unmatched.lock().expect("lock");
        if unmatched.is_empty() {
            return;
        }
        let mut answers = Vec::new();
        {
            let mut pending = self.pending.lock().expect("lock");
            unmatched.retain_mut(|(calls, error)| {
                calls.retain(|id| pending.contains_key(id));
                match calls.as_slice() {
                    [] => false,
                    [one] => {
                        if let Some(p) = pending.remove(one) {
                            answers.push((*one, p, error.clone()));
                        }
                        false
                    }
                    _ => true,
                }
            });
        }
        drop(unmatched);
        for (id, p, error) in answers {
            tracing::warn!(instance = %self.label, "the server's error with id null is taken as the answer to call {id}, the only one it can be");
            self.answer_with_error(id, p, format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#));
        }
    }
}
