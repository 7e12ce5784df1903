"""The modules of mcp_server import one another one way: no module imports itself back.

A circle between two modules (`app` imports `_calls`, `_calls` imports `app`) says their
boundary is in the wrong place: the lower one reaches back up for something that belongs below
both. It counts even when one side imports only for the type checker (under
`if TYPE_CHECKING:`): the circle is in the design, and the day the annotation is needed at run
time it is a circular import. The fix is to move what both need down, into the lower module or a
small module of its own (a Protocol of what the lower one uses, a dataclass), so that the
dependency points one way (`_host.Host`, `tasks._target`).

Counted: imports at module level (inside top-level `if`/`try` blocks too, `TYPE_CHECKING`
included). Imports inside functions are left out: they are a choice of when to load (start-up
time), not of which way the layers depend, and none of them closes a circle today either.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "mcp_server"


def _modules(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements run when the module is imported, or read by the type checker as if they
    were: the module's body and the bodies of its top-level `if` (`TYPE_CHECKING`) and `try`."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _top_level(node.body) + _top_level(node.orelse) + _top_level(node.finalbody)
            for handler in node.handlers:
                out += _top_level(handler.body)
    return out


def _graph(root: Path) -> dict[str, dict[str, int]]:
    """Module -> {module of mcp_server it imports: line of the first such import}."""
    modules = _modules(root)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: dict[str, int] = {}
        for node in _top_level(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".") if is_package else module.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from . import _x` and `from .tasks import _target` import modules by another spelling
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for name in names:
                while name and name not in modules:  # `import mcp_server.tasks._target.x` -> the module
                    name = name.rpartition(".")[0]
                if name and name != module and name not in edges:
                    edges[name] = node.lineno
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One shortest circle through each module that is on one, each circle once."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    for start in sorted(graph):
        paths = {start: [start]}
        todo = [start]
        while todo:
            here = todo.pop(0)
            for there in sorted(graph[here]):
                if there == start:
                    circle = paths[here]
                    if frozenset(circle) not in seen:
                        seen.add(frozenset(circle))
                        found.append([*circle, start])
                    todo = []
                    break
                if there not in paths:
                    paths[there] = [*paths[here], there]
                    todo.append(there)
    return found


def _describe(graph: dict[str, dict[str, int]], circle: list[str]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(circle)]
    return " -> ".join([*steps, circle[-1]])


def test_the_graph_sees_the_imports_it_must_see() -> None:
    graph = _graph(ROOT)
    assert "mcp_server._calls" in graph["mcp_server.app"]  # `from ._calls import ...`
    assert "mcp_server.tasks" in graph["mcp_server.app"]  # a package by its `__init__`
    assert "mcp_server.tasks._target" in graph["mcp_server.tasks._calls"]
    assert "mcp_server._host" in graph["mcp_server._calls"]  # under `if TYPE_CHECKING:`
    assert _cycles({"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "b": 4}}) == [["a", "b", "c", "a"], ["b", "c", "b"]]


def test_no_module_of_mcp_server_imports_itself_back() -> None:
    graph = _graph(ROOT)
    circles = [_describe(graph, c) for c in _cycles(graph)]
    assert not circles, (
        "import circles in mcp_server (move what both sides need into the lower module or a small "
        "module both import, e.g. a Protocol of what the lower one uses):\n  " + "\n  ".join(circles)
    )
