//! The narrow wrapper around wasmtime: one engine, compiled plugins, warm instances, deadlines.
//!
//! Nothing outside this file sees a wasmtime type. A [`Plugin`] is one compiled, type-checked
//! and `init`-ed plugin version; it keeps a small pool of warm instances (a Store each) and
//! runs every call under an epoch deadline and a memory limit. A failed call discards its
//! instance, so the next call starts from a fresh, freshly `init`-ed one.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use switchyard_config::PluginEntry;
use switchyard_core::decision;

/// The one `bindgen!` site: Rust types and glue for `wit/policy.wit`.
mod bindings {
    wasmtime::component::bindgen!({ path: "../../wit", world: "policy" });
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
/// Consecutive failures after which an error is logged (and every so often after).
const FAILURE_LOG_THRESHOLD: u32 = 5;
/// Calls in a row past the deadline after which a plugin is switched off for a cool-down.
pub const BREAKER_THRESHOLD: u32 = 5;
/// The first cool-down; it doubles on each trip in a row, up to the maximum.
const BREAKER_COOL_DOWN: Duration = Duration::from_secs(1);
const BREAKER_MAX_COOL_DOWN: Duration = Duration::from_secs(30);
/// Plugin output and failure notes: a burst of this many lines, then this many a second.
const LOG_BURST: f64 = 20.0;
const LOG_PER_SECOND: f64 = 5.0;
/// Lines of a call's output kept to explain its failure (a panic message is two or three).
const TAIL_LINES: usize = 4;

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
    output: Arc<Output>,
    printed: Arc<Mutex<Printed>>,
    wasi: WasiCtx,
    table: ResourceTable,
    memory_limit: usize,
    /// Set when the plugin asked for more memory than allowed, to name the failure.
    hit_memory_limit: bool,
}

impl State {
    fn new(output: &Arc<Output>, limits: &Limits) -> State {
        let printed = Arc::new(Mutex::new(Printed::default()));
        let mut b = WasiCtxBuilder::new();
        // stdout carries the MCP protocol: plugin output goes to the log instead.
        let stream = |stream| LogStream { output: output.clone(), printed: printed.clone(), stream };
        b.stdout(stream(Stream::Stdout));
        b.stderr(stream(Stream::Stderr));
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
            output: output.clone(),
            printed,
            wasi: b.build(),
            table: ResourceTable::new(),
            memory_limit: limits.memory_bytes(),
            hit_memory_limit: false,
        }
    }
}

impl State {
    /// Ends a call's output: logs a last unterminated line, and returns what the call printed
    /// last (to explain a failure: a panic message is printed just before the trap).
    fn end_call(&self) -> String {
        let mut p = self.printed.lock().unwrap_or_else(|p| p.into_inner());
        for stream in [Stream::Stdout, Stream::Stderr] {
            let rest = std::mem::take(&mut p.pending[stream as usize]);
            if !rest.is_empty() {
                p.line(&self.output, stream, &rest);
            }
        }
        let tail: Vec<String> = p.tail.drain(..).collect();
        tail.join(" ")
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
        let level = match level {
            Level::Trace => tracing::Level::TRACE,
            Level::Debug => tracing::Level::DEBUG,
            Level::Info => tracing::Level::INFO,
            Level::Warn => tracing::Level::WARN,
            Level::Error => tracing::Level::ERROR,
        };
        self.output.line(level, "log", &message);
    }
}

/// Where a plugin's words go: its `log` calls, its stdout and stderr, and notes about its
/// failures. Shared by all instances of one plugin version, so the rate limit is per plugin:
/// a plugin that prints on every call under load cannot flood the router's log.
pub struct Output {
    plugin: Arc<str>,
    budget: Mutex<Budget>,
    /// `plugin check` keeps every line, to show it.
    capture: Option<Mutex<Vec<String>>>,
}

struct Budget {
    tokens: f64,
    refilled: Instant,
    suppressed: u64,
}

impl Output {
    fn new(plugin: &str, capture: bool) -> Output {
        Output {
            plugin: Arc::from(plugin),
            budget: Mutex::new(Budget { tokens: LOG_BURST, refilled: Instant::now(), suppressed: 0 }),
            capture: capture.then(|| Mutex::new(Vec::new())),
        }
    }

    /// Logs one line from or about the plugin, within its budget; says how many were left out.
    pub fn line(&self, level: tracing::Level, source: &str, text: &str) {
        if let Some(c) = &self.capture {
            let line = match source {
                "log" => format!("log {}: {text}", level.as_str().to_lowercase()),
                _ => format!("{source}: {text}"),
            };
            c.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
        let suppressed = {
            let mut b = self.budget.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            b.tokens = (b.tokens + now.duration_since(b.refilled).as_secs_f64() * LOG_PER_SECOND).min(LOG_BURST);
            b.refilled = now;
            if b.tokens < 1.0 {
                b.suppressed += 1;
                if b.suppressed == 1 {
                    drop(b);
                    tracing::warn!(
                        plugin = &*self.plugin,
                        "further lines from or about this plugin are left out of the log for now \
                         (at most {LOG_PER_SECOND} a second; the number left out follows)"
                    );
                }
                return;
            }
            b.tokens -= 1.0;
            std::mem::take(&mut b.suppressed)
        };
        let plugin = &*self.plugin;
        if suppressed > 0 {
            tracing::warn!(
                plugin,
                "{suppressed} lines from or about this plugin were left out of the log (at most {LOG_PER_SECOND} a second)"
            );
        }
        match level {
            tracing::Level::TRACE => tracing::trace!(plugin, source, "{text}"),
            tracing::Level::DEBUG => tracing::debug!(plugin, source, "{text}"),
            tracing::Level::INFO => tracing::info!(plugin, source, "{text}"),
            tracing::Level::WARN => tracing::warn!(plugin, source, "{text}"),
            tracing::Level::ERROR => tracing::error!(plugin, source, "{text}"),
        }
    }

    /// The lines kept so far (only for `plugin check`), and forgets them.
    pub fn take_captured(&self) -> Vec<String> {
        self.capture
            .as_ref()
            .map(|c| std::mem::take(&mut *c.lock().unwrap_or_else(|p| p.into_inner())))
            .unwrap_or_default()
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

#[derive(Debug, Clone, Copy)]
enum Stream {
    Stdout = 0,
    Stderr = 1,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// What one instance printed and has not ended with a newline yet, and its last lines.
/// Per instance, not per stream handle: a guest may open a new handle for every write.
#[derive(Default)]
struct Printed {
    pending: [Vec<u8>; 2],
    tail: VecDeque<String>,
}

impl Printed {
    /// Bounds what a plugin can make the host buffer without a newline.
    const MAX_LINE: usize = 8 * 1024;

    fn push(&mut self, output: &Output, stream: Stream, bytes: &[u8]) {
        let pending = &mut self.pending[stream as usize];
        pending.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=i).collect();
            lines.push(line);
        }
        if pending.len() > Self::MAX_LINE {
            lines.push(std::mem::take(pending));
        }
        for line in lines {
            self.line(output, stream, &line);
        }
    }

    fn line(&mut self, output: &Output, stream: Stream, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end();
        if text.is_empty() {
            return;
        }
        output.line(tracing::Level::INFO, stream.name(), text);
        // Rust's hint about backtraces explains nothing about this failure.
        if !text.starts_with("note: run with `RUST_BACKTRACE") {
            if self.tail.len() == TAIL_LINES {
                self.tail.pop_front();
            }
            self.tail.push_back(text.to_string());
        }
    }
}

/// A plugin's stdout or stderr: lines go to the router's log (stderr), never to stdout.
struct LogStream {
    output: Arc<Output>,
    printed: Arc<Mutex<Printed>>,
    stream: Stream,
}

impl wasmtime_wasi::cli::IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.logger())
    }

    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.logger())
    }
}

impl LogStream {
    fn logger(&self) -> LineLogger {
        LineLogger { output: self.output.clone(), printed: self.printed.clone(), stream: self.stream }
    }
}

/// One handle on a plugin's stdout or stderr. Writes never block and never need a runtime.
struct LineLogger {
    output: Arc<Output>,
    printed: Arc<Mutex<Printed>>,
    stream: Stream,
}

impl LineLogger {
    fn push(&self, bytes: &[u8]) {
        self.printed.lock().unwrap_or_else(|p| p.into_inner()).push(&self.output, self.stream, bytes);
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
        self: std::pin::Pin<&mut Self>,
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
#[allow(unsafe_code)]
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
    if bytes.len() < 8 || bytes[..4] != *b"\0asm" {
        let start = String::from_utf8_lossy(&bytes[..bytes.len().min(16)]).escape_debug().to_string();
        anyhow::bail!("this file is not WebAssembly at all (it starts with \"{start}\", not \"\\0asm\")");
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
    output: Arc<Output>,
    warm: Mutex<Vec<Warm>>,
    /// Consecutive failed calls, for the failure log line.
    failures: AtomicU32,
    breaker: Mutex<Breaker>,
}

/// Switches off a plugin that keeps running past its deadline: each such call burns a whole
/// CPU budget, so after [`BREAKER_THRESHOLD`] in a row its calls fail at once (on_error
/// applies) for a cool-down; then one call tries it again (half-open), which either closes the
/// breaker or opens it for twice as long.
#[derive(Debug, Default)]
struct Breaker {
    deadline_streak: u32,
    open_until: Option<Instant>,
    /// Trips in a row without a call that finished in time, for the doubling cool-down.
    trips: u32,
    /// A half-open try is running; other calls still fail at once.
    trying: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum BreakerChange {
    Opened { streak: u32, cool_down: Duration },
    Closed,
}

impl Breaker {
    fn admit(&mut self, now: Instant) -> Result<(), PluginError> {
        let Some(until) = self.open_until else { return Ok(()) };
        if now < until || self.trying {
            return Err(PluginError::SwitchedOff(until.saturating_duration_since(now).as_millis() as u64));
        }
        self.trying = true;
        Ok(())
    }

    fn record<R>(&mut self, result: &Result<R, PluginError>, now: Instant) -> Option<BreakerChange> {
        let tried = std::mem::take(&mut self.trying);
        match result {
            Err(PluginError::Deadline(_)) => {
                self.deadline_streak += 1;
                if tried || (self.open_until.is_none() && self.deadline_streak >= BREAKER_THRESHOLD) {
                    self.trips += 1;
                    let cool_down =
                        BREAKER_COOL_DOWN.saturating_mul(1 << (self.trips - 1).min(5)).min(BREAKER_MAX_COOL_DOWN);
                    self.open_until = Some(now + cool_down);
                    return Some(BreakerChange::Opened { streak: self.deadline_streak, cool_down });
                }
                None
            }
            Err(PluginError::SwitchedOff(_)) => None,
            _ => {
                self.deadline_streak = 0;
                self.trips = 0;
                self.open_until.take().map(|_| BreakerChange::Closed)
            }
        }
    }
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
        let rt = runtime();
        let component = compile(rt, bytes, hash)
            .map_err(|e| anyhow::anyhow!("not a loadable WebAssembly component: {}", one_line(&e)))?;
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

    /// Instances kept warm now (for tests).
    #[cfg(test)]
    pub fn warm_count(&self) -> usize {
        self.warm.lock().unwrap().len()
    }
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

    pub fn method(&self) -> &str {
        &self.0.method
    }

    pub fn tool(&self) -> Option<&str> {
        self.0.tool.as_deref()
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

#[cfg(test)]
mod breaker_tests {
    use super::*;

    #[test]
    fn the_breaker_trips_after_a_streak_of_deadlines_then_tries_once_and_backs_off() {
        let mut b = Breaker::default();
        let t0 = Instant::now();
        let late: Result<(), PluginError> = Err(PluginError::Deadline(5));
        let trap: Result<(), PluginError> = Err(PluginError::Trap("x".into()));
        // A trap or an answer in between breaks the streak: only deadlines in a row count.
        for _ in 0..BREAKER_THRESHOLD - 1 {
            assert_eq!(b.admit(t0), Ok(()));
            assert_eq!(b.record(&late, t0), None);
        }
        assert_eq!(b.record(&trap, t0), None);
        for _ in 0..BREAKER_THRESHOLD - 1 {
            b.record(&late, t0);
        }
        let opened = b.record(&late, t0);
        assert_eq!(opened, Some(BreakerChange::Opened { streak: BREAKER_THRESHOLD, cool_down: BREAKER_COOL_DOWN }));
        // Open: calls fail at once, without running.
        assert_eq!(b.admit(t0 + Duration::from_millis(400)), Err(PluginError::SwitchedOff(600)));
        // Half-open after the cool-down: one call tries; others still fail meanwhile.
        let t1 = t0 + BREAKER_COOL_DOWN;
        assert_eq!(b.admit(t1), Ok(()));
        assert!(matches!(b.admit(t1), Err(PluginError::SwitchedOff(_))));
        // The try runs late again: open for twice as long.
        let reopened = b.record(&late, t1);
        assert_eq!(
            reopened,
            Some(BreakerChange::Opened { streak: BREAKER_THRESHOLD + 1, cool_down: 2 * BREAKER_COOL_DOWN })
        );
        assert!(b.admit(t1 + BREAKER_COOL_DOWN).is_err());
        let t2 = t1 + 2 * BREAKER_COOL_DOWN;
        assert_eq!(b.admit(t2), Ok(()));
        // The try answers in time: closed, and the next streak starts from zero.
        assert_eq!(b.record(&Ok(()), t2), Some(BreakerChange::Closed));
        assert_eq!(b.admit(t2), Ok(()));
        assert_eq!(b.record(&late, t2), None);
    }
}
