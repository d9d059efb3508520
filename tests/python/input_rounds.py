"""Drives the Python SDK client (mcp 2.x) through input rounds (2026-07-28), for switchyard's test
of them (tests/e2e/interop/python.rs):

    python input_rounds.py N DELAY_MS -- COMMAND [ARGS...]

Connects in the 2026-07-28 era to the stdio server COMMAND (tests/python/asking_server.py, or
switchyard in front of it) and calls its `confirm` tool N times at once. The server answers each
first call `input_required`; the client's elicitation handler waits DELAY_MS, answers
`{"ok": true}`, and the SDK calls again with the answer and the server's `requestState`. Prints
one JSON object: {"results": [the text of each call, or {"error": ...}]}.
"""

import asyncio
import json
import sys

from mcp import Client, MCPError, StdioServerParameters, types

RUN_TIMEOUT_S = 90


async def run(n, delay_ms, command):
    async def elicit(context, params):
        await asyncio.sleep(delay_ms / 1000)
        return types.ElicitResult(action="accept", content={"ok": True})

    server = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(server, mode="2026-07-28", cache=None, elicitation_callback=elicit) as c:

        async def one(i):
            try:
                r = await c.call_tool("confirm", {"question": f"q{i}"})
                texts = [b.text for b in r.content if getattr(b, "type", None) == "text"]
                return {"error": texts} if r.is_error else " ".join(texts)
            except MCPError as e:
                return {"error": {"code": e.code, "message": e.error.message}}

        return {"results": await asyncio.gather(*(one(i) for i in range(n)))}


def main():
    argv = sys.argv[1:]
    if len(argv) < 4 or argv[2] != "--":
        sys.exit(__doc__)
    out = asyncio.run(asyncio.wait_for(run(int(argv[0]), int(argv[1]), argv[3:]), RUN_TIMEOUT_S))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
