"""An upstream tool as a Skill: its definition passed through, its calls forwarded.

Description, input schema, output schema and annotations are the upstream's, unchanged; the
result of a successful call is the upstream's `CallToolResult`, unchanged (every content type,
`structuredContent`), which the server hands to its client as it is. A failed call (`isError`)
is raised as `UpstreamToolError`: the client gets the error envelope of SPEC 7 (`skill_failed`,
the upstream's own text in `message`, its other content after the envelope), and a pipeline step
or an agent sees the same failure as from any other skill.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mcp_types import CallToolResult, Tool

from skills import SkillContext

from ._names import assign_names
from ._outcomes import tool_failure

if TYPE_CHECKING:
    from .config import ServerConfig

__all__ = ["RemoteSkill", "Upstream", "build_skills"]


class Upstream(Protocol):
    """What a `RemoteSkill` needs of the connection to its server (`MCPSkillAdapter` is one).

    Named here so that this module need not know the adapter, which builds these skills.
    """

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> ServerConfig: ...

    @property
    def tools(self) -> Sequence[Tool]: ...

    @property
    def instructions(self) -> str | None: ...

    async def call(self, tool: str, arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult: ...


class RemoteSkill:
    """A tool of an upstream MCP server, published under `name`."""

    kind: Literal["remote"] = "remote"
    source: Literal["server"] = "server"
    root: Path | None = None

    def __init__(self, name: str, adapter: Upstream, tool: Tool) -> None:
        self._name = name
        self.adapter = adapter
        self.tool = tool
        """The upstream's definition, as it listed it."""

    @property
    def name(self) -> str:
        return self._name

    @property
    def server(self) -> str:
        """The servers.json key of the upstream."""
        return self.adapter.name

    @property
    def upstream_name(self) -> str:
        """The tool's name on the upstream (what is called there)."""
        return self.tool.name

    @property
    def title(self) -> str | None:
        if self.tool.title:
            return self.tool.title
        return self.tool.annotations.title if self.tool.annotations is not None else None

    @property
    def description(self) -> str:
        return self.tool.description or ""

    @property
    def input_schema(self) -> dict[str, Any]:
        return self.tool.input_schema

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return self.tool.output_schema

    @property
    def annotations(self) -> dict[str, Any] | None:
        if self.tool.annotations is None:
            return None
        return self.tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)

    def body(self) -> str:
        """The config's `instructions`, else the upstream server's own, else a line saying where the tool is from."""
        text = self.adapter.instructions
        if text:
            return text
        return f"`{self.tool.name}` is a tool of the MCP server '{self.server}' ({self.adapter.config.target()})."

    def files(self) -> list[str]:
        return []

    async def run(self, arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult:
        """The upstream's result; raises `UpstreamToolError` when it reports a failure."""
        result = await self.adapter.call(self.tool.name, arguments, ctx)
        if result.is_error:
            raise tool_failure(self.server, self.tool.name, result)
        return result

    def __repr__(self) -> str:
        return f"RemoteSkill({self._name!r} -> {self.server}:{self.tool.name})"


def build_skills(
    adapters: Sequence[Upstream], previous: Sequence[RemoteSkill] = ()
) -> tuple[list[RemoteSkill], list[str]]:
    """The skills of every adapter's current tools, and the name collisions that were resolved.

    A skill whose name and upstream definition are unchanged is the same object as before, so
    the Catalog sees no change (and sends no `tools/list_changed`) when nothing changed.
    """
    names, collisions = assign_names(
        (adapter.name, adapter.config.namespace, tool.name) for adapter in adapters for tool in adapter.tools
    )
    old = {(s.server, s.tool.name): s for s in previous}
    out: list[RemoteSkill] = []
    for adapter in adapters:
        for tool in adapter.tools:
            name = names[(adapter.name, tool.name)]
            before = old.get((adapter.name, tool.name))
            if before is not None and before.adapter is adapter and before.name == name and before.tool == tool:
                out.append(before)
            else:
                out.append(RemoteSkill(name, adapter, tool))
    return out, collisions
