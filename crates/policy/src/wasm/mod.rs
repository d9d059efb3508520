//! The narrow wrapper around wasmtime: one engine, compiled plugins, warm instances, deadlines.
//!
//! Nothing outside this folder sees a wasmtime type. A [`Plugin`] is one compiled, type-checked
//! and `init`-ed plugin version; it keeps a small pool of warm instances (a Store each) and
//! runs every call under an epoch deadline and a memory limit. A failed call discards its
//! instance, so the next call starts from a fresh, freshly `init`-ed one.
//!
//! This file holds [`Plugin`] and its warm pool; `runtime` the engine, bindings, limits and
//! compile cache; `store` the per-instance host state; `output` the capture of what a plugin
//! prints; `breaker` the circuit breaker; `convert` the conversions to and from wit types;
//! `broken` why a file does not load.

mod breaker;
mod broken;
mod convert;
mod hooks;
mod output;
mod runtime;
mod store;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::Store;

use switchyard_core::decision;

use breaker::{BREAKER_THRESHOLD, Breaker, BreakerChange};
use convert::{
    from_wit_decision, from_wit_hints, from_wit2_decision, from_wit2_hints, from_wit3_decision, to_wit_decision,
    to_wit_hints, to_wit2_client, to_wit2_decision, to_wit2_hints, to_wit3_decision,
};
use runtime::{
    Bindings, Bindings2, Bindings3, PolicyPre, PolicyPre2, PolicyPre3, compile, runtime, wasm_err, wit, wit2, wit3,
};
use store::State;

/// Whether the deadline clock sleeps (no plugin code has run for a while).
#[cfg(test)]
pub(crate) fn deadline_clock_asleep() -> bool {
    runtime().ticker_asleep()
}

use crate::rate::{self, Buckets};
use crate::{ListedTool, Listing};

pub use broken::{LoadError, sentence};
pub use convert::CallArgs;
pub use hooks::{HookArgs, HookVerdict, Interest};
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
    /// `init` returned an error: the plugin refused its config (the message is the plugin's).
    #[error("init failed: {0}")]
    ConfigRefused(String),
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
    bindings: Exports,
}

/// The version of the contract a plugin was built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    /// `switchyard:policy@0.1.0`: `decide` and `annotate`, no caller.
    V1,
    /// `switchyard:policy@0.2.0`: the caller, `list-tool` and `host.take`.
    V2,
    /// `switchyard:policy@0.3.0`: 0.2 and the content hooks.
    V3,
}

impl Contract {
    /// Whether its plugins have `list-tool` (they may hide or rename tools).
    pub fn lists(self) -> bool {
        matches!(self, Contract::V2 | Contract::V3)
    }
}

impl std::fmt::Display for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Contract::V1 => "switchyard:policy@0.1.0",
            Contract::V2 => "switchyard:policy@0.2.0",
            Contract::V3 => "switchyard:policy@0.3.0",
        })
    }
}

/// A type-checked plugin, ready to instantiate, of either contract.
enum Pre {
    V1(PolicyPre<State>),
    V2(PolicyPre2<State>),
    V3(PolicyPre3<State>),
}

/// An instance's exports, of either contract.
enum Exports {
    V1(Bindings),
    V2(Bindings2),
    V3(Bindings3),
}

/// One loaded plugin version: compiled, type-checked, and proven to `init`.
pub struct Plugin {
    name: Arc<str>,
    pre: Pre,
    limits: Limits,
    /// `host.take`'s buckets: the plugin's, whichever instance asks.
    buckets: Arc<Buckets>,
    config_json: String,
    output: Arc<Output>,
    warm: Mutex<Vec<Warm>>,
    /// Consecutive failed calls, for the failure log line.
    failures: AtomicU32,
    breaker: Mutex<Breaker>,
    /// What its content hooks are for (a 0.3 plugin's `interest`, asked once at load; None
    /// for a plugin without hooks).
    interest: Option<Interest>,
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
            buckets: rate::of_plugin(name),
            config_json: config_json.to_string(),
            output: Arc::new(Output::new(name, capture)),
            warm: Mutex::new(Vec::new()),
            failures: AtomicU32::new(0),
            breaker: Mutex::new(Breaker::default()),
            interest: None,
        };
        let mut plugin = plugin;
        let mut warm = plugin.instantiate().map_err(anyhow::Error::new)?;
        plugin.interest = plugin.ask_interest(&mut warm).map_err(anyhow::Error::new)?;
        plugin.give_back(warm);
        Ok(plugin)
    }

    /// Where this plugin's log lines and output go.
    pub fn output(&self) -> &Output {
        &self.output
    }

    /// The JSON its `init` was given.
    pub fn config_json(&self) -> &str {
        &self.config_json
    }

    /// The contract it was built against.
    pub fn contract(&self) -> Contract {
        match self.pre {
            Pre::V1(_) => Contract::V1,
            Pre::V2(_) => Contract::V2,
            Pre::V3(_) => Contract::V3,
        }
    }

    /// A fresh store and instance, `init`-ed with the plugin's config.
    fn instantiate(&self) -> Result<Warm, PluginError> {
        let mut store = Store::new(&runtime().engine, State::new(&self.output, &self.limits, &self.buckets));
        store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
        store.epoch_deadline_trap();
        let _running = runtime().running();
        let init_ms = self.limits.deadline_ms.max(MIN_INIT_DEADLINE_MS);
        store.set_epoch_deadline(Limits::ticks(init_ms));
        let instantiated = match &self.pre {
            Pre::V1(pre) => pre.instantiate(&mut store).map(Exports::V1),
            Pre::V2(pre) => pre.instantiate(&mut store).map(Exports::V2),
            Pre::V3(pre) => pre.instantiate(&mut store).map(Exports::V3),
        };
        let bindings = match instantiated {
            Ok(b) => b,
            Err(e) => {
                let printed = store.data().end_call();
                let e = with_printed(classify(&store, e, init_ms), &printed);
                return Err(PluginError::Init(format!("instantiation {e}")));
            }
        };
        let r = match &bindings {
            Exports::V1(b) => b.call_init(&mut store, &self.config_json),
            Exports::V2(b) => b.call_init(&mut store, &self.config_json),
            Exports::V3(b) => b.call_init(&mut store, &self.config_json),
        };
        let printed = store.data().end_call();
        match r {
            Ok(Ok(())) => Ok(Warm { store, bindings }),
            Ok(Err(msg)) => Err(PluginError::ConfigRefused(msg)),
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
        now: tokio::time::Instant,
        f: impl FnOnce(&Exports, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        self.with_budget(now, self.limits.deadline_ms, f)
    }

    /// [`Plugin::with_instance`] under a budget of `budget_ms` (a content hook's grows with
    /// its payload).
    fn with_budget<R>(
        &self,
        now: tokio::time::Instant,
        budget_ms: u64,
        f: impl FnOnce(&Exports, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        self.admit()?;
        let result = self.take().and_then(|mut w| {
            let _running = runtime().running();
            w.store.set_epoch_deadline(Limits::ticks(budget_ms));
            w.store.data_mut().now = Some(now);
            w.store.data_mut().waited = None;
            let r = f(&w.bindings, &mut w.store);
            let printed = w.store.data().end_call();
            match r {
                Ok(r) => {
                    self.give_back(w);
                    Ok(r)
                }
                Err(e) => Err(with_printed(classify(&w.store, e, budget_ms), &printed)),
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
        self.decide_waited(call, current).map(|(verdict, _)| verdict)
    }

    /// [`Plugin::decide`], and how long the longest wait was that a rate limit (`host.take`)
    /// told the plugin of while it decided: when a refusal would be allowed again.
    pub fn decide_waited(
        &self,
        call: &CallArgs,
        current: &decision::Decision,
    ) -> Result<(Verdict, Option<std::time::Duration>), PluginError> {
        match &self.pre {
            Pre::V1(_) => {
                // 0.1 has no placement: the one decided before this plugin stands.
                let kept = current.placement.clone();
                let current = to_wit_decision(current);
                let v = self.with_instance(call.now, |b, s| match b {
                    Exports::V1(b) => b.call_decide(s, &call.v1, &current),
                    _ => unreachable!("a plugin's instances are of its own contract"),
                })?;
                // 0.1 has no `host.take`: nothing to wait for.
                let v = match v {
                    wit::Verdict::Continue(d) => {
                        Verdict::Continue(decision::Decision { placement: kept, ..from_wit_decision(d) })
                    }
                    wit::Verdict::Stop(d) => {
                        Verdict::Stop(decision::Decision { placement: kept, ..from_wit_decision(d) })
                    }
                    wit::Verdict::Reject(reason) => Verdict::Reject(reason),
                };
                Ok((v, None))
            }
            Pre::V2(_) => {
                let current = to_wit2_decision(current);
                let (v, waited) = self.with_instance(call.now, |b, s| match b {
                    Exports::V2(b) => b.call_decide(&mut *s, call.v2(), &current).map(|v| (v, s.data().waited)),
                    _ => unreachable!("a plugin's instances are of its own contract"),
                })?;
                let v = match v {
                    wit2::Verdict::Continue(d) => Verdict::Continue(from_wit2_decision(d)),
                    wit2::Verdict::Stop(d) => Verdict::Stop(from_wit2_decision(d)),
                    wit2::Verdict::Reject(reason) => Verdict::Reject(reason),
                };
                Ok((v, waited.map(std::time::Duration::from_millis)))
            }
            Pre::V3(_) => {
                let current = to_wit3_decision(current);
                let (v, waited) = self.with_instance(call.now, |b, s| match b {
                    Exports::V3(b) => b.call_decide(&mut *s, call.v3(), &current).map(|v| (v, s.data().waited)),
                    _ => unreachable!("a plugin's instances are of its own contract"),
                })?;
                let v = match v {
                    wit3::Verdict::Continue(d) => Verdict::Continue(from_wit3_decision(d)),
                    wit3::Verdict::Stop(d) => Verdict::Stop(from_wit3_decision(d)),
                    wit3::Verdict::Reject(reason) => Verdict::Reject(reason),
                };
                Ok((v, waited.map(std::time::Duration::from_millis)))
            }
        }
    }

    /// Asks the plugin for one tool's hints (a 0.2 plugin: the hints of its `list-tool`, for
    /// a client it is told nothing of).
    pub fn annotate(
        &self,
        server: &str,
        tool: &str,
        declared: &decision::Hints,
        current: &decision::Hints,
    ) -> Result<decision::Hints, PluginError> {
        if let Pre::V2(_) | Pre::V3(_) = self.pre {
            let listed = ListedTool {
                kind: super::Kind::Tool,
                server: server.to_string(),
                name: tool.to_string(),
                title: None,
                description: None,
                declared: declared.clone(),
            };
            let current = Listing::of(&listed).with_hints(current.clone());
            let now = tokio::time::Instant::now();
            return self.list_tool(&listed, &decision::Caller::default(), &current, now).map(|l| l.hints);
        }
        let tool = wit::Tool { server: server.to_string(), name: tool.to_string(), declared: to_wit_hints(declared) };
        let current = to_wit_hints(current);
        let h = self.with_instance(tokio::time::Instant::now(), |b, s| match b {
            Exports::V1(b) => b.call_annotate(s, &tool, &current),
            _ => unreachable!("a plugin's instances are of its own contract"),
        })?;
        Ok(from_wit_hints(h))
    }

    /// How one tool is shown to `caller`: a 0.2 plugin's `list-tool`; a 0.1 plugin's `annotate`,
    /// which changes the hints only.
    pub fn list_tool(
        &self,
        tool: &ListedTool,
        caller: &decision::Caller,
        current: &Listing,
        now: tokio::time::Instant,
    ) -> Result<Listing, PluginError> {
        if let Pre::V1(_) = self.pre {
            // A 0.1 plugin knows tools only.
            if tool.kind != super::Kind::Tool {
                return Ok(current.clone());
            }
            let hints = self.annotate(&tool.server, &tool.name, &tool.declared, &current.hints)?;
            return Ok(current.clone().with_hints(hints));
        }
        if let Pre::V3(_) = self.pre {
            return self.list_tool_v3(tool, caller, current, now);
        }
        let wit_tool = wit2::Tool {
            kind: match tool.kind {
                super::Kind::Tool => wit2::ItemKind::Tool,
                super::Kind::Prompt => wit2::ItemKind::Prompt,
                super::Kind::ResourceTemplate => wit2::ItemKind::ResourceTemplate,
            },
            server: tool.server.clone(),
            name: tool.name.clone(),
            title: tool.title.clone(),
            description: tool.description.clone(),
            declared: to_wit2_hints(&tool.declared),
            client: to_wit2_client(caller),
            era: caller.era.to_string(),
        };
        let wit_current = wit2::Listing {
            hidden: current.hidden,
            name: current.name.clone(),
            title: current.title.clone(),
            description: current.description.clone(),
            hints: to_wit2_hints(&current.hints),
        };
        let l = self.with_instance(now, |b, s| match b {
            Exports::V2(b) => b.call_list_tool(s, &wit_tool, &wit_current),
            _ => unreachable!("a plugin's instances are of its own contract"),
        })?;
        Ok(Listing {
            hidden: l.hidden,
            name: l.name,
            title: l.title,
            description: l.description,
            hints: from_wit2_hints(l.hints),
        })
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
fn type_checked(bytes: &[u8], hash: &[u8; 32]) -> anyhow::Result<Pre> {
    let rt = runtime();
    let component = compile(rt, bytes, hash).map_err(|e| match e.downcast::<LoadError>() {
        Ok(known) => known,
        Err(e) => LoadError::Unparsable(one_line(&e)),
    })?;
    let instance_pre = rt.linker.instantiate_pre(&component).map_err(|e| LoadError::Imports(one_line(&wasm_err(e))))?;
    // A 0.3 plugin exports the hooks, a 0.2 one `list-tool`, a 0.1 one `annotate`: the exports
    // tell them apart.
    if let Ok(pre) = PolicyPre3::new(instance_pre.clone()) {
        return Ok(Pre::V3(pre));
    }
    if let Ok(pre) = PolicyPre2::new(instance_pre.clone()) {
        return Ok(Pre::V2(pre));
    }
    PolicyPre::new(instance_pre).map(Pre::V1).map_err(|e| LoadError::WrongWorld(one_line(&wasm_err(e))).into())
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
