//! After a failed attempt: whether the call gets another (by the policy's retry or the host's
//! default), after what backoff.

use std::sync::Arc;
use std::time::Duration;

use super::resolve::Effective;
use super::{End, Forwarded, Request};
use crate::server::Server;
use switchyard_core::backoff::{Backoff, Jitter};
use switchyard_core::decision::{CallInfo, Retry};
use switchyard_core::error::CallError;
use switchyard_core::metrics::{Outcome, RetryReason};
use switchyard_policy::PluginSet;

/// The retry a read-only or idempotent call gets when no plugin says otherwise.
const DEFAULT_RETRY: Retry = Retry { attempts: 1, backoff_ms: 100 };
const NO_RETRY: Retry = Retry { attempts: 0, backoff_ms: 0 };

/// What follows a failed attempt.
pub(super) enum Next {
    /// Another attempt, after this backoff.
    Retry(Duration),
    /// No other attempt: the client gets this error.
    GiveUp(String),
}

impl Forwarded<'_> {
    /// Attempt `info.attempt` failed with `e`: another follows when the policy's retry (`eff`) or
    /// the host's default (for what is safe to repeat, asked of `set`) allows it. Counted in the
    /// metrics and, when the call ends here, in `end`.
    pub(super) async fn after_failure(
        &mut self,
        mut e: CallError,
        server: &Server,
        set: &Arc<PluginSet>,
        eff: &Effective,
        req: &Request<'_>,
        end: &mut End,
    ) -> Next {
        let (what, call) = (&self.what, &self.info);
        if matches!(e, CallError::Timeout { .. }) {
            server.metrics.timeout(&server.metric_name, end.tool.as_ref());
        }
        let retry = match (e.is_retryable(), eff.retry) {
            (false, _) => NO_RETRY,
            (true, Some(r)) => r,
            // A call that hung once would hang again on the same instance, past the
            // deadline the client was promised: only a policy retries timeouts.
            (true, None) if matches!(e, CallError::Timeout { .. }) => NO_RETRY,
            (true, None) => default_retry(server, set, call).await,
        };
        if let CallError::Lost { delivered, cause, .. } = &mut e
            && !*delivered
            && self.may_have_run
        {
            *delivered = true;
            cause.push_str("; an earlier attempt may have run");
        }
        self.may_have_run |= !e.never_delivered();
        // A request the server never saw is repeated whatever the call is: it cannot
        // have run (connect refused, session unknown before processing).
        let retry = match e.never_delivered() && retry.attempts == 0 {
            true => DEFAULT_RETRY,
            false => retry,
        };
        if call.attempt >= retry.attempts {
            // The client waited for every attempt, not just the last: say so.
            if let CallError::Timeout { elapsed, attempts, .. } = &mut e {
                *elapsed = self.first_started.elapsed();
                *attempts = call.attempt + 1;
            }
            tracing::info!(
                server = %server.name, session = req.session_label,
                "{what} failed after {} attempt(s): {e}", call.attempt + 1
            );
            (end.outcome, end.code) = (failure_outcome(&e), Some(e.code()));
            return Next::GiveUp(e.to_response(self.client_id));
        }
        let reason = match &e {
            _ if e.never_delivered() => RetryReason::NotDelivered,
            CallError::Timeout { .. } => RetryReason::Timeout,
            CallError::Died { .. } | CallError::Lost { .. } => RetryReason::Lost,
            _ => RetryReason::Other,
        };
        server.metrics.retry(&server.metric_name, end.tool.as_ref(), reason);
        let backoff = backoff(retry.backoff_ms, call.attempt);
        tracing::info!(
            server = %server.name, session = req.session_label,
            "{what} failed ({e}); retry {} of {} in {} ms",
            call.attempt + 1, retry.attempts, backoff.as_millis()
        );
        Next::Retry(backoff)
    }
}

/// Retry once for what is safe to repeat: tool calls whose effective hints say read-only or
/// idempotent, and the read-only methods of MCP (lists, reads, gets, completion).
async fn default_retry(server: &Server, set: &Arc<PluginSet>, call: &CallInfo) -> Retry {
    let safe = match call.tool.as_deref() {
        Some(tool) => {
            let asked = vec![(tool.to_string(), server.declared_hints(tool))];
            set.annotate_async(&call.session, &server.name, asked).await.pop().unwrap_or_default().is_idempotent()
        }
        None => {
            call.method.ends_with("/list")
                || call.method.ends_with("/read")
                || call.method.ends_with("/get")
                || call.method == "completion/complete"
        }
    };
    if safe { DEFAULT_RETRY } else { NO_RETRY }
}

/// How a failed call counts.
fn failure_outcome(e: &CallError) -> Outcome {
    match e {
        CallError::Timeout { .. } => Outcome::Timeout,
        CallError::Died { .. } | CallError::Lost { .. } => Outcome::Lost,
        CallError::ShuttingDown => Outcome::ShuttingDown,
        CallError::Rejected(_) => Outcome::Rejected,
        _ => Outcome::Error,
    }
}

/// Exponential backoff with jitter: base * 2^attempt, then +-25 %.
fn backoff(base_ms: u32, attempt: u32) -> Duration {
    Backoff::new(Duration::from_millis(base_ms.into()), Duration::MAX, Jitter::Spread(0.25)).delay(attempt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_within_jitter() {
        for attempt in 0..5 {
            let b = backoff(100, attempt).as_millis() as u64;
            let exp = 100u64 << attempt;
            assert!(b >= exp - exp / 4 && b <= exp + exp / 4, "attempt {attempt}: {b} ms");
        }
        assert_eq!(backoff(0, 3), Duration::ZERO);
    }
}
