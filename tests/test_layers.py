"""The layers of ARCHITECTURE.md hold in the source: imports point down, and nothing goes round.

The import graph is read from the source of the four packages (`_imports.import_graph`): imports
at module level and inside functions alike, those under `if TYPE_CHECKING:` left out. The
built-in skills' implementations (skills/builtin/<name>/impl.py) are skill code loaded by path,
not modules of the package, and are not part of the graph.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests._imports import Edge, cycles, import_graph

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("skills", "pipelines", "adapters", "mcp_server")

MAY_IMPORT = {
    "skills": set[str](),
    "pipelines": {"skills"},
    "adapters": {"skills"},
    "mcp_server": {"skills", "pipelines", "adapters"},
}
"""ARCHITECTURE.md's layers: what each package may import besides itself (pipelines and adapters
are side by side: neither imports the other)."""

SKILLS_PARTS = {
    "skills.core": set[str](),
    "skills.executors": {"skills.core"},
    "skills.creation": {"skills.core", "skills.executors"},
}
"""Inside skills/: the core runs no skill code and creates none; the executors build on the core;
creation builds on both (it runs a new skill's tests). `skills/__init__.py`, the public face,
may import all three."""


VOCABULARY = {"pipelines.errors", "pipelines.asking", "pipelines._lazy"}
"""The top of pipelines/ that every part may use: the errors all of them raise, the protocol of
runs that wait for an answer, and the lazy exports of the parts' `__init__`."""

PIPELINES_PARTS = {
    "pipelines.language": set[str](),
    "pipelines.storage": set[str](),
    "pipelines.engine": {"pipelines.language", "pipelines.storage"},
    "pipelines.distributed": {"pipelines.language", "pipelines.storage", "pipelines.engine"},
    "pipelines.service": {"pipelines.language", "pipelines.storage", "pipelines.engine", "pipelines.distributed"},
    "pipelines.distributed.worker": {
        "pipelines.language",
        "pipelines.storage",
        "pipelines.engine",
        "pipelines.distributed",
        "pipelines.service",
    },
    "pipelines.planning": {
        "pipelines.language",
        "pipelines.storage",
        "pipelines.engine",
        "pipelines.distributed",
        "pipelines.service",
    },
}
"""Inside pipelines/: the language (file format, expressions, verifier) and storage need no other
part; the engine runs what the language describes and records it in storage; the distributed mode
queues the engine's work for workers; the service (the top: `service`, `source`, `_loading`) serves
a home's pipelines with all of those; planning (a model writes, routes, explains) builds on the
service, and so does `orchestrator worker` (`pipelines.distributed.worker`: a process hosting a
service of its own that takes runs from the queue). Besides, every part may use the `VOCABULARY`."""

PIPELINES_PART_NAMES = ("language", "storage", "engine", "distributed", "planning")


def _pipelines_part(module: str) -> str:
    """`pipelines.engine.loops` -> `pipelines.engine`; the top's modules -> `pipelines.service`."""
    parts = module.split(".")
    if module in VOCABULARY or module == "pipelines.distributed.worker":
        return module
    if len(parts) > 1 and parts[1] in PIPELINES_PART_NAMES:
        return ".".join(parts[:2])
    return "pipelines.service"


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return import_graph(ROOT, PACKAGES, exclude=["skills.builtin"])


def _listed(found: list[Edge]) -> str:
    return "\n  ".join(str(e) for e in found)


def _part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_imports_only_point_down_the_layers(edges: list[Edge]) -> None:
    upward = [
        e
        for e in edges
        if (src := e.source.split(".")[0]) != (dst := e.target.split(".")[0]) and dst not in MAY_IMPORT[src]
    ]
    assert not upward, "imports against the layers (skills <- pipelines, adapters <- mcp_server):\n  " + _listed(upward)


def test_no_module_imports_itself_back_through_others(edges: list[Edge]) -> None:
    found = cycles(edges)
    shown = "\n".join("  " + "\n  -> ".join(str(e) for e in cycle) for cycle in found)
    assert not found, (
        f"{len(found)} import cycle(s); move the shared piece into a module both import, or invert "
        f"the dependency with a Protocol:\n{shown}"
    )


def test_skills_is_a_core_executors_and_creation_that_import_only_downwards(edges: list[Edge]) -> None:
    flat = sorted(
        p.name for p in (ROOT / "skills").glob("*.py") if p.name != "__init__.py"
    )  # a new module goes into a part
    assert not flat, f"modules directly under skills/ (put each in core/, executors/ or creation/): {flat}"
    upward = [
        e
        for e in edges
        if e.source.startswith("skills.")
        and e.target.startswith("skills")
        and _part(e.source) != _part(e.target)
        and _part(e.target) not in SKILLS_PARTS.get(_part(e.source), set())
    ]
    assert not upward, "imports against skills/' parts (core <- executors <- creation):\n  " + _listed(upward)


def test_pipelines_parts_import_only_downwards(edges: list[Edge]) -> None:
    flat = sorted(
        p.stem for p in (ROOT / "pipelines").glob("*.py") if f"pipelines.{p.stem}" not in VOCABULARY
    )  # the top holds the service and the vocabulary only: a new module goes into a part
    assert flat == ["__init__", "_loading", "checks", "service", "shared", "source"], (
        f"modules directly under pipelines/: {flat}"
    )
    upward = [
        e
        for e in edges
        if e.source.startswith("pipelines")
        and e.target.startswith("pipelines")
        and (src := _pipelines_part(e.source)) != (dst := _pipelines_part(e.target))
        and src in PIPELINES_PARTS
        and dst not in VOCABULARY
        and dst not in PIPELINES_PARTS[src]
    ]
    assert not upward, (
        "imports against pipelines/' parts (language, storage <- engine <- distributed <- service <- planning):\n  "
        + _listed(upward)
    )


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking_ones(tmp_path: Path) -> None:
    """The reader the other tests trust: a cycle closed inside a function is one, a TYPE_CHECKING
    import is not, and relative imports resolve against the importing module's package."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "a.py").write_text("from .sub.b import thing\n")
    (pkg / "sub" / "b.py").write_text(
        textwrap.dedent("""\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from ..c import C
            def thing():
                from .. import a
        """)
    )
    (pkg / "c.py").write_text("import pkg.sub.b\n")
    found = import_graph(tmp_path, ["pkg"])
    pairs = {(e.source, e.target) for e in found}
    assert pairs == {("pkg.a", "pkg.sub.b"), ("pkg.sub", "pkg.sub.b"), ("pkg.sub.b", "pkg.a"), ("pkg.c", "pkg.sub.b")}
    (cycle,) = cycles(found)
    assert [(e.source, e.target) for e in cycle] == [("pkg.a", "pkg.sub.b"), ("pkg.sub.b", "pkg.a")]
    assert cycle[1].line == 5


OLD_PATHS_IMPL = """
import skills.base
from skills.base import SkillContext
from skills.errors import SkillRunError

assert skills.base.SkillContext is SkillContext


def {name}(word: str, ctx: SkillContext | None = None) -> dict:
    if word == "no":
        raise SkillRunError("the word may not be 'no'", hint="say yes")
    return {{"upper": word.upper()}}
"""


async def test_a_python_skill_that_imports_the_old_module_paths_still_runs(tmp_path: Path) -> None:
    # The writing-skills reference once taught `from skills.base import SkillContext`: skills
    # written then (by hand or by create_skill) keep working after skills/ got its parts.
    from mcp import Client

    from mcp_server import create_server
    from tests.helpers import envelope, write_skill

    root = tmp_path / "skills"
    contract = {
        "inputs": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
        "run": {"python": "impl:shout"},
    }
    write_skill(root, "shout", contract=contract, impl=OLD_PATHS_IMPL.format(name="shout"))
    async with Client(create_server(skill_dirs=[root])) as client:
        done = await client.call_tool("shout", {"word": "hi"})
        assert not done.is_error, done.content
        assert done.structured_content == {"upper": "HI"}
        refused = await client.call_tool("shout", {"word": "no"})
        assert refused.is_error
        assert envelope(refused)["message"] == "the word may not be 'no'"
