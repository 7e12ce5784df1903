"""The MCP server of mcp-orchestrator: builds the server from a Catalog, transports, the CLI."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mcp-orchestrator")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

from .app import OrchestratorServer, create_server

__all__ = ["OrchestratorServer", "__version__", "create_server"]
