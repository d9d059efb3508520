//! Conversions between switchyard's decision types and the generated wit types.

use switchyard_core::decision;

use super::runtime::wit;

/// A call converted once per chain run, so each plugin does not pay for the conversion.
pub struct CallArgs(pub(super) wit::Call);

impl CallArgs {
    pub fn new(c: &decision::CallInfo) -> CallArgs {
        CallArgs(wit::Call {
            server: c.server.clone(),
            session: c.session.clone(),
            method: c.method.clone(),
            tool: c.tool.clone(),
            arguments: c.arguments.clone(),
            declared: to_wit_hints(&c.declared),
            attempt: c.attempt,
        })
    }

    pub fn method(&self) -> &str {
        &self.0.method
    }

    pub fn tool(&self) -> Option<&str> {
        self.0.tool.as_deref()
    }
}

pub(super) fn to_wit_hints(h: &decision::Hints) -> wit::Hints {
    wit::Hints {
        read_only: h.read_only,
        destructive: h.destructive,
        idempotent: h.idempotent,
        open_world: h.open_world,
        title: h.title.clone(),
    }
}

pub(super) fn from_wit_hints(h: wit::Hints) -> decision::Hints {
    decision::Hints {
        read_only: h.read_only,
        destructive: h.destructive,
        idempotent: h.idempotent,
        open_world: h.open_world,
        title: h.title,
    }
}

pub(super) fn to_wit_decision(d: &decision::Decision) -> wit::Decision {
    wit::Decision {
        concurrency: d.concurrency.as_ref().map(|c| match c {
            decision::Concurrency::Shared => wit::Concurrency::Shared,
            decision::Concurrency::Exclusive => wit::Concurrency::Exclusive,
            decision::Concurrency::Keyed(keys) => wit::Concurrency::Keyed(keys.iter().cloned().collect()),
        }),
        pool: d.pool.clone(),
        timeout_ms: d.timeout_ms,
        retry: d.retry.map(|r| wit::Retry { attempts: r.attempts, backoff_ms: r.backoff_ms }),
    }
}

pub(super) fn from_wit_decision(d: wit::Decision) -> decision::Decision {
    decision::Decision {
        concurrency: d.concurrency.map(|c| match c {
            wit::Concurrency::Shared => decision::Concurrency::Shared,
            wit::Concurrency::Exclusive => decision::Concurrency::Exclusive,
            wit::Concurrency::Keyed(keys) => decision::Concurrency::Keyed(keys.into_iter().collect()),
        }),
        pool: d.pool,
        timeout_ms: d.timeout_ms,
        retry: d.retry.map(|r| decision::Retry { attempts: r.attempts, backoff_ms: r.backoff_ms }),
    }
}
