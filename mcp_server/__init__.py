"""The MCP server of mcp-orchestrator: builds the server from a Catalog, transports, the CLI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__  # a constant, not importlib.metadata: ~30 ms off every start

if TYPE_CHECKING:
    from .app import OrchestratorServer, create_server

__all__ = ["OrchestratorServer", "__version__", "create_server"]


def __getattr__(name: str) -> Any:
    # Lazy: `orchestrator skills validate` or `claude-config` need not pay the ~0.7 s `mcp` import.
    if name in ("OrchestratorServer", "create_server"):
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module 'mcp_server' has no attribute {name!r}")
