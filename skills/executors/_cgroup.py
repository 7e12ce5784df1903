"""Per-call budgets the kernel enforces: one cgroup per confined call, for its memory and its
number of processes in total (everything it starts, `setsid` and double forks included).

The rlimits of `skills.executors._bootstrap` bound each process: a script that forks 63
children of 480 MB, each under its `memory_mb`, still fills a 4 GB machine and the kernel's
out-of-memory killer takes the server. A cgroup bounds them together: past the memory budget
the out-of-memory killer stops a process of that call (never one outside it); past the
process budget `fork()` fails. `skills.executors.confine` then fails the call with a
`limit_exceeded` error that names the budget.

Where the groups are made (`support`, probed once per process):

- cgroup v2 (the unified hierarchy; most hosts today): beside the server, in its own cgroup,
  when that cgroup is delegated to it (`systemd-run --user --scope -p Delegate=yes orchestrator
  serve`, a systemd unit with `Delegate=yes`, or a container that owns its cgroup namespace).
  The "no internal processes" rule of v2 wants the server's processes in a leaf: they move
  once into `<own cgroup>/orchestrator-server`, then the memory and pids controllers are
  handed down to the call groups.
- cgroup v1 (hybrid hosts): under the server's own cgroup of the memory and the pids
  hierarchies, where this user may write there (root, usually).
- Neither: only the rlimits, and `orchestrator doctor` says so and why.

A call's first process enters its group before it runs anything (`Jailed.open` starts it as a
tiny `sh` that waits on a pipe until its pid is written into the group, then execs the jail),
and its descendants inherit the group. When the call ends, times out or is cancelled, every
member is killed and the group removed; groups left by a server that died are removed by the
next server that probes the same parent.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["BudgetSupport", "CallGroup", "Mechanism", "Reached", "gate", "support"]

Mechanism = Literal["cgroup2", "cgroup1", "rlimits"]
Reached = Literal["memory", "processes"]


def gate(fd: int) -> str:
    """`sh -c gate(fd) sh PROGRAM...`: wait for a line on the pipe `fd` (the server has put this
    process in its call group), then become PROGRAM; a server gone before that leaves the program
    unstarted. dash redirects single-digit descriptors only, hence the pipe's /proc path; the
    descriptor itself is closed by the bootstrap (`skills.executors._bootstrap`)."""
    return f'read -r _ < /proc/self/fd/{fd} || exit 125; exec "$@"'


_NEEDED = ("memory", "pids")
_PREFIX = "orchestrator-"
_CALL = re.compile(r"^orchestrator-(\d+)-\d+$")
_SERVER_LEAF = "orchestrator-server"
_REMOVE_WITHIN = 5.0  # seconds to empty and remove a group before leaving it to the next sweep
_SETUP = "systemd-run --user --scope -p Delegate=yes orchestrator serve"


@dataclass(frozen=True)
class BudgetSupport:
    """How this process can bound a call's memory and processes in total, and why not when it cannot."""

    mechanism: Mechanism
    detail: str
    """cgroups: where the call groups go; rlimits: why no cgroup can be used here."""
    parents: tuple[Path, ...] = ()
    """The cgroup directories the call groups are made in (v2: one; v1: memory, pids)."""

    @property
    def enforced(self) -> bool:
        return self.mechanism != "rlimits"

    def summary(self) -> str:
        if self.mechanism == "cgroup2":
            return f"cgroup v2 ({self.detail})"
        if self.mechanism == "cgroup1":
            return f"cgroup v1 ({self.detail})"
        return f"rlimits only, no per-call total ({self.detail})"


_cache: dict[bool, BudgetSupport] = {}
_lock = threading.Lock()


def support(*, prepare: bool = True) -> BudgetSupport:
    """Whether and where call groups can be made here (probed once per process, for real).

    `prepare=False` (`orchestrator doctor`) only looks: on cgroup v2 it does not move this
    process into a leaf, it says whether a server started like this one could.
    """
    with _lock:
        found = _cache.get(prepare)
        if found is None:
            found = _cache[prepare] = _detect(prepare)
        return found


class CallGroup:
    """The cgroup of one call: made with its limits, members added before they run, removed at the end."""

    _names = itertools.count(1)

    def __init__(self, found: BudgetSupport, memory_bytes: int, processes: int) -> None:
        """Make the group with these limits.

        Raises:
            OSError: the group could not be made or limited (it is not left behind).
        """
        assert found.enforced
        self.version = 2 if found.mechanism == "cgroup2" else 1
        name = f"{_PREFIX}{os.getpid()}-{next(self._names)}"
        self.dirs = tuple(parent / name for parent in found.parents)
        made: list[Path] = []
        try:
            for folder in self.dirs:
                folder.mkdir()
                made.append(folder)
            self._limit(memory_bytes, processes)
        except OSError:
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise

    def _limit(self, memory_bytes: int, processes: int) -> None:
        if self.version == 2:
            group = self.dirs[0]
            _write(group / "memory.max", str(memory_bytes))
            _write_if_there(group / "memory.swap.max", "0")  # swap would stretch the budget
            _write_if_there(group / "memory.oom.group", "1")  # over budget, the whole call stops
            _write(group / "pids.max", str(processes))
        else:
            memory, pids = self.dirs
            _write(memory / "memory.limit_in_bytes", str(memory_bytes))
            _write_if_there(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))  # with swap accounting
            _write(pids / "pids.max", str(processes))

    def adopt(self, pid: int) -> None:
        """Put process `pid` (not yet running the call's program) in the group.

        Raises:
            OSError: it could not be moved.
        """
        for folder in self.dirs:
            _write(folder / "cgroup.procs", str(pid))

    def members(self) -> set[int]:
        return _pids_of(self.dirs)

    def kill(self) -> None:
        """SIGKILL every member now (the kernel's `cgroup.kill` where there is one)."""
        _kill_all(self.dirs)

    def reached(self) -> Reached | None:
        """Which budget the call ran into, if any (memory first: it is the one that kills)."""
        if self.version == 2:
            memory = _counters(self.dirs[0] / "memory.events")
            if memory.get("oom_kill") or memory.get("oom_group_kill"):
                return "memory"
            return "processes" if _counters(self.dirs[0] / "pids.events").get("max") else None
        control = _counters(self.dirs[0] / "memory.oom_control")
        if control.get("oom_kill") or ("oom_kill" not in control and _counters_of_file(self.dirs[0], "failcnt")):
            return "memory"
        return "processes" if _counters(self.dirs[1] / "pids.events").get("max") else None

    def remove(self) -> bool:
        """Kill what is left and remove the group (blocking: run it in a thread); False if it
        could not be removed in time (a process stuck in the kernel): the next sweep takes it."""
        return _empty_and_remove(self.dirs)


def _detect(prepare: bool) -> BudgetSupport:
    if sys.platform != "linux":
        return BudgetSupport("rlimits", f"cgroups are Linux's; this is {sys.platform}")
    try:
        own = own_cgroups(Path("/proc/self/cgroup").read_text())
        mounts = cgroup_mounts(Path("/proc/self/mountinfo").read_text())
    except OSError as exc:
        return BudgetSupport("rlimits", f"cannot read this process's cgroups: {exc.strerror}")
    reasons: list[str] = []
    unified = next((m for m in mounts if m.kind == "cgroup2"), None)
    if unified is not None and "" in own:
        base = unified.inside(own[""])
        parent, why = _prepare_v2(base, at_root=own[""] == "/", move=prepare)
        if parent is not None:
            return _checked("cgroup2", (parent,), f"call groups in {parent}", trial=prepare)
        reasons.append(why)
    v1 = {name: m for m in mounts if m.kind == "cgroup" for name in m.controllers if name in _NEEDED}
    missing = [name for name in _NEEDED if name not in v1 or name not in own]
    if not missing:
        dirs = tuple(v1[name].inside(own[name]) for name in _NEEDED)
        unwritable = [str(d) for d in dirs if not os.access(d, os.W_OK | os.X_OK)]
        if not unwritable:
            shown = ", ".join(f"{name}: {d}" for name, d in zip(_NEEDED, dirs, strict=True))
            return _checked("cgroup1", dirs, shown, trial=True)
        reasons.append(f"cgroup v1: this user may not make cgroups in {', '.join(unwritable)}")
    elif v1:
        reasons.append(f"cgroup v1 has no {' or '.join(missing)} controller here")
    if not reasons:
        reasons.append("no cgroup file system is mounted")
    return BudgetSupport("rlimits", "; ".join(reasons))


def _checked(mechanism: Mechanism, parents: tuple[Path, ...], detail: str, *, trial: bool) -> BudgetSupport:
    """Sweep the groups of dead servers, then make and remove a real one: support is never guessed."""
    found = BudgetSupport(mechanism, detail, parents)
    for parent in parents:
        _sweep(parent)
    if trial:
        try:
            group = CallGroup(found, 64 * 2**20, 8)
        except OSError as exc:
            return BudgetSupport("rlimits", f"{found.summary()}: a call group cannot be made: {exc.strerror or exc}")
        group.remove()
    return found


def _prepare_v2(base: Path, *, at_root: bool, move: bool) -> tuple[Path | None, str]:
    """The directory to make call groups in under cgroup v2, or None and why not (module doc)."""
    try:
        available = base.joinpath("cgroup.controllers").read_text().split()
        enabled = base.joinpath("cgroup.subtree_control").read_text().split()
    except OSError as exc:
        return None, f"cgroup v2: cannot read {base}: {exc.strerror}"
    missing = [name for name in _NEEDED if name not in available]
    if missing:
        have = " ".join(available) or "none"
        return None, f"cgroup v2: {base} has no {' or '.join(missing)} controller to hand down (it has: {have})"
    if all(name in enabled for name in _NEEDED):
        return base, ""  # handed down already (the root cgroup, or prepared by this server)
    if not _delegated(base, at_root):
        return None, (
            f"cgroup v2: {base} is not delegated to this server; start it in a cgroup of its own: "
            f"`{_SETUP}` (as root: without --user)"
        )
    leaf = base / _SERVER_LEAF
    for _ in range(20):  # a process started meanwhile lands in `base` again: move it too
        strangers = [pid for pid in _pids(base / "cgroup.procs") if not _ours(pid)]
        if strangers:
            return None, (
                f"cgroup v2: {base} also holds processes that are not this server's (pid {strangers[0]}); "
                f"start the server in a cgroup of its own: `{_SETUP}`"
            )
        if not move:
            return base, ""
        try:
            leaf.mkdir(exist_ok=True)
            for pid in _pids(base / "cgroup.procs"):
                with contextlib.suppress(ProcessLookupError):
                    _write(leaf / "cgroup.procs", str(pid))
            _write(base / "cgroup.subtree_control", " ".join(f"+{name}" for name in _NEEDED))
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                continue
            return None, f"cgroup v2: cannot hand the memory and pids controllers down in {base}: {exc.strerror}"
        return base, ""
    return None, f"cgroup v2: processes kept arriving in {base} while this server moved into a leaf"


def _delegated(base: Path, at_root: bool) -> bool:
    """Whether `base` is this server's to divide: writable by a user (systemd hands a delegated
    subtree to its user), marked delegated by systemd (root), or the root of this process's own
    cgroup namespace (a container)."""
    writable = all(os.access(base / name, os.W_OK) for name in ("cgroup.procs", "cgroup.subtree_control"))
    if not writable:
        return False
    if os.geteuid() != 0 or at_root:
        return True
    for attribute in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            if os.getxattr(base, attribute).strip() == b"1":
                return True
    return False


def _ours(pid: int) -> bool:
    """This process or one of its descendants."""
    me = os.getpid()
    for _ in range(64):
        if pid == me:
            return True
        if pid <= 1:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return True  # gone meanwhile: nothing to move
        pid = int(stat.rsplit(b")", 1)[1].split()[1])
    return False


def _sweep(parent: Path) -> None:
    """Remove the call groups of servers that are gone (killed before they could clean up)."""
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for entry in entries:
        match = _CALL.match(entry.name)
        if match is None or int(match[1]) == os.getpid() or _alive(int(match[1])):
            continue
        _empty_and_remove((entry,))


def _kill_all(dirs: tuple[Path, ...]) -> None:
    for folder in dirs:
        with contextlib.suppress(OSError):
            _write(folder / "cgroup.kill", "1")  # v2 (Linux 5.14+): every member at once, forks included
            return
    for pid in _pids_of(dirs):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _empty_and_remove(dirs: tuple[Path, ...]) -> bool:
    deadline = time.monotonic() + _REMOVE_WITHIN
    pause = 0.001
    while True:
        _kill_all(dirs)
        left = [d for d in dirs if d.exists()]
        for folder in left:
            with contextlib.suppress(FileNotFoundError):
                try:
                    folder.rmdir()
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        return False
        if not any(d.exists() for d in dirs):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)  # the killed members are still exiting; the kernel sends no event for it
        pause = min(pause * 2, 0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class CgroupMount:
    """A mounted cgroup hierarchy (a line of /proc/self/mountinfo)."""

    kind: Literal["cgroup", "cgroup2"]
    root: str
    """The cgroup of the hierarchy that is mounted at `point` (`/` but in some containers)."""
    point: Path
    controllers: frozenset[str]
    """v1: the controllers of this hierarchy; v2: empty (see cgroup.controllers)."""

    def inside(self, path: str) -> Path:
        """The directory of cgroup `path` (as /proc/self/cgroup names it) under this mount."""
        root = self.root.rstrip("/")
        relative = path[len(root) :] if root and (path == root or path.startswith(root + "/")) else path
        return self.point.joinpath(relative.lstrip("/"))


def cgroup_mounts(mountinfo: str) -> list[CgroupMount]:
    """The cgroup hierarchies of /proc/self/mountinfo, in order."""
    found: list[CgroupMount] = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = tail[2].split(",") if len(tail) > 2 else []
        controllers = frozenset(options) if tail[0] == "cgroup" else frozenset[str]()
        kind: Literal["cgroup", "cgroup2"] = "cgroup" if tail[0] == "cgroup" else "cgroup2"
        found.append(CgroupMount(kind, _unescape(fields[3]), Path(_unescape(fields[4])), controllers))
    return found


def own_cgroups(text: str) -> dict[str, str]:
    """/proc/self/cgroup as controller -> cgroup path; "" is the unified (v2) hierarchy."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        names, path = parts[1], parts[2]
        if not names:
            found[""] = path
        for name in names.split(","):
            if name:
                found[name] = path
    return found


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _write_if_there(path: Path, text: str) -> None:
    try:
        _write(path, text)
    except FileNotFoundError:
        pass  # an older kernel, or no swap accounting: nothing to limit there


def _pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()]


def _pids_of(dirs: tuple[Path, ...]) -> set[int]:
    found: set[int] = set()
    for folder in dirs:
        with contextlib.suppress(OSError):
            found.update(_pids(folder / "cgroup.procs"))
    return found


def _counters(path: Path) -> dict[str, int]:
    """A flat-keyed cgroup file (`name value` per line) as numbers; {} if it cannot be read."""
    found: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                found[key] = int(value)
    return found


def _counters_of_file(folder: Path, name: str) -> int:
    """A single-number v1 memory file (`memory.failcnt`): an old kernel's sign of the limit reached."""
    try:
        return int(folder.joinpath(f"memory.{name}").read_text())
    except (OSError, ValueError):
        return 0
