"""An MCP server on the Python SDK (mcp 2.x) whose one tool needs an answer from the client, for
switchyard's test of input rounds (tests/e2e/interop/python.rs). In the 2026-07-28 era the SDK
answers the first call `input_required` with a `requestState` sealed under a key made when this
process started, and runs the tool when the client calls again with its answer and that state:
another process cannot open the state and refuses the call.

    python asking_server.py      (stdio)

`confirm(question, ms)`: takes `ms` milliseconds to think of its question (each round: the SDK
runs the question's resolver again when the answer comes), asks the client (an elicitation of
`{"ok": bool}`), then returns "QUESTION: yes|no (pid PID)", naming the process that ran it.
"""

import asyncio
import os
from typing import Annotated

from pydantic import BaseModel

from mcp.server.mcpserver import Elicit, MCPServer, Resolve


class Answer(BaseModel):
    ok: bool


async def ask(question: str, ms: int) -> Elicit[Answer]:
    await asyncio.sleep(ms / 1000)
    return Elicit(question, Answer)


server = MCPServer("switchyard-asking-fixture", version="1.0.0")


@server.tool(description="Asks the client to confirm, then says what it answered")
def confirm(question: str, ms: int, answer: Annotated[Answer, Resolve(ask)]) -> str:
    return f"{question}: {'yes' if answer.ok else 'no'} (pid {os.getpid()})"


if __name__ == "__main__":
    server.run()
