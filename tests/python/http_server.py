"""An MCP server on the Python SDK (mcp 2.x, pinned in requirements.txt) served over HTTP, for
switchyard's remote-server tests (tests/e2e/remote_fixtures.rs and the tests built on its
harness, tests/e2e/harness/http_servers.rs).

    python http_server.py --port N --transport streamable-http|sse --runs-file PATH
                          [--stateless] [--json-response] [--event-store] [--forgetful-store]
                          [--bearer TOKEN]

Streamable HTTP is served at /mcp, legacy SSE at /sse (messages POSTed to /messages/?session_id=…),
on 127.0.0.1 only. By default there is no event store, so a broken stream cannot be resumed: that
is the case switchyard must handle itself; `--event-store` (Streamable HTTP) keeps every event in
memory and gives it an id, so a client can resume a broken stream with `Last-Event-ID`;
`--forgetful-store` numbers events the same way but a resume's replay never ends and sends nothing
(the resumed stream stays silent, as with a stuck or buggy event store). Nothing is printed on stdout; uvicorn logs to stderr. The server is
ready when its port accepts connections.

Tools (the annotations are what switchyard's retry decision reads):
- `echo(text)`: read-only, returns its text.
- `slow_echo(text, ms)`: idempotent, sleeps `ms` milliseconds, returns its text.
- `slow_counter(ms)`: neither read-only nor idempotent (nor destructive): counts as a run the
  moment it starts, sleeps `ms`, returns how many times it has started in total.

`slow_echo` and `slow_counter` append one JSON line to the runs file when they start
(`{"tool": ..., "pid": ...}`), so a test can count runs, also across server restarts (the file
outlives the process).

`--bearer TOKEN`: every request must carry `Authorization: Bearer TOKEN`, else 401 (and a line
on stderr saying so).
"""

import argparse
import asyncio
import json
import os
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import EventMessage, EventStore
from mcp.types import ToolAnnotations

server = MCPServer(
    "switchyard-python-http-fixture",
    version="1.0.0",
    instructions="A fixture for switchyard's remote-server tests: an echo, a slow echo and a run counter.",
)
RUNS_FILE = None


def record_run(tool):
    """Appends one line for this run and returns how many runs of `tool` the file holds now.

    No await between the append and the count, so concurrent calls on the event loop each see
    their own count."""
    with open(RUNS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, "pid": os.getpid()}) + "\n")
    with open(RUNS_FILE, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip() and json.loads(line)["tool"] == tool)


@server.tool(description="Returns its text", annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    return text


@server.tool(
    description="Sleeps ms milliseconds, then returns its text",
    annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False),
)
async def slow_echo(text: str, ms: int) -> str:
    record_run("slow_echo")
    await asyncio.sleep(ms / 1000)
    return text


@server.tool(
    description="Counts a run when it starts, sleeps ms milliseconds, returns the number of runs so far",
    annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=False),
)
async def slow_counter(ms: int) -> int:
    runs = record_run("slow_counter")
    await asyncio.sleep(ms / 1000)
    return runs


class MemoryEventStore(EventStore):
    """Every event of every stream, in order, for the life of the process."""

    def __init__(self, forgetful=False):
        self.events = []  # (event id, stream id, message or None for a priming event)
        # Forgetful: a resume is taken and its replay never ends, with nothing sent (a stuck or
        # buggy event store), so the resumed stream stays silent for good.
        self.forgetful = forgetful

    async def store_event(self, stream_id, message):
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):
        found = next((i for i, (eid, _, _) in enumerate(self.events) if eid == last_event_id), None)
        if found is None:
            return None
        stream_id = self.events[found][1]
        if self.forgetful:
            await asyncio.Event().wait()
        for event_id, sid, message in self.events[found + 1 :]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


def require_bearer(app, token):
    """ASGI wrapper: HTTP requests without `Authorization: Bearer TOKEN` get 401."""
    wanted = f"Bearer {token}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != wanted:
            # Logged, because the SDK's client reports a 401 only as "an error response".
            why = "missing or wrong bearer token"
            print(f"401 for {scope['method']} {scope['path']}: {why}", file=sys.stderr, flush=True)
            body = json.dumps({"error": "invalid_token", "error_description": "missing or wrong bearer token"})
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer error="invalid_token"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body.encode()})
            return
        await app(scope, receive, send)

    return guarded


def main():
    global RUNS_FILE
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--transport", choices=["streamable-http", "sse"], required=True)
    p.add_argument("--runs-file", required=True)
    p.add_argument("--stateless", action="store_true", help="streamable-http without sessions")
    p.add_argument("--json-response", action="store_true", help="streamable-http answers JSON, not SSE")
    p.add_argument("--event-store", action="store_true", help="streamable-http with resumable streams")
    p.add_argument("--forgetful-store", action="store_true", help="--event-store that replays nothing")
    p.add_argument("--bearer", help="require `Authorization: Bearer BEARER` on every request")
    args = p.parse_args()
    RUNS_FILE = args.runs_file

    if args.transport == "sse":
        if args.stateless or args.json_response or args.event_store or args.forgetful_store:
            p.error("--stateless, --json-response and --event-store apply to streamable-http only")
        app = server.sse_app(sse_path="/sse", message_path="/messages/", host="127.0.0.1")
    else:
        app = server.streamable_http_app(
            streamable_http_path="/mcp",
            json_response=args.json_response,
            stateless_http=args.stateless,
            event_store=MemoryEventStore(args.forgetful_store) if args.event_store or args.forgetful_store else None,
            host="127.0.0.1",
        )
    if args.bearer:
        app = require_bearer(app, args.bearer)
    # Own uvicorn run (not server.run) so the bearer wrapper can sit in front of the app.
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
