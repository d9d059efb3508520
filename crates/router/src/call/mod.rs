//! Runs one forwarded request: policy decision, clamps, gate, pool, upstream, timeout and retry.
//!
//! Here: the call across its attempts ([`forward`]), and the policy's verdict alone on a request
//! switchyard answers in the server's stead ([`judge`]). Its stages are the children: `shown` (a tool
//! called by the name a plugin shows), `resolve` (decide), `refused` (a plugin's refusal as the
//! client's answer), `hooks` (the plugins' content hooks on params and result), `attempt` (gate and pool), `send` (to the instance and back, in its CLIENT
//! span), `reply` (the client's answer), `retry`, `deadline`, `audit` (the call's line) and
//! `traced` (how the call's SERVER span ends).

mod attempt;
mod audit;
mod deadline;
mod hooks;
mod refused;
mod reply;
mod resolve;
mod retry;
mod send;
mod shown;
mod traced;

use std::borrow::Cow;
use std::sync::Arc;

use tokio::time::Instant;

use crate::peer::ClientPeer;
use crate::server::Server;
use crate::server::calls::{Stage, What};
use crate::server::tasks::Pinned;
use crate::upstream::{Instance, Reply};
use attempt::{Answered, Cap, attempt};
use reply::{finish, finish_list, input_state, reply_outcome, task_ids};
pub use resolve::Effective;
use send::Rising;
use shown::shown_tool;
use switchyard_core::call::Call;
use switchyard_core::decision::{CallInfo, TaskRef};
use switchyard_core::error::CallError;
use switchyard_core::ids::SessionId;
use switchyard_core::metrics::{self, Outcome};

/// Why an attempt ended without a response.
enum Stop {
    Cancelled,
    Failed(CallError),
}

/// A request of a client, as the engine needs it.
pub struct Request<'a> {
    /// The request, read once where its session read it: nothing here parses it again.
    pub call: &'a Call,
    pub session: SessionId,
    pub session_label: &'a Arc<str>,
    pub link: &'a Arc<ClientPeer>,
    pub cancel: &'a Cancel,
    /// A 2026-07-28-era request (protocol version in `_meta`): runs on that era's instances.
    pub modern: bool,
    /// A request about one task: it goes to the instance holding the task, past gate and pool.
    pub task: Option<&'a Pinned>,
    /// The retry of a request the server answered `input_required` (2026-07-28): it goes to the
    /// instance that asked for the input, through the gate, whatever the pool would pick.
    pub resume: Option<Arc<Instance>>,
    /// The call's span (kind SERVER; none when traces are off): its attempts' spans are its
    /// children, and it is told how the call ended.
    pub span: &'a switchyard_telemetry::Span,
}

/// Who sent `req`: what its session knows of its client; for a request of the 2026-07-28 era,
/// which has no initialize, its own protocol version and the `clientInfo` in its `_meta`.
fn caller_of(req: &Request<'_>) -> switchyard_core::decision::Caller {
    let mut caller = req.link.caller();
    if !req.modern {
        return caller;
    }
    let call = req.call;
    if let Some(version) = call.protocol_version() {
        caller.era = version.into();
    }
    if let Some(name) = call.string(&call.fields().client_name) {
        caller.name = Some(name.into());
        caller.version = call.string(&call.fields().client_version).map(Into::into);
    }
    caller
}

/// `method` as the policy is told it: one of MCP's own is not copied.
fn method_of(method: &str) -> Cow<'static, str> {
    match metrics::method_label(method) {
        known if known == method => Cow::Borrowed(known),
        _ => Cow::Owned(method.to_string()),
    }
}

/// Who refused a call switchyard refused itself, in its audit line (`refused_by`).
const OWN_REFUSAL: &str = "switchyard";

/// How a call ended, for the metrics and the audit log (filled in by [`run`]).
struct End {
    outcome: Outcome,
    code: Option<i64>,
    /// The tool's metrics label (tools/call only).
    tool: Option<Arc<str>>,
    /// What only the audit line reads, noted only when audit is on: the tool by the server's
    /// name, the last decision and the plugins that made it, or the one that refused the call.
    name: Option<Arc<str>>,
    decided: Option<switchyard_core::audit::Decided>,
    plugins: Vec<switchyard_core::audit::PluginRef>,
    refused_by: Option<String>,
    /// What content hooks did (or, in audit mode, would have done) to the call.
    hooks: Vec<switchyard_core::audit::HookNote>,
    /// Attempts made (0: refused before the first).
    attempts: u32,
    spent: audit::Spent,
}

impl End {
    fn new(outcome: Outcome) -> End {
        End {
            outcome,
            code: None,
            tool: None,
            name: None,
            decided: None,
            plugins: Vec::new(),
            refused_by: None,
            hooks: Vec::new(),
            attempts: 0,
            spent: audit::Spent::default(),
        }
    }
}

/// Forwards a request to the server and returns the response for the client (None when the
/// client cancelled it: then no response is owed). Counted and timed in the router's metrics.
// A block, not an `async fn`: an async fn's body moves its arguments into locals of their own,
// and the request would be held twice in every request's future.
#[allow(clippy::manual_async_fn)]
pub fn forward<'a>(server: &'a Arc<Server>, req: Request<'a>) -> impl Future<Output = Option<String>> + 'a {
    async move {
        let started = Instant::now();
        let (method, session_label, cancel, span) = (req.call.method(), req.session_label, req.cancel, req.span);
        let mut end = End::new(Outcome::Cancelled);
        // Its place in the audit log first: a strict log refuses a call it could not record.
        let asked = match audit::Asked::of(server, &req) {
            Ok(asked) => asked,
            Err(refused) => {
                (end.outcome, end.code) = (Outcome::Rejected, refused.code);
                count(server, method, session_label, &end, started.elapsed());
                return Some(refused.answer);
            }
        };
        let resp = run(server, req, &mut end, started).await;
        // One reading of the clock for the metrics and the audit line: the same moment.
        let elapsed = started.elapsed();
        count(server, method, session_label, &end, elapsed);
        traced::ended(span, &end);
        if let Some(asked) = asked {
            asked.write(server, end, elapsed, resp.as_deref(), cancel.was_sent());
        }
        resp
    }
}

/// The answer to `req`, which switchyard refuses itself with `error` before the policy is asked
/// (its server is not running: the `initialize` that starts it failed), and the call's audit
/// line: `refused_by` switchyard, no attempt, `elapsed` spent finding that out. Only a refused
/// request comes here: a call that runs is written by [`forward`].
pub fn refuse(server: &Server, req: &Request<'_>, error: &CallError, elapsed: std::time::Duration) -> String {
    let asked = match audit::Asked::of(server, req) {
        Ok(asked) => asked,
        // A strict log that cannot take the line refuses the call for that, and tried its line.
        Err(refused) => return refused.answer,
    };
    let answer = error.to_response(req.call.id());
    if let Some(asked) = asked {
        let mut end = End::new(Outcome::Error);
        (end.code, end.refused_by) = (Some(error.code()), Some(OWN_REFUSAL.to_string()));
        asked.write(server, end, elapsed, Some(&answer), false);
    }
    answer
}

/// Counts a forwarded call that ended as `end` says, after `elapsed`, in the router's metrics.
fn count(server: &Server, method: &str, session_label: &Arc<str>, end: &End, elapsed: std::time::Duration) {
    server.metrics.call(metrics::Call {
        server: &server.metric_name,
        method,
        tool: end.tool.as_ref(),
        outcome: end.outcome,
        code: end.code,
        session_label,
        elapsed,
    })
}

/// The policy's verdict on `req`, a request switchyard answers itself in the server's stead (a
/// list from memory while the server starts), from the plugins of `set`: the chain is asked
/// what [`forward`] would ask it, so a request the live path refuses (a required plugin that
/// does not load, a plugin's own refusal) is refused here too, and counted so. `Err` holds the
/// client's answer.
pub async fn judge(
    server: &Arc<Server>,
    set: &Arc<switchyard_policy::PluginSet>,
    req: &Request<'_>,
) -> Result<(), String> {
    let started = Instant::now();
    let asked = audit::Asked::of(server, req).map_err(|refused| refused.answer)?;
    let mut call = Forwarded::new(server, req, started);
    let mut end = End::new(Outcome::Rejected);
    let verdict = call.decide(server, set, req, &mut end).await;
    // One reading of the clock for the metrics and the audit line: the same moment.
    let elapsed = started.elapsed();
    match &verdict {
        Err(_) => server.metrics.call(metrics::Call {
            server: &server.metric_name,
            method: &call.info.method,
            tool: None,
            outcome: end.outcome,
            code: end.code,
            session_label: req.session_label,
            elapsed,
        }),
        // Allowed: answered from memory, by no instance.
        Ok(_) => end.outcome = Outcome::Ok,
    }
    if let Some(asked) = asked {
        asked.write(server, end, elapsed, verdict.as_ref().err().map(String::as_str), false);
    }
    verdict.map(drop)
}

/// One forwarded call, across its attempts: what each of them needs, worked out once.
struct Forwarded<'a> {
    /// The raw id of the client's request, put back into the response.
    client_id: &'a str,
    /// What logs, errors and status call it: the method, or "tools/call `NAME`".
    what: What,
    /// The tool's metrics label (tools/call only), read at the call's start.
    tool_label: Option<Arc<str>>,
    /// What the plugins decide on; `attempt` counts the attempts made before this one.
    info: CallInfo,
    /// Whether what only plugins read (the arguments, the declared hints) is in `info` yet.
    gathered: bool,
    first_started: Instant,
    /// Whether an attempt that failed may have run on the server (then a later attempt's
    /// "never delivered" must not tell the client the call never ran).
    may_have_run: bool,
    /// When an attempt first lost its link (the instance died, the response was lost): a start
    /// that fails after that is the server coming back, worth waiting for.
    lost_link: Option<Instant>,
    /// Why the call was first repeated, for the error if every attempt fails.
    repeated_because: String,
    /// The first attempt's failure, when the call was repeated: the root cause when a later
    /// attempt found no instance (the link went silent, then no fresh link came).
    first_failure: Option<Box<CallError>>,
    /// Where progress goes, shared by the attempts so that it only ever increases (None: the
    /// call asked for no progress).
    progress_sink: Option<Arc<Rising>>,
}

impl<'a> Forwarded<'a> {
    /// `first_started`: when the call began (where it was forwarded: the same moment, when
    /// nothing was awaited since).
    fn new(server: &Server, req: &Request<'a>, first_started: Instant) -> Self {
        let call = req.call;
        let (info, tool_label) = call_info(server, req);
        let progress_sink = call.fields().progress_token.is_some().then(|| Arc::new(Rising::new(req.link.clone())));
        Forwarded {
            client_id: call.id(),
            what: What::new(info.method.clone(), info.tool.clone()),
            tool_label,
            info,
            gathered: false,
            first_started,
            may_have_run: false,
            lost_link: None,
            repeated_because: String::new(),
            first_failure: None,
            progress_sink,
        }
    }
}

/// What the plugins are told of `req` (before its arguments and hints are gathered), and its
/// tool's metrics label (tools/call only).
fn call_info(server: &Server, req: &Request<'_>) -> (CallInfo, Option<Arc<str>>) {
    let call = req.call;
    let method = method_of(call.method());
    let name = if method == "tools/call" { call.name() } else { None };
    let tool_label = name.as_deref().map(|t| server.tool_label(t));
    // A tool the server declared is its own metrics label: the name is shared, not copied.
    let tool = name.map(|t| match &tool_label {
        Some(label) if **label == *t => label.clone(),
        _ => Arc::from(t.as_ref()),
    });
    let info = CallInfo {
        // The server's name (its metrics name is the same text, shared).
        server: server.metric_name.clone(),
        session: req.session_label.clone(),
        caller: caller_of(req),
        method,
        tool,
        arguments: None,
        declared: Default::default(),
        attempt: 0,
        task: req.task.and_then(|p| {
            let (_, client) = p.ids.as_ref()?;
            Some(TaskRef { id: client.clone(), tool: p.created_by.clone() })
        }),
    };
    (info, tool_label)
}

/// Runs the call's attempts to its response (None: cancelled), noting in `end` how it ended.
/// `started`: when the call began, read where it was forwarded.
async fn run(server: &Arc<Server>, req: Request<'_>, end: &mut End, started: Instant) -> Option<String> {
    // Declared before the request that may borrow them.
    let (shown, changed);
    // Whether a stage was awaited since the call began: then the clock is read again.
    let mut awaited = false;
    let mut req: Request<'_> = req;
    // A tool the client calls by the name a plugin gave it reaches the server under its own;
    // then the plugins' request hooks, on the params as the server is to get them. Both are
    // rare and boxed where they are awaited: a call that meets neither carries neither in its
    // future (built, then copied into its box, per request), only the tests that skip them.
    shown = match shown::shows(server, &req) {
        Some(set) => match Box::pin(shown_tool(server, &req, set, end)).await {
            Ok(shown) => {
                awaited = true;
                shown
            }
            Err(refused) => {
                (end.outcome, end.code) = (Outcome::Rejected, refused.code);
                end.refused_by = Some(refused.by);
                return Some(refused.answer);
            }
        },
        None => None,
    };
    if let Some(call) = shown.as_deref() {
        req.call = call;
    }
    changed = match hooks::request_hooked(server, &req) {
        Some(set) => match Box::pin(hooks::requested(server, &req, set, end)).await {
            Ok(changed) => {
                awaited = true;
                changed
            }
            Err(refused) => return Some(refused.answer),
        },
        None => None,
    };
    if let Some(call) = changed.as_deref() {
        req.call = call;
    }
    let mut call = Forwarded::new(server, &req, if awaited { Instant::now() } else { started });
    end.tool = call.tool_label.clone();
    if server.audit().is_some() {
        end.name = call.info.tool.clone();
    }
    let seen = call.progress_sink.as_ref().map(|p| p.seen.clone());
    let track = server.calls.start(call.what.clone(), req.session_label.clone(), seen);
    loop {
        // The plugin set is read once per attempt; an attempt finishes on the set it started with.
        let set = server.policy.current();
        track.set(Stage::Policy);
        // The first attempt starts when the call began unless the plugins were awaited (a
        // chain with no plugin answers at once; a repeat follows a wait).
        let fresh = call.info.attempt == 0 && !set.reads_calls();
        let eff = match call.decide(server, &set, &req, end).await {
            Ok(eff) => eff,
            Err(rejected) => return Some(rejected),
        };
        // Retries the host adds on its own fit in the call's first deadline: a call ends at its
        // deadline (a black-holed link included). After a lost link, a repeat waits for the
        // gate and an instance only within the server's time to come back; once sent, it has
        // the rest of the call's own time. A policy's retries each get their own timeout.
        let cap = Cap {
            at: if fresh { call.first_started } else { Instant::now() },
            deadline: eff.retry.is_none().then(|| call.first_started + eff.timeout),
            back_by: call.lost_link.map(|at| at + retry::RESTART_WAIT),
        };
        // An attempt counts once it was given an instance: one switchyard turned away before
        // (busy, the server down) reached no server.
        let last = end.spent.instance.take();
        // In a block of its own: the attempt's outcome is gone before the wait for the next
        // (held across two waits, it would take its room in this future beside the attempt).
        let e = {
            let tried = attempt(server, &req, &eff, &call, cap, &track, &mut end.spent).await;
            match end.spent.instance {
                Some(_) => end.attempts += 1,
                None => end.spent.instance = last,
            }
            match tried {
                // The answer made the client's: at once, unless a result hook or a list's overrides
                // are to be awaited (rare, boxed where awaited, with what they hold).
                Ok(answered) => {
                    if let Some(tool) = call.info.tool.as_deref() {
                        server.tool_answered(tool);
                    }
                    let later = hooks::result_hooked(server, &set, &call.info, &answered.reply)
                        || switchyard_policy::Kind::of_list_method(&call.info.method).is_some();
                    return match later {
                        true => Box::pin(answer_later(server, &set, &req, &call, &eff, answered, end)).await,
                        false => Some(finish(made(server, &req, &call, &eff, answered, end), call.client_id)),
                    };
                }
                Err(Stop::Cancelled) => return None,
                Err(Stop::Failed(e)) => e,
            }
        };
        // A failed attempt, and the wait before the next: boxed where awaited, as rare.
        if let Some(answer) = Box::pin(call.failed(e, server, &eff, &req, end, &track)).await {
            return answer;
        }
        call.info.attempt += 1;
    }
}

/// The server's answer as the client is to have it, but for its id: how it counts, task ids
/// and an `input_required` state sealed with the instance that gave it.
fn made(
    server: &Server,
    req: &Request<'_>,
    call: &Forwarded<'_>,
    eff: &Effective,
    answered: Answered,
    end: &mut End,
) -> Reply {
    let Answered { reply, permit, instance } = answered;
    (end.outcome, end.code) = reply_outcome(&reply, call.info.tool.is_some());
    let reply = task_ids(server, req, &call.info, eff, reply, permit, &instance);
    input_state(server, reply, &instance)
}

/// The server's answer made the client's through what is awaited: the plugins' result hooks,
/// and for a list, what they show this client of it.
async fn answer_later(
    server: &Arc<Server>,
    set: &Arc<switchyard_policy::PluginSet>,
    req: &Request<'_>,
    call: &Forwarded<'_>,
    eff: &Effective,
    answered: Answered,
    end: &mut End,
) -> Option<String> {
    let Answered { reply, permit, instance } = answered;
    let reply = match hooks::resulted(server, set, req, &call.info, reply, end).await {
        Ok(reply) => reply,
        Err(denied) => return Some(denied),
    };
    let reply = made(server, req, call, eff, Answered { reply, permit, instance }, end);
    Some(match switchyard_policy::Kind::of_list_method(&call.info.method) {
        Some(kind) => finish_list(server, set, req, &call.info, kind, reply, call.client_id).await,
        None => finish(reply, call.client_id),
    })
}

/// A client's way to stop one of its calls, and the reason it gave.
#[derive(Default)]
pub struct Cancel {
    pub token: tokio_util::sync::CancellationToken,
    reason: std::sync::OnceLock<String>,
    /// Set when switchyard itself stops the call (shutdown) while the client is still there:
    /// then the client is owed an error rather than silence.
    answer: std::sync::atomic::AtomicBool,
    /// Set once the call was handed to an instance: from then on it may have run.
    sent: std::sync::atomic::AtomicBool,
}

impl Cancel {
    pub fn cancel(&self, reason: Option<String>) {
        if let Some(r) = reason {
            let _ = self.reason.set(r);
        }
        self.token.cancel();
    }

    /// Stops the call on switchyard's side; the client still gets an error for it.
    pub fn cancel_and_answer(&self, reason: &str) {
        self.answer.store(true, std::sync::atomic::Ordering::Release);
        self.cancel(Some(reason.to_string()));
    }

    /// The call was handed to an instance (it may run from now on).
    pub fn mark_sent(&self) {
        self.sent.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the call was handed to an instance, so it may have run.
    pub fn was_sent(&self) -> bool {
        self.sent.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether switchyard stopped the call while its client still listens (it gets an error).
    pub fn owes_answer(&self) -> bool {
        self.answer.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The client's reason, forwarded upstream with the cancellation.
    pub fn reason(&self) -> &str {
        self.reason.get().map(String::as_str).unwrap_or("cancelled by the client")
    }
}

/// The size in bytes of the value `f` would return, never calling it: a future's size, taken
/// from its type alone (`f` is a closure whose body diverges, so no stage needs its arguments).
#[cfg(test)]
pub(crate) fn future_size<F>(_: impl FnOnce() -> F) -> usize {
    std::mem::size_of::<F>()
}

/// The sizes in bytes of the futures of this module's stages, for the guard on the size of a
/// request's future (`session::answer::sizes`): each is held inside the one a session spawns.
#[cfg(test)]
#[allow(unreachable_code, clippy::diverging_sub_expression)]
pub(crate) fn future_sizes() -> Vec<(&'static str, usize)> {
    use future_size as size;
    use std::mem::size_of;
    vec![
        ("call::forward", size(|| forward(todo!(), todo!()))),
        ("call::run", size(|| run(todo!(), todo!(), todo!(), todo!()))),
        ("Forwarded::decide", size(|| Forwarded::decide(todo!(), todo!(), todo!(), todo!(), todo!()))),
        ("call::attempt", size(|| attempt(todo!(), todo!(), todo!(), todo!(), todo!(), todo!(), todo!()))),
        ("Attempt::send", size(|| attempt::Attempt::send(todo!(), todo!(), todo!(), todo!()))),
        ("Attempt::send_in", size(|| attempt::Attempt::send_in(todo!(), todo!(), todo!(), todo!()))),
        ("Attempt::acquire", size(|| attempt::Attempt::acquire(todo!()))),
        ("Attempt::gate", size(|| attempt::Attempt::gate(todo!()))),
        ("rare: call::shown_tool", size(|| shown_tool(todo!(), todo!(), todo!(), todo!()))),
        ("rare: hooks::requested", size(|| hooks::requested(todo!(), todo!(), todo!(), todo!()))),
        ("rare: hooks::resulted", size(|| hooks::resulted(todo!(), todo!(), todo!(), todo!(), todo!(), todo!()))),
        (
            "rare: reply::finish_list",
            size(|| finish_list(todo!(), todo!(), todo!(), todo!(), todo!(), todo!(), todo!())),
        ),
        (
            "rare: Forwarded::failed",
            size(|| Forwarded::failed(todo!(), todo!(), todo!(), todo!(), todo!(), todo!(), todo!())),
        ),
        ("type Call", size_of::<Call>()),
        ("type Request", size_of::<Request<'_>>()),
        ("type End", size_of::<End>()),
        ("type Forwarded", size_of::<Forwarded<'_>>()),
        ("type audit::Asked", size_of::<audit::Asked<'_>>()),
        ("type Effective", size_of::<Effective>()),
        ("type Attempt", size_of::<attempt::Attempt<'_, '_>>()),
        ("type Span", size_of::<switchyard_telemetry::Span>()),
    ]
}
