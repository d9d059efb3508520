#!/usr/bin/env python3
"""What traces cost a call: the p50 and p99 of a sequential `echo` call to the fixture server
through `switchyard run`, with traces off and with traces on, exported to the OTLP receiver of
the tests (tests/python/otlp_receiver.py), in alternating rounds of a fresh router each.

    python3 scripts/bench_telemetry.py path/to/switchyard [--calls N] [--rounds R] [--discard]

The receiver runs in the virtualenv the telemetry tests make (target/tmp/python-otel-venv; run
`cargo test --features interop --test e2e -- interop::telemetry` once first) and decodes every
span, on this machine's cores too; `--discard` has it answer each export unread instead, which
leaves switchyard's own cost.
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
    mode = ["--discard"] if "--discard" in args else ["--out", os.devnull]
    receiver = subprocess.Popen([VENV_PYTHON, RECEIVER, *mode], stdout=subprocess.PIPE, text=True)
    port = receiver.stdout.readline().split()[1]
    endpoint = f"http://127.0.0.1:{port}"
    results = {"off": [], "on": []}
    try:
        for k in range(rounds):
            for name in ("off", "on") if k % 2 == 0 else ("on", "off"):
                t = one_round(binary, endpoint if name == "on" else None, calls)
                results[name].append((statistics.median(t) / 1000, statistics.quantiles(t, n=100)[98] / 1000))
    finally:
        receiver.kill()
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; {rounds} rounds of {calls} calls each")
    for name, rs in results.items():
        p50s = sorted(r[0] for r in rs)
        print(
            f"traces {name:3}: median p50 {statistics.median(p50s):.1f} us (rounds {p50s[0]:.1f}-{p50s[-1]:.1f}), "
            f"median p99 {statistics.median(r[1] for r in rs):.1f} us"
        )
    ratio = statistics.median(r[0] for r in results["on"]) / statistics.median(r[0] for r in results["off"])
    print(f"on / off, p50: {ratio:.3f}")


if __name__ == "__main__":
    main()
