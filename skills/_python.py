"""The `python` executor: a function in a module inside the skill folder, run in-process.

Modules are loaded by file path under a private name and cached by modification time, so an
edited implementation is picked up on the next call without restarting the server.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from .base import SkillContext
from .errors import SkillRunError

__all__ = ["PythonEntry", "load_entry"]

_cache: dict[Path, tuple[float, Any, dict[str, PythonEntry]]] = {}


class PythonEntry:
    """A resolved `module:function` with the facts needed to call it cheaply."""

    __slots__ = ("accepts_ctx", "fn", "is_async", "takes_kwargs")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        params = inspect.signature(fn).parameters
        self.accepts_ctx = "ctx" in params
        self.takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    async def call(self, arguments: dict[str, Any], ctx: SkillContext) -> Any:
        kwargs = dict(arguments)
        if self.accepts_ctx:
            kwargs["ctx"] = ctx
        if self.is_async:
            return await self.fn(**kwargs)
        # Sync skills run in a worker thread, as MCPServer does for sync tools: a skill reading
        # a big file must not stall every other client of the server.
        return await anyio.to_thread.run_sync(functools.partial(self.fn, **kwargs), abandon_on_cancel=True)


def _module_path(root: Path, module: str) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def load_entry(root: Path, target: str, skill: str) -> PythonEntry:
    """Import `module:function` from the skill folder `root` (cached until the file changes)."""
    module, _, func = target.partition(":")
    path = _module_path(root, module)
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        raise SkillRunError(
            f"skill '{skill}': module file {path.name} not found",
            hint=f"run.python is '{target}'; create {path} or fix the module name",
        ) from None
    cached = _cache.get(path)
    if cached is not None and cached[0] == mtime:
        mod, entries = cached[1], cached[2]
        entry = entries.get(func)
        if entry is not None:
            return entry
    else:
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
        name = f"_orchestrator_skill_{digest}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SkillRunError(f"skill '{skill}': cannot import {path.name}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except SyntaxError as exc:
            sys.modules.pop(name, None)
            raise SkillRunError(
                f"skill '{skill}': {path.name} line {exc.lineno}: {exc.msg}",
                hint="fix the syntax error in the implementation",
            ) from None
        except Exception as exc:  # importing user code: any failure is the skill's, reported cleanly
            sys.modules.pop(name, None)
            raise SkillRunError(
                f"skill '{skill}': importing {path.name} failed: {type(exc).__name__}: {exc}",
                hint="check the module's top-level code and imports",
            ) from None
        entries = {}
        _cache[path] = (mtime, mod, entries)
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise SkillRunError(
            f"skill '{skill}': {path.name} has no function '{func}'",
            hint=f"define `def {func}(...)` in {path.name} or fix run.python in skill.yaml",
        )
    entry = entries[func] = PythonEntry(fn)
    return entry
