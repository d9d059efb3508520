"""Drives the Python SDK client (mcp 2.x) through input rounds (2026-07-28), for switchyard's test
of them (tests/e2e/interop/python.rs):

    python input_rounds.py N DELAY_MS THINK_MS -- COMMAND [ARGS...]

Connects in the 2026-07-28 era to the stdio server COMMAND (tests/python/asking_server.py, or
switchyard in front of it) and calls its `confirm` tool N times at once, each taking THINK_MS
per round on the server. The server answers each first call `input_required`; the client's
elicitation handler waits DELAY_MS, answers
`{"ok": true}`, and the SDK calls again with the answer and the server's `requestState`. Prints
one JSON object: {"results": [the text of each call, or {"error": ...}]}.
"""

import asyncio
import json
import sys

from mcp import Client, MCPError, StdioServerParameters, types

RUN_TIMEOUT_S = 90


async def run(n, delay_ms, think_ms, command):
    async def elicit(context, params):
        await asyncio.sleep(delay_ms / 1000)
        return types.ElicitResult(action="accept", content={"ok": True})

    server = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(server, mode="2026-07-28", cache=None, elicitation_callback=elicit) as c:

        async def one(i):
            try:
                r = await c.call_tool("confirm", {"question": f"q{i}", "ms": think_ms})
                texts = [b.text for b in r.content if getattr(b, "type", None) == "text"]
                return {"error": texts} if r.is_error else " ".join(texts)
            except MCPError as e:
                return {"error": {"code": e.code, "message": e.error.message}}

        return {"results": await asyncio.gather(*(one(i) for i in range(n)))}


def main():
    argv = sys.argv[1:]
    if len(argv) < 5 or argv[3] != "--":
        sys.exit(__doc__)
    n, delay_ms, think_ms = (int(a) for a in argv[:3])
    out = asyncio.run(asyncio.wait_for(run(n, delay_ms, think_ms, argv[4:]), RUN_TIMEOUT_S))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
