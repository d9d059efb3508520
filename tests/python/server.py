"""A small MCP server on the Python SDK (mcp 2.x, pinned in requirements.txt), for switchyard's
end-to-end tests (tests/e2e/python.rs). Over stdio the SDK serves both protocol eras: the
client's first request decides whether a connection speaks 2025-11-25 (initialize) or
2026-07-28 (server/discover, a `_meta` envelope on every request)."""

from mcp.server.mcpserver import MCPServer

server = MCPServer(
    "switchyard-python-fixture",
    version="1.0.0",
    instructions="A fixture for switchyard's tests: arithmetic, an echo and a greeting.",
)


@server.tool(description="Adds two integers")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Returns its text")
def echo(text: str) -> str:
    return text


@server.tool(description="Fails on purpose")
def fail(reason: str) -> str:
    raise ValueError(f"failed on purpose: {reason}")


@server.resource("fixture://greeting", description="A fixed greeting")
def greeting() -> str:
    return "hello from the python fixture"


@server.prompt(description="Asks for a review of some code")
def review(code: str) -> str:
    return f"Please review:\n{code}"


if __name__ == "__main__":
    server.run()
