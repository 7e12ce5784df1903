"""json-query: pick values out of JSON with a dotted / bracket path such as `items[*].name`."""

from __future__ import annotations

import json
import re
from typing import Any, cast

from skills.base import SkillContext
from skills.errors import SkillRunError
from skills.roots import allowed_path

_NAME = re.compile(r"[^.\[\]]+")
_BRACKET = re.compile(
    r"""\[\s*(?:
        (?P<star>\*)
      | (?P<slice>(?P<start>-?\d+)?\s*:\s*(?P<stop>-?\d+)?)
      | (?P<index>-?\d+)
      | '(?P<sq>(?:[^'\\]|\\.)*)'
      | "(?P<dq>(?:[^"\\]|\\.)*)"
    )\s*\]""",
    re.VERBOSE,
)

Token = tuple[str, Any]


def parse_query(query: str) -> list[Token]:
    """Split a query into (kind, value) steps; kinds: key, index, wild, slice."""
    text = query.strip()
    if text.startswith("$"):
        text = text[1:]
    tokens: list[Token] = []
    pos = 0
    expect_name = True  # a bare name is allowed at the start and after '.'
    while pos < len(text):
        char = text[pos]
        if char == ".":
            pos += 1
            if pos < len(text) and text[pos] == "*":
                tokens.append(("wild", None))
                pos += 1
                expect_name = False
                continue
            match = _NAME.match(text, pos)
            if not match:
                raise _syntax(query, pos, "a name after '.'")
            tokens.append(("key", match.group()))
            pos = match.end()
            expect_name = False
        elif char == "[":
            match = _BRACKET.match(text, pos)
            if not match:
                raise _syntax(query, pos, "[index], [*], [start:stop] or ['key']")
            if match.group("star"):
                tokens.append(("wild", None))
            elif match.group("slice") is not None:
                start, stop = match.group("start"), match.group("stop")
                tokens.append(("slice", (int(start) if start else None, int(stop) if stop else None)))
            elif match.group("index") is not None:
                tokens.append(("index", int(match.group("index"))))
            else:
                quoted = match.group("sq") if match.group("sq") is not None else match.group("dq")
                tokens.append(("key", re.sub(r"\\(.)", r"\1", quoted)))
            pos = match.end()
            expect_name = False
        elif expect_name:
            if char == "*":
                tokens.append(("wild", None))
                pos += 1
            else:
                match = _NAME.match(text, pos)
                if not match:
                    raise _syntax(query, pos, "a name, '*' or '['")
                tokens.append(("key", match.group()))
                pos = match.end()
            expect_name = False
        else:
            raise _syntax(query, pos, "'.' or '['")
    return tokens


def _syntax(query: str, pos: int, expected: str) -> SkillRunError:
    offset = len(query) - len(query.lstrip()) + (1 if query.strip().startswith("$") else 0) + pos
    return SkillRunError(
        f"bad query {query!r} at character {offset + 1}: expected {expected}",
        hint="examples: 'a.b[0].c', 'items[*].name', 'data[\"key.with.dots\"]', 'rows[-1]', 'rows[0:3]'",
    )


def _step(value: Any, kind: str, arg: Any) -> list[Any]:
    if kind == "key":
        if isinstance(value, dict):
            return [value[arg]] if arg in value else []
        if isinstance(value, list) and re.fullmatch(r"-?\d+", arg):
            return _step(value, "index", int(arg))
        return []
    if kind == "index":
        if isinstance(value, list):
            items = cast("list[Any]", value)
            return [items[arg]] if -len(items) <= arg < len(items) else []
        if isinstance(value, dict) and str(arg) in value:
            return [value[str(arg)]]
        return []
    if kind == "wild":
        if isinstance(value, dict):
            return list(cast("dict[str, Any]", value).values())
        return list(cast("list[Any]", value)) if isinstance(value, list) else []
    if isinstance(value, list):  # slice
        return cast("list[Any]", value)[arg[0] : arg[1]]
    return []


def _load(data: Any, path: str | None, ctx: SkillContext | None) -> Any:
    if path is None:
        if data is None:
            raise SkillRunError(
                "give `data` or `path`", hint="data is the JSON value itself; path a JSON file"
            )
        return data
    if data is not None:
        raise SkillRunError("give only one of `data` and `path`", hint="drop one of them")
    file = allowed_path(ctx, path)
    if not file.is_file():
        raise SkillRunError(
            f"file not found: {path}" if not file.exists() else f"{path} is not a file",
            hint="give the path of a JSON file",
        )
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise SkillRunError(f"{path} is not UTF-8 text: {exc.reason}", hint="JSON files are UTF-8") from None
    except json.JSONDecodeError as exc:
        raise SkillRunError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
            hint="fix the file, or read it with read-file to see what it holds",
        ) from None


def json_query(
    query: str, data: Any = None, path: str | None = None, default: Any = None, ctx: SkillContext | None = None
) -> dict[str, Any]:
    document = _load(data, path, ctx)
    tokens = parse_query(query)
    values = [document]
    multi = False
    for kind, arg in tokens:
        multi = multi or kind in ("wild", "slice")
        values = [out for value in values for out in _step(value, kind, arg)]
    if multi:
        return {"query": query, "result": values, "found": bool(values), "count": len(values)}
    found = bool(values)
    return {"query": query, "result": values[0] if found else default, "found": found, "count": len(values)}
