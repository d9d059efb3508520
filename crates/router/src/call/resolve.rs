//! The decision of one attempt: the policy asked, its answer filled in with the host's
//! defaults and held within the configured limits.

use std::sync::Arc;
use std::time::Duration;

use super::refused::refused;
use super::{End, Forwarded, Request};
use crate::pool::Pool;
use crate::server::Server;
use crate::server::calls::What;
use switchyard_core::codec;
use switchyard_core::decision::{CallInfo, Concurrency, Decision, Placement, Rejection, Retry};
use switchyard_core::metrics::Outcome;
use switchyard_policy::PluginSet;

/// A decision after host defaults and clamps.
pub struct Effective {
    pub concurrency: Concurrency,
    pub pool: Arc<Pool>,
    pub timeout: Duration,
    /// None: the host default, decided when a failure happens (by then tools/list is usually known).
    pub retry: Option<Retry>,
    /// Which of the pool's instances run it (None: shared); the pool's affinity may narrow it.
    pub placement: Option<Placement>,
}

/// Fills in defaults and holds the decision within the configured limits (logging each clamp).
pub fn resolve(server: &Server, decision: Decision) -> Effective {
    let limits = &server.limits;
    let pool = match decision.pool.as_deref() {
        None => server.default_pool().clone(),
        Some(name) => match server.pool(name) {
            Some(p) => p.clone(),
            None => {
                // Per call: a policy that keeps naming it would flood the log.
                if let Some(n) = server.repeats.unknown_pool.hit() {
                    tracing::warn!(
                        server = %server.name,
                        "policy chose pool `{name}`, which is not configured; using `default`{}",
                        switchyard_core::logging::times(n)
                    );
                }
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
        placement: decision.placement,
    }
}

impl Forwarded<'_> {
    /// Asks the plugins of `set` about the next attempt and resolves their decision. A rejection
    /// ends the call: `Err` holds the client's answer (counted in `end`).
    pub(super) async fn decide(
        &mut self,
        server: &Server,
        set: &Arc<PluginSet>,
        req: &Request<'_>,
        end: &mut End,
    ) -> Result<Effective, String> {
        let what = &self.what;
        let audited = server.audit().is_some();
        if audited {
            end.plugins = set.judges_of(&server.name);
        }
        // What only plugins (or the recorder) read is gathered only for them: arguments can be
        // large (a whole file for write_file), and the declared hints take a lookup.
        if set.reads_calls() && !self.gathered {
            self.gathered = true;
            self.info.arguments = req.call.text(&req.call.fields().arguments).map(str::to_string);
            self.info.declared = self.info.tool.as_deref().map(|t| server.declared_hints(t)).unwrap_or_default();
            // A plugin reads one of two values of a key given twice, and the server may act on
            // the other (parsers differ): such arguments cannot be judged, so they are refused
            // where a plugin judges this server's calls. A call no plugin of its server's chain
            // reads pays nothing for this and passes as sent (the recorder alone judges nothing;
            // a plugin for other servers does not judge this one's calls).
            if let Some(key) =
                self.info.arguments.as_deref().filter(|_| set.judges(&server.name)).and_then(codec::key_given_twice)
            {
                return Err(self.reject(server, set, req, end, Rejection::new("switchyard", given_twice(&key))));
            }
        }
        // With no plugin and no recorder the chain's answer is the default, at once; a chain
        // that runs is boxed where awaited: it holds the call's arguments as the plugins get
        // them, and a call no plugin judges need not carry them.
        let answer = match set.reads_calls() {
            true => Box::pin(set.decide_async(&self.info)).await,
            false => Ok(Decision::default()),
        };
        let decision = match answer {
            Ok(d) => d,
            Err(rejection) => return Err(self.reject(server, set, req, end, rejection)),
        };
        // The chain's own answer is kept only for the debug line: no copy per call otherwise.
        let decided = tracing::enabled!(tracing::Level::DEBUG).then(|| decision.clone());
        let mut eff = resolve(server, decision);
        // A tool whose call was in flight when an instance ended runs alone, whatever the
        // plugins said: it takes no other call with it if it ends this one too (`suspect`).
        if let Some(tool) = self.info.tool.as_deref()
            && server.is_suspect(tool)
        {
            eff.concurrency = Concurrency::Exclusive;
        }
        if let Some(decided) = &decided {
            log_decision(server, set, &self.info, what, decided, &eff);
        }
        if audited {
            end.decided = Some(super::audit::decided(&eff));
        }
        Ok(eff)
    }

    /// The call is refused before it runs (by a plugin, or by switchyard for what no plugin can
    /// judge): logged, noted in `end`, and answered with the client's answer returned.
    fn reject(
        &self,
        server: &Server,
        set: &PluginSet,
        req: &Request<'_>,
        end: &mut End,
        rejection: Rejection,
    ) -> String {
        server.log_refusal(req.session_label, &self.what.to_string(), &rejection);
        let answer = refused(set, self.info.tool.as_deref(), req.modern, self.client_id, rejection);
        (end.outcome, end.code) = (Outcome::Rejected, answer.code);
        end.refused_by = Some(answer.by);
        answer.answer
    }
}

/// Why arguments that give `key` twice are refused where a plugin reads them. The key is cut
/// short: arguments may be anything, and a refusal is logged.
fn given_twice(key: &str) -> String {
    let shown: String = key.chars().take(64).collect();
    let cut = if shown.len() < key.len() { "..." } else { "" };
    format!(
        "a policy plugin reads these arguments and they give the key `{shown}{cut}` twice in one object; parsers differ on which value counts, so switchyard refuses them rather than let the plugin judge one value and the server act on another. Send each key once"
    )
}

/// One debug line per attempt: what the plugins decided and what the host made of it (after
/// defaults and clamps). Argument values are never logged; gate keys are, as the gate uses them.
fn log_decision(server: &Server, set: &PluginSet, call: &CallInfo, what: &What, decided: &Decision, eff: &Effective) {
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
    let placement = eff.placement.as_ref().map_or("shared".to_string(), |p| p.describe());
    tracing::debug!(
        server = %server.name, session = %call.session, attempt = call.attempt,
        "decision for {what}: concurrency {concurrency}, pool `{}`, placement {placement}, timeout {} ms, {retry}; plugins: {chain}; chain returned {decided:?}",
        eff.pool.name, eff.timeout.as_millis()
    );
}
