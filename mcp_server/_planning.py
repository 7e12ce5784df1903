"""Meta tools that make things with a model: `create_skill` (a new skill, reviewed and tested) and
`plan_and_run` (a pipeline written, verified, run and reviewed for a request).

Both are long work (`long_running`): the task machinery may run them as MCP tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp_types import CallToolResult, ToolAnnotations
from mcp_types import Tool as MCPTool

from skills.core.errors import ERROR_BODY_SCHEMA, clip
from skills.core.schema import ANY_JSON, nullable

from ._meta import MetaTool, structured
from ._results import error_result

if TYPE_CHECKING:
    from pipelines.service import PipelineService
    from skills import SkillContext

__all__ = ["MODEL_TOOLS"]

_REVIEW = {
    "type": "object",
    "description": "The checkpoint review of the last run (seed 004's CheckpointAssessment).",
    "properties": {
        "verdict": {"type": "string", "enum": ["complete", "needs_fix"]},
        "reasoning": {"type": "string"},
        "issues": {"type": "array", "items": {"type": "string"}},
        "fix_instructions": {"type": "array", "items": {"type": "string"}},
    },
}


async def _create_skill(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pydantic import ValidationError

    from skills import SkillsError
    from skills.creation.creator import TestCase, create_skill

    try:
        cases: list[Any] = args.get("test_cases") or []
        tests = [TestCase.model_validate(case) for case in cases]
    except ValidationError as exc:
        message = f"test_cases: {clip(str(exc), 1000)}"
        return error_result(
            message,
            "each case is {arguments: {...}, expected: ...} or with checks",
            error_type="invalid_arguments",
            where="test_cases",
            output_schema=CREATE.tool.output_schema,
            report={"created": False, "stage": "request", "reasons": [message]},
        )

    async def refresh_pipelines() -> None:  # pipelines that called the missing skill verify now
        await service.catalog.refresh(list(service.sources))

    try:
        creation = await create_skill(
            args["request"],
            home=service.home,
            catalog=service.catalog,
            ctx=ctx,
            name=args.get("name"),
            test_cases=tests,
            overwrite=bool(args.get("overwrite")),
            also_refresh=refresh_pipelines,
        )
    except SkillsError as exc:  # before any stage ran (no model, a name taken)
        report = {"created": False, "stage": "request", "reasons": [exc.message]}
        return error_result(exc, output_schema=CREATE.tool.output_schema, report=report)
    data = creation.as_dict()
    if creation.created:
        return structured(data)
    return error_result(
        f"skill not created (stopped at the {data['stage']} stage): " + "; ".join(map(str, data["reasons"])),
        "the result's files and tests show what was made; change the request or give test_cases and call again",
        error_type="skill_failed",
        where=f"stage {data['stage']}",
        output_schema=CREATE.tool.output_schema,
        report=data,
    )


async def _plan_and_run(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    """Only a `complete` plan is a success: `needs_fix` and `failed` are the error envelope, with
    the plan's result (last run id and outputs, the review's issues, history, usage) beside it."""
    from pipelines.planning.planner import incomplete, plan_and_run
    from skills import SkillsError

    schema = PLAN.tool.output_schema
    try:
        data = await plan_and_run(
            service,
            args["request"],
            ctx,
            inputs=args.get("inputs"),
            max_iterations=int(args.get("max_iterations", 3)),
            max_fixes=int(args.get("max_fixes", 3)),
            register_as=args.get("register_as"),
            register=bool(args.get("register")),
            overwrite=bool(args.get("overwrite")),
            create_missing=bool(args.get("create_missing")),
        )
    except SkillsError as exc:  # before a pipeline was written (no model)
        report = {"status": "failed", "iterations": 0, "pipeline_yaml": "", "issues": [exc.message]}
        return error_result(exc, output_schema=schema, report=report)
    failure = incomplete(data)
    if failure is None:
        return structured(data)
    return error_result(failure, output_schema=schema)


CREATE = MetaTool(
    MCPTool(
        name="create_skill",
        title="Create a skill",
        description="Have a model write a new skill for a request (atomize, plan, execute, aggregate: SKILL.md, "
        "skill.yaml, a Python script and its test cases), then a reviewer model check it and its tests run in "
        "the script sandbox. Only a skill that passes all three is saved into the orchestrator home and "
        "published at once as a tool; otherwise the result says at which stage and why, with the files.",
        input_schema={
            "type": "object",
            "properties": {
                "request": {"type": "string", "minLength": 1, "description": "What the skill should do."},
                "name": {
                    "type": "string",
                    "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$",
                    "maxLength": 64,
                    "description": "The skill's name (lowercase, hyphens); the model picks one when omitted.",
                },
                "test_cases": {
                    "type": "array",
                    "maxItems": 20,
                    "description": "Calls the skill must pass: {arguments, expected} (expected: the result "
                    "fields that must match) or {arguments, checks: [{path, equals|contains|type|min|max|length|"
                    "matches}]}; the model writes its own when omitted.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "arguments": {"type": "object"},
                            "expected": {**ANY_JSON, "description": "Result fields that must match."},
                            "checks": {"type": "array", "items": {"type": "object"}},
                            "error": {"type": "boolean"},
                        },
                        "required": ["arguments"],
                    },
                },
                "overwrite": {"type": "boolean", "default": False, "description": "Replace a skill of that name."},
            },
            "required": ["request"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "created": {"type": "boolean"},
                "stage": {"type": "string"},
                "name": nullable({"type": "string"}),
                "reasons": {"type": "array", "items": {"type": "string"}},
                "files": {"type": "object", "additionalProperties": {"type": "string"}},
                "tests": {"type": "array", "items": {"type": "object"}},
                "tests_passed": {"type": "integer"},
                "tests_total": {"type": "integer"},
                "review": nullable({"type": "object"}),
                "usage": {"type": "object"},
                "path": {"type": "string"},
                "published": {"type": "boolean"},
                "error": ERROR_BODY_SCHEMA,
            },
            "required": ["created", "stage", "reasons"],
        },
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
        ),
    ),
    _create_skill,
    long_running=True,
)


PLAN = MetaTool(
    MCPTool(
        name="plan_and_run",
        title="Plan and run",
        description="Have a model write a pipeline for a request from the available skills, fix it until the "
        "verifier accepts it, run it, and let a reviewer model judge the outputs; on `needs_fix` the model "
        "revises the pipeline and it runs again, up to max_iterations. Returns the status (complete), the final "
        "pipeline YAML, its outputs and run id; can register the final pipeline as a tool. Anything short of "
        "complete (needs_fix, failed) is an error whose result still holds the last run, the review's issues and "
        "the usage.",
        input_schema={
            "type": "object",
            "properties": {
                "request": {"type": "string", "minLength": 1, "description": "What should be done."},
                "inputs": {"type": "object", "description": "Inputs to run the pipeline with (optional)."},
                "max_iterations": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                "max_fixes": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 10,
                    "default": 3,
                    "description": "Rounds of verifier errors sent back to the model per iteration.",
                },
                "register_as": {
                    "type": "string",
                    "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$",
                    "maxLength": 64,
                    "description": "Register the final pipeline, when complete, as a tool of this id.",
                },
                "register": {"type": "boolean", "default": False, "description": "Register it under its own id."},
                "overwrite": {"type": "boolean", "default": False, "description": "Replace a registered one."},
                "create_missing": {
                    "type": "boolean",
                    "default": False,
                    "description": "Create (at most 2) skills the pipeline needs that do not exist (create_skill).",
                },
            },
            "required": ["request"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": ["complete", "needs_fix", "failed"]},
                "iterations": {"type": "integer"},
                "pipeline_yaml": {"type": "string"},
                "pipeline_id": nullable({"type": "string"}),
                "outputs": {**ANY_JSON, "description": "The final run's outputs."},
                "run_id": nullable({"type": "string"}),
                "review": nullable(_REVIEW),
                "history": {"type": "array", "items": {"type": "object"}},
                "issues": {"type": "array", "items": {"type": "string"}},
                "usage": {"type": "object"},
                "registered": {"type": "boolean"},
                "tool": {"type": "string"},
                "register_error": {"type": "string"},
                "error": ERROR_BODY_SCHEMA,
            },
            "required": ["status", "iterations", "pipeline_yaml"],
        },
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
        ),
    ),
    _plan_and_run,
    long_running=True,
)


MODEL_TOOLS: dict[str, MetaTool] = {"create_skill": CREATE, "plan_and_run": PLAN}
