"""The seam between the core and the executors: how a folder skill's code runs.

The core loads, checks and describes folder skills; running their code (a worker process, a
confined script, a model prompt, an agent loop) is `skills.executors`' business. So that the
core never imports an executor (tests/test_layers.py), it names what it needs as the `Runner`
protocol and looks runners up by run kind; `skills.executors.runners` registers one per kind
when the `skills` package is imported (its `__init__` calls `register_runners`), before any
folder skill can run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .errors import SkillRunError

if TYPE_CHECKING:
    from .base import SkillContext
    from .contract import RunKind, SkillContract
    from .folder import FolderSkill

__all__ = ["Runner", "register_runner", "runner_for"]


class Runner(Protocol):
    """Runs the folder skills of one run kind (`python`, `script`, `prompt`, `agent`)."""

    def output_schema(self, contract: SkillContract) -> dict[str, Any] | None:
        """The tool's output schema: `contract.outputs`, or what the executor wraps it in."""
        ...

    async def run(
        self, skill: FolderSkill, contract: SkillContract, arguments: dict[str, Any], ctx: SkillContext
    ) -> Any:
        """One call of `skill` with checked `arguments`; failures raise `SkillsError`s."""
        ...

    def runs_apart(self, skill: FolderSkill, contract: SkillContract, ctx: SkillContext) -> bool:
        """Whether the call of `ctx` runs its code in another process, which receives only the
        plain data of its `ctx` (no model access, sampling, asker or Catalog): the server then
        need not build them for the call (`FolderSkill.runs_apart`). What it read to decide may
        be noted on `ctx` for the run, so that the run is placed as decided here."""
        ...


_RUNNERS: dict[str, Runner] = {}


def register_runner(kind: RunKind, runner: Runner) -> None:
    """Make `runner` run the folder skills of `kind` (the last registration wins)."""
    _RUNNERS[kind] = runner


def runner_for(kind: RunKind) -> Runner:
    """The runner of `kind`; a `SkillRunError` when none is registered (never with `import skills`)."""
    runner = _RUNNERS.get(kind)
    if runner is None:
        raise SkillRunError(
            f"no executor runs '{kind}' skills", hint="import the `skills` package: it registers the executors"
        )
    return runner
