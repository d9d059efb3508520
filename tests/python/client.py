"""Drives the Python SDK client (mcp 2.x) against an MCP server command and prints a JSON
transcript, for switchyard's end-to-end tests (tests/e2e/python.rs): the same run directly and
through `switchyard run` must give the same transcript.

    python client.py MODE CALLS -- COMMAND [ARGS...]

MODE is the SDK's connect mode: `auto` (server/discover, 2026-07-28 when the server speaks it,
else the initialize fallback), `legacy` (initialize, 2025-11-25), or a version such as
`2026-07-28` (adopted without any probe: the first request already carries the envelope). CALLS is a JSON list of
[tool, arguments] pairs to call after listing what the server offers.
"""

import asyncio
import json
import sys

from mcp import Client, MCPError, StdioServerParameters

# One run's bound; the Rust side has its own, longer one.
RUN_TIMEOUT_S = 90


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


async def step(steps, name, coro):
    try:
        steps[name] = dump(await coro)
    except MCPError as e:
        steps[name] = {"error": {"code": e.code, "message": e.error.message}}


async def run(mode, calls, command):
    params = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(params, mode=mode, cache=None) as c:
        s = c.session
        handshake = s.initialize_result or s.discover_result
        transcript = {
            "mode": mode,
            "protocolVersion": c.protocol_version,
            "handshake": dump(handshake),
            "capabilities": dump(c.server_capabilities),
            "steps": {},
        }
        steps = transcript["steps"]
        caps = c.server_capabilities
        await step(steps, "tools_list", c.list_tools())
        if caps.prompts is not None:
            await step(steps, "prompts_list", c.list_prompts())
        if caps.resources is not None:
            await step(steps, "resources_list", c.list_resources())
        for i, (tool, args) in enumerate(calls):
            await step(steps, f"call_{i}_{tool}", c.call_tool(tool, args))
        await step(steps, "call_unknown_tool", c.call_tool("no-such-tool", {}))
        if mode == "legacy":
            await step(steps, "ping", c.send_ping())
        return transcript


def main():
    argv = sys.argv[1:]
    if len(argv) < 4 or argv[2] != "--":
        sys.exit(__doc__)
    mode, calls, command = argv[0], json.loads(argv[1]), argv[3:]
    transcript = asyncio.run(asyncio.wait_for(run(mode, calls, command), RUN_TIMEOUT_S))
    print(json.dumps(transcript, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
