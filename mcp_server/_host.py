"""The server as its helper modules use it (private to mcp_server).

app.py keeps the protocol handlers and hands the server to helpers (`_calls`, `_taskcalls`,
`_upstreams`). Were they to name `OrchestratorServer`, each would import app.py back, if only for
the type checker: a circle that ties the helpers to everything app.py imports. They name `Host`
instead, which the server satisfies by its attributes, so imports point one way: app.py to its
helpers, the helpers to this module, which imports none of them.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context
    from mcp_types import CallToolResult

    from adapters import ServerSource
    from adapters.models import ModelService
    from pipelines.service import PipelineService
    from skills import Catalog, Home
    from skills.core.roles import Roles

    from ._handles import RunHandles
    from .tasks import CallTarget

__all__ = ["Host"]


class Host(Protocol):
    """What the helpers read of `app.OrchestratorServer` and call on it. (The server makes its
    models, handles, roles and runs folder on first use: `cached_property` members here too.)"""

    catalog: Catalog
    home: Home | None
    pipelines: PipelineService | None
    servers: ServerSource | None
    """The upstream MCP servers of servers.json (None: none configured)."""

    @cached_property
    def runs_dir(self) -> Path | None: ...

    @cached_property
    def models(self) -> ModelService: ...

    @cached_property
    def handles(self) -> RunHandles: ...

    @cached_property
    def roles(self) -> Roles: ...

    def target(self, name: str) -> CallTarget | CallToolResult:
        """The tool called `name` as the call path needs it (an unknown-tool envelope if none)."""
        ...

    async def start_task(
        self, target: CallTarget, arguments: dict[str, Any], context: Context[Any, Any], *, era: str, ttl_ms: int | None
    ) -> CallToolResult | dict[str, Any]:
        """Run the call as a task: the task (its record's wire form) or the error envelope."""
        ...
