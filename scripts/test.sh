#!/usr/bin/env bash
# Runs every test of switchyard on a fresh machine: installs what the build needs, then cargo test.
# The npm fixture servers and the Python SDK virtualenv are made by the tests' own setup
# (npm ci --ignore-scripts; python3 -m venv + pip install under target/tmp).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v node >/dev/null || { echo "node is required (the tests run real MCP servers from npm)" >&2; exit 1; }
command -v npm >/dev/null || { echo "npm is required (the tests install their MCP servers with npm ci)" >&2; exit 1; }
python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null || {
  echo "python3 >= 3.10 with venv and ensurepip is required (the tests run the Python MCP SDK in a virtualenv;" \
       "on Debian or Ubuntu: apt-get install python3-venv)" >&2; exit 1; }
# The status page test drives headless Chromium (Debian's package): installed here when this
# script may (root with apt-get, as on CI); otherwise it is named as missing.
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing chromium for the status page test (apt-get; a minute or two)..." >&2
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
  else
    echo "chromium is required (the status page test runs it headless; on Debian or Ubuntu:" \
         "apt-get install --no-install-recommends chromium)" >&2; exit 1
  fi
fi
# The build and its tests take tens of GB; say what there is, so a full disk is seen at once.
echo "disk: $(df -Ph . | awk 'NR == 2 { print $4 }') free where the build goes" >&2
# Plugins are built from source for WebAssembly by crates/policy/build.rs.
rustup target add wasm32-wasip2 >/dev/null
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Style first: it takes seconds and a failure here is the cheapest to fix.
echo "checking formatting (cargo fmt --check)..." >&2
cargo fmt --all --check
(cd examples/plugins && cargo fmt --all --check)
echo "linting (cargo clippy, warnings denied; the first run builds the dependencies)..." >&2
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
(cd examples/plugins && CARGO_TARGET_DIR=../../target/plugins-lint cargo clippy --workspace --all-targets --locked --target wasm32-wasip2 -- -D warnings)

# macOS and Windows: built, linked and linted with warnings denied (SWITCHYARD_NATIVE_ONLY=1 skips
# this and the Wine tests below, for a quick local run).
if [ "${SWITCHYARD_NATIVE_ONLY:-0}" != 1 ]; then
  echo "building and linting for macOS and Windows (scripts/cross.sh; the first run takes minutes)..." >&2
  bash scripts/cross.sh
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# --all-features turns on `interop`: the suites that need Node.js, Python and Chromium.
# --no-fail-fast: every test binary runs, so one failure does not hide the others.
cargo test --workspace --all-features --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# The example plugins' own logic (secret patterns, path checks, cuts) as plain Rust on the host.
(cd examples/plugins && CARGO_TARGET_DIR=../../target/plugins-test \
  cargo test --locked -p plugin-util -p redact -p path-guard -p result-cap) 2>&1 | tee -a "$log" || status=$?
if [ "${SWITCHYARD_NATIVE_ONLY:-0}" != 1 ]; then
  echo "Windows tests under Wine (scripts/windows.sh)..." >&2
  bash scripts/windows.sh 2>&1 | tee -a "$log" || status=$?
fi
# One closing line for the whole run: cargo prints a summary per test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
