"""The modules of each package import one another one way, even for the type checker.

A circle between two modules (`app` imports `_calls`, `_calls` imports `app`) says their
boundary is in the wrong place: the lower one reaches back up for something that belongs below
both. Inside one package it counts even when one side imports only for the type checker (under
`if TYPE_CHECKING:`), which tests/test_layers.py leaves out: the circle is in the design, and
the day the name is needed at run time it is a circular import. The fix is to move what both need
down, into the lower module or a small module both import (a Protocol of what the lower one uses,
a dataclass), so that the dependency points one way: `_host.Host` (the server as app.py's helpers
use it), `tasks._target` (a call and its caller, below the task service), `tasks._adopt.Adopting`,
`pipelines.engine.context` (what every node of a run gets, below the compiler and the runtime),
`pipelines._loading.Host` (the pipeline service as loading uses it).

Every import counts, at module level, inside functions and under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests._imports import cycles, import_graph

ROOT = Path(__file__).resolve().parent.parent


PACKAGES = ("skills", "pipelines", "adapters", "mcp_server")

ALLOWED = {
    frozenset({"skills.core.folder", "skills.core.runner"}): (
        "runner.py is the seam the executors implement: its Runner Protocol names the FolderSkill it "
        "runs, and a FolderSkill looks up the runner of its kind there; the executors import the seam "
        "without the loader"
    ),
}
"""Circles that stay, each with its reason (a type-only circle around a plugin seam)."""


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_itself_back_even_for_the_type_checker(package: str) -> None:
    edges = import_graph(ROOT, [package], type_checking=True, exclude=["skills.builtin"])
    found = [c for c in cycles(edges) if frozenset(e.source for e in c) not in ALLOWED]
    shown = "\n".join("  " + "\n  -> ".join(str(e) for e in cycle) for cycle in found)
    assert not found, (
        f"{len(found)} import circle(s) in {package}; move what both sides need into the lower module or "
        f"a small module both import (a Protocol of what the lower one uses, a dataclass):\n{shown}"
    )


def test_the_graph_sees_type_checking_imports_of_the_real_tree() -> None:
    edges = import_graph(ROOT, ["mcp_server"], type_checking=True)
    assert ("mcp_server._calls", "mcp_server._host") in {(e.source, e.target) for e in edges}  # a TYPE_CHECKING one
    assert import_graph(ROOT, ["skills"], type_checking=True, exclude=["skills.builtin"])  # not empty


def test_a_circle_closed_only_for_the_type_checker_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "app.py").write_text("from ._helper import helper\n")
    (pkg / "_helper.py").write_text(
        textwrap.dedent("""\
            from __future__ import annotations
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from .app import Server
            def helper(server: Server) -> None: ...
        """)
    )
    assert cycles(import_graph(tmp_path, ["pkg"])) == []  # what tests/test_layers.py sees
    (cycle,) = cycles(import_graph(tmp_path, ["pkg"], type_checking=True))
    assert [(e.source, e.target, e.line) for e in cycle] == [
        ("pkg._helper", "pkg.app", 4),
        ("pkg.app", "pkg._helper", 1),
    ]
