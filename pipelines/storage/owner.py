"""Who runs a run: the owner recorded with a running run, and whether that owner still lives.

A run killed with `kill -9` (or a machine that lost power) records no end: its row says
`running` forever unless someone can tell the owner is gone. The owner is the process that
runs it: host name, boot id (Linux: a new one at every boot), process id, and the process's
start time (so a recycled pid is not mistaken for it). While it runs, the owner also writes a
heartbeat every `BEAT` seconds.

On the owner's own machine the check is exact (the process is there with the same start
time, or it is not); for an owner on another machine (a shared state database: the distributed
mode, or a home on a network file system) a heartbeat older than `LEASE` seconds means it is gone.

`$ORCHESTRATOR_LEASE` sets the lease (seconds, default 30; every process on one state must use
the same value) and `$ORCHESTRATOR_HOST_ID` the host name an owner is recorded with (containers
on one machine can share a host name and pid numbers: give each its own id).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BEAT", "LEASE", "Heartbeat", "Owner", "owner_alive"]

log = logging.getLogger("pipelines.runs")


def _lease() -> float:
    raw = os.environ.get("ORCHESTRATOR_LEASE", "")
    try:
        value = float(raw) if raw else 30.0
    except ValueError:
        value = 0.0
    if not 1.0 <= value <= 86_400.0:
        log.warning("ORCHESTRATOR_LEASE=%r is not a number of seconds from 1 to 86400; 30 applies", raw[:40])
        return 30.0
    return value


LEASE = _lease()
"""A heartbeat older than this (seconds) means a remote owner is gone. 30 s by default: as long as
the queue's redelivery timeout, so a run whose worker died on another machine is resumed as soon
as its task comes back, not minutes later. Safe because the heartbeat is a thread of its own
(a busy event loop or a long step does not delay it) that beats four times per lease: an owner
is taken for dead only after three missed beats in a row (its machine stopped, or the database
was out of reach for that long)."""
BEAT = LEASE / 4
"""Seconds between heartbeats of a running run."""


@dataclass(frozen=True)
class Owner:
    """A process that runs runs."""

    host: str
    boot: str
    pid: int
    started: int | None
    """Start time of the process in clock ticks since boot (Linux), None where unknown."""

    @staticmethod
    @functools.cache
    def current() -> Owner:
        host = os.environ.get("ORCHESTRATOR_HOST_ID", "").strip()[:200] or socket.gethostname()
        return Owner(host, _boot_id(), os.getpid(), _process_start(os.getpid()))


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _process_start(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (after the command name, which may hold spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(text.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def owner_alive(
    host: str | None, boot: str | None, pid: int | None, started: int | None, heartbeat: float | None
) -> bool:
    """Whether the recorded owner of a running run still lives (see the module doc)."""
    me = Owner.current()
    if host is None or pid is None:  # written before owners were recorded: only a heartbeat can tell
        return heartbeat is not None and time.time() - heartbeat <= LEASE
    if host == me.host and (boot or "") == me.boot:
        if pid == me.pid:
            return True
        if not _process_exists(pid):
            return False
        return started is None or _process_start(pid) in (None, started)
    if host == me.host and boot and me.boot:  # this machine, booted since: the process is gone
        return False
    return heartbeat is not None and time.time() - heartbeat <= LEASE


class Heartbeat:
    """A thread that stamps the runs this process is running, every `BEAT` seconds, while there are any.

    A thread rather than a task: it needs no task group around the run (whose errors it would
    wrap) and keeps beating while the event loop is busy with a long step.
    """

    def __init__(self, beat: Callable[[Collection[str]], None], every: float = BEAT) -> None:
        self._beat = beat
        self._every = every
        self._runs: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, run_id: str) -> None:
        with self._lock:
            self._runs.add(run_id)
            if self._thread is None:
                self._wake.clear()
                self._thread = threading.Thread(target=self._loop, name="orchestrator-heartbeat", daemon=True)
                self._thread.start()

    def remove(self, run_id: str) -> None:
        with self._lock:
            self._runs.discard(run_id)
            if not self._runs:
                self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self._every)
            with self._lock:
                if not self._runs:  # under the lock: `add` starts a new thread from here on
                    self._thread = None
                    return
                self._wake.clear()
                runs = sorted(self._runs)
            try:
                self._beat(runs)
            except Exception as exc:  # why: a thread has no caller; a busy or broken database gets the next beat
                log.warning("could not record the heartbeat of runs %s: %s", ", ".join(runs), exc)
