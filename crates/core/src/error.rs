//! Why a call failed, decided in one place: what the client is told, and whether a retry may help.

use std::time::Duration;

use crate::codec;
use crate::decision::Rejection;

/// How an upstream instance ended.
#[derive(Debug, Clone)]
pub struct Death {
    /// e.g. `fs#2`.
    pub instance: String,
    /// e.g. `exit status 3`, `killed by signal 9`, `stdout closed`.
    pub status: String,
    /// The last lines the instance wrote to stderr, oldest first.
    pub stderr: Vec<String>,
    /// A local process (which has a stderr to speak of), not a remote server.
    pub local: bool,
    /// How long its link had carried nothing when it was ended for that (zero: the end came
    /// when it happened): the server became unreachable that long ago.
    pub quiet_for: Duration,
}

impl Death {
    pub fn stderr_suffix(&self) -> String {
        if !self.local {
            String::new()
        } else if self.stderr.is_empty() {
            "; it wrote nothing to stderr".to_string()
        } else {
            format!("; last stderr: {}", self.stderr.join(" | "))
        }
    }
}

/// Whether a request that got no answer could have reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The failure proves the server never saw it (connect refused, session unknown before
    /// processing): repeating it is always safe.
    No,
    /// It may have run (the link broke after it was sent): repeat only if the call is safe to repeat.
    Maybe,
    /// The server refused it unrun and a sign-in could not change that (nobody signed in in
    /// time, the authorization server said no): a repeat would only wait for another sign-in.
    Refused,
}

/// Why a request sent upstream got no reply.
#[derive(Debug, Clone)]
pub enum Unanswered {
    /// The instance ended.
    Died(Death),
    /// This request was lost on a link that lives on (an HTTP response stream broke).
    Lost { instance: String, cause: String, delivery: Delivery },
}

impl Unanswered {
    /// The client's error for `what` (e.g. "tools/call `write_file`") on `server`.
    pub fn into_error(self, server: &str, what: &str) -> CallError {
        match self {
            Unanswered::Died(death) => CallError::Died { server: server.to_string(), what: what.to_string(), death },
            Unanswered::Lost { instance, cause, delivery: Delivery::Refused } => {
                CallError::Refused { server: server.to_string(), what: what.to_string(), instance, cause }
            }
            Unanswered::Lost { instance, cause, delivery } => CallError::Lost {
                server: server.to_string(),
                what: what.to_string(),
                instance,
                cause,
                delivered: delivery == Delivery::Maybe,
            },
        }
    }
}

/// A call that did not get a response from the server.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("rejected by {}: {}{}", refuser(&.0.plugin), .0.reason, next_allowed(.0.retry_after))]
    Rejected(Rejection),
    #[error(
        "{what} on server `{server}` timed out after {:.1} s{}{}. {}",
        .elapsed.as_secs_f64(),
        if *.attempts > 1 { format!(" in all ({} attempts)", .attempts) } else { String::new() },
        // Waiting, the call was never sent; sent, it is cancelled at the server.
        match waiting {
            Some(w) => format!(" while waiting for {w}; it never reached the server"),
            None => "; switchyard cancelled it upstream".to_string(),
        },
        if what.starts_with("initialize") || what.starts_with("server/discover") {
            "Raise `limits.init_timeout_ms` if the server is expected to take this long to start"
        } else if waiting.is_some() {
            "Check that the server is up and reachable (`switchyard status` shows its instances), or raise the timeout if it is expected to be this busy"
        } else {
            "Raise the timeout in a policy or `limits.call_timeout_ms` if the tool is expected to be this slow"
        }
    )]
    Timeout {
        server: String,
        what: String,
        /// From the start of the first attempt (retries included) to the failure.
        elapsed: Duration,
        /// Tries made, the first included.
        attempts: u32,
        waiting: Option<String>,
    },
    #[error(
        "server `{server}` instance {} ended ({}) during {what}{}; switchyard starts a new instance. {}",
        .death.instance, .death.status, .death.stderr_suffix(),
        if has_effects(what) { "The call may have run: switchyard repeats only calls that are safe to repeat (read-only or idempotent tools, or a policy's retry), so check its effect before calling it again" } else { READ_AGAIN }
    )]
    Died { server: String, what: String, death: Death },
    #[error(
        "{what} on server `{server}` {}: {cause} (instance {instance}){}",
        if *.delivered { "got no response" } else { "could not be delivered" },
        match (*.delivered, has_effects(what)) {
            (true, true) => ". It may have run: switchyard repeats only calls that are safe to repeat (read-only or idempotent tools, or a policy's retry), so check its effect before calling it again",
            (true, false) => ". It changes nothing on the server: send it again",
            (false, _) => "",
        }
    )]
    Lost { server: String, what: String, instance: String, cause: String, delivered: bool },
    /// The server refused the call unrun, and switchyard could not sign in: final, as a repeat
    /// would wait on the sign-in again (and a call waits for one sign-in at most).
    #[error("{what} on server `{server}` was refused: {cause} (instance {instance}); it did not run")]
    Refused { server: String, what: String, instance: String, cause: String },
    #[error("server `{server}` is down: {reason}")]
    Down { server: String, reason: String },
    /// A call switchyard repeated (safe to repeat, or it never reached the server) whose every
    /// attempt failed: the count, the time, the first attempt's cause when it differs from the
    /// last's, and the last attempt's.
    #[error(
        "{what} on server `{server}` failed {attempts} times over {:.1} s; switchyard repeated it because {why}. {}The last attempt: {}{}",
        .elapsed.as_secs_f64(),
        first_cause(.first.as_deref(), .last),
        .last.cause(),
        match (*.may_have_run, has_effects(what)) {
            (true, true) => ". It may have run: check its effect before calling it again",
            _ => "",
        }
    )]
    Repeated {
        server: String,
        what: String,
        attempts: u32,
        elapsed: Duration,
        why: String,
        /// Whether any attempt may have run on the server.
        may_have_run: bool,
        /// The first attempt's failure (what made the call be repeated).
        first: Option<Box<CallError>>,
        last: Box<CallError>,
    },
    /// `reason` says what is full and what to do about it.
    #[error("server `{server}` is busy: {reason}")]
    Busy { server: String, reason: String },
    #[error("server `{server}` has not been initialised yet: send `initialize` first")]
    NotInitialized { server: String },
    /// The client sent `initialize` and it failed: later requests repeat why.
    #[error(
        "server `{server}` is not initialised because the `initialize` sent earlier failed: {reason}. Fix that, then send `initialize` again"
    )]
    InitFailed { server: String, reason: String },
    /// A 2026-07-28 request to a server of the initialize era only.
    #[error(
        "server `{server}` does not serve the 2026-07-28 protocol (it answered server/discover with method not found); connect with `initialize` (protocol {supported})"
    )]
    WrongEra { server: String, supported: String, requested: String },
    #[error("switchyard is shutting down")]
    ShuttingDown,
    /// switchyard shut down while the call was with the server: it may have run.
    #[error(
        "switchyard shut down while this call was with server `{server}`; this call's outcome is unknown: check whether it ran before sending it again"
    )]
    ShutDownInFlight { server: String },
    /// The server was removed from the config while the call ran.
    #[error(
        "server `{server}` was removed from switchyard's config; its sessions end (a client of another server goes on)"
    )]
    Removed { server: String },
}

/// What a read the server ended on is told: there is no effect to check.
const READ_AGAIN: &str = "It changes nothing on the server: send it again";

/// Whether the request `what` names ("tools/call `write`", "resources/list", "ping (by
/// switchyard, on fs#1)") may change anything on the server: a tool's call, or any method but
/// MCP's reads (lists, reads, gets, completion, ping, discovery). Only for such a request is a
/// client told that a lost call may have run and to check its effect; for a list that advice
/// makes no sense.
pub fn has_effects(what: &str) -> bool {
    let method = what.split(' ').next().unwrap_or(what);
    let read = method.ends_with("/list")
        || method.ends_with("/read")
        || method.ends_with("/get")
        || matches!(method, "completion/complete" | "ping" | "server/discover");
    !read
}

impl CallError {
    /// Transport failures and timeouts may be retried; everything else is final.
    pub fn is_retryable(&self) -> bool {
        matches!(self, CallError::Died { .. } | CallError::Timeout { .. } | CallError::Lost { .. })
    }

    /// Whether the server cannot have seen the request, so repeating it is safe whatever it does.
    pub fn never_delivered(&self) -> bool {
        matches!(self, CallError::Lost { delivered: false, .. })
    }

    /// Whether the call ended before reaching any server: refused, or no instance in time.
    pub fn never_reached(&self) -> bool {
        self.never_delivered() || matches!(self, CallError::Timeout { waiting: Some(_), .. })
    }

    /// Whether the call may have run on the server.
    pub fn may_have_run(&self) -> bool {
        match self {
            CallError::Died { .. } | CallError::Timeout { waiting: None, .. } | CallError::ShutDownInFlight { .. } => {
                true
            }
            CallError::Lost { delivered, .. } => *delivered,
            CallError::Repeated { may_have_run, .. } => *may_have_run,
            _ => false,
        }
    }

    /// What went wrong, without the call's name or advice: for a message that says the rest.
    pub fn cause(&self) -> String {
        match self {
            CallError::Died { death, .. } => {
                format!("instance {} ended ({}){}", death.instance, death.status, death.stderr_suffix())
            }
            CallError::Lost { cause, instance, delivered, .. } => {
                let how = if *delivered { "got no response" } else { "could not be delivered" };
                format!("it {how}: {cause} (instance {instance})")
            }
            CallError::Down { reason, .. } => format!("the server is down: {reason}"),
            CallError::Repeated { last, .. } => last.cause(),
            other => other.to_string(),
        }
    }

    pub fn code(&self) -> i64 {
        match self {
            CallError::Rejected(_) => codec::POLICY_REJECTED,
            CallError::Timeout { .. } => codec::REQUEST_TIMEOUT,
            // A last attempt that found no instance says less than what started it all.
            CallError::Repeated { first: Some(first), last, .. } if last.never_reached() => first.code(),
            CallError::Repeated { last, .. } => last.code(),
            CallError::Died { .. }
            | CallError::Lost { .. }
            | CallError::Refused { .. }
            | CallError::Down { .. }
            | CallError::InitFailed { .. }
            | CallError::ShuttingDown
            | CallError::Removed { .. } => codec::SERVER_UNAVAILABLE,
            CallError::ShutDownInFlight { .. } => codec::INTERNAL_ERROR,
            CallError::Busy { .. } => codec::SERVER_BUSY,
            CallError::NotInitialized { .. } => codec::INVALID_REQUEST,
            CallError::WrongEra { .. } => codec::UNSUPPORTED_PROTOCOL_VERSION,
        }
    }

    /// Structured details for the error's `data`, so programs need not parse the message.
    pub fn data(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            CallError::Rejected(r) => match r.retry_after {
                Some(after) => {
                    json!({"plugin": r.plugin, "reason": r.reason, "retryAfterMs": after.as_millis() as u64})
                }
                None => json!({"plugin": r.plugin, "reason": r.reason}),
            },
            CallError::Timeout { server, what, elapsed, attempts, waiting } => json!({
                "server": server, "call": what, "elapsedMs": elapsed.as_millis() as u64,
                "attempts": attempts, "waitingFor": waiting,
            }),
            CallError::Died { server, what, death } => json!({
                "server": server, "call": what, "instance": death.instance,
                "status": death.status, "stderr": death.stderr, "delivered": true,
            }),
            CallError::Lost { server, what, instance, cause, delivered } => json!({
                "server": server, "call": what, "instance": instance, "cause": cause, "delivered": delivered,
            }),
            CallError::Refused { server, what, instance, cause } => json!({
                "server": server, "call": what, "instance": instance, "cause": cause, "delivered": false,
            }),
            CallError::Down { server, reason }
            | CallError::Busy { server, reason }
            | CallError::InitFailed { server, reason } => {
                json!({"server": server, "reason": reason})
            }
            CallError::NotInitialized { server } => json!({"server": server}),
            CallError::WrongEra { server, supported, requested } => {
                json!({"server": server, "supported": [supported], "requested": requested})
            }
            CallError::Repeated { attempts, elapsed, why, last, may_have_run, .. } => {
                let mut data = last.data();
                if let Some(d) = data.as_object_mut() {
                    d.insert("attempts".into(), json!(attempts));
                    d.insert("elapsedMs".into(), json!(elapsed.as_millis() as u64));
                    d.insert("repeatedBecause".into(), json!(why));
                    d.insert("delivered".into(), json!(may_have_run));
                }
                data
            }
            CallError::ShuttingDown => json!({}),
            CallError::ShutDownInFlight { server } => json!({"server": server, "delivered": true}),
            CallError::Removed { server } => json!({"server": server}),
        }
    }

    /// The JSON-RPC error response for request `id`.
    pub fn to_response(&self, id: &str) -> String {
        codec::response_error(id, self.code(), &self.to_string(), Some(&self.data()))
    }
}

/// Who refused a call, in words: a policy plugin, or switchyard itself (a strict audit log that
/// cannot record the call, a chain that could not run), which is no plugin.
fn refuser(plugin: &str) -> String {
    match plugin {
        "switchyard" => "switchyard itself (not a policy plugin)".to_string(),
        p => format!("policy plugin `{p}`"),
    }
}

/// "; the next call is allowed in N s" for a refusal by a rate limit.
fn next_allowed(after: Option<Duration>) -> String {
    after.map(|a| format!("; the next call is allowed in {:.1} s", a.as_secs_f64())).unwrap_or_default()
}

/// The result that answers a `tools/call` of `tool` a plugin refused: a tool result with
/// `isError: true` whose text tells the model what happened and what it can do. Clients hand a
/// tool result to the model, and may not show it a JSON-RPC error. `modern`: the request is of
/// the 2026-07-28 era, whose results say their `resultType`.
pub fn refusal_result(r: &Rejection, tool: &str, modern: bool) -> String {
    let reason = r.reason.trim_end_matches(['.', ' ']);
    let mut text =
        format!("The call of tool `{tool}` was refused by {} and did not run. Reason: {reason}.", refuser(&r.plugin));
    if let Some(after) = r.retry_after {
        text.push_str(&format!(
            " The next call is allowed in {:.1} s; wait at least that long before calling `{tool}` again.",
            after.as_secs_f64()
        ));
    }
    let content = serde_json::json!([{"type": "text", "text": text}]);
    if modern {
        format!(r#"{{"content":{content},"isError":true,"resultType":"complete"}}"#)
    } else {
        format!(r#"{{"content":{content},"isError":true}}"#)
    }
}

/// The tool result that takes the place of a result a plugin's result hook withheld (`r`): the
/// server ran the call, so the model is told so, and not to repeat a call that may have
/// changed something.
pub fn withheld_result(r: &Rejection, tool: &str, modern: bool) -> String {
    let reason = r.reason.trim_end_matches(['.', ' ']);
    let text = format!(
        "The call of tool `{tool}` ran on the server, but its result was withheld by {}. Reason: {reason}. \
         The call may have changed something (written a file, sent a message): do not repeat it blindly; \
         check what it did first.",
        refuser(&r.plugin)
    );
    let content = serde_json::json!([{"type": "text", "text": text}]);
    if modern {
        format!(r#"{{"content":{content},"isError":true,"resultType":"complete"}}"#)
    } else {
        format!(r#"{{"content":{content},"isError":true}}"#)
    }
}

/// "The first attempt: CAUSE. " when the first attempt failed otherwise than the last.
fn first_cause(first: Option<&CallError>, last: &CallError) -> String {
    match first.map(CallError::cause) {
        Some(cause) if cause != last.cause() => format!("The first attempt: {cause}. "),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn death_message_names_server_call_status_and_stderr() {
        let e = CallError::Died {
            server: "fs".into(),
            what: "tools/call `write_file`".into(),
            death: Death {
                instance: "fs#2".into(),
                status: "exit status 3".into(),
                stderr: vec!["boom".into(), "bye".into()],
                local: true,
                quiet_for: Duration::ZERO,
            },
        };
        let m = e.to_string();
        for part in ["`fs`", "fs#2", "exit status 3", "write_file", "boom | bye"] {
            assert!(m.contains(part), "{m} lacks {part}");
        }
        assert!(e.is_retryable());
        let v: serde_json::Value = serde_json::from_str(&e.to_response("4")).unwrap();
        assert_eq!(v["error"]["code"], codec::SERVER_UNAVAILABLE);
        assert_eq!(v["error"]["data"]["stderr"][1], "bye");
    }

    /// A read the server ended on has no effect to check: only a call that may change
    /// something is told to check its effect before calling it again.
    #[test]
    fn only_a_call_with_effects_is_told_to_check_its_effect() {
        let death = Death {
            instance: "fs#2".into(),
            status: "exit status 7".into(),
            stderr: Vec::new(),
            local: false,
            quiet_for: Duration::ZERO,
        };
        let died = |what: &str| CallError::Died { server: "fs".into(), what: what.into(), death: death.clone() };
        let lost = |what: &str| CallError::Lost {
            server: "fs".into(),
            what: what.into(),
            instance: "fs#2".into(),
            cause: "its link closed".into(),
            delivered: true,
        };
        let repeated = |what: &str| CallError::Repeated {
            server: "fs".into(),
            what: what.into(),
            attempts: 3,
            elapsed: Duration::from_secs(12),
            why: "it is safe to repeat".into(),
            may_have_run: true,
            first: None,
            last: Box::new(died(what)),
        };
        for e in [died("tools/call `write`"), lost("tools/call `write`"), repeated("tools/call `echo`"), lost("x/do")] {
            assert!(e.to_string().contains("check its effect"), "{e}");
        }
        for what in
            ["tools/list", "resources/read", "prompts/get", "ping (by switchyard, on fs#2)", "completion/complete"]
        {
            for e in [died(what), lost(what), repeated(what)] {
                let m = e.to_string();
                assert!(!m.contains("may have run") && !m.contains("check its effect"), "{m}");
                assert!(e.may_have_run(), "still counted as delivered: {e:?}");
            }
        }
        assert!(
            died("tools/list")
                .to_string()
                .ends_with("switchyard starts a new instance. It changes nothing on the server: send it again")
        );
    }

    /// A refusal no sign-in answered is final: were it repeated as "never delivered", each
    /// repeat would wait for a sign-in of its own, past `login_timeout_ms`.
    #[test]
    fn a_refusal_no_sign_in_answered_is_final() {
        let lost = Unanswered::Lost {
            instance: "tracker#1".into(),
            cause: "could not sign in to http://h/mcp: nobody signed in within 1 s".into(),
            delivery: Delivery::Refused,
        };
        let e = lost.into_error("tracker", "tools/call `whoami`");
        assert!(!e.is_retryable() && !e.never_delivered() && !e.may_have_run(), "{e:?}");
        assert_eq!(
            e.to_string(),
            "tools/call `whoami` on server `tracker` was refused: could not sign in to http://h/mcp: nobody signed in within 1 s (instance tracker#1); it did not run"
        );
        let v: serde_json::Value = serde_json::from_str(&e.to_response("4")).unwrap();
        assert_eq!(v["error"]["code"], codec::SERVER_UNAVAILABLE);
        assert_eq!(v["error"]["data"]["delivered"], false);
    }

    #[test]
    fn only_transport_failures_and_timeouts_retry() {
        let t = CallError::Timeout {
            server: "s".into(),
            what: "x".into(),
            elapsed: Duration::from_millis(1500),
            attempts: 1,
            waiting: None,
        };
        assert!(t.is_retryable());
        assert!(t.to_string().contains("1.5 s") && !t.to_string().contains("attempts"), "{t}");
        let retried = CallError::Timeout {
            server: "s".into(),
            what: "x".into(),
            elapsed: Duration::from_millis(3100),
            attempts: 3,
            waiting: None,
        };
        assert!(retried.to_string().contains("timed out after 3.1 s in all (3 attempts)"), "{retried}");
        assert_eq!(retried.data()["attempts"], 3);
        assert!(!CallError::Busy { server: "s".into(), reason: "r".into() }.is_retryable());
        assert!(!CallError::Rejected(Rejection::new("p", "no")).is_retryable());
    }

    /// switchyard's own refusal (a strict audit log) is not put down to a plugin.
    #[test]
    fn switchyard_s_own_refusal_names_no_plugin() {
        let r = Rejection::new("switchyard", "the audit log cannot be written");
        let text = refusal_result(&r, "echo", false);
        assert!(text.contains("was refused by switchyard itself (not a policy plugin) and did not run"), "{text}");
        let e = CallError::Rejected(r).to_string();
        assert!(e.starts_with("rejected by switchyard itself (not a policy plugin): the audit log"), "{e}");
    }

    /// A withheld result says the call ran, and not to repeat it blindly; never "did not run".
    #[test]
    fn a_withheld_result_says_the_call_ran() {
        let r = Rejection::new("redact.wasm", "plugin failed: it ran out of memory (limit 48 MiB).");
        let text = withheld_result(&r, "write_file", false);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let said = v["content"][0]["text"].as_str().unwrap();
        assert_eq!(v["isError"], true);
        assert!(said.starts_with("The call of tool `write_file` ran on the server, but its result was withheld by policy plugin `redact.wasm`. Reason: plugin failed: it ran out of memory (limit 48 MiB). "), "{said}");
        assert!(said.contains("do not repeat it blindly") && !said.contains("did not run"), "{said}");
        assert!(withheld_result(&r, "w", true).ends_with(r#""resultType":"complete"}"#));
    }

    /// A refused tools/call is a tool result the model reads: which plugin, why, and for a rate
    /// limit when to call again; a 2026-07-28 request's result says its `resultType`.
    #[test]
    fn a_refusal_is_a_tool_result_that_says_who_why_and_when() {
        let r = Rejection::new("guard.wasm", "deleting files is not allowed here.");
        let v: serde_json::Value = serde_json::from_str(&refusal_result(&r, "delete_file", false)).unwrap();
        assert_eq!(v["isError"], true);
        assert!(v.get("resultType").is_none(), "{v}");
        assert_eq!(
            v["content"],
            serde_json::json!([{"type": "text", "text": "The call of tool `delete_file` was refused by policy plugin `guard.wasm` and did not run. Reason: deleting files is not allowed here."}])
        );
        let limited = Rejection {
            retry_after: Some(Duration::from_millis(6000)),
            ..Rejection::new("rate-limit.wasm", "rate limit `ech*` is used up")
        };
        let v: serde_json::Value = serde_json::from_str(&refusal_result(&limited, "echo", true)).unwrap();
        assert_eq!((&v["isError"], &v["resultType"]), (&serde_json::json!(true), &serde_json::json!("complete")));
        let text = v["content"][0]["text"].as_str().unwrap();
        assert!(text.ends_with("Reason: rate limit `ech*` is used up. The next call is allowed in 6.0 s; wait at least that long before calling `echo` again."), "{text}");
        // As an error (`refusals = "error"`, or a method other than tools/call), the same facts.
        let e = CallError::Rejected(limited);
        assert_eq!(
            e.to_string(),
            "rejected by policy plugin `rate-limit.wasm`: rate limit `ech*` is used up; the next call is allowed in 6.0 s"
        );
        let v: serde_json::Value = serde_json::from_str(&e.to_response("1")).unwrap();
        assert_eq!(v["error"]["code"], codec::POLICY_REJECTED);
        assert_eq!(v["error"]["data"]["retryAfterMs"], 6000);
        let v: serde_json::Value = serde_json::from_str(&CallError::Rejected(r).to_response("1")).unwrap();
        assert!(v["error"]["data"].get("retryAfterMs").is_none(), "{v}");
    }
}
