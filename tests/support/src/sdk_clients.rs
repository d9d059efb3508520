//! Command lines of the SDK client scripts (tests/python/client.py, tests/npm/client.mjs) aimed at
//! a server command over stdio or at a remote server's URL, for tests that compare the transcript
//! a client gets directly over HTTP with the one it gets through `switchyard run --url`. Run them
//! with `transcript::run`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::http_servers::RemoteTransport;
use super::python_venv::{python_dir, venv_python};

/// What a client script connects to.
#[derive(Clone, Debug)]
pub enum ClientTarget {
    /// A server command, started by the client and spoken to over stdio (e.g. `switchyard run …`).
    Command(Vec<String>),
    /// A remote server: its endpoint URL (/mcp or /sse), transport, and `Name: value` headers sent
    /// on every request.
    Url { url: String, transport: RemoteTransport, headers: Vec<String> },
}

impl ClientTarget {
    /// A remote server without extra headers.
    pub fn url(url: impl Into<String>, transport: RemoteTransport) -> ClientTarget {
        ClientTarget::Url { url: url.into(), transport, headers: Vec::new() }
    }
}

impl ClientTarget {
    /// The SDK clients' way of naming their server: `-- COMMAND…` or `--url URL --transport T
    /// [--header H]…`.
    fn add_args(&self, cmd: &mut Command) {
        match self {
            ClientTarget::Command(argv) => {
                cmd.arg("--").args(argv);
            }
            ClientTarget::Url { url, transport, headers } => {
                cmd.args(["--url", url, "--transport", transport.arg()]);
                for h in headers {
                    cmd.args(["--header", h]);
                }
            }
        }
    }
}

/// `python client.py MODE CALLS (-- COMMAND… | --url URL --transport T [--header H]…)` in the
/// SDK's virtualenv. MODE: `auto`, `legacy` or a 2026 version (see client.py); CALLS: a JSON list
/// of `[tool, arguments]` pairs.
pub fn python_client(mode: &str, calls: &Value, target: &ClientTarget) -> Command {
    let mut cmd = Command::new(venv_python());
    cmd.arg(python_dir().join("client.py")).arg(mode).arg(calls.to_string());
    target.add_args(&mut cmd);
    piped(cmd)
}

/// `node client.mjs SCENARIO (-- COMMAND… | --url URL --transport T [--header H]…)`; call
/// `npm_setup::ensure_npm` first. Over a URL the `everything` and `fixture-cancel` scenarios work
/// (`filesystem` needs its server's command line).
pub fn node_client(scenario: &str, target: &ClientTarget) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(npm_dir().join("client.mjs")).arg(scenario).current_dir(npm_dir());
    target.add_args(&mut cmd);
    piped(cmd)
}

fn npm_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("two levels below the repository")
        .join("tests")
        .join("npm")
}

/// Stdin closed, stdout (the transcript) and stderr piped, and a router behind the client logging
/// at info unless the test run says otherwise.
fn piped(mut cmd: Command) -> Command {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "info");
    }
    cmd
}
