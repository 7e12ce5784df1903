"""The router behind `orchestrate` (seed 001): one cheap model call decides who does the work.

A request in plain words goes to the `validation` model role (the cheap, fast one) with a menu
of the skills and agent roles that could serve it. Its answer is one JSON object, constrained
to three shapes and to the names on the menu:

    {"route": "skill",   "skill": "<name>", "arguments": {...}, "reason": "..."}
    {"route": "agent",   "role": "<role>",  "task": "...",      "reason": "..."}
    {"route": "planner", "reason": "..."}

and is checked before anything runs: the skill must be on the menu and the arguments must fit
its input schema, the role must exist. Any routing failure — an answer that is not that JSON,
an unknown name, arguments that do not fit, a model call that fails — falls back to the
planner (`plan_and_run`), and the result says why (`fallback_reason`). The model is asked once
(no re-asks: routing must stay cheap; the planner is the safe default).

The work then runs: the skill is called, one agent of the role is spawned, or the planner
writes and runs a pipeline. Usage is summed: what the router spent, what the work spent, and
the total — also when the work fails (the error carries it). Only a work that succeeded is a
success: a failed skill (or a PARTIAL pipeline), an agent stopped before its answer, a plan
that did not end `complete` (`orchestrate_failure`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from skills import SkillContext, SkillRunError, SkillsError
from skills.core.models import NoModelProviderError, model_access
from skills.core.roles import ROLES_KEY, RoleBook, load_roles
from skills.core.schema import check_arguments
from skills.creation.creator import ask_json
from skills.executors.spawn import spawn_agent

from ..engine.outcomes import plain_result
from ._planner_prompts import menu_skills, skill_menu

if TYPE_CHECKING:
    from skills import Skill

    from ..service import PipelineService

__all__ = ["ROUTER_MODEL", "Route", "orchestrate", "orchestrate_failure"]

log = logging.getLogger("pipelines.router")

ROUTER_MODEL = "validation"
"""The model role that routes: the registry's cheap, fast model."""
_MENU_LIMIT = 40
_SYSTEM = """\
You are the router of an MCP orchestrator. Decide the cheapest way to fully answer the
request, and answer with ONE JSON object only, in exactly one of these shapes:

{"route": "skill", "skill": "<a skill name from the list>", "arguments": {<its arguments>}, "reason": "<why>"}
  - when ONE call of one listed skill answers the request; give every required argument.
{"route": "agent", "role": "<a role from the list>", "task": "<the task, self-contained>", "reason": "<why>"}
  - when the work needs judgement over several steps that one agent of a role can do.
{"route": "planner", "reason": "<why>"}
  - when several skills must be chained, or nothing above fits.

Use only the names listed. No prose, no code fence: the JSON object alone."""


class Route(BaseModel):
    """The router's decision."""

    model_config = ConfigDict(extra="ignore")

    route: Literal["skill", "agent", "planner"]
    skill: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    role: str | None = None
    task: str | None = None
    reason: str = ""


async def orchestrate(
    service: PipelineService,
    request: str,
    ctx: SkillContext,
    *,
    context: str = "",
    inputs: dict[str, Any] | None = None,
    max_iterations: int = 3,
) -> dict[str, Any]:
    """Route `request` and do the work; the decision, the work's result and the usage.

    Raises:
        NoModelProviderError: no model can be asked (neither routing nor any route can work).
        SkillsError: the chosen skill or agent failed (the router's choice stands: its failure
            is the work's, not a routing failure).
    """
    access = model_access(ctx.extras)
    router, work = access.child(), access.child()
    book = ctx.extras.get(ROLES_KEY)
    book = book if isinstance(book, RoleBook) else load_roles(None)
    menu = [s for s in service.catalog if s.kind not in ("instructions",)]
    data: dict[str, Any] = {"request": request}
    await ctx.progress(0, 2, "routing the request")
    try:
        route = await _decide(router, request, context, menu, book)
        data |= {"route": route.route, "routed_by": "model", "reason": route.reason}
    except NoModelProviderError:
        raise
    except (SkillRunError, ValueError) as exc:  # a routing failure: the planner is the safe default
        log.info("routing fell back to the planner: %s", exc)
        await ctx.info(f"orchestrate: routing failed ({_short(str(exc))}); the planner takes the request")
        route = Route(route="planner")
        data |= {"route": "planner", "routed_by": "fallback", "reason": "", "fallback_reason": str(exc)[:1000]}
    work_ctx = dataclasses.replace(ctx, extras={**ctx.extras, "model": work})
    await ctx.progress(1, 2, f"route: {route.route}")
    try:
        data["result"] = await _work(service, route, request, context, inputs, max_iterations, work_ctx, data)
    except SkillsError as exc:  # the router's and the work's spending go with the failure
        if exc.attached:
            data["result"] = exc.attached  # a failed or PARTIAL run's outputs, summary and usage
        data["usage"] = _usage(router, work)
        exc.attached = data
        raise
    data["usage"] = _usage(router, work)
    await ctx.progress(2, 2, f"orchestrate: {route.route} done")
    return data


async def _decide(router: Any, request: str, context: str, menu: list[Skill], book: RoleBook) -> Route:
    offered, _ = menu_skills(menu, request, limit=_MENU_LIMIT)
    names = {s.name: s for s in offered}  # the router may only choose what it was shown
    shown = skill_menu(offered, request, limit=_MENU_LIMIT)
    roles = "\n".join(f"- {r['role']}: {r['description']}" for r in book.describe()) or "(none)"
    prompt = (
        f"Request: {request}\n"
        + (f"\nContext: {context}\n" if context else "")
        + f"\nSkills (name, what it does, its arguments):\n{shown}\n\nAgent roles:\n{roles}\n"
    )

    def valid(value: Any) -> Route:
        route = Route.model_validate(value)
        try:
            if route.route == "skill":
                skill = names.get(route.skill or "")
                if skill is None:
                    raise ValueError(f"'{route.skill}' is not a listed skill")
                check_arguments(skill.name, skill.input_schema, route.arguments)
            elif route.route == "agent":
                book.get(route.role or "")
                if not (route.task or "").strip():
                    raise ValueError("an agent route needs the task")
        except SkillsError as exc:  # arguments that do not fit, an unknown role: a routing failure
            raise ValueError(str(exc)) from None
        return route

    try:
        return await ask_json(
            router, prompt, valid, system=_SYSTEM, model=ROUTER_MODEL, stage="route", max_tokens=800, reasks=0
        )
    except SkillRunError as exc:
        if isinstance(exc, NoModelProviderError):
            raise
        raise ValueError(exc.message) from None


async def _work(
    service: PipelineService,
    route: Route,
    request: str,
    context: str,
    inputs: dict[str, Any] | None,
    max_iterations: int,
    ctx: SkillContext,
    data: dict[str, Any],
) -> Any:
    if route.route == "skill":
        assert route.skill is not None
        data |= {"skill": route.skill, "arguments": route.arguments}
        await ctx.info(f"orchestrate: calling the skill {route.skill}")
        skill = service.catalog.get(route.skill)
        return plain_result(
            await skill.run(route.arguments, dataclasses.replace(ctx, skill=skill.name)), failure=SkillRunError
        )
    if route.route == "agent":
        assert route.role is not None and route.task is not None
        data |= {"role": route.role, "task": route.task}
        await ctx.info(f"orchestrate: spawning a {route.role} agent")
        return await spawn_agent(route.role, route.task, ctx, context=context)
    from .planner import plan_and_run

    await ctx.info("orchestrate: the planner writes and runs a pipeline")
    task = f"{request}\n\nContext: {context}" if context else request
    return await plan_and_run(service, task, ctx, inputs=inputs, max_iterations=max_iterations)


def _usage(router: Any, work: Any) -> dict[str, Any]:
    total = router.usage.copy().add(work.usage)
    return {**total.as_dict(), "router": router.usage.as_dict(), "work": work.usage.as_dict()}


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "..."


def orchestrate_failure(data: dict[str, Any]) -> SkillRunError | None:
    """The routed work that ended without an answer, as the caller's error (None: it succeeded):
    an agent that stopped at a limit or failed, a plan that did not end `complete`. The error
    carries `data` (the route, the work's result, the usage) beside the envelope."""
    from .planner import incomplete

    result = data.get("result")
    found: dict[str, Any] = cast("dict[str, Any]", result) if isinstance(result, dict) else {}
    failure: SkillRunError | None = None
    if data.get("route") == "planner":
        failure = incomplete(found)
        if failure is not None:
            failure = SkillRunError(
                f"orchestrate: the planner did not complete the request: {failure.message}",
                hint=failure.hint,
                where="route planner",
            )
    elif data.get("route") == "agent" and found.get("status") not in (None, "success"):
        failure = SkillRunError(
            f"orchestrate: the {data.get('role')} agent stopped before its answer ({found.get('status')}): "
            f"{found.get('error') or found.get('summary') or ''}".rstrip(": "),
            hint="the result holds what the agent had; raise the role's limits or route the request again",
            where="route agent",
        )
    if failure is not None:
        failure.attached = data
    return failure
