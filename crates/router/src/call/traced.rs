//! What the call's span (kind SERVER, made by its session around [`super::forward`]) is told
//! when the call ends: how it ended (`error.type`) and switchyard's own part in it
//! (`switchyard.*`: the decision, the plugins that made it, the waits, the instance, the
//! attempts, a cancellation).

use switchyard_core::metrics::Outcome;
use switchyard_telemetry::{self as telemetry, keys};

use super::End;

/// Notes how the call ended on the current span, the call's (nothing when traces are off).
pub(super) fn ended(end: &End) {
    if !telemetry::on() {
        return;
    }
    let Some(span) = telemetry::started(&tracing::Span::current()) else { return };
    let error = match end.outcome {
        Outcome::Ok => None,
        Outcome::Error => Some(end.code.map_or("_OTHER".to_string(), |c| c.to_string())),
        // The rest as the audit log and the metrics name them (`tool_error`, `shutting_down`, ...).
        other => Some(other.label().to_string()),
    };
    span.ended(error.as_deref(), end.code);
    if end.outcome == Outcome::Cancelled {
        span.set(keys::SWITCHYARD_CANCELLED, true);
    }
    if let Some(d) = &end.decided {
        span.set(keys::SWITCHYARD_CONCURRENCY, d.concurrency.clone());
        if d.keys > 0 {
            span.set(keys::SWITCHYARD_KEYS, d.keys as i64);
        }
        span.set(keys::SWITCHYARD_POOL, d.pool.clone());
        span.set(keys::SWITCHYARD_TIMEOUT_MS, d.timeout_ms as i64);
        if let Some(r) = d.retry {
            span.set(keys::SWITCHYARD_RETRY_ATTEMPTS, i64::from(r));
        }
    }
    if !end.plugins.is_empty() {
        let plugins = end.plugins.iter().map(|p| format!("{} sha256:{}", p.name, p.sha256)).collect();
        span.set_strings(keys::SWITCHYARD_PLUGINS, plugins);
    }
    if let Some(by) = &end.refused_by {
        span.set(keys::SWITCHYARD_REFUSED_BY, by.clone());
    }
    span.set(keys::SWITCHYARD_ATTEMPTS, i64::from(end.attempts));
    span.set(keys::SWITCHYARD_GATE_WAIT_MS, end.spent.gate.as_secs_f64() * 1000.0);
    span.set(keys::SWITCHYARD_QUEUE_WAIT_MS, end.spent.queue.as_secs_f64() * 1000.0);
    if let Some(i) = &end.spent.instance {
        span.set(keys::SWITCHYARD_INSTANCE, i.clone());
    }
}
