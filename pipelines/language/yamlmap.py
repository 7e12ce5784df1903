"""YAML with positions: every value and every key of a pipeline file keeps its line and column.

The verifier reports `file:line:col`; pydantic errors come back as paths (`steps.2.for.items`),
so the loader records the position of each path while building the plain data. The text is
read by the server's one bounded YAML reader (`skills.core.yamltext`: size, depth, aliases), and the
walk visits each node once: a node repeated by aliases keeps the position of its first path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from skills.core.positions import Path_, Positions, walk
from skills.core.yamltext import YAMLLimitError, compose_yaml, mark_of

from ..errors import Issue, VerificationError

__all__ = ["Path_", "SourceMap", "load_with_positions"]


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
        node, data = compose_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, col = mark_of(exc) or (1, 1)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        cmark = getattr(exc, "context_mark", None)
        if context and cmark is not None and cmark is not mark:
            problem += f" ({context} that starts at line {cmark.line + 1})"
        hint = "fix the YAML; quote strings that contain ': ' or '{{'"
        if isinstance(exc, YAMLLimitError):
            hint = "keep pipelines small and flat: call another pipeline as a step instead of nesting deeper"
        kind = "limit" if isinstance(exc, YAMLLimitError) else "syntax"
        issue = Issue(file, line, col, f"YAML {kind}: {problem}", hint)
        raise VerificationError("the pipeline is not valid YAML", issues=[issue]) from None
    if node is not None:
        walk(node, smap)
    return data, smap
