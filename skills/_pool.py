"""Worker processes for synchronous python skills: reused between calls, killed at a timeout.

One call takes one worker (`skills._worker`) from the pool, sends the request and awaits the
reply on the pipe without a thread (a round trip costs about what `to_thread` costs). A call
that times out, is cancelled, or whose worker dies is answered at once and its worker killed
with everything it started (its own process group): the work stops, nothing runs on.

Bounds, so that one client or one skill cannot starve the rest: at most `MAX_WORKERS` workers,
at most `MAX_PER_SKILL` of them busy with the same skill (further calls of it wait their turn),
and one worker starting at a time (a burst of tiny calls is served by the workers that exist
instead of starting a process each) unless the skill asking has none. The pool holds plain
processes and file descriptors, not event-loop objects, so servers on different event loops
may share it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from ._worker import _HEADER, MAX_FRAME

__all__ = ["MAX_PER_SKILL", "MAX_WORKERS", "WorkerDied", "call_in_worker"]

MAX_WORKERS = 16
"""Worker processes at most (each is a Python interpreter of about 35 MB)."""
MAX_PER_SKILL = 8
"""Workers one skill may keep busy at once."""
MAX_IDLE = 4
"""Idle workers kept for the next calls; more are closed."""

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


class WorkerDied(Exception):
    """The worker ended in the middle of a call (os._exit, a crash, the OOM killer)."""


class _Worker:
    """One worker process and the read buffer of its reply pipe."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "skills._worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group: a kill takes the skill's children too
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd, self.rfd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self.wfd, False)
        os.set_blocking(self.rfd, False)
        self.buffer = bytearray()
        self.env = _environ()
        self.starting = True  # until its "ready" frame is read: the interpreter may still be importing

    def alive(self) -> bool:
        return self.proc.poll() is None

    async def send(self, message: Any) -> None:
        view = memoryview(_frame(message))
        while view:
            try:
                view = view[os.write(self.wfd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self.wfd)
            except BrokenPipeError:
                raise WorkerDied(self.describe_end()) from None

    async def receive(self) -> Any:
        header = await self._take(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        if size > MAX_FRAME:
            raise WorkerDied(f"it sent a reply of {size:,} bytes")
        body = await self._take(size)
        try:
            return pickle.loads(body)
        except (pickle.UnpicklingError, ImportError, AttributeError, TypeError, ValueError) as exc:
            return ("error", _unreadable(exc))

    async def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            try:
                chunk = os.read(self.rfd, max(size - len(self.buffer), 1 << 16))
            except BlockingIOError:
                await anyio.wait_readable(self.rfd)
                continue
            if not chunk:
                raise WorkerDied(self.describe_end())
            self.buffer += chunk
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def describe_end(self) -> str:
        code = self.proc.poll()
        if code is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=1)
        if code is None:
            return "its process closed its pipe"
        if code < 0:
            return f"its process was killed by signal {signal.Signals(-code).name}"
        return f"its process exited with status {code}"

    def kill(self) -> None:
        """Kill the worker and everything it started; reaped later, never waited for here."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.close()

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        _dying.append(self.proc)


def _unreadable(exc: Exception) -> dict[str, Any]:
    message = f"the result holds a value the server cannot read ({type(exc).__name__}: {exc})"
    return {"kind": "OutputError", "message": message, "hint": "return JSON-like data", "where": "result",
            "limit": None, "trace": None}  # fmt: skip


def _frame(message: Any) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


def _environ() -> dict[Any, Any]:
    """A cheap snapshot of the environment (its encoded dict: no decoding of every value)."""
    data = getattr(os.environ, "_data", None)
    return dict(data) if isinstance(data, dict) else dict(os.environ)


_live: set[_Worker] = set()
_idle: list[_Worker] = []
_busy: Counter[str] = Counter()
_dying: list[subprocess.Popen[bytes]] = []
_waiters: list[tuple[str, anyio.Event]] = []
"""Calls waiting for a worker, first come first served; each release wakes one that can proceed."""


def _reap() -> None:
    _dying[:] = [proc for proc in _dying if proc.poll() is None]


def _wake_one() -> None:
    """Wake the first waiting call whose skill is under its cap (waking all of them made a
    burst of 1,000 calls cost a million wake-ups)."""
    for index, (skill, event) in enumerate(_waiters):
        if _busy[skill] < MAX_PER_SKILL:
            del _waiters[index]
            event.set()
            return


def _take(skill: str) -> _Worker | None:
    if _busy[skill] >= MAX_PER_SKILL:
        return None
    while _idle:
        worker = _idle.pop()
        if worker.alive():
            _busy[skill] += 1
            if not _idle and len(_live) < MAX_WORKERS and not any(w.starting for w in _live):
                _idle.append(_start())  # a spare, starting in the background for the next call
            return worker
        _live.discard(worker)
        worker.close()
    # One start at a time, except for a skill that has no worker yet: it is not kept waiting
    # behind another skill's burst.
    if len(_live) < MAX_WORKERS and (not _busy[skill] or not any(w.starting for w in _live)):
        _busy[skill] += 1
        return _start()
    return None


def _start() -> _Worker:
    worker = _Worker()
    _live.add(worker)
    return worker


async def _acquire(skill: str) -> _Worker:
    while True:
        _reap()
        worker = _take(skill)
        if worker is not None:
            return worker
        entry = (skill, anyio.Event())
        _waiters.append(entry)
        try:
            await entry[1].wait()
        except BaseException:  # cancelled while waiting: leave the queue, pass on a wake-up it got
            if entry in _waiters:
                _waiters.remove(entry)
            else:
                _wake_one()
            raise


def _release(worker: _Worker, skill: str, reusable: bool) -> None:
    _busy[skill] -= 1
    if not _busy[skill]:
        del _busy[skill]
    if reusable and (len(_idle) < MAX_IDLE or _waiters):
        _idle.append(worker)
    else:
        _live.discard(worker)
        (worker.close if reusable else worker.kill)()
    _wake_one()


async def call_in_worker(request: dict[str, Any], ctx: Any, timeout: float) -> Any:
    """Run one call in a worker; its replies of progress and log go to `ctx` as they come.

    Raises `TimeoutError` after `timeout` seconds (the worker is killed), `WorkerDied`, or
    returns `("result", value, artifact_dir)` / `("error", failure)` (see `skills._worker`).
    """
    skill = request["skill"]
    worker = await _acquire(skill)
    finished = False
    try:
        environ = _environ()
        request["env"] = None if environ == worker.env else dict(os.environ)
        worker.env = environ
        with anyio.fail_after(timeout):
            await worker.send(request)
            while True:
                reply = await worker.receive()
                if reply[0] == "ready":
                    worker.starting = False
                    _wake_one()  # another worker may start now
                elif reply[0] == "progress":
                    await ctx.progress(*reply[1:])
                elif reply[0] == "log":
                    await ctx.log(*reply[1:])
                else:
                    finished = True
                    return reply
    finally:
        _release(worker, skill, reusable=finished)


@atexit.register
def _shutdown() -> None:
    """Close every worker when the server exits (idle ones end on the closed pipe)."""
    for worker in list(_live):
        worker.kill()
    for proc in _dying:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
