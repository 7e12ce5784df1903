"""Skills from the wild: publishing 1,200 nested skills, cold and warm; catalogue mode's size.

    .venv/bin/python bench/wild.py [--reps N]

Budgets (ARCHITECTURE.md, issue 11): publishing 1,200 nested skills cold, including the first
`tools/list` through a client, < 1 s; a cold load of 1,000 skills < 300 ms. "Cold" is a fresh
home (no parse cache: every SKILL.md parsed); "warm" a restart over the cache the cold run left.
The corpus is instructions skills (SKILL.md only) spread over nested `*/skills/` folders, as the
public collections are. Also printed: the bytes of tool definitions a client receives for the
1,200 skills in catalogue mode against one tool per skill (the ratio is the saving), and the
same-run reference of one 10-skill publish, and the CPU time of this process beside each median.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import _common as c
import anyio
from mcp import Client

sys.path.insert(0, str(c.REPO))
from mcp_server import create_server
from skills import Catalog, FolderSource
from tests._wild import many_skills  # the tests' corpus writer: the same shapes

T = TypeVar("T")
PUBLISH_BUDGET = 1.0
LOAD_BUDGET = 0.300


async def publish(home: Path, root: Path, catalogue: str) -> tuple[float, int]:
    """Seconds from create_server to the first tools/list answered (all pages), and its size."""
    start = time.perf_counter()
    server = create_server(home=home, skill_dirs=[root], builtin=False, catalogue=catalogue)  # type: ignore[arg-type]
    size, cursor = 0, None
    async with Client(server, mode="legacy") as client:
        while True:
            result = await client.list_tools(cursor=cursor)
            size += sum(
                len(json.dumps(t.model_dump(mode="json", by_alias=True, exclude_none=True))) for t in result.tools
            )
            cursor = result.next_cursor
            if cursor is None:
                break
    return time.perf_counter() - start, size


def cold_load(root: Path) -> float:
    return c.timed(lambda: len(Catalog([FolderSource(root, "user")])))


class CPU:
    """CPU seconds of this process per labelled run: on a shared machine, the steadier figure."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}

    def run(self, label: str, fn: Callable[[], T]) -> T:
        start = time.process_time()
        try:
            return fn()
        finally:
            self.samples.setdefault(label, []).append(time.process_time() - start)

    def median(self, label: str) -> str:
        return c.ms(c.median(self.samples[label]))


def _cells(wall: list[float], cpu: CPU, label: str) -> list[str]:
    return [c.ms(c.median(wall)), c.ms(min(wall)), cpu.median(label)]


def main(reps: int) -> None:
    start_load = os.getloadavg()[0]
    with c.bench_env() as tmp:
        big = many_skills(tmp / "wild", 1_200)
        thousand = many_skills(tmp / "thousand", 1_000)
        small = many_skills(tmp / "small", 10)
        rows, cold, warm, cold_off, cpu = [], [], [], [], CPU()
        for i in range(reps):
            home = tmp / f"home-{i}"
            cold.append(cpu.run("cold", lambda h=home: anyio.run(publish, h, big, "auto"))[0])
            warm.append(cpu.run("warm", lambda h=home: anyio.run(publish, h, big, "auto"))[0])
            cold_off.append(cpu.run("off", lambda i=i: anyio.run(publish, tmp / f"home-off-{i}", big, "off"))[0])
        ref = [
            cpu.run("ref", lambda i=i: anyio.run(publish, tmp / f"home-small-{i}", small, "auto"))[0]
            for i in range(reps)
        ]
        loads = [cpu.run("load", lambda: cold_load(thousand)) for _ in range(reps)]
        _, catalogue_bytes = anyio.run(publish, tmp / "size-on", big, "on")
        _, per_skill_bytes = anyio.run(publish, tmp / "size-off", big, "off")
        rows = [
            ["publish 1,200 nested skills, cold (catalogue auto)", *_cells(cold, cpu, "cold")],
            ["publish 1,200 nested skills, warm (catalogue auto)", *_cells(warm, cpu, "warm")],
            ["publish 1,200 nested skills, cold, one tool per skill", *_cells(cold_off, cpu, "off")],
            ["publish 10 skills (reference)", *_cells(ref, cpu, "ref")],
            ["cold load of 1,000 skills (Catalog, no cache)", *_cells(loads, cpu, "load")],
        ]
    print(f"{c.load_note(start_load)}\nmedian and best of {reps}; publish: create_server + first tools/list\n")
    c.table(["what", "median", "best", "CPU median"], rows)
    print(
        f"\ntool definitions for 1,200 skills: catalogue mode {catalogue_bytes:,} B, one tool per skill "
        f"{per_skill_bytes:,} B\n"
    )
    print(c.abs_line("wild.publish_1200_cold", c.ms(c.median(cold)), "< 1 s", c.median(cold) < PUBLISH_BUDGET))
    print(c.abs_line("wild.publish_1200_warm", c.ms(c.median(warm)), "< 1 s", c.median(warm) < PUBLISH_BUDGET))
    print(c.abs_line("wild.load_1000_cold", c.ms(c.median(loads)), "< 300 ms", c.median(loads) < LOAD_BUDGET))
    print(f"ABS wild.cpu publish_1200_cold: {cpu.median('cold')} load_1000_cold: {cpu.median('load')}")
    print(f"ABS wild.tool_bytes catalogue {catalogue_bytes} per-skill {per_skill_bytes}")
    print(f"ABS wild.publish_1200_cold_vs_10 {c.median(cold) / c.median(ref):.1f}x (same-run reference, no budget)")
    print(c.ratio_line("wild.catalogue_bytes", catalogue_bytes / per_skill_bytes, 0.02, "(catalogue / per skill)"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="samples of each figure (default: 5)")
    main(parser.parse_args().reps)
