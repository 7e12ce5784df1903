"""Entry point for the MCP Inspector and `mcp run`: `mcp dev mcp_server/server.py`.

`mcp dev` / `mcp run` load the first of `mcp`, `server`, `app` that is an `MCPServer`;
`OrchestratorServer` is one, so the Inspector shows every skill with its explicit schema.
The home is `$ORCHESTRATOR_HOME` or `~/.orchestrator`; skills reload live.
"""

from mcp_server.app import create_server

server = create_server(watch=True)

if __name__ == "__main__":
    server.run()
