"""Meta tools that put agents to work: `spawn_agent` (a sub-agent by role) and `orchestrate` (router).

`spawn_agent {role, task, context, ...}` is seed 002's spawn_subagent: one agent of a role of
the home's `agents/roles.yaml`, its settings narrowed by the call (limits only lowered, the
allow-list only narrowed), its result the agent result plus `role`. `orchestrate {request}`
lets the cheap `validation` model route a request to one skill call, one agent, or the planner
(`pipelines.planning.router`). Both are long work (`long_running`): the task machinery may run them as
MCP tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp_types import CallToolResult, ToolAnnotations
from mcp_types import Tool as MCPTool

from skills import ArgumentsError, SkillsError
from skills.core.errors import ERROR_BODY_SCHEMA, FieldError
from skills.core.models import UnknownModelError, model_access
from skills.core.schema import ANY_JSON
from skills.executors.agent import agent_output_schema

from ._meta import MetaTool, structured
from ._results import error_result

if TYPE_CHECKING:
    from pipelines.service import PipelineService
    from skills import SkillContext

__all__ = ["AGENT_TOOLS"]

MAX_TEXT = 200_000
"""Most characters of a request, task or context a client may send (a model reads it whole)."""
_LIMITS = {
    "type": "object",
    "description": "Lower the role's limits for this agent (a value above the role's is capped to it).",
    "properties": {
        "max_iterations": {"type": "integer", "minimum": 1, "description": "Most model turns."},
        "max_tokens": {"type": "integer", "minimum": 100, "description": "Most tokens, all turns."},
        "max_cost_usd": {"type": "number", "exclusiveMinimum": 0, "description": "Most US dollars."},
        "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "Wall-clock seconds."},
        "max_output_tokens": {"type": "integer", "minimum": 16, "description": "Most tokens of one answer."},
    },
    "additionalProperties": False,
}
_TALLY = {
    "input_tokens": {"type": "integer"},
    "output_tokens": {"type": "integer"},
    "total_tokens": {"type": "integer"},
    "cost_usd": {"type": "number"},
    "calls": {"type": "integer"},
}


async def _spawn(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from skills.executors.spawn import spawn_agent

    given: dict[str, Any] = dict(args.get("limits") or {})
    for key in ("skills", "model", "thinking"):
        if args.get(key) is not None:
            given[key] = args[key]
    schema = SPAWN.tool.output_schema
    try:
        if "model" in given:
            _known_model(ctx, given["model"])
        data = await spawn_agent(args["role"], args["task"], ctx, context=args.get("context") or "", given=given)
    except SkillsError as exc:
        return error_result(exc, output_schema=schema)
    return structured(data)


def _known_model(ctx: SkillContext, model: str) -> None:
    try:
        model_access(ctx.extras).resolve(model)
    except UnknownModelError as exc:
        raise ArgumentsError("spawn_agent", [FieldError("model", exc.message)], hint=exc.hint) from None


async def _orchestrate(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    """Only routed work that succeeded is a success; any other end is the error envelope, with the
    route, the work's result and the usage (the router's included) beside it."""
    from pipelines.planning.router import orchestrate, orchestrate_failure

    schema = ORCHESTRATE.tool.output_schema
    try:
        data = await orchestrate(
            service,
            args["request"],
            ctx,
            context=args.get("context") or "",
            inputs=args.get("inputs"),
            max_iterations=int(args.get("max_iterations", 3)),
        )
    except SkillsError as exc:
        return error_result(exc, where=exc.where or "the routed work", output_schema=schema)
    failure = orchestrate_failure(data)
    if failure is not None:
        return error_result(failure, output_schema=schema)
    return structured(data)


SPAWN = MetaTool(
    MCPTool(
        name="spawn_agent",
        title="Spawn an agent",
        description="Start one sub-agent of a named role (code-reviewer, researcher, data-extractor, or a role "
        "of the orchestrator home's agents/roles.yaml) on a focused task: the role sets its model, the skills it "
        "may call, its limits, extended thinking and instructions; the arguments may only lower its limits and "
        "narrow its skills. Returns the agent's structured result: status (success or the limit that stopped "
        "it), output, summary, confidence, tokens, cost_usd, duration_s, iterations.",
        input_schema={
            "type": "object",
            "properties": {
                "role": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The agent role."},
                "task": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TEXT,
                    "description": "What the agent should accomplish.",
                },
                "context": {
                    "type": "string",
                    "maxLength": MAX_TEXT,
                    "description": "Background the agent should know (optional).",
                },
                "limits": _LIMITS,
                "skills": {
                    "type": "array",
                    "items": {"type": "string"},
                    "maxItems": 200,
                    "description": "Narrow the role's allow-list to these skills (each must be allowed by the role).",
                },
                "model": {
                    "type": "string",
                    "maxLength": 128,
                    "description": "Another model role or id for this agent.",
                },
                "thinking": {"type": "boolean", "description": "Extended thinking on or off (the role's default)."},
            },
            "required": ["role", "task"],
            "additionalProperties": False,
        },
        output_schema=(
            lambda base: {
                **base,
                "properties": {**base["properties"], "role": {"type": "string"}},
                "required": [*base["required"], "role"],
            }
        )(agent_output_schema(None)),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
    ),
    _spawn,
    long_running=True,
)

ORCHESTRATE = MetaTool(
    MCPTool(
        name="orchestrate",
        title="Orchestrate a request",
        description="Say what you want in plain words: a cheap model (the `validation` role) routes the request "
        "to ONE skill call (with its arguments), ONE agent of a role, or the planner (plan_and_run writes, runs "
        "and reviews a pipeline); if the routing fails in any way the planner takes it. Returns the route, why, "
        "the work's result and the usage of the router and the work, summed.",
        input_schema={
            "type": "object",
            "properties": {
                "request": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TEXT,
                    "description": "What should be done.",
                },
                "context": {
                    "type": "string",
                    "maxLength": MAX_TEXT,
                    "description": "Background that helps (optional).",
                },
                "inputs": {"type": "object", "description": "Inputs for a pipeline the planner writes (optional)."},
                "max_iterations": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
            },
            "required": ["request"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "request": {"type": "string"},
                "route": {"type": "string", "enum": ["skill", "agent", "planner"]},
                "routed_by": {
                    "type": "string",
                    "enum": ["model", "fallback"],
                    "description": "`fallback`: the routing failed and the planner took the request.",
                },
                "reason": {"type": "string", "description": "The router's reason."},
                "fallback_reason": {"type": "string", "description": "Why the routing failed."},
                "skill": {"type": "string"},
                "arguments": {"type": "object"},
                "role": {"type": "string"},
                "task": {"type": "string"},
                "result": {**ANY_JSON, "description": "The skill's result, the agent's, or plan_and_run's."},
                "usage": {
                    "type": "object",
                    "description": "Tokens and cost: the total, and the router's and the work's apart.",
                    "properties": {
                        **_TALLY,
                        "router": {"type": "object", "properties": _TALLY},
                        "work": {"type": "object", "properties": _TALLY},
                    },
                },
                "error": ERROR_BODY_SCHEMA,
            },
            "required": ["request", "route", "routed_by", "usage"],
        },
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
    ),
    _orchestrate,
    long_running=True,
)

AGENT_TOOLS: dict[str, MetaTool] = {"spawn_agent": SPAWN, "orchestrate": ORCHESTRATE}
