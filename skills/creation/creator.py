"""Skill creation: a model writes a new skill, a reviewer and its own tests decide if it is published.

The workflow follows ROMA's four stages (seed 000, section 4) and then two gates:

    atomize    simple, or complex with 2-5 subtasks?                      (role: validation)
    plan       name, description, input/output schemas, approach, tests   (role: orchestrator)
    execute    scripts/run.py and the SKILL.md body, or one module a part (role: orchestrator)
    aggregate  (complex) the entry script tying the parts together; then the folder is
               assembled in a temporary directory and checked strictly   (role: orchestrator)
    review     approve or reject, with reasons                             (role: review)
    test       every test case in the script sandbox, the skill's own limits; confined (bubblewrap),
               or refused where confinement is unavailable unless the home's config.yaml says
               `isolation: {allow_unconfined: true}`
    publish    moved to <home>/skills/<name>/, recorded `source: created` in registry.yaml,
               the home folder re-read so clients get tools/list_changed

A created skill always runs as a `script` (a confined subprocess), never in the server's
process. A skill that fails the strict check, the review or a test is not published; the
result says at which stage and why, with the files as written so they can be fixed by hand.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import yaml

from ..core.base import SkillContext
from ..core.catalog import RESERVED_NAMES, Catalog
from ..core.checks import check_folder
from ..core.home import Home
from ..core.models import ModelAccess, Usage, model_access
from ..core.sources import FolderSource
from ..executors.isolation import isolation_of
from . import _creator_stages as stages
from ._creator_ask import AnswerError, ask_json, fenced_blocks, parse_json
from ._creator_tests import TestCase, TestOutcome, run_cases

__all__ = [
    "AnswerError",
    "Creation",
    "Stage",
    "TestCase",
    "ask_json",
    "create_skill",
    "fenced_blocks",
    "name_problem",
    "parse_json",
]

log = logging.getLogger("skills.creator")

Stage = Literal["atomize", "plan", "execute", "aggregate", "review", "test", "publish", "done"]
_STAGES = 7  # progress steps: atomize .. publish
_SCRIPT = "scripts/run.py"
_MEMORY_MB = 256


@dataclass
class Creation:
    """What `create_skill` did: created and published, or stopped at `stage` for `reasons`."""

    created: bool
    stage: Stage
    name: str | None = None
    reasons: list[str] = field(default_factory=lambda: [])
    files: dict[str, str] = field(default_factory=lambda: {})
    """Every file of the skill as written (relative path -> text)."""
    tests: list[TestOutcome] = field(default_factory=lambda: [])
    review: dict[str, Any] | None = None
    usage: Usage = field(default_factory=Usage)
    path: Path | None = None
    published: bool = False

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "created": self.created,
            "stage": self.stage,
            "name": self.name,
            "reasons": self.reasons,
            "files": self.files,
            "tests": [t.model_dump(mode="json") for t in self.tests],
            "tests_passed": sum(t.passed for t in self.tests),
            "tests_total": len(self.tests),
            "review": self.review,
            "usage": self.usage.as_dict(),
        }
        if self.created:
            data["path"] = str(self.path)
            data["published"] = self.published
        return data


def name_problem(name: str, home: Home, catalog: Catalog, *, overwrite: bool) -> str | None:
    """Why a created skill may not take `name` (None when it may)."""
    if name in RESERVED_NAMES:
        return "it is the name of a meta tool"
    existing = catalog.find(name) or next((s for s in catalog.disabled() if s.name == name), None)
    if existing is not None and existing.source not in ("builtin", "home", "created"):
        return f"a {existing.kind} from '{existing.source}' has that name and would hide the new skill"
    if overwrite:
        return None
    if (home.skills_dir / name).exists():
        return f"a skill folder {home.skills_dir / name} exists (pass overwrite: true to replace it)"
    if existing is not None:
        return f"a {existing.source} skill has that name (pass overwrite: true to override it)"
    return None


async def create_skill(
    request: str,
    *,
    home: Home,
    catalog: Catalog,
    ctx: SkillContext,
    name: str | None = None,
    test_cases: list[TestCase] | None = None,
    overwrite: bool = False,
    context: str = "",
    also_refresh: Callable[[], Awaitable[None]] | None = None,
) -> Creation:
    """Create, check, review, test and publish a new skill for `request`.

    `overwrite` replaces an existing skill called `name` (never one whose name the model
    picked); `context` tells the model where the skill will be used (a pipeline that needs it);
    `also_refresh` re-reads what depends on the skills (pipelines) once the skill is published.

    Raises:
        NoModelProviderError: no model can be asked.
        SkillRunError: a model call failed after the provider's retries.
    """
    access = model_access(ctx.extras).child()
    result = Creation(created=False, stage="plan", name=name, usage=access.usage)
    job = _Job(request, context, home, catalog, ctx, access, result, overwrite=overwrite and bool(name))
    if name and (why := job.name_problem(name)):
        result.reasons.append(f"the name '{name}' cannot be used: {why}")
        return result
    work = Path(tempfile.mkdtemp(prefix="orchestrator-create-"))
    try:
        return await job.run(work, test_cases or [], also_refresh)
    except AnswerError as exc:
        result.reasons.append(str(exc))
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class _Job:
    """One creation under way: what was asked, where it goes, and the result being filled in."""

    request: str
    context: str
    home: Home
    catalog: Catalog
    ctx: SkillContext
    access: ModelAccess
    result: Creation
    overwrite: bool

    def name_problem(self, name: str) -> str | None:
        return name_problem(name, self.home, self.catalog, overwrite=self.overwrite)

    async def enter(self, stage: Stage, number: int, message: str) -> None:
        self.result.stage = stage
        await self.ctx.progress(number, _STAGES, f"{stage}: {message}")
        await self.ctx.info(f"{stage}: {message}")  # the client sees it from the logger create_skill

    async def run(
        self, work: Path, given_tests: list[TestCase], also_refresh: Callable[[], Awaitable[None]] | None
    ) -> Creation:
        result, access, request = self.result, self.access, self.request
        await self.enter("atomize", 0, "is it simple or complex?")
        atoms = await stages.atomize(access, request, self.context)
        detail = f"complex, {len(atoms.subtasks)} parts" if atoms.subtasks else "simple"

        await self.enter("plan", 1, f"designing the contract ({detail})")
        plan = await stages.plan(
            access, request, self.context, atoms, name=result.name, given_tests=given_tests, taken=self.name_problem
        )
        result.name = plan.name

        await self.enter("execute", 2, f"writing {plan.name}")
        parts: stages.Parts = {}
        for index, sub in enumerate(atoms.subtasks):
            parts[f"part_{sub.name}"] = await stages.write_part(access, request, plan, atoms, index)
        if parts:
            await self.enter("aggregate", 3, f"tying {len(parts)} parts together")
            written = await stages.aggregate(access, request, plan, parts)
        else:
            written = await stages.write(access, request, plan)
            await self.enter("aggregate", 3, "assembling the folder")
        files = {**_skill_files(plan, written.body, request), _SCRIPT: written.script}
        files |= {f"scripts/{module}.py": part.code for module, part in parts.items()}
        folder = work / plan.name
        _write(folder, files)
        result.files = files
        _, contract, problems = check_folder(folder, strict=True)
        errors = [str(p).replace(f"{work}/", "") for p in problems if p.severity == "error"]
        if errors or contract is None:
            result.reasons += errors or ["skill.yaml could not be read back"]
            return result

        await self.enter("review", 4, "asking the reviewer")
        verdict = await stages.review(access, request, files)
        result.review = verdict.model_dump()
        if not verdict.approved:
            result.reasons += verdict.reasons or ["the reviewer rejected it without giving reasons"]
            return result

        await self.enter("test", 5, f"running {len(plan.test_cases)} test case(s) in the sandbox")
        isolation = await anyio.to_thread.run_sync(isolation_of, self.ctx.extras)
        if not isolation.available and not isolation.allow_unconfined:
            result.reasons.append(
                f"not tested and not published: model-written code only runs confined, and confinement is "
                f"unavailable here ({isolation.reason}); install bubblewrap, or accept running it with the "
                f"server's rights: `isolation: {{allow_unconfined: true}}` in {self.home.root / 'config.yaml'}"
            )
            return result
        result.tests = await run_cases(
            folder, plan.name, contract, plan.test_cases, isolation=isolation, log=self.ctx.log
        )
        failed = [t for t in result.tests if not t.passed]
        if failed:
            result.reasons += [f"test {t.index} {json.dumps(t.arguments)}: {'; '.join(t.failures)}" for t in failed]
            return result

        await self.enter("publish", 6, f"publishing {plan.name}")
        if why := self.name_problem(plan.name):  # again: the home may have changed since the plan
            result.reasons.append(f"the name '{plan.name}' cannot be used: {why}")
            return result
        result.path = _install(folder, self.home.skills_dir / plan.name)
        result.created = True
        entry = {"source": "created", "path": f"skills/{plan.name}", "enabled": True}
        self.home.add_missing_entries({plan.name: entry})
        result.published = await _publish(plan.name, result.path, self.home, self.catalog, also_refresh, result)
        result.stage = "done"
        await self.ctx.progress(_STAGES, _STAGES, f"created {plan.name}")
        return result


def _skill_files(plan: stages.SkillPlan, body: str, request: str) -> dict[str, str]:
    meta = {"origin": "created by create_skill", "request": " ".join(request.split())[:300]}
    if plan.title:
        meta = {"title": plan.title, **meta}
    front = {"name": plan.name, "description": plan.description, "metadata": meta}
    contract: dict[str, Any] = {"inputs": plan.inputs}
    if plan.outputs is not None:
        contract["outputs"] = plan.outputs
    contract |= {"run": {"script": _SCRIPT}, "timeout": plan.timeout, "memory_mb": _MEMORY_MB}
    body = body.strip() or f"# {plan.title or plan.name}\n\n{plan.description}"
    return {
        "SKILL.md": f"---\n{_dump(front)}---\n\n{body}\n",
        "skill.yaml": _dump(contract),
        "tests.json": json.dumps([t.as_json() for t in plan.test_cases], indent=2, ensure_ascii=False) + "\n",
    }


def _dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def _write(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _install(folder: Path, target: Path) -> Path:
    """Copy the checked folder into place; an existing one (overwrite) is replaced whole."""
    target.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if target.exists():
        backup = target.with_name(f".replaced-{target.name}-{uuid.uuid4().hex[:8]}")  # hidden: never loaded
        target.rename(backup)
    try:
        shutil.copytree(folder, target)
    except OSError:
        shutil.rmtree(target, ignore_errors=True)
        if backup is not None:
            backup.rename(target)
        raise
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)
    return target


async def _publish(
    name: str,
    path: Path,
    home: Home,
    catalog: Catalog,
    also_refresh: Callable[[], Awaitable[None]] | None,
    result: Creation,
) -> bool:
    """Re-read the home skills folder (clients get tools/list_changed); True when it is served."""
    root = home.skills_dir.resolve()
    sources = [p for p in catalog.providers if isinstance(p, FolderSource) and p.root.resolve() == root]
    if not sources:
        result.reasons.append("saved, but this server does not serve the home skills folder")
        return False
    await catalog.refresh(list(sources))
    if also_refresh is not None:
        await also_refresh()
    skill = catalog.find(name)
    if skill is not None and skill.root is not None and skill.root.resolve() == path.resolve():
        return True
    problems = [str(p.error) for p in catalog.problems() if p.path.resolve() == path.resolve()]
    why = "; ".join(problems) or "it is disabled or hidden by another skill of the same name"
    result.reasons.append(f"saved to {path} but not published: {why}")
    log.warning("created skill %s not published: %s", name, why)
    return False
