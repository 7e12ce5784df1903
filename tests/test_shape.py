"""The shape of the code holds: packages meet only at public names, and no module grows too long.

skills, pipelines, adapters and mcp_server are the packages, and each of their sub-packages
(`pipelines.engine`, `skills.core`, `mcp_server.tasks`, ...) is a package too. A package may use
another's public modules only: a module or sub-package whose name starts with `_` is its owner's
(the package that holds it, and that package's own sub-packages) to change without notice. So
`pipelines.engine._nodes` may be imported inside `pipelines.engine` only, not from
`pipelines.storage`, from `pipelines` itself or from `mcp_server`; `skills.core._y` not from
`skills.executors`: either would break the day the owner rearranges its insides. Every
import counts: `import` and `from` forms, at module level, inside functions and under
`if TYPE_CHECKING:`. The built-in skills' implementations (skills/builtin/*/impl.py) count too:
they are loaded by path but are still code of the skills package.

A module over 600 lines holds more than one idea; split it along a seam.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("skills", "pipelines", "adapters", "mcp_server")
MAX_LINES = 600


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if ".venv" not in p.parts)


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every dotted name the file imports, with its line (relative `from` imports resolved)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            # `from pipelines import _sandbox` imports a private module by another spelling
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name.startswith("_"))
    return found


def _owner_of_private(name: str) -> str | None:
    """The package a dotted name's first private part belongs to (`a.b._c.d` -> `a.b`), if any."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _private_imports_across_packages() -> list[str]:
    bad: list[str] = []
    for path in _sources():
        module = _module_of(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in _imported(tree, module, path.name == "__init__.py"):
            owner = _owner_of_private(name)
            if name.split(".")[0] in PACKAGES and owner is not None and not _inside(module, owner):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return bad


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _long_modules() -> list[str]:
    return [
        f"{p.relative_to(ROOT).as_posix()}: {n} lines"
        for p in _sources()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]


def test_no_package_imports_another_packages_private_module() -> None:
    bad = _private_imports_across_packages()
    assert not bad, (
        f"{len(bad)} import(s) of another package's private module; make the module public (rename "
        "`_x.py` to `x.py`) or re-export the name from a public module of its package:\n  " + "\n  ".join(bad)
    )


def test_no_module_is_over_600_lines() -> None:
    long = _long_modules()
    assert not long, f"modules over {MAX_LINES} lines (split each along a seam):\n  " + "\n  ".join(long)


def test_the_check_sees_every_form_of_import(tmp_path: Path) -> None:
    """The scanner itself: function-level, TYPE_CHECKING, relative and `from pkg import _mod` forms."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "import pipelines._sandbox\n"
        "from skills.core._yaml import load\n"
        "from pipelines import _queue\n"
        "from . import _own\n"
        "if TYPE_CHECKING:\n"
        "    from adapters._forward import X\n"
        "def f():\n"
        "    import mcp_server._edge as e\n"
    )
    names = [n for _, n in _imported(ast.parse(source), "mcp_server.thing", False)]
    for expected in (
        "pipelines._sandbox",
        "skills.core._yaml",
        "pipelines._queue",
        "adapters._forward",
        "mcp_server._edge",
        "mcp_server._own",
    ):
        assert expected in names


def test_a_private_module_belongs_to_its_own_package_and_below() -> None:
    """Sub-packages are packages: their private modules are theirs and their sub-packages' only."""
    assert _owner_of_private("pipelines.engine._nodes") == "pipelines.engine"
    assert _owner_of_private("pipelines.storage.runs") is None
    assert _owner_of_private("pipelines._lazy") == "pipelines"
    assert _inside("pipelines.engine.loops", "pipelines.engine")
    assert _inside("pipelines.engine", "pipelines")  # a package's own sub-package may use its privates
    assert not _inside("pipelines.storage.runs", "pipelines.engine")
    assert not _inside("pipelines.service", "pipelines.engine")  # nor may the parent use a child's
    assert not _inside("pipelines.engineering", "pipelines.engine")


def test_every_subpackage_says_what_it_is_and_exports_names_that_resolve() -> None:
    """Each package's `__init__` has a docstring and an `__all__` whose every name exists."""
    import importlib

    for init in sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("__init__.py") if ".venv" not in p.parts):
        if "builtin" in init.parts:
            continue
        name = _module_of(init)
        package = importlib.import_module(name)
        assert (package.__doc__ or "").strip(), f"{init.relative_to(ROOT)}: say what the package is in a docstring"
        exported = getattr(package, "__all__", None)
        assert exported is not None, f"{init.relative_to(ROOT)}: name the package's public names in __all__"
        missing = [n for n in exported if not hasattr(package, n)]
        assert not missing, f"{name}.__all__ names what it does not have: {missing}"
