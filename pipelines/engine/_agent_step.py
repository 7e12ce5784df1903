"""An `agent:` step's pieces for the runtime (private to pipelines): the Skill an agent run needs, and
the rule that an agent which stopped before its answer failed its step."""

from __future__ import annotations

from typing import Any, cast

from skills import SkillRunError
from skills.core.errors import SkillTimeoutError

from ..language.spec import StepSpec


def agent_answered(step: StepSpec, result: Any) -> None:
    """An agent that stopped before its answer (a limit, the run's budget, an error) failed its
    step: raised with the agent's result attached (`on_error: continue` keeps it in the record)."""
    if not isinstance(result, dict):
        return
    answer = cast("dict[str, Any]", result)
    status = answer.get("status")
    if status in (None, "success"):
        return
    said = str(answer.get("summary") or status)
    detail = said if said.startswith("the agent") else f"the agent {said}"
    hint = (
        "raise the agent's limits (max_iterations, max_tokens, max_cost_usd, timeout) or the run's agent "
        "budget (limits: max_agent_*); on_error: continue keeps the run going with its partial result"
        if status != "error"
        else "the agent's result says what went wrong; on_error: continue keeps the run going"
    )
    kind = SkillTimeoutError if status == "timeout" else SkillRunError
    failure = kind(f"{detail} (status {status})", hint=hint, where=f"step '{step.id}'")
    failure.attached = answer
    raise failure


class StepAgent:
    """An `agent:` step as the Skill an agent run needs: its name, description and instructions."""

    kind = "agent"

    def __init__(self, step: StepSpec) -> None:
        self.name = step.id
        self.description = step.description or step.name or f"the agent of step {step.id}"
        self._body = step.description or ""

    def body(self) -> str:
        return self._body

    def files(self) -> list[str]:
        return []
