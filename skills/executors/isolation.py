"""Whether the subprocesses of skills can be confined here, and the home's isolation settings.

Confinement uses bubblewrap (`bwrap`, Linux). Whether it works is not guessed from the
platform: a real `bwrap ... true` with the flags every jail uses is run once per bwrap program
and user, and the answer (with the reason when it failed) is cached for the process. Where it
does not work the product still runs, unconfined, and says so: at start-up, in
`orchestrator doctor`, in `skills show`, and `create_skill` refuses to test or publish a skill
unless `allow_unconfined` is set.

Settings live in `<home>/config.yaml` under `isolation:`:

```yaml
isolation:
  bwrap: /usr/bin/bwrap       # default: `bwrap` on PATH
  allow_unconfined: false     # true lets create_skill test and publish without confinement
  disk_mb: 1024               # size of a confined call's work directory (skill.yaml `disk_mb` overrides)
  total_memory_mb: 1024       # one call's processes together (a cgroup); a skill may ask for less
  max_processes: 64           # one call's processes and threads at once; a skill may ask for less
```

The per-call budgets are enforced by the kernel where a cgroup can be made for each call
(`skills.executors._cgroup`; `budget_support` says whether and how), else only the rlimits of
each process apply.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..core.errors import LimitExceededError
from ..core.yamltext import YAMLError, load_yaml
from ._cgroup import BudgetSupport, support

if TYPE_CHECKING:
    from ..core.base import Skill
    from ._bwrap import BwrapMode

__all__ = [
    "UNCONFINED",
    "Budget",
    "BudgetSupport",
    "Isolation",
    "IsolationSettings",
    "budget_support",
    "confinement_of",
    "isolation_of",
    "load_settings",
    "probe",
]

log = logging.getLogger("skills.isolation")

_PROBE_TIMEOUT = 20.0


class IsolationSettings(BaseModel):
    """The `isolation:` block of `<home>/config.yaml`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bwrap: str | None = None
    """Path (or name on PATH) of the bubblewrap program; default `bwrap` on PATH."""
    allow_unconfined: bool = False
    """Let `create_skill` test and publish model-written skills where no confinement is
    available (their code then runs with the server's rights). Off by default."""
    disk_mb: int = Field(default=1024, ge=1, le=65536)
    """MiB a confined call may write into its work directory (a tmpfs) when its skill.yaml says
    no `disk_mb`; past it its writes fail (ENOSPC) and the call fails keeping nothing."""
    total_memory_mb: int = Field(default=1024, ge=16, le=1_048_576)
    """Memory (MiB) one call of a script skill, `run-tests` or `shell-command` may use with all
    its processes together; past it the kernel stops the call and it fails with
    `limit_exceeded`. A skill's `total_memory_mb:` may ask for less, never for more."""
    max_processes: int = Field(default=64, ge=4, le=65_536)
    """Processes (and threads) one such call may run at once; past it `fork()` fails and the
    call fails with `limit_exceeded`. A skill's `max_processes:` may ask for fewer, never more."""


@dataclass(frozen=True)
class Isolation:
    """What confinement this server can give a subprocess, and why not when it cannot."""

    available: bool
    reason: str
    """Why not (available: how: the bwrap version and mode)."""
    bwrap: str | None = None
    version: str | None = None
    mode: BwrapMode | None = None
    allow_unconfined: bool = False
    disk_mb: int = 1024
    """Size of a confined call's work directory unless its skill says (`IsolationSettings.disk_mb`)."""
    total_memory_mb: int = 1024
    """The server's per-call memory budget (`IsolationSettings.total_memory_mb`)."""
    max_processes: int = 64
    """The server's per-call process budget (`IsolationSettings.max_processes`)."""

    def budget(self, memory_mb: int | None = None, processes: int | None = None) -> Budget:
        """The budget of a call whose skill asks for `memory_mb` and `processes` (None: the
        server's): what it asks, but never more than the server allows."""
        return Budget(
            min(memory_mb or self.total_memory_mb, self.total_memory_mb),
            min(processes or self.max_processes, self.max_processes),
            server_memory_mb=self.total_memory_mb,
            server_processes=self.max_processes,
        )

    def summary(self) -> str:
        if self.available:
            return f"bubblewrap {self.version or ''} ({self.bwrap}, {self.mode} mode)".replace("  ", " ")
        return f"unavailable: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "bwrap": self.bwrap,
            "version": self.version,
            "mode": self.mode,
            "allow_unconfined": self.allow_unconfined,
            "disk_mb": self.disk_mb,
            "total_memory_mb": self.total_memory_mb,
            "max_processes": self.max_processes,
        }


@dataclass(frozen=True)
class Budget:
    """What one call may use with all its processes together (`Isolation.budget`)."""

    memory_mb: int
    processes: int
    server_memory_mb: int
    """The server's ceiling, for the hint of a call that reached its budget."""
    server_processes: int

    def exceeded(self, what: Literal["memory", "processes"], label: str) -> LimitExceededError:
        """The error of a call that ran into its `what` budget: which one, and how to raise it."""
        if what == "memory":
            field, asked, ceiling = "total_memory_mb", self.memory_mb, self.server_memory_mb
            message = (
                f"{label} went over its memory budget of {asked} MiB for all its processes together "
                "and was stopped by the kernel"
            )
        else:
            field, asked, ceiling = "max_processes", self.processes, self.server_processes
            message = (
                f"{label} tried to run more than {asked} processes at once (its process budget); "
                "the kernel refused the rest"
            )
        if asked < ceiling:
            hint = f"raise `{field}:` in the skill's skill.yaml (up to {ceiling}, the server's limit)"
        elif asked == ceiling:
            hint = f"the server's limit applies: raise `isolation: {field}:` in the home's config.yaml (now {ceiling})"
        else:
            hint = "that is this built-in skill's own limit"
        return LimitExceededError(message, limit=field, hint=hint + ", or make it use less")


def budget_support(*, prepare: bool = True) -> BudgetSupport:
    """How per-call budgets are enforced here: a cgroup v2 or v1 per call, or only rlimits (and why).

    `prepare=False` only looks (`orchestrator doctor`): see `skills.executors._cgroup.support`.
    """
    return support(prepare=prepare)


UNCONFINED = Isolation(False, "confinement was not asked for")
"""Run without a jail (tests of the unconfined path; never chosen silently by the product)."""


def load_settings(home_root: Path) -> IsolationSettings:
    """The home's isolation settings; a broken config.yaml is logged and the defaults are used."""
    path = home_root / "config.yaml"
    try:
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
        block = data.get("isolation") if isinstance(data, dict) else None
        return IsolationSettings.model_validate(block or {})
    except FileNotFoundError:
        return IsolationSettings()
    except (OSError, YAMLError, ValidationError) as exc:
        log.error("%s: isolation: is not valid, using the defaults (confined, no unconfined creation): %s", path, exc)
        return IsolationSettings()


_CACHE: dict[tuple[str, int], Isolation] = {}
_LOCK = threading.Lock()


def probe(settings: IsolationSettings | None = None) -> Isolation:
    """Whether confinement works here (cached per bwrap program and user; blocks on the first call)."""
    import shutil

    settings = settings or IsolationSettings()
    wanted = settings.bwrap or "bwrap"
    found = shutil.which(wanted)
    if found is None:
        why = (
            f"the configured bwrap '{wanted}' is not an executable program"
            if settings.bwrap
            else "bubblewrap (bwrap) is not installed; on Debian/Ubuntu: apt-get install bubblewrap"
        )
        if sys.platform != "linux":
            why = f"confinement needs Linux namespaces (bubblewrap); this is {sys.platform}"
        return _with(Isolation(False, why), settings)
    key = (os.path.realpath(found), os.geteuid())
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = _run_probe(found)
            result = _CACHE[key]
            log.debug("isolation probe of %s: %s", found, result.summary())
    return _with(_CACHE[key], settings)


def _with(found: Isolation, settings: IsolationSettings) -> Isolation:
    """What was probed, with the home's settings that are not probed."""
    return replace(
        found,
        allow_unconfined=settings.allow_unconfined,
        disk_mb=settings.disk_mb,
        total_memory_mb=settings.total_memory_mb,
        max_processes=settings.max_processes,
    )


def isolation_of(extras: dict[str, Any]) -> Isolation:
    """The isolation of a call: the server's settings (`ctx.extras["isolation"]`, plain data), probed."""
    settings = extras.get("isolation")
    if isinstance(settings, dict):
        try:
            settings = IsolationSettings.model_validate(settings)
        except ValidationError:
            settings = None  # not ours: the defaults (confined where possible, no unconfined creation)
    return probe(settings if isinstance(settings, IsolationSettings) else None)


_STARTS_PROGRAMS = frozenset({"run-tests", "shell-command"})
_READS_FILES = frozenset({"read-file", "list-files", "diff-files", "text-stats", "code-analyzer", "json-query"})


def confinement_of(skill: Skill, isolation: Isolation) -> str:
    """One line saying how `skill` will be confined here (for `skills show`)."""
    contract = getattr(skill, "contract", None)
    network = bool(getattr(contract, "network", False))
    jail = (
        f"confined by bubblewrap ({isolation.mode} mode): "
        + ("network shared with the host" if network else "no network")
        + ", read-only system, writes only its work directory, private /tmp, own PID namespace, rlimits"
        if isolation.available
        else f"UNCONFINED ({isolation.reason}): the server's file and network access, "
        "only a scrubbed environment and rlimits"
    )
    budget = isolation.budget(getattr(contract, "total_memory_mb", None), getattr(contract, "max_processes", None))
    found = budget_support(prepare=False)  # `skills show` only looks
    jail += (
        f"; per call at most {budget.memory_mb} MiB and {budget.processes} processes in total ({found.summary()})"
        if found.enforced
        else f"; no per-call total of memory or processes ({found.detail})"
    )
    builtin = skill.source == "builtin"
    if skill.kind == "script":
        return jail
    if skill.kind == "python" and builtin and skill.name in _STARTS_PROGRAMS:
        return f"in-process (built-in); the programs it runs: {jail}; paths only inside the allowed roots"
    if skill.kind == "python" and builtin and skill.name in _READS_FILES:
        return "in-process (built-in); reads files only inside the allowed roots, never /proc, /sys, /dev or secrets"
    if skill.kind == "python":
        return "in-process, not confined: python skills are trusted code with the server's rights"
    return (
        "no code of its own runs here ("
        + {
            "instructions": "it returns instructions",
            "prompt": "a model answers it",
            "agent": "a model calls other skills, each confined as itself",
            "pipeline": "it calls other skills, each confined as itself",
            "remote": "it runs in an upstream MCP server",
        }.get(skill.kind, skill.kind)
        + ")"
    )


def _run_probe(bwrap: str) -> Isolation:
    """Run a real jail around `true`, with the bootstrap every confined process goes through."""
    import subprocess
    import tempfile

    from ._bootstrap import SANDBOX_USER, bootstrap_argv
    from ._bwrap import bwrap_argv

    mode: BwrapMode = "root" if os.geteuid() == 0 else "userns"
    version = _version(bwrap)
    shown = ".".join(map(str, version)) if version else None
    if version is not None and version < (0, 8):  # --perms and --size of tmpfs, --disable-userns
        why = f"{bwrap} is bubblewrap {shown}; confinement needs 0.8 or later"
        return Isolation(False, why, bwrap=bwrap, version=shown)
    with tempfile.TemporaryDirectory(prefix="orchestrator-probe-") as work:
        workdir = Path(work).resolve()
        if mode == "root":
            os.chown(workdir, SANDBOX_USER, SANDBOX_USER)
        argv = bwrap_argv(bwrap, mode, workdir=workdir, tmp_bytes=2**20)
        argv += bootstrap_argv(
            ["/bin/sh", "-c", "exit 0"], nproc=16, memory_mb=None, timeout=None, mode=mode, cwd=workdir
        )
        try:
            done = subprocess.run(
                argv, capture_output=True, timeout=_PROBE_TIMEOUT, env={"PATH": "/usr/bin:/bin"}, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Isolation(False, f"{bwrap} could not be run: {exc}", bwrap=bwrap, version=shown)
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        detail = said[-1] if said else f"exit status {done.returncode}"
        hint = " (user namespaces may be disabled here, e.g. in a container without them)"
        return Isolation(False, f"{bwrap} does not work here: {detail[:300]}{hint}", bwrap=bwrap, version=shown)
    return Isolation(True, f"{mode} mode", bwrap=bwrap, version=shown, mode=mode)


def _version(bwrap: str) -> tuple[int, ...] | None:
    import subprocess

    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=_PROBE_TIMEOUT).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.split()
    try:
        return tuple(int(x) for x in words[-1].split(".")) if words else None
    except ValueError:
        return None
