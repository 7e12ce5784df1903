"""The worker process that runs synchronous python skills (started by `skills._pool`).

    python -m skills._worker      # speaks length-prefixed pickle frames on its stdin/stdout

Why a process: a runaway skill (a `while True`, a C call such as a backtracking regex or a
10**10**8 power that holds the GIL) stops every client of an in-process server, and a thread
cannot be stopped. A process can: the pool kills it at the skill's timeout, and `sys.exit()`,
`os._exit()`, `KeyboardInterrupt` or a segfault in a C extension end only this process.

Frames, each `!I` length then a pickle:
    request  {"root", "target", "skill", "arguments", "ctx", "cwd", "env"}
    replies  ("ready",) once, when the interpreter is up and before the first request is read;
             ("progress", done, total, message) | ("log", level, message)      any number, then
             ("result", value, artifact_dir) | ("error", {kind, message, hint, where, limit, trace})  one

The protocol uses copies of the original stdin/stdout; file descriptors 0 and 1 are pointed at
/dev/null and stderr, so a skill's `print()` lands in the server's log, never in a frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import io
import os
import pickle
import signal
import struct
import sys
import traceback
from pathlib import Path
from typing import Any

_HEADER = struct.Struct("!I")
SKILL_MODULE_PREFIX = "_orchestrator_skill_"
"""The private module names under which `skills._python.load_entry` imports skill modules."""
MAX_FRAME = 256 << 20
"""Largest frame either side sends: a skill's result above this is refused as too large."""


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class Opaque:
    """Stands in the parent for an object of a class defined in a skill's own module (which only
    the worker has imported): the server then reports it as a value JSON cannot carry, at its path."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:  # not called for plain str/int/list/dict: cheap
        if type(obj).__module__.startswith(SKILL_MODULE_PREFIX):
            return Opaque, (type(obj).__qualname__,)
        return NotImplemented


def _dumps(message: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    return buffer.getvalue()


def _write(fd: int, message: Any) -> None:
    try:
        payload = _dumps(message)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError, ValueError) as exc:
        kind = type(message[1]).__name__ if message[0] == "result" else "message"
        payload = pickle.dumps(
            (
                "error",
                _failure("OutputError", f"the result (a {kind}) is not plain data: {exc}", "return JSON-like data"),
            )
        )
    if len(payload) > MAX_FRAME:
        payload = pickle.dumps(
            ("error", _failure("OutputError", f"the result is larger than {MAX_FRAME >> 20} MiB", "return less data"))
        )
    view = memoryview(_HEADER.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


def _failure(kind: str, message: str, hint: str, where: str = "", trace: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "message": message, "hint": hint, "where": where, "limit": None, "trace": trace}


def _where(root: str, error: BaseException) -> str:
    """`file:line` of the innermost frame of the skill folder in the error's traceback, or ""."""
    base = str(Path(root).resolve()) + "/"
    found = ""
    for frame, line in traceback.walk_tb(error.__traceback__):
        if frame.f_code.co_filename.startswith(base):
            found = f"{frame.f_code.co_filename[len(base) :]}:{line}"
    return found


def _die_with_parent() -> None:
    """Ask Linux to kill this worker when the server dies, even in the middle of a runaway call."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the server died before the line above ran
        os._exit(0)


def _context(request: dict[str, Any], out: int) -> Any:
    from .base import SkillContext

    info = request["ctx"]

    async def progress(done: float, total: float | None, message: str | None) -> None:
        _write(out, ("progress", done, total, message))

    async def log(level: str, message: str) -> None:
        _write(out, ("log", level, message))

    artifact_dir = info.get("artifact_dir")
    return SkillContext(
        skill=info.get("skill", ""),
        artifact_dir=Path(artifact_dir) if artifact_dir else None,
        run_id=info.get("run_id", ""),
        progress_fn=progress,
        log_fn=log,
        limits=info.get("limits") or {},
        extras=info.get("extras") or {},
    )


def _apply(request: dict[str, Any]) -> None:
    """The server's working directory and environment, as they are at this call."""
    if request.get("cwd") and request["cwd"] != os.getcwd():
        with contextlib.suppress(OSError):
            os.chdir(request["cwd"])
    env = request.get("env")
    if env is not None:
        os.environ.clear()
        os.environ.update(env)


_entries: dict[tuple[str, str], tuple[str, float, Any]] = {}
"""(root, target) -> (module file, its mtime, PythonEntry): a call costs one stat, no path objects."""


def _entry(request: dict[str, Any]) -> Any:
    from ._python import load_entry, module_file

    key = (request["root"], request["target"])
    cached = _entries.get(key)
    if cached is not None:
        with contextlib.suppress(OSError):
            if os.stat(cached[0]).st_mtime == cached[1]:
                return cached[2]
    root = Path(request["root"])
    entry = load_entry(root, request["target"], request["skill"])
    path = str(module_file(root, request["target"]))
    _entries[key] = (path, os.stat(path).st_mtime, entry)
    return entry


def _serve_one(request: dict[str, Any], out: int) -> None:
    from .errors import SkillsError

    ctx = None
    try:
        _apply(request)
        entry = _entry(request)
        kwargs = dict(request["arguments"])
        if entry.accepts_ctx:
            kwargs["ctx"] = ctx = _context(request, out)
        value = asyncio.run(entry.fn(**kwargs)) if entry.is_async else entry.fn(**kwargs)
    except SkillsError as exc:
        where = exc.__dict__.get("where") or _where(request["root"], exc)
        failure = _failure(type(exc).__name__, exc.message, exc.hint, where)
        with contextlib.suppress(pickle.PicklingError, TypeError, AttributeError, ValueError):
            failure["exception"] = pickle.dumps(exc)  # the error itself, any SkillsError class and its fields
        _write(out, ("error", {**failure, "limit": getattr(exc, "limit", None)}))
    except BaseException as exc:  # the skill's own failure, whatever it is (SystemExit too): reported, not fatal
        message, hint = f"{type(exc).__name__}: {exc}", "see the server log for the traceback"
        failure = _failure("failure", message, hint, _where(request["root"], exc), traceback.format_exc())
        _write(out, ("error", failure))
    else:
        artifact_dir = ctx.artifact_dir if ctx is not None else None
        _write(out, ("result", value, str(artifact_dir) if artifact_dir is not None else None))


def main() -> None:
    """Serve calls until the server closes the pipe."""
    _die_with_parent()
    requests, out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle; it closes the pipe
    _write(out, ("ready",))
    while True:
        header = _read_exact(requests, _HEADER.size)
        if header is None:
            return
        body = _read_exact(requests, _HEADER.unpack(header)[0])
        if body is None:
            return
        _serve_one(pickle.loads(body), out)
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    # Run the module's importable twin, so that `Opaque` pickles as `skills._worker.Opaque`.
    from skills._worker import main as _main

    _main()
