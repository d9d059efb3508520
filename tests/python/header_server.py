"""An MCP server on the Python SDK (mcp 2.x) whose tool mirrors an argument in an HTTP header, for
switchyard's test of `Mcp-Param-*` headers (tests/e2e/interop/remote.rs). Served over Streamable
HTTP at /mcp on 127.0.0.1 (ready when the port accepts connections):

    python header_server.py --port N

`where(region)`: `region` is marked `x-mcp-header: Region`, so a 2026-07-28 client sends it in the
header `Mcp-Param-Region` too; the SDK refuses a call whose header is missing while the argument
is present (HTTP 400, -32020). Returns "served in REGION".
"""

import argparse
import asyncio
from typing import Annotated

import uvicorn
from pydantic import Field

from mcp.server.mcpserver import MCPServer

server = MCPServer("switchyard-header-fixture", version="1.0.0")


@server.tool(description="Says which region it was asked for")
def where(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
    return f"served in {region}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve())


if __name__ == "__main__":
    main()
