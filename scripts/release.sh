#!/usr/bin/env bash
# Builds switchyard's release into target/dist: for each target an archive (the binary, LICENSE
# and a short README; .zip for Windows), SHA256SUMS, install.sh and install.ps1, and the npm
# packages (switchyard-mcp, whose `switchyard` command runs the binary of the platform package npm
# installed beside it, and one package per platform). `--publish` then publishes what is there:
# the one step that needs credentials, for the person who holds them.
#
#   scripts/release.sh [--base-url URL]            every target, built here (release profile)
#   scripts/release.sh --target T [--binary FILE]  one target; FILE: a binary already built for T
#   scripts/release.sh --publish [--upload CMD]    publishes target/dist, built before
#
# --base-url URL  where the archives will be downloadable from (the directory that holds them);
#                 install.sh and install.ps1 download from there unless given --from
# --out DIR       instead of target/dist
# --publish       npm publish of each platform package, then of switchyard-mcp (you must be
#                 logged in: `npm login`, or NPM_TOKEN in ~/.npmrc); versions already on the
#                 registry are skipped, so a publish that stopped half-way can be run again. Then
#                 `CMD FILE...` uploads the archives, SHA256SUMS and install scripts to where
#                 --base-url said they would be, e.g. --upload 'gh release upload v0.1.0'.
#
# Building: Linux with cargo-zigbuild against glibc 2.28 (so the binary runs on distributions
# from 2018 on), macOS with cargo-zigbuild and the framework stubs of scripts/macos_stubs.py,
# Windows with MinGW-w64: what scripts/cross.sh installs. The tests package a debug binary with
# --binary instead (tests/e2e/release.rs).
set -euo pipefail
# `&` in a ${var//pattern/replacement} is the replacement text itself, not the matched text.
shopt -u patsub_replacement 2>/dev/null || true
# Paths given on the command line are relative to where it was run.
here=$PWD
cd "$(dirname "$0")/.."

say() { echo "release: $*" >&2; }
die() { say "$*"; exit 1; }

# Rust target, npm os, npm cpu, archive format.
TARGETS=(
  "x86_64-unknown-linux-gnu linux x64 tar.gz"
  "aarch64-unknown-linux-gnu linux arm64 tar.gz"
  "aarch64-apple-darwin darwin arm64 tar.gz"
  "x86_64-apple-darwin darwin x64 tar.gz"
  "x86_64-pc-windows-gnu win32 x64 zip"
)
NPM_MAIN=switchyard-mcp

targets=()
binary=""
base_url=""
out=""
publish=0
upload=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) targets+=("${2:?--target needs a Rust target}"); shift 2 ;;
    --binary) binary=${2:?--binary needs a file}; shift 2 ;;
    --base-url) base_url=${2:?--base-url needs a URL}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --publish) publish=1; shift ;;
    --upload) upload=${2:?--upload needs a command}; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see scripts/release.sh --help)" ;;
  esac
done

# $1 as an absolute path (relative ones are to where this script was run).
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; }
out=$(absolute "${out:-$PWD/target/dist}")
[ -z "$binary" ] || binary=$(absolute "$binary")

# The version, from the manifests themselves: packaging a binary built elsewhere (--binary)
# needs no Rust here.
version=$(python3 - <<'PY'
try:
    import tomllib

    def table(path, name):
        t = tomllib.load(open(path, "rb"))
        for key in name.split("."):
            t = t[key]
        return t
except ImportError:  # Python 3.10 (which the tests accept) has no tomllib: the plain keys of [name]
    import re

    def table(path, name):
        text = open(path, encoding="utf-8").read()
        body = re.search(r"^\[" + re.escape(name) + r"\]$(.*?)(?=^\[|\Z)", text, re.M | re.S).group(1)
        return {k: v.strip().strip('"') for k, v in re.findall(r"^(\w+)\s*=\s*(.+)$", body, re.M)}

crate = table("crates/switchyard/Cargo.toml", "package").get("version")
if not isinstance(crate, str):  # `version.workspace = true`
    crate = table("Cargo.toml", "workspace.package")["version"]
print(crate)
PY
) || die "cannot read switchyard's version from crates/switchyard/Cargo.toml and Cargo.toml"
# Written into the install scripts inside single quotes (sh and PowerShell alike).
case "$base_url" in *"'"*) die "--base-url must not hold a single quote: $base_url" ;; esac

# The row of TARGETS for a Rust target.
row() {
  local r
  for r in "${TARGETS[@]}"; do
    if [ "${r%% *}" = "$1" ]; then echo "$r"; return; fi
  done
  die "$1 is not a release target (these are: $(for r in "${TARGETS[@]}"; do printf '%s ' "${r%% *}"; done))"
}

publish_dist() {
  [ -f "$out/SHA256SUMS" ] || die "$out holds no release: run scripts/release.sh (without --publish) first"
  local r missing=()
  for r in "${TARGETS[@]}"; do
    set -- $r
    [ -d "$out/npm/$NPM_MAIN-$2-$3" ] || missing+=("$1")
  done
  # switchyard-mcp names every platform package: publishing it without them leaves users of the
  # missing platforms with a package that cannot install its binary.
  [ ${#missing[@]} = 0 ] || die "$out lacks the targets ${missing[*]}: build them all (scripts/release.sh) before publishing"
  npm whoami >/dev/null 2>&1 || die "npm is not logged in: run \`npm login\` (or put an automation token in ~/.npmrc) and run this again"
  local dir name
  for dir in "$out"/npm/$NPM_MAIN-*/ "$out/npm/$NPM_MAIN/"; do
    name=$(basename "$dir")
    if npm view "$name@$version" version >/dev/null 2>&1; then
      say "$name@$version is on the registry already: skipped"
    else
      say "npm publish $name@$version..."
      npm publish "$dir" --access public
    fi
  done
  local files=("$out"/*.tar.gz "$out"/*.zip "$out/SHA256SUMS" "$out/install.sh" "$out/install.ps1")
  if [ -n "$upload" ]; then
    say "uploading ${#files[@]} files: $upload ..."
    # Word-split on purpose: CMD is a command line with its arguments.
    # shellcheck disable=SC2086
    $upload "${files[@]}"
  else
    say "the npm packages are published; the archives are not uploaded (no --upload): put ${files[*]##*/} where install.sh downloads from"
  fi
}

if [ "$publish" = 1 ]; then
  publish_dist
  exit 0
fi

if [ ${#targets[@]} = 0 ]; then
  [ -z "$binary" ] || die "--binary needs the --target it was built for"
  for r in "${TARGETS[@]}"; do targets+=("${r%% *}"); done
fi
[ -z "$binary" ] || [ ${#targets[@]} = 1 ] || die "--binary packages one target: give exactly one --target"
for t in "${targets[@]}"; do row "$t" >/dev/null; done
command -v tar >/dev/null || die "tar is needed to make the archives"

# Builds the release binary for target $1 and prints its path.
build() {
  local target=$1 bin=switchyard
  case "$target" in
    *-windows-*) bin=switchyard.exe ;;
  esac
  case "$target" in
    *-linux-gnu)
      command -v cargo-zigbuild >/dev/null || die "cargo-zigbuild is needed for $target (bash scripts/cross.sh installs it)"
      rustup target add "$target" >/dev/null
      say "building $target (glibc 2.28, release profile; long: link-time optimisation)..."
      cargo-zigbuild build -p switchyard --bin switchyard --release --locked --target "$target.2.28" >&2 ;;
    *-apple-darwin)
      command -v cargo-zigbuild >/dev/null || die "cargo-zigbuild is needed for $target (bash scripts/cross.sh installs it)"
      rustup target add "$target" >/dev/null
      local stubs="$PWD/target/macos-frameworks" log attempt
      mkdir -p "$stubs"
      log=$(mktemp)
      say "building $target (release profile; long: link-time optimisation)..."
      for attempt in 1 2 3 4; do
        if cargo-zigbuild rustc -p switchyard --bin switchyard --release --locked --target "$target" \
            -- -C "link-arg=-F$stubs" >"$log" 2>&1; then
          break
        fi
        if [ "$attempt" = 4 ] || ! python3 scripts/macos_stubs.py "$stubs" "$log"; then
          tail -n 40 "$log" >&2
          rm -f "$log"
          die "the $target build failed"
        fi
      done
      rm -f "$log" ;;
    *-windows-gnu)
      command -v x86_64-w64-mingw32-gcc >/dev/null || die "MinGW-w64 is needed for $target (bash scripts/cross.sh installs it)"
      rustup target add "$target" >/dev/null
      say "building $target (release profile; long: link-time optimisation)..."
      cargo build -p switchyard --bin switchyard --release --locked --target "$target" >&2 ;;
  esac
  echo "target/$target/release/$bin"
}

# Fills a template: @NAME@ -> value for each NAME=value given.
fill() {
  local file=$1 pair
  shift
  local text
  text=$(cat "$file")
  for pair in "$@"; do
    text=${text//@${pair%%=*}@/${pair#*=}}
  done
  printf '%s\n' "$text"
}

mkdir -p "$out"
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
for target in "${targets[@]}"; do
  set -- $(row "$target")
  os=$2 cpu=$3 format=$4
  file=switchyard
  [ "$os" != win32 ] || file=switchyard.exe
  bin=${binary:-$(build "$target")}
  [ -f "$bin" ] || die "$bin does not exist"

  name=switchyard-$version-$target
  rm -rf "${staging:?}/$name"
  mkdir -p "$staging/$name"
  cp "$bin" "$staging/$name/$file"
  chmod 755 "$staging/$name/$file"
  cp LICENSE "$staging/$name/LICENSE"
  fill packaging/archive/README.md VERSION="$version" TARGET="$target" BIN="$file" >"$staging/$name/README.md"
  rm -f "$out/$name.tar.gz" "$out/$name.zip"
  if [ "$format" = zip ]; then
    command -v zip >/dev/null || die "zip is needed to make the Windows archive"
    (cd "$staging" && zip -qrX "$out/$name.zip" "$name")
  else
    # Owner and times fixed, names sorted: the same binary gives the same archive.
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$staging" -czf "$out/$name.tar.gz" "$name"
  fi
  say "$out/$name.$format"

  pkg=$NPM_MAIN-$os-$cpu
  dir=$out/npm/$pkg
  rm -rf "$dir"
  mkdir -p "$dir/bin"
  cp "$staging/$name/$file" "$dir/bin/$file"
  cp LICENSE "$dir/LICENSE"
  libc=""
  [ "$os" != linux ] || libc=$'\n  "libc": ["glibc"],'
  fill packaging/npm/platform/package.json NAME="$pkg" VERSION="$version" OS="$os" CPU="$cpu" LIBC="$libc" >"$dir/package.json"
  fill packaging/npm/platform/README.md NAME="$pkg" VERSION="$version" OS="$os" CPU="$cpu" TARGET="$target" >"$dir/README.md"
  say "$dir"
done

# The main npm package names every platform's package, whichever were built in this run.
optional="{"
packages="{"
sep=""
for r in "${TARGETS[@]}"; do
  set -- $r
  optional+="$sep"$'\n'"    \"$NPM_MAIN-$2-$3\": \"$version\""
  packages+="$sep"$'\n'"  '$2 $3': '$NPM_MAIN-$2-$3'"
  sep=","
done
optional+=$'\n  }'
packages+=$'\n}'
main=$out/npm/$NPM_MAIN
rm -rf "$main"
mkdir -p "$main/bin"
fill packaging/npm/switchyard-mcp/package.json VERSION="$version" OPTIONAL_DEPENDENCIES="$optional" >"$main/package.json"
fill packaging/npm/switchyard-mcp/bin/switchyard.js VERSION="$version" PACKAGES="$packages" >"$main/bin/switchyard.js"
chmod 755 "$main/bin/switchyard.js"
cp packaging/npm/switchyard-mcp/README.md "$main/README.md"
cp LICENSE "$main/LICENSE"
say "$main"

fill packaging/install/install.sh VERSION="$version" BASE_URL="$base_url" >"$out/install.sh"
fill packaging/install/install.ps1 VERSION="$version" BASE_URL="$base_url" >"$out/install.ps1"
chmod 755 "$out/install.sh"
# Every archive in the directory, this run's and an earlier run's for other targets.
(
  cd "$out"
  shopt -s nullglob
  archives=(*.tar.gz *.zip)
  rm -f SHA256SUMS
  sha256sum -- "${archives[@]}" >SHA256SUMS
)
say "$out/SHA256SUMS, $out/install.sh, $out/install.ps1 (version $version)"
