"""A tool of your own: one Python function, served over MCP so that an agent can call it.

Run by the agent server (see agentos.toml), not by hand: it speaks MCP on stdin/stdout.
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("text")


@server.tool()
def count_words(text: str) -> str:
    """Count the words, lines and characters of a text."""
    return f"{len(text.split())} words, {len(text.splitlines())} lines, {len(text)} characters"


if __name__ == "__main__":
    server.run()  # stdio: the agent server starts this process and talks to it over its stdin/stdout
