#!/usr/bin/env bash
# Runs switchyard's Windows tests under Wine: the unit tests of the crates whose code differs
# on Windows (the OS layer, the config paths, client configs, OAuth storage) and the Windows
# end-to-end subset (tests/windows) against the real switchyard.exe. What Wine cannot show is
# listed in docs/platforms.md. Installs Wine and MinGW-w64 when it may.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "windows: $*" >&2; }

source scripts/apt.sh
need_apt x86_64-w64-mingw32-gcc gcc-mingw-w64-x86-64
need_apt wine wine wine64
rustup target add x86_64-pc-windows-gnu >/dev/null

# A prefix of the tests' own, made once per target directory.
export WINEPREFIX="$PWD/target/wine-prefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
if [ ! -f "$WINEPREFIX/system.reg" ]; then
  say "making a Wine prefix in $WINEPREFIX..."
  mkdir -p "$WINEPREFIX"
  wineboot --init >/dev/null 2>&1 || true
  wineserver -w || true
fi
# Wine 8 has no bcryptprimitives.dll (ProcessPrng), which every Rust program needs: a stand-in.
dll="$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
if [ ! -f "$dll" ]; then
  x86_64-w64-mingw32-gcc -O2 -shared -o "$dll" tests/windows/processprng.c -ladvapi32
fi

export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
say "unit tests under Wine..."
cargo test --locked --no-fail-fast --target x86_64-pc-windows-gnu -p switchyard-os -p switchyard-config -p switchyard-clients \
  -p switchyard-oauth "$@"
say "end-to-end tests under Wine (switchyard.exe run, daemon, connect, stop, wrap)..."
cargo test --locked --target x86_64-pc-windows-gnu -p switchyard --test windows -- --test-threads=1 "$@"
wineserver -k 2>/dev/null || true
