//! One attempt of a call: its deadline, the gate, an instance of the pool (or the one a task or
//! a resumed request is pinned to), then the send (`super::send`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::audit::Spent;
use super::deadline::{NOTICE_LEVEL, Waiting, bounded};
use super::resolve::Effective;
use super::{Forwarded, Request, Stop, retry};
use crate::gate::Permit;
use crate::peer::ClientPeer;
use crate::placement::ScopeKey;
use crate::pool::Lease;
use crate::server::Server;
use crate::server::calls::{Stage, Track, What};
use crate::upstream::{Instance, ProgressSink, Reply};
use switchyard_core::error::CallError;

/// An attempt's answer, with the gate permit it held and the instance that gave it.
pub(super) struct Answered {
    pub(super) reply: Reply,
    /// None for a task request, which passes the gate.
    pub(super) permit: Option<Permit>,
    pub(super) instance: Arc<Instance>,
}

/// When an attempt starts, and what bounds it beyond its own timeout.
#[derive(Clone, Copy)]
pub(super) struct Cap {
    /// When the attempt starts: the clock as its call read it last, when nothing was awaited
    /// since (the same moment), else read anew.
    pub(super) at: Instant,
    /// The call's first deadline (for the host's own repeats, which fit in it).
    pub(super) deadline: Option<Instant>,
    /// After a lost link: when the server's time to come back ends. A repeat that has not found
    /// the gate and an instance by then is given up, with that as the reason.
    pub(super) back_by: Option<Instant>,
}

/// One attempt of a call, and its deadline.
pub(super) struct Attempt<'r, 'a> {
    pub(super) track: &'r Track<'r>,
    pub(super) server: &'r Arc<Server>,
    pub(super) req: &'r Request<'a>,
    pub(super) eff: &'r Effective,
    pub(super) what: &'r What,
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    /// When waiting for the gate and an instance ends: the deadline, or sooner after a lost
    /// link (see [`Cap::back_by`]).
    wait_until: Instant,
    /// The tool's label in metrics, for a tools/call.
    pub(super) tool: Option<Arc<str>>,
    /// Safe to repeat by the server's own declaration: may be sent once more on a new
    /// connection when its link has been silent while the server answers probes.
    pub(super) safe: bool,
    /// The instances the call's placement asks for (the pool's affinity may narrow it).
    scope: ScopeKey,
    /// Where the notifications of a `subscriptions/listen` stream go (its client, its request).
    /// Such a stream is a subscription, not a call: it passes no gate, holds no place in its
    /// instance's calls, and has no deadline once sent (it ends when its client cancels it, or
    /// when its link or instance does).
    pub(super) stream: Option<Arc<dyn ProgressSink>>,
}

/// Where the notifications of a client's `subscriptions/listen` go: to its client, as messages
/// of that request (the HTTP front puts them on the request's own stream).
struct StreamTo {
    to: Arc<ClientPeer>,
    /// The client's raw id of the listen request.
    id: String,
}

impl crate::upstream::ProgressSink for StreamTo {
    fn progress(&self, line: String) {
        self.to.send_for(&self.id, line);
    }
}

pub(super) async fn attempt(
    server: &Arc<Server>,
    req: &Request<'_>,
    eff: &Effective,
    call: &Forwarded<'_>,
    cap: Cap,
    track: &Track<'_>,
    spent: &mut Spent,
) -> Result<Answered, Stop> {
    let what = &call.what;
    // Progress is routed back when the client asked for it (it gave a token).
    let progress = call.progress_sink.clone().map(|sink| sink as Arc<dyn ProgressSink>);
    let safe = call.safe_now(server);
    let started = cap.at;
    let deadline = (started + eff.timeout).min(cap.deadline.unwrap_or(started + eff.timeout));
    let wait_until = deadline.min(cap.back_by.unwrap_or(deadline));
    track.set(Stage::Gate);
    let stream = (call.info.method == "subscriptions/listen")
        .then(|| Arc::new(StreamTo { to: req.link.clone(), id: call.client_id.to_string() }) as Arc<dyn ProgressSink>);
    let scope = ScopeKey::wanted(eff.placement.as_ref(), req.session, &call.info.caller);
    // The label the call read at its start: the same for each attempt, not looked up again.
    let tool = call.tool_label.clone();
    let mut attempt =
        Attempt { track, server, req, eff, what, started, deadline, wait_until, tool, safe, scope, stream };
    // A request pinned to one instance, and no other, whatever its placement says: a repeat
    // after it ended finds it dead.
    let ended = |instance: &Instance, held: &str, again: &str| {
        Stop::Failed(CallError::Down {
            server: server.name.clone(),
            reason: format!("{what}: the instance {} that {held} has ended, {again}", instance.label()),
        })
    };
    if let Some(pinned) = req.task {
        let instance = pinned.instance.clone();
        spent.instance = Some(instance.label().to_string());
        if instance.is_dead() {
            return Err(ended(&instance, "held the task", "and the task with it; start the task again"));
        }
        let reply = attempt.send(&instance, progress, started).await?;
        return Ok(Answered { reply, permit: None, instance });
    }
    if let Some(instance) = req.resume.clone() {
        if instance.is_dead() {
            let again =
                "and the request's state with it; send the request again without `requestState` and `inputResponses`";
            return Err(ended(&instance, "asked for the client's input", again));
        }
        spent.instance = Some(instance.label().to_string());
        let (permit, waited) = attempt.gate().await?;
        spent.gate += waited;
        let reply = attempt.send(&instance, progress, started + waited).await?;
        return Ok(Answered { reply, permit: Some(permit), instance });
    }
    let first = attempt.waits_for_a_start();
    let (permit, lease, gate_wait) = attempt.acquire().await?;
    // One reading of the clock for the queue's wait, the start of a call that waited for its
    // instance, and the send: the same moment.
    let now = Instant::now();
    spent.gate += gate_wait;
    spent.queue += now.saturating_duration_since(attempt.started).saturating_sub(gate_wait);
    let instance = lease.instance.clone();
    spent.instance = Some(instance.label().to_string());
    // A call that waited for its instance to start has its own time to run from then.
    if first {
        attempt.deadline = attempt.deadline.max(now + (attempt.deadline - attempt.started));
    }
    if attempt.stream.is_some() {
        // Open for as long as its client wants it: a serial server's next call does not wait for it.
        drop(lease);
    }
    let reply = attempt.send(&instance, progress, now).await?;
    Ok(Answered { reply, permit, instance })
}

impl Attempt<'_, '_> {
    /// `what` timed out (`waiting`: for what).
    pub(super) fn timed_out(&self, what: String, waiting: Option<String>) -> Stop {
        Stop::Failed(CallError::Timeout {
            server: self.server.name.clone(),
            what,
            elapsed: self.started.elapsed(),
            attempts: 1,
            waiting,
        })
    }

    /// How long the call may wait for an instance of `pool`: its deadline; but a request of the
    /// 2026-07-28 era may be the first the server gets (such a client sends no initialize), and
    /// when no instance of that era runs yet it waits for one to start, as a direct connection
    /// waits for the server's start: `init_timeout_ms` (its own time to run then starts with
    /// the instance, see [`attempt`]).
    fn pool_deadline(&self) -> Instant {
        match self.waits_for_a_start() {
            true => self.wait_until.max(self.started + Duration::from_millis(self.server.limits.init_timeout_ms)),
            false => self.wait_until,
        }
    }

    /// Waiting for `what` (the gate, an instance) ended at `until`: a timeout, or, when the
    /// server's time to come back after a lost link ran out first, the server down.
    fn waited_out(&self, what: String, waiting: Option<String>, until: Instant) -> Stop {
        if until < self.deadline {
            let waited = retry::RESTART_WAIT.as_secs();
            return Stop::Failed(CallError::Down {
                server: self.server.name.clone(),
                reason: format!(
                    "{what} lost its link and the server was not back within {waited} s{}",
                    waiting.map(|w| format!(" ({w})")).unwrap_or_default()
                ),
            });
        }
        self.timed_out(what, waiting)
    }

    /// A 2026-07-28 request while no instance of that era is up: it waits for one to start.
    fn waits_for_a_start(&self) -> bool {
        self.req.modern && !self.server.modern_pool(&self.eff.pool).instances().iter().any(|i| i.is_ready())
    }

    /// What the client is told of this call while it waits (for the gate or an instance).
    fn waiting(&self) -> Waiting<'_> {
        let (server, req) = (self.server, self.req);
        Waiting {
            about: format!("{} on server `{}`", self.what, server.name),
            link: req.link,
            client_id: req.call.id(),
            may_notify: Box::new(move || {
                server.declares_logging() && server.hub.session_level(req.session).is_none_or(|l| l >= NOTICE_LEVEL)
            }),
        }
    }

    /// Waits for the gate within the deadline: its permit, and how long the attempt had run
    /// when it was given (one reading of the clock, for the metric and the caller).
    pub(super) async fn gate(&self) -> Result<(Permit, Duration), Stop> {
        let (server, req, eff) = (self.server, self.req, self.eff);
        let gate_wait = || server.gate.blockers().to_string();
        let permit = bounded(
            server.gate.acquire(eff.concurrency.clone()),
            self.wait_until,
            &req.cancel.token,
            || self.waiting(),
            gate_wait,
        )
        .await
        .map_err(|e| e.map_or(Stop::Cancelled, |w| self.waited_out(self.what.to_string(), Some(w), self.wait_until)))?;
        let waited = self.started.elapsed();
        server.metrics.gate_wait(&server.metric_name, eff.concurrency.kind(), waited);
        Ok((permit, waited))
    }

    /// Waits for the gate (not a listen stream, which runs nothing), then for an instance of the
    /// pool, within the deadline.
    /// The gate's wait comes with them.
    pub(super) async fn acquire(&self) -> Result<(Option<Permit>, Lease, Duration), Stop> {
        let (server, req, eff, what) = (self.server, self.req, self.eff, self.what);
        // Before an instance was found, the error says what the call waited for.
        let until = self.pool_deadline();
        let timeout = |waiting: Option<String>| self.waited_out(what.to_string(), waiting, until);
        let (permit, gate_wait) = match self.stream {
            Some(_) => (None, self.started.elapsed()),
            None => {
                let (permit, waited) = self.gate().await?;
                (Some(permit), waited)
            }
        };
        let pool = if req.modern { server.modern_pool(&eff.pool) } else { &eff.pool };
        self.track.set(Stage::Instance(pool.clone()));
        let pool_wait = || pool.wait_status(req.session, &self.scope);
        let lease =
            bounded(pool.acquire(req.session, &self.scope), until, &req.cancel.token, || self.waiting(), pool_wait)
                .await
                .map_err(|e| e.map_or(Stop::Cancelled, |w| timeout(Some(w))))?
                .map_err(|e| {
                    Stop::Failed(match e {
                        // The pool does not know the call: the error names it.
                        CallError::Busy { server, reason } => {
                            CallError::Busy { server, reason: format!("{what} was refused: {reason}") }
                        }
                        e => e,
                    })
                })?;
        Ok((permit, lease, gate_wait))
    }
}
