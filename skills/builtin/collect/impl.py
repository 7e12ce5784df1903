"""collect: flatten, filter, sort, take the top N and project a list of records."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, cast

from skills.core.regex import HINT as PATTERN_HINT
from skills.core.regex import PatternError, compile_pattern
from skills.core.errors import SkillRunError

_MISSING = object()
_OPS = ("==", "!=", ">", ">=", "<", "<=", "in", "not_in", "contains", "matches",
        "exists", "not_exists", "truthy", "falsy")  # fmt: skip


def get_field(item: Any, field: str) -> Any:
    """Value at a dotted path (`a.b`, `items.0`), `_MISSING` when absent; '' or '.' is the item."""
    if field in ("", "."):
        return item
    value = item
    for part in field.split("."):
        if isinstance(value, Mapping) and part in value:
            value = cast("Mapping[str, Any]", value)[part]
        elif (
            isinstance(value, list)
            and re.fullmatch(r"-?\d+", part)
            and -len(seq := cast("list[Any]", value)) <= int(part) < len(seq)
        ):
            value = seq[int(part)]
        else:
            return _MISSING
    return value


def _compare(op: str, left: Any, right: Any) -> bool:
    if op == "exists":
        return left is not _MISSING
    if op == "not_exists":
        return left is _MISSING
    if left is _MISSING:
        return op in ("!=", "not_in", "falsy")
    try:
        if op == "==":
            return bool(left == right)
        if op == "!=":
            return bool(left != right)
        if op == ">":
            return bool(left > right)
        if op == ">=":
            return bool(left >= right)
        if op == "<":
            return bool(left < right)
        if op == "<=":
            return bool(left <= right)
        if op in ("in", "not_in"):
            inside = isinstance(right, list | str | Mapping) and left in right
            return inside if op == "in" else not inside
        if op == "contains":
            return isinstance(left, list | str | Mapping) and right in left
        if op == "matches":  # RE2, linear time: a client's pattern never backtracks (see skills.core.regex)
            return isinstance(left, str) and compile_pattern(str(right)).search(left) is not None
    except TypeError:  # e.g. "3" > 2, or a string `in` a list of dicts: simply not a match
        return False
    return bool(left) if op == "truthy" else not bool(left)


def _sort_key(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool):
        return (0, int(value))
    if isinstance(value, int | float):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    return (2, json.dumps(value, sort_keys=True, default=str))


def _check_where(where: list[dict[str, Any]]) -> None:
    for index, condition in enumerate(where):
        op = condition.get("op", "==")
        if op not in _OPS:
            raise SkillRunError(f"where[{index}]: unknown op {op!r}", hint="ops: " + ", ".join(_OPS))
        if op == "matches":
            try:
                compile_pattern(str(condition.get("value", "")))
            except PatternError as exc:
                raise SkillRunError(f"where[{index}]: bad regular expression: {exc}", hint=PATTERN_HINT) from None


def collect(
    items: list[Any],
    unnest: str | None = None,
    keep: list[str] | None = None,
    where: list[dict[str, Any]] | None = None,
    sort_by: str | None = None,
    descending: bool = False,
    limit: int | None = None,
    fields: list[str] | None = None,
) -> dict[str, Any]:
    conditions = list(where or [])
    _check_where(conditions)
    rows: list[Any] = []
    if unnest:
        for item in items:
            children = get_field(item, unnest)
            if not isinstance(children, list):
                continue
            for child in cast("list[Any]", children):
                if keep and isinstance(child, Mapping) and isinstance(item, Mapping):
                    parent, record = cast("Mapping[str, Any]", item), cast("Mapping[str, Any]", child)
                    child = {**{k: parent[k] for k in keep if k in parent and k not in record}, **record}
                rows.append(child)
    else:
        rows = list(items)
    total = len(rows)
    for condition in conditions:
        field, op, value = condition.get("field", ""), condition.get("op", "=="), condition.get("value")
        rows = [row for row in rows if _compare(op, get_field(row, field), value)]
    if sort_by is not None:
        present = [row for row in rows if get_field(row, sort_by) is not _MISSING]
        absent = [row for row in rows if get_field(row, sort_by) is _MISSING]
        present.sort(key=lambda row: _sort_key(get_field(row, sort_by)), reverse=descending)
        rows = present + absent
    count = len(rows)
    if limit is not None:
        rows = rows[:limit]
    if fields:
        rows = [{f: (None if (v := get_field(row, f)) is _MISSING else v) for f in fields} for row in rows]
    return {"items": rows, "count": count, "total": total, "returned": len(rows)}
