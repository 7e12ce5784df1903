"""Step-through (seed 004): a run that pauses after each top-level step and asks what to do.

The graph is streamed with LangGraph's `interrupt_after` on the node that finishes each
top-level step (`compiler.end_node`): the stream ends there with the step's checkpoint
written, and a `StepGate` — the command line's prompt, or an MCP client's elicitation — is
shown the step and its output and answers:

- `continue`: stream on from that checkpoint (`astream(None, config)`);
- `stop`: the run stops there (`RunStopped`); its checkpoints are kept, and `runs resume`
  continues with the next step (with or without step-through);
- `rerun`: the step runs again from the checkpoint written just before it started
  (`compiler.entry_node`, found in the thread's history: LangGraph forks the thread there),
  then the gate is asked again.

After the last step the graph has ended: the gate may still re-run it; `continue` and `stop`
both finish the run. Only top-level steps pause (a loop pauses once, after all its items).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import anyio

from ..errors import PipelineError, RunStopped
from ._nodes import end_node, entry_node

if TYPE_CHECKING:
    from ..language.spec import StepSpec
    from .compiler import RunGraph
    from .context import RunContext

__all__ = ["Decision", "Segment", "StepGate", "StepView", "stream_stepwise"]

Decision = Literal["continue", "stop", "rerun"]


class StepView:
    """What the gate is shown: the step that finished, its output, where it stands in the run."""

    def __init__(self, step: StepSpec, output: Any, place: int, total: int, last: bool) -> None:
        self.step_id = step.id
        self.output = output
        self.place = place
        """1-based place of the step among the top-level steps."""
        self.total = total
        self.last = last
        """The run has no step after this one (`continue` and `stop` both finish it)."""


StepGate = Callable[[StepView], Awaitable[Decision]]
"""Asked after each top-level step; its answer decides what the run does next."""
Segment = Callable[[Any, dict[str, Any], list[str] | None], Awaitable[dict[str, Any] | None]]
"""Streams the graph from a payload and a config (interrupting after the nodes given); the last state."""


async def stream_stepwise(
    segment: Segment,
    graph: RunGraph,
    payload: Any,
    config: dict[str, Any],
    run: RunContext,
    gate: StepGate,
    wall: float,
) -> tuple[dict[str, Any] | None, bool]:
    """Stream the run to its end, pausing after every top-level step for `gate`.

    Returns the final state and whether the run's wall time ran out; the time spent waiting for
    the gate (a person reading the output) does not count against `wall`.
    """
    spec = run.spec
    ends = [end_node(s) for s in spec.steps]
    current: dict[str, Any] = config
    final: dict[str, Any] | None = None
    spent = 0.0
    while True:
        run.last_finished = None
        started = time.monotonic()
        with anyio.move_on_after(max(wall - spent, 0.0)) as clock:
            final = await segment(payload, current, ends) or final
        spent += time.monotonic() - started
        if clock.cancelled_caught:
            return final, True
        snapshot = await graph.aget_state(config)
        finished = run.last_finished
        if finished is None:  # resumed right at the end: nothing ran
            return final, False
        step = next(s for s in spec.steps if s.id == finished)
        place = [s.id for s in spec.steps].index(step.id) + 1
        last = not snapshot.next
        scope: dict[str, Any] = snapshot.values.get("scope") or {}
        view = StepView(step, scope.get(step.id), place, len(spec.steps), last)
        decision = await gate(view)
        if decision == "rerun":
            current = await _before(graph, config, entry_node(step))
            run.progress.restore(max(run.progress.done - 1, 0))
            payload = None
            continue
        if last:
            return final, False
        if decision == "stop":
            raise RunStopped(f"stopped after step '{step.id}' ({place}/{len(spec.steps)})", step_id=step.id)
        payload, current = None, config


async def _before(graph: RunGraph, config: dict[str, Any], entry: str) -> dict[str, Any]:
    """The config of the newest checkpoint whose next node is `entry` (the step not yet started)."""
    async for snapshot in graph.aget_state_history(config):
        if entry in snapshot.next:
            return dict(snapshot.config)
    raise PipelineError(f"the checkpoint before '{entry}' is gone", hint="run the pipeline again")
