"""The modules of mcp_server import one another one way, even for the type checker.

A circle between two modules (`app` imports `_calls`, `_calls` imports `app`) says their
boundary is in the wrong place: the lower one reaches back up for something that belongs below
both. Inside one package it counts even when one side imports only for the type checker (under
`if TYPE_CHECKING:`), which tests/test_layers.py leaves out: the circle is in the design, and
the day the name is needed at run time it is a circular import. The fix is to move what both need
down, into the lower module or a small module both import (a Protocol of what the lower one uses,
a dataclass), so that the dependency points one way: `_host.Host` (the server as app.py's helpers
use it), `tasks._target` (a call and its caller, below the task service), `tasks._adopt.Adopting`.

Every import counts, at module level, inside functions and under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from _imports import cycles, import_graph

ROOT = Path(__file__).resolve().parent.parent


def test_no_module_of_mcp_server_imports_itself_back_even_for_the_type_checker() -> None:
    edges = import_graph(ROOT, ["mcp_server"], type_checking=True)
    assert ("mcp_server._calls", "mcp_server._host") in {(e.source, e.target) for e in edges}  # a TYPE_CHECKING one
    found = cycles(edges)
    shown = "\n".join("  " + "\n  -> ".join(str(e) for e in cycle) for cycle in found)
    assert not found, (
        f"{len(found)} import circle(s) in mcp_server; move what both sides need into the lower module or "
        f"a small module both import (a Protocol of what the lower one uses, a dataclass):\n{shown}"
    )


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
