#!/usr/bin/env python3
"""How quickly switchyard binaries start, side by side: the file's size, then per binary the
median over ROUNDS (the binaries alternate within each round, so a change in the machine's load
hits all alike) of

- `--version`: from starting the process to its exit;
- `run -- BIN fixture`: from starting `switchyard run` to the answer to `initialize` (the router
  and the fixture server both start);
- `connect NAME`, warm: from starting `switchyard connect` to the answer to `initialize`, with the
  binary's own daemon already serving the fixture (what a client pays each time it starts).

    python3 scripts/bench_startup.py [--rounds N] LABEL=path/to/switchyard ...

Each binary gets its own HOME and runtime directory under a temporary directory; its daemon is
stopped at the end. Prints a Markdown table (milliseconds).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# The timed initialize is bench_initialize.py's (this directory).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_initialize import initialize_ms  # noqa: E402


def until_exit_ms(argv, env):
    started = time.monotonic()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.monotonic() - started) * 1000


class Target:
    def __init__(self, label, path, root):
        self.label, self.bin = label, os.path.abspath(path)
        home = os.path.join(root, label)
        for sub in ("run", "state", "config", "plugins"):
            os.makedirs(os.path.join(home, sub), mode=0o700)
        self.env = dict(os.environ, HOME=home, XDG_RUNTIME_DIR=os.path.join(home, "run"),
                        XDG_STATE_HOME=os.path.join(home, "state"), XDG_CONFIG_HOME=os.path.join(home, "config"))
        self.plugins = os.path.join(home, "plugins")
        self.config = os.path.join(home, "switchyard.toml")
        with open(self.config, "w") as f:
            f.write(f'[servers.fixture]\ncommand = {json.dumps(self.bin)}\nargs = ["fixture"]\n')
        self.times = {"version": [], "run": [], "connect": []}

    def round(self):
        self.times["version"].append(until_exit_ms([self.bin, "--version"], self.env))
        run = [self.bin, "run", "--plugins", self.plugins, "--", self.bin, "fixture"]
        self.times["run"].append(initialize_ms(run, self.env))
        connect = [self.bin, "connect", "fixture", "--config", self.config]
        self.times["connect"].append(initialize_ms(connect, self.env))

    def stop(self):
        subprocess.run([self.bin, "stop", "--config", self.config], env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    args = sys.argv[1:]
    rounds = 20
    if len(args) >= 2 and args[0] == "--rounds":
        rounds, args = int(args[1]), args[2:]
    if not args or any("=" not in a for a in args):
        raise SystemExit(__doc__)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as root:
        targets = [Target(*a.split("=", 1), root) for a in args]
        try:
            for t in targets:  # warm-up: page cache, and each daemon started with its server
                t.round()
                t.times = {k: [] for k in t.times}
            for _ in range(rounds):
                for t in targets:
                    t.round()
        finally:
            for t in targets:
                t.stop()
    print(f"| binary | size MB | `--version` ms | `run` to initialize ms | `connect`, warm, to initialize ms |")
    print("|---|---:|---:|---:|---:|")
    for t in targets:
        med = {k: statistics.median(v) for k, v in t.times.items()}
        size = os.path.getsize(t.bin) / 1e6
        print(f"| {t.label} | {size:.2f} | {med['version']:.1f} | {med['run']:.1f} | {med['connect']:.1f} |")
    print(f"\nmedians of {rounds} rounds")


if __name__ == "__main__":
    main()
