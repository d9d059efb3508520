//! Suites that need toolchains beyond Rust: real MCP servers and clients from npm (Node.js), the
//! Python MCP SDK in a virtualenv, the MCP conformance suite, headless Chromium, and the Python
//! and JavaScript plugin toolchains. Built with the `interop` feature, which scripts/test.sh
//! turns on.

mod client_clis;
mod conformance;
mod conformance_auth;
mod content_plugins;
mod desktop_commander;
mod groups;
mod npm;
mod plugin_langs;
mod profiles;
mod python;
mod real_oauth;
mod release;
mod remote;
mod remote_fixtures;
mod silent_links;
mod status_page;
mod tasks;
mod tasks_extension;
mod telemetry;
mod telemetry_edges;
mod wrap_group;
