"""What a run hands back and leaves behind: its outputs (skill results as plain data), its model
usage (whether it succeeded or not), its data size, and the checkpoint writes a stop left half done."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from skills.core.models import Usage

from ..errors import ExpressionError, PipelineError, StepFailed
from ..language.expressions import render
from ..language.spec import PipelineSpec

__all__ = ["RunUsage", "json_size", "outputs_of", "plain_result", "settle", "usage_of"]

log = logging.getLogger("pipelines.run")


def json_size(value: Any) -> int:
    """Bytes of `value` as JSON: what a limit on a run's data counts."""
    try:
        return len(json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):  # not JSON (a skill's own object): count its text
        return len(str(value))


def usage_of(steps: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """The run's usage as shown: totals over its steps (exact sums, rounded only here), and each
    step that called a model (`steps`; empty when none did)."""
    total = Usage()
    per_step: dict[str, Any] = {}
    for step, tally in (steps or {}).items():
        usage = Usage.from_record(tally)
        total.add(usage)
        per_step[step] = usage.as_dict()
    return {**total.as_dict(), "steps": per_step}


class RunUsage:
    """What a run has spent on models, per step, while it runs: read when it fails.

    A run's graph keeps its usage in a checkpointed channel, which a step adds to when it
    finishes; a step that raises (the run stops there) never writes, nor do the steps still
    running beside it. Money was spent all the same, so every call of the run also adds here
    as it ends (successful or not, parallel items handed to workers included), on top of what an
    earlier attempt had checkpointed (a resumed run), and a failed run reports this.
    """

    def __init__(self) -> None:
        self.steps: dict[str, Usage] = {}

    def add(self, step: str, usage: Usage) -> None:
        if usage.spent:
            self.steps.setdefault(step, Usage()).add(usage)

    def add_records(self, tallies: Mapping[str, Mapping[str, Any]] | None) -> None:
        """Per-step records (`Usage.record`) as a graph update or a checkpoint holds them."""
        for step, tally in (tallies or {}).items():
            self.add(step, Usage.from_record(tally))

    def shown(self) -> dict[str, Any]:
        return usage_of({step: usage.record() for step, usage in self.steps.items()})


async def settle(checkpointer: Any) -> None:
    """Commit what the checkpointer was writing when a failure or a cancel stopped the run.

    When one task of a step fails, LangGraph cancels the step's other work, and can cancel the
    SQLite saver between its INSERT of a finished task's writes and the COMMIT: the connection is
    left inside a transaction that holds the database's write lock (the run history then waits
    on it and fails with "database is locked") and the finished task's writes are lost. Writes
    are complete statements, so committing them is safe, and it keeps those tasks finished.
    """
    conn = getattr(checkpointer, "conn", None)
    lock = getattr(checkpointer, "lock", None)
    if conn is None or lock is None or not hasattr(conn, "commit"):
        return
    import sqlite3

    try:
        async with lock:  # the saver's own lock: never between another run's INSERT and COMMIT
            await conn.commit()
    except sqlite3.Error as exc:  # the run's own error is the one to report
        log.warning("could not commit the checkpoints of a stopped run: %s", exc)


def outputs_of(spec: PipelineSpec, scope: dict[str, Any]) -> dict[str, Any]:
    """The pipeline's result: its `outputs` rendered, or every top-level step's output."""
    if spec.outputs is None:
        return {s.id: scope.get(s.id) for s in spec.steps}
    rendered: dict[str, Any] = {}
    for name, expression in spec.outputs.items():  # one at a time: a failure names its output
        try:
            rendered[name] = render(expression, scope)
        except ExpressionError as exc:
            raise PipelineError(f"outputs.{name}: {exc.message}", hint=exc.hint) from None
    return rendered


def plain_result(result: Any, *, failure: type[Exception] = StepFailed) -> Any:
    """A skill result as plain data for expressions, checkpoints and callers (an imported tool's
    MCP result unwrapped: its structured content, else its text); its `isError` raises `failure`.

    Many servers answer with JSON as text and no structured content: a single text that is one
    JSON value is that value, so that `{{ step.key }}` works; any other text stays a string.
    """
    from mcp_types import CallToolResult

    if isinstance(result, CallToolResult):
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content)
            raise failure(text or "the tool reported an error")
        if result.structured_content is not None:
            return result.structured_content
        texts = [getattr(c, "text", None) for c in result.content]
        return _json_or_text(texts[0]) if len(texts) == 1 else texts
    return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_or_text(text: str | None) -> Any:
    """`text` parsed when it is exactly one JSON value (strict: no NaN or Infinity), else unchanged."""
    import json

    if text is None or not text.strip():
        return text
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):  # JSONDecodeError, a constant, nesting beyond the parser
        return text
