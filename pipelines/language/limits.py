"""Run limits: how much work, data and time one pipeline run may take.

A pipeline that passes verification can still ask for a lot: a nested `for` of 1000 x 1000
items is a million skill calls and as many checkpoints. These limits bound every run, whoever
registered the pipeline. The server's limits come from the home's `config.yaml`:

    runs:
      max_steps: 100000          # skill calls and loop iterations of one run (nested pipelines included)
      max_loop_items: 50000      # items of one `for`
      max_state_bytes: 100MB     # step outputs and state values a run stores (JSON size)
      max_artifact_bytes: 1GB    # files a run's steps leave in its artifact directory
      max_wall_time: 24h         # one attempt of a run (start or resume)
      max_agent_tokens: 2000000  # tokens all agents of a run spend together (skills.core.budget)
      max_agent_cost_usd: 5      # dollars all agents of a run spend together
      max_agent_time: 1h         # (no default) seconds after which no agent of the run takes a turn

A pipeline's own `limits:` (same keys) and `timeout:` may only lower them: the effective limit
is the smaller of each pair, so a client registering a pipeline cannot raise them.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

if TYPE_CHECKING:
    from ..errors import RunLimitExceeded

__all__ = [
    "BUDGET_KEY",
    "DEFAULT_LIMITS",
    "Budget",
    "LimitName",
    "RunLimits",
    "ServerLimits",
    "artifact_bytes",
    "parse_bytes",
    "parse_duration",
]

log = logging.getLogger("pipelines.limits")

BUDGET_KEY = "run_budget"
"""Where a step's call finds its run's `Budget` in `ctx.extras` (a pipeline called as a step shares it)."""

LimitName = Literal["max_steps", "max_loop_items", "max_state_bytes", "max_wall_time", "max_artifact_bytes"]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: Any) -> int:
    """`100MB`, `64 KiB`, `5000` (bytes) -> bytes."""
    return int(_parse(value, _UNITS, "a size: write it like 100MB, 64KiB or 65536 (bytes)"))


def parse_duration(value: Any) -> float:
    """`90s`, `30m`, `12h`, `7d`, `2w`, `600` (seconds) -> seconds."""
    return _parse(value, _SECONDS, "a duration: write it like 90s, 30m, 12h, 7d or 600 (seconds)")


def _parse(value: Any, units: dict[str, int], what: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"'{value}' is not {what}")
    if isinstance(value, int | float):
        return float(value)
    match = _SIZE.match(str(value))
    unit = match[2].lower() if match else None
    if match is None or unit not in units:
        raise ValueError(f"'{value}' is not {what}")
    return float(match[1]) * units[unit]


class RunLimits(BaseModel):
    """Limits of one run; a limit left out is not bounded at this level."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int | None = Field(default=None, ge=1)
    """Skill and agent calls plus iterations of loops with nested steps, over the whole run
    (the runs of pipelines it calls count towards it too)."""
    max_loop_items: int | None = Field(default=None, ge=1)
    """Items one `for` step may loop over."""
    max_state_bytes: int | None = Field(default=None, ge=1)
    """Bytes of data (JSON) the run stores: its inputs, every step's output (each loop item's
    too) and every state assignment. Accepts sizes like `10MB`."""
    max_wall_time: float | None = Field(default=None, gt=0)
    """Seconds one attempt of the run (a start or a resume) may take. Accepts `30m`, `2h`."""
    max_artifact_bytes: int | None = Field(default=None, ge=1)
    """Bytes of files the run's steps may leave in its artifact directory
    (`pipelines/<id>/runs/<run>/`), measured after each step: the step that passes it fails the
    run. Accepts sizes like `500MB`."""
    max_agent_tokens: int | None = Field(default=None, ge=1)
    """Tokens all agents of the run may spend together (parallel ones and those of the
    pipelines it calls included); each stops with `budget_exceeded` once they are spent."""
    max_agent_cost_usd: float | None = Field(default=None, gt=0)
    """US dollars all agents of the run may spend together (prices of models/registry.yaml)."""
    max_agent_time: float | None = Field(default=None, gt=0)
    """Seconds from the run's start (each attempt) after which no agent of it takes another
    turn. Accepts `30m`, `2h`."""

    @field_validator("max_state_bytes", "max_artifact_bytes", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return None if value is None else parse_bytes(value)

    @field_validator("max_wall_time", "max_agent_time", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    def within(self, other: RunLimits | None, *, timeout: float | None = None) -> RunLimits:
        """These limits lowered by `other` (a pipeline's `limits:`) and a pipeline's `timeout:`."""
        mine, theirs = self.model_dump(), other.model_dump() if other is not None else {}
        if timeout is not None:
            theirs["max_wall_time"] = min(timeout, theirs.get("max_wall_time") or timeout)
        merged = {k: min((v for v in (mine[k], theirs.get(k)) if v is not None), default=None) for k in mine}
        return RunLimits(**merged)


DEFAULT_LIMITS = RunLimits(
    max_steps=100_000,
    max_loop_items=50_000,
    max_state_bytes=100 * 10**6,
    max_wall_time=86_400,
    max_artifact_bytes=10**9,
    max_agent_tokens=2_000_000,
    max_agent_cost_usd=5.0,
)
"""The server's limits when `config.yaml` says nothing (`runs:` keys override them one by one)."""


class ServerLimits:
    """The server's run limits: `runs:` of `<home>/config.yaml` over the defaults, re-read when the file changes.

    A broken file is an ERROR in the log naming the file and the key, and the defaults apply:
    the server keeps serving.
    """

    def __init__(self, file: Path) -> None:
        self.file = file
        self._stamp: tuple[int, int] | None = None
        self._limits = DEFAULT_LIMITS

    def current(self) -> RunLimits:
        try:
            stat = self.file.stat()
        except OSError:
            self._stamp, self._limits = None, DEFAULT_LIMITS
            return self._limits
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            self._limits = self._load()
        return self._limits

    def _load(self) -> RunLimits:
        from skills.core.yamltext import YAMLError, load_yaml

        try:
            data: object = load_yaml(self.file.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, YAMLError) as exc:
            log.error("%s cannot be read (%s); the default run limits apply", self.file, exc)
            return DEFAULT_LIMITS
        section: object = cast("dict[str, Any]", data).get("runs") if isinstance(data, dict) else None
        if section is None:
            return DEFAULT_LIMITS
        if not isinstance(section, dict):
            log.error("%s: `runs:` must be a mapping of limits; the default run limits apply", self.file)
            return DEFAULT_LIMITS
        try:
            given = RunLimits.model_validate(section)
        except ValidationError as exc:
            problems = "; ".join(f"runs.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            log.error(
                "%s: %s; the default run limits apply (keys: %s)",
                self.file,
                problems,
                ", ".join(RunLimits.model_fields),
            )
            return DEFAULT_LIMITS
        return DEFAULT_LIMITS.model_copy(update=given.model_dump(exclude_unset=True))


_WHAT: dict[str, str] = {
    "max_steps": "steps",
    "max_loop_items": "loop items",
    "max_state_bytes": "bytes of data",
    "max_wall_time": "seconds",
    "max_artifact_bytes": "bytes of artifacts",
}


class Budget:
    """What one run has spent against its limits, in memory, shared by its nodes and items.

    The run's graph also checkpoints the counts (its `spent` channel) so a resumed run goes on
    from them. A pipeline called as a step charges its caller's budget as well (`parent`).
    """

    def __init__(
        self,
        limits: RunLimits,
        *,
        server: RunLimits | None = None,
        config: Path | None = None,
        parent: Budget | None = None,
    ) -> None:
        self.limits = limits
        self.server = server or limits
        self.config = config
        self.parent = parent
        self.steps = 0
        self.bytes = 0

    def restore(self, spent: dict[str, Any]) -> None:
        """Start from what a resumed run had spent before."""
        self.steps = int(spent.get("steps", 0))
        self.bytes = int(spent.get("bytes", 0))

    def charge(self, step_id: str, steps: int = 0, nbytes: int = 0) -> None:
        """Count `steps` and `nbytes`; raise `RunLimitExceeded` when a limit is passed."""
        self.steps += steps
        self.bytes += nbytes
        top = self.limits.max_steps
        if steps and top is not None and self.steps > top:
            raise self.exceeded("max_steps", step_id, f"the run reached its limit of {top:,} steps")
        cap = self.limits.max_state_bytes
        if nbytes and cap is not None and self.bytes > cap:
            raise self.exceeded("max_state_bytes", step_id, f"the run's data passed its limit of {_size(cap)}")
        if self.parent is not None:
            self.parent.charge(step_id, steps, nbytes)

    def check_stored(self, step_id: str, nbytes: int) -> None:
        """Stop a run whose checkpoint records in the state store passed `max_state_bytes` (`_meter`)."""
        cap = self.limits.max_state_bytes
        if cap is not None and nbytes > cap:
            raise self.exceeded("max_state_bytes", step_id, f"the run's checkpoints passed its limit of {_size(cap)}")

    def check_items(self, step_id: str, count: int) -> None:
        """Refuse a `for` of `count` items before it starts when it cannot fit the limits."""
        cap = self.limits.max_loop_items
        if cap is not None and count > cap:
            raise self.exceeded("max_loop_items", step_id, f"{count:,} items, over the limit of {cap:,} per loop")
        top = self.limits.max_steps
        if top is not None and self.steps + count > top:
            left = max(top - self.steps, 0)
            raise self.exceeded(
                "max_steps", step_id, f"{count:,} items, but only {left:,} of the run's {top:,} steps are left"
            )
        if self.parent is not None:
            self.parent.check_items(step_id, count)

    def check_artifacts(self, step_id: str, folder: Path) -> None:
        """Refuse the run once its artifact directory holds more than `max_artifact_bytes`.

        Blocking (it walks the folder): called in a worker thread when there is a folder to walk.
        """
        cap = self.limits.max_artifact_bytes
        if cap is None:
            return
        used = artifact_bytes(folder, stop_above=cap)
        if used > cap:
            raise self.exceeded(
                "max_artifact_bytes",
                step_id,
                f"the run's artifacts in {folder} passed its limit of {_size(cap)} (nothing more is written "
                "there; what is there stays until `runs prune` forgets the run)",
            )

    def exceeded(self, limit: LimitName, step_id: str, what: str) -> RunLimitExceeded:
        """The error for `limit`, with a hint saying who set it and where to change it."""
        from ..errors import RunLimitExceeded

        mine, servers = getattr(self.limits, limit), getattr(self.server, limit)
        if servers is None or (mine is not None and mine < servers):
            hint = f"the pipeline's `limits: {{{limit}: ...}}` (or `timeout:`) sets it; the server allows up to "
            hint += "any amount" if servers is None else f"{servers:,g} {_WHAT[limit]}"
        else:
            where = f"`runs: {{{limit}: ...}}` in {self.config}" if self.config else f"`runs: {{{limit}: ...}}`"
            hint = f"a limit of the server: raise {where} if the run needs more, or make it do less work"
        return RunLimitExceeded(f"step '{step_id}': {what} ({limit})", limit=limit, hint=hint, step_id=step_id)


def artifact_bytes(folder: Path, *, stop_above: int | None = None) -> int:
    """Apparent bytes of the regular files under `folder` (links not followed); 0 if it is missing.

    With `stop_above`, the count stops as soon as it passes that many (the answer is then only
    known to be larger).
    """
    total, pending = 0, [str(folder)]
    while pending:
        try:
            entries = os.scandir(pending.pop())
        except OSError:
            continue  # gone, or not a folder
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    pending.append(entry.path)
                elif stat.S_ISREG(info.st_mode):
                    total += info.st_size
                    if stop_above is not None and total > stop_above:
                        return total
    return total


def _size(nbytes: int) -> str:
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if nbytes >= factor:
            return f"{nbytes / factor:g} {unit}"
    return f"{nbytes} bytes"
