"""Where a step starts and ends in the compiled graph, the default width of a parallel `for`,
and how many steps a graph may take.

The compiler builds the graph by these names and the runtime finds its way in it by them
(step-through pauses at a step's end node, a re-run goes back to its entry node; a `for`
without `max_parallel` runs this many items at once). Both import them from here, so the
runtime never imports the compiler, which imports the runtime's `RunContext`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..language.spec import StepSpec

__all__ = ["DEFAULT_MAX_PARALLEL", "RECURSION_LIMIT", "end_node", "entry_node"]

DEFAULT_MAX_PARALLEL = 16
RECURSION_LIMIT = 10_000_000
"""LangGraph's step limit for a run's graph and its units: loops carry their own guards
(max_iterations, item counts, the run's max_steps)."""


CALL_KINDS = ("skill", "agent", "prompt", "ask")
"""Steps that are one node: they call something (not a loop over it)."""


def entry_node(step: StepSpec) -> str:
    """The node that starts a (top-level) step: a re-run goes back to the checkpoint before it."""
    return step.id if step.kind in CALL_KINDS else f"{step.id}.if" if step.kind == "if" else f"{step.id}.start"


def end_node(step: StepSpec) -> str:
    """The node that finishes a step (its output is in the scope after it): step-through pauses there."""
    return step.id if step.kind in CALL_KINDS else f"{step.id}.join" if step.kind == "if" else f"{step.id}.done"
