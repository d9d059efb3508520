# Sourced by the test scripts: `need_apt CMD PACKAGE...` installs the Debian packages when the
# command CMD is missing (as root, with apt-get), or stops with what to install.
need_apt() {
  local cmd=$1
  shift
  command -v "$cmd" >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing $* (apt-get; a minute or two)..." >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  else
    echo "missing: $cmd (apt-get install --no-install-recommends $*)" >&2
    exit 1
  fi
}
