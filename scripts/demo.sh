#!/usr/bin/env bash
# Builds switchyard (with its example plugins, which need the wasm32-wasip2 target) and runs
# `switchyard demo`: no network, config or setup needed beyond a Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "demo: adding the wasm32-wasip2 Rust target (the example plugins are built for it)" >&2
    rustup target add wasm32-wasip2 >/dev/null
fi
if [ ! -x target/release/switchyard ]; then
    echo "demo: building switchyard in release mode; the first build takes about 10 minutes on 2 cores" >&2
    echo "demo: (about 2 GiB of memory and 5 GB of disk; later builds take seconds)" >&2
fi
# Not --quiet: a newcomer should see the build making progress.
cargo build --release --locked -p switchyard
exec target/release/switchyard demo
