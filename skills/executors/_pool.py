"""Worker processes for synchronous python skills: reused between calls, killed at a timeout.

A call takes a worker (`skills.executors._channel.Worker`, running `skills.executors._worker`), sends its request
and its task reads the replies on the pipe without a thread. A call that times out, is
cancelled, or whose worker dies is answered at once and its worker killed with everything it
started (its own process group): the work stops, nothing runs on.

Queued calls (pipelining): when a skill's calls are short (the worker measures each), a call
that finds no idle worker is sent to a busy worker of the same skill, behind at most
`QUEUE_BUDGET` seconds of that skill's typical work, instead of waiting for a worker of its
own. The worker finds it in its pipe when the call before ends, and the replies of several
calls come in one read: a burst of tiny calls costs no process wake-up per call. Each call
still runs alone in the worker, its timeout counted from when it starts. If the worker is
killed or dies, the calls queued behind the one it was running never started: they are sent
again elsewhere. A queued call whose caller gives up is skipped by the worker (or, if it
started meanwhile, its result is dropped). Slow skills never queue; nor does a call behind one
that has run for `STUCK` seconds.

Bounds, so that one client or one skill cannot starve the rest: at most `MAX_WORKERS` workers;
one client (its authenticated identity, else its session: `call_in_worker`'s `client`) holds at
most `MAX_PER_CLIENT` of them, and at most `MAX_PER_SKILL` with calls of one skill (its further
calls queue or wait their turn), so another client always finds a worker free or soon free; a
place that frees goes to the waiting client that holds the fewest workers (first come first
served within a client); and one worker starts at a time (a burst of tiny calls is served by the
workers that exist instead of starting a process each) unless the client has none for the skill.
The pool holds plain processes and file descriptors, not event-loop objects, so servers on
different event loops may share it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import time
from collections import Counter
from collections.abc import Hashable
from typing import Any

import anyio
import anyio.lowlevel

from ._channel import ATOMIC, Call, StoppedAtStart, Worker, WorkerDied

__all__ = [
    "MAX_PER_CLIENT",
    "MAX_PER_SKILL",
    "MAX_WORKERS",
    "StoppedAtStart",
    "WorkerDied",
    "call_in_worker",
]

MAX_WORKERS = 16
"""Worker processes at most (each is a Python interpreter of about 35 MB)."""
MAX_PER_CLIENT = 12
"""Workers one client may keep busy at once: the other `MAX_WORKERS - MAX_PER_CLIENT` are
always there for the other clients."""
MAX_PER_SKILL = 8
"""Workers one client may keep busy with calls of one skill at once."""

MAX_IDLE = 4
"""Idle workers kept for the next calls; more are closed."""
QUEUE_BUDGET = 0.005
"""Seconds of a skill's typical work (its recent calls, as the worker measured them) a call
may be queued behind on a busy worker: 32 calls of a 0.1 ms skill, none of a 5 ms one."""
MAX_QUEUE = 32
"""Calls one worker holds at most (the one running included)."""
QUEUE_BYTES = 16 << 10
"""Bytes of queued requests one worker holds at most (a quarter of a pipe's usual capacity)."""
STUCK = 0.05
"""A worker whose call has run this long (seconds) gets no more calls queued behind it."""

_CORES = os.cpu_count() or 1
_FINAL = frozenset({"result", "error", "skipped"})
_live: set[Worker] = set()
_idle: list[Worker] = []
_busy: Counter[str] = Counter()
"""Workers holding calls of each skill."""
_held: Counter[Hashable] = Counter()
"""Workers holding calls of each client."""
_held_skill: Counter[tuple[Hashable, str]] = Counter()
"""Workers holding calls of each client and skill."""
_speed: dict[str, float] = {}
"""Seconds the function of each skill takes in its worker (moving average of its calls)."""
_dying: list[subprocess.Popen[bytes]] = []
_waiters: dict[Hashable, list[tuple[str, anyio.Event]]] = {}
"""Calls waiting for a worker, by client, first come first served within one; each freed place
wakes one that can proceed, of the client holding the fewest workers."""


def _reap() -> None:
    _dying[:] = [proc for proc in _dying if proc.poll() is None]


def _depth(skill: str) -> int:
    seconds = _speed.get(skill)
    return 1 if seconds is None else min(MAX_QUEUE, int(QUEUE_BUDGET / max(seconds, 1e-6)))


def _wake_one() -> None:
    """Wake the first waiting call that can take or queue on a worker now, of the client that
    holds the fewest (waking all of them made a burst of 1,000 calls cost a million wake-ups)."""
    for client in sorted(_waiters, key=_held.__getitem__):  # stable: equals stay in order of arrival
        waiting = _waiters[client]
        seen: dict[str, bool] = {}
        for index, (skill, event) in enumerate(waiting):
            able = seen.get(skill)
            if able is None:
                able = seen[skill] = _can_take(client, skill)
            if able:
                del waiting[index]
                if not waiting:
                    del _waiters[client]
                event.set()
                return


def _capped(client: Hashable, skill: str) -> bool:
    """Whether `client` holds all the workers it may (for `skill`, or at all)."""
    return _held[client] >= MAX_PER_CLIENT or _held_skill[client, skill] >= MAX_PER_SKILL


def _can_take(client: Hashable, skill: str) -> bool:
    """Whether `_take` would find a place for a call of `skill` (without taking it)."""
    if not _capped(client, skill) and (_idle or _may_start(client, skill)):
        return True
    return _queue_target(skill) is not None


def _may_start(client: Hashable, skill: str) -> bool:
    """One start at a time, except for a client that has no worker for this skill yet: it is
    not kept waiting behind another's burst. A client whose calls of a skill queue gets no more
    than a worker per core for them this way (more would not serve its burst sooner), unless
    those are stuck in long calls."""
    held = _held_skill[client, skill]
    if len(_live) >= MAX_WORKERS or (held and _depth(skill) > 1 and held >= _CORES and not _stuck(client, skill)):
        return False
    return not held or not any(w.starting for w in _live)


def _stuck(client: Hashable, skill: str) -> bool:
    """Whether every worker of `client` busy with `skill` has run its call for `STUCK` seconds:
    the skill is not short now, whatever its past calls took, and its calls must not wait for them."""
    now = time.monotonic()
    return all(now - w.since >= STUCK for w in _live if w.client == client and w.skill == skill)


def _assign(worker: Worker, skill: str, client: Hashable) -> Worker:
    worker.skill, worker.client, worker.since = skill, client, time.monotonic()
    _busy[skill] += 1
    _held[client] += 1
    _held_skill[client, skill] += 1
    return worker


def _from_idle(skill: str, ready: bool) -> Worker | None:
    """An idle worker (a ready one only, if `ready`). Not checked for life: one that died idle
    is found out when the request cannot be written, and the call goes elsewhere.

    Taking the last one starts a spare in the background for the next call, unless the calls
    of `skill` are short enough to queue: then the workers there are serve a burst, and a
    spare would only be closed again after it (a start costs ~0.1 s of CPU)."""
    for index in range(len(_idle) - 1, -1, -1):
        worker = _idle[index]
        if ready and worker.starting:
            continue
        del _idle[index]
        if not _idle and _depth(skill) < 2 and len(_live) < MAX_WORKERS and not any(w.starting for w in _live):
            _idle.append(_start())
        return worker
    return None


def _queue_target(skill: str) -> Worker | None:
    """The busy worker of `skill` with the fewest calls and room for one more (module doc)."""
    depth = _depth(skill)
    if depth < 2:
        return None
    now, best = time.monotonic(), None
    for worker in _live:
        if (
            worker.skill == skill
            and len(worker.inflight) < depth
            and worker.queued <= QUEUE_BYTES - ATOMIC
            and not (worker.starting or worker.sending)
        ):
            if now - worker.since < STUCK and (best is None or len(worker.inflight) < len(best.inflight)):
                best = worker
    return best


def _take(call: Call) -> tuple[Worker, bytes, dict[Any, Any]] | None:
    """A worker for `call`: an idle one, a place in a busy one's queue (then the call is sent
    already and None returned, with `call.worker` set), one starting, or a new one; None to wait."""
    skill = call.skill
    capped = _capped(call.client, skill)
    worker = None if capped else _from_idle(skill, ready=True)
    if worker is None:
        target = _queue_target(skill)
        if target is not None:
            data, env = target.request_frame(call)
            if len(data) <= ATOMIC:
                target.queue(call, data, env)
                call.state, call.event = "queued", anyio.Event()
                return None
        if capped:
            return None
        worker = _from_idle(skill, ready=False)
    if worker is None and _may_start(call.client, skill):
        worker = _start()
    if worker is None:
        return None
    _assign(worker, skill, call.client)
    return (worker, *worker.request_frame(call))


def _start() -> Worker:
    worker = Worker()
    _live.add(worker)
    return worker


def _retire(worker: Worker) -> None:
    """Take a worker out of the pool (its process is killed or closed by the caller)."""
    _live.discard(worker)
    if worker.skill is None and worker in _idle:
        _idle.remove(worker)
    _unassign(worker)


def _unassign(worker: Worker) -> None:
    if worker.skill is not None:
        _release(_busy, worker.skill)
        _release(_held, worker.client)
        _release(_held_skill, (worker.client, worker.skill))
        worker.skill = worker.client = None


def _release(counter: Counter[Any], key: Any) -> None:
    counter[key] -= 1
    if not counter[key]:
        del counter[key]


async def _dispatch(call: Call) -> None:
    """Put `call` on a worker: alone on an idle or new one (state `head`, its frame sent here),
    or queued behind others on a busy one (state `queued`, sent by `_take`)."""
    call.worker, call.state = None, "queued"
    while True:
        _reap()
        taken = _take(call)
        if taken is not None or call.worker is not None:
            break
        entry = (call.skill, anyio.Event())
        waiting = _waiters.setdefault(call.client, [])
        waiting.append(entry)
        try:
            await entry[1].wait()
        except BaseException:  # cancelled while waiting: leave the queue, pass on a wake-up it got
            if entry in waiting:
                waiting.remove(entry)
                if not waiting and _waiters.get(call.client) is waiting:
                    del _waiters[call.client]
            else:
                _wake_one()
            raise
    if taken is None:
        return
    worker, data, env = taken
    worker.sent(call, env)
    call.state = "head"
    try:
        await worker.send(data)
    except WorkerDied as exc:
        if worker.starting:  # it could not even start: the call fails rather than start another
            _fail(worker, call, exc)
            raise
        worker.inflight.remove(call)  # it died idle: the request never arrived, so the call goes elsewhere
        _fail(worker, None, exc)
        call.state = "requeue"
    except BaseException as exc:  # cancelled mid-send: the pipe may hold half a frame
        _fail(worker, call, exc)
        raise


async def _wait_turn(call: Call) -> None:
    """Wait, queued behind other calls, until this call's state changes."""
    assert call.event is not None
    try:
        await call.event.wait()
    except BaseException as exc:  # the caller gave up
        if call.state == "queued":  # not started: the worker skips it (if it starts meanwhile, it is dropped)
            call.state = "abandoned"
            assert call.worker is not None
            if call not in call.worker.outbox:  # else it is never written
                call.worker.skip(call.ident)
        elif call.state == "head":  # its turn came: it may be running, so its worker stops
            assert call.worker is not None
            _fail(call.worker, call, exc)
        raise


async def _serve(call: Call) -> None:
    """Read the worker's replies as the first call still wanted on it, until this call's final
    one (replies of abandoned calls ahead of it are dropped, each under its own timeout)."""
    worker = call.worker
    assert worker is not None
    try:
        while True:
            current = worker.inflight[0]
            reply = worker.parse()
            if reply is None:
                await worker.wait_reply(worker.since + current.timeout)
                continue
            kind = reply[0]
            if kind in _FINAL:
                _answered(worker, current, reply)
                if current is call:
                    call.state, call.reply = "done", reply
                    _handover(worker)
                    return
            elif kind == "ready":
                worker.starting, worker.since = False, time.monotonic()
                _wake_one()  # another worker may start now
            elif current is call:
                await (call.ctx.progress if kind == "progress" else call.ctx.log)(*reply[1:])
    except BaseException as exc:  # timeout, a dead worker, cancelled, a client gone mid-progress
        _fail(worker, call, exc)
        if not isinstance(exc, TimeoutError | WorkerDied):
            raise


def _flush(worker: Worker) -> None:
    unsent = worker.flush()
    lost = any(c.state == "head" for c in unsent)
    for call in unsent:
        call.settle("requeue")
    if lost:  # the call told to read next was not written: the next one (or none) reads
        _handover(worker)


def _learn(skill: str, seconds: float) -> None:
    last = _speed.get(skill)
    _speed[skill] = seconds if last is None else 0.8 * last + 0.2 * seconds


def _handover(worker: Worker) -> None:
    """After the reading call's final reply: the calls behind it whose final replies were read
    with it are answered now (a burst completes in one go, and the places it frees are filled
    together), the first one still running reads on, or the worker is free."""
    with contextlib.suppress(WorkerDied):  # a broken reply: the next reader meets it and stops the worker
        while worker.inflight and (reply := worker.peek()) is not None:
            current = worker.inflight[0]
            if reply[0] in _FINAL:
                worker.parse()
                _answered(worker, current, reply)
                if current.state != "abandoned":
                    current.settle("done", reply)
                _wake_one()  # a place in its queue is free
            elif current.state == "abandoned":
                worker.parse()  # progress or log of a call no one waits for
            else:
                break  # progress or log of a waiting call: it reads on
    following = next((c for c in worker.inflight if c.state != "abandoned"), None)
    if following is not None:
        following.settle("head")
    elif worker.inflight:  # only cancelled calls remain and one of them may be running
        _fail(worker, None, anyio.get_cancelled_exc_class()())
    else:
        _free(worker)


def _answered(worker: Worker, call: Call, reply: tuple[Any, ...]) -> None:
    """`call`, first on `worker`, has its final reply: the next one starts about now."""
    worker.pop()
    worker.since = time.monotonic()
    if reply[0] != "skipped":
        _learn(call.skill, reply[-1])


def _free(worker: Worker) -> None:
    """A worker whose calls are all answered: kept idle for the next calls, or closed."""
    _unassign(worker)
    if len(_idle) < MAX_IDLE or _waiters:
        _idle.append(worker)
    else:
        _live.discard(worker)
        worker.close()
        _dying.append(worker.proc)
    _wake_one()


def _fail(worker: Worker, reader: Call | None, cause: BaseException) -> None:
    """Stop `worker` and settle every call it holds: answered ones get their reply, the one it
    was running (at its end) gets the failure, the ones behind it never started and go again."""
    _retire(worker)
    wanted = any(c is not reader and c.state != "abandoned" for c in worker.inflight)
    worker.kill()
    if wanted or isinstance(cause, WorkerDied):
        worker.drain_dead()  # its last replies decide who ran: never run a call twice
    calls = list(worker.inflight)
    worker.inflight.clear()
    worker.outbox.clear()
    worker.queued = 0
    index = 0
    with contextlib.suppress(WorkerDied):
        while index < len(calls) and (reply := worker.parse()) is not None:
            if reply[0] in _FINAL:
                calls[index].settle("done", reply)
                index += 1
    if index < len(calls):
        running = calls[index]
        if running is reader or running.state != "abandoned":
            error = cause if isinstance(cause, TimeoutError | WorkerDied) else None
            if running is not reader:
                error = StoppedAtStart()
            running.settle("failed", error=error)
        for queued in calls[index + 1 :]:
            if queued.state != "abandoned":
                queued.settle("requeue")
    worker.close()
    _dying.append(worker.proc)
    _wake_one()


async def call_in_worker(request: dict[str, Any], ctx: Any, timeout: float, client: Hashable = None) -> Any:
    """Run one call in a worker for `client`; its replies of progress and log go to `ctx` as they come.

    Raises `TimeoutError` after `timeout` seconds (the worker is killed), `WorkerDied`, or
    returns `("result", value, artifact_dir, seconds)` / `("error", failure, seconds)` (see
    `skills.executors._worker`).
    """
    call = Call(request, ctx, timeout, client)
    while True:
        await _dispatch(call)
        if call.state == "requeue":
            continue
        worker = call.worker
        if worker is not None and worker.outbox and worker.outbox[0] is call:
            # Let the other calls of this moment join the outbox, then write them all at once.
            await anyio.lowlevel.cancel_shielded_checkpoint()
            _flush(worker)
        if call.state == "queued":
            await _wait_turn(call)
        if call.state == "head":
            await _serve(call)
        if call.state == "done":
            assert call.reply is not None
            return call.reply
        if call.state == "failed":
            assert call.error is not None
            raise call.error
        # "requeue": its worker ended before it started; send it again


@atexit.register
def _shutdown() -> None:
    """Close every worker when the server exits (idle ones end on the closed pipe)."""
    for worker in list(_live):
        worker.kill()
        worker.close()
        _dying.append(worker.proc)
    for proc in _dying:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
