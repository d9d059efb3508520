#!/usr/bin/env python3
"""What a stdio call costs the process in the middle: per `echo` call to the fixture server, the
context switches of all the middle process's threads and its CPU time (user and system, from
/proc), with the client's p50 and p90 (one call at a time) or calls/s (`--window N`: N calls
outstanding, as a client that pipelines sends them). Targets, in one run, alternating:

- the fixture directly (the "middle" process is then the server itself);
- the compiled byte relay of the benches (crates/switchyard/benches/peers/relay.c, built with
  `cc -O2`), the floor of any process in the middle;
- `switchyard run` in front of it, with the audit log at its default (on) and off;
- the line-copying proxy of the benches (crates/switchyard/benches/peers/line-proxy.py);
- `switchyard connect` to a daemon serving the fixture: handed off (the middle is the daemon),
  and relayed with SWITCHYARD_HANDOFF=0 (the middle is connect and the daemon together).

    python3 scripts/bench_call_cost.py path/to/switchyard [--calls N] [--rounds R] [--window W]
        [--everything]

`--everything`: the server is @modelcontextprotocol/server-everything (node, from tests/npm;
`npm ci --ignore-scripts` there first) instead of the fixture, its `echo` called with `message`.

Run `strace -c -f -p PID` on the middle process meanwhile to count its system calls per call.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINE_PROXY = os.path.join(ROOT, "crates/switchyard/benches/peers/line-proxy.py")
RELAY = os.path.join(ROOT, "crates/switchyard/benches/peers/relay.c")
WARM = 200


def usage(pid):
    switches = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                switches += sum(int(l.split()[1]) for l in f if "ctxt_switches:" in l)
        except OSError:
            pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return switches, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def daemon_pids(config):
    """The daemon serving `config` (there is one once a connect was answered)."""
    pids = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"daemon" in argv and config.encode() in argv:
            pids.append(int(pid))
    return pids


def total_usage(pids):
    switches = cpu = 0
    for pid in pids:
        s, c = usage(pid)
        switches, cpu = switches + s, cpu + c
    return switches, cpu


# The server's `echo` arguments (the fixture's take `text`; `--everything` sets `message`).
ECHO_ARGS = {"text": "hello"}
EVERYTHING = os.path.join(ROOT, "tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")


def measure(argv, calls, window, env=None, config=None):
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0,
                         env=env)
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}}
    p.stdin.write((json.dumps(init) + "\n").encode())
    p.stdout.readline()
    p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    lines = [(json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                          "params": {"name": "echo", "arguments": ECHO_ARGS}}) + "\n").encode()
             for i in range(1, WARM + calls + 1)]
    for line in lines[:WARM]:
        p.stdin.write(line)
        p.stdout.readline()
    # The middle: the process started, or (for connect) the daemon, with connect when it relays.
    middle = [p.pid]
    if config:
        middle = daemon_pids(config) + ([p.pid] if env and env.get("SWITCHYARD_HANDOFF") == "0" else [])
    before = total_usage(middle)
    times = []
    started = time.perf_counter()
    if window <= 1:
        for line in lines[WARM:]:
            t = time.perf_counter()
            p.stdin.write(line)
            p.stdout.readline()
            times.append(time.perf_counter() - t)
    else:
        pipelined(p, lines[WARM:], window)
    wall = time.perf_counter() - started
    after = total_usage(middle)
    p.stdin.close()
    p.wait(timeout=10)
    times.sort()
    p50, p90 = (times[len(times) // 2] * 1e6, times[len(times) * 9 // 10] * 1e6) if times else (0, 0)
    return (p50, p90, calls / wall, (after[0] - before[0]) / calls, (after[1] - before[1]) / calls * 1e6)


def pipelined(p, lines, window):
    """Sends `lines` with up to `window` of them unanswered, and reads every answer."""
    sent = answered = 0
    pending = b""
    while answered < len(lines):
        while sent < len(lines) and sent - answered < window:
            p.stdin.write(lines[sent])
            sent += 1
        chunk = os.read(p.stdout.fileno(), 1 << 16)
        if not chunk:
            sys.exit("the target closed its output")
        pending += chunk
        answered += pending.count(b"\n")
        pending = pending[pending.rfind(b"\n") + 1:]


def relay(home):
    """The byte relay, built into `home` (None without a C compiler)."""
    exe = os.path.join(home, "relay")
    built = subprocess.run(["cc", "-O2", "-o", exe, RELAY], check=False, stderr=subprocess.DEVNULL)
    return exe if built.returncode == 0 else None


def main():
    args = sys.argv[1:]
    opts = {"--calls": 5000, "--rounds": 3, "--window": 1}
    for flag in opts:
        if flag in args:
            i = args.index(flag)
            opts[flag] = int(args[i + 1])
            del args[i:i + 2]
    calls, rounds, window = opts["--calls"], opts["--rounds"], opts["--window"]
    everything = "--everything" in args
    args = [a for a in args if a != "--everything"]
    if len(args) != 1:
        sys.exit(__doc__)
    exe = os.path.abspath(args[0])
    fixture = [exe, "fixture"]
    if everything:
        if not os.path.exists(EVERYTHING):
            sys.exit(f"{EVERYTHING} is missing: run `npm ci --ignore-scripts` in tests/npm")
        global ECHO_ARGS
        ECHO_ARGS = {"message": "hello"}
        fixture = [shutil.which("node") or "node", EVERYTHING, "stdio"]
    home = tempfile.mkdtemp(prefix="switchyard-call-cost-")
    config = os.path.join(home, "config.toml")
    with open(config, "w") as f:
        f.write(f"[servers.fx]\ncommand = {json.dumps(fixture[0])}\nargs = {json.dumps(fixture[1:])}\n")
    quiet = os.path.join(home, "no-audit.toml")
    with open(quiet, "w") as f:
        f.write("[audit]\nenabled = false\n")
    env = dict(os.environ)
    for var in ("XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        env[var] = os.path.join(home, var.lower())
        os.makedirs(env[var], mode=0o700, exist_ok=True)
    relayed = dict(env, SWITCHYARD_HANDOFF="0")
    connect = [exe, "connect", "fx", "--config", config]
    run = [exe, "run", "--log-level", "warn", "--name", "fx"]
    targets = [("direct", fixture, None, None),
               ("`switchyard run`", [*run, "--", *fixture], env, None),
               ("`switchyard run`, audit off", [*run, "--config", quiet, "--", *fixture], env, None),
               ("`switchyard connect`, handed off", connect, env, config),
               ("`switchyard connect`, relayed", connect, relayed, config),
               ("line-copying proxy (Python)", [sys.executable, LINE_PROXY, *fixture], None, None)]
    floor = relay(home)
    if floor:
        targets.insert(1, ("byte relay (C)", [floor, *fixture], None, None))
    results = {name: [] for name, *_ in targets}
    try:
        for _ in range(rounds):
            for name, argv, env_of, config_of in targets:
                results[name].append(measure(argv, calls, window, env_of, config_of))
    finally:
        subprocess.run([exe, "stop", "--config", config], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(home, ignore_errors=True)
    print(f"| {calls} calls × {rounds} rounds, {window} outstanding | p50 µs | p90 µs | calls/s "
          "| middle process: switches/call | CPU µs/call |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        med = [sorted(col)[len(col) // 2] for col in zip(*rows)]
        print(f"| {name} | {med[0]:.0f} | {med[1]:.0f} | {med[2]:.0f} | {med[3]:.2f} | {med[4]:.1f} |")


if __name__ == "__main__":
    main()
