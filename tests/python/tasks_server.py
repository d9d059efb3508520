"""A FastMCP server with the tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, of the
2026-07-28 era), for switchyard's tests of Tasks (tests/e2e/interop/tasks_extension.rs). Serves
stdio, or Streamable HTTP at /mcp on 127.0.0.1 (ready when the port accepts connections):

    python tasks_server.py
    python tasks_server.py --port N

`square(n, seconds=1)` runs as a task when the client declares the extension on the call: the
call is answered at once with `{"resultType": "task", "taskId", ...}`, and after `seconds` the
task completes with "N^2 = N*N (pid P)". The tasks live in this process's memory (FastMCP's task
engine on its `memory://` backend), so a `tasks/get` that reaches another process is answered
"Task ... not found"; the pid in the result tells which process ran it. Over HTTP the extension
refuses a task request whose `Mcp-Name` header is not the body's `taskId` (SEP-2663).
"""

import argparse
import asyncio
import os

from fastmcp import FastMCP
from fastmcp_tasks import TasksExtension

mcp = FastMCP("switchyard-tasks-fixture")
# No URL: the backend is `memory://`, one process's memory, no Redis.
mcp.add_extension(TasksExtension())


@mcp.tool(task=True, description="Squares n after `seconds`, as a task when the client asks")
async def square(n: int, seconds: float = 1.0) -> str:
    await asyncio.sleep(seconds)
    return f"{n}^2 = {n * n} (pid {os.getpid()})"


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int)
    args = p.parse_args()
    if args.port is None:
        mcp.run(show_banner=False)
    else:
        mcp.run(transport="http", host="127.0.0.1", port=args.port, path="/mcp", show_banner=False)
