"""YAML with positions: every value and every key of a pipeline file keeps its line and column.

The verifier reports `file:line:col`; pydantic errors come back as paths (`steps.2.for.items`),
so the loader records the position of each path while building the plain data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from skills._positions import Path_, Positions, walk

from .errors import Issue, VerificationError

__all__ = ["Path_", "SourceMap", "load_with_positions"]

try:
    _Loader: type[yaml.SafeLoader] = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader


@dataclass
class SourceMap(Positions):
    """Positions (1-based line, column) of values and keys of one pipeline file."""

    file: str = "<pipeline>"

    def issue(self, path: Path_, message: str, hint: str = "", *, key: bool = False, **kw: Any) -> Issue:
        line, col = self.at(path, key=key)
        return Issue(self.file, line, col, message, hint, **kw)


def load_with_positions(text: str, file: str) -> tuple[Any, SourceMap]:
    """Parse YAML text; return the data and its source map. Syntax errors raise with position."""
    smap = SourceMap(file=file)
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        cmark = getattr(exc, "context_mark", None)
        if context and cmark is not None and cmark is not mark:
            problem += f" ({context} that starts at line {cmark.line + 1})"
        issue = Issue(
            file, line, col, f"YAML syntax: {problem}", "fix the YAML; quote strings that contain ': ' or '{{'"
        )
        raise VerificationError("the pipeline is not valid YAML", issues=[issue]) from None
    if node is not None:
        walk(node, smap)
    return data, smap
