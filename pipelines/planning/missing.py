"""Missing skills, created where a pipeline needs them (seed 000, section 3: "create missing skills").

A pipeline that calls a skill nobody has written yet fails verification with `unknown-skill`.
With `create_missing` (plan_and_run, validate_pipeline, register_pipeline, `orchestrator run
--create-missing`) each such skill is created through the whole `create_skill` workflow — a
model writes it, a reviewer approves it, its own tests pass in the script sandbox, confined —
described to the model by the steps that call it (their ids and parameters) and the
pipeline's purpose; the home's skills are re-read and the pipeline is verified again. A skill
that cannot be created is reported with the stage and the reasons, and the pipeline keeps its
`unknown-skill` error. At most `limit` skills are created per call: each costs several model
calls.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import TYPE_CHECKING, Any

from skills import SkillContext

from ..errors import Issue

if TYPE_CHECKING:
    from skills.creation.creator import Creation

    from ..language.spec import PipelineSpec
    from ..service import PipelineService

__all__ = ["MAX_CREATED", "check_creating", "create_missing_skills", "creation_summary", "missing_names"]

MAX_CREATED = 3
"""Skills one validate_pipeline, register_pipeline or `run --create-missing` creates at most."""
_UNKNOWN_SKILL = re.compile(r"unknown skill '([^']+)'")


def missing_names(issues: list[Issue]) -> list[str]:
    """The skills the verifier reported unknown, in order, once each."""
    found = (_UNKNOWN_SKILL.search(i.message) for i in issues if i.code == "unknown-skill")
    return list(dict.fromkeys(m.group(1) for m in found if m))


async def check_creating(
    service: PipelineService, text: str, file: str, ctx: SkillContext, *, limit: int = MAX_CREATED
) -> tuple[PipelineSpec | None, list[Issue], list[Creation]]:
    """Verify `text`; when skills are missing, create them and verify again.

    Returns the spec (None when the text does not load), the issues after the creations, and
    every creation tried (made or not).

    Raises:
        NoModelProviderError: skills are missing and no model can be asked.
    """
    spec, issues = await service.check_off_loop(text, file)
    if spec is None or not missing_names(issues):
        return spec, issues, []
    purpose = spec.description.strip() or spec.name or spec.id
    created = await create_missing_skills(service, issues, ctx, spec=spec, request=purpose, limit=limit)
    if any(c.created for c in created):
        spec, issues = await service.check_off_loop(text, file)
    return spec, issues, created


async def create_missing_skills(
    service: PipelineService,
    issues: list[Issue],
    ctx: SkillContext,
    *,
    spec: PipelineSpec | None = None,
    request: str = "",
    limit: int = 2,
    exclude: set[str] | frozenset[str] = frozenset(),
) -> list[Creation]:
    """Create (at most `limit`) skills the verifier reported unknown, described by the steps that call them.

    `exclude`: names not to try (again). Each creation is the whole `create_skill` workflow,
    review and tests included; one that fails is returned with its reasons, not raised.
    """
    from skills.creation.creator import create_skill

    created: list[Creation] = []
    quiet = dataclasses.replace(ctx, progress_fn=_no_progress)  # the caller's progress must only go up
    for name in [n for n in missing_names(issues) if n not in exclude][:limit]:
        uses = [s for s in spec.walk() if s.skill == name] if spec is not None else []
        shown = "; ".join(f"step '{s.id}' with parameters {json.dumps(s.parameters, default=str)}" for s in uses)
        ask = f"A skill named '{name}' as a pipeline step needs it" + (f": {shown}" if shown else "")
        context = f"The pipeline's purpose: {request}" if request else ""
        await ctx.info(f"creating the missing skill '{name}'")

        async def refresh() -> None:
            await service.catalog.refresh(list(service.sources))

        creation = await create_skill(
            ask, home=service.home, catalog=service.catalog, ctx=quiet, name=name, context=context, also_refresh=refresh
        )
        if not creation.created:
            await ctx.warning(f"could not create '{name}' ({creation.stage}): {'; '.join(creation.reasons)}")
        created.append(creation)
    return created


def creation_summary(creation: Creation) -> dict[str, Any]:
    """What a caller is told of one creation."""
    return {"name": creation.name, "created": creation.created, "stage": creation.stage, "reasons": creation.reasons}


async def _no_progress(done: float, total: float | None, message: str | None) -> None:
    return None
