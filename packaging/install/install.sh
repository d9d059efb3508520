#!/bin/sh
# Installs switchyard @VERSION@ on Linux or macOS: picks this machine's archive, checks it
# against SHA256SUMS and puts `switchyard` in a directory of the user's (no root needed).
#
#   sh install.sh [--from DIR_OR_URL] [--to DIR]
#
# (`sh install.sh --help` says what the options do.)
set -eu

VERSION='@VERSION@'
FROM=${SWITCHYARD_INSTALL_FROM:-'@BASE_URL@'}
TO=${SWITCHYARD_INSTALL_DIR:-}

usage() {
  cat <<USAGE
sh install.sh [--from DIR_OR_URL] [--to DIR]: installs switchyard $VERSION
  --from  where the release's archives and SHA256SUMS are, a URL or a local directory
          (or SWITCHYARD_INSTALL_FROM; default: ${FROM:-none, so it must be given})
  --to    the directory to put switchyard in (or SWITCHYARD_INSTALL_DIR; default
          \$XDG_BIN_HOME, else ~/.local/bin)
USAGE
}
say() { printf 'switchyard install: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || die "--from needs a URL or a directory"; FROM=$2; shift 2 ;;
    --from=*) FROM=${1#--from=}; shift ;;
    --to) [ $# -ge 2 ] || die "--to needs a directory"; TO=$2; shift 2 ;;
    --to=*) TO=${1#--to=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument $1 (--from DIR_OR_URL, --to DIR)" ;;
  esac
done
[ -n "$FROM" ] || die "this install script names no download address: give --from with the URL or directory that holds the release's archives and SHA256SUMS"
if [ -z "$TO" ]; then
  [ -n "${HOME:-}" ] || die "HOME is not set: give --to DIR"
  TO=${XDG_BIN_HOME:-$HOME/.local/bin}
fi

os=$(uname -s)
arch=$(uname -m)
case "$arch" in
  x86_64|amd64) arch=x86_64 ;;
  aarch64|arm64) arch=aarch64 ;;
  *) die "no prebuilt switchyard for the $arch processor (there are for x86_64 and aarch64): build it from source with Rust" ;;
esac
case "$os" in
  Linux)
    # The Linux binaries link glibc; on musl (Alpine) they do not start.
    if ! { command -v getconf >/dev/null && getconf GNU_LIBC_VERSION >/dev/null 2>&1; } && ldd --version 2>&1 | grep -qi musl; then
      die "the Linux binaries are built for glibc and this system uses musl: build switchyard from source with Rust"
    fi
    target=$arch-unknown-linux-gnu ;;
  Darwin)
    # An x86_64 shell under Rosetta on Apple silicon still gets the native binary.
    if [ "$arch" = x86_64 ] && [ "$(sysctl -n hw.optional.arm64 2>/dev/null || echo 0)" = 1 ]; then
      arch=aarch64
    fi
    target=$arch-apple-darwin ;;
  *) die "no prebuilt switchyard for $os here (Linux and macOS; on Windows run install.ps1)" ;;
esac
name=switchyard-$VERSION-$target
archive=$name.tar.gz

tmp=$(mktemp -d 2>/dev/null || mktemp -d -t switchyard)
trap 'rm -rf "$tmp"' EXIT INT TERM

# Copies FILE from the release (URL or directory) into $tmp.
fetch() {
  case "$FROM" in
    http://*|https://*)
      if command -v curl >/dev/null; then
        curl --proto '=https,http' -fsSL "${FROM%/}/$1" -o "$tmp/$1" || die "cannot download ${FROM%/}/$1"
      elif command -v wget >/dev/null; then
        wget -q -O "$tmp/$1" "${FROM%/}/$1" || die "cannot download ${FROM%/}/$1"
      else
        die "neither curl nor wget is installed, and one is needed to download ${FROM%/}/$1"
      fi ;;
    file://*) cp "${FROM#file://}/$1" "$tmp/$1" 2>/dev/null || die "${FROM#file://}/$1 cannot be read" ;;
    *) cp "$FROM/$1" "$tmp/$1" 2>/dev/null || die "$FROM/$1 cannot be read" ;;
  esac
}

sha256() {
  if command -v sha256sum >/dev/null; then
    sha256sum "$1" | cut -d ' ' -f 1
  elif command -v shasum >/dev/null; then
    shasum -a 256 "$1" | cut -d ' ' -f 1
  else
    die "neither sha256sum nor shasum is installed, and one is needed to check the download"
  fi
}

say "switchyard $VERSION for $target, from $FROM"
fetch SHA256SUMS
fetch "$archive"
want=$(awk -v f="$archive" '$2 == f || $2 == "*" f { print $1 }' "$tmp/SHA256SUMS")
[ -n "$want" ] || die "SHA256SUMS has no line for $archive: the release is incomplete; nothing was installed"
got=$(sha256 "$tmp/$archive")
if [ "$got" != "$want" ]; then
  die "$archive does not match its checksum in SHA256SUMS (expected $want, got $got): the download is damaged or was tampered with; nothing was installed"
fi

tar -xzf "$tmp/$archive" -C "$tmp" || die "cannot unpack $archive"
[ -f "$tmp/$name/switchyard" ] || die "$archive holds no $name/switchyard; nothing was installed"
mkdir -p "$TO" || die "cannot create $TO: give another directory with --to"
# Beside the target first, then renamed over it: a running switchyard (the daemon) keeps its
# file, and no one ever runs a half-written one.
cp "$tmp/$name/switchyard" "$TO/.switchyard.new.$$" || die "cannot write into $TO: give another directory with --to"
chmod 755 "$TO/.switchyard.new.$$"
mv -f "$TO/.switchyard.new.$$" "$TO/switchyard" || { rm -f "$TO/.switchyard.new.$$"; die "cannot replace $TO/switchyard"; }
say "installed $TO/switchyard ($("$TO/switchyard" --version 2>/dev/null || echo "version $VERSION"))"

case ":${PATH:-}:" in
  *":$TO:"*|*":${TO%/}:"*) say "$TO is on PATH: run \`switchyard --help\`" ;;
  *)
    case "${SHELL:-}" in
      */zsh) rc='~/.zshrc' ;;
      */bash) rc='~/.bashrc' ;;
      */fish) rc= ;;
      *) rc='~/.profile' ;;
    esac
    if [ -n "$rc" ]; then
      say "$TO is not on PATH: add it with   echo 'export PATH=\"$TO:\$PATH\"' >> $rc   and open a new shell (or run switchyard as $TO/switchyard)"
    else
      say "$TO is not on PATH: add it with   fish_add_path $TO   (or run switchyard as $TO/switchyard)"
    fi ;;
esac
