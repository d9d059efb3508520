//! The audit line of a call (see `switchyard_core::audit`): who asked ([`Asked`], taken before
//! the call runs, with the call's place in the log), and, from what the call noted in its
//! [`End`] as it ran, what the policy decided, where it ran, what it waited for and how it ended.

use std::time::{Duration, SystemTime};

use super::refused::{Refused, refused};
use super::{End, Request, caller_of};
use crate::server::Server;
use switchyard_core::audit::{Client, Decided, Ended, Record, Ticket, Waits, sha256_hex};
use switchyard_core::decision::{Concurrency, Rejection};
use switchyard_core::metrics::Outcome;

/// What a call's attempts waited for and where the last one ran.
#[derive(Default)]
pub(super) struct Spent {
    pub(super) gate: Duration,
    pub(super) queue: Duration,
    /// The label of the instance the last attempt was given.
    pub(super) instance: Option<String>,
}

/// The request's side of its audit line, taken before it runs (the request moves into the run).
pub(super) struct Asked {
    ticket: Ticket,
    client: Client,
    session: String,
    method: String,
    /// The tool by the name the client called it.
    tool: Option<String>,
    arguments_sha256: Option<String>,
    arguments: Option<serde_json::Value>,
    request_bytes: u64,
    /// The trace the client put the call in (a valid `_meta.traceparent`), if any.
    trace_id: Option<String>,
}

impl Asked {
    /// The audit side of `req` (None: audit is off). `Err`: a strict log cannot take the call's
    /// line, and this is the client's answer.
    pub(super) fn of(server: &Server, req: &Request<'_>) -> Result<Option<Asked>, Refused> {
        let Some(log) = server.audit() else { return Ok(None) };
        let call = req.call;
        let tool = (call.method() == "tools/call").then(|| call.name().map(String::from)).flatten();
        let (ticket, refusal) = match log.admit() {
            Ok(t) => (t, None),
            Err(e) => (log.unreserved(), Some(e)),
        };
        let caller = caller_of(req);
        let own = server.instance_label_prefix();
        let client = Client {
            name: caller.name.as_deref().map(String::from),
            version: caller.version.as_deref().map(String::from),
            transport: caller.transport.name().to_string(),
            dir: caller.dir.as_deref().map(String::from),
            profile: (own != server.name).then(|| own.to_string()),
            credential: caller.token.as_deref().map(String::from),
        };
        let arguments = call.text(&call.fields().arguments);
        // The call's span's trace when calls are traced: the client's own trace when it gave one,
        // else the one switchyard began for the call.
        let trace = req.span.traceparent().or_else(|| switchyard_telemetry::context::sent(call).map(|(p, _)| p));
        let asked = Asked {
            ticket,
            client,
            session: req.session_label.to_string(),
            method: call.method().to_string(),
            tool,
            arguments_sha256: arguments.map(|a| sha256_hex(a.as_bytes())),
            arguments: arguments.filter(|_| log.with_arguments()).and_then(|a| serde_json::from_str(a).ok()),
            request_bytes: call.line().len() as u64,
            trace_id: trace.map(|parent| parent.trace_id_hex()),
        };
        let Some(why) = refusal else { return Ok(Some(asked)) };
        // The refusal's own line is tried all the same: once it is written, the log takes calls again.
        let set = server.policy.current();
        let answer =
            refused(&set, asked.tool.as_deref(), req.modern, call.id(), Rejection::new("switchyard", why.to_string()));
        let mut end = End::new(Outcome::Rejected);
        (end.code, end.refused_by) = (answer.code, Some(answer.by.clone()));
        asked.write(server, end, Duration::ZERO, Some(&answer.answer), false);
        Err(answer)
    }

    /// Writes the line of the call that ended as `end` says, after `elapsed`, with `answer` (None:
    /// the client got none). `sent`: the request reached an instance.
    pub(super) fn write(self, server: &Server, end: End, elapsed: Duration, answer: Option<&str>, sent: bool) {
        let Some(log) = server.audit() else { return };
        let record = Record {
            // Written by the log's writer thread, from the time passed with the record.
            time: String::new(),
            trace_id: self.trace_id,
            client: self.client,
            session: self.session,
            server: server.name.clone(),
            instance: end.spent.instance,
            method: self.method,
            // By the server's name for it, once known (a plugin may show it under another).
            tool: end.name.as_deref().map(String::from).or(self.tool),
            arguments_sha256: self.arguments_sha256,
            arguments: self.arguments,
            decision: end.decided,
            plugins: end.plugins,
            refused_by: end.refused_by,
            hooks: end.hooks,
            wait_ms: Waits { queue: ms(end.spent.queue), gate: ms(end.spent.gate) },
            outcome: Ended::of(end.outcome, end.code, sent),
            attempts: end.attempts,
            duration_ms: ms(elapsed),
            request_bytes: self.request_bytes,
            response_bytes: answer.map_or(0, |a| a.len() as u64),
        };
        log.write_ended(self.ticket, record, SystemTime::now());
    }
}

/// A decision as the audit line shows it.
pub(super) fn decided(eff: &super::Effective) -> Decided {
    let keys = match &eff.concurrency {
        Concurrency::Keyed(keys) => keys.len(),
        _ => 0,
    };
    Decided {
        concurrency: eff.concurrency.kind().to_string(),
        keys,
        pool: eff.pool.name.clone(),
        timeout_ms: eff.timeout.as_millis() as u64,
        retry: eff.retry.map(|r| r.attempts),
    }
}

/// Milliseconds, to the microsecond.
fn ms(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}
