"""Asking the person from a pipeline (`ask:` steps), and runs that wait for an answer.

An `ask:` step puts one question (its rendered text) and a flat JSON Schema (the fields of the
answer, as MCP elicitation allows) to whoever can answer. Who that is, the caller decides and
puts it in `ctx.extras[ASK_KEY]` as an `Asker`: the MCP face asks the calling client (an
elicitation request in the handshake era, an input round or a task's input request in
2026-07-28), `orchestrator run` asks at the terminal. When nobody can be asked (a client without
elicitation, a run on a background worker, a command line without a terminal), the step raises
`RunWaiting`: the run is checkpointed with the status `waiting`, its question and schema are
kept with it, and the call ends with `waiting_result`. `answer_run` / `orchestrator runs answer`
check the answer against the schema (`check_answer`), keep it with the run and resume it; the
step asks again, finds its answer under its key (`answer_key`) and goes on.

The answers of a run stay with it (a loop that asks once per item re-runs its earlier items'
asks on resume and finds their answers too). Keys are the digest of the step, the question and
the schema plus how many times the same one was asked before in the attempt, so the same
question asked again in a later iteration is a new question.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from .errors import PipelineError

__all__ = [
    "ANSWERS_KEY",
    "ASKING_KEY",
    "ASK_KEY",
    "DEFAULT_ASK_SCHEMA",
    "AnswerError",
    "Asker",
    "Asking",
    "RunWaiting",
    "check_answer",
    "coerce_answer",
    "flat_schema_problems",
    "waiting_result",
]

ASK_KEY = "ask_person"
"""`ctx.extras` key: the `Asker` of the call (absent: nobody can be asked; the run waits)."""
ANSWERS_KEY = "run_answers"
"""`ctx.extras` key: the answers a resumed run was given (`answer_run`), by key."""
ASKING_KEY = "run_asking"
"""`ctx.extras` key of a step's context: the run's `Asking` (set by the runtime)."""

Asker = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""(question, requested schema) -> `{"action": "accept"|"decline"|"cancel", "content": {...}}`,
the shape of an MCP elicitation result."""

DEFAULT_ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "Your answer"}},
    "required": ["answer"],
}
"""The schema of an `ask:` step without `schema:`: one line of text."""

_PRIMITIVES = ("string", "number", "integer", "boolean")


class RunWaiting(PipelineError):
    """Nobody can be asked an `ask:` step's question now: the run waits for `answer_run`."""

    def __init__(self, *, step_id: str, key: str, question: str, schema: dict[str, Any]) -> None:
        super().__init__(
            f"step '{step_id}' waits for an answer: {question}",
            hint="answer it with the answer_run tool or `orchestrator runs answer RUN --input k=v`",
        )
        self.step_id, self.key, self.question, self.schema = step_id, key, question, schema

    def record(self) -> dict[str, Any]:
        """What the run store keeps while the run waits."""
        return {"step": self.step_id, "key": self.key, "question": self.question, "schema": self.schema}


def waiting_result(run_id: str, asking: dict[str, Any]) -> dict[str, Any]:
    """The successful result of a call whose run now waits for the person's answer."""
    return {
        "run_id": run_id,
        "status": "waiting",
        "step": asking.get("step"),
        "question": asking.get("question"),
        "schema": asking.get("schema"),
        "hint": f"answer with the answer_run tool ({{run_id: {run_id!r}, answer: {{...}}}}) or "
        f"`orchestrator runs answer {run_id} --input k=v`; the run goes on from this step",
    }


@dataclass
class Asking:
    """A run's side of its `ask:` steps: who can be asked, and the answers given so far."""

    extras: dict[str, Any] = field(default_factory=dict[str, Any], repr=False)
    """The run's context extras: its `ASK_KEY` is read at each question, so a caller that can no
    longer ask (a call that went on in the background) removes it and later questions wait."""
    answers: dict[str, Any] = field(default_factory=dict[str, Any])
    _asked: dict[str, int] = field(default_factory=dict[str, int])

    @classmethod
    def of(cls, extras: dict[str, Any]) -> Asking:
        answers = extras.get(ANSWERS_KEY)
        return cls(extras, dict(cast("dict[str, Any]", answers)) if isinstance(answers, dict) else {})

    @property
    def asker(self) -> Asker | None:
        return self.extras.get(ASK_KEY)

    def key(self, step_id: str, question: str, schema: dict[str, Any]) -> str:
        """The key of this asking: the same question of the same step gets a new one each time."""
        raw = json.dumps([step_id, question, schema], sort_keys=True, ensure_ascii=True, default=str).encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(raw).digest()[:12]).decode().rstrip("=")
        seen = self._asked.get(digest, 0)
        self._asked[digest] = seen + 1
        return f"ask-{digest}-{seen}"


def flat_schema_problems(schema: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """Why `schema` is not a flat object schema MCP elicitation can show (empty: it is one).

    Each problem is (where inside `schema`, what is wrong)."""
    if not isinstance(schema, dict):
        return [((), "must be a JSON Schema object (a mapping)")]
    given = cast("dict[str, Any]", schema)
    problems: list[tuple[tuple[str | int, ...], str]] = []
    if given.get("type") != "object":
        problems.append((("type",), "must be `object`"))
    properties = given.get("properties")
    if not isinstance(properties, dict) or not properties:
        problems.append((("properties",), "must name at least one field"))
        return problems
    for name, prop in cast("dict[str, Any]", properties).items():
        where: tuple[str | int, ...] = ("properties", str(name))
        if not isinstance(prop, dict):
            problems.append((where, "must be a mapping with a `type`"))
            continue
        kind = cast("dict[str, Any]", prop).get("type")
        if kind == "array":
            items = cast("dict[str, Any]", prop).get("items")
            ok = isinstance(items, dict) and (
                "enum" in items or "anyOf" in items or cast("dict[str, Any]", items).get("type") == "string"
            )
            if not ok:
                problems.append((where, "an array field may only be a list of choices (`items: {enum: [...]}`)"))
        elif kind not in _PRIMITIVES:
            problems.append(
                (where, f"type {kind!r} cannot be asked: fields are strings, numbers, integers, booleans or enums")
            )
    required = given.get("required")
    if required is not None and not (
        isinstance(required, list) and all(r in properties for r in cast("list[Any]", required))
    ):
        problems.append((("required",), "must list names of fields under `properties`"))
    return problems


def check_answer(schema: dict[str, Any], answer: Any, *, where: str = "answer") -> dict[str, Any]:
    """The answer, when it fits the step's schema; else `AnswerError` naming every field that does not."""
    from skills import ArgumentsError
    from skills.core.schema import check_arguments

    if not isinstance(answer, dict):
        raise AnswerError(f"{where} must be an object with the fields {', '.join(_fields(schema))}")
    try:
        check_arguments(where, schema, cast("dict[str, Any]", answer))
    except ArgumentsError as exc:
        detail = "; ".join(f"{e.field or '(answer)'}: {e.message}" for e in exc.errors)
        raise AnswerError(f"{where} does not fit the question's schema: {detail}", fields=_fields(schema)) from None
    return cast("dict[str, Any]", answer)


def coerce_answer(schema: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`--input k=v` values made the types the schema asks for where they say so plainly
    (`yes`/`no` for booleans, digits for numbers; a string field keeps the text as it is)."""
    properties: dict[str, Any] = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for name, value in given.items():
        prop: dict[str, Any] = properties.get(name) or {}
        kind = prop.get("type")
        if kind == "string" and not isinstance(value, str):
            value = json.dumps(value) if not isinstance(value, (int, float)) or isinstance(value, bool) else str(value)
        elif kind == "boolean" and isinstance(value, str):
            value = {"yes": True, "y": True, "true": True, "no": False, "n": False, "false": False}.get(
                value.strip().lower(), value
            )
        out[name] = value
    return out


class AnswerError(PipelineError):
    """An answer that does not fit its question's schema (the run keeps waiting)."""

    def __init__(self, message: str, *, fields: list[str] | None = None) -> None:
        names = ", ".join(fields or [])
        super().__init__(message, hint=f"answer with the fields {names}" if names else "answer with an object")


def _fields(schema: dict[str, Any]) -> list[str]:
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    return [f"{n} (required)" if n in required else n for n in properties]
