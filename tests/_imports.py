"""The import graph of our packages, read from the source (ast), for tests/test_layers.py and
tests/test_import_cycles.py.

Read from the source rather than from `sys.modules` so that every import counts, the ones inside
functions too (an import put off for start-up time still ties the two modules together), and so
that nothing has to be imported to check it. Imports under `if TYPE_CHECKING:` are left out: they
never run, and they are the sanctioned way for a lower module to name a higher type of another
package. Asked (`type_checking=True`), they count too: inside one package such an import that
closes a circle shows a boundary in the wrong place (tests/test_import_cycles.py).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Edge", "cycles", "import_graph", "module_name"]


@dataclass(frozen=True)
class Edge:
    """`source` imports `target` at `path:line`."""

    source: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.path}:{self.line})"


def module_name(root: Path, path: Path) -> str:
    """The dotted module name of `path` under the source root `root` (a package is its __init__)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_checking: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in `tree`, at any depth, except those under `if TYPE_CHECKING:`
    (unless `type_checking`)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def import_graph(
    root: Path, packages: Iterable[str], exclude: Iterable[str] = (), *, type_checking: bool = False
) -> list[Edge]:
    """Every import between modules of `packages` (top-level package names under `root`).

    `from a import b` counts as an import of module `a.b` when that is one of ours, else of `a`;
    modules whose name starts with one of `exclude` are neither read nor counted; `type_checking`:
    the imports under `if TYPE_CHECKING:` count too.
    """
    skip = tuple(exclude)
    files: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            name = module_name(root, path)
            if not name.startswith(skip) and all(part.isidentifier() for part in name.split(".")):
                files[name] = path
    ours = set(files)
    edges: list[Edge] = []
    for source, path in files.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path)), type_checking):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = source.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in ours else base for alias in node.names]
            for target in targets:
                while target and target not in ours and "." in target:
                    target = target.rpartition(".")[0]
                if target in ours and target != source:
                    edges.append(Edge(source, target, path, node.lineno))
    return edges


def cycles(edges: Iterable[Edge]) -> list[list[Edge]]:
    """One import cycle (as its edges, in order) per strongly connected group of modules."""
    graph: dict[str, dict[str, Edge]] = {}
    for edge in edges:
        graph.setdefault(edge.source, {}).setdefault(edge.target, edge)
        graph.setdefault(edge.target, {})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan; our graphs are a few hundred modules deep at most
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, set(group)) for group in groups]


def _cycle_in(graph: dict[str, dict[str, Edge]], group: set[str]) -> list[Edge]:
    """A shortest cycle through the first module (by name) of a strongly connected `group`."""
    start = min(group)
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt, edge in sorted(graph[node].items()):
                if nxt not in group or nxt in came:
                    continue
                came[nxt] = edge
                if nxt == start:
                    path: list[Edge] = []
                    at = start
                    while True:
                        path.append(came[at])
                        at = came[at].source
                        if at == start:
                            return path[::-1]
                following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")  # a group always has one
