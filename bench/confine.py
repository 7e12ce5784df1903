"""The cost of confinement per script call: the same script confined (bubblewrap) and unconfined.

The script is what `create_skill` writes: `python scripts/run.py`, JSON in, JSON out, standard
library only. Measured in the same run, interleaved:

- `run_script` confined vs unconfined (the executor alone: jail set-up, bootstrap, the script);
- the same with a script that leaves 10 files of 100 kB in a work directory that already holds
  10 such files: confined, the jail's tmpfs starts with a copy of them and its files are copied
  back to the host when it ends (`skills.executors._workdir`); unconfined, it writes the disk;
- a whole tool call of a created skill through the in-memory client, confined (the figure the
  budget is about), with the same call unconfined as its reference.

    .venv/bin/python bench/confine.py [--reps N]

Budget (ARCHITECTURE.md): a confined script call < 50 ms; the ratio is reported.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import _common as c
import anyio
from mcp import Client

from mcp_server import create_server
from skills.executors.isolation import UNCONFINED, Isolation, probe
from skills.executors.script import run_script

BUDGET_MS = 50.0
SCRIPT = """\
import json
import sys


def main():
    args = json.load(sys.stdin)
    print(json.dumps({"words": len(args["text"].split())}))


if __name__ == "__main__":
    main()
"""
ARGS = {"text": "the quick brown fox"}
FILES = """\
import json, os, sys

args = json.load(sys.stdin)
for i in range(10):
    with open(f"out-{i}.bin", "wb") as handle:
        handle.write(os.urandom(100_000))
print(json.dumps({"words": len(args["text"].split())}))
"""


def write_created_skill(root: Path, name: str) -> Path:
    folder = root / name
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Count words (benchmark).\n---\n# {name}\n")
    (folder / "skill.yaml").write_text("run:\n  script: scripts/run.py\ntimeout: 10\nmemory_mb: 256\n")
    (folder / "scripts" / "run.py").write_text(SCRIPT)
    (folder / "scripts" / "files.py").write_text(FILES)
    return folder


def seeded(work: Path) -> Path:
    """A work directory holding 10 files of 100 kB already (an earlier step's)."""
    work.mkdir(parents=True, exist_ok=True)
    for i in range(10):
        (work / f"in-{i}.bin").write_bytes(os.urandom(100_000))
    return work


async def executor(folder: Path, work: Path, isolation: Isolation, program: str = "run.py") -> Any:
    result = await run_script(
        folder / "scripts" / program,
        ARGS,
        skill="bench",
        workdir=work,
        timeout=10,
        memory_mb=256,
        max_output_bytes=100_000,
        isolation=isolation,
    )
    if result != {"words": 4}:
        raise AssertionError(f"unexpected result {result}")
    return result


async def main(reps: int) -> int:
    isolation = probe()
    if not isolation.available:
        print(f"confinement is not available here: {isolation.reason}")
        print(c.abs_line("confine.created_skill_call", "n/a", f"< {BUDGET_MS:g} ms", False))
        return 1
    print(f"isolation: {isolation.summary()}")
    with c.bench_env() as tmp:
        skills = tmp / "skills"
        folder = write_created_skill(skills, "bench-words")
        work = tmp / "work"

        async def confined() -> Any:
            return await executor(folder, work / "c", isolation)

        async def unconfined() -> Any:
            return await executor(folder, work / "u", UNCONFINED)

        for _ in range(5):  # warm-up: the page cache, the probe
            await confined()
            await unconfined()
        t_conf, t_unconf = await c.interleave(confined, unconfined, reps)
        w_conf, w_unconf = seeded(work / "fc"), seeded(work / "fu")

        async def confined_files() -> Any:
            return await executor(folder, w_conf, isolation, "files.py")

        async def unconfined_files() -> Any:
            return await executor(folder, w_unconf, UNCONFINED, "files.py")

        for _ in range(3):
            await confined_files()
            await unconfined_files()
        t_fconf, t_funconf = await c.interleave(confined_files, unconfined_files, reps)

        # A whole call through the in-memory client: one server confines, the other was told
        # (config.yaml) to use a bwrap that does not exist, so it runs the same skill unconfined.
        confined_home, open_home = tmp / "home", tmp / "home-unconfined"
        open_home.mkdir()
        (open_home / "config.yaml").write_text(f"isolation:\n  bwrap: {tmp / 'no-bwrap-here'}\n")
        s_conf = create_server(home=confined_home, skill_dirs=[skills], builtin=False, pipelines=False)
        s_open = create_server(home=open_home, skill_dirs=[skills], builtin=False, pipelines=False)
        async with Client(s_conf) as a, Client(s_open) as b:

            async def call_confined() -> Any:
                result = await a.call_tool("bench-words", ARGS)
                if result.is_error:
                    raise AssertionError(result.content[0].text)

            async def call_open() -> Any:
                result = await b.call_tool("bench-words", ARGS)
                if result.is_error:
                    raise AssertionError(result.content[0].text)

            for _ in range(5):
                await call_confined()
                await call_open()
            t_call, t_call_open = await c.interleave(call_confined, call_open, reps)

    m_conf, m_unconf, m_call, m_open = map(c.median, (t_conf, t_unconf, t_call, t_call_open))
    m_fconf, m_funconf = c.median(t_fconf), c.median(t_funconf)
    c.table(
        ["what", "median", "quartiles"],
        [
            ["run_script unconfined", c.ms(m_unconf), " - ".join(map(c.ms, c.quartiles(t_unconf)))],
            ["run_script confined", c.ms(m_conf), " - ".join(map(c.ms, c.quartiles(t_conf)))],
            ["  + 10 files in, 10 out, unconfined", c.ms(m_funconf), " - ".join(map(c.ms, c.quartiles(t_funconf)))],
            ["  + 10 files in, 10 out, confined", c.ms(m_fconf), " - ".join(map(c.ms, c.quartiles(t_fconf)))],
            ["tool call, unconfined", c.ms(m_open), " - ".join(map(c.ms, c.quartiles(t_call_open)))],
            ["tool call, confined", c.ms(m_call), " - ".join(map(c.ms, c.quartiles(t_call)))],
        ],
    )
    print(f"confinement adds {c.ms(m_conf - m_unconf)} per script call ({reps} interleaved pairs)")
    print(f"with 1 MB in and 1 MB out of its work directory: {c.ms(m_fconf - m_funconf)}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at the end: {load} on {os.cpu_count()} CPUs (the figures stretch with it)")
    print(c.abs_line("confine.created_skill_call", c.ms(m_call), f"< {BUDGET_MS:g} ms", m_call * 1e3 < BUDGET_MS))
    print(f"RATIO confine.script_call {m_conf / m_unconf:.3f} (confined / unconfined; reported, no budget)")
    print(f"RATIO confine.tool_call {m_call / m_open:.3f} (confined / unconfined; reported, no budget)")
    return 0 if m_call * 1e3 < BUDGET_MS else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=60)
    raise SystemExit(anyio.run(main, parser.parse_args().reps))
