"""The pipeline side of the MCP face: meta tools and the `pipeline://` and `run://` resources.

Meta tools are the server's own tools (not skills): `validate_pipeline` checks YAML text and
returns every issue or the help text; `register_pipeline` saves a valid pipeline into the home
and publishes it at once (clients get `tools/list_changed`); with `create_missing` both first
create the skills the pipeline lacks. `META_TOOLS` gathers them with the meta tools of the other
modules: `create_skill` and `plan_and_run` (`_planning`), `spawn_agent` and `orchestrate`
(`_agents`), `run_pipeline` (`_stepping`), `list_runs`, `get_run` and `cancel_run` (`_runs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp_types import CallToolResult, ToolAnnotations
from mcp_types import Tool as MCPTool

from pipelines.storage.runs import LOCAL, may_see
from skills.core.errors import ERROR_BODY_SCHEMA, clip
from skills.core.schema import nullable

from ._agents import AGENT_TOOLS
from ._asking import ANSWER_TOOLS
from ._meta import MetaTool, structured
from ._planning import MODEL_TOOLS
from ._resources import read_skill_file
from ._results import error_result
from ._runs import RUN_META_TOOLS
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
_CREATE_MISSING = {
    "type": "boolean",
    "default": False,
    "description": "First create (at most 3) skills the pipeline calls that do not exist: a model writes each, a "
    "reviewer and its own tests in the sandbox check it (create_skill), then the pipeline is verified again.",
}
_CREATED = {
    "type": "array",
    "description": "Each skill create_missing tried to create: name, created, stage, reasons.",
    "items": {
        "type": "object",
        "properties": {
            "name": nullable({"type": "string"}),
            "created": {"type": "boolean"},
            "stage": {"type": "string"},
            "reasons": {"type": "array", "items": {"type": "string"}},
        },
    },
}
_YAML_INPUT = {
    "type": "string",
    "description": "The pipeline file's YAML text (the format: the pipeline-authoring skill, or docs/pipelines.md).",
}


def _issues(issues: list[Any]) -> list[dict[str, Any]]:
    return [
        {"line": i.line, "col": i.col, "severity": i.severity, "message": i.message, "hint": i.hint, "code": i.code}
        for i in issues
    ]


async def _checked(
    service: PipelineService, text: str, file: str, args: dict[str, Any], ctx: SkillContext
) -> tuple[Any, list[Any], dict[str, Any]]:
    """Verify `text`; with `create_missing`, create the skills it lacks first (and verify again).

    Returns the spec, its issues and what to add to the result (`created_skills`)."""
    from pipelines.planning.missing import check_creating, creation_summary

    if not args.get("create_missing"):
        spec, issues = await service.check_off_loop(text, file)
        return spec, issues, {}
    spec, issues, created = await check_creating(service, text, file, ctx)
    return spec, issues, {"created_skills": [creation_summary(c) for c in created]}


async def _validate(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pipelines.planning.help_ai import cached_overview, text_hash, with_overview

    spec, issues, extra = await _checked(service, args["yaml"], args.get("file") or "<pipeline>", args, ctx)
    errors = [i for i in issues if i.severity == "error"]
    data: dict[str, Any] = {"valid": spec is not None and not errors, "issues": _issues(issues), **extra}
    if spec is not None and not errors:
        data["id"] = spec.id
        text = args["yaml"] if args["yaml"].endswith("\n") else args["yaml"] + "\n"
        data["help"] = with_overview(spec, cached_overview(service.home.cache_dir, text_hash(text)))  # no model call
    else:
        data["report"] = "\n".join(str(i) for i in issues)
    return structured(data)


async def _register(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pipelines.errors import PipelineError, VerificationError
    from pipelines.language.describe import help_text
    from pipelines.planning.help_ai import improved_help, text_hash

    text = args["yaml"] if args["yaml"].endswith("\n") else args["yaml"] + "\n"
    spec, issues, extra = await _checked(service, text, "<register_pipeline>", args, ctx)
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
            output_schema=META_TOOLS["register_pipeline"].tool.output_schema,
            report={"registered": False, "issues": _issues(exc.issues), "report": report, **extra},
        )
    except PipelineError as exc:
        return error_result(
            f"pipeline not registered: {exc.message}",
            exc.hint,
            error_type="invalid_arguments",
            where="yaml",
            output_schema=META_TOOLS["register_pipeline"].tool.output_schema,
            report={"registered": False, "issues": [], "report": str(exc), **extra},
        )
    data = {"registered": True, "id": skill.name, "file": str(skill.file), "help": help_ or help_text(skill.spec)}
    data |= extra
    return structured(data)


META_TOOLS: dict[str, MetaTool] = {
    "validate_pipeline": MetaTool(
        MCPTool(
            name="validate_pipeline",
            title="Validate a pipeline",
            description="Check a pipeline's YAML text without running it: every problem at once with line, column "
            "and a hint (YAML syntax, unknown keys, undefined variables, unknown skills, cycles, arguments that "
            "do not fit a skill), or, when it is valid, its help text. Use it while writing a pipeline. Nothing "
            "is saved, unless create_missing: true has the skills the pipeline lacks created first.",
            input_schema={
                "type": "object",
                "properties": {
                    "yaml": _YAML_INPUT,
                    "file": {"type": "string", "description": "Name for messages."},
                    "create_missing": _CREATE_MISSING,
                },
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
                    "created_skills": _CREATED,
                },
                "required": ["valid", "issues"],
            },
            # Not read-only: with create_missing it writes (and publishes) skills.
            annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
        ),
        _validate,
    ),
    "register_pipeline": MetaTool(
        MCPTool(
            name="register_pipeline",
            title="Register a pipeline",
            description="Validate a pipeline's YAML text, save it into the orchestrator home (pipelines/<id>.yaml) "
            "and publish it at once as a tool named by its id. Refuses a pipeline with errors (they are returned) "
            "and an existing id unless overwrite is true; create_missing: true creates the skills it lacks first.",
            input_schema={
                "type": "object",
                "properties": {
                    "yaml": _YAML_INPUT,
                    "overwrite": {"type": "boolean", "default": False, "description": "Replace a registered one."},
                    "create_missing": _CREATE_MISSING,
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
                    "created_skills": _CREATED,
                    "error": ERROR_BODY_SCHEMA,
                },
                "required": ["registered"],
            },
            annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
        ),
        _register,
    ),
}


META_TOOLS.update(MODEL_TOOLS)
META_TOOLS.update(AGENT_TOOLS)
META_TOOLS.update(RUN_TOOLS)
META_TOOLS.update(RUN_META_TOOLS)
META_TOOLS.update(ANSWER_TOOLS)


def read_pipeline_resource(service: PipelineService, uri: str, viewer: str = LOCAL) -> tuple[str | bytes, str]:
    """`pipeline://<id>` (YAML), `pipeline://<id>/graph` (Mermaid), `run://<run_id>/<path>` (artifacts).

    A run's artifacts are served to the identity that started it (`viewer`, see
    `pipelines.storage.runs.may_see`) only; to any other the run does not exist (the same error as an
    unknown id, whatever the path).
    """
    from pipelines.language.describe import mermaid

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
    if record is None or not may_see(record, viewer) or not record.artifacts:
        raise ResourceNotFoundError(f"no run '{clip(run_id, 64)}'")
    root = Path(record.artifacts)
    if not root.is_dir():
        raise ResourceNotFoundError(f"run {run_id} has no artifacts yet")
    return read_skill_file(root, rel)
