#!/usr/bin/env python3
"""What an idle router costs the machine: the wake-ups (context switches of all its threads,
from /proc/PID/task/*/status) of `switchyard run` and of the daemon while nobody calls, after a
call that ran a plugin. Per switchyard binary given, in one run:

- `run` in front of the fixture with the `hints` plugin;
- the daemon serving two fixture servers (both started by a call) with the same plugin;
- `switchyard connect`, the process a client of the daemon starts;
- as the baseline, the fixture server directly (a Rust MCP server on a tokio runtime).

    python3 scripts/bench_idle.py LABEL=path/to/switchyard [LABEL=path ...] [--seconds N]

Needs the example plugins built (`target/plugins/examples/hints.wasm`; the tests build them).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HINTS = os.path.join(ROOT, "target/plugins/examples/hints.wasm")
PLUGIN = '[[plugins]]\nfile = "hints.wasm"\nconfig = { tools = { "read" = { readOnlyHint = true } } }\n'
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}


def switches(pid):
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                total += sum(int(l.split()[1]) for l in f if "ctxt_switches:" in l)
        except OSError:
            pass  # a thread that ended meanwhile
    return total


def per_second(pid, seconds):
    time.sleep(0.5)
    before = switches(pid)
    time.sleep(seconds)
    return (switches(pid) - before) / seconds


def client(argv, env=None):
    """A client that initialises and makes one call, then stays connected (stdin open)."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    for msg in (INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}, CALL):
        p.stdin.write((json.dumps(msg) + "\n").encode())
        p.stdin.flush()
        if "id" in msg:
            p.stdout.readline()
    return p


def end(p):
    p.stdin.close()
    p.wait(timeout=10)


def run(label, binary, seconds):
    rows = []
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, HOME=home, XDG_STATE_HOME=f"{home}/state", XDG_CONFIG_HOME=f"{home}/config",
                   XDG_RUNTIME_DIR=f"{home}/run")
        os.makedirs(f"{home}/run", mode=0o700)
        os.makedirs(f"{home}/plugins")
        shutil.copy(HINTS, f"{home}/plugins/hints.wasm")

        direct = client([binary, "fixture"])
        rows.append(("the fixture server, directly", per_second(direct.pid, seconds)))
        end(direct)

        with open(f"{home}/run.toml", "w") as f:
            f.write(PLUGIN)
        r = client([binary, "run", "--plugins", f"{home}/plugins", "--config", f"{home}/run.toml", "--", binary, "fixture"])
        rows.append(("`switchyard run`, one plugin", per_second(r.pid, seconds)))
        end(r)

        config = f"{home}/switchyard.toml"
        with open(config, "w") as f:
            for name in ("alpha", "beta"):
                f.write(f"[servers.{name}]\ncommand = {json.dumps(binary)}\nargs = [\"fixture\"]\n")
            f.write(PLUGIN)
        clients = [client([binary, "connect", name, "--config", config], env) for name in ("alpha", "beta")]
        status = json.loads(subprocess.run([binary, "status", "--json", "--config", config], env=env,
                                           capture_output=True, check=True).stdout)
        daemon = status["pid"]
        rows.append(("the daemon, two servers, one plugin", per_second(daemon, seconds)))
        rows.append(("`switchyard connect` (a client's)", per_second(clients[0].pid, seconds)))
        for c in clients:
            end(c)
        subprocess.run([binary, "stop", "--config", config], env=env, capture_output=True)
    for what, n in rows:
        print(f"| {label} | {what} | {n:.1f} |")


def main():
    seconds = 5.0
    args = sys.argv[1:]
    if "--seconds" in args:
        i = args.index("--seconds")
        seconds = float(args[i + 1])
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    print("| switchyard | process | wake-ups per second, idle |")
    print("|---|---|---:|")
    for arg in args:
        label, _, binary = arg.partition("=")
        run(label, os.path.abspath(binary), seconds)


if __name__ == "__main__":
    main()
