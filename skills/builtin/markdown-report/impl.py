"""markdown-report: render any JSON data to a Markdown file with a sandboxed Jinja2 template.

A client's `template` is a program: it renders in the pipeline expression sandbox, with its
limits (a deadline, at most 10,000,000 characters, bounded operators), not in plain Jinja.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, cast

from pipelines.language.sandbox import TemplateEnvironment, check_size, to_json
from pipelines.errors import ExpressionError
from pipelines.language.expressions import render_template
from skills.core.base import SkillContext
from skills.core.errors import SkillRunError

DEFAULT_TEMPLATE = Path(__file__).parent / "assets" / "report.md.j2"
_MAX_COLUMNS = 12
_MAX_ROWS = 500


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def is_records(value: Any) -> bool:
    if not isinstance(value, list):
        return False
    items = cast("list[Any]", value)
    return bool(items) and all(isinstance(v, Mapping) for v in items)


def cell(value: Any, width: int = 80) -> str:
    """One value as Markdown table-cell text: single line, pipes escaped, long values cut."""
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, float):
        text = f"{value:.4g}" if abs(value) < 1e6 else f"{value:.6g}"
    elif isinstance(value, list):
        items = cast("list[Any]", value)
        if all(is_scalar(v) for v in items) and len(joined := ", ".join(cell(v) for v in items)) <= width:
            text = joined
        else:
            text = f"{len(items)} item" + ("" if len(items) == 1 else "s")
    elif isinstance(value, Mapping):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = str(value)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def table(rows: list[Any], columns: list[str] | None = None, max_rows: int = _MAX_ROWS) -> str:
    """A list of records as a Markdown table (the scalar-ish fields, in first-seen order)."""
    records: list[Mapping[str, Any]] = [r for r in rows if isinstance(r, Mapping)]
    if not records:
        return "_(none)_"
    if columns is None:
        columns = _columns(records)
    lines = [
        "| " + " | ".join(cell(c) for c in columns) + " |",
        "|" + "|".join(" --- " for _ in columns) + "|",
    ]
    for record in records[:max_rows]:
        lines.append("| " + " | ".join(cell(record.get(c)) for c in columns) + " |")
    if len(records) > max_rows:
        lines.append(f"\n_… {len(records) - max_rows} more rows_")
    return "\n".join(lines)


def _columns(records: list[Mapping[str, Any]]) -> list[str]:
    """Fields worth a column: simple ones first, then nested ones; never-filled ones dropped."""
    seen: dict[str, None] = {}
    for record in records:
        seen.update(dict.fromkeys(record))
    filled = [k for k in seen if any(record.get(k) not in (None, "", [], {}) for record in records)]
    simple = [k for k in filled if all(is_scalar(record.get(k)) for record in records)]
    nested = [k for k in filled if k not in simple]
    return [str(k) for k in simple + nested][:_MAX_COLUMNS]


def to_markdown(value: Any, level: int = 2) -> str:
    """Generic Markdown for any JSON value: bullets for scalars, tables for lists of records,
    sections for nested objects."""
    hashes = "#" * min(level, 6)
    if isinstance(value, str):
        return value.strip("\n") if "\n" in value else cell(value, width=10_000)
    if is_scalar(value):
        return cell(value, width=10_000) if value is not None else "_(nothing)_"
    if is_records(value):
        return table(value)
    if isinstance(value, Mapping):
        mapping = cast("Mapping[str, Any]", value)
        scalars = [
            f"- **{cell(k)}**: {cell(v, width=500) or '_(none)_'}" for k, v in mapping.items() if _inline(v)
        ]
        blocks = ["\n".join(scalars)] if scalars else []
        for key, item in mapping.items():
            if not _inline(item):
                blocks.append(f"{hashes} {cell(key)}\n\n{to_markdown(item, level + 1)}")
        return "\n\n".join(blocks) if blocks else "_(empty)_"
    if isinstance(value, list):
        items = cast("list[Any]", value)
        if not items:
            return "_(none)_"
        if all(is_scalar(v) for v in items):
            return "\n".join(f"- {cell(v, width=500)}" for v in items)
        return "\n\n".join(
            f"{hashes} Item {i}\n\n{to_markdown(v, level + 1)}" for i, v in enumerate(items, 1)
        )
    return cell(str(value))


def _inline(value: Any) -> bool:
    if isinstance(value, str):
        return "\n" not in value.strip()  # multi-line text gets a section of its own, verbatim
    return is_scalar(value) or (isinstance(value, list) and all(is_scalar(v) for v in cast("list[Any]", value)))


def _sized(render: Any) -> Any:
    """A filter that first refuses a value too large to write out (built of shared references)."""

    def bounded(value: Any, *args: Any) -> Any:
        check_size(value, "the report's data")
        return render(value, *args)

    return bounded


def _json(value: Any, indent: int = 2) -> str:
    return to_json(value, indent)


def _pairs(value: Any) -> list[tuple[Any, Any]]:
    return list(cast("Mapping[Any, Any]", value).items()) if isinstance(value, Mapping) else []


@functools.cache
def _environment() -> TemplateEnvironment:
    """The pipeline expression sandbox, with its limits (2 s, 10 MB of text), and the report's filters."""
    return TemplateEnvironment(
        {
            "markdown": _sized(to_markdown),
            "table": _sized(table),
            "cell": cell,
            "json": _json,
            "pairs": _pairs,
        },
        {"scalar": is_scalar, "records": is_records},
    )


def _target(base: Path, filename: str) -> Path:
    normalised = filename.replace("\\", "/")
    parts = PurePosixPath(normalised).parts
    if normalised.startswith("/") or re.match(r"^[A-Za-z]:", normalised) or ".." in parts:
        raise SkillRunError(
            f"filename {filename!r} must stay inside the run's artifact directory",
            hint="give a relative name such as 'report.md' or 'reports/review.md'",
        )
    root = base.resolve()
    target = (root / normalised).resolve()
    if not target.is_relative_to(root) or target == root:
        raise SkillRunError(
            f"filename {filename!r} is not a file inside the artifact directory", hint="use 'report.md'"
        )
    return target


def markdown_report(
    title: str,
    data: Any = None,
    description: str | None = None,
    template: str | None = None,
    filename: str = "report.md",
    max_chars: int = 20000,
    ctx: SkillContext | None = None,
) -> dict[str, Any]:
    context = ctx or SkillContext(skill="markdown-report")
    source = template if template is not None else DEFAULT_TEMPLATE.read_text(encoding="utf-8")
    scope = {
        "title": title,
        "data": data,
        "description": description,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    try:
        text = render_template(source, scope, _environment())
    except ExpressionError as exc:
        hint = exc.hint or "the template sees title, data, description and generated_at"
        raise SkillRunError(f"template: {exc.message}", hint=hint) from None
    if not text.endswith("\n"):
        text += "\n"
    target = _target(context.artifacts(), filename)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = text.encode("utf-8")
    target.write_bytes(payload)
    return {
        "path": str(target),
        "bytes": len(payload),
        "markdown": text[:max_chars],
        "truncated": len(text) > max_chars,
    }
