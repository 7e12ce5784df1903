"""What a meta tool is: a tool of the server itself, and how it joins the Catalog.

Meta tools live in their own modules by subject — `_pipelines` (validate, register, create,
plan), `_agents` (spawn_agent, orchestrate), `_stepping` (run_pipeline step by step) — and
`_pipelines.META_TOOLS` gathers them. `MetaSource` publishes them as Skills of kind "meta" in the
Catalog like every other source, so the server lists, pages, filters and calls them through the
one path every skill takes (the reserved names are theirs: `skills.RESERVED_NAMES`). The
catalogue mode's tools (`_catalogue.CatalogueSource`) are `MetaSkill`s too.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mcp_types import CallToolResult, InputRequiredResult, TextContent
from mcp_types import Tool as MCPTool

if TYPE_CHECKING:
    from pipelines.service import PipelineService
    from skills import LoadProblem, Skill, SkillContext

__all__ = ["CallOutcome", "Caller", "MetaSkill", "MetaSource", "MetaTool", "OwnTools", "Relay", "structured"]

CallOutcome = CallToolResult | InputRequiredResult | dict[str, Any]
"""What a `tools/call` answers: its result, an input round, or a task (the tasks extension's dict)."""
Caller = Callable[[str, dict[str, Any]], Awaitable[CallOutcome]]
"""The server's call path for one request: the call of a tool by name with its arguments."""
Relay = Callable[[dict[str, Any], Caller], Awaitable[CallOutcome]]
"""A tool whose call is the call of another tool (`call_skill`): given its arguments and the
call path, it answers with what that call answers (an input round or a task included)."""


@dataclass(frozen=True)
class MetaTool:
    """A tool of the server itself."""

    tool: MCPTool
    handler: Callable[[PipelineService, dict[str, Any], SkillContext], Awaitable[CallToolResult]]
    long_running: bool = False
    """Work that may take minutes (model loops, runs): a call of it may be run as an MCP task
    (SEP-2663 / core tasks) by the task machinery, which reads this flag."""


def structured(data: dict[str, Any]) -> CallToolResult:
    """A success result: `data` as structured content and as its JSON text."""
    text = json.dumps(data, ensure_ascii=False, indent=1)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


class MetaSkill:
    """One tool of the server itself as the Catalog holds it: a Skill of kind "meta" whose work is
    `run` (a meta tool's handler given the server's pipeline service, or a catalogue tool). Its
    result is already a `CallToolResult` (a failure report that fits its output schema, or the
    structured success), which passes through."""

    kind: Literal["meta"] = "meta"
    source: Literal["builtin"] = "builtin"
    root: Path | None = None

    def __init__(
        self,
        tool: MCPTool,
        run: Callable[[dict[str, Any], SkillContext], Awaitable[CallToolResult]],
        *,
        long_running: bool = False,
        relay: Relay | None = None,
    ) -> None:
        self._run = run
        self.name = tool.name
        self.title = tool.title
        self.description = tool.description or ""
        self.input_schema = tool.input_schema
        self.output_schema = tool.output_schema
        self.annotations = (
            tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations is not None else None
        )
        self.long_running = long_running
        """Whether a call may run as a task (the server's rule for meta tools)."""
        self.relay = relay
        """Set for a tool whose call is another tool's (`call_skill`): the call path hands it the
        call once its arguments are checked, instead of running it (`Relay`)."""

    def body(self) -> str:
        return self.description

    def files(self) -> list[str]:
        return []

    async def run(self, arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult:
        return await self._run(arguments, ctx)


class OwnTools:
    """A Catalog provider of tools of the server itself: a fixed list of skills, nothing to load,
    refresh or watch (`MetaSource`, and `_catalogue.CatalogueSource`)."""

    label = "the server's own tools"

    def __init__(self, skills: list[Skill]) -> None:
        self._skills = skills

    def skills(self) -> list[Skill]:
        return list(self._skills)

    def problems(self) -> list[LoadProblem]:
        return []

    def refresh(self) -> bool:
        return False

    def watch_paths(self) -> list[Path]:
        return []


class MetaSource(OwnTools):
    """The Catalog provider of the meta tools: fixed while the server runs, so never refreshed.

    Registered last (after skill folders, pipelines and upstream servers), so the meta tools
    close tools/list, and under names no other source may take."""

    label = "meta tools"

    def __init__(self, tools: Mapping[str, MetaTool], service: PipelineService) -> None:
        super().__init__([_meta_skill(meta, service) for meta in tools.values()])


def _meta_skill(meta: MetaTool, service: PipelineService) -> MetaSkill:
    async def run(arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult:
        return await meta.handler(service, arguments, ctx)

    return MetaSkill(meta.tool, run, long_running=meta.long_running)
