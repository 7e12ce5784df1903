"""The `python` executor: a function in a module inside the skill folder.

Where it runs depends on the function:
- `def f(...)` (synchronous) runs in a worker process of `skills.executors._pool`: a runaway one is killed
  at its timeout (pure-Python loop or C call alike), and `sys.exit()`, `os._exit()` or a crash
  ends that worker, not the server. Its `ctx` carries the skill, run id, artifact directory,
  limits and the plain-data `extras`; progress and log messages travel back to the caller.
- `async def f(...)` runs in-process on the server's event loop, with the full `ctx` (model
  access, sampling). It is trusted code: it is stopped at its timeout only when it awaits.

Modules are loaded by file path under a private name and cached by modification time, so an
edited implementation is picked up on the next call without restarting the server.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import logging
import os
import pickle
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.to_thread

from ..core import errors
from ..core.base import SkillContext
from ..core.errors import SkillCancelledError, SkillRunError, SkillsError, SkillTimeoutError
from ._wire import CLIENT_KEY, SKILL_MODULE_PREFIX

log = logging.getLogger("skills.loader")

__all__ = ["PythonEntry", "is_async_entry", "load_entry", "run_python"]

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
        # Not the server's path for `def` skills: `run_python` sends them to a worker process
        # (`_pool`). A sync entry called here directly still must not stall the event loop.
        return await anyio.to_thread.run_sync(functools.partial(self.fn, **kwargs), abandon_on_cancel=True)


def _module_path(root: Path, module: str) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def module_file(root: Path, target: str) -> Path:
    """The file of `module:function` inside the skill folder `root`."""
    return _module_path(root, target.partition(":")[0])


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
        name = f"{SKILL_MODULE_PREFIX}{digest}"
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
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # user code: any failure is the skill's
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


_async_cache: dict[tuple[Path, str], tuple[str, float, bool]] = {}


def is_async_entry(root: Path, target: str) -> bool:
    """Whether `module:function` is an `async def`, read from the source without importing it.

    The server must not import a synchronous skill's module: its top-level code belongs in the
    worker. A function the text does not show as `async def` is taken as synchronous; if it
    turns out to be async, the worker runs it in an event loop of its own.
    """
    return entry_facts(root, target)[0]


def entry_facts(root: Path, target: str) -> tuple[bool, float | None]:
    """`is_async_entry` and the module file's modification time (None if it cannot be read),
    from one stat: the worker trusts this time instead of taking its own."""
    cached = _async_cache.get((root, target))
    if cached is not None:
        try:
            mtime = os.stat(cached[0]).st_mtime
        except OSError:
            return False, None  # the worker reports the missing file
        if mtime == cached[1]:
            return cached[2], mtime
    func = target.partition(":")[2]
    path = module_file(root, target)
    try:
        mtime = path.stat().st_mtime
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False, None  # the worker reports the missing or unreadable file
    found = re.search(rf"^async[ \t]+def[ \t]+{re.escape(func)}[ \t]*\(", text, re.MULTILINE) is not None
    _async_cache[(root, target)] = (str(path), mtime, found)
    return found, mtime


PLACED_KEY = "python_placed"
"""`ctx.extras` key: the `entry_facts` the call's `ctx` was built for (`placed_apart`), taken by
its `run_python`: one stat a call, and the call runs where its `ctx` was made for."""


def placed_apart(root: Path, target: str, ctx: SkillContext) -> bool:
    """Whether the call of `ctx` will run `module:function` in a worker process (a `def`), where
    only the plain data of its `ctx` arrives; what was read is kept on `ctx` for `run_python`."""
    is_async, mtime = entry_facts(root, target)
    ctx.extras[PLACED_KEY] = (str(root), target, is_async, mtime)
    return not is_async


async def run_python(
    root: Path, target: str, skill: str, arguments: dict[str, Any], ctx: SkillContext, timeout: float
) -> Any:
    """Call a python skill where it belongs (see the module doc); every failure is a `SkillRunError`."""
    placed = ctx.extras.pop(PLACED_KEY, None)
    if placed is not None and placed[0] == str(root) and placed[1] == target:
        is_async, mtime = placed[2], placed[3]
    else:
        is_async, mtime = entry_facts(root, target)
    if is_async:
        return await _run_in_process(root, target, skill, arguments, ctx, timeout)
    from ._pool import StoppedAtStart, WorkerDied, call_in_worker

    request = {
        "root": str(root),
        "target": target,
        "mtime": mtime,
        "skill": skill,
        "arguments": arguments,
        "ctx": {
            "skill": ctx.skill,
            "run_id": ctx.run_id,
            "artifact_dir": str(ctx.artifact_dir) if ctx.artifact_dir is not None else None,
            "limits": _plain_part(ctx.limits),
            "extras": _plain_part(ctx.extras),
        },
        "cwd": os.getcwd(),
    }
    try:
        reply = await call_in_worker(request, ctx, timeout, ctx.extras.get(CLIENT_KEY))
    except TimeoutError:
        raise SkillTimeoutError(
            f"'{skill}' did not finish within {timeout:g}s and was stopped (its worker process was killed)",
            hint="raise `timeout:` in skill.yaml or give the skill less work",
        ) from None
    except StoppedAtStart:
        raise SkillCancelledError(
            f"'{skill}' was stopped as it began: the call before it in the same worker process was "
            "cancelled or timed out",
            hint="call it again",
        ) from None
    except WorkerDied as exc:
        raise SkillRunError(
            f"'{skill}' ended its worker process: {exc}",
            hint="the skill called os._exit() or crashed (a C extension, the memory limit); see the server log",
        ) from None
    if reply[0] == "result":
        if reply[2] is not None and ctx.artifact_dir is None:
            ctx.artifact_dir = Path(reply[2])
        return reply[1]
    failure = reply[1]
    if failure["trace"]:  # logged here, by the server's logging (the CLI keeps it quiet), never sent to the client
        log.error("skill %s raised:\n%s", skill, failure["trace"].rstrip())
    raise _rebuilt(skill, failure)


def _rebuilt(skill: str, failure: dict[str, Any]) -> SkillsError:
    """The worker's error as the class it was raised as (its envelope type), else a skill failure."""
    if failure.get("exception"):
        try:  # a SkillsError of any module (skills.core.roots ...), with its message, hint and fields
            raised = pickle.loads(failure["exception"])
        except (pickle.UnpicklingError, ImportError, AttributeError, TypeError, ValueError):
            raised = None  # a class whose constructor wants more than the message: rebuilt below
        if isinstance(raised, SkillsError):
            if failure["where"] and not raised.__dict__.get("where"):
                raised.where = failure["where"]
            return raised
    error = getattr(errors, failure["kind"], None)
    message, hint, where = failure["message"], failure["hint"], failure["where"]
    if isinstance(error, type) and issubclass(error, SkillRunError):
        return error(message, hint=hint, where=where)
    if error is errors.LimitExceededError:
        return errors.LimitExceededError(message, limit=failure["limit"] or "", hint=hint, where=where)
    return SkillRunError(f"'{skill}' failed: {message}", hint=hint, where=where)


async def _run_in_process(
    root: Path, target: str, skill: str, arguments: dict[str, Any], ctx: SkillContext, timeout: float
) -> Any:
    entry = load_entry(root, target, skill)
    try:
        with anyio.fail_after(timeout):
            return await entry.call(arguments, ctx)
    except TimeoutError:
        raise SkillTimeoutError(
            f"'{skill}' did not finish within {timeout:g}s and was stopped",
            hint="raise `timeout:` in skill.yaml or give the skill less work",
        ) from None
    except SkillsError:
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the skill's own bug: logged, reported cleanly
        log.error("skill %s raised", skill, exc_info=exc)
        raise SkillRunError(
            f"'{skill}' failed: {type(exc).__name__}: {exc}", hint="see the server log for the traceback"
        ) from exc  # the envelope's `where` is read from the cause's traceback


_PLAIN = (str, int, float, bool, type(None), Path)
_SCALARS = frozenset({str, int, float, bool, type(None)})
_KEYS = frozenset({str})
_OPAQUE: set[type] = set()
"""Types of values found not to be data (not sent to workers), for a quicker no next time."""


def _plain_part(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `ctx.limits` or `ctx.extras` a worker can receive (every call sends them)."""
    out: dict[str, Any] = {}
    for key, value in cast("Mapping[str, object]", mapping).items():
        kind = type(value)
        if kind in _SCALARS or (kind not in _OPAQUE and _plain(value)):
            out[key] = value
    return out


def _plain(value: object, depth: int = 0) -> bool:
    """Data a worker can receive as it is (no objects of the server: model access, the Catalog).

    It runs over every call's `ctx.extras`: a container of scalars is checked by C loops
    (`issuperset` over the types), and a type found not to be data is remembered (`_OPAQUE`)."""
    kind = type(value)
    if kind in _SCALARS or isinstance(value, _PLAIN):  # the exact types first: checked for every call
        return True
    if depth > 8:
        return False
    if isinstance(value, list | tuple):
        items = cast("list[object] | tuple[object, ...]", value)
        if _SCALARS.issuperset(map(type, items)):
            return True
        return all(_plain(item, depth + 1) for item in items)
    if isinstance(value, dict):
        entries = cast("dict[object, object]", value)
        if _KEYS.issuperset(map(type, entries)) and _SCALARS.issuperset(map(type, entries.values())):
            return True
        return all(isinstance(key, str) and _plain(item, depth + 1) for key, item in entries.items())
    if len(_OPAQUE) < 256:  # decided by its type alone: neither a container nor a scalar
        _OPAQUE.add(kind)
    return False
