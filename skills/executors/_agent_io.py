"""What an agent reads and returns, as text: tool results, error envelopes, final answers.

Kept apart from the loop (`_agent`) because it is pure data shaping: a skill's result or
failure as the `tool_result` block a model reads, and the numbers and lines of the result.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import SkillsError, error_envelope

__all__ = ["MAX_TOOL_RESULT_CHARS", "as_text", "confidence", "envelope_text", "first_line", "short", "tool_result"]

MAX_TOOL_RESULT_CHARS = 20_000
"""A tool result longer than this reaches the model cut, with a note (it costs tokens)."""


def confidence(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return min(1.0, max(0.0, float(value)))


def first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:300]


def short(args: dict[str, Any]) -> str:
    text = json.dumps(args, ensure_ascii=False, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


def as_text(value: Any) -> tuple[str, bool]:
    """A skill result as the text of a tool_result, and whether it is an error."""
    from mcp_types import CallToolResult

    if isinstance(value, CallToolResult):
        if value.structured_content is not None and not value.is_error:
            return json.dumps(value.structured_content, ensure_ascii=False, default=str), False
        texts = [getattr(c, "text", None) or f"[{getattr(c, 'type', 'content')}]" for c in value.content]
        return "\n".join(texts), bool(value.is_error)
    if isinstance(value, str):
        return value, False
    return json.dumps(value, ensure_ascii=False, default=str), False


def envelope_text(error: SkillsError, *, where: str = "") -> str:
    """What the model reads for a failed tool call: the client's error envelope, as JSON."""
    return json.dumps(error_envelope(error, where=where), ensure_ascii=False)


def tool_result(call_id: str, text: str, *, is_error: bool) -> dict[str, Any]:
    if len(text) > MAX_TOOL_RESULT_CHARS:
        text = text[:MAX_TOOL_RESULT_CHARS] + f"\n[... cut: {len(text) - MAX_TOOL_RESULT_CHARS} more characters]"
    return {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": is_error}
