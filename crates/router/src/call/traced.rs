//! What the call's span (kind SERVER, made by its session and handed to [`super::forward`] in
//! its request) is told when the call ends: how it ended (`error.type`) and switchyard's own
//! part in it (`switchyard.*`: the decision, the plugins that made it, the waits, the instance,
//! the attempts, a cancellation).

use switchyard_core::metrics::Outcome;
use switchyard_telemetry::{KeyValue, Span, keys};

use super::End;

/// Notes how the call ended on `span`, the call's (nothing when traces are off).
pub(super) fn ended(span: &Span, end: &End) {
    if span.is_none() {
        return;
    }
    let error = match end.outcome {
        Outcome::Ok => None,
        Outcome::Error => Some(end.code.map_or("_OTHER".to_string(), |c| c.to_string())),
        // The rest as the audit log and the metrics name them (`tool_error`, `shutting_down`, ...).
        other => Some(other.label().to_string()),
    };
    let mut more = Vec::with_capacity(12);
    if end.outcome == Outcome::Cancelled {
        more.push(KeyValue::new(keys::SWITCHYARD_CANCELLED, true));
    }
    if let Some(d) = &end.decided {
        more.push(KeyValue::new(keys::SWITCHYARD_CONCURRENCY, d.concurrency.clone()));
        if d.keys > 0 {
            more.push(KeyValue::new(keys::SWITCHYARD_KEYS, d.keys as i64));
        }
        more.push(KeyValue::new(keys::SWITCHYARD_POOL, d.pool.clone()));
        more.push(KeyValue::new(keys::SWITCHYARD_TIMEOUT_MS, d.timeout_ms as i64));
        if let Some(r) = d.retry {
            more.push(KeyValue::new(keys::SWITCHYARD_RETRY_ATTEMPTS, i64::from(r)));
        }
    }
    if !end.plugins.is_empty() {
        let plugins = end.plugins.iter().map(|p| format!("{} sha256:{}", p.name, p.sha256)).collect();
        more.push(KeyValue::new(keys::SWITCHYARD_PLUGINS, Span::strings(plugins)));
    }
    if let Some(by) = &end.refused_by {
        more.push(KeyValue::new(keys::SWITCHYARD_REFUSED_BY, by.clone()));
    }
    more.push(KeyValue::new(keys::SWITCHYARD_ATTEMPTS, i64::from(end.attempts)));
    more.push(KeyValue::new(keys::SWITCHYARD_GATE_WAIT_MS, end.spent.gate.as_secs_f64() * 1000.0));
    more.push(KeyValue::new(keys::SWITCHYARD_QUEUE_WAIT_MS, end.spent.queue.as_secs_f64() * 1000.0));
    if let Some(i) = &end.spent.instance {
        more.push(KeyValue::new(keys::SWITCHYARD_INSTANCE, i.clone()));
    }
    span.ended(error.as_deref(), end.code, more);
}
