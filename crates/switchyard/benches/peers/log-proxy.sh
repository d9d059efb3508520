#!/usr/bin/env bash
# A logging stdio pipe proxy, the kind people write to see what an MCP client and server say:
# every line in each direction is timestamped into LOGFILE and passed on. A benchmark peer.
# Usage: log-proxy.sh LOGFILE COMMAND [ARGS...]
set -u
log=${1:?usage: log-proxy.sh LOGFILE COMMAND [ARGS...]}
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkfifo "$dir/to-server" "$dir/from-server"

"$@" <"$dir/to-server" >"$dir/from-server" &
server=$!

# client -> server. A background job's stdin is /dev/null, so ours is handed over as fd 3.
exec 3<&0
(
    while IFS= read -r line <&3; do
        printf '%s C->S %s\n' "$(date +%H:%M:%S.%3N)" "$line" >>"$log"
        printf '%s\n' "$line"
    done >"$dir/to-server"
) &

# server -> client
while IFS= read -r line; do
    printf '%s S->C %s\n' "$(date +%H:%M:%S.%3N)" "$line" >>"$log"
    printf '%s\n' "$line"
done <"$dir/from-server"

wait "$server"
