//! Runs one forwarded request: policy decision, clamps, gate, pool, upstream, timeout and retry.

mod deadline;
mod resolve;
mod retry;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::gate::Permit;
use crate::peer::ClientPeer;
use crate::placement::ScopeKey;
use crate::pool::Lease;
use crate::server::Server;
use crate::server::calls::{Stage, Track};
use crate::server::tasks::{self, Pinned};
use crate::upstream::{Instance, ProgressSink, Reply};
use deadline::{NOTICE_LEVEL, Waiting, bounded};
pub use resolve::{Effective, resolve};
use retry::Next;
use switchyard_core::codec::{self, Envelope};
use switchyard_core::decision::{CallInfo, Concurrency, TaskRef};
use switchyard_core::error::{CallError, Unanswered};
use switchyard_core::ids::SessionId;
use switchyard_core::metrics::{Call, Outcome};
use switchyard_policy::{Kind, PluginSet, annotate};

/// Why an attempt ended without a response.
enum Stop {
    Cancelled,
    Failed(CallError),
}

/// A request of a client, as the engine needs it.
pub struct Request<'a> {
    pub line: &'a str,
    pub env: &'a Envelope,
    pub session: SessionId,
    pub session_label: &'a str,
    pub link: &'a Arc<ClientPeer>,
    pub cancel: &'a Cancel,
    /// A 2026-07-28-era request (protocol version in `_meta`): runs on that era's instances.
    pub modern: bool,
    /// A request about one task: it goes to the instance holding the task, past gate and pool.
    pub task: Option<&'a Pinned>,
    /// The retry of a request the server answered `input_required` (2026-07-28): it goes to the
    /// instance that asked for the input, through the gate, whatever the pool would pick.
    pub resume: Option<Arc<Instance>>,
}

/// Who sent `req`: what its session knows of its client; for a request of the 2026-07-28 era,
/// which has no initialize, its own protocol version and the `clientInfo` in its `_meta`.
fn caller_of(req: &Request<'_>) -> switchyard_core::decision::Caller {
    const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    let mut caller = req.link.caller();
    let Some(params) = req.env.params.as_ref().filter(|_| req.modern) else { return caller };
    if let Some(version) = codec::envelope_version(req.line, params) {
        caller.era = version;
    }
    let text = &req.line[params.clone()];
    if text.contains(CLIENT_INFO)
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(text)
    {
        let info = &v["_meta"][CLIENT_INFO];
        let part = |k: &str| info.get(k).and_then(|s| s.as_str()).map(str::to_string);
        if let Some(name) = part("name") {
            caller.name = Some(name);
            caller.version = part("version");
        }
    }
    caller
}

/// How long a call by an unknown name waits for a starting server's tool list.
const RENAMED_WAIT: Duration = Duration::from_secs(2);

/// The server's item of `kind` a plugin shows this client as `called`, when the client calls
/// by a name the server does not list and no list this session saw gave it: a daemon started
/// anew under a `connect` whose client listed before, or a client that keeps its tool list
/// between sessions. Asked of the chain for the items the server is known to list (its answers
/// are mostly kept already).
async fn renamed_to(
    set: &Arc<PluginSet>,
    server: &Arc<Server>,
    req: &Request<'_>,
    caller: &switchyard_core::decision::Caller,
    kind: Kind,
    called: &str,
) -> Option<String> {
    // A server just started has not been asked for its tools yet: it is, once (a name it does
    // not list is then known not to be its own).
    // (A server of the 2026-07-28 era is not asked: its tools are learned from the lists that
    // pass.)
    if kind == Kind::Tool && !req.modern {
        server.declared_hints_fetched(called, RENAMED_WAIT).await;
    }
    let items: Vec<_> = server.known_names(kind).iter().map(|n| server.listed_item(kind, n)).collect();
    let shown = set.list_tools_async(req.session_label, caller, items.clone(), false).await;
    items
        .into_iter()
        .zip(shown)
        .find(|(_, s)| s.hidden_by.is_none() && s.listing.name == called)
        .map(|(item, _)| item.name)
}

/// A `tools/call` (or `prompts/get`) checked against what the plugins show its client (only
/// when a plugin may hide or rename tools and prompts): Ok(Some(the request with the server's
/// name of the tool)) when the client called it by a name a plugin gave it; Ok(None) to send it
/// as it is; Err(the client's error) when a plugin hides the tool from this client or shows it
/// under another name.
async fn shown_tool(server: &Arc<Server>, req: &Request<'_>) -> Result<Option<(String, Envelope)>, String> {
    let kind = match req.env.method.as_deref() {
        Some("tools/call") => Kind::Tool,
        Some("prompts/get") => Kind::Prompt,
        _ => return Ok(None),
    };
    if req.task.is_some() {
        return Ok(None);
    }
    let set = server.policy.current();
    if !set.may_hide_or_rename(&server.name) {
        return Ok(None);
    }
    let fields = req.env.params.as_ref().map(|p| codec::param_fields(req.line, p)).unwrap_or_default();
    let Some(called) = fields.name else { return Ok(None) };
    let caller = caller_of(req);
    let mut view = req.link.tool_view(&server.name, kind);
    if !view.as_ref().is_some_and(|v| v.renamed.contains_key(&called))
        && !server.lists(kind, &called)
        && let Some(original) = renamed_to(&set, server, req, &caller, kind, &called).await
    {
        let found = annotate::ClientView { renamed: [(called.clone(), original)].into(), ..Default::default() };
        req.link.set_tool_view(&server.name, kind, found);
        view = req.link.tool_view(&server.name, kind);
    }
    let listed = |name: &str| server.listed_item(kind, name);
    let client_id = &req.line[req.env.id.clone().expect("requests have ids")];
    match annotate::check_call(&set, req.session_label, &caller, view.as_deref(), &called, listed).await {
        Ok(None) => Ok(None),
        Ok(Some(original)) => {
            let internal = |why: String| {
                let msg = format!(
                    "{} `{called}`: switchyard could not put the server's name `{original}` in the request: {why}",
                    kind.noun()
                );
                codec::response_error(client_id, codec::INTERNAL_ERROR, &msg, None)
            };
            let mut v: serde_json::Value = serde_json::from_str(req.line).map_err(|e| internal(e.to_string()))?;
            v["params"]["name"] = serde_json::Value::String(original.clone());
            let line = v.to_string();
            let env = codec::parse(&line).map_err(|e| internal(e.message()))?;
            Ok(Some((line, env)))
        }
        Err(rejection) => {
            tracing::info!(server = %server.name, session = req.session_label, "{} `{called}` rejected by `{}`: {}", kind.noun(), rejection.plugin, rejection.reason);
            Err(CallError::Rejected(rejection).to_response(client_id))
        }
    }
}

/// How a call ended, for the metrics (filled in by [`run`]).
struct End {
    outcome: Outcome,
    code: Option<i64>,
    /// The tool's metrics label (tools/call only).
    tool: Option<Arc<str>>,
}

/// Forwards a request to the server and returns the response for the client (None when the
/// client cancelled it: then no response is owed). Counted and timed in the router's metrics.
pub async fn forward(server: &Arc<Server>, req: Request<'_>) -> Option<String> {
    let started = Instant::now();
    let (method, session_label) = (req.env.method.as_deref().unwrap_or_default(), req.session_label);
    let mut end = End { outcome: Outcome::Cancelled, code: None, tool: None };
    // A tool the client calls by the name a plugin gave it reaches the server under its own.
    let renamed = match shown_tool(server, &req).await {
        Ok(renamed) => renamed,
        Err(refused) => {
            end.outcome = Outcome::Rejected;
            end.code = Some(codec::POLICY_REJECTED);
            server.metrics.call(Call {
                server: &server.metric_name,
                method,
                tool: None,
                outcome: end.outcome,
                code: end.code,
                session_label,
                elapsed: started.elapsed(),
            });
            return Some(refused);
        }
    };
    let resp = match &renamed {
        Some((line, env)) => run(server, Request { line, env, ..req }, &mut end).await,
        None => run(server, req, &mut end).await,
    };
    server.metrics.call(Call {
        server: &server.metric_name,
        method,
        tool: end.tool.as_ref(),
        outcome: end.outcome,
        code: end.code,
        session_label,
        elapsed: started.elapsed(),
    });
    resp
}

/// One forwarded call, across its attempts: what each of them needs, worked out once.
struct Forwarded<'a> {
    /// The raw id of the client's request, put back into the response.
    client_id: &'a str,
    /// What logs and errors call it: the method, or "tools/call `NAME`".
    what: String,
    /// Where `params._meta.progressToken` is, when the client asked for progress.
    progress: Option<Range<usize>>,
    /// Where `params.arguments` is (given to plugins, which are the only ones to read it).
    arguments: Option<Range<usize>>,
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
    /// Where progress goes, shared by the attempts so that it only ever increases.
    progress_sink: Arc<Rising>,
}

impl<'a> Forwarded<'a> {
    fn new(server: &Server, req: &Request<'a>) -> Self {
        let (line, env) = (req.line, req.env);
        let client_id = &line[env.id.clone().expect("requests have ids")];
        let method = env.method.clone().unwrap_or_default();
        let fields = env.params.as_ref().map(|p| codec::param_fields(line, p)).unwrap_or_default();
        let tool = if method == "tools/call" { fields.name.clone() } else { None };
        let what = match &tool {
            Some(t) => format!("tools/call `{t}`"),
            None => method.clone(),
        };
        let progress = env.params.as_ref().and_then(|p| codec::progress_token_in_request(line, p));
        let info = CallInfo {
            server: server.name.clone(),
            session: req.session_label.to_string(),
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
        Forwarded {
            client_id,
            what,
            progress,
            arguments: fields.arguments,
            info,
            gathered: false,
            first_started: Instant::now(),
            may_have_run: false,
            lost_link: None,
            repeated_because: String::new(),
            first_failure: None,
            progress_sink: Arc::new(Rising { to: req.link.clone(), last: std::sync::Mutex::new(None) }),
        }
    }
}

/// Passes a call's progress on only while it increases. A repeated call's server counts from
/// the start again, and the client must never see progress on its token go back (the spec
/// requires it to increase), so the repeat's is held back until it passes what was sent.
struct Rising {
    to: Arc<ClientPeer>,
    last: std::sync::Mutex<Option<f64>>,
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
        }
        if let Ok(note) = serde_json::from_str::<Note>(&line) {
            let mut last = self.last.lock().expect("lock");
            if last.is_some_and(|l| note.params.progress <= l) {
                return;
            }
            *last = Some(note.params.progress);
        }
        crate::upstream::ProgressSink::progress(&*self.to, line);
    }
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

/// Runs the call's attempts to its response (None: cancelled), noting in `end` how it ended.
async fn run(server: &Arc<Server>, req: Request<'_>, end: &mut End) -> Option<String> {
    let mut call = Forwarded::new(server, &req);
    end.tool = call.info.tool.as_deref().map(|t| server.tool_label(t));
    let track = server.calls.start(&call.what, req.session_label);
    loop {
        // The plugin set is read once per attempt; an attempt finishes on the set it started with.
        let set = server.policy.current();
        let eff = match call.decide(server, &set, &req, end).await {
            Ok(eff) => eff,
            Err(rejected) => return Some(rejected),
        };
        // Retries the host adds on its own fit in the call's first deadline: a call ends at its
        // deadline (a black-holed link included). After a lost link, a repeat waits for the
        // gate and an instance only within the server's time to come back; once sent, it has
        // the rest of the call's own time. A policy's retries each get their own timeout.
        let cap = Cap {
            deadline: eff.retry.is_none().then(|| call.first_started + eff.timeout),
            back_by: call.lost_link.map(|at| at + retry::RESTART_WAIT),
        };
        let e = match attempt(server, &req, &eff, &call, cap, &track).await {
            Ok(Answered { reply, permit, instance }) => {
                (end.outcome, end.code) = reply_outcome(&reply, call.info.tool.is_some());
                let reply = task_ids(server, &req, &call.info, &eff, reply, permit, &instance);
                let reply = input_state(server, reply, &instance);
                return Some(finish(server, &set, &req, &call.info, reply, call.client_id).await);
            }
            Err(Stop::Cancelled) => return None,
            Err(Stop::Failed(e)) => e,
        };
        let backoff = match call.after_failure(e, server, &eff, &req, end).await {
            Next::Retry { backoff, of, after } => {
                let (attempt, at) = (call.info.attempt + 2, Instant::now() + backoff);
                track.set(Stage::Repeating { attempt, of, at, after });
                backoff
            }
            Next::GiveUp(answer) => return Some(answer),
        };
        tokio::select! {
            _ = req.cancel.token.cancelled() => return None,
            _ = tokio::time::sleep(backoff) => {}
        }
        call.info.attempt += 1;
    }
}

/// How an answer from the server counts: a JSON-RPC error (with its code), a tool's own error
/// (`isError`), or a success. Only an error is parsed further.
fn reply_outcome(reply: &Reply, tool_call: bool) -> (Outcome, Option<i64>) {
    if reply.env.is_error {
        let code =
            serde_json::from_str::<serde_json::Value>(&reply.line).ok().and_then(|v| v["error"]["code"].as_i64());
        return (Outcome::Error, code);
    }
    match &reply.env.result {
        Some(r) if tool_call && switchyard_core::metrics::is_tool_error(&reply.line[r.clone()]) => {
            (Outcome::ToolError, None)
        }
        _ => (Outcome::Ok, None),
    }
}

/// An attempt's answer, with the gate permit it held and the instance that gave it.
struct Answered {
    reply: Reply,
    /// None for a task request, which passes the gate.
    permit: Option<Permit>,
    instance: Arc<Instance>,
}

/// Task ids in a reply, between the server's and the client's: a call that created a task gets
/// the id that routes back to its instance (and its gate permit stays with the task); a request
/// about a task gets the id the client sent. Other replies pass unchanged.
fn task_ids(
    server: &Server,
    req: &Request<'_>,
    info: &CallInfo,
    eff: &Effective,
    mut reply: Reply,
    permit: Option<Permit>,
    instance: &Instance,
) -> Reply {
    let Some(r) = reply.env.result.clone() else { return reply };
    let result = &reply.line[r.clone()];
    let new = match req.task {
        Some(Pinned { ids: Some((upstream, client)), .. }) => {
            // tasks/result answers once the task is terminal; the others say its status.
            let status = match req.env.method.as_deref() {
                Some("tasks/result") => Some("completed".to_string()),
                _ => tasks::status_in(result),
            };
            if let Some(status) = status {
                server.hub.tasks.saw_status(instance.number(), upstream, &status);
            }
            tasks::replace_task_id(result, upstream, client)
        }
        Some(Pinned { ids: None, .. }) => None,
        None if req.env.method.as_deref() == Some("tools/call") => {
            let Some((upstream, status, ttl)) = tasks::created_task(result) else { return reply };
            let session = if req.modern { tasks::NO_SESSION } else { req.session };
            // Held until the task ends, or its time to live (the call's longest allowed
            // time when the server gives none) passes.
            let hold = Duration::from_millis(ttl.unwrap_or(server.limits.max_call_timeout_ms));
            let permit = permit.filter(|_| !tasks::TERMINAL.contains(&status.as_str()));
            if permit.is_some() && !matches!(eff.concurrency, Concurrency::Shared) {
                tracing::info!(server = %server.name, instance = %instance.label(), "task {upstream} keeps its call's {:?} gate until it ends", eff.concurrency);
            }
            let tool = info.tool.clone();
            let client =
                server.hub.tasks.created(&server.name, instance.number(), session, &upstream, tool, permit, hold);
            tasks::replace_task_id(result, &upstream, &client)
        }
        None => None,
    };
    if let Some(new) = new {
        let line = codec::splice(&reply.line, r, &new);
        match codec::parse(&line) {
            Ok(env) => reply = Reply { line, env },
            Err(e) => {
                tracing::warn!(server = %server.name, "a reply with task ids rewritten did not parse ({}); sent as the server sent it", e.message())
            }
        }
    }
    reply
}

/// The `requestState` of an `input_required` reply, sealed with the instance that gave it: the
/// client's retry carries it back, and goes to that instance (a server may keep the state, or the
/// key that protects it, in that instance's memory only). Other replies pass unchanged.
fn input_state(server: &Server, reply: Reply, instance: &Instance) -> Reply {
    let Some(r) = reply.env.result.clone() else { return reply };
    let Some(state) = tasks::input_state(&reply.line[r.clone()]) else { return reply };
    let route = tasks::Route { instance: instance.number(), session: tasks::NO_SESSION, upstream: state };
    let sealed = tasks::seal_state(&server.name, &route);
    let Some(result) = tasks::replace_input_state(&reply.line[r.clone()], &sealed) else { return reply };
    let line = codec::splice(&reply.line, r, &result);
    match codec::parse(&line) {
        Ok(env) => Reply { line, env },
        Err(e) => {
            tracing::warn!(server = %server.name, "an input_required reply with its state sealed did not parse ({}); sent as the server sent it", e.message());
            reply
        }
    }
}

/// Puts the client's id back and, for tools/list, applies annotation overrides.
async fn finish(
    server: &Server,
    set: &Arc<PluginSet>,
    req: &Request<'_>,
    info: &CallInfo,
    reply: Reply,
    client_id: &str,
) -> String {
    let id_span = reply.env.id.clone().expect("responses routed by id have one");
    if let Some(kind) = Kind::of_list_method(&info.method)
        && let Some(r) = reply.env.result.clone()
    {
        let result = &reply.line[r.clone()];
        server.learn_listed(kind, result);
        if set.reads_calls() {
            let lane = req.session_label;
            match annotate::rewrite_list(set, lane, &info.caller, &server.name, kind, result).await {
                Ok(rewritten) => {
                    if set.may_hide_or_rename(&server.name) {
                        req.link.set_tool_view(&server.name, kind, rewritten.view);
                    }
                    if let Some(new) = rewritten.result {
                        return codec::splice_many(&reply.line, vec![(id_span, client_id), (r, new.as_str())]);
                    }
                }
                Err(e) => {
                    tracing::warn!(server = %server.name, "{} result left as the server sent it: {e}", kind.list_method())
                }
            }
        }
    }
    codec::splice(&reply.line, id_span, client_id)
}

/// What bounds an attempt beyond its own timeout.
#[derive(Clone, Copy)]
struct Cap {
    /// The call's first deadline (for the host's own repeats, which fit in it).
    deadline: Option<Instant>,
    /// After a lost link: when the server's time to come back ends. A repeat that has not found
    /// the gate and an instance by then is given up, with that as the reason.
    back_by: Option<Instant>,
}

/// One attempt of a call, and its deadline.
struct Attempt<'r, 'a> {
    track: &'r Track<'r>,
    server: &'r Arc<Server>,
    req: &'r Request<'a>,
    eff: &'r Effective,
    what: &'r str,
    started: Instant,
    deadline: Instant,
    /// When waiting for the gate and an instance ends: the deadline, or sooner after a lost
    /// link (see [`Cap::back_by`]).
    wait_until: Instant,
    /// Safe to repeat by the server's own declaration: may be sent once more on a new
    /// connection when its link has been silent while the server answers probes.
    safe: bool,
    /// The instances the call's placement asks for (the pool's affinity may narrow it).
    scope: ScopeKey,
    /// Where the notifications of a `subscriptions/listen` stream go (its client, its request).
    /// Such a stream is a subscription, not a call: it passes no gate, holds no place in its
    /// instance's calls, and has no deadline once sent (it ends when its client cancels it, or
    /// when its link or instance does).
    stream: Option<Arc<dyn ProgressSink>>,
}

async fn attempt(
    server: &Arc<Server>,
    req: &Request<'_>,
    eff: &Effective,
    call: &Forwarded<'_>,
    cap: Cap,
    track: &Track<'_>,
) -> Result<Answered, Stop> {
    let what = call.what.as_str();
    let progress = call.progress.clone().map(|span| (span, call.progress_sink.clone() as Arc<dyn ProgressSink>));
    let safe = call.safe_now(server);
    let started = Instant::now();
    let deadline = (started + eff.timeout).min(cap.deadline.unwrap_or(started + eff.timeout));
    let wait_until = deadline.min(cap.back_by.unwrap_or(deadline));
    track.set(Stage::Gate);
    let stream = (call.info.method == "subscriptions/listen")
        .then(|| Arc::new(StreamTo { to: req.link.clone(), id: call.client_id.to_string() }) as Arc<dyn ProgressSink>);
    let scope = ScopeKey::wanted(eff.placement.as_ref(), req.session, &call.info.caller);
    let attempt = Attempt { track, server, req, eff, what, started, deadline, wait_until, safe, scope, stream };
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
        if instance.is_dead() {
            return Err(ended(&instance, "held the task", "and the task with it; start the task again"));
        }
        let reply = attempt.send(&instance, progress).await?;
        return Ok(Answered { reply, permit: None, instance });
    }
    if let Some(instance) = req.resume.clone() {
        if instance.is_dead() {
            let again =
                "and the request's state with it; send the request again without `requestState` and `inputResponses`";
            return Err(ended(&instance, "asked for the client's input", again));
        }
        let permit = attempt.gate().await?;
        let reply = attempt.send(&instance, progress).await?;
        return Ok(Answered { reply, permit: Some(permit), instance });
    }
    let first = attempt.waits_for_a_start();
    let (permit, lease) = attempt.acquire().await?;
    let instance = lease.instance.clone();
    // A call that waited for its instance to start has its own time to run from then.
    let attempt = match first {
        true => {
            Attempt { deadline: attempt.deadline.max(Instant::now() + (attempt.deadline - attempt.started)), ..attempt }
        }
        false => attempt,
    };
    if attempt.stream.is_some() {
        // Open for as long as its client wants it: a serial server's next call does not wait for it.
        drop(lease);
    }
    let reply = attempt.send(&instance, progress).await?;
    Ok(Answered { reply, permit, instance })
}

impl Attempt<'_, '_> {
    /// `what` timed out (`waiting`: for what).
    fn timed_out(&self, what: String, waiting: Option<String>) -> Stop {
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
            client_id: &req.line[req.env.id.clone().expect("requests have ids")],
            may_notify: Box::new(move || {
                server.declares_logging() && server.hub.session_level(req.session).is_none_or(|l| l >= NOTICE_LEVEL)
            }),
        }
    }

    /// Waits for the gate within the deadline.
    async fn gate(&self) -> Result<Permit, Stop> {
        let (server, req, eff) = (self.server, self.req, self.eff);
        let waiting = self.waiting();
        let gate_wait = || server.gate.blockers().to_string();
        let permit = bounded(
            server.gate.acquire(eff.concurrency.clone()),
            self.wait_until,
            &req.cancel.token,
            &waiting,
            gate_wait,
        )
        .await
        .map_err(|e| e.map_or(Stop::Cancelled, |w| self.waited_out(self.what.to_string(), Some(w), self.wait_until)))?;
        let kind = match eff.concurrency {
            Concurrency::Shared => "shared",
            Concurrency::Exclusive => "exclusive",
            Concurrency::Keyed(_) => "keyed",
        };
        server.metrics.gate_wait(&server.metric_name, kind, self.started.elapsed());
        Ok(permit)
    }

    /// Waits for the gate (not a listen stream, which runs nothing), then for an instance of the
    /// pool, within the deadline.
    async fn acquire(&self) -> Result<(Option<Permit>, Lease), Stop> {
        let (server, req, eff, what) = (self.server, self.req, self.eff, self.what);
        // Before an instance was found, the error says what the call waited for.
        let until = self.pool_deadline();
        let timeout = |waiting: Option<String>| self.waited_out(what.to_string(), waiting, until);
        let waiting = self.waiting();
        let permit = match self.stream {
            Some(_) => None,
            None => Some(self.gate().await?),
        };
        let pool = if req.modern { server.modern_pool(&eff.pool) } else { &eff.pool };
        self.track.set(Stage::Instance(pool.name.clone()));
        let pool_wait = || pool.wait_status(req.session, &self.scope);
        let lease = bounded(pool.acquire(req.session, &self.scope), until, &req.cancel.token, &waiting, pool_wait)
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
        Ok((permit, lease))
    }

    /// Sends the call to `inst` and waits for its reply until the deadline (which progress
    /// extends, up to `limits.max_call_timeout_ms`) or the client's cancel.
    async fn send(
        &self,
        inst: &Arc<Instance>,
        route: Option<(Range<usize>, Arc<dyn ProgressSink>)>,
    ) -> Result<Reply, Stop> {
        let (server, req, eff, what) = (self.server, self.req, self.eff, self.what);
        let activity = Arc::new(Notify::new());
        let failed = |u: Unanswered| Stop::Failed(u.into_error(&server.name, what));
        let sent = inst
            .send(req.line, req.env, req.session, route.clone(), Some(activity.clone()), self.stream.clone())
            .map_err(failed)?;
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
        let mut second: Option<crate::upstream::Sent> = None;
        let cancel_all = |reason: &str, second: &Option<crate::upstream::Sent>| {
            inst.cancel(sent.upstream_id, reason);
            if let Some(s) = second {
                inst.cancel(s.upstream_id, reason);
            }
        };
        loop {
            tokio::select! {
                r = async { (&mut second.as_mut().expect("guarded").reply).await }, if second.is_some() => {
                    let copy = second.take().expect("guarded");
                    match r {
                        Ok(Ok(reply)) => {
                            inst.cancel(sent.upstream_id, "switchyard: answered on a new connection");
                            server.record_success();
                            return Ok(reply);
                        }
                        // The copy failed: the first may still be answered.
                        _ => tracing::debug!(instance = %inst.label(), "the second copy of {what} (request {}) got no answer", copy.upstream_id),
                    }
                }
                _ = async { tokio::time::sleep_until(hedge_at.expect("guarded")).await }, if hedge_at.is_some() => {
                    hedge_at = None;
                    match inst.silent_for(sent.upstream_id) {
                        Some(silent) if silent >= window => {
                            if let Ok(copy) = inst.send(req.line, req.env, req.session, route.clone(), Some(activity.clone()), self.stream.clone()) {
                                tracing::info!(
                                    server = %server.name, instance = %inst.label(), session = req.session_label,
                                    "{what} has had nothing from its link for {:.1} s while the server answers probes: sent once more on a new connection (it is safe to repeat); the first answer wins",
                                    silent.as_secs_f64()
                                );
                                second = Some(copy);
                            }
                        }
                        // Bytes came meanwhile: look again once it could have been silent that long.
                        Some(silent) => hedge_at = Some(Instant::now() + hedge_after(window) - silent.min(window)),
                        None => {}
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
                    return Err(self.timed_out(format!("{what} (on {})", inst.label()), None));
                }
                _ = req.cancel.token.cancelled() => {
                    cancel_all(req.cancel.reason(), &second);
                    return Err(Stop::Cancelled);
                }
            }
        }
    }
}

/// How long a safe call's link may be silent before the call is sent once more: a liveness
/// window, the probe's time (a quarter of it) and a little, so a dead path has ended the link
/// first.
fn hedge_after(window: Duration) -> Duration {
    window + window / 4 + Duration::from_millis(500)
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
