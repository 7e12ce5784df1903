"""`completion/complete`: values for prompt arguments and resource-template parameters.

Claude Desktop and the Inspector ask as the user types a resource URI or a prompt argument.
Answers are prefix matches, sorted, at most `MAX_VALUES` (with `total` and `hasMore`), and never
name anything the resources would not serve: skill names with a folder, the files of that
skill, pipeline ids, the asking client's own runs that have artifacts and their files (another
identity's run is not offered, and its files complete to nothing, as for an unknown run id).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CompleteRequestParams, CompleteResult, Completion, PromptReference

from pipelines.storage.runs import LOCAL, may_see
from skills.core.errors import clip

if TYPE_CHECKING:
    from skills import Catalog

__all__ = ["MAX_VALUES", "TEMPLATES", "complete"]

MAX_VALUES = 100
"""Values in one answer (the protocol's cap)."""
_MAX_SCANNED = 2000
"""Files looked at in one run's artifact folder (a run may write many)."""
_MAX_RUNS = 500
"""Recent runs offered as run ids."""

TEMPLATES = ("skill://{name}/{path}", "pipeline://{id}/graph", "run://{run_id}/{path}")
"""The resource templates this server publishes (and completes)."""


async def complete(
    catalog: Catalog, pipelines: Any, params: CompleteRequestParams, viewer: str = LOCAL
) -> CompleteResult:
    """The completion of one argument; an unknown prompt, template or argument is -32602.

    `viewer` is the asking identity (`tasks.identity_of(...).owner`): only its runs are offered.
    """
    ref, argument = params.ref, params.argument.name
    prefix = params.argument.value
    known = (params.context.arguments if params.context else None) or {}
    if isinstance(ref, PromptReference):
        skill = catalog.find(ref.name)
        if skill is None or skill.kind != "instructions":
            raise _invalid(f"no prompt named '{clip(ref.name, 64)}'; prompts/list shows the prompts")
        if argument != "task":
            raise _invalid(f"prompt '{ref.name}' has no argument '{clip(argument, 64)}'; its argument is 'task'")
        return _answer((), prefix)  # free text: nothing to propose
    template = ref.uri
    if template == TEMPLATES[0] and argument in ("name", "path"):
        if argument == "name":
            return _answer((s.name for s in catalog if s.root is not None), prefix)
        skill = catalog.find(known.get("name", ""))
        return _answer(skill.files() if skill is not None and skill.root is not None else (), prefix)
    if template == TEMPLATES[1] and argument == "id":
        return _answer((s.name for s in catalog if s.kind == "pipeline"), prefix)
    if template == TEMPLATES[2] and argument in ("run_id", "path") and pipelines is not None:
        store = pipelines.store
        if argument == "run_id":
            records = await anyio.to_thread.run_sync(lambda: store.list(limit=_MAX_RUNS, visible_to=viewer))
            return _answer((r.run_id for r in records if r.artifacts), prefix)
        run_id = known.get("run_id", "")
        record = await anyio.to_thread.run_sync(lambda: store.get(run_id)) if run_id else None
        if record is None or not may_see(record, viewer) or not record.artifacts:
            return _answer((), prefix)
        return _answer(await anyio.to_thread.run_sync(_files, Path(record.artifacts)), prefix)
    if template not in TEMPLATES:
        raise _invalid(f"no resource template '{clip(template, 100)}'; resources/templates/list shows them")
    raise _invalid(f"template '{template}' has no parameter '{clip(argument, 64)}'")


def _answer(candidates: Iterable[str], prefix: str) -> CompleteResult:
    found = sorted({c for c in candidates if c.startswith(prefix)})
    values = found[:MAX_VALUES]
    return CompleteResult(completion=Completion(values=values, total=len(found), has_more=len(found) > len(values)))


def _files(root: Path) -> list[str]:
    """Relative POSIX paths of the files under `root` (the first `_MAX_SCANNED`), no dot-files."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if not name.startswith("."):
                found.append(Path(dirpath, name).relative_to(root).as_posix())
                if len(found) >= _MAX_SCANNED:
                    return found
    return found


def _invalid(message: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message)
