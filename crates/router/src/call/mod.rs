//! Runs one forwarded request: policy decision, clamps, gate, pool, upstream, timeout and retry.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::peer::SessionLink;
use crate::pool::Pool;
use crate::server::Server;
use switchyard_core::codec::{self, Envelope};
use switchyard_core::decision::{CallInfo, Concurrency, Decision, Retry};
use switchyard_core::error::{CallError, Unanswered};
use switchyard_core::ids::SessionId;
use switchyard_core::metrics::{Call, Outcome, RetryReason};
use switchyard_policy::{PluginSet, annotate};

/// After this long waiting for the gate or the pool, the client is told why (so it sees "busy").
const WAIT_NOTICE_AFTER: Duration = Duration::from_secs(1);
/// The retry a read-only or idempotent call gets when no plugin says otherwise.
const DEFAULT_RETRY: Retry = Retry { attempts: 1, backoff_ms: 100 };
const NO_RETRY: Retry = Retry { attempts: 0, backoff_ms: 0 };

/// A decision after host defaults and clamps.
pub struct Effective {
    pub concurrency: Concurrency,
    pub pool: Arc<Pool>,
    pub timeout: Duration,
    /// None: the host default, decided when a failure happens (by then tools/list is usually known).
    pub retry: Option<Retry>,
}

/// Fills in defaults and holds the decision within the configured limits (logging each clamp).
pub fn resolve(server: &Server, decision: Decision) -> Effective {
    let limits = &server.limits;
    let pool = match decision.pool.as_deref() {
        None => server.default_pool().clone(),
        Some(name) => match server.pool(name) {
            Some(p) => p.clone(),
            None => {
                tracing::warn!(server = %server.name, "policy chose pool `{name}`, which is not configured; using `default`");
                server.default_pool().clone()
            }
        },
    };
    let mut timeout_ms = decision.timeout_ms.unwrap_or(limits.call_timeout_ms);
    if timeout_ms > limits.max_call_timeout_ms || timeout_ms == 0 {
        let clamped = timeout_ms.clamp(1, limits.max_call_timeout_ms);
        tracing::info!(server = %server.name, "policy timeout {timeout_ms} ms clamped to {clamped} ms (limits.max_call_timeout_ms)");
        timeout_ms = clamped;
    }
    let retry = decision.retry.map(|r| {
        let c = Retry {
            attempts: r.attempts.min(limits.max_retries),
            backoff_ms: r.backoff_ms.min(limits.max_backoff_ms),
        };
        if c != r {
            tracing::info!(server = %server.name, "policy retry {r:?} clamped to {c:?} (limits.max_retries / max_backoff_ms)");
        }
        c
    });
    Effective {
        concurrency: decision.concurrency.unwrap_or(Concurrency::Shared),
        pool,
        timeout: Duration::from_millis(timeout_ms),
        retry,
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
    pub link: &'a Arc<SessionLink>,
    pub cancel: &'a Cancel,
    /// A 2026-07-28-era request (protocol version in `_meta`): runs on that era's instances.
    pub modern: bool,
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
    let resp = run(server, req, &mut end).await;
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

async fn run(server: &Arc<Server>, req: Request<'_>, end: &mut End) -> Option<String> {
    let line = req.line;
    let env = req.env;
    let client_id = &line[env.id.clone().expect("requests have ids")];
    let method = env.method.clone().unwrap_or_default();
    let fields = env.params.as_ref().map(|p| codec::param_fields(line, p)).unwrap_or_default();
    let tool = if method == "tools/call" { fields.name.clone() } else { None };
    end.tool = tool.as_deref().map(|t| server.tool_label(t));
    let what = match &tool {
        Some(t) => format!("tools/call `{t}`"),
        None => method.clone(),
    };
    let progress = env.params.as_ref().and_then(|p| codec::progress_token_in_request(line, p));
    let mut call = CallInfo {
        server: server.name.clone(),
        session: req.session_label.to_string(),
        method: method.clone(),
        tool: tool.clone(),
        arguments: None,
        declared: Default::default(),
        attempt: 0,
    };
    let mut gathered = false;
    let first_started = Instant::now();
    // Whether an attempt that failed may have run on the server (then a later attempt's
    // "never delivered" must not tell the client the call never ran).
    let mut may_have_run = false;
    loop {
        // The plugin set is read once per attempt; an attempt finishes on the set it started with.
        let set = server.policy.current();
        // What only plugins read is gathered only when there are plugins: arguments can be large
        // (a whole file for write_file), and the declared hints take a lookup.
        if !set.is_empty() && !gathered {
            gathered = true;
            call.arguments = fields.arguments.as_ref().map(|r| line[r.clone()].to_string());
            call.declared = tool.as_deref().map(|t| server.declared_hints(t)).unwrap_or_default();
        }
        let decision = match set.decide_async(&call).await {
            Ok(d) => d,
            Err(rejection) => {
                tracing::info!(server = %server.name, session = req.session_label, "{what} rejected by `{}`: {}", rejection.plugin, rejection.reason);
                (end.outcome, end.code) = (Outcome::Rejected, Some(codec::POLICY_REJECTED));
                return Some(CallError::Rejected(rejection).to_response(client_id));
            }
        };
        // The chain's own answer is kept only for the debug line: no copy per call otherwise.
        let decided = tracing::enabled!(tracing::Level::DEBUG).then(|| decision.clone());
        let eff = resolve(server, decision);
        if let Some(decided) = &decided {
            log_decision(server, &set, &call, &what, decided, &eff);
        }
        // Retries the host adds on its own fit in the call's first deadline: a call ends at its
        // deadline (a black-holed link included). A policy's retries each get their own timeout.
        let cap = eff.retry.is_none().then(|| first_started + eff.timeout);
        match attempt(server, &req, &eff, &what, progress.clone(), cap).await {
            Ok(reply) => {
                (end.outcome, end.code) = reply_outcome(&reply, tool.is_some());
                return Some(finish(server, &set, req.session_label, &method, reply, client_id).await);
            }
            Err(Stop::Cancelled) => return None,
            Err(Stop::Failed(mut e)) => {
                if matches!(e, CallError::Timeout { .. }) {
                    server.metrics.timeout(&server.metric_name, end.tool.as_ref());
                }
                let retry = match (e.is_retryable(), eff.retry) {
                    (false, _) => NO_RETRY,
                    (true, Some(r)) => r,
                    // A call that hung once would hang again on the same instance, past the
                    // deadline the client was promised: only a policy retries timeouts.
                    (true, None) if matches!(e, CallError::Timeout { .. }) => NO_RETRY,
                    (true, None) => default_retry(server, &set, &call).await,
                };
                if let CallError::Lost { delivered, cause, .. } = &mut e
                    && !*delivered
                    && may_have_run
                {
                    *delivered = true;
                    cause.push_str("; an earlier attempt may have run");
                }
                may_have_run |= !e.never_delivered();
                // A request the server never saw is repeated whatever the call is: it cannot
                // have run (connect refused, session unknown before processing).
                let retry = match e.never_delivered() && retry.attempts == 0 {
                    true => DEFAULT_RETRY,
                    false => retry,
                };
                if call.attempt >= retry.attempts {
                    // The client waited for every attempt, not just the last: say so.
                    if let CallError::Timeout { elapsed, attempts, .. } = &mut e {
                        *elapsed = first_started.elapsed();
                        *attempts = call.attempt + 1;
                    }
                    tracing::info!(
                        server = %server.name, session = req.session_label,
                        "{what} failed after {} attempt(s): {e}", call.attempt + 1
                    );
                    (end.outcome, end.code) = (failure_outcome(&e), Some(e.code()));
                    return Some(e.to_response(client_id));
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
                tokio::select! {
                    _ = req.cancel.token.cancelled() => return None,
                    _ = tokio::time::sleep(backoff) => {}
                }
                call.attempt += 1;
            }
        }
    }
}

/// How an answer from the server counts: a JSON-RPC error (with its code), a tool's own error
/// (`isError`), or a success. Only an error is parsed further.
fn reply_outcome(reply: &crate::upstream::Reply, tool_call: bool) -> (Outcome, Option<i64>) {
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

/// One debug line per attempt: what the plugins decided and what the host made of it (after
/// defaults and clamps). Argument values are never logged; gate keys are, as the gate uses them.
fn log_decision(server: &Server, set: &PluginSet, call: &CallInfo, what: &str, decided: &Decision, eff: &Effective) {
    let concurrency = match &eff.concurrency {
        Concurrency::Shared => "shared".to_string(),
        Concurrency::Exclusive => "exclusive".to_string(),
        Concurrency::Keyed(keys) => format!("keyed {keys:?}"),
    };
    let retry = match eff.retry {
        Some(r) => format!("{} retries, backoff {} ms", r.attempts, r.backoff_ms),
        // The default depends on the tool's effective annotations; working them out here would
        // cost a plugin call just for a log line.
        None => "retries by the host default (one if the tool is read-only or idempotent)".to_string(),
    };
    let chain = if set.is_empty() { "none".to_string() } else { set.names().join(", ") };
    tracing::debug!(
        server = %server.name, session = %call.session, attempt = call.attempt,
        "decision for {what}: concurrency {concurrency}, pool `{}`, timeout {} ms, {retry}; plugins: {chain}; chain returned {decided:?}",
        eff.pool.name, eff.timeout.as_millis()
    );
}

/// Exponential backoff with jitter: base * 2^attempt, then +-25 %.
fn backoff(base_ms: u32, attempt: u32) -> Duration {
    let exp = (base_ms as u64).saturating_mul(1 << attempt.min(16));
    let jitter = exp / 4;
    let spread = fastrand::u64(0..=2 * jitter);
    Duration::from_millis(exp - jitter + spread)
}

/// Puts the client's id back and, for tools/list, applies annotation overrides.
async fn finish(
    server: &Server,
    set: &Arc<PluginSet>,
    lane: &str,
    method: &str,
    reply: crate::upstream::Reply,
    client_id: &str,
) -> String {
    let id_span = reply.env.id.clone().expect("responses routed by id have one");
    if method == "tools/list"
        && let Some(r) = reply.env.result.clone()
    {
        let result = &reply.line[r.clone()];
        server.learn_tools(result);
        if !set.is_empty() {
            match annotate::rewrite_tools_list(set, lane, &server.name, result).await {
                Ok(Some(new)) => {
                    return codec::splice_many(&reply.line, vec![(id_span, client_id), (r, new.as_str())]);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(server = %server.name, "tools/list result left as the server sent it: {e}"),
            }
        }
    }
    codec::splice(&reply.line, id_span, client_id)
}

/// A call that may have to wait, and whether its client may be told why.
struct Waiting<'a> {
    /// e.g. "tools/call `read_file` on server `fs`".
    about: &'a str,
    link: &'a SessionLink,
    /// The raw id of the client's request that waits (the notice is about it).
    client_id: &'a str,
    /// Checked when the notice is due: the server declared `logging` (MCP lets a server send
    /// notifications/message only then) and the client's level admits `info`.
    may_notify: &'a (dyn Fn() -> bool + Sync),
}

/// MCP level of the "waiting" notice (RFC 5424 severity: 6 = info).
const NOTICE_LEVEL: u8 = 6;

/// Waits for `fut` until the deadline or the client's cancel; after a second, tells the client
/// what it waits for. On the deadline: `Err(Some(what it was waiting for))`; on a cancel: `Err(None)`.
async fn bounded<T>(
    fut: impl Future<Output = T>,
    deadline: Instant,
    cancel: &CancellationToken,
    waiting: &Waiting<'_>,
    waiting_for: impl Fn() -> String,
) -> Result<T, Option<String>> {
    tokio::pin!(fut);
    let _counted = waiting.link.wait_begins();
    let notice_at = Instant::now() + WAIT_NOTICE_AFTER;
    let mut noticed = false;
    loop {
        tokio::select! {
            v = &mut fut => return Ok(v),
            _ = cancel.cancelled() => return Err(None),
            _ = tokio::time::sleep_until(deadline) => return Err(Some(waiting_for())),
            _ = tokio::time::sleep_until(notice_at), if !noticed => {
                noticed = true;
                if (waiting.may_notify)() {
                    let text = format!("switchyard: {} is waiting for {}", waiting.about, waiting_for());
                    let data = codec::json_string(&text);
                    waiting.link.send_for(
                        waiting.client_id,
                        codec::notification(
                            "notifications/message",
                            &format!(r#"{{"level":"info","logger":"switchyard","data":{data}}}"#),
                        ),
                    );
                }
            }
        }
    }
}

async fn attempt(
    server: &Arc<Server>,
    req: &Request<'_>,
    eff: &Effective,
    what: &str,
    progress: Option<std::ops::Range<usize>>,
    cap: Option<Instant>,
) -> Result<crate::upstream::Reply, Stop> {
    let started = Instant::now();
    let deadline = (started + eff.timeout).min(cap.unwrap_or(Instant::now() + eff.timeout));
    let timed_out = |what: String, waiting: Option<String>| {
        Stop::Failed(CallError::Timeout {
            server: server.name.clone(),
            what,
            elapsed: started.elapsed(),
            attempts: 1,
            waiting,
        })
    };
    // Before an instance was found, the error says what the call waited for.
    let timeout = |waiting: Option<String>| timed_out(what.to_string(), waiting);
    let about = format!("{what} on server `{}`", server.name);
    let may_notify =
        || server.declares_logging() && server.hub.session_level(req.session).is_none_or(|l| l >= NOTICE_LEVEL);
    let client_id = &req.line[req.env.id.clone().expect("requests have ids")];
    let waiting = Waiting { about: &about, link: req.link, client_id, may_notify: &may_notify };
    let gate_wait = || server.gate.blockers().to_string();
    let _permit =
        bounded(server.gate.acquire(eff.concurrency.clone()), deadline, &req.cancel.token, &waiting, gate_wait)
            .await
            .map_err(|e| e.map_or(Stop::Cancelled, |w| timeout(Some(w))))?;
    let kind = match eff.concurrency {
        Concurrency::Shared => "shared",
        Concurrency::Exclusive => "exclusive",
        Concurrency::Keyed(_) => "keyed",
    };
    server.metrics.gate_wait(&server.metric_name, kind, started.elapsed());
    let pool = if req.modern { server.modern_pool(&eff.pool) } else { &eff.pool };
    let pool_wait = || pool.wait_status(req.session);
    let lease = bounded(pool.acquire(req.session), deadline, &req.cancel.token, &waiting, pool_wait)
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
    let inst = lease.instance.clone();
    let activity = Arc::new(Notify::new());
    let route = progress.map(|span| (span, req.link.clone() as Arc<dyn crate::upstream::ProgressSink>));
    let failed = |u: Unanswered| Stop::Failed(u.into_error(&server.name, what));
    let sent = inst.send(req.line, req.env, req.session, route, Some(activity.clone())).map_err(failed)?;
    let max_deadline = started + Duration::from_millis(server.limits.max_call_timeout_ms);
    let mut deadline = deadline;
    let mut reply = sent.reply;
    loop {
        tokio::select! {
            r = &mut reply => {
                return match r {
                    Ok(Ok(reply)) => {
                        server.record_success();
                        Ok(reply)
                    }
                    Ok(Err(u)) => Err(failed(u)),
                    // The instance dropped the call without a death: only at shutdown.
                    Err(_) => Err(Stop::Failed(CallError::ShuttingDown)),
                };
            }
            _ = activity.notified() => {
                // Progress shows the call is alive: extend its deadline, up to the hard maximum.
                deadline = deadline.max((Instant::now() + eff.timeout).min(max_deadline));
            }
            _ = tokio::time::sleep_until(deadline) => {
                let elapsed = started.elapsed();
                inst.cancel(sent.upstream_id, &format!("switchyard: timed out after {:.1} s", elapsed.as_secs_f64()));
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
                return Err(timed_out(format!("{what} (on {})", inst.label()), None));
            }
            _ = req.cancel.token.cancelled() => {
                inst.cancel(sent.upstream_id, req.cancel.reason());
                return Err(Stop::Cancelled);
            }
        }
    }
}

/// A client's way to stop one of its calls, and the reason it gave.
#[derive(Default)]
pub struct Cancel {
    pub token: tokio_util::sync::CancellationToken,
    reason: std::sync::OnceLock<String>,
    /// Set when switchyard itself stops the call (shutdown) while the client is still there:
    /// then the client is owed an error rather than silence.
    answer: std::sync::atomic::AtomicBool,
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

    /// Whether switchyard stopped the call while its client still listens (it gets an error).
    pub fn owes_answer(&self) -> bool {
        self.answer.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The client's reason, forwarded upstream with the cancellation.
    pub fn reason(&self) -> &str {
        self.reason.get().map(String::as_str).unwrap_or("cancelled by the client")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    fn link() -> (Arc<SessionLink>, mpsc::UnboundedReceiver<crate::peer::Out>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (SessionLink::new(1, tx, 1 << 20, crate::peer::Buffered::new(usize::MAX)), rx)
    }

    fn waiting<'a>(link: &'a SessionLink, may: &'a (dyn Fn() -> bool + Sync)) -> Waiting<'a> {
        Waiting { about: "tools/call `x` on server `s`", link, client_id: "1", may_notify: may }
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_wait_tells_the_client_why_then_times_out_at_the_deadline() {
        let (link, mut rx) = link();
        let cancel = CancellationToken::new();
        let started = Instant::now();
        let deadline = started + Duration::from_millis(2500);
        let yes = || true;
        let w = waiting(&link, &yes);
        let r = bounded(std::future::pending::<()>(), deadline, &cancel, &w, || "the gate".to_string()).await;
        assert_eq!(r, Err(Some("the gate".to_string())));
        assert_eq!(started.elapsed(), Duration::from_millis(2500));
        let out = rx.try_recv().unwrap();
        assert_eq!(out.related.as_deref(), Some("1"), "the notice is about the waiting request");
        let notice: serde_json::Value = serde_json::from_str(&out.line).unwrap();
        assert_eq!(notice["method"], "notifications/message");
        assert_eq!(notice["params"]["level"], "info");
        assert_eq!(notice["params"]["data"], "switchyard: tools/call `x` on server `s` is waiting for the gate");
        assert!(rx.try_recv().is_err(), "one notice per wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_the_client_may_not_hear_of_times_out_in_silence() {
        let (link, mut rx) = link();
        let cancel = CancellationToken::new();
        let deadline = Instant::now() + Duration::from_millis(2500);
        let no = || false;
        let w = waiting(&link, &no);
        let r = bounded(std::future::pending::<()>(), deadline, &cancel, &w, || "the gate".to_string()).await;
        assert_eq!(r, Err(Some("the gate".to_string())));
        assert!(rx.try_recv().is_err(), "a notice was sent though the client may not get one");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quick_wait_says_nothing_and_a_cancel_ends_it() {
        let (link, mut rx) = link();
        let cancel = CancellationToken::new();
        let far = Instant::now() + Duration::from_secs(60);
        let quick = async {
            tokio::time::sleep(Duration::from_millis(900)).await;
            7
        };
        let yes = || true;
        let w = waiting(&link, &yes);
        assert_eq!(bounded(quick, far, &cancel, &w, String::new).await, Ok(7));
        assert!(rx.try_recv().is_err());
        let c2 = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            c2.cancel();
        });
        let r = bounded(std::future::pending::<()>(), far, &cancel, &w, String::new).await;
        assert_eq!(r, Err(None));
    }

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
