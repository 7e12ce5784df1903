"""Lazy exports for the sub-packages of pipelines: a name is imported when it is first used.

Importing any module of a package runs the package's `__init__` first. If `pipelines.engine`
imported its modules there, reading one constant of `pipelines.engine.outcomes` would import
LangGraph (~700 ms), and `orchestrator serve` answers its first listing before anything of the
engine is needed. So each `__init__` names its public names in `__all__` and resolves them on
first access through the function this module builds (PEP 562 module `__getattr__`).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def exports(package: str, where: dict[str, tuple[str, ...]]) -> tuple[list[str], Callable[[str], Any]]:
    """`__all__` and `__getattr__` of `package`, from {module: names it exports}."""
    module_of = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{module}"), name)

    return sorted(module_of), __getattr__
