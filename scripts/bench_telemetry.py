#!/usr/bin/env python3
"""What traces cost a call: the p50 and p99 of a sequential `echo` call to the fixture server
through `switchyard run`, with traces off and with traces on, exported to the OTLP receiver of
the tests (tests/python/otlp_receiver.py), in alternating rounds of a fresh router each.

    python3 scripts/bench_telemetry.py path/to/switchyard [--calls N] [--rounds R] [--discard]
        [--against path/to/other/switchyard]

The receiver runs in the virtualenv the telemetry tests make (target/tmp/python-otel-venv; run
`cargo test --features interop --test e2e -- interop::telemetry` once first) and decodes every
span, on this machine's cores too; `--discard` has it answer each export unread instead, which
leaves switchyard's own cost. `--against` runs a second binary in the same rounds (its off and
on rounds interleaved with the first's, in rotating order), so both see the same load, and adds
the median of each round's own on/off ratio, which load that changes between rounds moves less.
"""

import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECEIVER = os.path.join(ROOT, "tests/python/otlp_receiver.py")
VENV_PYTHON = os.path.join(ROOT, "target/tmp/python-otel-venv/bin/python")
WARM = 300


def one_round(binary, endpoint, calls):
    """The call times (ns) of one router, traces on when `endpoint` is given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    p = subprocess.Popen(
        [binary, "run", "--log-level", "warn", "--", binary, "fixture"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0,
    )
    w, r = p.stdin, p.stdout

    def request(i, method, params):
        w.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode())
        return r.readline()

    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
    request(0, "initialize", init)
    w.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    times = []
    for i in range(1, WARM + calls + 1):
        t = time.perf_counter_ns()
        request(i, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        if i > WARM:
            times.append(time.perf_counter_ns() - t)
    w.close()
    p.wait(10)
    return times


def main():
    args = sys.argv[1:]
    binary = args[0]
    calls = int(args[args.index("--calls") + 1]) if "--calls" in args else 3000
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 8
    binaries = [binary] + ([args[args.index("--against") + 1]] if "--against" in args else [])
    mode = ["--discard"] if "--discard" in args else ["--out", os.devnull]
    receiver = subprocess.Popen([VENV_PYTHON, RECEIVER, *mode], stdout=subprocess.PIPE, text=True)
    port = receiver.stdout.readline().split()[1]
    endpoint = f"http://127.0.0.1:{port}"
    runs = [(b, name) for b in binaries for name in ("off", "on")]
    results = {run: [] for run in runs}
    try:
        for k in range(rounds):
            order = runs[k % len(runs):] + runs[: k % len(runs)]
            if k % (2 * len(runs)) >= len(runs):
                order.reverse()
            for b, name in order:
                t = one_round(b, endpoint if name == "on" else None, calls)
                results[(b, name)].append((statistics.median(t) / 1000, statistics.quantiles(t, n=100)[98] / 1000))
    finally:
        receiver.kill()
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; {rounds} rounds of {calls} calls each")
    for b in binaries:
        if len(binaries) > 1:
            print(b)
        for name in ("off", "on"):
            rs = results[(b, name)]
            p50s = sorted(r[0] for r in rs)
            print(
                f"traces {name:3}: median p50 {statistics.median(p50s):.1f} us (rounds {p50s[0]:.1f}-{p50s[-1]:.1f}), "
                f"median p99 {statistics.median(r[1] for r in rs):.1f} us"
            )
        on, off = [r[0] for r in results[(b, "on")]], [r[0] for r in results[(b, "off")]]
        ratio = statistics.median(on) / statistics.median(off)
        print(f"on / off, p50: {ratio:.3f}")
        if len(binaries) > 1:
            rounds_ratio = statistics.median(a / o for a, o in zip(on, off))
            added = statistics.median(a - o for a, o in zip(on, off))
            print(f"on / off, p50, median of the rounds' own: {rounds_ratio:.3f} ({added:.1f} us added)")


if __name__ == "__main__":
    main()
