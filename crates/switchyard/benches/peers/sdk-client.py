"""The Python SDK's client (mcp 2.x, the tests' virtualenv) as a line-driven peer for the
`silent` section of crates/switchyard/benches/router.rs.

    python sdk-client.py URL

Connects to URL over Streamable HTTP with the SDK's own HTTP client and defaults (initialize,
protocol 2025-11-25), prints {"ready": true}, then takes one JSON-RPC `tools/call` request per
line on stdin and runs each as it comes (several may be in flight), printing for each a line
{"id": N, "result": ...} or {"id": N, "error": {"message": ...}}: an MCP error the SDK raised or
any other exception it let through. A failure of the whole client ends the script (the bench
reads that as EOF).
"""

import asyncio
import contextlib
import json
import sys

from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def emit(message):
    print(json.dumps(message), flush=True)


@contextlib.asynccontextmanager
async def streamable_http(url):
    async with create_mcp_http_client() as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


async def call(client, request):
    rid, params = request["id"], request["params"]
    try:
        result = await client.call_tool(params["name"], params.get("arguments", {}))
        emit({"id": rid, "result": result.model_dump(by_alias=True, exclude_none=True, mode="json")})
    except MCPError as e:
        emit({"id": rid, "error": {"code": e.code, "message": e.error.message}})
    except Exception as e:  # noqa: BLE001 - whatever the SDK let through is the answer measured
        emit({"id": rid, "error": {"message": f"{type(e).__name__}: {e}"}})


async def main(url):
    loop = asyncio.get_running_loop()
    async with Client(streamable_http(url), mode="legacy", cache=None) as client:
        emit({"ready": True})
        tasks = set()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            task = asyncio.create_task(call(client, json.loads(line)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
