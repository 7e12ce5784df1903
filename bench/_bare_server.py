"""The reference of `spawn.py`: a bare `MCPServer` with one tool, served over stdio.

Run as `python bench/_bare_server.py`; it imports nothing of mcp-orchestrator.
"""

from __future__ import annotations

from mcp.server import MCPServer

mcp = MCPServer(name="bare")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


if __name__ == "__main__":
    mcp.run()
