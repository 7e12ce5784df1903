"""Pipelines in the Catalog: each pipeline file is a Skill, published like any other.

`PipelineSource` is the Catalog provider for a folder of `*.yaml` pipelines (the built-in
examples, the home's `pipelines/`). Files are parsed and verified when they change; a broken
file is reported and not published while the others keep working. The LangGraph graph is
compiled on the first run (LangGraph's import is kept off the server's start-up) and cached
until the file changes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skills import (
    DefinitionError,
    LoadProblem,
    Problem,
    SkillCancelledError,
    SkillContext,
    SkillRunError,
    SkillsError,
    SkillSource,
)
from skills.core.catalog import FolderProvider

from .errors import Issue, PipelineError, RunCancelled, RunLimitError, RunLimitExceeded, StepFailed, VerificationError
from .language.help_cache import cached_overview, text_hash, with_overview
from .language.loader import load_spec_file
from .language.spec import PipelineSpec
from .language.yamlmap import SourceMap

if TYPE_CHECKING:
    from skills import Catalog
    from skills.core.roles import RoleBook

    from .engine.compiler import CompiledPipeline

__all__ = ["EXAMPLES_DIR", "PipelineSkill", "PipelineSource", "issues_as_problems"]

log = logging.getLogger("pipelines.source")

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"


def issues_as_problems(path: Path, issues: Iterable[Issue]) -> list[Problem]:
    """Verifier issues in the skills core's Problem form (for the Catalog's problem list)."""
    return [
        Problem(path, f"line {i.line}, column {i.col}: {i.message}", hint=i.hint, severity=i.severity) for i in issues
    ]


class PipelineSkill:
    """A verified pipeline as a Skill: its id is the tool name, its inputs the input schema."""

    kind = "pipeline"

    def __init__(self, spec: PipelineSpec, file: Path, source: SkillSource, host: PipelineSource) -> None:
        self.spec = spec
        self.file = file
        self._source: SkillSource = source
        self._host = host
        self._compiled: CompiledPipeline | None = None
        self.warnings: list[Issue] = []

    @property
    def name(self) -> str:
        return self.spec.id

    @property
    def title(self) -> str | None:
        return self.spec.name

    @property
    def description(self) -> str:
        head = self.spec.description.strip() or f"Pipeline {self.spec.id}."
        return f"{head}\n\n{with_overview(self.spec, self.overview(), description=False)}"

    def digest(self) -> str:
        """SHA-256 of the file as loaded ("" when it cannot be read): the key of its cached help."""
        digest = self.__dict__.get("_digest")
        if digest is None:
            try:
                digest = self.__dict__["_digest"] = text_hash(self.file.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                digest = self.__dict__["_digest"] = ""
        return digest

    def overview(self) -> str | None:
        """The model's overview of this file, when one was written (`_help_ai`)."""
        if self._host.help_cache is None:
            return None
        digest = self.digest()
        return cached_overview(self._host.help_cache, digest) if digest else None

    @property
    def source(self) -> SkillSource:
        return self._source

    @property
    def input_schema(self) -> dict[str, Any]:
        return self._schemas[0]

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return self._schemas[1]

    @property
    def _schemas(self) -> tuple[dict[str, Any], dict[str, Any]]:
        cached = self.__dict__.get("_schema_cache")
        if cached is None:

            def infer() -> dict[str, Any]:
                from .language.outschema import infer_output_schema  # Jinja: only when the checks' cache has no answer

                return infer_output_schema(self.spec, self._host.catalog)

            checks = self._host.checks
            out = infer() if checks is None else checks.output_schema(self, self._host.catalog, infer)
            cached = self.__dict__["_schema_cache"] = (self.spec.input_schema(), out)
        return cached

    @property
    def annotations(self) -> dict[str, Any] | None:
        return {"title": self.spec.name} if self.spec.name else None

    @property
    def root(self) -> Path | None:
        return None

    def body(self) -> str:
        return self.file.read_text(encoding="utf-8")

    def files(self) -> list[str]:
        return []

    def compiled(self) -> CompiledPipeline:
        if self._compiled is None:
            from .engine.compiler import compile_pipeline

            self._compiled = compile_pipeline(self.spec)
        return self._compiled

    def step_location(self, step_id: str) -> str:
        """`file:line` of the step with this id, or "" when the file's positions are not known."""
        smap = self._host.position_map(self.file)
        for step in self.spec.walk():
            if step.id == step_id:
                return f"{self.file.name}:{smap.at((*step.path, 'id'))[0]}" if smap is not None else self.file.name
        return ""

    def defaults(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Arguments with the inputs' defaults filled in."""
        filled = {n: p["default"] for n, p in self.spec.all_inputs().items() if "default" in p}
        filled.update(arguments)
        return filled

    async def run(self, arguments: dict[str, Any], ctx: SkillContext) -> Any:
        return await self._host.execute(self, self.defaults(arguments), ctx)


class PipelineSource(FolderProvider):
    """Every `*.yaml` / `*.yml` pipeline in one folder, as Skills."""

    def __init__(self, root: Path, source: SkillSource, label: str | None = None) -> None:
        self.root = root
        self.source: SkillSource = source
        self.label = label or f"pipelines ({root})"
        self.catalog: Catalog | None = None
        """Set by whoever registers the source: unknown skills are checked against it."""
        self.runner: Callable[[PipelineSkill, dict[str, Any], SkillContext], Any] | None = None
        """Runs a pipeline (set by the server: it owns the home, checkpoints and run history)."""
        self.others: Callable[[], dict[str, PipelineSpec]] = dict
        self.models: Callable[[], Collection[str]] | None = None
        """The model roles and ids the server knows (set by the server; unknown ones are errors)."""
        self.roles: Callable[[], RoleBook] | None = None
        """The agent roles of the home (set by the server; an unknown one is an error)."""
        """All pipelines known to the server (for calls between pipelines and cycle checks)."""
        self.help_cache: Path | None = None
        """Where model-improved help is cached (`<home>/cache`; set by the server)."""
        self.checks: Any = None
        """Remembers verification outcomes and output schemas across restarts (set by the server,
        `pipelines.checks`); None: every start checks every file."""
        self._skills: dict[Path, PipelineSkill] = {}
        self._stamps: dict[Path, tuple[int, int]] = {}
        self._maps: dict[Path, SourceMap] = {}
        self._problems: list[LoadProblem] = []
        self._loaded = False

    def position_map(self, file: Path) -> SourceMap | None:
        """Line and column of every value of a loaded pipeline file (None for an unknown file)."""
        return self._maps.get(file)

    def relevant(self, path: Path) -> bool:
        """Only pipeline files directly in the folder matter (not run artifacts below it)."""
        return path.parent == self.root and path.suffix in (".yaml", ".yml")

    def specs(self) -> dict[str, PipelineSpec]:
        return {s.spec.id: s.spec for s in self.skills()}

    def loaded_specs(self) -> dict[str, PipelineSpec]:
        """The pipelines read so far, without reading the folder (none before its first refresh)."""
        return {s.spec.id: s.spec for s in self._skills.values()}

    def refresh(self) -> bool:
        """Re-read changed files, then verify every pipeline (skills they call may have changed)."""
        self._loaded = True
        files = (
            sorted(p for p in self.root.glob("*.y*ml") if p.suffix in (".yaml", ".yml")) if self.root.is_dir() else []
        )
        parsed: dict[Path, PipelineSpec] = {}
        broken: dict[Path, VerificationError] = {}
        problems: list[LoadProblem] = []
        for file in files:
            stat = file.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            old = self._skills.get(file)
            if old is not None and self._stamps.get(file) == stamp:
                parsed[file] = old.spec
                continue
            try:
                parsed[file], self._maps[file] = load_spec_file(file)
            except VerificationError as exc:
                broken[file] = exc
                continue
            self._stamps[file] = stamp
        skills: dict[Path, PipelineSkill] = {}
        known = {**self.others(), **{spec.id: spec for spec in parsed.values()}}
        for file, exc in broken.items():
            problems.append(_problem(self.label, file, self._all_issues(exc, known)))
        for file, spec in parsed.items():
            issues = self._verify(file, spec, known)
            errors = [i for i in issues if i.severity == "error"]
            if errors:
                problems.append(_problem(self.label, file, issues))
                continue
            old = self._skills.get(file)
            skill = old if old is not None and old.spec is spec else PipelineSkill(spec, file, self.source, self)
            skill.warnings = issues
            skills[file] = skill
        changed = [id(s) for s in skills.values()] != [id(s) for s in self._skills.values()]
        changed = changed or [p.error.message for p in problems] != [p.error.message for p in self._problems]
        self._skills, self._problems = skills, problems
        return changed

    def _all_issues(self, exc: VerificationError, known: dict[str, PipelineSpec]) -> list[Issue]:
        from .language.verify import all_issues

        models = self.models() if self.models is not None else None
        roles = self.roles() if self.roles is not None else None
        return all_issues(exc, catalog=self.catalog, pipelines=known, models=models, roles=roles)

    def _verify(self, file: Path, spec: PipelineSpec, known: dict[str, PipelineSpec]) -> list[Issue]:
        models = self.models() if self.models is not None else None
        roles = self.roles() if self.roles is not None else None

        def verify() -> list[Issue]:
            from .language.verify import verify  # Jinja: only when the checks' cache has no answer

            return verify(spec, self._maps[file], catalog=self.catalog, pipelines=known, models=models, roles=roles)

        if self.checks is None:
            return verify()
        return self.checks.verified(file, spec, known, self.catalog, models, roles, verify)

    async def execute(self, skill: PipelineSkill, inputs: dict[str, Any], ctx: SkillContext) -> Any:
        if self.runner is None:
            raise SkillRunError(f"pipeline '{skill.name}' cannot run: no runner is attached")
        return await self.runner(skill, inputs, ctx)


def _problem(label: str, file: Path, issues: list[Issue]) -> LoadProblem:
    return LoadProblem(label, file, DefinitionError(file, issues_as_problems(file, issues)))


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


_PASSED_ON = frozenset({"timeout", "not_connected", "cancelled", "limit_exceeded"})
"""Envelope types of a step's error that the run's failure keeps (a step's bad arguments are the
pipeline's failure, `skill_failed`, not the caller's `invalid_arguments`)."""


def describe_failure(exc: PipelineError, run_id: str, skill: PipelineSkill | None = None) -> SkillRunError:
    """A run failure as a client-facing error that says how to resume.

    Its envelope `where` names the step (with `file:line` of the step when `skill` is given);
    its `type` and retry advice are those of the skill error that failed the step when that is
    one of `_PASSED_ON` (a step that timed out is a `timeout`), else `skill_failed` (`cancelled`
    for a cancelled run).
    """
    step_id = exc.step_id if isinstance(exc, StepFailed) and exc.step_id else ""
    step = f" at step '{step_id}'" if step_id else ""
    message = exc.message
    if step and message.startswith(f"step '{step_id}' "):  # "step 'x' failed: ..." once is enough
        message = message[len(f"step '{step_id}' ") :].removeprefix("failed: ")
    elif step and message.startswith(f"step '{step_id}': "):  # "step 'x': parameters: ..." too
        message = message[len(f"step '{step_id}': ") :]
    hint = exc.hint + "; " if exc.hint else ""
    where = f"step '{step_id}'" if step_id else ""
    location = skill.step_location(step_id) if skill is not None and step_id else ""
    if location:
        where = f"{where} ({location})"
    if isinstance(exc, RunLimitExceeded):  # which limit, and where it is set (the hint)
        return RunLimitError(
            f"run {run_id} stopped{step}: {message}",
            limit=exc.limit,
            hint=f"{hint}after changing it, `orchestrator runs resume {run_id}` continues (finished steps are kept)",
            where=where,
        )
    kind = SkillCancelledError if isinstance(exc, RunCancelled) else SkillRunError
    failure = kind(
        f"run {run_id} failed{step}: {message}",
        hint=f"{hint}after fixing, resume it with `orchestrator runs resume {run_id}` (finished steps are kept)",
        where=where,
    )
    cause = exc.__context__
    while cause is not None and not isinstance(cause, SkillsError):
        cause = cause.__context__
    if isinstance(cause, SkillsError) and kind is SkillRunError and cause.error_type in _PASSED_ON:
        failure.error_type, failure.retryable = cause.error_type, cause.retryable
    return failure
