"""Skill results and skill errors as MCP `CallToolResult`s.

A JSON object becomes `structuredContent` (and its JSON text, for clients that read only text);
any error becomes `isError` with a message and a hint, never a traceback.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp_types import CallToolResult, TextContent

from skills import Skill, SkillsError
from skills._schema import check_output

__all__ = ["error_result", "to_result"]

log = logging.getLogger("mcp_server.results")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def error_result(error: SkillsError | str, hint: str = "") -> CallToolResult:
    """An `isError` result whose text says what went wrong and how to fix it."""
    if isinstance(error, SkillsError):
        message, hint = error.message, error.hint
    else:
        message = error
    text = f"{message}\nHint: {hint}" if hint else message
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def to_result(skill: Skill, value: Any) -> CallToolResult:
    """Turn what a skill returned into the tool result a client receives."""
    if isinstance(value, CallToolResult):  # an imported upstream tool's result passes through unchanged
        return value
    schema = skill.output_schema
    if schema is not None:
        if not isinstance(value, dict):
            return error_result(
                f"'{skill.name}' returned {type(value).__name__}, but its outputs schema wants an object",
                "return a dict from the skill, or drop `outputs` from skill.yaml",
            )
        try:
            check_output(skill.name, schema, value)
        except SkillsError as exc:
            log.warning("%s", exc)
            return error_result(exc)
    try:
        text = _text(value)
    except (TypeError, ValueError) as exc:
        return error_result(f"'{skill.name}' returned a result that is not JSON: {exc}", "return JSON data")
    if isinstance(value, dict):
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=value)
    return CallToolResult(content=[TextContent(type="text", text=text)])
