"""Errors of the pipelines package.

Two families, kept apart on purpose (as in `skills.core.errors`): the user's mistakes in a pipeline
file carry a location and a hint and are found before anything runs; runtime failures say what
went wrong while a run was under way.

    PipelineError                  base: message + hint
    ├── ExpressionError            a `{{ }}` expression that fails to parse or render, or that
    │                              breaks the sandbox (names the expression)
    ├── VerificationError          a pipeline file with problems; carries every `Issue` at once
    ├── StepFailed                 a step failed at run time (names the step)
    │   └── RunLimitExceeded       the run hit one of its limits (names the limit and the step)
    ├── RunCancelled               the run was cancelled by the client or the user
    ├── RunStopped                 step-through: the user stopped the run after a step (resumable)
    ├── RunWaiting                 an `ask:` step could reach nobody: the run waits for its answer
    │                              (`asking`; recorded `waiting`, answered by `answer_run`)
    ├── AnswerError                an answer that does not fit its question's schema (`asking`)
    └── RefusedData                what the queue or the shared state handed us is not our data (a
                                   pickle, a type not ours, an unknown shape): refused, never run

`RunLimitError` is how a `RunLimitExceeded` reaches a caller: a `skills.SkillRunError` (so every
caller of a skill handles it) whose envelope type is `limit_exceeded` and which names the limit.
`RunPartial` is a run that went to its end with failed steps (`on_error: continue`, or a nested
run that did): a `skills.SkillRunError` too, which carries the whole result (outputs, summary,
usage) to its caller, because a run succeeds only when every step did.

`Issue` is not an exception: it is one problem found by the verifier, rendered as
`file:line:col: severity: message (hint: ...)`. A failure record is not one either: it is what
a step with `on_error: continue` leaves as its output when it fails (`failure_record`), marked
so that an expression can tell it from a result (`{{ x is failed }}`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from skills.core.errors import ErrorType, SkillRunError

__all__ = [
    "FAILED_MARK",
    "ExpressionError",
    "Issue",
    "PipelineError",
    "RefusedData",
    "RunCancelled",
    "RunLimitError",
    "RunLimitExceeded",
    "RunPartial",
    "RunStopped",
    "StepFailed",
    "VerificationError",
    "failure_record",
    "is_failure_record",
]


class PipelineError(Exception):
    """Base of every error the pipelines package raises on purpose."""

    message: str
    hint: str = ""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class ExpressionError(PipelineError):
    """A `{{ }}` expression that cannot be parsed or rendered, or that the sandbox refused.

    `expression` is the source text (with its braces when it had them) so the verifier and the
    runtime can quote it next to the step that holds it; `line` is the 1-based line within that
    text when Jinja reports one (multi-line block scalars), else None.
    """

    expression: str = ""
    line: int | None = None

    def __init__(self, message: str, *, hint: str = "", expression: str = "", line: int | None = None) -> None:
        super().__init__(message, hint=hint)
        self.expression = expression
        self.line = line


@dataclass(frozen=True)
class Issue:
    """One problem the verifier found: where it is, what is wrong, and how to fix it."""

    file: str
    line: int
    col: int
    message: str
    hint: str = ""
    severity: Literal["error", "warning"] = "error"
    code: str = ""

    def __str__(self) -> str:
        text = f"{self.file}:{self.line}:{self.col}: {self.severity}: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text


class VerificationError(PipelineError):
    """A pipeline file with one or more problems; all of them are in `issues`, in file order."""

    issues: list[Issue]
    partial: tuple[Any, Any] | None = None
    """(spec, source map) of the pipeline without the values the schema refused, when that is a
    valid pipeline: verification checks it too, so every mistake is reported at once."""

    def __init__(self, message: str, *, hint: str = "", issues: list[Issue] | None = None) -> None:
        super().__init__(message, hint=hint)
        self.issues = list(issues or [])


class StepFailed(PipelineError):
    """A step failed while the pipeline ran; `step_id` names it for progress, logs and resume."""

    step_id: str

    def __init__(self, message: str, *, hint: str = "", step_id: str = "") -> None:
        super().__init__(message, hint=hint)
        self.step_id = step_id


class RunCancelled(PipelineError):
    """The run was cancelled; finished steps stay checkpointed so it can be resumed."""


class RefusedData(PipelineError):
    """Data from Redis or the state database that is not ours: it is dropped, never decoded further.

    Whoever can write to those stores can change what runs do, but must not run code in our
    processes: a pickle, a checkpoint naming a type outside our own, or a message of an unknown
    shape stops here (see `_wire` and `_checkpoints`).
    """


class RunStopped(PipelineError):
    """Step-through: the user chose to stop after `step_id`; the run resumes from the next step."""

    def __init__(self, message: str, *, step_id: str, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.step_id = step_id


FAILED_MARK = "step_failed"
"""The key that marks a failure record: `true` there and nowhere in a skill's own result.

A plain `{error, step}` mapping could not be told from a result (many skills return an `error`
key, and any mapping is truthy), so `{{ tests.passed if tests else 0 }}` crashed on a failed
`tests`. Documented in docs/pipelines.md#on_error-continue.
"""


def failure_record(step_id: str, message: str) -> dict[str, Any]:
    """The output of a step that failed under `on_error: continue`: `{error, step, step_failed: true}`."""
    return {"error": message, "step": step_id, FAILED_MARK: True}


def is_failure_record(value: Any) -> bool:
    """True for what `failure_record` made (the `failed` test of expressions: `{{ x is failed }}`)."""
    return isinstance(value, Mapping) and cast("Mapping[str, Any]", value).get(FAILED_MARK) is True


class RunLimitExceeded(StepFailed):
    """The run reached one of its limits (`pipelines.language.limits`); `limit` names it (`max_steps`, ...).

    Never retried nor continued past by `on_error: continue`: the limit bounds the whole run.
    """

    limit: str

    def __init__(self, message: str, *, limit: str, hint: str = "", step_id: str = "") -> None:
        super().__init__(message, hint=hint, step_id=step_id)
        self.limit = limit


class RunLimitError(SkillRunError):
    """A run stopped at one of its limits, as its caller sees it (envelope type `limit_exceeded`)."""

    error_type: ErrorType = "limit_exceeded"

    def __init__(self, message: str, *, limit: str, hint: str = "", where: str = "") -> None:
        super().__init__(message, hint=hint, where=where)
        self.limit = limit


class RunPartial(SkillRunError):
    """A run that finished, but not every step succeeded: steps failed and were continued past
    (`on_error: continue`), or a pipeline a step called was itself partial.

    It is not a success anywhere (an `isError` result, exit status 1, `failed` in the run history),
    yet nothing it computed is lost: `result` is the run's whole result (outputs, `run_id`,
    summary, usage), sent with the error envelope (`attached`). A pipeline that calls a partial
    one gets `result` as the step's output, and its own summary names the failed steps inside.
    """

    def __init__(self, result: dict[str, Any], *, summary: dict[str, Any], run_id: str, where: str = "") -> None:
        failed: list[str] = list(summary.get("failed_steps") or [])
        super().__init__(
            f"run {run_id} ended {summary.get('line', 'PARTIAL')}",
            hint="the outputs are kept with this error, a failed step's output being its failure record "
            f"(`{{{{ step is failed }}}}`); fix {', '.join(failed) or 'the failed steps'} and run it again",
            where=where,
        )
        self.result = result
        self.summary = summary
        self.run_id = run_id
        self.attached = result
