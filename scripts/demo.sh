#!/usr/bin/env bash
# Builds switchyard (with its example plugins, which need the wasm32-wasip2 target) and runs
# `switchyard demo`: no network, config or setup needed beyond a Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2 >/dev/null
fi
exec cargo run --quiet --release -p switchyard -- demo
