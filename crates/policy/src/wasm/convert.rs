//! Conversions between switchyard's decision types and the generated wit types.

use switchyard_core::decision;

use std::sync::OnceLock;

use super::runtime::{wit, wit2, wit3};

/// A call converted once per chain run, so each plugin does not pay for the conversion (the
/// 0.2 form only when a 0.2 plugin asks for it).
pub struct CallArgs {
    pub(super) v1: wit::Call,
    caller: decision::Caller,
    task: Option<decision::TaskRef>,
    v2: OnceLock<wit2::Call>,
    v3: OnceLock<wit3::Call>,
    /// When the call came: what `host.take` counts from (tokio's clock, which tests may pause).
    pub(super) now: tokio::time::Instant,
}

impl CallArgs {
    pub fn new(c: &decision::CallInfo) -> CallArgs {
        CallArgs {
            v1: wit::Call {
                server: c.server.to_string(),
                session: c.session.to_string(),
                method: c.method.to_string(),
                tool: c.tool.as_deref().map(str::to_string),
                arguments: c.arguments.clone(),
                declared: to_wit_hints(&c.declared),
                attempt: c.attempt,
            },
            caller: c.caller.clone(),
            task: c.task.clone(),
            v2: OnceLock::new(),
            v3: OnceLock::new(),
            now: tokio::time::Instant::now(),
        }
    }

    pub fn server(&self) -> &str {
        &self.v1.server
    }

    pub fn method(&self) -> &str {
        &self.v1.method
    }

    pub fn tool(&self) -> Option<&str> {
        self.v1.tool.as_deref()
    }

    pub(super) fn v2(&self) -> &wit2::Call {
        self.v2.get_or_init(|| {
            let c = &self.v1;
            wit2::Call {
                server: c.server.clone(),
                session: c.session.clone(),
                client: to_wit2_client(&self.caller),
                era: self.caller.era.to_string(),
                method: c.method.clone(),
                tool: c.tool.clone(),
                arguments: c.arguments.clone(),
                declared: to_wit2_hints(&from_wit_hints(c.declared.clone())),
                attempt: c.attempt,
                task: self.task.as_ref().map(|t| wit2::Task { id: t.id.clone(), tool: t.tool.clone() }),
            }
        })
    }
}

impl CallArgs {
    pub(super) fn v3(&self) -> &wit3::Call {
        self.v3.get_or_init(|| {
            let c = &self.v1;
            wit3::Call {
                server: c.server.clone(),
                session: c.session.clone(),
                client: to_wit3_client(&self.caller),
                era: self.caller.era.to_string(),
                method: c.method.clone(),
                tool: c.tool.clone(),
                arguments: c.arguments.clone(),
                declared: to_wit3_hints(&from_wit_hints(c.declared.clone())),
                attempt: c.attempt,
                task: self.task.as_ref().map(|t| wit3::Task { id: t.id.clone(), tool: t.tool.clone() }),
            }
        })
    }
}

pub(super) fn to_wit3_client(c: &decision::Caller) -> wit3::Client {
    wit3::Client {
        name: c.name.as_deref().map(str::to_string),
        version: c.version.as_deref().map(str::to_string),
        transport: match c.transport {
            decision::Transport::Stdio => wit3::Transport::Stdio,
            decision::Transport::Socket => wit3::Transport::Socket,
            decision::Transport::Http => wit3::Transport::Http,
        },
        dir: c.dir.as_deref().map(str::to_string),
        token: c.token.as_deref().map(str::to_string),
    }
}

pub(super) fn to_wit2_client(c: &decision::Caller) -> wit2::Client {
    wit2::Client {
        name: c.name.as_deref().map(str::to_string),
        version: c.version.as_deref().map(str::to_string),
        transport: match c.transport {
            decision::Transport::Stdio => wit2::Transport::Stdio,
            decision::Transport::Socket => wit2::Transport::Socket,
            decision::Transport::Http => wit2::Transport::Http,
        },
        dir: c.dir.as_deref().map(str::to_string),
        token: c.token.as_deref().map(str::to_string),
    }
}

/// The conversions of the types both contracts have alike, field for field (hints, decision),
/// for one contract's generated module: bindgen makes a distinct type per contract.
macro_rules! alike_in_both_contracts {
    (@placement $d:ident) => {
        None
    };
    (@placement $d:ident $placement:ident $from_placement:ident) => {
        $from_placement($d.$placement)
    };
    ($wit:ident, $to_hints:ident, $from_hints:ident, $to_decision:ident, $from_decision:ident $(, $placement:ident, $to_placement:ident, $from_placement:ident)?) => {
        pub(super) fn $to_hints(h: &decision::Hints) -> $wit::Hints {
            $wit::Hints {
                read_only: h.read_only,
                destructive: h.destructive,
                idempotent: h.idempotent,
                open_world: h.open_world,
                title: h.title.clone(),
            }
        }

        pub(super) fn $from_hints(h: $wit::Hints) -> decision::Hints {
            decision::Hints {
                read_only: h.read_only,
                destructive: h.destructive,
                idempotent: h.idempotent,
                open_world: h.open_world,
                title: h.title,
            }
        }

        /// The fields of a decision both contracts have (all but 0.2's `placement`).
        pub(super) fn $to_decision(d: &decision::Decision) -> $wit::Decision {
            $wit::Decision {
                concurrency: d.concurrency.as_ref().map(|c| match c {
                    decision::Concurrency::Shared => $wit::Concurrency::Shared,
                    decision::Concurrency::Exclusive => $wit::Concurrency::Exclusive,
                    decision::Concurrency::Keyed(keys) => $wit::Concurrency::Keyed(keys.iter().cloned().collect()),
                }),
                pool: d.pool.clone(),
                timeout_ms: d.timeout_ms,
                retry: d.retry.map(|r| $wit::Retry { attempts: r.attempts, backoff_ms: r.backoff_ms }),
                $($placement: $to_placement(d.$placement.as_ref()),)?
            }
        }

        /// The plugin's decision (with no placement from a 0.1 plugin, which cannot say one).
        pub(super) fn $from_decision(d: $wit::Decision) -> decision::Decision {
            decision::Decision {
                concurrency: d.concurrency.map(|c| match c {
                    $wit::Concurrency::Shared => decision::Concurrency::Shared,
                    $wit::Concurrency::Exclusive => decision::Concurrency::Exclusive,
                    $wit::Concurrency::Keyed(keys) => decision::Concurrency::Keyed(keys.into_iter().collect()),
                }),
                pool: d.pool,
                timeout_ms: d.timeout_ms,
                retry: d.retry.map(|r| decision::Retry { attempts: r.attempts, backoff_ms: r.backoff_ms }),
                placement: alike_in_both_contracts!(@placement d $($placement $from_placement)?),
            }
        }
    };
}

alike_in_both_contracts!(wit, to_wit_hints, from_wit_hints, to_wit_decision, from_wit_decision);
alike_in_both_contracts!(
    wit2,
    to_wit2_hints,
    from_wit2_hints,
    to_wit2_decision,
    from_wit2_decision,
    placement,
    to_wit2_placement,
    from_wit2_placement
);
alike_in_both_contracts!(
    wit3,
    to_wit3_hints,
    from_wit3_hints,
    to_wit3_decision,
    from_wit3_decision,
    placement,
    to_wit3_placement,
    from_wit3_placement
);

fn to_wit2_placement(p: Option<&decision::Placement>) -> Option<wit2::Placement> {
    p.map(|p| match p {
        decision::Placement::Shared => wit2::Placement::Shared,
        decision::Placement::Client => wit2::Placement::Client,
        decision::Placement::Session => wit2::Placement::Session,
        decision::Placement::Key(k) => wit2::Placement::Key(k.clone()),
    })
}

fn from_wit2_placement(p: Option<wit2::Placement>) -> Option<decision::Placement> {
    p.map(|p| match p {
        wit2::Placement::Shared => decision::Placement::Shared,
        wit2::Placement::Client => decision::Placement::Client,
        wit2::Placement::Session => decision::Placement::Session,
        wit2::Placement::Key(k) => decision::Placement::Key(k),
    })
}

fn to_wit3_placement(p: Option<&decision::Placement>) -> Option<wit3::Placement> {
    p.map(|p| match p {
        decision::Placement::Shared => wit3::Placement::Shared,
        decision::Placement::Client => wit3::Placement::Client,
        decision::Placement::Session => wit3::Placement::Session,
        decision::Placement::Key(k) => wit3::Placement::Key(k.clone()),
    })
}

fn from_wit3_placement(p: Option<wit3::Placement>) -> Option<decision::Placement> {
    p.map(|p| match p {
        wit3::Placement::Shared => decision::Placement::Shared,
        wit3::Placement::Client => decision::Placement::Client,
        wit3::Placement::Session => decision::Placement::Session,
        wit3::Placement::Key(k) => decision::Placement::Key(k),
    })
}
