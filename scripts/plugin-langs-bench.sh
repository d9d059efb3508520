#!/usr/bin/env bash
# Policy plugins by language (BENCHMARKS.md): builds the template of each language (one example
# rule) with `switchyard plugin build`, then measures each with `plugin check --bench` in one run:
# .wasm size, the start of a fresh instance, and decide per call (p50, p99).
# Needs the toolchains the interop tests install under target/tmp/plugin-langs (run
# `cargo test --all-features --test e2e plugin_langs` once) and a built binary
# (SWITCHYARD_BIN, default target/release/switchyard).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SWITCHYARD_BIN:-target/release/switchyard}
bin=$(realpath "$bin")
# The tests' setup lock (tests/support/src/setup_lock.rs), held shared while the toolchains are
# used: a test run that must reinstall them (a changed pin) waits for this script to end, and
# this script waits for a run that is installing them.
mkdir -p target/tmp
exec 9>>target/tmp/switchyard-setup.lock
flock -s -n 9 || { echo "waiting for a test run that installs the toolchains..." >&2; flock -s 9; }
for tool in venv/bin/componentize-py js/node_modules/.bin/jco; do
  [ -x "target/tmp/plugin-langs/$tool" ] || {
    echo "no toolchains in target/tmp/plugin-langs: run \`cargo test --all-features --test e2e plugin_langs\` once" >&2
    exit 1
  }
done
tools=$(realpath target/tmp/plugin-langs)
calls=${CALLS:-5000}
export PATH="$tools/venv/bin:$tools/js/node_modules/.bin:$PATH"
export CARGO_TARGET_DIR="$tools/rust-target"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| language | .wasm size | fresh instance (instantiate + init) | decide p50 | decide p99 |"
echo "| --- | --- | --- | --- | --- |"
for lang in rust python js; do
  "$bin" plugin new "$work/bench-$lang" --lang "$lang" >/dev/null
  "$bin" plugin build "$work/bench-$lang" >/dev/null 2>"$work/build-$lang.log" || { cat "$work/build-$lang.log" >&2; exit 1; }
  wasm="$work/bench-$lang/bench-$lang.wasm"
  # Limits that measure rather than cut: one preempted call must not end the run, and
  # StarlingMonkey (JavaScript) grows past the default 16 MiB over thousands of calls.
  printf '[[plugins]]\nfile = "bench-%s.wasm"\ndeadline_ms = 1000\nmemory_mib = 64\n' "$lang" >"$work/$lang.toml"
  # Twice: the first run compiles (and caches) the component; the second measures.
  "$bin" plugin check "$wasm" --config-file "$work/$lang.toml" >/dev/null
  out=$("$bin" plugin check "$wasm" --config-file "$work/$lang.toml" --bench "$calls")
  size=$(stat -c %s "$wasm")
  fresh=$(sed -n 's/^instance: .* in \([0-9]*\) µs$/\1/p' <<<"$out")
  p50=$(sed -n 's/^bench: .*p50 \([0-9.]*\) µs.*$/\1/p' <<<"$out")
  p99=$(sed -n 's/^bench: .*p99 \([0-9.]*\) µs$/\1/p' <<<"$out")
  printf '| %s | %s KB | %s µs | %s µs | %s µs |\n' "$lang" "$((size / 1000))" "$fresh" "$p50" "$p99"
done
