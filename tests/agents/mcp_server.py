"""A tiny MCP server for the tests: `python mcp_server.py` (stdio) or `python mcp_server.py --http PORT`;
`--mortal` (stdio) adds a tool `die` that ends the process at once, as a crash would."""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("calc")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


if "--mortal" in sys.argv:

    @server.tool()
    def die() -> str:
        """End this server's process at once."""
        os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
