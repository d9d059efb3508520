//! The audit line of a call (see `switchyard_core::audit`): who asked ([`Asked`], taken before
//! the call runs, with the call's place in the log), and, from what the call noted in its
//! [`End`] as it ran, what the policy decided, where it ran, what it waited for and how it ended.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::refused::{Refused, refused};
use super::{End, Request, caller_of};
use crate::server::Server;
use switchyard_core::audit::{
    AuditLog, Client, Decided, Deferred, Ended, Record, Ticket, Waits, arguments_of, lossy, sha256,
};
use switchyard_core::call::Call;
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

/// The request's side of its audit line, taken before it runs. What the request itself tells
/// (its method, the tool it named, its size) is read from it when the line is written.
pub(super) struct Asked<'a> {
    ticket: Ticket,
    /// The request as the client sent it.
    call: &'a Call,
    client: Client,
    session: Arc<str>,
    arguments_sha256: Option<[u8; 32]>,
    arguments: Option<serde_json::Value>,
    /// The trace the call is in (written as text by the log's writer thread), if any.
    trace_id: Option<[u8; 16]>,
}

impl<'a> Asked<'a> {
    /// The audit side of `req` (None: audit is off). `Err`: a strict log cannot take the call's
    /// line, and this is the client's answer.
    pub(super) fn of(server: &Server, req: &Request<'a>) -> Result<Option<Asked<'a>>, Refused> {
        let Some(log) = server.audit() else { return Ok(None) };
        let call = req.call;
        let (ticket, refusal) = match log.admit() {
            Ok(t) => (t, None),
            Err(e) => (log.unreserved(), Some(e)),
        };
        let caller = caller_of(req);
        let own = server.instance_label_prefix();
        let (name, version) = client_info(req, caller.name, caller.version);
        let client = Client {
            name,
            version,
            transport: Cow::Borrowed(caller.transport.name()),
            dir: caller.dir,
            profile: (own != server.name).then(|| own.to_string()),
            credential: caller.token,
        };
        let arguments = call.text(&call.fields().arguments);
        // The call's span's trace when calls are traced: the client's own trace when it gave one,
        // else the one switchyard began for the call.
        let trace = req.span.traceparent().or_else(|| switchyard_telemetry::context::sent(call).map(|(p, _)| p));
        let asked = Asked {
            ticket,
            call,
            client,
            session: req.session_label.clone(),
            arguments_sha256: arguments.map(|a| sha256(a.as_bytes())),
            arguments: None,
            trace_id: trace.map(|parent| parent.trace_id),
        };
        let asked = Asked { arguments: asked.kept(log, arguments, server), ..asked };
        let Some(why) = refusal else { return Ok(Some(asked)) };
        // The refusal's own line is tried all the same: once it is written, the log takes calls again.
        let set = server.policy.current();
        let tool = asked.tool();
        let answer =
            refused(&set, tool.as_deref(), req.modern, call.id(), Rejection::new("switchyard", why.to_string()));
        let mut end = End::new(Outcome::Rejected);
        (end.code, end.refused_by) = (answer.code, Some(answer.by.clone()));
        asked.write(server, end, Duration::ZERO, Some(&answer.answer), false);
        Err(answer)
    }

    /// The arguments `text` as the line holds them, when the log keeps them; when they cannot
    /// be held, the daemon log says why (never what they are).
    fn kept(&self, log: &AuditLog, text: Option<&str>, server: &Server) -> Option<serde_json::Value> {
        let text = text.filter(|_| log.with_arguments())?;
        arguments_of(text).map_err(|why| log.left_out(&server.name, self.named().as_deref(), &why)).ok()
    }

    /// The tool of a `tools/call` as its line names it: what cannot be decoded (a lone
    /// surrogate escape) as U+FFFD, where the policy finds no tool by that name.
    fn named(&self) -> Option<Cow<'a, str>> {
        let call = self.call;
        (call.method() == "tools/call")
            .then(|| call.name().or_else(|| call.text(&call.fields().name).map(|raw| Cow::Owned(lossy(raw)))))
            .flatten()
    }

    /// The tool of a `tools/call`, by the name the client called it.
    fn tool(&self) -> Option<Cow<'a, str>> {
        (self.call.method() == "tools/call").then(|| self.call.name()).flatten()
    }

    /// Writes the line of the call that ended as `end` says, after `elapsed`, with `answer` (None:
    /// the client got none). `sent`: the request reached an instance.
    pub(super) fn write(self, server: &Server, end: End, elapsed: Duration, answer: Option<&str>, sent: bool) {
        let Some(log) = server.audit() else { return };
        // By the server's name for it, once known (a plugin may show it under another).
        let tool = end.name.or_else(|| self.named().map(|t| Arc::from(t.as_ref())));
        let record = Record {
            // Written by the log's writer thread, from the time passed with the record.
            time: String::new(),
            // Written by the log's writer thread, from the id passed with the record.
            trace_id: None,
            client: self.client,
            session: self.session,
            // The server's name (its metrics name is the same text, shared).
            server: server.metric_name.clone(),
            instance: end.spent.instance,
            method: self.call.envelope().method.clone().unwrap_or_default(),
            tool,
            // Written by the log's writer thread too, from the hash.
            arguments_sha256: None,
            arguments: self.arguments,
            decision: end.decided,
            plugins: end.plugins,
            refused_by: end.refused_by,
            hooks: end.hooks,
            wait_ms: Waits { queue: ms(end.spent.queue), gate: ms(end.spent.gate) },
            outcome: Ended::of(end.outcome, end.code, sent),
            attempts: end.attempts,
            duration_ms: ms(elapsed),
            request_bytes: self.call.line().len() as u64,
            response_bytes: answer.map_or(0, |a| a.len() as u64),
        };
        let deferred =
            Deferred { ended: SystemTime::now(), arguments_sha256: self.arguments_sha256, trace_id: self.trace_id };
        log.write_deferred(self.ticket, record, deferred);
    }
}

/// The client's name and version as its line shows them: those of a 2026-07-28-era request
/// (its `_meta`) each decoded on its own, lossily, so that one the policy could not read does
/// not take the other with it.
fn client_info(
    req: &Request<'_>,
    name: Option<Arc<str>>,
    version: Option<Arc<str>>,
) -> (Option<Arc<str>>, Option<Arc<str>>) {
    let fields = req.call.fields();
    if !req.modern || fields.client_name.is_none() {
        return (name, version);
    }
    let call = req.call;
    let own = |range| match call.string(range) {
        Some(text) => Some(Arc::from(text.as_ref())),
        None => call.text(range).map(|raw| Arc::from(lossy(raw))),
    };
    (own(&fields.client_name), own(&fields.client_version))
}

/// A decision as the audit line shows it.
pub(super) fn decided(eff: &super::Effective) -> Decided {
    let keys = match &eff.concurrency {
        Concurrency::Keyed(keys) => keys.len(),
        _ => 0,
    };
    Decided {
        concurrency: Cow::Borrowed(eff.concurrency.kind()),
        keys,
        // The pool every server has is named without a copy.
        pool: match eff.pool.name.as_str() {
            DEFAULT_POOL => Cow::Borrowed(DEFAULT_POOL),
            other => Cow::Owned(other.to_string()),
        },
        timeout_ms: eff.timeout.as_millis() as u64,
        retry: eff.retry.map(|r| r.attempts),
    }
}

/// The pool every server has (`[pools.default]`, there when the config names none).
const DEFAULT_POOL: &str = "default";

/// Milliseconds, to the microsecond.
fn ms(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}
