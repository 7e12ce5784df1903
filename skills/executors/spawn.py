"""`spawn_agent`: one agent of a role (seed 002's spawn_subagent), for clients and the router.

The roles themselves are configuration and live in the core (`skills.core.roles`); running one
is the agent executor's work, so this half sits with it.
"""

from __future__ import annotations

from typing import Any

from ..core.base import SkillContext
from ..core.contract import RunSpec, SkillContract
from ..core.roles import ROLES_KEY, AgentRole, RoleBook, load_roles
from .agent import run_agent

__all__ = ["RoleHost", "spawn_agent"]


class RoleHost:
    """A role as the host an agent run needs: its name; the instructions are in its spec."""

    kind = "agent"

    def __init__(self, name: str, role: AgentRole) -> None:
        self.name = name
        self.description = role.description or f"the {name} agent"

    def body(self) -> str:
        return ""

    def files(self) -> list[str]:
        return []


async def spawn_agent(
    role: str, task: str, ctx: SkillContext, *, context: str = "", given: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run one agent of `role` on `task` (seed 002's spawn_subagent): its result, with `role`.

    `given`: settings of the caller that narrow the role (limits, `skills`) or replace its
    `model` and `thinking`. The run's shared budget in `ctx` applies as for any agent.

    Raises:
        UnknownRoleError: no such role. ArgumentsError: `given` widens the role's allow-list.
        NoModelProviderError: no model can be asked.
    """
    book = ctx.extras.get(ROLES_KEY)
    book = book if isinstance(book, RoleBook) else load_roles(None)
    found = book.get(role)
    spec = found.narrowed(role, given or {})
    arguments = {"task": task, **({"context": context} if context else {})}
    result = await run_agent(RoleHost(role, found), SkillContract(run=RunSpec(agent=spec)), arguments, ctx)
    return {"role": role, **result}
