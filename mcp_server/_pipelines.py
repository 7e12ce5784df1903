"""The pipeline side of the MCP face: meta tools and the `pipeline://` and `run://` resources.

Meta tools are the server's own tools (not skills): `validate_pipeline` checks YAML text and
returns every issue or the help text; `register_pipeline` saves a valid pipeline into the home
and publishes it at once (clients get `tools/list_changed`); `create_skill` has a model write,
a reviewer approve and the skill's own tests pass a new skill before it is published;
`plan_and_run` has a model write, verify, run and review a pipeline for a request.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp_types import CallToolResult, ToolAnnotations
from mcp_types import Tool as MCPTool

from skills._schema import ANY_JSON, nullable
from skills.errors import clip

from ._agents import AGENT_TOOLS
from ._meta import MetaTool, structured
from ._resources import read_skill_file
from ._results import error_result
from ._stepping import RUN_TOOLS

if TYPE_CHECKING:
    from pipelines.service import PipelineService
    from skills import SkillContext

__all__ = ["META_TOOLS", "MetaTool", "read_pipeline_resource"]

_ISSUE = {
    "type": "object",
    "properties": {
        "line": {"type": "integer"},
        "col": {"type": "integer"},
        "severity": {"type": "string", "enum": ["error", "warning"]},
        "message": {"type": "string"},
        "hint": {"type": "string"},
        "code": {"type": "string"},
    },
}
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
_YAML_INPUT = {
    "type": "string",
    "description": "The pipeline file's YAML text (the format: the pipeline-authoring skill, or docs/pipelines.md).",
}


_structured = structured  # the name other modules import


def _issues(issues: list[Any]) -> list[dict[str, Any]]:
    return [
        {"line": i.line, "col": i.col, "severity": i.severity, "message": i.message, "hint": i.hint, "code": i.code}
        for i in issues
    ]


async def _validate(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pipelines._help_ai import cached_overview, text_hash, with_overview

    spec, issues = service.check(args["yaml"], args.get("file") or "<pipeline>")
    errors = [i for i in issues if i.severity == "error"]
    data: dict[str, Any] = {"valid": spec is not None and not errors, "issues": _issues(issues)}
    if spec is not None and not errors:
        data["id"] = spec.id
        text = args["yaml"] if args["yaml"].endswith("\n") else args["yaml"] + "\n"
        data["help"] = with_overview(spec, cached_overview(service.home.cache_dir, text_hash(text)))  # no model call
    else:
        data["report"] = "\n".join(str(i) for i in issues)
    return _structured(data)


async def _register(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pipelines._help_ai import improved_help, text_hash
    from pipelines.describe import help_text
    from pipelines.errors import PipelineError, VerificationError

    text = args["yaml"] if args["yaml"].endswith("\n") else args["yaml"] + "\n"
    spec, issues = service.check(text, "<register_pipeline>")
    help_ = None
    taken = spec is not None and (service.home.pipelines_dir / f"{spec.id}.yaml").exists() and not args.get("overwrite")
    if spec is not None and not taken and not any(i.severity == "error" for i in issues):
        # Before publishing: the tool description then carries the improved help from the start.
        help_ = await improved_help(spec, text_hash(text), ctx, cache_dir=service.home.cache_dir, source=text)
    try:
        skill = await service.register(text, overwrite=bool(args.get("overwrite")))
    except VerificationError as exc:
        report = "\n".join(str(i) for i in exc.issues)
        errors = [i for i in exc.issues if i.severity == "error"] or exc.issues
        first = errors[0] if errors else None
        return error_result(
            f"pipeline not registered: {len(errors)} problem(s)\n{report}",
            (first.hint if first and first.hint else "fix the problems and register again")
            + "; validate_pipeline checks a pipeline without saving it",
            error_type="invalid_arguments",
            where=f"yaml:{first.line}:{first.col}" if first else "yaml",
            report={"registered": False, "issues": _issues(exc.issues), "report": report},
        )
    except PipelineError as exc:
        return error_result(
            f"pipeline not registered: {exc.message}",
            exc.hint,
            error_type="invalid_arguments",
            where="yaml",
            report={"registered": False, "issues": [], "report": str(exc)},
        )
    data = {"registered": True, "id": skill.name, "file": str(skill.file), "help": help_ or help_text(skill.spec)}
    return _structured(data)


async def _create_skill(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pydantic import ValidationError

    from skills import SkillsError
    from skills.creator import TestCase, create_skill

    try:
        tests = [TestCase.model_validate(case) for case in args.get("test_cases") or []]
    except ValidationError as exc:
        return error_result(
            f"test_cases: {clip(str(exc), 1000)}",
            "each case is {arguments: {...}, expected: ...} or with checks",
            error_type="invalid_arguments",
            where="test_cases",
        )

    async def refresh_pipelines() -> None:  # pipelines that called the missing skill verify now
        await service.catalog.refresh(service.sources)

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
    except SkillsError as exc:
        return error_result(exc)
    data = creation.as_dict()
    if creation.created:
        return _structured(data)
    return error_result(
        f"skill not created (stopped at the {data['stage']} stage): " + "; ".join(map(str, data["reasons"])),
        "the result's files and tests show what was made; change the request or give test_cases and call again",
        error_type="skill_failed",
        where=f"stage {data['stage']}",
        report=data,
    )


async def _plan_and_run(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pipelines.planner import plan_and_run
    from skills import SkillsError

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
    except SkillsError as exc:
        return error_result(exc)
    if data["status"] != "failed":
        return _structured(data)
    issues = [str(i) for i in data.get("issues") or []]
    return error_result(
        "plan_and_run failed: " + ("; ".join(issues) or "no pipeline could be written and run for the request"),
        "the result's pipeline_yaml and history show how far it got; rephrase the request or raise max_fixes",
        error_type="skill_failed",
        where=f"iteration {data.get('iterations', 0)}",
        report=data,
    )


META_TOOLS: dict[str, MetaTool] = {
    "validate_pipeline": MetaTool(
        MCPTool(
            name="validate_pipeline",
            title="Validate a pipeline",
            description="Check a pipeline's YAML text without running it: every problem at once with line, column "
            "and a hint (YAML syntax, unknown keys, undefined variables, unknown skills, cycles, arguments that "
            "do not fit a skill), or, when it is valid, its help text. Use it while writing a pipeline.",
            input_schema={
                "type": "object",
                "properties": {"yaml": _YAML_INPUT, "file": {"type": "string", "description": "Name for messages."}},
                "required": ["yaml"],
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "valid": {"type": "boolean"},
                    "issues": {"type": "array", "items": _ISSUE},
                    "help": {"type": "string"},
                    "id": {"type": "string"},
                    "report": {"type": "string"},
                },
                "required": ["valid", "issues"],
            },
            annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
        ),
        _validate,
    ),
    "register_pipeline": MetaTool(
        MCPTool(
            name="register_pipeline",
            title="Register a pipeline",
            description="Validate a pipeline's YAML text, save it into the orchestrator home (pipelines/<id>.yaml) "
            "and publish it at once as a tool named by its id. Refuses a pipeline with errors (they are returned) "
            "and an existing id unless overwrite is true.",
            input_schema={
                "type": "object",
                "properties": {
                    "yaml": _YAML_INPUT,
                    "overwrite": {"type": "boolean", "default": False, "description": "Replace a registered one."},
                },
                "required": ["yaml"],
                "additionalProperties": False,
            },
            output_schema={
                "type": "object",
                "properties": {
                    "registered": {"type": "boolean"},
                    "id": {"type": "string"},
                    "file": {"type": "string"},
                    "help": {"type": "string"},
                    "issues": {"type": "array", "items": _ISSUE},
                    "report": {"type": "string"},
                },
                "required": ["registered"],
            },
            annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
        ),
        _register,
    ),
    "create_skill": MetaTool(
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
                },
                "required": ["created", "stage", "reasons"],
            },
            annotations=ToolAnnotations(
                read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
            ),
        ),
        _create_skill,
        long_running=True,
    ),
    "plan_and_run": MetaTool(
        MCPTool(
            name="plan_and_run",
            title="Plan and run",
            description="Have a model write a pipeline for a request from the available skills, fix it until the "
            "verifier accepts it, run it, and let a reviewer model judge the outputs; on `needs_fix` the model "
            "revises the pipeline and it runs again, up to max_iterations. Returns the status (complete, needs_fix, "
            "failed), the final pipeline YAML, its outputs and run id; can register the final pipeline as a tool.",
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
                },
                "required": ["status", "iterations", "pipeline_yaml"],
            },
            annotations=ToolAnnotations(
                read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
            ),
        ),
        _plan_and_run,
        long_running=True,
    ),
}


META_TOOLS.update(AGENT_TOOLS)
META_TOOLS.update(RUN_TOOLS)


def read_pipeline_resource(service: PipelineService, uri: str) -> tuple[str | bytes, str]:
    """`pipeline://<id>` (YAML), `pipeline://<id>/graph` (Mermaid), `run://<run_id>/<path>` (artifacts)."""
    from pipelines.describe import mermaid

    if uri.startswith("pipeline://"):
        rest = uri[len("pipeline://") :]
        pipeline_id, _, tail = rest.partition("/")
        try:
            skill = service.pipeline(pipeline_id)
        except Exception as exc:  # PipelineError: not a pipeline
            raise ResourceNotFoundError(f"no pipeline '{clip(pipeline_id, 64)}'") from exc
        if tail == "":
            return skill.body(), "application/yaml"
        if tail == "graph":
            return mermaid(skill.spec), "text/vnd.mermaid"
        raise ResourceNotFoundError(
            f"unknown pipeline resource '{clip(tail)}': use pipeline://<id> or pipeline://<id>/graph"
        )
    run_id, _, rel = uri[len("run://") :].partition("/")
    record = service.store.get(run_id)
    if record is None or not record.artifacts:
        raise ResourceNotFoundError(f"no run '{clip(run_id, 64)}'")
    root = Path(record.artifacts)
    if not root.is_dir():
        raise ResourceNotFoundError(f"run {run_id} has no artifacts yet")
    return read_skill_file(root, rel)
