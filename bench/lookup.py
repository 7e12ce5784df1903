"""Cached skill lookup, skill instantiation from its folder, first vs later python calls.

    .venv/bin/python bench/lookup.py

Budgets (ARCHITECTURE.md): cached lookup < 0.1 ms; seed target for instantiating one skill
from its folder < 10 ms. Also reported: the first call of a python skill (its module is
imported then) against later calls, and a live-reload re-scan of 1,000 unchanged folders.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from pathlib import Path

import _common as c
import anyio
import anyio.to_thread

from mcp_server import create_server
from skills import BUILTIN_SKILLS_DIR, FolderSource, SkillContext, SkillSource, load_folder

LOOKUP_BUDGET = 100e-6
LOAD_BUDGET = 10e-3
ARGS = {"a": 2, "b": 3}


def per_call(fn: Callable[[], object], number: int = 100_000) -> float:
    """Seconds per call: the best of 5 runs of `number` calls (timeit's convention)."""
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def load_time(folder: Path, source: SkillSource, reps: int) -> float:
    """Median seconds of `load_folder` (it reads and checks the folder every time)."""
    return c.median([c.timed(lambda: load_folder(folder, source)) for _ in range(reps)])


async def first_and_later(folders: list[Path]) -> tuple[list[float], list[float]]:
    """First call (imports the module) and the median of 30 later calls, for each fresh skill."""
    await anyio.to_thread.run_sync(lambda: None)  # start the worker thread outside the figures
    first: list[float] = []
    later: list[float] = []
    for folder in folders:
        skill = load_folder(folder, "user")
        ctx = SkillContext(skill=skill.name, run_id="bench")
        first.append(await c.atimed(lambda s=skill, x=ctx: s.run(ARGS, x)))
        later.append(c.median([await c.atimed(lambda s=skill, x=ctx: s.run(ARGS, x)) for _ in range(30)]))
    return first, later


def main() -> None:
    with c.bench_env() as tmp:
        many = c.write_skills(tmp / "skills-1000", 1000)
        server = create_server(home=tmp / "home", skill_dirs=[many])
        catalog = server.catalog
        name = "gen-0500"
        if catalog.find(name) is None:
            raise AssertionError(f"{name} not loaded")
        lookups = [
            ("catalog.find(name)", per_call(lambda: catalog.find(name))),
            ("catalog.get(name)", per_call(lambda: catalog.get(name))),
            ("name in catalog", per_call(lambda: name in catalog)),
            ("catalog.find(missing) -> None", per_call(lambda: catalog.find("no-such-skill"))),
        ]

        one = many / name
        loads = [("generated python skill (small schemas)", load_time(one, "user", 200))]
        for folder in sorted(BUILTIN_SKILLS_DIR.iterdir()):
            if (folder / "SKILL.md").is_file():
                loads.append((f"builtin {folder.name}", load_time(folder, "builtin", 50)))

        source = FolderSource(many, "user")
        source.refresh()
        rescan = c.median([c.timed(source.refresh) for _ in range(5)])

        fresh = [c.write_skill(tmp / "fresh", f"fresh-{i:02d}") for i in range(20)]
        first, later = anyio.run(first_and_later, fresh)

    print("cached lookup in a catalog of 1,000 + built-in skills (best of 5 x 100,000)\n")
    c.table(["what", "per call"], [[label, c.us(t)] for label, t in lookups])
    print("\ninstantiating one skill from its folder: load_folder(path, source), median\n")
    c.table(["folder", "median"], [[label, c.ms(t)] for label, t in loads])
    print("\nlive reload: FolderSource.refresh() of 1,000 unchanged folders, median of 5\n")
    c.table(["what", "median"], [["re-scan (stat SKILL.md + skill.yaml each)", c.ms(rescan)]])
    print(f"\npython skill calls (FolderSkill.run, no MCP), {len(fresh)} fresh skills\n")
    c.table(
        ["call", "median", "max"],
        [
            ["first (imports impl.py)", c.ms(c.median(first)), c.ms(max(first))],
            ["later (module cached)", c.ms(c.median(later)), c.ms(max(later))],
        ],
    )
    print()
    worst_lookup = max(t for _, t in lookups)
    load_one = loads[0][1]
    worst_load = max(t for _, t in loads)
    print(c.abs_line("lookup.cached", c.us(worst_lookup), "< 100 us", worst_lookup < LOOKUP_BUDGET))
    print(c.abs_line("lookup.load_folder", c.ms(load_one), "< 10 ms", load_one < LOAD_BUDGET))
    print(c.abs_line("lookup.load_folder_builtin_max", c.ms(worst_load), "< 10 ms", worst_load < LOAD_BUDGET))
    print(
        f"ABS lookup.first_call {c.ms(c.median(first))} later {c.ms(c.median(later))} "
        f"({c.median(first) / c.median(later):.1f}x, no budget)"
    )
    # Absolute budgets as fractions of themselves, so every script ends on RATIO lines.
    print(c.ratio_line("lookup.load_folder/seed_target", load_one / LOAD_BUDGET, 1))
    print(c.ratio_line("lookup.cached/budget", worst_lookup / LOOKUP_BUDGET, 1))


if __name__ == "__main__":
    main()
