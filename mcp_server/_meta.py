"""What a meta tool is: a tool of the server itself (not a skill), and how it answers.

Meta tools live in their own modules by subject — `_pipelines` (validate, register, create,
plan), `_agents` (spawn_agent, orchestrate), `_stepping` (run_pipeline step by step) — and
`_pipelines.META_TOOLS` gathers them for the server.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_types import CallToolResult, TextContent
from mcp_types import Tool as MCPTool

if TYPE_CHECKING:
    from pipelines.service import PipelineService
    from skills import SkillContext

__all__ = ["MetaTool", "structured"]


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
