"""The distributed mode: a 1,000-item parallel `for` on 1, 2 and 3 workers, and its overhead.

Starts its own PostgreSQL and Redis on loopback ports (as the tests do: tests/_scale.py) and
`orchestrator worker` subprocesses. The skill is a *script* skill
(`scripts/tick.sh`, a subprocess per call, confined when bubblewrap is there): it reads its JSON
arguments, sleeps 50 ms and prints them back -- its 50 ms are waiting, not computing (a shell
script, not a Python one: a Python start-up per item costs ~20 ms of CPU, which on a 2-core
machine, not the workers, would bound the speed-up). Measured in one run:

- wall time of `orchestrator run --state --queue` of a 1,000-item parallel `for` (`max_parallel:
  1000`) with 1, 2 and 3 workers; ratio = time(1 worker) / time(N workers), and how busy the
  machine's CPUs were meanwhile;
- each worker takes `--concurrency` items at once (1 by default). The workers stand for machines,
  and here they all share this one: an item costs ~30 ms of CPU in all (the worker, the jail and
  its bootstrap, the run's driver, Redis, PostgreSQL), so on a 2-core machine one worker taking 8
  items at once already keeps the CPUs ~85 % busy and no number of workers can go much faster
  (`--also-concurrency 8` measures 1 and 3 workers at 8 too, and prints how busy the CPUs were).
  With 1 at once, three workers together need less than this machine has, as three machines
  would;
- a 50-step sequential pipeline of a python skill (adds two ints) run embedded (`orchestrator run`,
  state.sqlite) and distributed (`--state --queue`, one worker); ratio = distributed / embedded.

    .venv/bin/python bench/distributed.py [--items N] [--steps N] [--concurrency N] [--also-concurrency N]

Budget (issue 14): 3 workers >= 2.5x faster than 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import _common as c
import yaml

sys.path.insert(0, str(c.REPO))
from tests._scale import PostgresServer, RedisServer, Workers  # the tests' servers

BUDGET = 2.5
ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
TICK = 'args=$(cat)\nsleep 0.05\nprintf \'{"echo": %s}\\n\' "$args"\n'
"""The script skill: a shell script that sleeps 50 ms and echoes its arguments (`{"echo": {"n": N}}`)."""


def _skills(root: Path) -> Path:
    skills = root / "skills"
    tick = skills / "tick"
    (tick / "scripts").mkdir(parents=True)
    (tick / "SKILL.md").write_text("---\nname: tick\ndescription: Sleeps 50 ms and echoes n.\n---\nTick.\n")
    contract = {
        "inputs": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "run": {"script": "scripts/tick.sh"},
    }
    (tick / "skill.yaml").write_text(yaml.safe_dump(contract))
    (tick / "scripts" / "tick.sh").write_text(TICK)
    c.write_skill(skills, "bench-add")
    return skills


def _loop(root: Path, items: int) -> Path:
    spec = {
        "id": "ticks",
        "inputs": {"count": {"type": "integer"}},
        "steps": [
            {
                "id": "each",
                "for": {"items": "{{ range(count) | list }}", "variable": "n", "parallel": True, "max_parallel": items},
                "skill": "tick",
                "parameters": {"n": "{{ n }}"},
            }
        ],
        "outputs": {"ticked": "{{ each | length }}"},
    }
    path = root / "ticks.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _chain(root: Path, steps: int) -> Path:
    spec = {
        "id": "chain",
        "steps": [
            {"id": f"s{i}", "skill": "bench-add", "parameters": {"a": f"{{{{ s{i - 1}.sum }}}}" if i else 0, "b": 1}}
            for i in range(steps)
        ],
        "outputs": {"total": f"{{{{ s{steps - 1}.sum }}}}"},
    }
    path = root / "chain.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


class Env:
    def __init__(self, root: Path, skills: Path, state: str, queue: str) -> None:
        self.root, self.skills, self.state, self.queue = root, skills, state, queue
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}

    def home(self, name: str) -> dict[str, str]:
        return self.env | {"ORCHESTRATOR_HOME": str(self.root / name)}

    def run(self, pipeline: Path, *args: str, distributed: bool = True) -> tuple[float, dict[str, object]]:
        flags = ["--state", self.state, "--queue", self.queue] if distributed else []
        started = time.perf_counter()
        done = subprocess.run(
            [str(ORCHESTRATOR), "run", str(pipeline), "--skills", str(self.skills), "--json", *flags, *args],
            env=self.home("client"),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        took = time.perf_counter() - started
        if done.returncode:
            raise RuntimeError(done.stderr)
        return took, json.loads(done.stdout)


def _busy() -> tuple[int, int]:
    """CPU time (busy, total) of this machine so far, in clock ticks (Linux /proc/stat)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)  # minus idle and iowait


def _loop_on(env: Env, loop: Path, items: int, n: int, concurrency: int) -> float:
    """Wall time of the loop on `n` fresh workers taking `concurrency` items each."""
    workers = Workers(env.root, env.skills, env.state, env.queue, concurrency)
    try:
        for i in range(n):
            workers.start(f"c{concurrency}-n{n}-w{i}")
        before = _busy()
        took, result = env.run(loop, "--input", f"count={items}")
        after = _busy()
        busy, total = after[0] - before[0], after[1] - before[1]
        assert result["ticked"] == items, result
    finally:
        workers.stop()
    print(f"ABS loop_{items}_items_{n}_workers_concurrency_{concurrency}_s {took:.2f} (CPUs {busy / total:.0%} busy)")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=1, help="items one worker takes at once")
    parser.add_argument("--also-concurrency", type=int, default=0, help="also 1 and 3 workers at this concurrency")
    args = parser.parse_args()
    pg, redis = PostgresServer(), RedisServer()
    try:
        with c.bench_env() as root:
            env = Env(root, _skills(root), pg.database(), redis.url)
            loop, chain = _loop(root, args.items), _chain(root, args.steps)
            times = {n: _loop_on(env, loop, args.items, n, args.concurrency) for n in (1, 2, 3)}
            other = args.also_concurrency
            extra = {n: _loop_on(env, loop, args.items, n, other) for n in (1, 3)} if other else {}
            workers = Workers(root, env.skills, env.state, env.queue)
            workers.start("chain")
            try:
                embedded, distributed = [], []
                for _ in range(3):  # interleaved
                    embedded.append(env.run(chain, distributed=False)[0])
                    distributed.append(env.run(chain)[0])
            finally:
                workers.stop()
            emb, dist = sorted(embedded)[1], sorted(distributed)[1]
            print(f"ABS chain_{args.steps}_steps_embedded_s {emb:.2f}")
            print(f"ABS chain_{args.steps}_steps_distributed_s {dist:.2f}")
            for n in (2, 3):
                speedup = times[1] / times[n]
                verdict = "" if n == 2 else (" OK" if speedup >= BUDGET else " MISSED")
                budget = " (budget >= 2.5)" if n == 3 else ""
                print(f"RATIO loop_speedup_{n}_workers {speedup:.2f}{budget}{verdict}")
            if extra:
                print(f"RATIO loop_speedup_3_workers_at_concurrency_{other} {extra[1] / extra[3]:.2f} (CPU-bound here)")
            print(f"RATIO chain_distributed_over_embedded {dist / emb:.2f}")
    finally:
        pg.stop()
        redis.stop()


if __name__ == "__main__":
    main()
