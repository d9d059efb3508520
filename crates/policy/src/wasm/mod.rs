//! The narrow wrapper around wasmtime: one engine, compiled plugins, warm instances, deadlines.
//!
//! Nothing outside this folder sees a wasmtime type. A [`Plugin`] is one compiled, type-checked
//! and `init`-ed plugin version; it keeps a small pool of warm instances (a Store each) and
//! runs every call under an epoch deadline and a memory limit. A failed call discards its
//! instance, so the next call starts from a fresh, freshly `init`-ed one.
//!
//! This file holds [`Plugin`] and its warm pool; `runtime` the engine, bindings, limits and
//! compile cache; `store` the per-instance host state; `output` the capture of what a plugin
//! prints; `breaker` the circuit breaker; `convert` the conversions to and from wit types.

mod breaker;
mod convert;
mod output;
mod runtime;
mod store;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::Store;

use switchyard_core::decision;

use breaker::{BREAKER_THRESHOLD, Breaker, BreakerChange};
use convert::{from_wit_decision, from_wit_hints, to_wit_decision, to_wit_hints};
use runtime::{Bindings, PolicyPre, compile, runtime, wasm_err, wit};
use store::State;

pub use convert::CallArgs;
pub use output::Output;
pub use runtime::{Limits, content_hash};

/// Warm instances kept per plugin; more are created under load and dropped when returned.
const MAX_WARM: usize = 16;
/// `init` parses config and may build tables: it gets more time than a call.
const MIN_INIT_DEADLINE_MS: u64 = 250;
/// Consecutive failures after which an error is logged (and every so often after).
const FAILURE_LOG_THRESHOLD: u32 = 5;

/// Why a plugin call did not produce an answer. This is "the plugin broke", never "the plugin
/// said no": a rejection is a [`Verdict::Reject`].
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PluginError {
    #[error("exceeded its deadline of {0} ms")]
    Deadline(u64),
    #[error("ran out of memory (limit {0} MiB)")]
    OutOfMemory(u64),
    #[error("trapped: {0}")]
    Trap(String),
    #[error("init failed: {0}")]
    Init(String),
    #[error(
        "is switched off for now: its last {BREAKER_THRESHOLD} calls ran past their deadline (tried again in {0} ms)"
    )]
    SwitchedOff(u64),
    #[error("could not be run: {0}")]
    Host(String),
}

/// What one plugin answered for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Continue(decision::Decision),
    Stop(decision::Decision),
    Reject(String),
}

/// A warm instance: its store and the typed handles on its exports.
struct Warm {
    store: Store<State>,
    bindings: Bindings,
}

/// One loaded plugin version: compiled, type-checked, and proven to `init`.
pub struct Plugin {
    name: Arc<str>,
    pre: PolicyPre<State>,
    limits: Limits,
    config_json: String,
    output: Arc<Output>,
    warm: Mutex<Vec<Warm>>,
    /// Consecutive failed calls, for the failure log line.
    failures: AtomicU32,
    breaker: Mutex<Breaker>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin").field("name", &self.name).field("limits", &self.limits).finish()
    }
}

impl Plugin {
    /// Compiles (or loads from cache), type-checks against the `policy` world, instantiates and
    /// runs `init`. Blocking and possibly slow (tens of ms to compile): keep it off the request
    /// path, and off any async runtime thread. The error says what is wrong in words a plugin
    /// author can act on. `capture` keeps every line the plugin logs or prints, for
    /// [`Plugin::output`] (used by `plugin check`).
    pub fn load(
        name: &str,
        bytes: &[u8],
        hash: &[u8; 32],
        limits: Limits,
        config_json: &str,
        capture: bool,
    ) -> anyhow::Result<Plugin> {
        let pre = type_checked(bytes, hash)?;
        let plugin = Plugin {
            name: Arc::from(name),
            pre,
            limits,
            config_json: config_json.to_string(),
            output: Arc::new(Output::new(name, capture)),
            warm: Mutex::new(Vec::new()),
            failures: AtomicU32::new(0),
            breaker: Mutex::new(Breaker::default()),
        };
        let warm = plugin.instantiate().map_err(anyhow::Error::new)?;
        plugin.give_back(warm);
        Ok(plugin)
    }

    /// Where this plugin's log lines and output go.
    pub fn output(&self) -> &Output {
        &self.output
    }

    /// A fresh store and instance, `init`-ed with the plugin's config.
    fn instantiate(&self) -> Result<Warm, PluginError> {
        let mut store = Store::new(&runtime().engine, State::new(&self.output, &self.limits));
        store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
        store.epoch_deadline_trap();
        let init_ms = self.limits.deadline_ms.max(MIN_INIT_DEADLINE_MS);
        store.set_epoch_deadline(Limits::ticks(init_ms));
        let instantiated = self.pre.instantiate(&mut store);
        let bindings = match instantiated {
            Ok(b) => b,
            Err(e) => {
                let printed = store.data().end_call();
                let e = with_printed(classify(&store, e, init_ms), &printed);
                return Err(PluginError::Init(format!("instantiation {e}")));
            }
        };
        let r = bindings.call_init(&mut store, &self.config_json);
        let printed = store.data().end_call();
        match r {
            Ok(Ok(())) => Ok(Warm { store, bindings }),
            Ok(Err(msg)) => Err(PluginError::Init(msg)),
            Err(e) => Err(PluginError::Init(with_printed(classify(&store, e, init_ms), &printed).to_string())),
        }
    }

    fn take(&self) -> Result<Warm, PluginError> {
        let warm = self.warm.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match warm {
            Some(w) => Ok(w),
            None => self.instantiate(),
        }
    }

    fn give_back(&self, w: Warm) {
        let mut pool = self.warm.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < MAX_WARM {
            pool.push(w);
        }
    }

    /// Runs `f` on a warm instance under the call deadline. A failure drops the instance: its
    /// memory may be in any state after a trap.
    fn with_instance<R>(
        &self,
        f: impl FnOnce(&Bindings, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        self.admit()?;
        let result = self.take().and_then(|mut w| {
            w.store.set_epoch_deadline(Limits::ticks(self.limits.deadline_ms));
            let r = f(&w.bindings, &mut w.store);
            let printed = w.store.data().end_call();
            match r {
                Ok(r) => {
                    self.give_back(w);
                    Ok(r)
                }
                Err(e) => Err(with_printed(classify(&w.store, e, self.limits.deadline_ms), &printed)),
            }
        });
        self.record(&result);
        match &result {
            Ok(_) => {
                // Relaxed: only a log line depends on it.
                if self.failures.load(Ordering::Relaxed) != 0 {
                    self.failures.store(0, Ordering::Relaxed);
                }
            }
            Err(e) => {
                let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
                if n == FAILURE_LOG_THRESHOLD || (n > FAILURE_LOG_THRESHOLD && n.is_multiple_of(1000)) {
                    tracing::error!(plugin = &*self.name, "plugin failed {n} calls in a row, last: {e}");
                }
            }
        }
        result
    }

    /// Whether the breaker lets a call run now.
    fn admit(&self) -> Result<(), PluginError> {
        self.breaker.lock().unwrap_or_else(|p| p.into_inner()).admit(Instant::now())
    }

    /// Feeds a call's outcome to the breaker, and says when it trips or closes.
    fn record<R>(&self, result: &Result<R, PluginError>) {
        let change = self.breaker.lock().unwrap_or_else(|p| p.into_inner()).record(result, Instant::now());
        match change {
            Some(BreakerChange::Opened { streak, cool_down }) => tracing::error!(
                plugin = &*self.name,
                "plugin switched off for {} ms: {streak} calls in a row ran past its deadline of {} ms; \
                 meanwhile its calls fail at once and on_error applies, then one call tries it again",
                cool_down.as_millis(),
                self.limits.deadline_ms
            ),
            Some(BreakerChange::Closed) => {
                tracing::info!(plugin = &*self.name, "plugin answered in time again; switched back on")
            }
            None => {}
        }
    }

    /// Asks the plugin about one call.
    pub fn decide(&self, call: &CallArgs, current: &decision::Decision) -> Result<Verdict, PluginError> {
        let current = to_wit_decision(current);
        let v = self.with_instance(|b, s| b.call_decide(s, &call.0, &current))?;
        Ok(match v {
            wit::Verdict::Continue(d) => Verdict::Continue(from_wit_decision(d)),
            wit::Verdict::Stop(d) => Verdict::Stop(from_wit_decision(d)),
            wit::Verdict::Reject(reason) => Verdict::Reject(reason),
        })
    }

    /// Asks the plugin for one tool's hints.
    pub fn annotate(
        &self,
        server: &str,
        tool: &str,
        declared: &decision::Hints,
        current: &decision::Hints,
    ) -> Result<decision::Hints, PluginError> {
        let tool = wit::Tool { server: server.to_string(), name: tool.to_string(), declared: to_wit_hints(declared) };
        let current = to_wit_hints(current);
        let h = self.with_instance(|b, s| b.call_annotate(s, &tool, &current))?;
        Ok(from_wit_hints(h))
    }

    /// Makes and `init`s one fresh instance and drops it: what a cold start costs (`plugin
    /// check` times it).
    pub fn start_fresh_instance(&self) -> Result<(), PluginError> {
        self.instantiate().map(drop)
    }

    /// Instances kept warm now (for tests).
    #[cfg(test)]
    pub fn warm_count(&self) -> usize {
        self.warm.lock().unwrap().len()
    }
}

/// Compiles `bytes` (or takes them from the cache) and checks them against the policy world,
/// without running any of the plugin's code.
fn type_checked(bytes: &[u8], hash: &[u8; 32]) -> anyhow::Result<PolicyPre<State>> {
    let rt = runtime();
    let component = compile(rt, bytes, hash)
        .map_err(|e| anyhow::anyhow!("not a loadable WebAssembly component: {}", one_line(&e)))?;
    let instance_pre = rt
        .linker
        .instantiate_pre(&component)
        .map_err(|e| wasm_err(e).context("it needs imports switchyard does not provide (wrong interface?)"))?;
    PolicyPre::new(instance_pre).map_err(|e| {
        wasm_err(e).context(
            "it does not implement the world switchyard:policy/policy@0.1.0 \
             (wrong interface: expected exports init, decide, annotate)",
        )
    })
}

/// Whether `bytes` is a component the host can load as a policy plugin (`plugin build` checks
/// what it made). `init` is not run: it needs the plugin's config.
pub fn type_check(bytes: &[u8]) -> anyhow::Result<()> {
    type_checked(bytes, &content_hash(bytes)).map(drop)
}

/// Adds what the plugin printed last to a trap (a panic's message is printed before it traps).
fn with_printed(e: PluginError, printed: &str) -> PluginError {
    match e {
        PluginError::Trap(t) if !printed.is_empty() => PluginError::Trap(format!("{t}; it printed: {printed}")),
        e => e,
    }
}

/// An error chain on one line (wasmtime's parse errors may pretty-print byte arrays over
/// many lines).
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
        if !text.is_empty() && !parts.contains(&text) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// Names what went wrong in a failed call: deadline, memory, or another trap.
fn classify(store: &Store<State>, e: wasmtime::Error, budget_ms: u64) -> PluginError {
    if store.data().hit_memory_limit {
        return PluginError::OutOfMemory(store.data().memory_limit as u64 / (1024 * 1024));
    }
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => PluginError::Deadline(budget_ms),
        Some(t) => PluginError::Trap(t.to_string()),
        None => PluginError::Trap(format!("{e}")),
    }
}
