"""One worker process seen from the server: its pipes, the calls it holds in order, their replies.

A worker runs its calls one at a time in the order they were sent (see `skills.executors._worker`), so the
server knows which call every reply belongs to without ids on the replies: the first call of
`inflight` is the one running (or about to run), and its final reply comes before the next
call's first. Reading is done by one task at a time, the task of the first call still wanted
(see `skills.executors._pool`); it parses frames out of `buffer`, where the replies of the calls queued
behind it may already wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import select
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Literal, cast

import anyio

from ._reaper import CAN_KEEP
from ._wire import HEADER, MAX_FRAME

__all__ = ["Call", "StoppedAtStart", "Worker", "WorkerDied", "frame"]

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
ATOMIC = select.PIPE_BUF
"""A write of at most this many bytes to a pipe is all or nothing: queued requests and skips
are written whole without waiting, so a task never leaves half a frame in the pipe."""

State = Literal["queued", "head", "requeue", "done", "failed", "abandoned"]
"""Where a call stands: waiting behind others on a worker; told to read its own replies; to be
sent again elsewhere (it never started: its worker died); answered (`reply`); failed (`error`);
cancelled by its caller while queued (its result, if it ran anyway, is dropped)."""


class WorkerDied(Exception):
    """The worker ended in the middle of a call (os._exit, a crash, the OOM killer)."""


class StoppedAtStart(WorkerDied):
    """The worker was stopped for the call before this one (cancelled, timed out) just as this
    one began: it may have run a little, so it is not sent again but reported."""


class Call:
    """One call on its way through the pool."""

    __slots__ = (
        "client", "ctx", "error", "event", "frame", "ident", "reply", "request", "skill", "state", "timeout", "worker",
    )  # fmt: skip

    def __init__(self, request: dict[str, Any], ctx: Any, timeout: float, client: Hashable = None) -> None:
        self.request, self.ctx, self.timeout, self.client = request, ctx, timeout, client
        self.skill: str = request["skill"]
        self.state: State = "queued"
        self.event: anyio.Event | None = None
        """Set when a queued call's state changes (created only for calls that wait)."""
        self.reply: tuple[Any, ...] | None = None
        self.error: BaseException | None = None
        self.worker: Worker | None = None
        self.ident = 0
        """Its number on `worker` (what a `skip` names)."""
        self.frame = b""
        """Its request frame while it is queued (written with the others of the same moment)."""

    def settle(self, state: State, reply: tuple[Any, ...] | None = None, error: BaseException | None = None) -> None:
        """Tell a waiting call what became of it."""
        self.state, self.reply, self.error = state, reply, error
        if self.event is not None:
            self.event.set()


def frame(message: Any) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


def _live_environ() -> dict[Any, Any]:
    """The environment as it is now, without a copy where `os.environ` keeps an encoded dict
    (compared with a worker's last one on every call: copied only when it changed)."""
    data = getattr(os.environ, "_data", None)
    return cast("dict[bytes, bytes]", data) if isinstance(data, dict) else dict(os.environ)


def environ() -> dict[Any, Any]:
    """A cheap snapshot of the environment (its encoded dict: no decoding of every value)."""
    return dict(_live_environ())


def _settle(future: asyncio.Future[bool], readable: bool) -> None:
    if not future.done():
        future.set_result(readable)


async def _readable(fd: int, timeout: float) -> bool:
    """Wait until `fd` is readable, `timeout` seconds at most (False then).

    On asyncio (the server's loop) a reader and a timer on the loop, not `anyio.fail_after`
    around `anyio.wait_readable`: their cancel scope and bookkeeping cost more per reply than the
    rest of the reading. A cancellation of the calling task ends the wait all the same."""
    try:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        loop.add_reader(fd, _settle, future, True)
    except (RuntimeError, NotImplementedError):  # another backend, or a loop without readers (Windows)
        with anyio.move_on_after(timeout) as scope:
            await anyio.wait_readable(fd)
        return not scope.cancelled_caught
    timer = loop.call_later(timeout, _settle, future, False)
    try:
        return await future
    finally:
        loop.remove_reader(fd)
        timer.cancel()


class Worker:
    """One worker process, the read buffer of its reply pipe and the calls sent to it."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "skills.executors._worker"],
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
        self.peeked: tuple[Any, ...] | None = None
        self.env = environ()
        self.starting = True  # until its "ready" frame is read: the interpreter may still be importing
        self.inflight: deque[Call] = deque()
        """Calls sent and not answered yet, in the order the worker runs them."""
        self.skill: str | None = None
        """The skill of the calls it holds (a worker holds calls of one skill at a time)."""
        self.client: Hashable = None
        """The client whose call took it (calls of others may be queued behind: `skills.executors._pool`)."""
        self.since = 0.0
        """`time.monotonic()` when its first call of `inflight` started (about: when the one
        before it was answered)."""
        self.sending = False
        """A request too large for one write is on its way: nothing may be queued behind it yet."""
        self.outbox: list[Call] = []
        """Queued calls whose frames are not written yet (see `flush`)."""
        self.queued = 0
        """Bytes of the queued calls' frames not answered yet: kept well under a pipe's capacity,
        so that writing them never has to wait."""
        self.ids = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request_frame(self, call: Call) -> tuple[bytes, dict[Any, Any]]:
        """The frame of `call` for this worker (the environment travels only when it changed)
        and the environment it carries; `sent` records both once the frame is on its way."""
        current = _live_environ()
        if current == self.env:
            call.request["env"], current = None, self.env
        else:
            call.request["env"], current = dict(os.environ), dict(current)
        call.ident = self.ids + 1
        return frame(("call", call.ident, call.request)), current

    def sent(self, call: Call, env: dict[Any, Any]) -> None:
        self.ids, self.env, call.worker = call.ident, env, self
        self.inflight.append(call)

    def queue(self, call: Call, data: bytes, env: dict[Any, Any]) -> bool:
        """Hold `call` behind the others (its frame goes with the next `flush`); True if it is
        the first in the outbox, so its task flushes."""
        call.frame = data
        self.queued += len(data)
        self.sent(call, env)
        self.outbox.append(call)
        return len(self.outbox) == 1

    def pop(self) -> Call:
        """The first call of `inflight` has its final reply."""
        call = self.inflight.popleft()
        self.queued -= len(call.frame)
        return call

    def flush(self) -> list[Call]:
        """Write the outbox in writes of at most `ATOMIC` bytes (one wake-up of the worker for
        a whole burst); the calls that could not be written (a full pipe), taken out of `inflight`."""
        calls = [c for c in self.outbox if c.state != "abandoned"]
        unsent = [c for c in self.outbox if c.state == "abandoned"]  # cancelled before they left
        self.outbox.clear()
        start = 0
        while start < len(calls):
            end, size = start, 0
            while end < len(calls) and size + len(calls[end].frame) <= ATOMIC:
                size += len(calls[end].frame)
                end += 1
            if not self.put(b"".join(c.frame for c in calls[start:end])):
                unsent += calls[start:]
                self.env = {}  # the environment may have travelled in one of them: send it again
                break
            start = end
        for call in unsent:
            self.inflight.remove(call)
            self.queued -= len(call.frame)
        return [c for c in unsent if c.state != "abandoned"]

    async def send(self, data: bytes) -> None:
        """Write a whole frame, waiting for room in the pipe (an idle worker drains it)."""
        view = memoryview(data)
        self.sending = True
        try:
            while view:
                try:
                    view = view[os.write(self.wfd, view) :]
                except BlockingIOError:
                    await anyio.wait_writable(self.wfd)
                except BrokenPipeError:
                    raise WorkerDied(self.describe_end()) from None
        finally:
            self.sending = False

    def put(self, data: bytes) -> bool:
        """Write a small frame at once, or nothing (False: the pipe is full or closed)."""
        if len(data) > ATOMIC:
            return False
        try:
            os.write(self.wfd, data)
        except (BlockingIOError, BrokenPipeError):
            return False
        return True

    def skip(self, call_id: int) -> bool:
        return self.put(frame(("skip", call_id)))

    def peek(self) -> tuple[Any, ...] | None:
        """The next complete reply in the buffer, left there for `parse`; None if there is none."""
        if self.peeked is None:
            self.peeked = self.parse()
        return self.peeked

    def parse(self) -> tuple[Any, ...] | None:
        """The next complete reply in the buffer (taken out of it), or None."""
        if self.peeked is not None:
            reply, self.peeked = self.peeked, None
            return reply
        size = HEADER.size
        if len(self.buffer) < size:
            return None
        (length,) = HEADER.unpack_from(self.buffer)
        if length > MAX_FRAME:
            raise WorkerDied(f"it sent a reply of {length:,} bytes")
        if len(self.buffer) < size + length:
            return None
        body = bytes(self.buffer[size : size + length])
        del self.buffer[: size + length]
        try:
            return pickle.loads(body)
        except (pickle.UnpicklingError, ImportError, AttributeError, TypeError, ValueError) as exc:
            return ("error", _unreadable(exc), 0.0)

    def fill(self) -> bool:
        """Read what the pipe holds now; False when nothing was there. `WorkerDied` at its end."""
        try:
            chunk = os.read(self.rfd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError:
            raise WorkerDied(self.describe_end()) from None
        if not chunk:
            raise WorkerDied(self.describe_end())
        self.buffer += chunk
        return True

    async def wait_reply(self, deadline: float) -> None:
        """Read more replies, waiting until `deadline` (monotonic) at most: `TimeoutError` after it."""
        while not self.fill():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not await _readable(self.rfd, remaining):
                raise TimeoutError

    def drain_dead(self) -> None:
        """After `kill`: wait for the process to end, then take every reply it wrote before."""
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self._kill_group()  # its keeper did not answer: the hard way
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=1)
        with contextlib.suppress(WorkerDied):
            while self.fill():
                pass

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
        """Kill the worker and everything it started (its replies stay readable until `close`).

        On Linux the process is the worker's keeper (`skills.executors._reaper`): told to stop,
        it kills the worker and every process left under it (setsid and double forks too),
        then exits as the worker did. Elsewhere the worker's process group is killed.
        """
        if CAN_KEEP:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.proc.pid, signal.SIGTERM)
        else:
            self._kill_group()

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:  # both are pipes: set when the process started
                with contextlib.suppress(OSError):
                    stream.close()


def _unreadable(exc: Exception) -> dict[str, Any]:
    message = f"the result holds a value the server cannot read ({type(exc).__name__}: {exc})"
    return {"kind": "OutputError", "message": message, "hint": "return JSON-like data", "where": "result",
            "limit": None, "trace": None}  # fmt: skip
