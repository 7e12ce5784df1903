"""The worker process that runs synchronous python skills (started by `skills.executors._pool`).

    python -m skills.executors._worker      # speaks length-prefixed pickle frames on its stdin/stdout

Why a process: a runaway skill (a `while True`, a C call such as a backtracking regex or a
10**10**8 power that holds the GIL) stops every client of an in-process server, and a thread
cannot be stopped. A process can: the pool kills it at the skill's timeout, and `sys.exit()`,
`os._exit()`, `KeyboardInterrupt` or a segfault in a C extension end only this process.

Frames, each `!I` length then a pickle:
    requests ("call", id, {"root", "target", "skill", "arguments", "ctx", "cwd", "env"})
             ("skip", id)        the call was cancelled before it started: do not run it
    replies  ("ready",) once, when the interpreter is up and before the first request is read;
             ("progress", done, total, message) | ("log", level, message)      any number, then
             ("result", value, artifact_dir, seconds) | ("error", {kind, message, hint, where,
             limit, trace}, seconds) | ("skipped",)       one per request, in request order

Calls run one at a time, in the order they came. The server may queue several (pipelining:
the next request is already here when a call ends, so a burst of tiny calls costs no wake-up
per call); before starting the next one, the worker reads what else has arrived, so a `skip`
sent for a queued call is honoured, and writes the replies it holds in one write.

The protocol uses copies of the original stdin/stdout; file descriptors 0 and 1 are pointed at
/dev/null and stderr, so a skill's `print()` lands in the server's log, never in a frame.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import os
import pickle
import select
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ._wire import HEADER, MAX_FRAME, SKILL_MODULE_PREFIX


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


class _Encoder:
    """One pickler for every reply, not a new one (and its buffer) per reply; made again after
    a failure or a large reply, so neither a broken state nor a large buffer stays."""

    def __init__(self) -> None:
        self.renew()

    def renew(self) -> None:
        self.buffer = io.BytesIO()
        self.pickler = _Pickler(self.buffer, protocol=pickle.HIGHEST_PROTOCOL)

    def dumps(self, message: Any) -> bytes:
        try:
            self.pickler.dump(message)
            data = self.buffer.getvalue()
        except BaseException:
            self.renew()
            raise
        if len(data) > 1 << 16:
            self.renew()
        else:
            self.buffer.seek(0)
            self.buffer.truncate()
            self.pickler.clear_memo()
        return data


_encoder = _Encoder()


def _dumps(message: Any) -> bytes:
    return _encoder.dumps(message)


def _encode(message: tuple[Any, ...]) -> bytes:
    """One reply frame. A final reply that cannot travel becomes an `OutputError` reply in its
    place; a progress or log message that cannot is dropped (it must never stand in for the
    call's final reply, which still follows)."""
    try:
        payload = _dumps(message)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError, ValueError) as exc:
        if message[0] not in ("result", "error"):
            return b""
        kind = type(message[1]).__name__ if message[0] == "result" else "message"
        failure = _failure("OutputError", f"the result (a {kind}) is not plain data: {exc}", "return JSON-like data")
        payload = pickle.dumps(("error", failure, message[-1]))
    if len(payload) > MAX_FRAME:
        failure = _failure("OutputError", f"the result is larger than {MAX_FRAME >> 20} MiB", "return less data")
        payload = pickle.dumps(("error", failure, message[-1]))
    return HEADER.pack(len(payload)) + payload


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
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
    """Be killed when the server dies, even in the middle of a runaway call, and take along
    every process a call starts (`skills.executors._reaper`: a keeper process does both on Linux)."""
    from ._reaper import CAN_KEEP, fork_keeper, parent_death_signal

    if CAN_KEEP:
        fork_keeper()
        return
    parent_death_signal(signal.SIGKILL)


def _context(request: dict[str, Any], out: int) -> Any:
    from ..core.base import SkillContext

    info = request["ctx"]

    async def progress(done: float, total: float | None, message: str | None) -> None:
        _write(out, _encode(("progress", done, total, message)))

    async def log(level: str, message: str) -> None:
        _write(out, _encode(("log", level, message)))

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
"""(root, target) -> (module file, its mtime, PythonEntry): a call costs at most one stat."""


def _entry(request: dict[str, Any]) -> Any:
    """The skill's function, imported again when its file changed. The server took the file's
    modification time just before sending the call (`mtime`), so the worker need not stat it."""
    key = (request["root"], request["target"])
    cached = _entries.get(key)
    if cached is not None:
        mtime = request.get("mtime")
        if mtime is None:
            with contextlib.suppress(OSError):
                mtime = os.stat(cached[0]).st_mtime
        if mtime == cached[1]:
            return cached[2]
    from ._python import load_entry, module_file

    root = Path(request["root"])
    entry = load_entry(root, request["target"], request["skill"])
    path = str(module_file(root, request["target"]))
    _entries[key] = (path, os.stat(path).st_mtime, entry)
    return entry


def _serve_one(request: dict[str, Any], out: int) -> tuple[Any, ...]:
    """Run one call; its final reply (progress and log messages are written as they come)."""
    from ..core.errors import SkillsError

    ctx = None
    began = time.perf_counter()  # again once the module is loaded: the pool wants the skill's own time
    try:
        _apply(request)
        entry = _entry(request)
        kwargs = dict(request["arguments"])
        if entry.accepts_ctx:
            kwargs["ctx"] = ctx = _context(request, out)
        began = time.perf_counter()
        value = asyncio.run(entry.fn(**kwargs)) if entry.is_async else entry.fn(**kwargs)
    except SkillsError as exc:
        where = exc.__dict__.get("where") or _where(request["root"], exc)
        failure = _failure(type(exc).__name__, exc.message, exc.hint, where)
        with contextlib.suppress(pickle.PicklingError, TypeError, AttributeError, ValueError):
            failure["exception"] = pickle.dumps(exc)  # the error itself, any SkillsError class and its fields
        return ("error", {**failure, "limit": getattr(exc, "limit", None)}, time.perf_counter() - began)
    except BaseException as exc:  # the skill's own failure, whatever it is (SystemExit too): reported, not fatal
        message, hint = f"{type(exc).__name__}: {exc}", "see the server log for the traceback"
        failure = _failure("failure", message, hint, _where(request["root"], exc), traceback.format_exc())
        return ("error", failure, time.perf_counter() - began)
    artifact_dir = ctx.artifact_dir if ctx is not None else None
    return ("result", value, str(artifact_dir) if artifact_dir is not None else None, time.perf_counter() - began)


_CHUNK = 1 << 16
"""Bytes read at most at once: a pipe's usual capacity. (A read of 1 MiB cost ~40 us per call,
the buffer mapped and unmapped each time, more than the rest of a small call's work here.)"""


class _Requests:
    """The request pipe: frames read as they arrive, calls queued in order, skips applied."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.poll = select.poll()
        self.poll.register(fd, select.POLLIN)
        self.buffer = bytearray()
        self.queue: collections.OrderedDict[int, dict[str, Any] | None] = collections.OrderedDict()
        """Calls not started yet, by id; None for one the server cancelled (answered `skipped`)."""

    def read(self, block: bool) -> bool:
        """Take in what has arrived (waiting for something if `block`); False once the server is gone."""
        if not self.poll.poll(None if block else 0):  # nothing there: no read that fails
            return True
        while True:
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self.buffer += chunk
            self._parse()
            if len(chunk) < _CHUNK:  # the pipe is empty now (or nearly): no second read for nothing
                return True

    def _parse(self) -> None:
        size = HEADER.size
        while len(self.buffer) >= size:
            (length,) = HEADER.unpack_from(self.buffer)
            if len(self.buffer) < size + length:
                return
            frame = pickle.loads(self.buffer[size : size + length])
            del self.buffer[: size + length]
            if frame[0] == "call":
                self.queue[frame[1]] = frame[2]
            elif frame[1] in self.queue:  # ("skip", id) of a call that has not started
                self.queue[frame[1]] = None


def main() -> None:
    """Serve calls until the server closes the pipe."""
    from ._reaper import end_children

    _die_with_parent()
    requests, out = _Requests(os.dup(0)), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle; it closes the pipe
    _write(out, _encode(("ready",)))
    held: list[bytes] = []  # replies written together just before the next call starts
    skipped = _encode(("skipped",))
    while True:
        if not requests.queue:
            if held:
                _write(out, b"".join(held))
                held.clear()
            if not requests.read(block=True):
                return
            continue
        _, request = requests.queue.popitem(last=False)
        if request is None:
            held.append(skipped)
            continue
        if held:
            _write(out, b"".join(held))
            held.clear()
        held.append(_encode(_serve_one(request, out)))
        end_children()  # nothing the call started outlives it
        sys.stdout.flush()
        sys.stderr.flush()
        if not requests.queue:  # no call known to follow: answer now (a burst's next ones are read next)
            _write(out, b"".join(held))
            held.clear()
        if not requests.read(block=False):  # what came meanwhile: the next calls, skips of queued ones
            return


if __name__ == "__main__":
    # Run the module's importable twin, so that `Opaque` pickles as `skills.executors._worker.Opaque`.
    from skills.executors._worker import main as _main

    _main()
