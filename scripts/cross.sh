#!/usr/bin/env bash
# Builds and lints switchyard for the OSes this machine cannot run natively: macOS (aarch64 and
# x86_64, linked with zig) and Windows (x86_64, MinGW-w64), with clippy's warnings denied for
# each, so code behind a cfg for another OS cannot rot. Installs what it needs when it may.
# Windows' tests then run under Wine: scripts/windows.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "cross: $*" >&2; }

source scripts/apt.sh
need_apt x86_64-w64-mingw32-gcc gcc-mingw-w64-x86-64
if ! command -v cargo-zigbuild >/dev/null || ! python3 -c 'import ziglang' 2>/dev/null; then
  say "installing zig and cargo-zigbuild (pip)..."
  python3 -m pip install -q ziglang==0.17.1 cargo-zigbuild==0.24.1
fi
# pip puts cargo-zigbuild in Python's scripts directory, which a pyenv or user install may not
# have on PATH yet.
PATH="$PATH:$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
command -v cargo-zigbuild >/dev/null || { say "cargo-zigbuild is not on PATH after pip install"; exit 1; }
rustup target add aarch64-apple-darwin x86_64-apple-darwin x86_64-pc-windows-gnu >/dev/null

# The crates that make up the product; the test kit and the Linux end-to-end suite are Linux's.
packages=(--workspace --exclude switchyard-testkit)

say "clippy for Windows (x86_64-pc-windows-gnu)..."
cargo clippy "${packages[@]}" --lib --bins --tests --locked --target x86_64-pc-windows-gnu -- -D warnings
for target in aarch64-apple-darwin x86_64-apple-darwin; do
  say "clippy for macOS ($target, C through zig)..."
  cargo-zigbuild clippy "${packages[@]}" --lib --bins --tests --locked --target "$target" -- -D warnings
done
# Linked against stubs of the system frameworks (Apple's SDK is in no registry): see
# scripts/macos_stubs.py. Only the binary's own link takes the -F flag, so nothing rebuilds.
stubs="$PWD/target/macos-frameworks"
mkdir -p "$stubs"
link_log=$(mktemp)
trap 'rm -f "$link_log"' EXIT
for target in aarch64-apple-darwin x86_64-apple-darwin; do
  say "building and linking the macOS binary ($target, zig)..."
  for attempt in 1 2 3 4; do
    if cargo-zigbuild rustc -p switchyard --bin switchyard --locked --target "$target" -- -C "link-arg=-F$stubs" \
        >"$link_log" 2>&1; then
      break
    fi
    if [ "$attempt" = 4 ] || ! python3 scripts/macos_stubs.py "$stubs" "$link_log"; then
      tail -n 40 "$link_log" >&2
      exit 1
    fi
  done
done
# The macOS builds prove that the code compiles, lints and links; nothing later runs them. A
# one-shot run (CI sets SWITCHYARD_LEAN=1) gives their ~11 GB back before the tests build.
if [ "${SWITCHYARD_LEAN:-0}" = 1 ]; then
  for target in aarch64-apple-darwin x86_64-apple-darwin; do
    if [ -x "target/$target/debug/switchyard" ]; then say "linked target/$target/debug/switchyard"; fi
    rm -rf "target/$target"
  done
fi
say "building the Windows binary..."
cargo build -p switchyard --bins --locked --target x86_64-pc-windows-gnu
for f in target/aarch64-apple-darwin/debug/switchyard target/x86_64-apple-darwin/debug/switchyard \
         target/x86_64-pc-windows-gnu/debug/switchyard.exe; do
  if [ -e "$f" ]; then say "built $f"; fi
done
