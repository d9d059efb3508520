"""Drives the Python SDK client (mcp 2.x) against an MCP server and prints a JSON transcript, for
switchyard's end-to-end tests (tests/e2e/python.rs, tests/e2e/remote_fixtures.rs): the same run
directly and through `switchyard run` must give the same transcript.

    python client.py MODE CALLS -- COMMAND [ARGS...]
    python client.py MODE CALLS --url URL --transport streamable-http|sse [--header 'K: V']...

The first form starts COMMAND and talks stdio to it; the second connects to a remote server over
Streamable HTTP or legacy SSE (URL is the /mcp or /sse endpoint), each `--header` sent on every
request. The transcript does not say how the client connected, so both forms compare equal.

MODE is the SDK's connect mode: `auto` (server/discover, 2026-07-28 when the server speaks it,
else the initialize fallback), `legacy` (initialize, 2025-11-25), or a version such as
`2026-07-28` (adopted without any probe: the first request already carries the envelope). CALLS is a JSON list of
[tool, arguments] pairs to call after listing what the server offers.
"""

import asyncio
import contextlib
import json
import sys

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# One run's bound; the Rust side has its own, longer one.
RUN_TIMEOUT_S = 90
# How long a listen stream's acknowledgement may take (a server sends it at once).
LISTEN_ACK_S = 15


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


async def step(steps, name, coro):
    try:
        steps[name] = dump(await coro)
    except MCPError as e:
        steps[name] = {"error": {"code": e.code, "message": e.error.message}}


@contextlib.asynccontextmanager
async def streamable_http(url, headers):
    # The SDK's own HTTP client (its default timeouts), with the extra headers.
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


def connect_to(target):
    """What `Client` connects to: a stdio server command, or a URL over HTTP."""
    if target["command"] is not None:
        command = target["command"]
        return StdioServerParameters(command=command[0], args=command[1:])
    if target["transport"] == "sse":
        return sse_client(target["url"], headers=target["headers"])
    return streamable_http(target["url"], target["headers"])


async def run(mode, calls, target):
    async with Client(connect_to(target), mode=mode, cache=None) as c:
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
        if c.protocol_version >= "2026-07-28":
            steps["listen"] = await listened(c)
        if mode == "legacy":
            await step(steps, "ping", c.send_ping())
        return transcript


async def listened(c):
    """Opens a `subscriptions/listen` stream (2026-07-28) and waits for its acknowledgement, which
    the client matches by the subscription id the server stamps on it."""
    try:
        async with asyncio.timeout(LISTEN_ACK_S):
            async with c.listen(tools_list_changed=True) as sub:
                return {"acknowledged": True, "honored": dump(sub.honored) if sub.honored else None}
    except TimeoutError:
        return {"error": f"no acknowledgement within {LISTEN_ACK_S} s"}
    except MCPError as e:
        return {"error": {"code": e.code, "message": e.error.message}}


def parse_target(rest):
    """`-- COMMAND...`, or `--url URL --transport T [--header 'K: V']...`; exits with usage otherwise."""
    if len(rest) >= 2 and rest[0] == "--":
        return {"command": rest[1:]}
    target = {"command": None, "url": None, "transport": None, "headers": {}}
    it = iter(rest)
    for flag in it:
        value = next(it, None)
        if value is None:
            sys.exit(f"client.py: {flag} needs a value\n\n{__doc__}")
        if flag == "--url":
            target["url"] = value
        elif flag == "--transport" and value in ("streamable-http", "sse"):
            target["transport"] = value
        elif flag == "--header" and ":" in value:
            name, val = value.split(":", 1)
            target["headers"][name.strip()] = val.strip()
        else:
            sys.exit(f"client.py: unexpected {flag} {value}\n\n{__doc__}")
    if target["url"] is None or target["transport"] is None:
        sys.exit(f"client.py: --url and --transport are both needed\n\n{__doc__}")
    return target


def main():
    argv = sys.argv[1:]
    if len(argv) < 4:
        sys.exit(__doc__)
    mode, calls, target = argv[0], json.loads(argv[1]), parse_target(argv[2:])
    transcript = asyncio.run(asyncio.wait_for(run(mode, calls, target), RUN_TIMEOUT_S))
    print(json.dumps(transcript, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
