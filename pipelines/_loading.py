"""Loading and registering pipeline files for `PipelineService` (private to pipelines): a file from
outside the published folders, a recorded run's text, a text a client registers, each verified
against the service's Catalog before it may run; and how a finished run's result reads as PARTIAL.
Kept apart so service.py holds the running of pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.to_thread

from skills import SkillRunError

from .errors import Issue, PipelineError, RunPartial, VerificationError
from .language.spec import PipelineSpec
from .language.summary import run_summary_in
from .source import PipelineSkill, PipelineSource

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from skills import Catalog, Home, SkillContext
    from skills.core.roles import RoleBook


class Host(Protocol):
    """What loading and registering need of the service that hosts them (`PipelineService`):
    its Catalog, home and pipeline sources, what it checks pipelines against, and its runner.
    Declared here so that the dependency points one way: the service uses this module."""

    catalog: Catalog
    home: Home
    models: Callable[[], Collection[str]] | None
    roles: Callable[[], RoleBook] | None
    shared: Any
    sources: list[PipelineSource]

    def specs(self) -> dict[str, PipelineSpec]: ...
    def known_models(self) -> Collection[str] | None: ...
    def role_book(self) -> RoleBook | None: ...
    def check(self, text: str, file: str = ...) -> tuple[PipelineSpec | None, list[Issue]]: ...
    async def check_off_loop(self, text: str, file: str = ...) -> tuple[PipelineSpec | None, list[Issue]]: ...
    async def run(self, skill: PipelineSkill, inputs: dict[str, Any], ctx: SkillContext) -> dict[str, Any]: ...


def load_file(service: Host, path: Path) -> PipelineSkill:
    """A pipeline file outside the published folders, verified, ready to run (`orchestrator run FILE`)."""
    from .language.loader import load_spec_file
    from .language.verify import all_issues, verify

    path = path.resolve()
    try:
        spec, smap = load_spec_file(path)
    except VerificationError as exc:  # the schema's issues, and what verifying the rest finds
        issues = all_issues(
            exc,
            catalog=service.catalog,
            pipelines=service.specs(),
            models=service.known_models(),
            roles=service.role_book(),
        )
        errors = [i for i in issues if i.severity == "error"]
        raise VerificationError(f"{len(errors)} problem(s) in {path}", hint=exc.hint, issues=issues) from None
    issues = verify(
        spec,
        smap,
        catalog=service.catalog,
        pipelines={**service.specs(), spec.id: spec},
        models=service.known_models(),
        roles=service.role_book(),
    )
    errors = [i for i in issues if i.severity == "error"]
    if errors:
        raise VerificationError(f"{len(errors)} problem(s) in {path}", issues=issues)
    return hosted(service, spec, path, issues)


def skill_from_text(service: Host, text: str, file: Path) -> PipelineSkill:
    """A pipeline's YAML (as a run recorded it), verified against this process's Catalog, ready to run.

    `file` names it in messages only: a worker runs a run of any replica from its text.
    """
    spec, issues = service.check(text, str(file))
    errors = [i for i in issues if i.severity == "error"]
    if spec is None or errors:
        raise VerificationError(f"{len(errors)} problem(s) in {file}", issues=issues)
    return hosted(service, spec, file, issues)


def hosted(service: Host, spec: PipelineSpec, path: Path, issues: list[Issue]) -> PipelineSkill:
    host = PipelineSource(path.parent, "user", label=str(path.parent))
    host.catalog, host.runner, host.others = service.catalog, service.run, service.specs
    host.help_cache = service.home.cache_dir
    host.models, host.roles = service.models, service.roles
    skill = PipelineSkill(spec, path, "user", host)
    skill.warnings = issues
    return skill


async def register(service: Host, text: str, *, overwrite: bool = False) -> PipelineSkill:
    """Validate, save into the home's pipelines/, and publish at once."""
    spec, issues = await service.check_off_loop(text, "<register_pipeline>")
    errors = [i for i in issues if i.severity == "error"]
    if spec is None or errors:
        raise VerificationError(f"{len(errors)} problem(s) in the pipeline", issues=issues)
    existing = service.catalog.find(spec.id)
    target = service.home.pipelines_dir / f"{spec.id}.yaml"
    if existing is not None and not isinstance(existing, PipelineSkill):
        raise PipelineError(f"'{spec.id}' is already the name of a {existing.kind} skill", hint="choose another id")
    text = text if text.endswith("\n") else text + "\n"
    shared = service.shared
    taken = await anyio.to_thread.run_sync(shared.exists, spec.id) if shared is not None else target.exists()
    if taken and not overwrite:
        raise PipelineError(f"a pipeline '{spec.id}' is already registered", hint="pass overwrite: true to replace it")
    if shared is not None:  # in the shared state: every replica and worker publishes it (NOTIFY)
        target = await anyio.to_thread.run_sync(shared.save, spec.id, text)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    await service.catalog.refresh([s for s in service.sources if s.source == "home"])
    skill = service.catalog.find(spec.id)
    if not isinstance(skill, PipelineSkill):
        problems = [str(p.error) for p in service.catalog.problems() if p.path == target]
        raise SkillRunError(f"pipeline saved to {target} but not published: {'; '.join(problems)}")
    return skill


def partial_of(result: dict[str, Any], run_id: str, skill: PipelineSkill) -> RunPartial | None:
    """The run went to its end; `RunPartial` when a step of it failed (None: it succeeded)."""
    summary = run_summary_in(result)
    if summary is None or not summary.get("failed"):
        return None
    first = str((summary.get("failed_steps") or [""])[0])
    top = first.split("/")[0]
    location = skill.step_location(top) if top else ""
    where = f"step '{first}'" + (f" ({location})" if location else "") if first else ""
    return RunPartial(result, summary=summary, run_id=run_id, where=where)
