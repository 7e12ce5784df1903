"""Where each value and key of a YAML document is: `file:line:col` for every message.

Validation errors come back as paths (`run.agent.skills.0`, `steps.2.for.items`), so the
position of each path is recorded while walking the document's node graph once. Used for
skill.yaml and SKILL.md front matter (`skills.core.checks`) and for pipelines (`pipelines.language.yamlmap`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

__all__ = ["Path_", "Positions", "locate", "walk"]

Path_ = tuple[str | int, ...]


@dataclass
class Positions:
    """Positions (1-based line, column) of values and keys, by their path in the data."""

    values: dict[Path_, tuple[int, int]] = field(default_factory=lambda: {})
    keys: dict[Path_, tuple[int, int]] = field(default_factory=lambda: {})
    duplicates: list[tuple[Path_, tuple[int, int]]] = field(default_factory=lambda: [])

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


def walk(root: yaml.Node, into: Positions) -> None:
    """Record the position of every path, visiting each node once and without recursion."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, Path_]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        into.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if id(node) in seen:
            continue  # repeated by an alias: its inside was recorded under its first path
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            children: list[tuple[yaml.Node, Path_]] = []
            pairs: list[tuple[yaml.Node, yaml.Node]] = node.value
            for key_node, value_node in pairs:
                key: str = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
                child = (*path, key)
                pos = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                if key in keys:
                    into.duplicates.append((child, pos))
                keys.add(key)
                into.keys[child] = pos
                children.append((value_node, child))
            stack.extend(reversed(children))  # depth-first in document order, as the recursion went
        elif isinstance(node, yaml.SequenceNode):
            items: list[yaml.Node] = node.value
            stack.extend((item, (*path, index)) for index, item in reversed(list(enumerate(items))))


def locate(text: str, line_offset: int = 0) -> Positions | None:
    """The positions in `text` (lines shifted by `line_offset`), or None when it does not compose.

    Composing costs a second pass over the text, so it is done only when there is a problem to
    place (skill.yaml and front matter are read once at start-up without positions).
    """
    from .yamltext import compose_yaml

    try:
        node, _ = compose_yaml(text)
    except yaml.YAMLError:
        return None
    found = Positions()
    if node is not None:
        walk(node, found)
    if line_offset:
        found.values = {p: (line + line_offset, col) for p, (line, col) in found.values.items()}
        found.keys = {p: (line + line_offset, col) for p, (line, col) in found.keys.items()}
    return found
