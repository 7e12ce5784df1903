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

Either way the bootstrap (`skills.executors._bootstrap`) sets the resource limits before the program
starts.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process

from ._bootstrap import PYTHON, RUN_PYTHON, SANDBOX_USER, bootstrap_argv, exit_signal
from ._bwrap import SEED, bwrap_argv
from ._workdir import WorkArea
from .isolation import Isolation

__all__ = ["PYTHON", "RUN_PYTHON", "SYSTEM_PATH", "Jail", "Jailed", "bootstrap_argv", "exit_signal"]

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_GRACE = 1.0  # seconds between SIGTERM and SIGKILL: time for the process to clean up
_TOKEN = "ORCHESTRATOR_JAIL"


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


class Jailed:
    """A running jailed process; `close()` stops whatever is left of it and cleans up."""

    def __init__(
        self, process: Process, confined: bool, token: str, tmpdir: Path | None, work: WorkArea | None = None
    ) -> None:
        self.process, self.confined, self._token, self._tmpdir = process, confined, token, tmpdir
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
            OSError: the work directory or the process could not be made.
        """
        workdir = jail.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        workdir = workdir.resolve()
        cwd = Path(os.path.realpath(jail.cwd)) if jail.cwd else workdir
        token = secrets.token_hex(8)
        environment = {**env, "HOME": str(workdir), _TOKEN: token}
        tmpdir = work = None
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
                nproc=jail.nproc,
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
                command, nproc=_unconfined_nproc(jail.nproc), memory_mb=jail.memory_mb, timeout=jail.timeout, mode=None
            )
        try:
            process = await anyio.open_process(
                argv,
                cwd=cwd,
                env=environment,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,  # its own process group: one killpg reaches its children
                pass_fds=(work.handoff,) if work is not None else (),
            )
        except OSError:
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)
            if work is not None:
                work.discard()
            raise
        if work is not None:
            work.started()
        return cls(process, tmpdir is None, token, tmpdir, work)

    def signal(self, returncode: int) -> int | None:
        return exit_signal(returncode, self.confined)

    def kill(self) -> None:
        """SIGKILL everything of the jail at once (its process group; the PID namespace follows)."""
        _signal_group(self.process.pid, signal.SIGKILL)

    async def close(self, grace: float = _GRACE) -> None:
        """Stop the whole jail (SIGTERM, grace, SIGKILL) and reap it, even when cancelled; then copy
        what it left in its work directory to the host's.

        Raises:
            WorkdirFull: a process that ended by itself had filled its work directory.
        """
        with anyio.CancelScope(shield=True):
            process = self.process
            ended = process.returncode is not None
            if process.returncode is None:
                _signal_group(process.pid, signal.SIGTERM)
                with anyio.move_on_after(grace):
                    await process.wait()
            _signal_group(process.pid, signal.SIGKILL)
            if not self.confined:
                await anyio.to_thread.run_sync(_sweep, self._token)
            await process.aclose()
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)  # refuses a symlink planted in its place
            if self._work is not None:
                work, self._work = self._work, None
                await work.bring_back(complain=ended)


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
