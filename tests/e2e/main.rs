//! End-to-end tests: the real `switchyard` binary against the fixture server, real MCP servers
//! and real clients, one test binary with a module per topic. What they share is the
//! switchyard-testkit crate (tests/support); the suites that need Node.js, Python or Chromium
//! are in [`interop`], behind the `interop` feature.

// Linux and macOS: the suite drives routers and servers with Unix sockets and signals (Windows
// has its own subset, tests/windows).
#![cfg(unix)]
// Helpers some of the gated suites alone use.
#![cfg_attr(not(feature = "interop"), allow(dead_code, unused_imports))]

mod npm_setup;
mod setup;
mod transcript;

mod audit;
mod audit_refused;
mod budgets;
mod clients;
mod config;
mod daemon;
mod demo;
mod engine;
mod faults;
mod fixture;
mod groups;
mod http_front;
mod http_hostile;
mod http_load;
mod idle;
mod live_settings;
mod plugins;
mod plugins_live;
mod policy_v2;
mod policy_v3;
mod protocol;
mod resilience;
mod routing;
mod run;
mod sharing;
mod status_calls;

#[cfg(feature = "interop")]
mod interop;
