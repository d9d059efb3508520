//! Builds the example and fixture policy plugins (examples/plugins, wasm32-wasip2) for the host.
//!
//! The plugins are a separate cargo workspace, built by a nested `cargo build` into
//! `<target>/plugins-build`, then copied as `<name>.wasm` into `<target>/plugins/examples`
//! (the example plugins, also embedded in the binary) and `<target>/plugins/fixtures` (the
//! deliberately broken ones, for tests). Their directories reach the crate as
//! `SWITCHYARD_EXAMPLE_PLUGINS` and `SWITCHYARD_TEST_PLUGINS`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const WASM_TARGET: &str = "wasm32-wasip2";

/// (crate directory under examples/plugins, artifact stem cargo writes, file name we publish)
const EXAMPLES: &[(&str, &str, &str)] = &[
    ("hints", "hints", "hints.wasm"),
    ("fs-keys", "fs_keys", "fs-keys.wasm"),
    ("timeouts", "timeouts", "timeouts.wasm"),
    ("guard", "guard", "guard.wasm"),
    ("template", "template", "template.wasm"),
    ("tool-filter", "tool_filter", "tool-filter.wasm"),
    ("rate-limit", "rate_limit", "rate-limit.wasm"),
    ("placement", "placement", "placement.wasm"),
    ("redact", "redact", "redact.wasm"),
    ("path-guard", "path_guard", "path-guard.wasm"),
    ("result-cap", "result_cap", "result-cap.wasm"),
];
const FIXTURES: &[(&str, &str, &str)] = &[
    ("broken/spin", "broken_spin", "spin.wasm"),
    ("broken/noisy", "broken_noisy", "noisy.wasm"),
    ("broken/trap", "broken_trap", "trap.wasm"),
    ("broken/wrong-interface", "broken_wrong_interface", "wrong-interface.wasm"),
    ("probe/caller", "probe_caller", "probe-caller.wasm"),
    ("probe/hooks", "probe_hooks", "hook-probe.wasm"),
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let repo = manifest_dir.ancestors().nth(2).expect("crates/policy lives inside the repository").to_path_buf();
    let plugins_src = repo.join("examples/plugins");

    println!("cargo:rerun-if-changed={}", repo.join("wit").display());
    println!("cargo:rerun-if-changed={}", plugins_src.join("Cargo.toml").display());
    println!("cargo:rerun-if-changed={}", plugins_src.join("Cargo.lock").display());
    for dir in ["util"].iter().chain(EXAMPLES.iter().chain(FIXTURES).map(|(d, _, _)| d)) {
        println!("cargo:rerun-if-changed={}", plugins_src.join(dir).join("Cargo.toml").display());
        println!("cargo:rerun-if-changed={}", plugins_src.join(dir).join("src").display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");

    check_wasm_target();

    let target_dir = workspace_target_dir();
    let build_dir = target_dir.join("plugins-build");
    build_plugins(&plugins_src, &build_dir);

    let artifacts = build_dir.join(WASM_TARGET).join("release");
    let examples = target_dir.join("plugins/examples");
    let fixtures = target_dir.join("plugins/fixtures");
    publish(&artifacts, &examples, EXAMPLES);
    publish(&artifacts, &fixtures, FIXTURES);
    println!("cargo:rustc-env=SWITCHYARD_EXAMPLE_PLUGINS={}", examples.display());
    println!("cargo:rustc-env=SWITCHYARD_TEST_PLUGINS={}", fixtures.display());
}

/// The outer workspace's target directory: `CARGO_TARGET_DIR` when set, else the ancestor of
/// `OUT_DIR` that cargo marked with `CACHEDIR.TAG` (works with and without `--target`).
fn workspace_target_dir() -> PathBuf {
    if let Some(dir) = env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        if dir.is_absolute() {
            return dir;
        }
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    out_dir
        .ancestors()
        .find(|p| p.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out_dir.join("target"))
}

fn check_wasm_target() {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(sysroot) = sysroot
        && !sysroot.join("lib/rustlib").join(WASM_TARGET).is_dir()
    {
        panic!(
            "\n\nswitchyard builds its example policy plugins for the `{WASM_TARGET}` target, \
                 which is not installed for {}.\nrun: rustup target add {WASM_TARGET}\n\n",
            sysroot.display()
        );
    }
}

fn build_plugins(src: &Path, build_dir: &Path) {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--locked", "--target", WASM_TARGET, "--manifest-path"])
        .arg(src.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(build_dir);
    // The outer cargo describes *this* crate's build in the environment (target, flags,
    // features, wrappers such as clippy-driver). None of that applies to the plugins, and
    // some of it (RUSTFLAGS for the host, CARGO_BUILD_TARGET) would break them.
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let keep = ["CARGO_HOME", "CARGO_NET_", "CARGO_HTTP_", "CARGO_REGISTRIES_", "CARGO_REGISTRY_", "CARGO_TERM_"]
            .iter()
            .any(|k| key.starts_with(k));
        if (key.starts_with("CARGO_") && !keep)
            || matches!(key, "RUSTFLAGS" | "RUSTC_WRAPPER" | "RUSTC_WORKSPACE_WRAPPER" | "TARGET" | "HOST" | "OUT_DIR")
        {
            cmd.env_remove(key);
        }
    }
    // Cargo reads a build script's stdout as directives: keep the nested build's output off it.
    cmd.stdout(std::process::Stdio::from(std::io::stderr()));
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run cargo for the plugins: {e}"));
    if !status.success() {
        panic!("building the policy plugins in {} failed ({status}); the cargo output above says why", src.display());
    }
}

fn publish(artifacts: &Path, to: &Path, list: &[(&str, &str, &str)]) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("cannot create {}: {e}", to.display()));
    for (_, stem, name) in list {
        let from = artifacts.join(format!("{stem}.wasm"));
        let dest = to.join(name);
        // Write beside and rename, so a test or a watcher never sees a half-copied file.
        let tmp = to.join(format!(".{name}.tmp"));
        std::fs::copy(&from, &tmp)
            .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", from.display(), tmp.display()));
        std::fs::rename(&tmp, &dest).unwrap_or_else(|e| panic!("cannot move {} into place: {e}", dest.display()));
    }
}
