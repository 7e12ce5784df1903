"""The run summary a pipeline result carries (seed 004's `ExecutionResult`).

A caller should not have to read every output to know how a run went: the result's `summary`
counts the top-level steps that succeeded, failed and were skipped, and says it in one line:

    {"total": 5, "succeeded": 3, "failed": 1, "skipped": 1, "failed_steps": ["tests"],
     "line": "PARTIAL: 3/5 steps succeeded, 1 failed (tests), 1 skipped"}

A run that stops at a failing step is not a result but an error (its envelope's `where` names
the step), so a summary only ever counts failures that `on_error: continue` let the run survive.
A top-level step counts as failed when it left a failure record — itself, or for a loop, branch
or group any of the steps inside it (any loop item). Skipped means its condition was false (its
output is null). The counts follow the pipeline's structure, not the data: a report step that
merely quotes an earlier failure record in its result is not a failure.

When the pipeline itself returns a `summary` (an output of that name, or a top-level step of
that id when it declares no outputs), its value keeps the name and the run summary is returned
as `run_summary`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from .errors import is_failure_record

if TYPE_CHECKING:
    from .spec import PipelineSpec, StepSpec

__all__ = ["SUMMARY_SCHEMA", "summary_key", "summary_of"]

SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "How the run went: top-level steps that succeeded, failed (on_error: continue) and were skipped.",
    "properties": {
        "total": {"type": "integer", "description": "Top-level steps."},
        "succeeded": {"type": "integer"},
        "failed": {"type": "integer", "description": "Steps that failed and were continued past (on_error)."},
        "skipped": {"type": "integer", "description": "Steps whose condition was false."},
        "failed_steps": {"type": "array", "items": {"type": "string"}},
        "line": {"type": "string", "description": "The same in one readable line."},
    },
    "required": ["total", "succeeded", "failed", "skipped", "failed_steps", "line"],
}


def summary_key(spec: PipelineSpec) -> str:
    """`summary`, or `run_summary` when the pipeline returns a `summary` of its own."""
    own = spec.outputs if spec.outputs is not None else {s.id: None for s in spec.steps}
    return "run_summary" if "summary" in own else "summary"


def summary_of(spec: PipelineSpec, scope: dict[str, Any]) -> dict[str, Any]:
    """The summary of a finished run from its final scope (every top-level step's output)."""
    failed = [s.id for s in spec.steps if _failed(s, scope.get(s.id))]
    skipped = sum(1 for s in spec.steps if scope.get(s.id) is None and s.id not in failed)
    total = len(spec.steps)
    succeeded = total - len(failed) - skipped
    line = f"{'PARTIAL' if failed else 'SUCCESS'}: {succeeded}/{total} steps succeeded, {len(failed)} failed"
    if failed:
        line += f" ({', '.join(failed)})"
    line += f", {skipped} skipped"
    return {
        "total": total,
        "succeeded": succeeded,
        "failed": len(failed),
        "skipped": skipped,
        "failed_steps": failed,
        "line": line,
    }


def _failed(step: StepSpec, output: Any) -> bool:
    """Whether `step` (or a step inside it, in any loop item) left a failure record."""
    if output is None:
        return False
    if is_failure_record(output):
        return True
    if step.for_ is not None and isinstance(output, list):
        items = cast("list[Any]", output)
        if not step.steps:
            return any(is_failure_record(item) for item in items)
        return any(_inside(step.steps, item) for item in items)
    if step.calls:
        return False
    return _inside(step.children(), output)


def _inside(steps: list[StepSpec], outputs: Any) -> bool:
    """A `{substep: output}` mapping (a loop item, a branch, a group, a while's last iteration)."""
    if not isinstance(outputs, dict):
        return False
    by_id = cast("dict[str, Any]", outputs)
    return any(_failed(s, by_id.get(s.id)) for s in steps)
