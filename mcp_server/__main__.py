"""`python -m mcp_server ...` is the `orchestrator` command."""

from mcp_server.cli import main

main()
