//! After a failed attempt: whether the call gets another (by the policy's retry or the host's
//! default), after what backoff.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::resolve::Effective;
use super::{End, Forwarded, Request};
use crate::server::Server;
use crate::server::calls::{Stage, Track};
use switchyard_core::backoff::{Backoff, Jitter};
use switchyard_core::decision::Retry;
use switchyard_core::error::CallError;
use switchyard_core::metrics::{Outcome, RetryReason};

/// A policy retry of nothing: one attempt.
const NO_RETRY: Retry = Retry { attempts: 0, backoff_ms: 0 };
/// What the host does on its own for a call that lost its link and is safe to repeat (or never
/// reached the server): repeats it while the server comes back, backing off (100 ms doubling, at
/// most a second, so a server that is back is used within a second), within the call's first
/// deadline and the server's time to come back.
const HOST_RETRY: Retry = Retry { attempts: 12, backoff_ms: 100 };
/// The longest wait between two of the host's own repeats.
const HOST_BACKOFF_CAP: Duration = Duration::from_secs(1);
/// How long deciding whether a call is safe to repeat may wait for the server's tools/list.
const HINTS_WAIT: Duration = Duration::from_secs(2);
/// How long after a call lost its link (for a link found silent: after it went quiet) the host
/// keeps repeating it while the server comes back (a restart that takes a few seconds), also
/// once the crash-loop guard calls the server down.
pub(super) const RESTART_WAIT: Duration = Duration::from_secs(10);
/// What a link found silent leaves of [`RESTART_WAIT`], however long it was quiet: time for one
/// fresh link. A NAT or sleep kills only the old connection, and a new one answers at once; a
/// path that is still dead is given up when this runs out, not repeated into.
pub(super) const SILENT_REPEAT: Duration = Duration::from_secs(3);

/// What follows a failed attempt.
enum Next {
    /// Another attempt (of at most `of` in all), after `backoff`; `after`: why, for status.
    Retry { backoff: Duration, of: u32, after: String },
    /// No other attempt: the client gets this error.
    GiveUp(String),
}

impl Forwarded<'_> {
    /// Attempt `info.attempt` failed with `e`: Some(the client's answer, None when it cancelled
    /// the call meanwhile) when the call ends here; None when another attempt follows, once its
    /// backoff has passed (shown in `track` meanwhile).
    pub(super) async fn failed(
        &mut self,
        e: CallError,
        server: &Arc<Server>,
        eff: &Effective,
        req: &Request<'_>,
        end: &mut End,
        track: &Track<'_>,
    ) -> Option<Option<String>> {
        let own = matches!(e, CallError::Busy { .. } | CallError::Down { .. });
        let at = match self.after_failure(e, server, eff, req, end).await {
            Next::Retry { backoff, of, after } => {
                let (attempt, at) = (self.info.attempt + 2, Instant::now() + backoff);
                track.set(Stage::Repeating { attempt, of, at, after });
                at
            }
            Next::GiveUp(answer) => {
                // No server saw the call: switchyard refused it itself.
                if own && end.attempts == 0 {
                    end.refused_by = Some(super::OWN_REFUSAL.to_string());
                }
                return Some(Some(answer));
            }
        };
        tokio::select! {
            _ = req.cancel.token.cancelled() => Some(None),
            _ = tokio::time::sleep_until(at) => None,
        }
    }

    /// Attempt `info.attempt` failed with `e`: another follows when the policy's retry (`eff`) or
    /// the host's own (for what is safe to repeat by the server's own annotations, or never
    /// reached it) allows it. Counted in the metrics and, when the call ends here, in `end`.
    async fn after_failure(
        &mut self,
        mut e: CallError,
        server: &Arc<Server>,
        eff: &Effective,
        req: &Request<'_>,
        end: &mut End,
    ) -> Next {
        let (what, call) = (&self.what, &self.info);
        if matches!(e, CallError::Timeout { .. }) {
            server.metrics.timeout(&server.metric_name, end.tool.as_ref());
        }
        let link_lost = matches!(e, CallError::Died { .. } | CallError::Lost { .. });
        // The instance ended in this call: perhaps the tool ended it, so its calls run alone.
        if let (CallError::Died { death, .. }, Some(tool)) = (&e, call.tool.as_deref()) {
            server.suspect_tool(tool, &death.instance);
        }
        if link_lost && self.lost_link.is_none() {
            // When the server became unreachable: for a link found silent, when it went quiet,
            // but leaving it SILENT_REPEAT for a fresh link.
            let quiet = match &e {
                CallError::Died { death, .. } => death.quiet_for.min(RESTART_WAIT - SILENT_REPEAT),
                _ => Duration::ZERO,
            };
            let now = tokio::time::Instant::now();
            self.lost_link = Some(now.checked_sub(quiet).unwrap_or(now));
        }
        // The server gets RESTART_WAIT from losing the link to come back; an instance start that
        // fails meanwhile is the server on its way back (a restart).
        let in_wait = self.lost_link.is_some_and(|at| at.elapsed() < RESTART_WAIT);
        let coming_back = matches!(e, CallError::Down { .. }) && in_wait;
        let unseen = e.never_delivered() || coming_back;
        let (retry, why) = match (e.is_retryable(), eff.retry) {
            (true, Some(r)) => (r, "a policy's retry asks for it"),
            // A call that hung once would hang again on the same instance, past the
            // deadline the client was promised: only a policy retries timeouts.
            (_, None) if matches!(e, CallError::Timeout { .. }) => (NO_RETRY, ""),
            (_, None) if (link_lost || coming_back) && in_wait && self.safe(server).await => {
                (HOST_RETRY, "it is safe to repeat (read-only or idempotent as the server declares it)")
            }
            _ => (NO_RETRY, ""),
        };
        // A request the server never saw is repeated whatever the call is: it cannot have run
        // (connect refused, session unknown before processing, an instance that did not start).
        let (retry, why) = match unseen && retry.attempts == 0 {
            true => (HOST_RETRY, "it never reached the server"),
            false => (retry, why),
        };
        if let CallError::Lost { delivered, cause, .. } = &mut e
            && !*delivered
            && self.may_have_run
        {
            *delivered = true;
            cause.push_str("; an earlier attempt may have run");
        }
        self.may_have_run |= e.may_have_run();
        let cap = if eff.retry.is_some() { Duration::MAX } else { HOST_BACKOFF_CAP };
        let backoff = backoff(retry.backoff_ms, call.attempt, cap);
        // The host's own repeats stop where the server's time to come back ends.
        let too_late = eff.retry.is_none()
            && self.lost_link.is_some_and(|at| tokio::time::Instant::now() + backoff >= at + RESTART_WAIT);
        if why.is_empty() || call.attempt >= retry.attempts || too_late {
            return self.give_up(e, server, eff, req, end);
        }
        if self.repeated_because.is_empty() {
            self.repeated_because = why.to_string();
            self.first_failure = Some(Box::new(e.clone()));
        }
        let reason = match &e {
            _ if unseen => RetryReason::NotDelivered,
            CallError::Timeout { .. } => RetryReason::Timeout,
            CallError::Died { .. } | CallError::Lost { .. } => RetryReason::Lost,
            _ => RetryReason::Other,
        };
        server.metrics.retry(&server.metric_name, end.tool.as_ref(), reason);
        // The cause only: the error's own advice ("check its effect before calling it again")
        // is for a client that gets it, not for a call switchyard repeats.
        tracing::info!(
            server = %server.name, session = %req.session_label,
            "{what} failed ({}); repeating it ({} of at most {}) in {} ms because {why}",
            e.cause(), call.attempt + 1, retry.attempts, backoff.as_millis()
        );
        Next::Retry { backoff, of: retry.attempts + 1, after: e.cause() }
    }

    /// No other attempt follows the one that failed with `e`: the client's answer, which says
    /// how often and for how long the call was tried when it was more than once.
    fn give_up(
        &mut self,
        mut e: CallError,
        server: &Server,
        eff: &Effective,
        req: &Request<'_>,
        end: &mut End,
    ) -> Next {
        let (what, attempt) = (&self.what, self.info.attempt);
        // The client waited for every attempt, not just the last: say so.
        if let CallError::Timeout { elapsed, attempts, .. } = &mut e
            && (attempt == 0 || eff.retry.is_some())
        {
            *elapsed = self.first_started.elapsed();
            *attempts = attempt + 1;
        } else if attempt > 0 {
            e = CallError::Repeated {
                server: server.name.clone(),
                what: what.to_string(),
                attempts: attempt + 1,
                elapsed: self.first_started.elapsed(),
                why: self.repeated_because.clone(),
                may_have_run: self.may_have_run,
                first: self.first_failure.take(),
                last: Box::new(e),
            };
        }
        tracing::info!(
            server = %server.name, session = %req.session_label,
            "{what} failed after {} attempt(s): {e}", attempt + 1
        );
        (end.outcome, end.code) = (failure_outcome(&e), Some(e.code()));
        Next::GiveUp(e.to_response(self.client_id))
    }

    /// [`Forwarded::safe`] from what is known now (no fetch): for sending a copy on a new
    /// connection, which must never wait.
    pub(super) fn safe_now(&self, server: &Server) -> bool {
        match self.info.tool.as_deref() {
            Some(tool) => server.declared_hints(tool).is_idempotent(),
            None => safe_method(&self.info.method),
        }
    }

    /// Whether the call is safe to repeat by what the server itself declared: a tool whose own
    /// annotations say read-only or idempotent (never a policy's override, which is for the
    /// client's scheduling), or one of MCP's read-only methods (lists, reads, gets, completion).
    async fn safe(&self, server: &Arc<Server>) -> bool {
        match self.info.tool.as_deref() {
            Some(tool) => server.declared_hints_fetched(tool, HINTS_WAIT).await.is_some_and(|h| h.is_idempotent()),
            None => safe_method(&self.info.method),
        }
    }
}

/// MCP's read-only methods: lists, reads, gets, completion.
fn safe_method(m: &str) -> bool {
    m.ends_with("/list") || m.ends_with("/read") || m.ends_with("/get") || m == "completion/complete"
}

/// How a failed call counts. A repeated call counts as the attempt whose code its client gets
/// (see `CallError::code`): one repeated after its instance died that then hit its deadline is
/// a timeout, as the same call unrepeated would be.
fn failure_outcome(e: &CallError) -> Outcome {
    match e {
        CallError::Repeated { first: Some(first), last, .. } if last.never_reached() => failure_outcome(first),
        CallError::Repeated { last, .. } => failure_outcome(last),
        CallError::Timeout { .. } => Outcome::Timeout,
        CallError::Died { .. } | CallError::Lost { .. } => Outcome::Lost,
        CallError::ShuttingDown | CallError::ShutDownInFlight { .. } => Outcome::ShuttingDown,
        CallError::Rejected(_) => Outcome::Rejected,
        _ => Outcome::Error,
    }
}

/// Exponential backoff with jitter: base * 2^attempt (at most `cap`), then +-25 %.
fn backoff(base_ms: u32, attempt: u32, cap: Duration) -> Duration {
    Backoff::new(Duration::from_millis(base_ms.into()), cap, Jitter::Spread(0.25)).delay(attempt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(waiting: Option<&str>) -> CallError {
        let (server, what) = ("fs".to_string(), "tools/call `slow`".to_string());
        CallError::Timeout {
            server,
            what,
            elapsed: Duration::from_secs(5),
            attempts: 2,
            waiting: waiting.map(Into::into),
        }
    }

    fn repeated(first: CallError, last: CallError) -> CallError {
        CallError::Repeated {
            server: "fs".into(),
            what: "tools/call `slow`".into(),
            attempts: 2,
            elapsed: Duration::from_secs(5),
            why: "its instance died".into(),
            may_have_run: true,
            first: Some(Box::new(first)),
            last: Box::new(last),
        }
    }

    #[test]
    fn a_repeated_call_counts_as_the_attempt_whose_code_its_client_gets() {
        let lost = || CallError::Lost {
            server: "fs".into(),
            what: "tools/call `slow`".into(),
            instance: "fs#1".into(),
            cause: "its link closed".into(),
            delivered: true,
        };
        let e = repeated(lost(), timeout(None));
        assert_eq!((failure_outcome(&e), e.code()), (Outcome::Timeout, timeout(None).code()));
        let ended = switchyard_core::audit::Ended::of(failure_outcome(&e), Some(e.code()), true);
        assert_eq!((&*ended.result, ended.timeout), ("timeout", true));
        // A repeat that never reached the server (it timed out waiting): the first's, as its code.
        let e = repeated(lost(), timeout(Some("an instance")));
        assert_eq!((failure_outcome(&e), e.code()), (Outcome::Lost, lost().code()));
    }

    #[test]
    fn backoff_grows_exponentially_within_jitter() {
        for attempt in 0..5 {
            let b = backoff(100, attempt, Duration::MAX).as_millis() as u64;
            let exp = 100u64 << attempt;
            assert!(b >= exp - exp / 4 && b <= exp + exp / 4, "attempt {attempt}: {b} ms");
        }
        assert_eq!(backoff(0, 3, Duration::MAX), Duration::ZERO);
        assert!(backoff(100, 12, Duration::from_secs(10)) <= Duration::from_millis(12_500));
    }
}
