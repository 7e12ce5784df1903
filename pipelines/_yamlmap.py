"""YAML with positions: every value and every key of a pipeline file keeps its line and column.

The verifier reports `file:line:col`; pydantic errors come back as paths (`steps.2.for.items`),
so the loader records the position of each path while building the plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from .errors import Issue, VerificationError

__all__ = ["Path_", "SourceMap", "load_with_positions"]

Path_ = tuple[str | int, ...]

try:
    _Loader: type[yaml.SafeLoader] = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader


@dataclass
class SourceMap:
    """Positions (1-based line, column) of values and keys, by their path in the data."""

    file: str
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    duplicates: list[tuple[Path_, tuple[int, int]]] = field(default_factory=list)

    def at(self, path: Path_, *, key: bool = False) -> tuple[int, int]:
        """Position of `path` (its key when `key`), else of its nearest ancestor, else 1:1."""
        table = self.keys if key else self.values
        probe = tuple(path)
        while probe:
            if probe in table:
                return table[probe]
            if key and probe in self.values:
                return self.values[probe]
            probe = probe[:-1]
        return self.values.get((), (1, 1))

    def issue(self, path: Path_, message: str, hint: str = "", *, key: bool = False, **kw: Any) -> Issue:
        line, col = self.at(path, key=key)
        return Issue(self.file, line, col, message, hint, **kw)


def load_with_positions(text: str, file: str) -> tuple[Any, SourceMap]:
    """Parse YAML text; return the data and its source map. Syntax errors raise with position."""
    smap = SourceMap(file)
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
        _walk(node, (), smap)
    return data, smap


def _walk(node: yaml.Node, path: Path_, smap: SourceMap) -> None:
    smap.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            child = (*path, key)
            pos = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key in seen:
                smap.duplicates.append((child, pos))
            seen.add(key)
            smap.keys[child] = pos
            _walk(value_node, child, smap)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), smap)
