"""Shared helpers of the benchmark scripts: temp homes, generated skills, timing, reporting.

Every script measures its reference in the same run, interleaved with the subject, and
reports medians; nothing is written outside a temporary directory.
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(REPO))

ADD_INPUTS = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "description": "First addend."},
        "b": {"type": "integer", "description": "Second addend."},
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}
ADD_OUTPUTS = {
    "type": "object",
    "properties": {"sum": {"type": "integer", "description": "a + b"}},
    "required": ["sum"],
}
ADD_IMPL = "def add(a: int, b: int) -> dict[str, int]:\n    return {'sum': a + b}\n"


@contextmanager
def bench_env() -> Iterator[Path]:
    """A temporary directory, also set as ORCHESTRATOR_HOME (`<tmp>/home`) while inside."""
    previous = os.environ.get("ORCHESTRATOR_HOME")
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as tmp:
        root = Path(tmp)
        os.environ["ORCHESTRATOR_HOME"] = str(root / "home")
        try:
            yield root
        finally:
            if previous is None:
                os.environ.pop("ORCHESTRATOR_HOME", None)
            else:
                os.environ["ORCHESTRATOR_HOME"] = previous


def write_skill(parent: Path, name: str, *, impl: str = ADD_IMPL, entry: str = "impl:add") -> Path:
    """One python skill folder (SKILL.md, skill.yaml, impl.py) adding two ints."""
    folder = parent / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: Add two integers ({name}); a generated benchmark skill.\n---\n\n"
        f"# {name}\n\nReturns `{{sum: a + b}}`.\n",
        encoding="utf-8",
    )
    # Block-style YAML, as people write it (a JSON-style file parses at a different speed).
    contract = {"inputs": ADD_INPUTS, "outputs": ADD_OUTPUTS, "run": {"python": entry}}
    (folder / "skill.yaml").write_text(yaml.safe_dump(contract, sort_keys=False), encoding="utf-8")
    (folder / "impl.py").write_text(impl, encoding="utf-8")
    return folder


def write_skills(parent: Path, count: int, prefix: str = "gen") -> Path:
    """`count` skill folders `<prefix>-0000`, ... under `parent`; returns `parent`."""
    parent.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        write_skill(parent, f"{prefix}-{i:04d}")
    return parent


# -- timing ------------------------------------------------------------------------------------
def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of `fn` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


async def atimed(fn: Callable[[], Awaitable[object]]) -> float:
    """Seconds one await of `fn()` takes."""
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def interleave(
    subject: Callable[[], Awaitable[object]],
    reference: Callable[[], Awaitable[object]],
    reps: int,
) -> tuple[list[float], list[float]]:
    """Time `subject` and `reference` alternately (ABBA order), `reps` times each.

    Alternating cancels slow drifts of the machine; ABBA cancels any advantage of going first.
    The garbage collector runs between pairs, not inside a measurement.
    """
    subj: list[float] = []
    ref: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(reps):
            if i % 2 == 0:
                subj.append(await atimed(subject))
                ref.append(await atimed(reference))
            else:
                ref.append(await atimed(reference))
                subj.append(await atimed(subject))
            if i % 50 == 49:
                gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()
    return subj, ref


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def quartiles(samples: Sequence[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=4)
    return q[0], q[2]


# -- reporting ---------------------------------------------------------------------------------
def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a plain aligned table."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, ["-" * w for w in widths], *rows]:
        print("  ".join(f"{cell!s:<{w}}" for cell, w in zip(row, widths, strict=True)).rstrip())


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def abs_line(name: str, value: str, budget: str, ok: bool) -> str:
    """An absolute figure and its budget: `ABS tools_list.load_1000 212.0 ms (budget < 300 ms) OK`."""
    return f"ABS {name} {value} (budget {budget}) {verdict(ok)}"


def ratio_line(name: str, value: float, budget: float, detail: str = "") -> str:
    """`RATIO <name> <value> (budget <= X) OK|MISSED [detail]`."""
    tail = f" {detail}" if detail else ""
    shown = f"{value:.3f}" if 0.1 <= value < 10 else f"{value:.3g}"  # 1.304, not a misleading 1.3
    return f"RATIO {name} {shown} (budget <= {budget:g}) {verdict(value <= budget)}{tail}"


class ServerClock:
    """Outermost server middleware recording the server-side time of each request of one method."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.samples: list[float] = []

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method != self.method:
            return await call_next(ctx)
        start = time.perf_counter()
        try:
            return await call_next(ctx)
        finally:
            self.samples.append(time.perf_counter() - start)


def db_bytes(path: Path) -> int:
    """Bytes of checkpoints, metadata and pending writes stored in a SQLite saver's database."""
    import sqlite3

    if not path.exists():
        return 0
    db = sqlite3.connect(path)
    try:
        stored = db.execute("SELECT total(length(checkpoint)) + total(length(metadata)) FROM checkpoints").fetchone()
        writes = db.execute("SELECT total(length(value)) FROM writes").fetchone()
    except sqlite3.OperationalError:  # no tables yet: nothing was checkpointed
        return 0
    finally:
        db.close()
    return int(stored[0] + writes[0])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def family_cpu() -> float:
    """CPU seconds of this process and its children (the worker processes of python skills),
    live or ended: the work a run costs, which the machine's load moves less than wall time."""
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)  # the children reaped already
    own, total = os.getpid(), time.process_time() + ended.ru_utime + ended.ru_stime
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[1]) == own:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss(pid: int) -> int:
    """Resident bytes of a live process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def load_note(start: float) -> str:
    """The machine's load around the run: the ratios drift when other processes share the cores."""
    end = os.getloadavg()[0]
    busy = max(start, end) > 1.0
    tail = "; other processes were busy, so rerun when the machine is idle if a figure looks off" if busy else ""
    return f"load average (1 min) at start / end: {start:.2f} / {end:.2f}{tail}"


async def rotate(
    runs: list[Callable[[], Awaitable[object]]], reps: int, *, collect_every: int = 10
) -> list[list[float]]:
    """Time every callable `reps` times, in an order rotating each round (GC only every `collect_every` rounds).

    One round holds every variant, so a burst of load elsewhere on the machine hits all of them.
    """
    samples: list[list[float]] = [[] for _ in runs]
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(reps):
            order = list(range(len(runs)))
            order = order[i % len(order) :] + order[: i % len(order)]
            if i % 2:
                order.reverse()
            for k in order:
                samples[k].append(await atimed(runs[k]))
            if i % collect_every == collect_every - 1:
                gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples
