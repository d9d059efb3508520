"""A 2026-07-28 client of the tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) in raw
JSON-RPC, for switchyard's test of Tasks through a pool (tests/e2e/interop/tasks.rs). It creates
six tasks at once with tasks_server.py's `square`, polls them with `tasks/get` until they end,
cancels a seventh, asks for a task nobody created, and prints a JSON transcript:

    python tasks_client.py -- COMMAND [ARGS...]
    python tasks_client.py --url URL [--header 'K: V']...

The first form starts COMMAND and talks stdio to it (the six calls written before any answer is
read); the second posts each request to URL (Streamable HTTP, the six calls on six threads at
once), with each `--header` on every request. `steps` is the same however the client connected
and however many processes served it; `pids` (how many server processes ran the six) is not.
"""

import argparse
import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
# Every request carries the 2026-07-28 envelope; the tasks extension is declared per request.
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "switchyard-tasks-client", "version": "1.0.0"},
}
# One run's bound; the Rust side has its own, longer one.
RUN_TIMEOUT_S = 90
POLL_EVERY_S = 0.2


class Stdio:
    """JSON-RPC over a child's stdin/stdout: requests are written together, then answered."""

    def __init__(self, command):
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def many(self, requests):
        for r in requests:
            self.proc.stdin.write(json.dumps(r) + "\n")
        self.proc.stdin.flush()
        waiting = {r["id"] for r in requests}
        answers = {}
        while waiting:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit("the server closed its stdout")
            msg = json.loads(line)
            if "method" in msg:
                continue  # a notification; this client asks for none it must answer
            if msg.get("id") in waiting:
                waiting.discard(msg["id"])
                answers[msg["id"]] = msg
        return [answers[r["id"]] for r in requests]

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Http:
    """JSON-RPC posted to a Streamable HTTP endpoint, with the 2026-07-28 routing headers; a
    batch's requests are posted at once, one thread each."""

    def __init__(self, url, headers):
        self.url = url
        self.headers = headers

    def one(self, request):
        params = request["params"]
        name = params.get("taskId") or params.get("name")
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": request["method"],
            **({"Mcp-Name": name} if name else {}),
            **self.headers,
        }
        post = urllib.request.Request(self.url, json.dumps(request).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(post, timeout=RUN_TIMEOUT_S) as resp:
                body = resp.read().decode()
                kind = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            body, kind = e.read().decode(), e.headers.get("Content-Type", "")
        if "text/event-stream" in kind:
            for data in re.findall(r"^data: ?(.*)$", body, re.M):
                if data.strip():
                    msg = json.loads(data)
                    if msg.get("id") == request["id"] and "method" not in msg:
                        return msg
            raise SystemExit(f"no answer to {request['id']} in the stream: {body!r}")
        return json.loads(body)

    def many(self, requests):
        with ThreadPoolExecutor(len(requests)) as pool:
            return list(pool.map(self.one, requests))

    def close(self):
        pass


class Client:
    def __init__(self, link):
        self.link = link
        self.next_id = 0

    def request(self, method, params):
        self.next_id += 1
        return {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": {**params, "_meta": META}}

    def many(self, calls):
        return self.link.many([self.request(m, p) for m, p in calls])

    def one(self, method, params):
        return self.many([(method, params)])[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("command", nargs="*")
    args = p.parse_args()
    # The Rust side kills us later; this says why first.
    watchdog = threading.Timer(RUN_TIMEOUT_S, lambda: (print("tasks_client.py: run timed out", file=sys.stderr), sys.exit(3)))
    watchdog.daemon = True
    watchdog.start()
    if args.url:
        link = Http(args.url, dict(h.split(": ", 1) for h in args.header))
    else:
        link = Stdio(args.command)
    c = Client(link)
    steps = {}
    try:
        listed = c.one("tools/list", {})
        steps["tools"] = [t["name"] for t in listed["result"]["tools"]]

        created = c.many([("tools/call", {"name": "square", "arguments": {"n": n}}) for n in range(6)])
        results = [r.get("result") or {"error": r.get("error")} for r in created]
        ids = [r.get("taskId") for r in results]
        steps["create"] = {
            "resultTypes": [r.get("resultType") for r in results],
            "statuses": [r.get("status") for r in results],
            "distinct": len({i for i in ids if i}),
        }
        if None in ids:
            raise SystemExit(f"not every call made a task: {created}")

        # Poll every unfinished task at once until none is working.
        final = {}
        deadline = time.monotonic() + 60
        while len(final) < len(ids) and time.monotonic() < deadline:
            pending = [i for i in ids if i not in final]
            for task_id, got in zip(pending, c.many([("tasks/get", {"taskId": i}) for i in pending])):
                result = got.get("result")
                if result is None or result.get("status") != "working":
                    final[task_id] = got
            time.sleep(POLL_EVERY_S)
        answers = [final.get(i, {"error": "still working after 60 s"}) for i in ids]
        steps["poll"] = [a.get("result", {}).get("status") or a.get("error") for a in answers]
        # Each task answers under the id it was handed, with its own result.
        steps["sameTaskId"] = [a.get("result", {}).get("taskId") == i for a, i in zip(answers, ids)]
        texts = [t["text"] for a in answers for t in a.get("result", {}).get("result", {}).get("content", [])]
        steps["results"] = [re.sub(r" \(pid \d+\)$", "", t) for t in texts]
        pids = {m.group(1) for t in texts if (m := re.search(r"\(pid (\d+)\)$", t))}

        # A long task, cancelled: the cancel and the poll after it reach the task's process.
        long = c.one("tools/call", {"name": "square", "arguments": {"n": 7, "seconds": 60}})
        long_id = long["result"]["taskId"]
        cancelled = c.one("tasks/cancel", {"taskId": long_id})
        after = c.one("tasks/get", {"taskId": long_id})
        steps["cancel"] = {
            "answered": "result" in cancelled,
            "status": after.get("result", {}).get("status") or after.get("error"),
        }

        unknown = c.one("tasks/get", {"taskId": "no-such-task"})
        steps["unknownTask"] = {"refused": "error" in unknown, "code": unknown.get("error", {}).get("code")}
    finally:
        link.close()
    print(json.dumps({"steps": steps, "pids": len(pids)}))


if __name__ == "__main__":
    main()
