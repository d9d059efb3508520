//! An attempt sent to its instance and waited for: its deadline (which progress extends), a
//! copy on a new connection when its link goes silent, the client's cancel; where the call's
//! progress goes; and the attempt's span (kind CLIENT), whose trace context the server gets.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::sync::oneshot::error::RecvError;
use tokio::time::Instant;

use super::Stop;
use super::attempt::Attempt;
use crate::peer::ClientPeer;
use crate::server::calls::{LastProgress, Stage};
use crate::upstream::{Instance, ProgressSink, Reply, Sent, Trace};
use switchyard_core::error::{CallError, Unanswered};
use switchyard_core::metrics::{OTHER, Outcome, code_label};
use switchyard_telemetry::{self as telemetry, keys};

/// Passes a call's progress on only while it increases. A repeated call's server counts from
/// the start again, and the client must never see progress on its token go back (the spec
/// requires it to increase), so the repeat's is held back until it passes what was sent.
pub(super) struct Rising {
    to: Arc<ClientPeer>,
    last: std::sync::Mutex<Option<f64>>,
    /// The last progress passed on, for `status`.
    pub(super) seen: Arc<LastProgress>,
}

impl Rising {
    pub(super) fn new(to: Arc<ClientPeer>) -> Self {
        Rising { to, last: std::sync::Mutex::new(None), seen: Arc::default() }
    }
}

impl crate::upstream::ProgressSink for Rising {
    fn progress(&self, line: String) {
        #[derive(serde::Deserialize)]
        struct Note {
            params: Params,
        }
        #[derive(serde::Deserialize)]
        struct Params {
            progress: f64,
            total: Option<f64>,
            message: Option<String>,
        }
        if let Ok(note) = serde_json::from_str::<Note>(&line) {
            let mut last = self.last.lock().expect("lock");
            if last.is_some_and(|l| note.params.progress <= l) {
                return;
            }
            *last = Some(note.params.progress);
            let Params { progress, total, message } = note.params;
            self.seen.saw(progress, total, message);
        }
        crate::upstream::ProgressSink::progress(&*self.to, line);
    }
}

impl Attempt<'_, '_> {
    /// Sends the call to `inst` and waits for its reply until the deadline (which progress
    /// extends, up to `limits.max_call_timeout_ms`) or the client's cancel. `sent_at`: now, as
    /// the attempt read the clock last (nothing was awaited since).
    pub(super) async fn send(
        &self,
        inst: &Arc<Instance>,
        route: Option<Arc<dyn ProgressSink>>,
        sent_at: Instant,
    ) -> Result<Reply, Stop> {
        // Boxed, and made, only when calls are traced: a span is hundreds of bytes, and this
        // future is part of every request's.
        let traced = (!self.req.span.is_none()).then(|| Box::new(self.client_span(inst)));
        let span = traced.as_deref().unwrap_or(telemetry::Span::none_ref());
        let r = self.send_in(inst, route, span).await;
        // How a reply ended (an error answer, a tool's own error), read once for the metric and the span.
        let replied =
            r.as_ref().ok().map(|reply| super::reply::reply_outcome(reply, self.req.call.method() == "tools/call"));
        self.timed(inst, &r, replied, sent_at.elapsed());
        if !span.is_none() {
            match &r {
                // As the call's span says it: an error answer by its code, a tool's own error too.
                Ok(_) => match replied {
                    Some((Outcome::Error, code)) => {
                        span.ended(Some(&code.map_or("_OTHER".to_string(), |c| c.to_string())), code, Vec::new())
                    }
                    Some((Outcome::ToolError, _)) => span.ended(Some(Outcome::ToolError.label()), None, Vec::new()),
                    _ => {}
                },
                Err(Stop::Cancelled) => {
                    let cancelled = vec![telemetry::KeyValue::new(keys::SWITCHYARD_CANCELLED, true)];
                    span.ended(Some("cancelled"), None, cancelled);
                }
                Err(Stop::Failed(e)) => span.ended(Some(error_type(e)), Some(e.code()), Vec::new()),
            }
        }
        r
    }

    /// Times the attempt on `inst` (`mcp.client.operation.duration`), `replied` saying how its
    /// reply ended; one the client cancelled got no response and is not timed.
    fn timed(&self, inst: &Instance, r: &Result<Reply, Stop>, replied: Option<(Outcome, Option<i64>)>, took: Duration) {
        let call = self.req.call;
        let error_type = match r {
            Ok(_) => match replied {
                Some((Outcome::Error, code)) => code.map_or(OTHER, code_label),
                Some((Outcome::ToolError, _)) => "tool_error",
                _ => "",
            },
            Err(Stop::Cancelled) => return,
            Err(Stop::Failed(e)) => error_type(e),
        };
        let transport = if inst.pid().is_some() { keys::TRANSPORT_PIPE } else { keys::TRANSPORT_TCP };
        let server = self.server;
        server.metrics.attempt(&server.metric_name, call.method(), self.tool.as_ref(), error_type, transport, took);
    }

    /// The span of this attempt's request to `inst` (kind CLIENT), within the call's (which is
    /// one: calls are traced).
    fn client_span(&self, inst: &Instance) -> telemetry::Span {
        let call = self.req.call;
        let (name, uri) = (call.name(), call.string(&call.fields().uri));
        let op = telemetry::Operation {
            side: telemetry::Side::Client,
            method: call.method(),
            target: telemetry::Target::of(call.method(), name.as_deref(), uri.as_deref()),
            request_id: None,
            session_id: None,
            protocol_version: None,
            transport: if inst.pid().is_some() { keys::TRANSPORT_PIPE } else { keys::TRANSPORT_TCP },
            instance: Some(inst.label()),
        };
        telemetry::operation(&op, None, Some(self.req.span))
    }

    /// [`Attempt::send`] within the span `span`: the server gets its trace context.
    pub(super) async fn send_in(
        &self,
        inst: &Arc<Instance>,
        route: Option<Arc<dyn ProgressSink>>,
        span: &telemetry::Span,
    ) -> Result<Reply, Stop> {
        let (server, req, eff, what) = (self.server, self.req, self.eff, self.what);
        let activity = Arc::new(Notify::new());
        let failed = |u: Unanswered| Stop::Failed(u.into_error(&server.name, &what.to_string()));
        let trace = span
            .traceparent()
            .map(|tp| Trace { edits: telemetry::context::edits(req.call, &tp, None), traceparent: tp.to_string() });
        let sent = inst
            .send_traced(req.call, req.session, route.clone(), Some(activity.clone()), self.stream.clone(), trace)
            .map_err(failed)?;
        if !span.is_none() {
            span.set(keys::JSONRPC_REQUEST_ID, sent.upstream_id.to_string());
        }
        req.cancel.mark_sent();
        self.track.set(Stage::InFlight(inst.clone(), sent.upstream_id));
        let max_deadline = self.started + Duration::from_millis(server.limits.max_call_timeout_ms);
        let mut deadline = self.deadline;
        let mut reply = sent.reply;
        // A link that died silently while the server stays reachable (new connections work, so
        // the probe passes) is told from a slow tool by nothing on the wire. A call that is safe
        // to repeat is sent once more, on a new connection, once its link has been silent for a
        // window and a probe's time: the first answer wins, the other copy is cancelled.
        let window = Duration::from_millis(server.limits.liveness_ms);
        // A listen stream is quiet by nature, and a second one would double its notifications.
        let watched =
            self.stream.is_none() && self.safe && !window.is_zero() && inst.silent_for(sent.upstream_id).is_some();
        let mut hedge_at = watched.then(|| Instant::now() + hedge_after(window));
        let mut second: Option<Sent> = None;
        let cancel_all = |reason: &str, second: &Option<Sent>| {
            inst.cancel(sent.upstream_id, reason);
            if let Some(s) = second {
                inst.cancel(s.upstream_id, reason);
            }
        };
        loop {
            tokio::select! {
                r = async { (&mut second.as_mut().expect("guarded").reply).await }, if second.is_some() => {
                    let copy = second.take().expect("guarded");
                    if let Some(reply) = self.copy_answered(inst, sent.upstream_id, copy, r) {
                        return Ok(reply);
                    }
                }
                // Boxed, made only when armed: most calls are never hedged.
                _ = async { Box::pin(tokio::time::sleep_until(hedge_at.expect("guarded"))).await }, if hedge_at.is_some() => {
                    let (copy, next) = self.hedge(inst, sent.upstream_id, window, &route, &activity);
                    hedge_at = next;
                    if copy.is_some() {
                        second = copy;
                    }
                }
                r = &mut reply => {
                    if let Some(copy) = second.take() {
                        inst.cancel(copy.upstream_id, "switchyard: answered on the first connection");
                    }
                    return match r {
                        Ok(Ok(reply)) => {
                            server.record_success();
                            Ok(reply)
                        }
                        Ok(Err(u)) => Err(failed(u)),
                        // The instance dropped the call without a death: only at shutdown, with
                        // the call sent, so it may have run.
                        Err(_) => Err(Stop::Failed(CallError::ShutDownInFlight { server: server.name.clone() })),
                    };
                }
                _ = activity.notified() => {
                    // Progress shows the call is alive: extend its deadline, up to the hard maximum.
                    deadline = deadline.max((Instant::now() + eff.timeout).min(max_deadline));
                }
                _ = tokio::time::sleep_until(deadline), if self.stream.is_none() => {
                    let elapsed = self.started.elapsed();
                    cancel_all(&format!("switchyard: timed out after {:.1} s", elapsed.as_secs_f64()), &second);
                    return Err(self.hung(inst));
                }
                _ = req.cancel.token.cancelled() => {
                    cancel_all(req.cancel.reason(), &second);
                    return Err(Stop::Cancelled);
                }
            }
        }
    }

    /// The reply to the copy of request `first` sent on a new connection: when it is an answer,
    /// the call has it and the first request is cancelled.
    fn copy_answered(
        &self,
        inst: &Instance,
        first: u64,
        copy: Sent,
        r: Result<Result<Reply, Unanswered>, RecvError>,
    ) -> Option<Reply> {
        match r {
            Ok(Ok(reply)) => {
                inst.cancel(first, "switchyard: answered on a new connection");
                self.server.record_success();
                Some(reply)
            }
            // The copy failed: the first may still be answered.
            _ => {
                let what = self.what;
                tracing::debug!(instance = %inst.label(), "the second copy of {what} (request {}) got no answer", copy.upstream_id);
                None
            }
        }
    }

    /// The hedge is due for request `first` on `inst`: when its link has been silent for the
    /// whole `window`, a copy goes out on a new connection (returned, with no further hedge);
    /// when bytes came meanwhile, the time to look again.
    fn hedge(
        &self,
        inst: &Arc<Instance>,
        first: u64,
        window: Duration,
        route: &Option<Arc<dyn ProgressSink>>,
        activity: &Arc<Notify>,
    ) -> (Option<Sent>, Option<Instant>) {
        let (server, req, what) = (self.server, self.req, self.what);
        match inst.silent_for(first) {
            Some(silent) if silent >= window => {
                if let Ok(copy) =
                    inst.send(req.call, req.session, route.clone(), Some(activity.clone()), self.stream.clone())
                {
                    tracing::info!(
                        server = %server.name, instance = %inst.label(), session = %req.session_label,
                        "{what} has had nothing from its link for {:.1} s while the server answers probes: sent once more on a new connection (it is safe to repeat); the first answer wins",
                        silent.as_secs_f64()
                    );
                    return (Some(copy), None);
                }
                (None, None)
            }
            // Bytes came meanwhile: look again once it could have been silent that long.
            Some(silent) => (None, Some(Instant::now() + hedge_after(window) - silent.min(window))),
            None => (None, None),
        }
    }

    /// The call timed out on `inst` (its requests there are cancelled already): the error, and
    /// a health check of the instance.
    fn hung(&self, inst: &Arc<Instance>) -> Stop {
        let server = self.server;
        // A call that hangs may mean a hung instance: check it now rather than at the
        // next idle ping (unless health pings are switched off).
        if server.limits.health_interval_ms > 0 {
            let (s, i) = (server.clone(), inst.clone());
            server.tasks.spawn(async move {
                // Wait for this call's lease to go so the ping is not queued behind it.
                tokio::time::sleep(Duration::from_millis(10)).await;
                s.health_check(&i).await;
            });
        }
        // Errors name the instance the call ran on (README, "Errors name ...").
        self.timed_out(format!("{} (on {})", self.what, inst.label()), None)
    }
}

/// `error.type` of a call that got no answer: what kind of failure it was.
fn error_type(e: &CallError) -> &'static str {
    match e {
        CallError::Rejected(_) => "rejected",
        CallError::Timeout { .. } => "timeout",
        CallError::Died { .. } => "instance_died",
        CallError::Lost { .. } => "lost",
        CallError::Repeated { last, .. } => error_type(last),
        CallError::ShuttingDown | CallError::ShutDownInFlight { .. } => Outcome::ShuttingDown.label(),
        CallError::Busy { .. } => "busy",
        _ => "server_unavailable",
    }
}

/// How long a safe call's link may be silent before the call is sent once more: a liveness
/// window, the probe's time (a quarter of it) and a little, so a dead path has ended the link
/// first.
fn hedge_after(window: Duration) -> Duration {
    window + window / 4 + Duration::from_millis(500)
}
