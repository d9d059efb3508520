//! The per-instance host state: WASI context, memory limiter, the wit host `log`, and a zero clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::output::{LogStream, Output, Printed, Stream};
use super::runtime::{Level, Limits, wit_host, wit2_host, wit3_host};
use crate::rate::Buckets;

/// Per-instance host state.
pub(super) struct State {
    output: Arc<Output>,
    printed: Arc<Mutex<Printed>>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) memory_limit: usize,
    /// Set when the plugin asked for more memory than allowed, to name the failure.
    pub(super) hit_memory_limit: bool,
    /// The plugin's rate-limit buckets (`host.take`), shared by all its instances.
    buckets: Arc<Buckets>,
    /// The time the call being served counts from (set per call; tokio's clock, which tests
    /// may pause).
    pub(super) now: Option<tokio::time::Instant>,
    /// The longest wait `take` answered during the call being served (reset per call), in ms:
    /// when a refusal after it would be allowed again. None: every bucket had a token, or an
    /// empty one never refills.
    pub(super) waited: Option<u64>,
}

impl State {
    pub(super) fn new(output: &Arc<Output>, limits: &Limits, buckets: &Arc<Buckets>) -> State {
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
            buckets: buckets.clone(),
            now: None,
            waited: None,
        }
    }
}

impl State {
    /// Ends a call's output: logs a last unterminated line, and returns what the call printed
    /// last (to explain a failure: a panic message is printed just before the trap).
    pub(super) fn end_call(&self) -> String {
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

impl wit3_host::Host for State {
    fn log(&mut self, level: wit3_host::Level, message: String) {
        let level = match level {
            wit3_host::Level::Trace => wit2_host::Level::Trace,
            wit3_host::Level::Debug => wit2_host::Level::Debug,
            wit3_host::Level::Info => wit2_host::Level::Info,
            wit3_host::Level::Warn => wit2_host::Level::Warn,
            wit3_host::Level::Error => wit2_host::Level::Error,
        };
        wit2_host::Host::log(self, level, message);
    }

    fn take(&mut self, key: String, per_minute: u32, burst: u32) -> Option<u64> {
        wit2_host::Host::take(self, key, per_minute, burst)
    }
}

impl wit2_host::Host for State {
    fn log(&mut self, level: wit2_host::Level, message: String) {
        let level = match level {
            wit2_host::Level::Trace => Level::Trace,
            wit2_host::Level::Debug => Level::Debug,
            wit2_host::Level::Info => Level::Info,
            wit2_host::Level::Warn => Level::Warn,
            wit2_host::Level::Error => Level::Error,
        };
        wit_host::Host::log(self, level, message);
    }

    fn take(&mut self, key: String, per_minute: u32, burst: u32) -> Option<u64> {
        let now = self.now.unwrap_or_else(tokio::time::Instant::now);
        let wait = self.buckets.take(&key, per_minute, burst, now);
        if let Some(ms) = wait.filter(|ms| *ms != u64::MAX) {
            self.waited = self.waited.max(Some(ms));
        }
        wait
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
