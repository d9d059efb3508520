//! The narrow wrapper around wasmtime: one engine, compiled plugins, warm instances, deadlines.
//!
//! Nothing outside this file sees a wasmtime type. A [`Plugin`] is one compiled, type-checked
//! and `init`-ed plugin version; it keeps a small pool of warm instances (a Store each) and
//! runs every call under an epoch deadline and a memory limit. A failed call discards its
//! instance, so the next call starts from a fresh, freshly `init`-ed one.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::config::PluginEntry;
use crate::decision;

/// The one `bindgen!` site: Rust types and glue for `wit/policy.wit`.
mod bindings {
    wasmtime::component::bindgen!({ path: "../wit", world: "policy" });
}

use bindings::switchyard::policy::host::{self as wit_host, Level};
use bindings::switchyard::policy::types as wit;
use bindings::{Policy as Bindings, PolicyPre};

/// How often the engine's epoch advances; deadlines are counted in these ticks.
const TICK: Duration = Duration::from_millis(1);
/// Warm instances kept per plugin; more are created under load and dropped when returned.
const MAX_WARM: usize = 16;
/// `init` parses config and may build tables: it gets more time than a call.
const MIN_INIT_DEADLINE_MS: u64 = 250;
/// Consecutive failures after which a plugin's breaker logs an error (and every so often after).
const BREAKER_THRESHOLD: u32 = 5;

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
}

/// What one plugin answered for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Continue(decision::Decision),
    Stop(decision::Decision),
    Reject(String),
}

/// The engine, its linker and the epoch ticker, shared by every plugin of the process.
struct Runtime {
    engine: Engine,
    linker: Linker<State>,
    /// Key part of cached artifacts: a different wasmtime or engine config must not reuse them.
    compat: String,
}

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new().expect("the wasmtime engine configuration is valid"))
}

impl Runtime {
    fn new() -> anyhow::Result<Runtime> {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        // Deadlines: the ticker thread below advances the epoch; a store past its deadline traps.
        config.epoch_interruption(true);
        let engine = Engine::new(&config).map_err(wasm_err)?;

        let mut linker = Linker::<State>::new(&engine);
        // Rust's wasm32-wasip2 std imports WASI even when a plugin uses none of it; every
        // capability is denied or stubbed in `State::new`.
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(wasm_err)?;
        wit_host::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s).map_err(wasm_err)?;

        let ticker = engine.weak();
        std::thread::Builder::new()
            .name("switchyard-epoch".into())
            .spawn(move || {
                while let Some(engine) = ticker.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(TICK);
                }
            })
            .context("cannot start the plugin deadline thread")?;

        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let compat = format!("{:016x}", h.finish());
        Ok(Runtime { engine, linker, compat })
    }
}

/// wasmtime has its own error type; loading code speaks anyhow.
fn wasm_err(e: wasmtime::Error) -> anyhow::Error {
    anyhow::Error::from_boxed(e.into_boxed_dyn_error())
}

/// Per-instance host state.
struct State {
    plugin: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    memory_limit: usize,
    /// Set when the plugin asked for more memory than allowed, to name the failure.
    hit_memory_limit: bool,
}

impl State {
    fn new(plugin: &Arc<str>, limits: &Limits) -> State {
        let mut b = WasiCtxBuilder::new();
        // stdout carries the MCP protocol: plugin output goes to the log instead.
        b.stdout(LogStream { plugin: plugin.clone(), stream: "stdout" });
        b.stderr(LogStream { plugin: plugin.clone(), stream: "stderr" });
        b.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        if !limits.allow_clock {
            b.wall_clock(ZeroClock).monotonic_clock(ZeroClock);
        }
        if !limits.allow_random {
            // Fixed streams: a plugin's decisions then depend on its input only.
            b.secure_random(wasmtime_wasi::Deterministic::new(vec![0x5a; 32]));
            b.insecure_random(wasmtime_wasi::Deterministic::new(vec![0xa5; 32]));
            b.insecure_random_seed(0);
        }
        State {
            plugin: plugin.clone(),
            wasi: b.build(),
            table: ResourceTable::new(),
            memory_limit: limits.memory_bytes(),
            hit_memory_limit: false,
        }
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl wasmtime::ResourceLimiter for State {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            self.hit_memory_limit = true;
            // Trapping (rather than failing the grow) stops the plugin at once with a clear cause.
            wasmtime::bail!("memory limit of {} bytes reached", self.memory_limit);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

impl wit_host::Host for State {
    fn log(&mut self, level: Level, message: String) {
        let plugin = &*self.plugin;
        match level {
            Level::Trace => tracing::trace!(plugin, "{message}"),
            Level::Debug => tracing::debug!(plugin, "{message}"),
            Level::Info => tracing::info!(plugin, "{message}"),
            Level::Warn => tracing::warn!(plugin, "{message}"),
            Level::Error => tracing::error!(plugin, "{message}"),
        }
    }
}

/// Wall and monotonic clock that always read zero (plugins get no clock unless allowed).
struct ZeroClock;

impl wasmtime_wasi::HostWallClock for ZeroClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for ZeroClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// A plugin's stdout or stderr: complete lines go to the router's log (stderr).
struct LogStream {
    plugin: Arc<str>,
    stream: &'static str,
}

impl wasmtime_wasi::cli::IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(LineLogger::new(self))
    }

    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(LineLogger::new(self))
    }
}

struct LineLogger {
    plugin: Arc<str>,
    stream: &'static str,
    pending: Vec<u8>,
}

impl LineLogger {
    /// Bounds what a plugin can make the host buffer without a newline.
    const MAX_LINE: usize = 8 * 1024;

    fn new(s: &LogStream) -> LineLogger {
        LineLogger { plugin: s.plugin.clone(), stream: s.stream, pending: Vec::new() }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        while let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=i).collect();
            self.emit(&line[..line.len() - 1]);
        }
        if self.pending.len() > Self::MAX_LINE {
            let line = std::mem::take(&mut self.pending);
            self.emit(&line);
        }
    }

    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        tracing::info!(plugin = &*self.plugin, stream = self.stream, "{}", text.trim_end());
    }
}

impl Drop for LineLogger {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.emit(&line);
        }
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for LineLogger {
    async fn ready(&mut self) {}
}

impl wasmtime_wasi::p2::OutputStream for LineLogger {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for LineLogger {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Per-plugin resource limits, from its `[[plugins]]` entry.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline_ms: u64,
    pub memory_mib: u64,
    pub allow_clock: bool,
    pub allow_random: bool,
}

impl Limits {
    pub fn from_entry(e: &PluginEntry) -> Limits {
        Limits {
            deadline_ms: e.deadline_ms.max(1),
            memory_mib: e.memory_mib.max(1),
            allow_clock: e.allow_clock,
            allow_random: e.allow_random,
        }
    }

    fn memory_bytes(&self) -> usize {
        usize::try_from(self.memory_mib.saturating_mul(1024 * 1024)).unwrap_or(usize::MAX)
    }

    /// Epoch ticks for a budget: one extra tick because the next tick may come at once.
    fn ticks(ms: u64) -> u64 {
        ms.saturating_add(1)
    }
}

/// The content hash of a plugin file (SHA-256), used to skip unchanged files and as cache key.
pub fn content_hash(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where precompiled plugins are kept: `$XDG_CACHE_HOME/switchyard/plugins`, else
/// `~/.cache/switchyard/plugins`. None when neither is known or the directory cannot be made.
fn cache_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        let dir = base.join("switchyard").join("plugins");
        match std::fs::create_dir_all(&dir) {
            Ok(()) => Some(dir),
            Err(e) => {
                tracing::debug!("no plugin compile cache ({}: {e})", dir.display());
                None
            }
        }
    })
    .as_deref()
}

/// Compiles a component, or loads its precompiled form from the cache.
fn compile(rt: &Runtime, bytes: &[u8], hash: &[u8; 32]) -> anyhow::Result<Component> {
    let cached = cache_dir().map(|d| d.join(format!("{}-{}.cwasm", hex(hash), rt.compat)));
    if let Some(path) = cached.as_deref().filter(|p| p.is_file()) {
        // SAFETY: the cache holds only files this function wrote from `Component::serialize`
        // under a name that pins the content hash and the engine's compatibility hash; wasmtime
        // still checks the header and refuses a mismatching artifact.
        match unsafe { Component::deserialize_file(&rt.engine, path) } {
            Ok(c) => return Ok(c),
            Err(e) => tracing::debug!("ignoring cached {}: {e}", path.display()),
        }
    }
    if is_core_module(bytes) {
        anyhow::bail!("this is a core WebAssembly module, not a component (build for wasm32-wasip2)");
    }
    let component = Component::new(&rt.engine, bytes).map_err(wasm_err)?;
    if let Some(path) = cached {
        let write = || -> anyhow::Result<()> {
            let art = component.serialize().map_err(wasm_err)?;
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, art)?;
            std::fs::rename(&tmp, &path)?;
            Ok(())
        };
        if let Err(e) = write() {
            tracing::debug!("cannot cache {}: {e}", path.display());
        }
    }
    Ok(component)
}

/// A core module starts with the same magic as a component but a different version field.
fn is_core_module(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [1, 0, 0, 0]
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
    warm: Mutex<Vec<Warm>>,
    /// Consecutive failed calls, for the breaker log line.
    failures: AtomicU32,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin").field("name", &self.name).field("limits", &self.limits).finish()
    }
}

impl Plugin {
    /// Compiles (or loads from cache), type-checks against the `policy` world, instantiates and
    /// runs `init`. Blocking and possibly slow (tens of ms to compile): keep it off the request
    /// path. The error says what is wrong in words a plugin author can act on.
    pub fn load(
        name: &str,
        bytes: &[u8],
        hash: &[u8; 32],
        limits: Limits,
        config_json: &str,
    ) -> anyhow::Result<Plugin> {
        let rt = runtime();
        let component = compile(rt, bytes, hash).context("not a loadable WebAssembly component")?;
        let instance_pre = rt
            .linker
            .instantiate_pre(&component)
            .map_err(|e| wasm_err(e).context("it needs imports switchyard does not provide (wrong interface?)"))?;
        let pre = PolicyPre::new(instance_pre).map_err(|e| {
            wasm_err(e).context(
                "it does not implement the world switchyard:policy/policy@0.1.0 \
                 (wrong interface: expected exports init, decide, annotate)",
            )
        })?;
        let plugin = Plugin {
            name: Arc::from(name),
            pre,
            limits,
            config_json: config_json.to_string(),
            warm: Mutex::new(Vec::new()),
            failures: AtomicU32::new(0),
        };
        let warm = plugin.instantiate().map_err(anyhow::Error::new)?;
        plugin.give_back(warm);
        Ok(plugin)
    }

    /// A fresh store and instance, `init`-ed with the plugin's config.
    fn instantiate(&self) -> Result<Warm, PluginError> {
        let mut store = Store::new(&runtime().engine, State::new(&self.name, &self.limits));
        store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
        store.epoch_deadline_trap();
        let init_ms = self.limits.deadline_ms.max(MIN_INIT_DEADLINE_MS);
        store.set_epoch_deadline(Limits::ticks(init_ms));
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| classify(&store, e, init_ms))
            .map_err(|e| PluginError::Init(format!("instantiation {e}")))?;
        match bindings.call_init(&mut store, &self.config_json) {
            Ok(Ok(())) => Ok(Warm { store, bindings }),
            Ok(Err(msg)) => Err(PluginError::Init(msg)),
            Err(e) => Err(PluginError::Init(classify(&store, e, init_ms).to_string())),
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
        let result = self.take().and_then(|mut w| {
            w.store.set_epoch_deadline(Limits::ticks(self.limits.deadline_ms));
            match f(&w.bindings, &mut w.store) {
                Ok(r) => {
                    self.give_back(w);
                    Ok(r)
                }
                Err(e) => Err(classify(&w.store, e, self.limits.deadline_ms)),
            }
        });
        match &result {
            Ok(_) => {
                // Relaxed: only a log line depends on it.
                if self.failures.load(Ordering::Relaxed) != 0 {
                    self.failures.store(0, Ordering::Relaxed);
                }
            }
            Err(e) => {
                let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
                if n == BREAKER_THRESHOLD || (n > BREAKER_THRESHOLD && n.is_multiple_of(1000)) {
                    tracing::error!(plugin = &*self.name, "plugin failed {n} calls in a row, last: {e}");
                }
            }
        }
        result
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

    /// Instances kept warm now (for tests).
    #[cfg(test)]
    pub fn warm_count(&self) -> usize {
        self.warm.lock().unwrap().len()
    }
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

/// A call converted once per chain run, so each plugin does not pay for the conversion.
pub struct CallArgs(wit::Call);

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
}

fn to_wit_hints(h: &decision::Hints) -> wit::Hints {
    wit::Hints {
        read_only: h.read_only,
        destructive: h.destructive,
        idempotent: h.idempotent,
        open_world: h.open_world,
        title: h.title.clone(),
    }
}

fn from_wit_hints(h: wit::Hints) -> decision::Hints {
    decision::Hints {
        read_only: h.read_only,
        destructive: h.destructive,
        idempotent: h.idempotent,
        open_world: h.open_world,
        title: h.title,
    }
}

fn to_wit_decision(d: &decision::Decision) -> wit::Decision {
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

fn from_wit_decision(d: wit::Decision) -> decision::Decision {
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
