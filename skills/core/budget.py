"""The budget all agents of one run share (seed 002, section 9): tokens, cost and time.

Each agent has its own limits; a run that starts many agents — a parallel loop of agent steps,
`orchestrate` routing to an agent, a pipeline calling pipelines — also has one budget for all
of them together, so that twenty agents of $0.50 each cannot spend $10 between them when the
run may spend $2. Every agent adds what each of its model turns spent (its tools' model calls
included) as soon as the turn returns, and checks the budget before each turn and each tool
call: once the tokens or the cost are spent, or the time is up, every agent of the run stops
at its next check with the status `budget_exceeded`, parallel ones included. As with an
agent's own limits, a turn that crosses the budget is not undone; no further turn starts.

A run's budget lives in `ctx.extras[AGENT_BUDGET_KEY]`; a budget made for a run inside another
(a pipeline called as a step) charges its parent too, so the outer budget bounds the whole.
Budgets are per attempt: a resumed run starts a fresh one (like `max_wall_time`).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from .models import Usage, pico_usd

__all__ = ["AGENT_BUDGET_KEY", "BudgetName", "RunBudget"]

AGENT_BUDGET_KEY = "agent_budget"
"""Where the calls of a run find its `RunBudget` in `ctx.extras`."""

BudgetName = Literal["tokens", "cost", "time"]


class RunBudget:
    """What the agents of one run may spend together, and what they have spent."""

    def __init__(
        self,
        *,
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
        max_time: float | None = None,
        parent: RunBudget | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self.deadline = time.monotonic() + max_time if max_time is not None else None
        self.max_time = max_time
        self.parent = parent
        self.spent = Usage()

    @classmethod
    def of(cls, limits: Any, *, parent: RunBudget | None = None) -> RunBudget:
        """A budget from run limits (`max_agent_tokens`, `max_agent_cost_usd`, `max_agent_time`)."""
        return cls(
            max_tokens=getattr(limits, "max_agent_tokens", None),
            max_cost_usd=getattr(limits, "max_agent_cost_usd", None),
            max_time=getattr(limits, "max_agent_time", None),
            parent=parent,
        )

    def charge(self, usage: Usage) -> None:
        """Add what an agent spent (here and in every budget above this one)."""
        budget: RunBudget | None = self
        while budget is not None:
            budget.spent.add(usage)
            budget = budget.parent

    def exceeded(self) -> tuple[BudgetName, str] | None:
        """The first budget (here or above) that is spent: (which, in words), or None."""
        budget: RunBudget | None = self
        now = time.monotonic()
        while budget is not None:
            spent = budget.spent
            if budget.max_tokens is not None and spent.total_tokens >= budget.max_tokens:
                return "tokens", f"the run's agents have spent its {budget.max_tokens:,} tokens"
            if budget.max_cost_usd is not None and spent.cost_pico >= pico_usd(budget.max_cost_usd):
                return "cost", f"the run's agents have spent its ${budget.max_cost_usd:g}"
            if budget.deadline is not None and now >= budget.deadline:
                return "time", f"the run's agents have used its {budget.max_time:g} seconds"
            budget = budget.parent
        return None

    def tokens_left(self) -> int | None:
        """Tokens the agents may still spend (the tightest budget here or above), None: no bound."""
        left: int | None = None
        budget: RunBudget | None = self
        while budget is not None:
            if budget.max_tokens is not None:
                mine = max(budget.max_tokens - budget.spent.total_tokens, 0)
                left = mine if left is None else min(left, mine)
            budget = budget.parent
        return left

    def time_left(self) -> float | None:
        """Seconds until the earliest deadline here or above, None: no bound."""
        left: float | None = None
        budget: RunBudget | None = self
        now = time.monotonic()
        while budget is not None:
            if budget.deadline is not None:
                mine = max(budget.deadline - now, 0.0)
                left = mine if left is None else min(left, mine)
            budget = budget.parent
        return left
