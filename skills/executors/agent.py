"""Agent skills (`run: {agent: ...}`): a model in a tool-use loop over an allow-list of skills.

The sub-agent design (seed 002): the model gets the allowed Catalog skills as tools, the
server runs the calls it asks for (arguments checked against the input schema; failures go
back to the model as `is_error` tool results carrying the same error envelope a client gets,
`{"error": {"type", "message", "hint", "retryable", "where"}}`, so that the model can recover:
fix an argument, retry, or choose another tool), and the loop ends when the model answers
without a tool call or at the first hard limit: wall time, tokens, cost or turns. A turn that
crosses a budget is not undone (its tokens are spent), but no further turn or tool call starts.

Agents are one level deep: an agent skill is never offered as a tool, and an agent skill run
from anywhere inside an agent (directly, or through a pipeline the agent calls) refuses to
start. Model calls made by the tools count against the agent's budget: the tools share the
agent's `ModelAccess`.

The result is the seed's `SubagentResult`: `{status, output, summary, confidence, tokens,
cost_usd, duration_s, iterations}` (+ `error` when `status` is `error`); hitting a limit is a
result with its status, not a failed call.
"""

from __future__ import annotations

import json
import time
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

import anyio

from ..core import tracing
from ..core.base import SkillContext
from ..core.budget import AGENT_BUDGET_KEY, RunBudget
from ..core.errors import (
    ArgumentsError,
    FieldError,
    OutputError,
    SkillRunError,
    SkillsError,
    UnknownSkillError,
)
from ..core.jsontext import JSON
from ..core.models import (
    Completion,
    ModelAccess,
    NoModelProviderError,
    UnknownModelError,
    Usage,
    model_access,
    pico_usd,
    shown_usd,
)
from ..core.roles import ROLES_KEY, apply_role
from ..core.schema import ANY_JSON, check_arguments, check_output, nullable
from ._agent_io import as_text, confidence, envelope_text, first_line, short, tool_result
from .prompt import choose_model, parse_json

if TYPE_CHECKING:
    from ..core.base import Skill
    from ..core.catalog import Catalog
    from ..core.contract import AgentSpec, SkillContract

__all__ = ["AGENT_STATUSES", "AgentHost", "AgentStatus", "agent_output_schema", "run_agent"]

AgentStatus = Literal[
    "success", "timeout", "cost_exceeded", "token_limit", "iteration_limit", "budget_exceeded", "error"
]
AGENT_STATUSES: tuple[AgentStatus, ...] = get_args(AgentStatus)
_OUTPUT_REASKS = 1


class AgentHost(Protocol):
    """What an agent run needs of the skill (or pipeline step) it runs for."""

    @property
    def name(self) -> str: ...

    def body(self) -> str:
        """The agent's instructions (the SKILL.md body)."""
        ...


def agent_output_schema(outputs: dict[str, Any] | None) -> dict[str, Any]:
    """The tool output schema of an agent skill; `outputs` (skill.yaml) describes `output`."""
    described = "The agent's result (its shape is the skill's `outputs` on success)."
    output: dict[str, Any] = {**ANY_JSON, "description": described}
    if outputs is not None:  # on a stop before the end: the last text, or null
        output = {"anyOf": [outputs, {"type": "string"}, {"type": "null"}], "description": described}
    return {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": list(AGENT_STATUSES)},
            "output": output,
            "summary": {"type": "string", "description": "What the agent did and found, in a sentence or two."},
            "confidence": {**nullable({"type": "number"}), "description": "The agent's confidence, 0.0-1.0."},
            "tokens": {"type": "integer", "description": "Tokens spent (input + output), tools' model calls included."},
            "cost_usd": {"type": "number"},
            "duration_s": {"type": "number"},
            "iterations": {"type": "integer", "description": "Model turns taken."},
            "error": {"type": "string", "description": "What went wrong (status `error` only)."},
        },
        "required": ["status", "output", "summary", "confidence", "tokens", "cost_usd", "duration_s", "iterations"],
    }


_FINISH = """\
## Finishing
When the task is done (or cannot be done), answer without calling a tool, with only a JSON object:
{"output": <the result: JSON data, as structured as the task allows>, "summary": "<what you did and \
found, one or two sentences>", "confidence": <0.0-1.0, how reliable the output is>}"""


class _Agent:
    """One run of an agent skill."""

    def __init__(self, skill: AgentHost, spec: AgentSpec, contract: SkillContract, ctx: SkillContext) -> None:
        self.skill, self.spec, self.ctx = skill, spec, ctx
        self.outputs = contract.outputs
        self.model = choose_model(ctx, spec.model or contract.model)
        self.name = skill.name
        self.access: ModelAccess = model_access(ctx.extras).child()
        budget = ctx.extras.get(AGENT_BUDGET_KEY)
        self.budget: RunBudget | None = budget if isinstance(budget, RunBudget) else None
        """What all agents of the run may spend together (seed 002, section 9)."""
        self._charged = Usage()
        self.budget_reason = ""
        self.told_no_thinking = False
        self.iterations = 0
        self.last_text = ""
        self.error = ""
        self.left_out: list[str] = []
        """Allowed names that are agents: never offered (agents do not start agents)."""

    # -- set-up ---------------------------------------------------------------------------------
    def tools(self) -> dict[str, Skill]:
        """The allowed skills by name (agents and the agent itself left out)."""
        if not self.spec.skills:
            return {}
        catalog: Catalog | None = self.ctx.extras.get("catalog")
        if catalog is None:
            raise SkillRunError(
                f"agent '{self.name}' cannot reach its skills: the call has no Catalog",
                hint="run agents through the orchestrator server, a pipeline or `orchestrator call`",
            )
        allowed: dict[str, Skill] = {}
        for entry in self.spec.skills:
            if any(c in entry for c in "*?["):
                found = [s for s in catalog if fnmatchcase(s.name, entry)]
            else:
                one = catalog.find(entry)
                if one is None:
                    raise SkillRunError(
                        f"agent '{self.name}' may call '{entry}', but there is no such skill now",
                        hint=catalog.unknown(entry).hint,
                    )
                found = [one]
            for skill in found:
                if skill.kind != "agent":
                    allowed[skill.name] = skill
                elif skill.name != self.name and skill.name not in self.left_out:
                    self.left_out.append(skill.name)
        return allowed

    def system(self, tools: dict[str, Skill]) -> str:
        spec = self.spec
        parts = [f"You are the agent '{self.name}', working on one focused task.", self.skill.body().strip()]
        if spec.instructions:
            parts.append(spec.instructions.strip())
        if tools:
            parts.append(
                "## Your tools\n"
                + "\n".join(f"- {name}: {skill.description.splitlines()[0][:200]}" for name, skill in tools.items())
                + "\nCall them as you need; each call and each turn spends your budget. You cannot start other agents."
            )
        parts.append(
            f"## Limits\nAt most {spec.max_iterations} turns, {spec.max_tokens:,} tokens, "
            f"${spec.max_cost_usd:g} and {spec.timeout:g} seconds; you are stopped at the first one reached"
            + (" (or when the run's shared budget is spent)." if self.budget is not None else ".")
        )
        finish = _FINISH
        if self.outputs is not None:
            finish += "\n`output` must fit this JSON Schema:\n```json\n" + json.dumps(self.outputs, indent=2) + "\n```"
        parts.append(finish)
        return "\n\n".join(p for p in parts if p)

    @staticmethod
    def task(arguments: dict[str, Any]) -> str:
        task, context = arguments.get("task"), arguments.get("context")
        if isinstance(task, str) and set(arguments) <= {"task", "context"}:
            return f"## Task\n{task}" + (f"\n\n## Context\n{context}" if context else "")
        return (
            "## Task\nCarry out the task with these parameters:\n```json\n" + json.dumps(arguments, indent=2) + "\n```"
        )

    # -- the loop ---------------------------------------------------------------------------------
    def over_budget(self) -> AgentStatus | None:
        """The limit reached, if any: the agent's own first, then the run's shared budget."""
        self.charge()
        usage = self.access.usage
        if usage.total_tokens >= self.spec.max_tokens:
            return "token_limit"
        if usage.cost_pico >= pico_usd(self.spec.max_cost_usd):
            return "cost_exceeded"
        if self.budget is not None and (hit := self.budget.exceeded()) is not None:
            self.budget_reason = hit[1]
            return "budget_exceeded"
        return None

    def charge(self) -> None:
        """Add to the run's budget what this agent spent since the last charge (tools' calls too)."""
        if self.budget is None:
            return
        usage = self.access.usage
        spent = usage.minus(self._charged)
        if spent.spent:
            self.budget.charge(spent)
            self._charged = usage.copy()

    def room(self) -> int:
        """Tokens the next answer may use: what is left of the agent's and of the run's."""
        room = self.spec.max_tokens - self.access.usage.total_tokens
        shared = self.budget.tokens_left() if self.budget is not None else None
        return room if shared is None else min(room, shared)

    def answer_size(self, room: int) -> tuple[int, int | None]:
        """(max_tokens, thinking budget or None) of the next turn: thinking when the role has it
        and the room allows it (the API wants max_tokens above the thinking budget)."""
        spec = self.spec
        out = max(16, min(spec.max_output_tokens, room))
        if not spec.thinking or room < spec.thinking_budget + 256:
            return out, None
        return min(out + spec.thinking_budget, room), spec.thinking_budget

    async def no_thinking_here(self, completion: Completion) -> None:
        """Say once that the client's model (sampling) cannot be asked to think."""
        if self.spec.thinking and completion.provider == "sampling" and not self.told_no_thinking:
            self.told_no_thinking = True
            await self.ctx.log(
                "info",
                f"{self.name}: extended thinking is on, but the client's model answers through sampling, "
                "which cannot ask for it: it answers as the client has it set up",
            )

    async def loop(self, tools: dict[str, Skill], arguments: dict[str, Any]) -> tuple[AgentStatus, Any]:
        """Turns until the model finishes or a limit is reached; (status, parsed final answer)."""
        spec = self.spec
        system = self.system(tools)
        offered = [{"name": n, "description": s.description, "input_schema": s.input_schema} for n, s in tools.items()]
        messages: list[dict[str, Any]] = [{"role": "user", "content": self.task(arguments)}]
        reasks = _OUTPUT_REASKS
        while True:
            stop = self.over_budget()
            if stop is not None:
                return stop, None
            if self.iterations >= spec.max_iterations:
                return "iteration_limit", None
            self.iterations += 1
            await self.ctx.progress(self.iterations, spec.max_iterations, f"{self.name}: turn {self.iterations}")
            max_tokens, thinking = self.answer_size(self.room())
            try:
                completion = await self.access.complete(
                    messages,
                    system=system,
                    model=self.model,
                    max_tokens=max_tokens,
                    tools=offered or None,
                    thinking=thinking,
                )
            except (NoModelProviderError, UnknownModelError):
                raise  # the set-up is wrong, not the run: a failed call with the hint
            except SkillsError as exc:
                self.error = str(exc)
                return "error", None
            self.charge()
            await self.no_thinking_here(completion)
            self.last_text = completion.text or self.last_text
            calls = completion.tool_calls()
            if not calls:
                final, problem = self.final(completion)
                if problem is None:
                    return "success", final
                if reasks == 0 or self.iterations >= spec.max_iterations:
                    self.error = problem
                    return "error", final
                reasks -= 1
                await self.ctx.log("warning", f"{self.name}: final answer cannot be used ({problem}); asking again")
                messages += [
                    {"role": "assistant", "content": completion.content or completion.text or "(empty answer)"},
                    {"role": "user", "content": f"Your final answer cannot be used: {problem}. Answer again."},
                ]
                continue
            stop = self.over_budget()
            if stop is None and self.iterations >= spec.max_iterations:
                stop = "iteration_limit"
            if stop is not None:
                return stop, None
            messages.append({"role": "assistant", "content": completion.content})
            messages.append({"role": "user", "content": [await self.call(c, tools) for c in calls]})

    def final(self, completion: Completion) -> tuple[dict[str, Any], str | None]:
        """The final answer as {output, summary, confidence}, and what makes it unusable (or None)."""
        text = completion.text.strip()
        try:
            value = parse_json(text)
        except ValueError:
            value = None
        final: dict[str, JSON]
        if isinstance(value, dict) and "output" in value:
            final = {
                "output": value["output"],
                "summary": str(value.get("summary") or ""),
                "confidence": confidence(value.get("confidence")),
            }
        else:
            final = {"output": value if value is not None else text, "summary": "", "confidence": None}
        if not final["summary"]:
            final["summary"] = first_line(text) if value is None else "finished"
        if self.outputs is not None:
            try:
                check_output(self.name, self.outputs, final["output"])
            except OutputError as exc:
                return final, exc.message.replace(f"'{self.name}' returned a result that does", "`output` does")
        return final, None

    async def call(self, call: dict[str, Any], tools: dict[str, Skill]) -> dict[str, Any]:
        """Run one tool call; always a tool_result block (errors are the model's to handle)."""
        name, call_id = call.get("name", ""), call.get("id", "")
        args: JSON = call.get("input")
        skill = tools.get(name)
        if skill is None:
            catalog: Catalog | None = self.ctx.extras.get("catalog")
            found = catalog.find(name) if catalog is not None else None
            if found is not None and found.kind == "agent":
                refusal = UnknownSkillError(
                    f"'{name}' is an agent, and agents cannot start other agents",
                    hint=f"call one of your tools instead: {', '.join(tools) or 'none'}",
                )
            else:
                refusal = UnknownSkillError(
                    f"'{name}' is not one of your tools", hint=f"you may call: {', '.join(tools) or 'none'}"
                )
            await self.ctx.log("warning", f"{self.name}: refused a call of {name}: {refusal.message}")
            return tool_result(call_id, envelope_text(refusal, where="name"), is_error=True)
        if not isinstance(args, dict):
            refused = ArgumentsError(name, [FieldError("", "the tool input must be a JSON object")])
            return tool_result(call_id, envelope_text(refused), is_error=True)
        await self.ctx.log("info", f"{self.name}: {name} {short(args)}")
        tool_ctx = SkillContext(
            skill=name,
            artifact_dir=self.ctx.artifact_dir,
            run_id=self.ctx.run_id,
            log_fn=self.ctx.log_fn,
            limits=self.ctx.limits,
            extras={
                **{k: v for k, v in self.ctx.extras.items() if k not in ("step_model", "pipeline_model")},
                "model": self.access,
                "agent": self.name,
            },
        )
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}
        with tracing.span(f"execute_tool {name}", attributes=attributes) as span:
            try:
                check_arguments(name, skill.input_schema, args)
                text, is_error = as_text(await skill.run(args, tool_ctx))
            except SkillsError as exc:
                text, is_error = envelope_text(exc), True
                tracing.fail(span, exc.error_type, str(exc))
        if is_error:
            await self.ctx.log("info", f"{self.name}: {name} failed: {text[:200]}")
        return tool_result(call_id, text, is_error=is_error)


async def run_agent(
    skill: AgentHost, contract: SkillContract, arguments: dict[str, Any], ctx: SkillContext
) -> dict[str, Any]:
    """Run an agent skill to its end or its first limit; the seed's SubagentResult as a dict."""
    assert contract.run.agent is not None
    spec = apply_role(contract.run.agent, ctx.extras.get(ROLES_KEY), where="agent.")
    outer = ctx.extras.get("agent")
    if outer:
        raise SkillRunError(
            f"agent '{outer}' cannot start the agent '{skill.name}': agents do not start other agents",
            hint="give the outer agent the skills it needs directly",
        )
    started = time.monotonic()
    agent = _Agent(skill, spec, contract, ctx)
    tools = agent.tools()
    await ctx.log("info", f"{skill.name}: starting (tools: {', '.join(tools) or 'none'})")
    if agent.left_out:
        await ctx.log("warning", f"{skill.name}: not offered, agents do not start agents: {', '.join(agent.left_out)}")
    status: AgentStatus = "timeout"
    final: dict[str, Any] | None = None
    shared = agent.budget.time_left() if agent.budget is not None else None
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": skill.name}
    with (
        tracing.span(f"invoke_agent {spec.role or skill.name}", attributes=attributes) as span,
        anyio.move_on_after(spec.timeout if shared is None else min(spec.timeout, shared)) as clock,
    ):
        status, final = await agent.loop(tools, arguments)
        if status != "success":
            tracing.fail(span, "skill_failed", f"agent stopped: {status}")
    if clock.cancelled_caught and shared is not None and shared < spec.timeout:
        status = "budget_exceeded"
        agent.budget_reason = "the run's agents have used its time"
    agent.charge()
    usage = agent.access.usage
    if final is None:
        final = {"output": agent.last_text or None, "summary": _stopped(status, agent), "confidence": None}
    result: dict[str, Any] = {
        "status": status,
        **final,
        "tokens": usage.total_tokens,
        "cost_usd": shown_usd(usage.cost_pico),
        "duration_s": round(time.monotonic() - started, 3),
        "iterations": agent.iterations,
    }
    if status == "error":
        result["error"] = agent.error
    level = "info" if status == "success" else "warning"
    await ctx.log(
        level,
        f"{skill.name}: {status} ({result['duration_s']:g}s, {agent.iterations} turns, "
        f"{usage.total_tokens:,} tokens, ${usage.cost_usd:.4f})",
    )
    return result


def _stopped(status: AgentStatus, agent: _Agent) -> str:
    spec = agent.spec
    what = {
        "timeout": f"the time limit ({spec.timeout:g}s)",
        "cost_exceeded": f"the cost limit (${spec.max_cost_usd:g})",
        "token_limit": f"the token limit ({spec.max_tokens:,} tokens)",
        "iteration_limit": f"the turn limit ({spec.max_iterations})",
        "budget_exceeded": f"the run's shared budget ({agent.budget_reason})",
    }.get(status)
    if what is None:
        return f"the agent failed: {agent.error}"
    return f"stopped at {what} after {agent.iterations} turns, before a final answer"
