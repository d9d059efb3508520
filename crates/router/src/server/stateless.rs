//! What serves a server's requests of the 2026-07-28 era, apart from those of the initialize era.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

use crate::pool::Pool;
use crate::upstream::Instance;

/// A server's state for requests of the 2026-07-28 era.
pub(super) struct Stateless {
    /// Instances for requests of that era, one pool per configured pool (none kept running). A
    /// server of both eras fixes each connection's era by its first request (the Python SDK
    /// does), so an instance switchyard initialised cannot serve them, nor the other way round.
    /// They are never initialised: each request carries its own envelope.
    pub(super) pools: BTreeMap<String, Arc<Pool>>,
    /// The protocol version the latest request of that era carried (for health probes).
    pub(super) version: Mutex<String>,
    /// The server answered server/discover with -32601: it is of the initialize era only.
    pub(super) discover_refused: AtomicBool,
    /// The instance that answered so: started and of the initialize era, it serves that era's
    /// next start, so a client that falls back does not wait for the server to start twice.
    pub(super) spare: Mutex<Option<Arc<Instance>>>,
    /// That answer's `error` object as the server sent it, given to clients' probes as theirs.
    pub(super) discover_refusal: OnceLock<String>,
}

impl Stateless {
    pub(super) fn new(pools: BTreeMap<String, Arc<Pool>>) -> Stateless {
        Stateless {
            pools,
            version: Mutex::new(switchyard_mcp::version::LATEST_STATELESS.to_string()),
            discover_refused: AtomicBool::new(false),
            spare: Mutex::new(None),
            discover_refusal: OnceLock::new(),
        }
    }
}
