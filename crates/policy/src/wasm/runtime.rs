//! The wasmtime engine and its epoch ticker, the generated wit bindings, resource limits and the compile cache.
//!
//! The ticker advances the epoch only while plugin code runs (and for a short linger after), and
//! sleeps without a timeout otherwise: a daemon with plugins that serves no calls is not woken a
//! thousand times a second to count time nobody is measuring.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, Linker};

use switchyard_config::PluginEntry;

use super::LoadError;
use super::store::State;

/// The one `bindgen!` site: Rust types and glue for `wit/policy.wit`.
mod bindings {
    wasmtime::component::bindgen!({ path: "../../wit", world: "policy" });
}

/// The same for `wit/0.2/policy.wit` (`switchyard:policy@0.2.0`); a plugin implements one of the three.
mod bindings_v2 {
    wasmtime::component::bindgen!({ path: "../../wit/0.2", world: "policy" });
}

/// The same for `wit/0.3/policy.wit` (`switchyard:policy@0.3.0`): 0.2 and the content hooks.
mod bindings_v3 {
    wasmtime::component::bindgen!({ path: "../../wit/0.3", world: "policy" });
}

pub(super) use bindings::switchyard::policy::host::{self as wit_host, Level};
pub(super) use bindings::switchyard::policy::types as wit;
pub(super) use bindings::{Policy as Bindings, PolicyPre};
pub(super) use bindings_v2::switchyard::policy::host as wit2_host;
pub(super) use bindings_v2::switchyard::policy::types as wit2;
pub(super) use bindings_v2::{Policy as Bindings2, PolicyPre as PolicyPre2};
pub(super) use bindings_v3::switchyard::policy::host as wit3_host;
pub(super) use bindings_v3::switchyard::policy::types as wit3;
pub(super) use bindings_v3::{Policy as Bindings3, PolicyPre as PolicyPre3};

/// How often the engine's epoch advances; deadlines are counted in these ticks.
const TICK: Duration = Duration::from_millis(1);
/// Ticks the ticker goes on after the last plugin call ended before it sleeps: calls that come
/// close together do not each wake it.
const LINGER_TICKS: u32 = 100;

/// The engine, its linker and the epoch ticker, shared by every plugin of the process.
pub(super) struct Runtime {
    pub(super) engine: Engine,
    pub(super) linker: Linker<State>,
    /// Key part of cached artifacts: a different wasmtime or engine config must not reuse them.
    compat: String,
    ticker: Arc<Ticker>,
}

pub(super) fn runtime() -> &'static Runtime {
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
        wit2_host::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s).map_err(wasm_err)?;
        wit3_host::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s).map_err(wasm_err)?;

        let ticker = Arc::new(Ticker::default());
        let (weak, t) = (engine.weak(), ticker.clone());
        std::thread::Builder::new()
            .name("switchyard-epoch".into())
            .spawn(move || t.run(weak))
            .context("cannot start the plugin deadline thread")?;

        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let compat = format!("{:016x}", h.finish());
        Ok(Runtime { engine, linker, compat, ticker })
    }

    /// Keeps the epoch advancing until the guard is dropped: taken around any run of plugin code
    /// under a deadline, before the deadline is set.
    pub(super) fn running(&self) -> Running {
        self.ticker.enter();
        Running(self.ticker.clone())
    }

    /// Whether the ticker sleeps (no plugin code has run for a while).
    #[cfg(test)]
    pub(super) fn ticker_asleep(&self) -> bool {
        self.ticker.asleep.load(Ordering::SeqCst)
    }
}

/// Plugin code is running (see [`Runtime::running`]).
pub(super) struct Running(Arc<Ticker>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The epoch ticker's state: how many runs of plugin code need it, and whether it sleeps.
#[derive(Default)]
struct Ticker {
    active: AtomicUsize,
    asleep: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Ticker {
    fn enter(&self) {
        // SeqCst on both sides: either `run` sees this count before it waits, or this sees its
        // `asleep` and wakes it under the lock it waits with.
        self.active.fetch_add(1, Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst) {
            let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.wake.notify_one();
        }
    }

    /// Advances the epoch every tick while plugin code runs (and `LINGER_TICKS` after), else
    /// sleeps until some starts; ends with the engine.
    fn run(&self, engine: wasmtime::EngineWeak) {
        let mut idle = 0;
        while let Some(e) = engine.upgrade() {
            e.increment_epoch();
            drop(e);
            std::thread::sleep(TICK);
            if self.active.load(Ordering::SeqCst) > 0 {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle < LINGER_TICKS {
                continue;
            }
            let mut held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.asleep.store(true, Ordering::SeqCst);
            while self.active.load(Ordering::SeqCst) == 0 {
                held = self.wake.wait(held).unwrap_or_else(|p| p.into_inner());
            }
            self.asleep.store(false, Ordering::SeqCst);
            idle = 0;
        }
    }
}

/// wasmtime has its own error type; loading code speaks anyhow.
pub(super) fn wasm_err(e: wasmtime::Error) -> anyhow::Error {
    anyhow::Error::from_boxed(e.into_boxed_dyn_error())
}

/// What a content hook's budget grows by per KiB it is handed, in microseconds (see
/// [`Limits::hook_budget_ms`] and docs/plugins.md, where the measured rates are).
pub const HOOK_US_PER_KIB: u64 = 100;

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
            memory_mib: e.memory_limit_mib(),
            allow_clock: e.allow_clock,
            allow_random: e.allow_random,
        }
    }

    /// The CPU budget of a content hook handed `payload` bytes: `deadline_ms` (the budget of
    /// `decide`) and [`HOOK_US_PER_KIB`] more per KiB, so that a plugin that reads every byte
    /// of what it is handed is not cut off by the size of an ordinary result.
    pub fn hook_budget_ms(&self, payload: usize) -> u64 {
        let kib = u64::try_from(payload.div_ceil(1024)).unwrap_or(u64::MAX);
        self.deadline_ms.saturating_add(kib.saturating_mul(HOOK_US_PER_KIB).div_ceil(1000))
    }

    pub(super) fn memory_bytes(&self) -> usize {
        usize::try_from(self.memory_mib.saturating_mul(1024 * 1024)).unwrap_or(usize::MAX)
    }

    /// Epoch ticks for a budget: one extra tick because the next tick may come at once.
    pub(super) fn ticks(ms: u64) -> u64 {
        ms.saturating_add(1)
    }
}

/// The content hash of a plugin file (SHA-256), used to skip unchanged files and as cache key.
pub fn content_hash(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Where precompiled plugins are kept: `$XDG_CACHE_HOME/switchyard/plugins`, else
/// `~/.cache/switchyard/plugins`. None when neither is known or the directory cannot be made.
fn cache_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = switchyard_os::dirs::cache_home()?;
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
pub(super) fn compile(rt: &Runtime, bytes: &[u8], hash: &[u8; 32]) -> anyhow::Result<Component> {
    let cached = cache_dir().map(|d| d.join(format!("{}-{}.cwasm", switchyard_core::ids::hex(hash), rt.compat)));
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
        return Err(LoadError::NotWasm(super::broken::first_bytes(bytes)).into());
    }
    if is_core_module(bytes) {
        return Err(LoadError::CoreModule.into());
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
