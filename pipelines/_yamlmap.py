"""YAML with positions: every value and every key of a pipeline file keeps its line and column.

The verifier reports `file:line:col`; pydantic errors come back as paths (`steps.2.for.items`),
so the loader records the position of each path while building the plain data. The text is
read by the server's one bounded YAML reader (`skills._yaml`: size, depth, aliases), and the
walk visits each node once: a node repeated by aliases keeps the position of its first path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from skills._yaml import YAMLLimitError, compose_yaml, mark_of

from .errors import Issue, VerificationError

__all__ = ["Path_", "SourceMap", "load_with_positions"]

Path_ = tuple[str | int, ...]


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
        _walk(node, smap)
    return data, smap


def _walk(root: yaml.Node, smap: SourceMap) -> None:
    """Record the position of every path, visiting each node once and without recursion."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, Path_]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        smap.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if id(node) in seen:
            continue  # repeated by an alias: its inside was recorded under its first path
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[Any] = set()
            children: list[tuple[yaml.Node, Path_]] = []
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
                child = (*path, key)
                pos = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                if key in keys:
                    smap.duplicates.append((child, pos))
                keys.add(key)
                smap.keys[child] = pos
                children.append((value_node, child))
            stack.extend(reversed(children))  # depth-first in document order, as the recursion went
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*path, index)) for index, item in reversed(list(enumerate(node.value))))
