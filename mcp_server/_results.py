"""Skill results and failures as MCP `CallToolResult`s.

A JSON object becomes `structuredContent` (and its JSON text, for clients that read only text).
Every failure becomes the one error envelope of SPEC 7, `{"error": {"type", "message", "hint",
"retryable", "where"}}`, as the result's text (always) and as its `structuredContent` when the
tool declares no `outputSchema`. The rule for clients: the text of a failed call is always the
envelope; its structured content, when there is any, always fits the tool's `outputSchema` (a
meta tool's failure report, e.g. `create_skill`'s `{created: false, stage, reasons, files}`), or
is the envelope when the tool declares none. Every failure type takes this one path, whoever
raised it (argument checks, limits, an upstream that is not connected, a model that cannot be
reached, a cancelled call). Content that came with a failure (an imported tool's images) follows
the envelope's text; keys a caller adds beside `error` (`extra`: a run's `usage`, `run_id`)
travel in the text and the structured content alike.

Why not always in `structuredContent`: a tool's `outputSchema` describes its *success* result,
and the protocol says structured content MUST conform to it. The Python SDK client skips the
check for `isError` results, but the TypeScript SDK 1.x client (and the Inspector built on it)
validates any structured content it gets and throws `-32602 Structured content does not match
the tool's output schema` instead of returning the error. So for a tool with an output schema the
envelope travels as the JSON text of the result only; a client parses `content[0].text`.

Results must be valid JSON: a value JSON cannot carry (a set, bytes, an object) is a
`skill_failed` envelope naming where it sits; NaN and ±Infinity become `null`, with a warning
in the server log and to the client (`notes`), because JSON has no such numbers and most skills
that produce one mean "no value".
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from mcp_types import (
    AudioContent,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)

from skills import OutputError, Skill, SkillsError
from skills.core.errors import ErrorBody, ErrorType, clip, error_envelope
from skills.core.schema import check_output

__all__ = [
    "MAX_RESULT_DEPTH",
    "cancel_pending",
    "envelope_of",
    "error_result",
    "json_safe",
    "to_result",
    "unbound",
    "where_in",
]

log = logging.getLogger("mcp_server.results")

MAX_RESULT_DEPTH = 200
"""Nesting a result may have (JSON encoders and clients recurse over it)."""
_STRICT = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
"""`json.dumps(value, ensure_ascii=False, allow_nan=False)` without a new encoder per result."""


def error_result(
    error: BaseException | str,
    hint: str = "",
    *,
    error_type: ErrorType | None = None,
    where: str = "",
    retryable: bool | None = None,
    output_schema: dict[str, Any] | None = None,
    report: dict[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> CallToolResult:
    """An `isError` result carrying the error envelope (see the module docstring for where);
    `report` is structured content that fits the tool's output schema, sent instead of none
    (with the envelope's body as its `error` when that schema declares one: `ERROR_BODY_SCHEMA`);
    `extra` are keys beside `error` (never `error` itself); a `SkillsError`'s `content` items
    follow the envelope's text."""
    envelope: dict[str, Any] = dict(
        error_envelope(error, error_type=error_type, hint=hint, where=where, retryable=retryable)
    )
    if extra:
        envelope.update({k: v for k, v in extra.items() if k != "error"})
    text = json.dumps(envelope, ensure_ascii=False, default=str)
    content: list[ContentBlock] = [TextContent(type="text", text=text)]
    if isinstance(error, SkillsError):
        content += [item for item in error.content if _is_content(item)]
    structured: dict[str, Any] | None = envelope if output_schema is None else None
    if report is not None:  # it fits the schema; with the schema's `error` property, the body too
        structured = {**report, "error": envelope["error"]} if _declares_error(output_schema) else report
    elif structured is None and len(envelope) > 1 and _fits(output_schema, envelope):
        structured = envelope  # a failed run's outputs, summary and usage with it (`SkillsError.attached`)
    return CallToolResult(content=content, structured_content=structured, is_error=True)


def _declares_error(schema: dict[str, Any] | None) -> bool:
    properties: Any = (schema or {}).get("properties")
    return isinstance(properties, dict) and "error" in properties


def _is_content(item: Any) -> bool:
    return isinstance(item, TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource)


def unbound(result: CallToolResult) -> CallToolResult:
    """A failed result of ours as a tool without an outputSchema sends it: the envelope (with
    its keys beside `error`) as structured content too (`call_skill` relaying a skill's)."""
    first = result.content[0] if result.content else None
    if result.structured_content is not None or envelope_of(result) is None or not isinstance(first, TextContent):
        return result
    return result.model_copy(update={"structured_content": json.loads(first.text)})


def _fits(schema: dict[str, Any] | None, value: dict[str, Any]) -> bool:
    try:
        check_output("result", schema or {}, value)
    except SkillsError:
        return False
    return True


def envelope_of(result: CallToolResult) -> ErrorBody | None:
    """The error body of a failed result of ours (None for a success, or for text that is not
    our envelope). Keys beside `error` (a run's `usage`) are allowed."""
    first = result.content[0] if result.is_error and result.content else None
    if not isinstance(first, TextContent) or not first.text.startswith("{") or '"error"' not in first.text[:200]:
        return None
    try:
        data: Any = json.loads(first.text)
    except ValueError:
        return None
    body: Any = cast(dict[str, Any], data).get("error") if isinstance(data, dict) else None
    if isinstance(body, dict) and {"type", "message", "hint", "where"} <= body.keys():
        return cast(ErrorBody, body)  # the keys of our envelope: made by `error_envelope`
    return None


def to_result(skill: Skill, value: Any, notes: list[str] | None = None) -> CallToolResult:
    """Turn what a skill returned into the tool result a client receives.

    `notes` collects warnings for the caller to pass on to the client (NaN replaced, ...).
    """
    if isinstance(value, CallToolResult):  # an imported upstream tool's result passes through unchanged
        return value
    schema = skill.output_schema
    try:
        text = value if isinstance(value, str) else _STRICT.encode(value)
        if isinstance(value, dict) and not all(type(k) is str for k in cast("dict[Any, Any]", value)):
            raise TypeError("keys")  # JSON text would have them as strings, structured content not
    except (TypeError, ValueError, RecursionError):
        try:
            value = json_safe(skill.name, value, notes)
        except OutputError as exc:
            log.warning("%s", exc)
            return error_result(exc, output_schema=schema)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if schema is not None:
        if not isinstance(value, dict):
            return error_result(
                f"'{skill.name}' returned {type(value).__name__}, but its outputs schema wants an object",
                "return a dict from the skill, or drop `outputs` from skill.yaml",
                error_type="skill_failed",
                where="result",
                output_schema=schema,
            )
        try:
            check_output(skill.name, schema, value)
        except SkillsError as exc:
            log.warning("%s", exc)
            return error_result(exc, output_schema=schema)
    if isinstance(value, dict):
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=value)
    return CallToolResult(content=[TextContent(type="text", text=text)])


def json_safe(skill: str, value: Any, notes: list[str] | None = None) -> Any:
    """`value` as plain JSON data: tuples become lists, keys strings, NaN/±Infinity `null`
    (noted in `notes` and the log).

    Raises:
        OutputError: a value JSON cannot carry, or nesting deeper than `MAX_RESULT_DEPTH`;
            the message names the path of the first one.
    """
    replaced: list[str] = []

    def plain(item: Any, path: str, depth: int) -> Any:
        if item is None or isinstance(item, str | bool | int):
            return item
        if isinstance(item, float):
            if math.isfinite(item):
                return item
            replaced.append(path)
            return None
        if depth >= MAX_RESULT_DEPTH:
            raise OutputError(
                f"'{skill}' returned a result nested deeper than {MAX_RESULT_DEPTH} levels (at {clip(path)})",
                hint="return flatter data",
                where=clip(path),
            )
        if isinstance(item, dict):
            out: dict[str, Any] = {}
            for key, child in cast("dict[Any, Any]", item).items():
                if not isinstance(key, str | int | float | bool) and key is not None:
                    raise _not_json(skill, key, f"{path} (a key)")
                name = key if isinstance(key, str) else json.dumps(key)
                out[name] = plain(child, f"{path}.{name}", depth + 1)
            return out
        if isinstance(item, list | tuple):
            items = cast("list[Any] | tuple[Any, ...]", item)
            return [plain(child, f"{path}[{i}]", depth + 1) for i, child in enumerate(items)]
        raise _not_json(skill, item, path)

    result = plain(value, "result", 0)
    if replaced:
        shown = ", ".join(clip(p, 80) for p in replaced[:5]) + (
            f" and {len(replaced) - 5} more" if len(replaced) > 5 else ""
        )
        note = f"'{skill}' returned NaN or Infinity at {shown}; sent as null (JSON has no such numbers)"
        log.warning("%s", note)
        if notes is not None:
            notes.append(note)
    return result


def _not_json(skill: str, item: Any, path: str) -> OutputError:
    kind = type(item).__name__
    return OutputError(
        f"'{skill}' returned a value that is not JSON: {kind} at {clip(path)}",
        hint="return only dicts, lists, strings, numbers, booleans and None "
        "(a set as a list, bytes as text or base64, an object as a dict of its fields)",
        where=clip(path),
    )


def where_in(root: Path | None, error: BaseException) -> str:
    """`file:line` in the skill folder where the error's cause was raised (the innermost frame
    inside `root`), or "" when it says nothing more precise than the error itself."""
    if error.__dict__.get("where") or root is None:
        return ""
    cause = error.__cause__
    tb = cause.__traceback__ if cause is not None else None
    found = ""
    base = str(root.resolve()) + "/"
    while tb is not None:
        file = tb.tb_frame.f_code.co_filename
        if file.startswith(base):
            found = f"{file[len(base) :]}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def cancel_pending() -> bool:
    """Whether the running task is being cancelled from outside (the client cancelled the call,
    or the server is stopping), as opposed to a cancellation raised inside the skill's own work.

    The server runs on asyncio, where anyio cancels a task with `Task.cancel()`; `cancelling()`
    counts the requests not yet uncancelled.
    """
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0
