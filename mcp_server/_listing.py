"""The resources and prompts `OrchestratorServer` serves (private to mcp_server): skills' files,
pipelines' YAML and graphs, runs' artifacts, and instructions skills as prompts. Plain functions of
the Catalog and the pipeline service, so app.py keeps the protocol handlers only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    GetPromptResult,
    PromptMessage,
    TextContent,
)
from mcp_types import Prompt as MCPPrompt
from mcp_types import PromptArgument as MCPPromptArgument
from mcp_types import (
    Resource as MCPResource,
)
from mcp_types import (
    ResourceTemplate as MCPResourceTemplate,
)

from skills import (
    Catalog,
)
from skills.core.errors import clip

from ._app_ui import RUN_APP_MIME, RUN_APP_URI, run_app_html
from ._calls import LOG_ORDER as LOG_ORDER
from ._calls import (
    RUN_APP_RESOURCE,
    unknown_prompt_hint,
)
from ._pipelines import read_pipeline_resource
from ._resources import read_skill_file

if TYPE_CHECKING:
    from pipelines.service import PipelineService


def resources_of(catalog: Catalog, pipelines: PipelineService | None) -> list[MCPResource]:
    """resources/list: each skill's SKILL.md, each pipeline's YAML, the run viewer app (when pipelines run here)."""
    return (
        [
            MCPResource(
                uri=f"skill://{skill.name}/SKILL.md",
                name=skill.name,  # the frontmatter name (SEP-2640: clients match the two)
                title=f"{skill.title or skill.name}: SKILL.md",
                description=skill.description,
                mime_type="text/markdown",
            )
            for skill in catalog
            if skill.root is not None
        ]
        + [
            MCPResource(
                uri=f"pipeline://{skill.name}",
                name=f"pipeline {skill.name}",
                title=f"{skill.title or skill.name} (pipeline YAML)",
                description=f"Source of the pipeline {skill.name}; its graph is pipeline://{skill.name}/graph.",
                mime_type="application/yaml",
            )
            for skill in catalog
            if skill.kind == "pipeline"
        ]
        + ([RUN_APP_RESOURCE] if pipelines is not None else [])  # no pipelines, no runs to show
    )


def resource_templates() -> list[MCPResourceTemplate]:
    """resources/templates/list: a skill's files, a pipeline's graph, a run's artifacts."""
    return [
        MCPResourceTemplate(
            uri_template="skill://{name}/{path}",
            name="skill-file",
            title="A file bundled with a skill",
            description="SKILL.md or any bundled file (references/, scripts/, assets/) of a skill.",
        ),
        MCPResourceTemplate(
            uri_template="pipeline://{id}/graph",
            name="pipeline-graph",
            title="A pipeline's graph (Mermaid)",
            description="The compiled control flow of a pipeline as a Mermaid flowchart.",
            mime_type="text/vnd.mermaid",
        ),
        MCPResourceTemplate(
            uri_template="run://{run_id}/{path}",
            name="run-artifact",
            title="A file a pipeline run wrote",
            description="Artifacts of a run (pipelines/<id>/runs/<run_id>/ in the home).",
        ),
    ]


def read_resource_text(
    catalog: Catalog, pipelines: PipelineService | None, text: str, viewer: str
) -> list[ReadResourceContents]:
    """One resource by its URI, as `viewer` may see it (a run's artifacts are its owner's)."""
    if text == RUN_APP_URI:
        return [ReadResourceContents(content=run_app_html(), mime_type=RUN_APP_MIME)]
    if text.startswith(("pipeline://", "run://")) and pipelines is not None:
        content, mime = read_pipeline_resource(pipelines, text, viewer)
        return [ReadResourceContents(content=content, mime_type=mime)]
    if not text.startswith("skill://"):
        raise ResourceNotFoundError(
            f"unknown resource {clip(text)}: this server serves skill://, pipeline:// and run:// resources"
        )
    name, _, rel = text[len("skill://") :].partition("/")
    skill = catalog.find(name)
    if skill is None or skill.root is None:
        raise ResourceNotFoundError(f"no skill named '{clip(name, 64)}' with files (from {clip(text)})")
    content, mime = read_skill_file(skill.root, rel or "SKILL.md", getattr(skill, "boundary", None))
    return [ReadResourceContents(content=content, mime_type=mime)]


def prompts_of(catalog: Catalog) -> list[MCPPrompt]:
    """prompts/list: every instructions skill, with an optional `task`."""
    return [
        MCPPrompt(
            name=skill.name,
            title=skill.title,
            description=skill.description,
            arguments=[
                MCPPromptArgument(name="task", description="What to do with these instructions", required=False)
            ],
        )
        for skill in catalog
        if skill.kind == "instructions"
    ]


def prompt_of(catalog: Catalog, name: str, arguments: dict[str, Any] | None) -> GetPromptResult:
    """prompts/get: the instructions skill's body, its bundled files and the task."""
    skill = catalog.find(name)
    if skill is None or skill.kind != "instructions":
        hint = unknown_prompt_hint(name, [s.name for s in catalog if s.kind == "instructions"])
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"no prompt named '{clip(name, 64)}' ({hint})",
            data={"name": clip(name, 64)},
        )
    task = (arguments or {}).get("task")
    text = skill.body()
    files = skill.files()
    if len(files) > 1:
        text += "\n\nBundled files (read them as resources): " + ", ".join(
            f"skill://{skill.name}/{f}" for f in files if f != "SKILL.md"
        )
    if task:
        text += f"\n\nTask: {task}"
    return GetPromptResult(
        description=skill.description,
        messages=[PromptMessage(role="user", content=TextContent(type="text", text=text))],
    )
