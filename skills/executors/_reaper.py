"""Everything a synchronous python skill starts ends with its call (used by `skills.executors._worker`).

A skill may start processes: `subprocess.Popen(["sleep", ...])`, `setsid sleep`, a double
fork. Killing the worker's process group misses the last two (another session; a grandchild
whose parent is gone is re-parented to init), and nothing at all ran when the server died.
Two subreapers (`PR_SET_CHILD_SUBREAPER`) keep every descendant in reach:

- the worker: an orphan of the skill's processes is re-parented to it, not to init; after each
  call it kills what the call left (`end_children`) before it answers;
- its keeper, the worker's parent for its whole life (`keep`): it runs no skill code, so it is
  always free to act. When the pool stops the worker (a timeout, a cancelled call: SIGTERM to
  the keeper), when the worker dies, or when the server dies (the keeper's parent-death signal,
  a SIGTERM too: the server's SIGTERM, or even SIGKILL), it kills the worker and every process
  left under it, then exits as the worker did (same status or signal), so the pool reads the
  worker's end from it.

Linux only: elsewhere the worker runs alone and its process group is what the pool kills.
Descendants are found in /proc (parent pids), killed with SIGKILL and reaped, until none is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

__all__ = [
    "CAN_KEEP",
    "descendants",
    "end_children",
    "fork_keeper",
    "keep",
    "kill_descendants",
    "parent_death_signal",
    "subreaper",
]

CAN_KEEP = sys.platform == "linux"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_WATCHED = {signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP}
"""What the keeper waits for (blocked, taken with sigwaitinfo: no Python handler can be late)."""
_WITHIN = 5.0  # seconds to kill a tree (processes stuck in the kernel may outlive it)


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def subreaper() -> bool:
    """Make orphaned descendants of this process its children (not init's)."""
    return CAN_KEEP and _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def parent_death_signal(sig: int) -> None:
    """Ask Linux to send `sig` to this process when its parent dies."""
    if CAN_KEEP:
        _prctl(_PR_SET_PDEATHSIG, sig)


def descendants(root: int) -> list[int]:
    """Pids of every process under `root`, from /proc (nearest first)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.scandir("/proc")
    except OSError:
        return []
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_bytes()
                parent = int(stat.rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    queue = list(children.get(root, ()))
    while queue:
        pid = queue.pop(0)
        found.append(pid)
        queue += children.get(pid, ())
    return found


def _reap() -> dict[int, int]:
    """Collect every child that has ended: pid -> wait status."""
    ended: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended[pid] = status


def kill_descendants(root: int) -> dict[int, int]:
    """SIGKILL every process under `root` (this process, a subreaper) until none is left; the
    wait statuses of the children reaped meanwhile."""
    deadline = time.monotonic() + _WITHIN
    pause, ended = 0.0005, dict[int, int]()
    while True:
        found = descendants(root)
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        ended |= _reap()
        if not found or time.monotonic() > deadline:
            return ended
        time.sleep(pause)  # the killed are exiting; orphans of theirs come to us, no event says when
        pause = min(pause * 2, 0.02)


def end_children() -> None:
    """After a call: kill and reap whatever it left running (one system call when it left nothing)."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return  # no child at all: nothing under us either (orphans become our children)
    kill_descendants(os.getpid())


def keep(worker: int, server: int) -> NoReturn:
    """Be the keeper of `worker` (this process forked it, with `_WATCHED` blocked): see the module doc."""
    parent_death_signal(signal.SIGTERM)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # the pool's pipes are the worker's alone: its end is seen at once
    os.dup2(devnull, 1)
    if os.getppid() != server:  # the server died before the line above
        _stop(worker)
    while True:
        info = signal.sigwaitinfo(_WATCHED)
        if info.si_signo != signal.SIGCHLD:
            _stop(worker)
        status = _reap().get(worker)
        if status is not None:
            _finish(status)


def _stop(worker: int) -> NoReturn:
    with contextlib.suppress(ProcessLookupError):
        os.kill(worker, signal.SIGKILL)
    try:
        _, status = os.waitpid(worker, 0)
    except ChildProcessError:
        status = signal.SIGKILL  # reaped already: it was killed all the same
    _finish(status)


def _finish(status: int) -> NoReturn:
    """The worker has ended: end what it left, then end as it did."""
    kill_descendants(os.getpid())
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not end a process
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def fork_keeper() -> None:
    """Split this process: the parent becomes the keeper (never returns), the child goes on as
    the worker, a subreaper that dies with its keeper."""
    if not CAN_KEEP:
        return
    server, keeper = os.getppid(), os.getpid()
    subreaper()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)  # none may arrive before the keeper waits
    worker = os.fork()
    if worker:
        keep(worker, server)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    parent_death_signal(signal.SIGKILL)
    if os.getppid() != keeper:  # the keeper died before the line above
        os._exit(0)
    subreaper()
