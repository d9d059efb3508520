#!/usr/bin/env python3
"""What new HTTP sessions cost the servers behind the daemon's front: SESSIONS sessions, each
initialize + initialized + DELETE, against server-everything (node) and the fixture server
(journalling what it receives). Prints, per switchyard binary given, the tools/list requests the
fixture received, server-everything's resident memory before and after, and the sessions' rate.

    python3 scripts/bench_sessions.py LABEL=path/to/switchyard [LABEL=path ...] [--sessions N]

Needs tests/npm installed (`npm ci --ignore-scripts` there) for server-everything.
"""

import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVERYTHING = os.path.join(ROOT, "tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def session(conn, token, path):
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json",
               "accept": "application/json, text/event-stream"}
    conn.request("POST", path, json.dumps(INIT), headers)
    r = conn.getresponse()
    r.read()
    sid = r.getheader("mcp-session-id")
    if r.status != 200 or not sid:
        raise SystemExit(f"initialize on {path}: {r.status}")
    headers.update({"mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"})
    conn.request("POST", path, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), headers)
    conn.getresponse().read()
    conn.request("DELETE", path, headers=headers)
    conn.getresponse().read()


def run(label, binary, sessions):
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, HOME=home, XDG_STATE_HOME=f"{home}/state", XDG_CONFIG_HOME=f"{home}/config",
                   XDG_RUNTIME_DIR=f"{home}/run")
        os.makedirs(f"{home}/run", mode=0o700)
        journal = f"{home}/fixture.jsonl"
        config = f"{home}/switchyard.toml"
        with open(config, "w") as f:
            f.write(f"[servers.everything]\ncommand = \"node\"\nargs = [{json.dumps(EVERYTHING)}, \"stdio\"]\n")
            f.write(f"[servers.fixture]\ncommand = {json.dumps(binary)}\nargs = [\"fixture\", \"--journal\", {json.dumps(journal)}]\n")
            f.write("[daemon]\nidle_exit_ms = 0\n[http]\nlisten = \"127.0.0.1:0\"\n")
        cli = lambda *a: subprocess.run([binary, *a, "--config", config], env=env, capture_output=True, check=True).stdout
        cli("daemon", "--detach")
        try:
            status = json.loads(cli("status", "--json"))
            host, port = status["http"]["listen"].rsplit(":", 1)
            token = cli("token").decode().strip()
            conn = http.client.HTTPConnection(host, int(port))
            for path in ("/mcp/everything", "/mcp/fixture"):
                session(conn, token, path)
            time.sleep(1.0)
            status = json.loads(cli("status", "--json"))
            pid = next(s["instances"][0]["pid"] for s in status["servers"] if s["name"] == "everything")
            before = rss_kib(pid)
            lists_before = sum(1 for l in open(journal) if '"method":"tools/list"' in l)
            started = time.monotonic()
            for _ in range(sessions):
                session(conn, token, "/mcp/everything")
                session(conn, token, "/mcp/fixture")
            took = time.monotonic() - started
            time.sleep(1.0)
            after = rss_kib(pid)
            lists = sum(1 for l in open(journal) if '"method":"tools/list"' in l) - lists_before
            return label, lists, before / 1024, after / 1024, 2 * sessions / took
        finally:
            subprocess.run([binary, "stop", "--config", config], env=env, capture_output=True)


def main():
    args = sys.argv[1:]
    sessions = 1000
    if "--sessions" in args:
        i = args.index("--sessions")
        sessions = int(args[i + 1])
        del args[i:i + 2]
    if not args:
        raise SystemExit(__doc__)
    print(f"| switchyard | tools/list the fixture received ({sessions} sessions) | server-everything RSS before → after ({sessions} sessions) | sessions/s |")
    print("|---|---:|---:|---:|")
    for arg in args:
        label, binary = arg.split("=", 1)
        label, lists, before, after, rate = run(label, os.path.abspath(binary), sessions)
        print(f"| {label} | {lists} | {before:.1f} → {after:.1f} MiB (+{after - before:.1f}) | {rate:.0f} |")


main()
