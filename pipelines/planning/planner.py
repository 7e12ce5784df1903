"""Plan and run: a model writes a pipeline for a request, the verifier and a reviewer keep it honest.

Seed 004's checklist mode (plan -> verify -> run -> assess) on our pipelines:

    plan     the model (role orchestrator) writes a pipeline YAML from the request, the
             Catalog's skills (names, descriptions, arguments) and the authoring guide
    verify   `PipelineService.check`; every error goes back to the model until the pipeline
             compiles (bounded); optionally a missing skill is created (`create_missing_skills`)
    run      the pipeline runs like any other (run id, checkpoints, artifacts, history)
    assess   a checkpoint review (role review) of the outputs against the request:
             `complete`, or `needs_fix` with issues and fix instructions (lists) -> back to plan

up to `max_iterations` runs. A complete pipeline can be registered as a tool.

Only `complete` is a success. A plan that ends `needs_fix` (the last run failed, was PARTIAL, or
the reviewer still finds issues) or `failed` (no pipeline compiled) is an error for its caller
(`incomplete`): the envelope carries the result (the last run id and outputs, the review's
issues, the history) and the usage of every attempt, the failed ones included.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from skills import SkillContext, SkillRunError, SkillsError
from skills.core.models import model_access
from skills.creation.creator import ask_json

from ..errors import Issue, PipelineError, RunPartial
from ..language.spec import PipelineSpec
from ._planner_prompts import REVIEW_SYSTEM, extract_yaml, planner_system, skill_menu
from .missing import create_missing_skills, creation_summary

if TYPE_CHECKING:
    from skills.creation.creator import Creation

    from ..service import PipelineService

__all__ = ["PlanStatus", "ReviewVerdict", "incomplete", "plan_and_run"]

log = logging.getLogger("pipelines.planner")

PlanStatus = Literal["complete", "needs_fix", "failed"]
_MAX_SHOWN_OUTPUT = 12_000


class ReviewVerdict(BaseModel):
    """The checkpoint review of a run (seed 004's `CheckpointAssessment`)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    verdict: Literal["complete", "needs_fix"] = Field(validation_alias=AliasChoices("verdict", "status"))
    reasoning: str = ""
    """Why, in a sentence or two."""
    issues: list[str] = Field(default_factory=list, validation_alias=AliasChoices("issues", "reasons"))
    """What is wrong or missing (empty when complete)."""
    fix_instructions: list[str] = Field(default_factory=list)
    """What the pipeline's author must change, one instruction an item (empty when complete)."""

    @field_validator("issues", "fix_instructions", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):  # a model that writes one string means one item (or none)
            return [value] if value.strip() else []
        return value

    @field_validator("reasoning", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return "" if value is None else value


@dataclasses.dataclass
class _Attempt:
    """One iteration: what was written, whether it compiled, ran, and what the reviewer said."""

    iteration: int
    fixes: int = 0
    pipeline_id: str | None = None
    run_id: str | None = None
    error: str | None = None
    verdict: ReviewVerdict | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "fixes": self.fixes,
            "pipeline_id": self.pipeline_id,
            "run_id": self.run_id,
            "error": self.error,
            "verdict": None if self.verdict is None else self.verdict.verdict,
        }


async def plan_and_run(
    service: PipelineService,
    request: str,
    ctx: SkillContext,
    *,
    inputs: dict[str, Any] | None = None,
    max_iterations: int = 3,
    max_fixes: int = 3,
    register_as: str | None = None,
    register: bool = False,
    overwrite: bool = False,
    create_missing: bool = False,
) -> dict[str, Any]:
    """Write, verify, run and review a pipeline for `request`; the result of the last iteration.

    Raises:
        NoModelProviderError: no model can be asked.
        SkillRunError: a model call failed after the provider's retries (its `attached` says what
            was spent and which runs ran).
    """
    access = model_access(ctx.extras).child()
    run_ctx = dataclasses.replace(ctx, extras={**ctx.extras, "model": access})  # the run's model use counts too
    planner = _Planner(service, request, run_ctx, access, inputs or {}, max_fixes, create_missing)
    try:
        return await _plan_and_run(
            service, planner, ctx, run_ctx, access, max_iterations, register_as, register, overwrite
        )
    except SkillsError as exc:  # money spent before the failure is still spent: it goes with the error
        ran = [a.run_id for a in planner.attempts if a.run_id]
        exc.attached = {
            **(exc.attached or {}),
            "status": "failed",
            "iterations": len(planner.attempts),
            "pipeline_yaml": planner.last_text,
            "run_id": ran[-1] if ran else None,
            "history": [a.as_dict() for a in planner.attempts],
            "usage": access.usage.as_dict(),
        }
        raise


async def _plan_and_run(
    service: PipelineService,
    planner: _Planner,
    ctx: SkillContext,
    run_ctx: SkillContext,
    access: Any,
    max_iterations: int,
    register_as: str | None,
    register: bool,
    overwrite: bool,
) -> dict[str, Any]:
    total = max_iterations * 3
    status: PlanStatus = "failed"
    result: dict[str, Any] = {}
    for iteration in range(1, max_iterations + 1):
        attempt = _Attempt(iteration)
        planner.attempts.append(attempt)
        step = (iteration - 1) * 3
        await ctx.progress(step, total, f"iteration {iteration}: writing the pipeline")
        compiled = await planner.compile(attempt)
        if compiled is None:
            status = "failed"
            break
        text, spec = compiled
        attempt.pipeline_id = spec.id
        await ctx.progress(step + 1, total, f"iteration {iteration}: running {spec.id}")
        outputs = await planner.run(text, spec, attempt, _within(run_ctx, step + 1, total))
        result = {"pipeline_yaml": text, "pipeline_id": spec.id, "outputs": outputs, "run_id": attempt.run_id}
        if attempt.error is not None:
            status = "needs_fix"
            planner.feedback(f"The pipeline failed when it ran: {_stable(attempt.error, attempt.run_id)}\nFix it.")
            continue
        await ctx.progress(step + 2, total, f"iteration {iteration}: reviewing the outputs")
        verdict = attempt.verdict = await planner.review(text, outputs, attempt.run_id)
        result["review"] = verdict.model_dump()
        if verdict.verdict == "complete":
            status = "complete"
            break
        status = "needs_fix"
        issues = "\n".join(f"- {r}" for r in verdict.issues) or "- (no issues named)"
        fixes = "\n".join(f"- {f}" for f in verdict.fix_instructions) or "- (none given)"
        planner.feedback(
            f"The pipeline ran, but the reviewer says it does not yet answer the request:\n{issues}\n"
            f"Fix instructions:\n{fixes}"
        )
    data: dict[str, Any] = {
        "status": status,
        "iterations": len(planner.attempts),
        "pipeline_yaml": planner.last_text if status == "failed" else result.get("pipeline_yaml", ""),
        "pipeline_id": result.get("pipeline_id"),
        "outputs": result.get("outputs"),
        "run_id": result.get("run_id"),
        "review": result.get("review"),
        "history": [a.as_dict() for a in planner.attempts],
    }
    if planner.issues:
        data["issues"] = [str(i) for i in planner.issues]
    if planner.created:
        data["created_skills"] = [creation_summary(c) for c in planner.created]
    if status == "complete" and (register_as or register):
        data.update(await _register(service, result["pipeline_yaml"], register_as, overwrite, run_ctx))
    data["usage"] = access.usage.as_dict()
    await ctx.progress(total, total, f"plan_and_run: {status}")
    return data


class _Planner:
    """The conversation with the planning model and what it produced so far."""

    def __init__(
        self,
        service: PipelineService,
        request: str,
        ctx: SkillContext,
        access: Any,
        inputs: dict[str, Any],
        max_fixes: int,
        create_missing: bool,
    ) -> None:
        self.service, self.request, self.ctx, self.access = service, request, ctx, access
        self.inputs, self.max_fixes, self.create_missing = inputs, max_fixes, create_missing
        self.attempts: list[_Attempt] = []
        self.issues: list[Issue] = []
        self.created: list[Creation] = []
        self.last_text = ""
        given = f"\n\nThe pipeline will be run with these inputs: {json.dumps(inputs)}" if inputs else ""
        self.messages: list[dict[str, Any]] = [
            {
                "role": "user",
                "content": f"Request: {request}{given}\n\nSkills you can use as steps:\n"
                f"{skill_menu(service.catalog, request)}\n\nWrite the pipeline.",
            }
        ]
        guide = service.catalog.find("pipeline-authoring")
        self.system = planner_system(guide.body() if guide is not None else None)

    def feedback(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    async def _write(self) -> str:
        completion = await self.access.complete(
            self.messages, system=self.system, model="orchestrator", max_tokens=4096
        )
        self.messages.append({"role": "assistant", "content": completion.text.strip() or "(empty answer)"})
        self.last_text = extract_yaml(completion.text)
        return self.last_text

    async def compile(self, attempt: _Attempt) -> tuple[str, PipelineSpec] | None:
        """Ask for the YAML and send the verifier's errors back until it compiles (bounded)."""
        text = await self._write()
        while True:
            spec, issues = await self.service.check_off_loop(text, "<plan_and_run>")
            errors = [i for i in issues if i.severity == "error"]
            if spec is not None and not errors:
                self.issues = []
                return text, spec
            if self.create_missing and spec is not None and len(self.created) < 2:
                made = await create_missing_skills(
                    self.service,
                    errors,
                    self.ctx,
                    spec=spec,
                    request=self.request,
                    limit=2 - len(self.created),
                    exclude={c.name for c in self.created if c.name},
                )
                self.created += made
                if any(c.created for c in made):
                    continue  # check the same text again: the missing skills exist now
            self.issues = issues
            if attempt.fixes >= self.max_fixes:
                attempt.error = f"still {len(errors)} verifier error(s) after {attempt.fixes} fixes"
                return None
            attempt.fixes += 1
            await self.ctx.info(f"plan_and_run: fixing {len(errors)} verifier error(s) (fix {attempt.fixes})")
            listing = "\n".join(f"- {i}" for i in errors) if errors else "- no pipeline YAML was found"
            self.feedback(f"The verifier rejected the pipeline:\n{listing}\nFix every error and write the whole YAML.")
            text = await self._write()

    async def run(self, text: str, spec: PipelineSpec, attempt: _Attempt, ctx: SkillContext) -> Any:
        """Run the pipeline from a file in the home's cache (kept, so a failed run can be resumed)."""
        from .help_ai import text_hash

        path = self.service.home.cache_dir / "plans" / f"{spec.id}-{text_hash(text)[:12]}.yaml"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
            skill = self.service.load_file(path)
            arguments = skill.defaults(self.inputs)
            from skills.core.schema import check_arguments

            check_arguments(spec.id, skill.input_schema, arguments)
            result = await self.service.run(skill, arguments, ctx)
        except RunPartial as exc:  # it ran to its end, but steps failed: a fix, with what it computed
            attempt.error, attempt.run_id = str(exc), exc.run_id
            return exc.result
        except (SkillsError, PipelineError) as exc:
            attempt.error = str(exc)
            kept = exc.attached if isinstance(exc, SkillsError) else None
            match = re.search(r"\brun ([0-9a-f]{12}) failed", attempt.error)
            found = (kept or {}).get("run_id") or (match.group(1) if match else None)
            attempt.run_id = found if isinstance(found, str) else None
            return None
        attempt.run_id = result.get("run_id")
        return result

    async def review(self, text: str, outputs: Any, run_id: str | None) -> ReviewVerdict:
        shown = _stable(json.dumps(outputs, ensure_ascii=False, indent=1, default=str), run_id)
        if len(shown) > _MAX_SHOWN_OUTPUT:
            shown = shown[:_MAX_SHOWN_OUTPUT] + "\n... (cut)"
        prompt = (
            f"Request: {self.request}\n\nThe pipeline that ran:\n```yaml\n{text}\n```\n\n"
            f"Its outputs:\n```json\n{shown}\n```"
        )
        return await ask_json(
            self.access, prompt, ReviewVerdict.model_validate, system=REVIEW_SYSTEM, model="review", stage="review"
        )


def _within(ctx: SkillContext, start: float, total: float) -> SkillContext:
    """`ctx` whose progress (a pipeline run's, per step) fills [start, start + 1) of the caller's:
    progress a client sees must only go up."""

    async def progress(done: float, of: float | None, message: str | None) -> None:
        if of:
            await ctx.progress(start + min(done / of, 1.0) * 0.99, total, message)
        elif message:
            await ctx.info(message)

    return dataclasses.replace(ctx, progress_fn=progress)


def _stable(text: str, run_id: str | None) -> str:
    """`text` without the run id: what the model is asked must not change when a call is replayed
    (2026-07-28 sampling replays the call, and every replay runs the pipeline under a new id)."""
    return text.replace(run_id, "<run_id>") if run_id else text


_ID_LINE = re.compile(r"^id:[^\n]*$", re.MULTILINE)


async def _register(
    service: PipelineService, text: str, register_as: str | None, overwrite: bool, ctx: SkillContext
) -> dict[str, Any]:
    """Register the final pipeline (under `register_as` when given) and publish it as a tool."""
    from ..errors import VerificationError
    from .help_ai import improved_help, text_hash

    if register_as:
        text, count = _ID_LINE.subn(f"id: {json.dumps(register_as)}", text, count=1)
        if not count:
            return {"registered": False, "register_error": "the pipeline has no top-level `id:` line to rename"}
    spec, issues = await service.check_off_loop(text, "<plan_and_run>")
    taken = spec is not None and (service.home.pipelines_dir / f"{spec.id}.yaml").exists() and not overwrite
    if spec is not None and not taken and not any(i.severity == "error" for i in issues):  # published with it
        await improved_help(spec, text_hash(text), ctx, cache_dir=service.home.cache_dir, source=text)
    try:
        skill = await service.register(text, overwrite=overwrite)
    except VerificationError as exc:
        return {"registered": False, "register_error": "; ".join(str(i) for i in exc.issues) or str(exc)}
    except (PipelineError, SkillsError) as exc:
        return {"registered": False, "register_error": str(exc)}
    await ctx.info(f"registered the pipeline as the tool '{skill.name}'")
    return {"registered": True, "tool": skill.name, "file": str(skill.file), "pipeline_yaml": text}


def incomplete(data: dict[str, Any]) -> SkillRunError | None:
    """A plan that did not end `complete` as the error its caller gets (None: it is complete).

    The error carries `data` (the last run id and outputs, the review with its issues, the
    history, the usage of every attempt) beside the envelope (`attached`)."""
    status = data.get("status")
    if status == "complete":
        return None
    iterations = int(data.get("iterations") or 0)
    run_id = data.get("run_id")
    history: list[dict[str, Any]] = list(data.get("history") or [])
    last_error = history[-1].get("error") if history else None
    review: dict[str, Any] = data.get("review") or {}
    said: list[Any] = review.get("issues") or []
    issues = [str(i) for i in said]
    if status == "failed":
        listed: list[Any] = data.get("issues") or []
        found = [str(i) for i in listed]
        message = "plan_and_run failed: " + (
            "; ".join(found) or str(last_error or "no pipeline could be written and run for the request")
        )
        hint = "the result's pipeline_yaml and history show how far it got; rephrase the request or raise max_fixes"
    else:
        done = f"plan_and_run did not complete in {iterations} iteration(s): the last run ({run_id or 'none'})"
        if last_error:
            message = f"{done} failed: {last_error}"
        else:
            message = f"{done} still needs fixes: " + ("; ".join(issues) or "the reviewer named no issue")
        hint = (
            "the result holds the last run's outputs, the review's issues and every attempt's history; raise "
            "max_iterations, or make the request more precise"
        )
    error = SkillRunError(message, hint=hint, where=f"iteration {iterations}")
    error.attached = data
    return error
