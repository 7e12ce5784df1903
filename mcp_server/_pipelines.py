"""The pipeline side of the MCP face: meta tools and the `pipeline://` and `run://` resources.

Meta tools are the server's own tools (not skills): `validate_pipeline` checks YAML text and
returns every issue or the help text; `register_pipeline` saves a valid pipeline into the home
and publishes it at once (clients get `tools/list_changed`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from mcp_types import Tool as MCPTool

from ._resources import read_skill_file

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
_YAML_INPUT = {"type": "string", "description": "The pipeline file's YAML text (SPEC section 4)."}


@dataclass(frozen=True)
class MetaTool:
    """A tool of the server itself."""

    tool: MCPTool
    handler: Callable[[PipelineService, dict[str, Any], SkillContext], Awaitable[CallToolResult]]


def _structured(data: dict[str, Any], *, error: bool = False) -> CallToolResult:
    import json

    text = json.dumps(data, ensure_ascii=False, indent=1)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data, is_error=error)


def _issues(issues: list[Any]) -> list[dict[str, Any]]:
    return [
        {"line": i.line, "col": i.col, "severity": i.severity, "message": i.message, "hint": i.hint, "code": i.code}
        for i in issues
    ]


async def _validate(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pipelines.describe import help_text

    spec, issues = service.check(args["yaml"], args.get("file") or "<pipeline>")
    errors = [i for i in issues if i.severity == "error"]
    data: dict[str, Any] = {"valid": spec is not None and not errors, "issues": _issues(issues)}
    if spec is not None and not errors:
        data["id"] = spec.id
        data["help"] = help_text(spec)
    else:
        data["report"] = "\n".join(str(i) for i in issues)
    return _structured(data)


async def _register(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pipelines.describe import help_text
    from pipelines.errors import PipelineError, VerificationError

    try:
        skill = await service.register(args["yaml"], overwrite=bool(args.get("overwrite")))
    except VerificationError as exc:
        report = "\n".join(str(i) for i in exc.issues)
        return _structured({"registered": False, "issues": _issues(exc.issues), "report": report}, error=True)
    except PipelineError as exc:
        return _structured({"registered": False, "issues": [], "report": str(exc)}, error=True)
    return _structured({"registered": True, "id": skill.name, "file": str(skill.file), "help": help_text(skill.spec)})


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
}


def read_pipeline_resource(service: PipelineService, uri: str) -> tuple[str | bytes, str]:
    """`pipeline://<id>` (YAML), `pipeline://<id>/graph` (Mermaid), `run://<run_id>/<path>` (artifacts)."""
    from pipelines.describe import mermaid

    if uri.startswith("pipeline://"):
        rest = uri[len("pipeline://") :]
        pipeline_id, _, tail = rest.partition("/")
        try:
            skill = service.pipeline(pipeline_id)
        except Exception as exc:  # PipelineError: not a pipeline
            raise ResourceNotFoundError(f"no pipeline '{pipeline_id}'") from exc
        if tail == "":
            return skill.body(), "application/yaml"
        if tail == "graph":
            return mermaid(skill.spec), "text/vnd.mermaid"
        raise ResourceNotFoundError(f"unknown pipeline resource '{tail}': use pipeline://<id> or pipeline://<id>/graph")
    run_id, _, rel = uri[len("run://") :].partition("/")
    record = service.store.get(run_id)
    if record is None or not record.artifacts:
        raise ResourceNotFoundError(f"no run '{run_id}'")
    root = Path(record.artifacts)
    if not root.is_dir():
        raise ResourceError(f"run {run_id} has no artifacts yet")
    return read_skill_file(root, rel)
