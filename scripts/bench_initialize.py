#!/usr/bin/env python3
"""How long a client waits for `initialize` from a server that takes 5 s to start, directly and
through `switchyard connect`: cold (no daemon, nothing known), warm (the daemon runs the server),
cached (a daemon started anew, the server known from its last run). Baseline: the same server
with no start delay, directly. Prints a Markdown table (median of ROUNDS, milliseconds).

    python3 scripts/bench_initialize.py [path/to/switchyard] [rounds]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/debug/switchyard")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
DELAY_MS = 5000
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def initialize_ms(argv, env):
    """Starts argv, sends initialize, returns ms to its response; then closes the client."""
    started = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    p.stdin.write((json.dumps(INIT) + "\n").encode())
    p.stdin.flush()
    line = p.stdout.readline()
    took = (time.monotonic() - started) * 1000
    if b'"result"' not in line:
        raise SystemExit(f"no initialize result from {argv}: {line!r}")
    p.stdin.close()
    p.wait(timeout=30)
    return took


def main():
    rows = {"baseline: server without start delay, direct": [], "server, direct": [],
            "connect, cold (no daemon, server unknown)": [], "connect, warm (daemon runs the server)": [],
            "connect, cached (new daemon, server known)": []}
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as home:
            env = dict(os.environ, HOME=home, XDG_STATE_HOME=f"{home}/state", XDG_CONFIG_HOME=f"{home}/config")
            fixture = [BIN, "fixture", "--init-delay-ms", str(DELAY_MS)]
            config = f"{home}/switchyard.toml"
            with open(config, "w") as f:
                f.write(f"[servers.slow]\ncommand = {json.dumps(BIN)}\n")
                f.write(f"args = {json.dumps(fixture[1:])}\n[daemon]\nidle_exit_ms = 0\n")
            connect = [BIN, "connect", "slow", "--config", config]
            stop = [BIN, "stop", "--config", config]
            rows["baseline: server without start delay, direct"].append(initialize_ms([BIN, "fixture"], env))
            rows["server, direct"].append(initialize_ms(fixture, env))
            rows["connect, cold (no daemon, server unknown)"].append(initialize_ms(connect, env))
            rows["connect, warm (daemon runs the server)"].append(initialize_ms(connect, env))
            subprocess.run(stop, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            time.sleep(0.5)
            rows["connect, cached (new daemon, server known)"].append(initialize_ms(connect, env))
            subprocess.run(stop, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    direct = statistics.median(rows["server, direct"])
    base = statistics.median(rows["baseline: server without start delay, direct"])
    print(f"| initialize answered | median ms ({ROUNDS} rounds) | ÷ server direct | ÷ baseline |")
    print("|---|---:|---:|---:|")
    for what, xs in rows.items():
        m = statistics.median(xs)
        print(f"| {what} | {m:.0f} | {m / direct:.3f} | {m / base:.2f} |")


if __name__ == "__main__":
    main()
