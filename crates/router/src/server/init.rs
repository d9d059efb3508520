//! Initialise once: the first client's initialize starts the server; instance handshakes of both protocol eras.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OnceCell, watch};

use super::Server;
use crate::placement::ScopeKey;
use crate::upstream::Instance;
use switchyard_core::codec;
use switchyard_core::error::CallError;
use switchyard_core::ids::SessionId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InitState {
    NotStarted,
    Running,
    Done,
}

/// The initialize era's handshake, done once for the server: the params every instance is
/// initialised with, and the answer every client gets.
pub(super) struct Init {
    /// The first client's initialize params, used to initialise every instance.
    /// Cleared again if that initialize fails, so the next client's params are used instead.
    pub(super) params: Mutex<Option<String>>,
    /// The first instance's initialize result, given to every client.
    pub(super) result: OnceCell<String>,
    state: watch::Sender<InitState>,
    /// Why the latest `initialize` failed (cleared when one succeeds), so later requests say
    /// that rather than asking for an initialize the client already sent.
    failure: Mutex<Option<String>>,
}

impl Init {
    pub(super) fn new() -> Init {
        Init {
            params: Mutex::new(None),
            result: OnceCell::new(),
            state: watch::channel(InitState::NotStarted).0,
            failure: Mutex::new(None),
        }
    }
}

/// Settles the initialisation state when an `initialize` ends, however it ends.
struct InitSettle<'a>(&'a Server);

impl Drop for InitSettle<'_> {
    fn drop(&mut self) {
        let s = self.0;
        if !s.init.result.initialized() {
            s.init.params.lock().expect("lock").take();
        }
        s.init.state.send_replace(if s.init.result.initialized() { InitState::Done } else { InitState::NotStarted });
    }
}

impl Server {
    /// True once initialised; waits while a client's initialize is still under way (requests
    /// pipelined right behind initialize are served, not refused). False if it never started.
    pub async fn wait_initialized(&self) -> bool {
        let mut rx = self.init.state.subscribe();
        loop {
            match *rx.borrow_and_update() {
                InitState::Done => return true,
                InitState::NotStarted => return false,
                InitState::Running => {}
            }
            if rx.changed().await.is_err() {
                return false;
            }
        }
    }

    /// Answers a client's `initialize`: the first one starts the server with its params.
    /// Marks initialisation as under way, in message order (called by the session's reader
    /// before anything async runs), so requests right behind it wait instead of failing.
    pub fn begin_initialize(&self, params: &str) {
        // The instances are started for the profile this server serves: a client that shares
        // them by the evidence never starts them with its own (see `alike`).
        let other = self
            .profile()
            .is_some_and(|p| !p.same_client(&super::profile::Profile::of_initialize(params, p.owner.clone())));
        if !other {
            self.init.params.lock().expect("lock").get_or_insert_with(|| params.to_string());
        }
        self.init.state.send_if_modified(|s| {
            let start = *s == InitState::NotStarted;
            if start {
                *s = InitState::Running;
            }
            start
        });
    }

    pub async fn initialize(self: &Arc<Self>, session: SessionId, params: &str) -> Result<String, CallError> {
        self.begin_initialize(params);
        if let Some(link) = self.hub.session(session) {
            link.declare_capabilities(params);
        }
        // Whatever happens, also when the client cancels this initialize and the future is
        // dropped, waiters must not wait forever: Done, or back to NotStarted.
        let settle = InitSettle(self);
        if let Some(r) = self.init.result.get() {
            return Ok(r.clone());
        }
        // The params are known: every pool starts its `min` instances now, all at once. The
        // client waits for the first instance of the default pool (its result is the answer).
        for p in self.pools.values() {
            let p = p.clone();
            self.tasks.spawn(async move {
                if let Err(e) = p.warm_up().await {
                    tracing::warn!("pool `{}` could not start its minimum instances: {e}", p.name);
                }
            });
        }
        let pool = self.default_pool().clone();
        let lease = pool.acquire(session, &ScopeKey::Shared).await;
        let result = match &lease {
            // A pool closed under the wait: the server was removed, or switchyard stops.
            Err(CallError::ShuttingDown) => Err(self.ended()),
            Err(e) => Err(e.clone()),
            Ok(_) => self.init.result.get().cloned().ok_or_else(|| CallError::Down {
                server: self.name.clone(),
                reason: "no instance finished initialising".into(),
            }),
        };
        // Before waiters wake (settle), so they see why.
        *self.init.failure.lock().expect("lock") = result.as_ref().err().map(|e| e.to_string());
        drop(settle);
        drop(lease);
        result
    }

    /// Whether a client's initialize has been answered by an instance of this server.
    pub fn is_initialized(&self) -> bool {
        self.init.result.initialized()
    }

    /// The error for a request that needs an initialised server when there is none: why the
    /// last initialize failed, if one was sent, or that none was.
    pub fn not_initialized(&self) -> CallError {
        match self.init.failure.lock().expect("lock").clone() {
            Some(reason) => CallError::InitFailed { server: self.name.clone(), reason },
            None => CallError::NotInitialized { server: self.name.clone() },
        }
    }

    /// Whether the server's initialize result (once it has one) lacks capability `name`.
    pub fn lacks_capability(&self, name: &str) -> bool {
        let Some(result) = self.init.result.get() else { return false };
        serde_json::from_str::<serde_json::Value>(result)
            .is_ok_and(|v| v.get("capabilities").and_then(|c| c.get(name)).is_none_or(serde_json::Value::is_null))
    }

    /// Whether the server declared capability `name` in its initialize result (once it has one).
    pub fn declares(&self, name: &str) -> bool {
        self.init.result.get().is_some() && !self.lacks_capability(name)
    }

    /// Whether the server declared the `logging` capability in its initialize result, which is
    /// what clients see: MCP lets switchyard send them notifications/message only then.
    pub fn declares_logging(&self) -> bool {
        let Some(result) = self.init.result.get() else { return false };
        serde_json::from_str::<serde_json::Value>(result)
            .is_ok_and(|v| v.pointer("/capabilities/logging").is_some_and(serde_json::Value::is_object))
    }

    /// How long an instance's first request may take: `init_timeout_ms`, and the sign-in's
    /// bound on top where a user must sign in first, so that a sign-in nobody completes is
    /// reported as that, not as a server that did not start.
    fn start_timeout(&self) -> Duration {
        Duration::from_millis(self.limits.init_timeout_ms) + self.connector.sign_in_wait()
    }

    pub(super) async fn handshake(self: &Arc<Self>, inst: &Arc<Instance>, params: &str) -> Result<(), CallError> {
        let what = "initialize".to_string();
        let timeout = self.start_timeout();
        let result = self.own_request(inst, "initialize", params, timeout, &what).await?;
        let _ = self.init.result.set(result);
        let _ = inst.write(codec::notification("notifications/initialized", "{}"));
        // A new instance gets what its sessions already set up on the others.
        let _guard = self.reconcile_lock(inst).lock_owned().await;
        self.reconcile_instance(inst, timeout).await;
        Ok(())
    }

    /// An instance of the 2026-07-28 era has no initialize: switchyard's own server/discover (with
    /// its envelope, which also fixes the era of a server that speaks both) shows that it is up,
    /// bounded by init_timeout_ms like an initialize; clients' own probes then get fast answers.
    pub(super) async fn modern_handshake(&self, inst: &Arc<Instance>) -> Result<(), CallError> {
        let timeout = self.start_timeout();
        let reply =
            self.own_reply(inst, "server/discover", &self.modern_envelope(), timeout, "server/discover", false).await?;
        if is_modern_answer(&reply.line) {
            return Ok(());
        }
        tracing::debug!(server = %self.name, "server/discover answered {}", reply.line);
        self.refuse_discover(&reply.line);
        Err(self.not_modern())
    }

    /// The answer to a 2026-07-28 request for a server of the initialize era only.
    pub(super) fn not_modern(&self) -> CallError {
        CallError::WrongEra {
            server: self.name.clone(),
            supported: switchyard_mcp::version::LATEST_SESSION.to_string(),
            requested: self.stateless.version.lock().expect("lock").clone(),
        }
    }
}

/// Whether a server's answer to `server/discover` shows a server of the 2026-07-28 era: a result,
/// or -32022 (it knows the method, not the version asked). Any other error means the server
/// predates it, whatever the code: -32601 from most, -32602 from Python SDK 1.x servers.
pub(crate) fn is_modern_answer(reply: &str) -> bool {
    let code =
        serde_json::from_str::<serde_json::Value>(reply).ok().and_then(|v| v.get("error").map(|e| e["code"].as_i64()));
    match code {
        None => true,
        Some(code) => code == Some(codec::UNSUPPORTED_PROTOCOL_VERSION),
    }
}
