"""The `Runner` of each run kind of folder skills, registered with the core (`skills.core.runner`).

`register_runners` registers them; `skills/__init__.py` calls it, so every way into the package
does. Each runner imports its
executor when it first runs: a server that never runs a script skill never loads the
confinement code, and start-up stays as cheap as the core's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio.to_thread

from ..core.checks import inside
from ..core.errors import SkillRunError
from ..core.runner import register_runner
from ._wire import CLIENT_KEY

if TYPE_CHECKING:
    from ..core.base import SkillContext
    from ..core.contract import SkillContract
    from ..core.folder import FolderSkill

__all__ = ["CLIENT_KEY", "AgentRunner", "PromptRunner", "PythonRunner", "ScriptRunner", "register_runners"]


class _Plain:
    """A runner whose tool output schema is the contract's own `outputs`."""

    def output_schema(self, contract: SkillContract) -> dict[str, Any] | None:
        return contract.outputs

    def runs_apart(self, skill: FolderSkill, contract: SkillContract, ctx: SkillContext) -> bool:
        return False  # scripts read the isolation settings from the server's `ctx`


class PythonRunner(_Plain):
    """`run: {python: module:function}`: in a worker process, or in-process when async."""

    async def run(
        self, skill: FolderSkill, contract: SkillContract, arguments: dict[str, Any], ctx: SkillContext
    ) -> Any:
        from ._python import run_python

        assert contract.run.python is not None
        # Built-ins that start processes (run-tests, shell-command) confine them with the
        # network their own skill.yaml allows (a plain value: it reaches a worker process too).
        ctx.limits = {**ctx.limits, "network": contract.network}
        return await run_python(skill.root, contract.run.python, skill.name, arguments, ctx, contract.timeout)

    def runs_apart(self, skill: FolderSkill, contract: SkillContract, ctx: SkillContext) -> bool:
        """A synchronous function runs in a worker process (`_python`); an async one in-process."""
        from ._python import placed_apart

        assert contract.run.python is not None
        return placed_apart(skill.root, contract.run.python, ctx)


class ScriptRunner(_Plain):
    """`run: {script: path}`: a program in the skill folder, confined when isolation is on."""

    async def run(
        self, skill: FolderSkill, contract: SkillContract, arguments: dict[str, Any], ctx: SkillContext
    ) -> Any:
        from .script import run_script

        program = inside(skill.root, contract.run.script or "")
        if program is None:
            raise SkillRunError(f"'{skill.name}': run.script points outside the skill folder")
        from .isolation import isolation_of

        return await run_script(
            program,
            arguments,
            skill=skill.name,
            workdir=ctx.artifacts(),
            timeout=contract.timeout,
            memory_mb=contract.memory_mb,
            disk_mb=contract.disk_mb,
            max_output_bytes=contract.max_output_bytes,
            env_allow=contract.env,
            log=ctx.log,
            folder=skill.root,
            network=contract.network,
            isolation=await anyio.to_thread.run_sync(isolation_of, ctx.extras),
            total_memory_mb=contract.total_memory_mb,
            max_processes=contract.max_processes,
        )


class PromptRunner(_Plain):
    """`run: {prompt: template}`: the rendered template answered by a model."""

    async def run(
        self, skill: FolderSkill, contract: SkillContract, arguments: dict[str, Any], ctx: SkillContext
    ) -> Any:
        from .prompt import run_prompt

        run = contract.run
        template = inside(skill.root, run.prompt or "")
        if template is None or not template.is_file():
            raise SkillRunError(
                f"'{skill.name}': its prompt template '{run.prompt}' is missing or outside the skill folder",
                hint="create the template inside the skill folder",
            )
        return await run_prompt(skill, contract, template, arguments, ctx)


class AgentRunner:
    """`run: {agent: ...}`: a model in a tool-use loop; the tool's output is the agent's result."""

    def output_schema(self, contract: SkillContract) -> dict[str, Any] | None:
        from .agent import agent_output_schema

        return agent_output_schema(contract.outputs)

    def runs_apart(self, skill: FolderSkill, contract: SkillContract, ctx: SkillContext) -> bool:
        return False

    async def run(
        self, skill: FolderSkill, contract: SkillContract, arguments: dict[str, Any], ctx: SkillContext
    ) -> Any:
        from .agent import run_agent

        return await run_agent(skill, contract, arguments, ctx)


def register_runners() -> None:
    """Register the runner of each run kind with the core (`skills/__init__.py` calls it)."""
    register_runner("python", PythonRunner())
    register_runner("script", ScriptRunner())
    register_runner("prompt", PromptRunner())
    register_runner("agent", AgentRunner())
