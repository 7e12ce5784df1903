"""The run summary a pipeline result carries (seed 004's `ExecutionResult`).

A caller should not have to read every output to know how a run went: the result's `summary`
counts the top-level steps that succeeded, failed and were skipped, names the failed steps by
their path, and says it in one line:

    {"total": 5, "succeeded": 3, "failed": 1, "skipped": 1, "failed_steps": ["review/tests"],
     "line": "PARTIAL: 3/5 steps succeeded, 1 failed (review/tests), 1 skipped"}

A run that stops at a failing step is not a result but an error (its envelope's `where` names
the step), so a summary only ever counts failures the run went on after: a step with
`on_error: continue` that failed (an agent step stopped by a limit or budget before its answer
is one), or a pipeline called as a step whose own run had such failures (it rolls up: the
calling step counts as failed, and its failed steps are listed under its id, `review/tests`).
A run whose summary counts a failure is PARTIAL, and PARTIAL is not success: the result is an
error (`errors.RunPartial`), whatever carries it (tool result, exit status, run history).

A top-level step counts as failed when it left a failure record — itself, or for a loop,
branch or group any of the steps inside it (any loop item); the path names the step inside
(`outer/check`). Skipped means its condition was false (its output is null). The counts follow
the pipeline's structure, not the data: a report step that merely quotes an earlier failure
record in its result is not a failure.

When the pipeline itself returns a `summary` (an output of that name, or a top-level step of
that id when it declares no outputs), its value keeps the name and the run summary is returned
as `run_summary`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from ..errors import is_failure_record

if TYPE_CHECKING:
    from .spec import PipelineSpec, StepSpec

__all__ = ["SUMMARY_SCHEMA", "run_summary_in", "summary_key", "summary_of"]

SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "How the run went: top-level steps that succeeded, failed (on_error: continue, or a nested "
    "run that had failed steps) and were skipped. Any failed step makes the run PARTIAL, which is not a success.",
    "properties": {
        "total": {"type": "integer", "description": "Top-level steps."},
        "succeeded": {"type": "integer"},
        "failed": {"type": "integer", "description": "Top-level steps that failed and were continued past."},
        "skipped": {"type": "integer", "description": "Steps whose condition was false."},
        "failed_steps": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The path of each failed step: `step`, `loop/inner`, `called-pipeline-step/its-step`.",
        },
        "line": {"type": "string", "description": "The same in one readable line: SUCCESS or PARTIAL."},
    },
    "required": ["total", "succeeded", "failed", "skipped", "failed_steps", "line"],
}


def summary_key(spec: PipelineSpec) -> str:
    """`summary`, or `run_summary` when the pipeline returns a `summary` of its own."""
    own = spec.outputs if spec.outputs is not None else {s.id: None for s in spec.steps}
    return "run_summary" if "summary" in own else "summary"


def summary_of(spec: PipelineSpec, scope: dict[str, Any]) -> dict[str, Any]:
    """The summary of a finished run from its final scope (every top-level step's output)."""
    failed: list[str] = []
    paths: list[str] = []
    for step in spec.steps:
        found = _failures(step, scope.get(step.id), step.id)
        if found:
            failed.append(step.id)
            paths += found
    skipped = sum(1 for s in spec.steps if scope.get(s.id) is None and s.id not in failed)
    total = len(spec.steps)
    succeeded = total - len(failed) - skipped
    failed_steps = list(dict.fromkeys(paths))
    line = f"{'PARTIAL' if failed else 'SUCCESS'}: {succeeded}/{total} steps succeeded, {len(failed)} failed"
    if failed:
        line += f" ({', '.join(failed_steps)})"
    line += f", {skipped} skipped"
    return {
        "total": total,
        "succeeded": succeeded,
        "failed": len(failed),
        "skipped": skipped,
        "failed_steps": failed_steps,
        "line": line,
    }


def run_summary_in(value: Any) -> dict[str, Any] | None:
    """The run summary of a pipeline's result (a pipeline called as a step), or None: not one."""
    if not isinstance(value, Mapping):
        return None
    result = cast("Mapping[str, Any]", value)
    if not isinstance(result.get("run_id"), str):
        return None
    for key in ("run_summary", "summary"):
        found = result.get(key)
        if isinstance(found, Mapping) and isinstance(cast("Mapping[str, Any]", found).get("failed_steps"), list):
            return dict(cast("Mapping[str, Any]", found))
    return None


def _failures(step: StepSpec, output: Any, path: str) -> list[str]:
    """The paths of the failed steps `step` (or a step inside it, in any loop item) left."""
    if output is None:
        return []
    if is_failure_record(output):
        return [path]
    nested = _nested(output, path)
    if nested:
        return nested
    if step.for_ is not None and isinstance(output, list):
        items = cast("list[Any]", output)
        found: list[str] = []
        for item in items:
            if not step.steps:
                found += [path] if is_failure_record(item) else _nested(item, path)
            else:
                found += _inside(step.steps, item, path)
        return found
    if step.calls:
        return []
    return _inside(step.children(), output, path)


def _nested(output: Any, path: str) -> list[str]:
    """A pipeline's result with failed steps: their paths under `path` (the run rolls up)."""
    summary = run_summary_in(output)
    if summary is None or not summary.get("failed"):
        return []
    listed: list[Any] = summary.get("failed_steps") or []
    inner = [str(p) for p in listed]
    return [f"{path}/{p}" for p in inner] or [path]


def _inside(steps: list[StepSpec], outputs: Any, path: str) -> list[str]:
    """A `{substep: output}` mapping (a loop item, a branch, a group, a while's last iteration)."""
    if not isinstance(outputs, dict):
        return []
    by_id = cast("dict[str, Any]", outputs)
    found: list[str] = []
    for step in steps:
        found += _failures(step, by_id.get(step.id), f"{path}/{step.id}")
    return found
