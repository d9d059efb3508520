//! switchyard's shared vocabulary: what every layer above names and no layer below needs.
//!
//! Ids ([`ids`]), one exponential backoff ([`backoff`]), JSON-RPC framing and byte-range
//! rewriting ([`codec`]), a client's request read once ([`call`]), the policy's verdict on a
//! call ([`decision`]), the errors a call can end with ([`error`]), the log writer ([`logging`])
//! and the Prometheus metrics ([`metrics`]). No wasmtime, no HTTP.

#![forbid(unsafe_code)]

pub mod audit;
pub mod backoff;
pub mod call;
pub mod codec;
pub mod decision;
pub mod error;
pub mod ids;
pub mod logging;
pub mod metrics;
