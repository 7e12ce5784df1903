"""Asking a model for a structured answer: lenient parsing and a bounded re-ask.

Models wrap JSON in prose or code fences, or cut it short; the answer is searched for the JSON
it holds, checked by the caller's `validate`, and on failure the model is told what was wrong
and asked again, a bounded number of times. The whole exchange stays in one conversation so
the model sees its own answer next to the complaint.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from ..core.errors import SkillRunError
from ..core.jsontext import JSON, load_json
from ..core.models import ModelAccess

__all__ = ["AnswerError", "ask_json", "fenced_blocks", "parse_json"]

T = TypeVar("T")

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:\n```|\Z)", re.DOTALL)
_MAX_PROBLEM = 1200


class AnswerError(SkillRunError):
    """The model never gave a usable answer within the allowed re-asks."""


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced code block of a Markdown text as (language, content)."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]


def parse_json(text: str) -> JSON:
    """The JSON value an answer holds: the whole text, a fenced block, or the outermost {...}.

    Raises:
        ValueError: nothing in the text parses as JSON (the message says why).
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError("the answer was empty")
    candidates = [stripped]
    candidates += [body for lang, body in fenced_blocks(stripped) if lang in ("", "json", "json5", "javascript")]
    start, end = stripped.find("{"), stripped.rfind("}")
    if 0 <= start < end:
        candidates.append(stripped[start : end + 1])
    first_error = ""
    for candidate in candidates:
        try:
            return load_json(candidate)  # our bounds first: a model's `[[[[...` is a JSON error, not a RecursionError
        except json.JSONDecodeError as exc:
            first_error = first_error or f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    raise ValueError(f"it is not JSON ({first_error})")


async def ask_json(
    access: ModelAccess,
    prompt: str,
    validate: Callable[[Any], T],
    *,
    system: str,
    model: str | None,
    stage: str,
    max_tokens: int = 4096,
    reasks: int = 2,
) -> T:
    """Ask once, re-ask up to `reasks` times while the answer is not valid; the validated value.

    `validate` receives the parsed JSON and returns the value to keep, or raises `ValueError`
    (pydantic's `ValidationError` is one) whose text is shown to the model.

    Raises:
        AnswerError: still no valid answer after the re-asks.
        SkillRunError: the model call itself failed (no provider, API error after retries).
    """
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    problem = ""
    for _ in range(reasks + 1):
        completion = await access.complete(messages, system=system, model=model, max_tokens=max_tokens)
        try:
            return validate(parse_json(completion.text))
        except ValueError as exc:
            problem = _short(str(exc))
            if completion.stop_reason == "max_tokens":
                problem += " (the answer was cut off at the token limit: be more concise)"
        messages += [
            {"role": "assistant", "content": completion.text.strip() or "(empty answer)"},
            {
                "role": "user",
                "content": f"That answer could not be used: {problem}\n"
                "Answer again with only the JSON object described above, nothing else.",
            },
        ]
    raise AnswerError(
        f"{stage}: the model gave no usable answer in {reasks + 1} tries; last problem: {problem}",
        hint="try again, or describe the request more precisely",
    )


def _short(text: str) -> str:
    return text if len(text) <= _MAX_PROBLEM else text[: _MAX_PROBLEM - 3] + "..."
