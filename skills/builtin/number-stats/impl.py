"""number-stats: summary statistics of a list of numbers, or of one field of a list of records."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from typing import Any, cast

from skills.errors import SkillRunError


def _field(item: Any, field: str) -> Any:
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
            return None
    return value


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            parsed = float(value.strip())
        except ValueError:
            return None
        if not math.isfinite(parsed):
            return None
        return int(parsed) if parsed.is_integer() and re.fullmatch(r"\s*[-+]?\d+\s*", value) else parsed
    return None


def _percentile(ordered: list[float | int], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def _clean(value: float) -> float | int:
    return round(value, 6)


def number_stats(values: list[Any], field: str | None = None, percentiles: list[float] | None = None) -> dict[str, Any]:
    wanted = list(percentiles or [])
    for p in wanted:
        if not 0 <= p <= 100:
            raise SkillRunError(f"percentile {p} is outside 0..100", hint="e.g. percentiles: [50, 90, 99]")
    picked = [_field(v, field) for v in values] if field else list(values)
    numbers: list[tuple[int, float | int]] = [
        (index, n) for index, raw in enumerate(picked) if (n := _number(raw)) is not None
    ]
    result: dict[str, Any] = {"count": len(numbers), "ignored": len(picked) - len(numbers)}
    if not numbers:
        return {
            **result, "sum": 0, "min": None, "max": None, "mean": None, "median": None, "stdev": None,
            "min_index": None, "max_index": None, "percentiles": {},
        }  # fmt: skip
    only = [n for _, n in numbers]
    ordered = sorted(only)
    min_index = min(numbers, key=lambda pair: pair[1])[0]
    max_index = max(numbers, key=lambda pair: pair[1])[0]
    return {
        **result,
        "sum": _clean(math.fsum(only)) if any(isinstance(n, float) for n in only) else sum(only),
        "min": ordered[0],
        "max": ordered[-1],
        "mean": _clean(statistics.fmean(only)),
        "median": _clean(float(statistics.median(ordered))),
        "stdev": _clean(statistics.stdev(only)) if len(only) > 1 else 0.0,
        "min_index": min_index,
        "max_index": max_index,
        "percentiles": {f"p{p:g}": _clean(_percentile(ordered, p)) for p in wanted},
    }
