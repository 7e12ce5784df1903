"""One way to start, limit and stop every subprocess the product runs for a skill.

Script skills, created skills' tests, `run-tests` and `shell-command` all go through `Jailed`:

- Confined (bubblewrap works here, see `skills.executors.isolation`): the process runs in a jail of its
  own (`skills.executors._bwrap`): no network unless asked, the system and the given paths read-only, one
  writable work directory, private /tmp, its own PID namespace. When its first process ends,
  or on stop, the namespace goes and every descendant with it, `setsid` ones included. The work
  directory is a size-capped tmpfs (`skills.executors._workdir`): what the call leaves there is
  copied to the host's directory when it has ended, or refused whole when it filled the cap.
- Unconfined (no bubblewrap): its own session and process group, a scrubbed environment; on
  stop the group gets SIGTERM, a grace period, then SIGKILL, and a sweep of /proc kills what
  left the group (`setsid`) but still carries the jail's token in its environment.

Either way the bootstrap (`skills.executors._bootstrap`) sets the resource limits of each process
before the program starts, and where the host allows it the whole call runs in a cgroup of its own
(`skills.executors._cgroup`): its memory and its number of processes in total are bounded by the
kernel (`Isolation.budget`), every process it started is found and killed at the end, and a call
that ran into a budget fails with `LimitExceededError` (from `Jailed.close`), whatever it exited with.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import anyio.to_thread
from anyio.abc import Process

from ._bootstrap import PYTHON, RUN_PYTHON, SANDBOX_USER, bootstrap_argv, exit_signal
from ._bwrap import SEED, bwrap_argv
from ._cgroup import CallGroup, gate, support
from ._workdir import WorkArea
from .isolation import Budget, Isolation

__all__ = ["PYTHON", "RUN_PYTHON", "SYSTEM_PATH", "Jail", "Jailed", "bootstrap_argv", "exit_signal"]

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_GRACE = 1.0  # seconds between SIGTERM and SIGKILL: time for the process to clean up
_TOKEN = "ORCHESTRATOR_JAIL"
log = logging.getLogger("skills.confine")
_JAIL_PROCESSES = 2  # bubblewrap's own two processes (outside and pid 1 inside), not the call's
_SH = "/bin/sh"


@dataclass(frozen=True)
class Jail:
    """What a jailed process may see and use."""

    workdir: Path
    """The one writable directory; HOME, and the working directory unless `cwd` is given."""
    read_only: tuple[Path, ...] = ()
    """Folders it may read besides the system (the skill folder, the project under test)."""
    network: bool = False
    nproc: int = 64
    """Most processes (and threads) at once (unconfined: this many more than the user runs)."""
    memory_mb: int | None = None
    """Address-space limit; None: none."""
    timeout: float | None = None
    """Wall-clock budget; backs a CPU-seconds limit (None: none)."""
    tmp_mb: int = 256
    """Size of the private /tmp (confined)."""
    disk_mb: int | None = None
    """Size of the work directory, a tmpfs (confined); None: the home's `isolation: {disk_mb: ...}`."""
    cwd: Path | None = None
    """Working directory when it is not `workdir` (one of `read_only`, e.g. the project under test)."""
    total_memory_mb: int | None = None
    """Memory of the whole call, all its processes together (None: the server's budget; never more)."""
    max_processes: int | None = None
    """Processes of the whole call at once (None: the server's budget, or `nproc` where that is
    more: `run-tests` and `shell-command` keep the process counts they always had)."""
    label: str = "the program"
    """Who the call is in an error message (`'my-skill'`)."""


class Jailed:
    """A running jailed process; `close()` stops whatever is left of it and cleans up."""

    def __init__(
        self,
        process: Process,
        confined: bool,
        token: str,
        tmpdir: Path | None,
        group: CallGroup | None = None,
        budget: Budget | None = None,
        label: str = "the program",
        work: WorkArea | None = None,
    ) -> None:
        self.process, self.confined, self._token, self._tmpdir = process, confined, token, tmpdir
        self.group, self.budget, self.label = group, budget, label
        self._work = work

    @classmethod
    async def open(
        cls,
        command: Sequence[str],
        jail: Jail,
        isolation: Isolation,
        *,
        env: Mapping[str, str],
        stdin: int | None = subprocess.PIPE,
        stdout: int | None = subprocess.PIPE,
        stderr: int | None = subprocess.PIPE,
    ) -> Jailed:
        """Start `command` in `jail` (confined when `isolation` is available).

        Raises:
            OSError: the work directory, the call's cgroup or the process could not be made.
        """
        workdir = jail.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        workdir = workdir.resolve()
        cwd = Path(os.path.realpath(jail.cwd)) if jail.cwd else workdir
        token = secrets.token_hex(8)
        environment = {**env, "HOME": str(workdir), _TOKEN: token}
        tmpdir = work = None
        # With a cgroup, the rlimit stays one above its budget: the budget refuses first, and says so.
        nproc = jail.nproc + 1 if support().enforced else jail.nproc
        if isolation.available and isolation.bwrap and isolation.mode:
            if isolation.mode == "root" and workdir.stat().st_uid != SANDBOX_USER:
                os.chown(workdir, SANDBOX_USER, SANDBOX_USER)  # the sandbox user writes here
            read_only = tuple(Path(os.path.realpath(p)) for p in jail.read_only)
            work = WorkArea(workdir, (jail.disk_mb or isolation.disk_mb) * 2**20)
            argv = bwrap_argv(
                isolation.bwrap,
                isolation.mode,
                workdir=workdir,
                read_only=read_only,
                network=jail.network,
                tmp_bytes=jail.tmp_mb * 2**20,
                work_bytes=work.cap,
                seed=work.seeded,
            )
            argv += bootstrap_argv(
                command,
                nproc=nproc,
                memory_mb=jail.memory_mb,
                timeout=jail.timeout,
                mode=isolation.mode,
                cwd=cwd,
                handoff=work.handoff,
                workdir=workdir,
                seed=SEED if work.seeded else None,
            )
            environment["TMPDIR"] = "/tmp"
        else:
            tmpdir = Path(tempfile.mkdtemp(prefix=".tmp-", dir=workdir))
            environment["TMPDIR"] = str(tmpdir)
            argv = bootstrap_argv(
                command, nproc=_unconfined_nproc(nproc), memory_mb=jail.memory_mb, timeout=jail.timeout, mode=None
            )
        budget = isolation.budget(jail.total_memory_mb, jail.max_processes)
        if jail.max_processes is None and jail.nproc > budget.processes:
            budget = replace(budget, processes=jail.nproc)
        try:
            # The jail's tmpfs pages (its work directory and /tmp) are charged to its cgroup: they have
            # caps of their own, so the group holds them on top of the memory budget of its processes.
            files = work.cap + jail.tmp_mb * 2**20 if work is not None else 0
            group = _group(budget, confined=tmpdir is None, files=files)
        except OSError:
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)
            if work is not None:
                work.discard()
            raise
        gate_fds = os.pipe() if group is not None else None
        if gate_fds is not None:  # it enters its group before it runs anything (`_cgroup.gate`)
            argv = [_SH, "-c", gate(gate_fds[0]), "sh", *argv]
        try:
            process = await anyio.open_process(
                argv,
                cwd=cwd,
                env=environment,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,  # its own process group: one killpg reaches its children
                pass_fds=((work.handoff,) if work is not None else ()) + (gate_fds[:1] if gate_fds else ()),
            )
        except BaseException:  # OSError, or cancelled while starting
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)
            if work is not None:
                work.discard()
            if gate_fds is not None:
                os.close(gate_fds[1])
            if group is not None:
                group.remove()  # empty: at once
            raise
        finally:
            if gate_fds is not None:
                os.close(gate_fds[0])
        if work is not None:
            work.started()
        jailed = cls(process, tmpdir is None, token, tmpdir, group, budget, jail.label, work)
        if group is not None and gate_fds is not None:
            try:  # in a thread: a move between cgroups waits for the kernel (an RCU grace period, ~10 ms)
                await anyio.to_thread.run_sync(group.adopt, process.pid)
                os.write(gate_fds[1], b"go\n")
            except BaseException as exc:  # OSError, or cancelled meanwhile: nothing of it may stay
                os.close(gate_fds[1])
                gate_fds = None
                await jailed.close()
                if isinstance(exc, OSError):
                    raise OSError(exc.errno, f"it could not be put in its cgroup: {exc.strerror}") from None
                raise
            finally:
                if gate_fds is not None:
                    os.close(gate_fds[1])
        return jailed

    def signal(self, returncode: int) -> int | None:
        return exit_signal(returncode, self.confined)

    def kill(self) -> None:
        """SIGKILL everything of the jail at once (its process group and cgroup; the PID namespace follows)."""
        _signal_group(self.process.pid, signal.SIGKILL)
        if self.group is not None:
            self.group.kill()

    async def close(self, grace: float = _GRACE) -> None:
        """Stop the whole jail (SIGTERM, grace, SIGKILL) and reap it, even when cancelled; then copy
        what it left in its work directory to the host's (nothing of a call over its budget).

        Raises:
            LimitExceededError: the call ran into its memory or process budget (not raised
                when the caller is being cancelled: it has no one to tell).
            WorkdirFull: a process that ended by itself had filled its work directory.
        """
        reached = None
        with anyio.CancelScope(shield=True):
            process = self.process
            ended = process.returncode is not None
            if process.returncode is None:
                _signal_group(process.pid, signal.SIGTERM)
                with anyio.move_on_after(grace):
                    await process.wait()
            _signal_group(process.pid, signal.SIGKILL)
            if self.group is not None:
                reached = self.group.reached()
                if not await anyio.to_thread.run_sync(self.group.remove):
                    log.warning("cgroup %s could not be removed yet; the next server removes it", self.group.dirs)
            elif not self.confined:
                await anyio.to_thread.run_sync(_sweep, self._token)
            await process.aclose()
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)  # refuses a symlink planted in its place
            if self._work is not None:
                work, self._work = self._work, None
                if reached is None:
                    await work.bring_back(complain=ended)
                else:  # the call failed over its budget: nothing of it is kept
                    work.discard()
        if reached is not None and self.budget is not None and anyio.current_effective_deadline() != -math.inf:
            raise self.budget.exceeded(reached, self.label)


def _group(budget: Budget, *, confined: bool, files: int = 0) -> CallGroup | None:
    """A cgroup with the call's budget, or None where the host has none to give (rlimits only).

    `files`: bytes of the jail's tmpfs mounts, which have caps of their own; the group holds them
    on top of its processes' memory budget, so a full work directory says so, not "memory".

    Raises:
        OSError: cgroups work here but this one could not be made (the call is not run unbounded).
    """
    found = support()
    if not found.enforced:
        return None
    processes = budget.processes + (_JAIL_PROCESSES if confined else 0)
    try:
        return CallGroup(found, budget.memory_mb * 2**20 + files, processes)
    except OSError as exc:
        raise OSError(exc.errno, f"its cgroup (memory and process budget) could not be made: {exc.strerror}") from None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already empty


def _sweep(token: str) -> None:
    """Kill what left the process group (setsid) but still carries the jail's token (unconfined)."""
    marker = f"{_TOKEN}={token}".encode()
    uid = os.getuid()
    for entry in _proc_entries(uid):
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if marker not in handle.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read


def _unconfined_nproc(extra: int) -> int | None:
    """RLIMIT_NPROC for a process without a user namespace of its own, or None to leave it.

    There the kernel counts every thread of the user, not the call's: the limit is what the
    user runs now plus `extra`. Root is not limited by it at all, and without /proc (macOS) the
    count is unknown, so the limit is left as it is there.
    """
    uid = os.getuid()
    if uid == 0 or not os.path.isdir("/proc/self/task"):
        return None
    threads = 0
    for pid in _proc_entries(uid):
        try:
            threads += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue  # gone meanwhile
    return threads + extra


def _proc_entries(uid: int) -> list[str]:
    try:
        entries = os.scandir("/proc")
    except OSError:
        return []
    with entries:
        found: list[str] = []
        for entry in entries:
            try:
                if entry.name.isdigit() and entry.stat().st_uid == uid:
                    found.append(entry.name)
            except OSError:
                continue
        return found
