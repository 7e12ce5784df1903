"""A 1,000-item parallel `for` vs a raw LangGraph `Send` fan-out of 1,000, same run.

The pipeline is one step `for: {items: "{{ items }}", variable: n, parallel: true,
max_parallel: 1000}` calling the python skill `bench-add` (sync, so each item runs in a
worker process of `skills._pool`) with `a: "{{ n }}"`, `b: 1`; the 1,000 items are a pipeline
input. It runs through `run_pipeline` without a checkpointer and with an `AsyncSqliteSaver`. The reference is a
`StateGraph` whose conditional edge from START sends `Send("work", {"index": i, "item": x})`
for every item to a sync node calling the very same function, an order-preserving fan-in
reducer (index -> result) and a `done` node putting the results in item order, with no
checkpointer and with its own `AsyncSqliteSaver`. `max_parallel: 16` is measured against the
same unbounded reference (informational: the reference has no bound), and so is an `async def`
skill against an async raw node (no thread hop on either side; informational). The SQLite
runs also report the checkpoint bytes each run writes; the runs without a checkpointer, the CPU
time of a run (the server process and its worker processes, against the raw graph's process).

    .venv/bin/python bench/fanout.py [--items N] [--reps N] [--reps-sqlite N] [--profile]

Budget (ARCHITECTURE.md): <= 2x the raw fan-out.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated, Any, TypedDict

import _common as c
import anyio
import yaml

BUDGET = 2.0
BOUNDS = (1000, 16)
ASYNC_IMPL = "async def add(a: int, b: int) -> dict[str, int]:\n    return {'sum': a + b}\n"


def _by_index(old: dict[int, Any] | None, new: dict[int, Any] | None) -> dict[int, Any]:
    """Fan-in reducer: results by item index, whatever order the items finish in."""
    return {**(old or {}), **(new or {})}


class FanState(TypedDict, total=False):
    items: list[int]
    results: Annotated[dict[int, Any], _by_index]
    out: list[Any]


def pipeline_yaml(pid: str, max_parallel: int, skill: str = "bench-add") -> str:
    spec = {
        "id": pid,
        "description": "A parallel for over its input items (benchmark).",
        "inputs": {"items": {"type": "array", "items": {"type": "integer"}}},
        "steps": [
            {
                "id": "fan",
                "for": {"items": "{{ items }}", "variable": "n", "parallel": True, "max_parallel": max_parallel},
                "skill": skill,
                "parameters": {"a": "{{ n }}", "b": 1},
            }
        ],
    }
    return yaml.safe_dump(spec, sort_keys=False)


def raw_graph(fn: Callable[..., Any], is_async: bool = False) -> Any:
    """START -> Send("work") per item -> `done` orders the results; sync or async `work` node."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    def route(state: FanState) -> list[Any]:
        return [Send("work", {"index": i, "item": x}) for i, x in enumerate(state["items"])]

    if is_async:

        async def work(payload: dict[str, Any]) -> FanState:
            return {"results": {payload["index"]: await fn(a=payload["item"], b=1)}}

    else:

        def work(payload: dict[str, Any]) -> FanState:  # type: ignore[misc]
            return {"results": {payload["index"]: fn(a=payload["item"], b=1)}}

    def done(state: FanState) -> FanState:
        results = state["results"]
        return {"out": [results[i] for i in range(len(state["items"]))]}

    graph = StateGraph(FanState)
    graph.add_node("work", work)
    graph.add_node("done", done)
    graph.add_conditional_edges(START, route, ["work"])
    graph.add_edge("work", "done")
    graph.add_edge("done", END)
    return graph


class Bench:
    def __init__(self, catalog: Any, items: list[int], tmp: Path, skill: str = "bench-add") -> None:
        from pipelines.engine.compiler import compile_pipeline
        from pipelines.language.loader import load_spec
        from skills.executors._python import load_entry

        self.catalog, self.items, self.tmp = catalog, items, tmp
        entry = load_entry(catalog.get(skill).root, "impl:add", skill)
        self.fn = entry.fn  # the very function the skill calls
        self.compiled = {
            mp: compile_pipeline(load_spec(pipeline_yaml(f"fan-{skill}-{mp}", mp, skill))[0]) for mp in BOUNDS
        }
        self.raw = raw_graph(self.fn, entry.is_async)
        self.expected = [{"sum": x + 1} for x in items]

    def subject(self, max_parallel: int, saver: Any) -> Callable[[], Awaitable[object]]:
        from pipelines.engine.runtime import run_pipeline
        from skills import SkillContext

        compiled = self.compiled[max_parallel]

        async def run() -> object:
            out = await run_pipeline(
                compiled,
                {"items": self.items},
                catalog=self.catalog,
                ctx=SkillContext(),
                run_id=uuid.uuid4().hex[:12],
                artifact_dir=self.tmp / "artifacts",
                checkpointer=saver,
            )
            if out["fan"] != self.expected:
                raise AssertionError("pipeline: results missing or out of order")
            return out

        return run

    def reference(self, saver: Any) -> Callable[[], Awaitable[object]]:
        graph = self.raw.compile(checkpointer=saver)

        async def run() -> object:
            config = {"configurable": {"thread_id": uuid.uuid4().hex[:12]}}
            out = await graph.ainvoke({"items": self.items}, config)
            if out["out"] != self.expected:
                raise AssertionError("raw graph: results missing or out of order")
            return out

        return run


async def measure(bench: Bench, reps: dict[str, int]) -> dict[str, dict[str, float]]:
    """Medians per checkpointer of the reference and each max_parallel, rotated together."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    out: dict[str, dict[str, float]] = {}
    async with AsyncExitStack() as stack:
        dbs = bench.tmp / "pipeline.db", bench.tmp / "raw.db"
        s_saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(str(dbs[0])))
        r_saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(str(dbs[1])))
        for label, (s, r) in (("none", (None, None)), ("sqlite", (s_saver, r_saver))):
            runs = [bench.reference(r), *(bench.subject(mp, s) for mp in BOUNDS)]
            for run in runs:  # warm-up: graph compile, module import, worker threads, SQLite tables
                await run()
            before = [c.db_bytes(db) for db in dbs]
            samples = await c.rotate(runs, reps[label], collect_every=1)
            row = {"ref": c.median(samples[0])}
            row.update({f"mp{mp}": c.median(t) for mp, t in zip(BOUNDS, samples[1:], strict=True)})
            if label == "none":  # CPU of each run (workers included), alternating: load moves it less
                row["cpu_ref"], row["cpu_subject"] = await cpu_per_run(runs[0], runs[1], max(2, reps[label] // 2))
            if label == "sqlite":  # checkpoint bytes written per run (the subject's for both bounds)
                row["bytes_ref"] = (c.db_bytes(dbs[1]) - before[1]) / reps[label]
                row["bytes_subject"] = (c.db_bytes(dbs[0]) - before[0]) / (reps[label] * len(BOUNDS))
            out[label] = row
    return out


async def cpu_per_run(
    reference: Callable[[], Awaitable[object]], subject: Callable[[], Awaitable[object]], reps: int
) -> tuple[float, float]:
    """Median CPU seconds (this process and its worker processes) of one run of each, ABAB."""
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(2 * reps):
        k = i % 2
        start = c.family_cpu()
        await (reference, subject)[k]()
        samples[k].append(c.family_cpu() - start)
    return c.median(samples[0]), c.median(samples[1])


async def measure_async(bench: Bench, reps: int) -> dict[str, float]:
    """The same with an `async def` skill and an async raw node (no thread hop on either side)."""
    runs = [bench.reference(None), bench.subject(BOUNDS[0], None)]
    for run in runs:
        await run()
    samples = await c.rotate(runs, reps, collect_every=1)
    return {"ref": c.median(samples[0]), "subject": c.median(samples[1])}


async def profile_runs(bench: Bench, saver_kind: str, reps: int) -> str:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncExitStack() as stack:
        saver = None
        if saver_kind == "sqlite":
            saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(str(bench.tmp / "prof.db")))
        run = bench.subject(BOUNDS[0], saver)
        await run()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(reps):
            await run()
        prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats("pipelines|skills|langgraph", 40)
    return text.getvalue()


def main(count: int, reps: int, reps_sqlite: int, profile: bool) -> None:
    from mcp_server import create_server

    load = os.getloadavg()[0]

    with c.bench_env() as tmp:
        skills_dir = tmp / "skills"
        c.write_skill(skills_dir, "bench-add")
        c.write_skill(skills_dir, "bench-add-async", impl=ASYNC_IMPL)
        server = create_server(home=tmp / "home", skill_dirs=[skills_dir])
        bench = Bench(server.catalog, list(range(count)), tmp)
        results = anyio.run(measure, bench, {"none": reps, "sqlite": reps_sqlite})
        bench_async = Bench(server.catalog, list(range(count)), tmp, "bench-add-async")
        flavour = anyio.run(measure_async, bench_async, reps)
        reports = [(k, anyio.run(profile_runs, bench, k, 3)) for k in ("none", "sqlite")] if profile else []

    print(
        f"{count}-item parallel for vs a raw Send fan-out of {count}, {reps} runs each "
        f"({reps_sqlite} with SQLite), rotated (medians)\n"
    )
    rows = []
    for saver, r in results.items():
        for mp in BOUNDS:
            rows.append([saver, str(mp), c.ms(r[f"mp{mp}"]), c.ms(r["ref"]), f"{r[f'mp{mp}'] / r['ref']:.2f}x"])
    fa = flavour
    rows.append(
        [
            "none (async skill)",
            str(BOUNDS[0]),
            c.ms(fa["subject"]),
            c.ms(fa["ref"]),
            f"{fa['subject'] / fa['ref']:.2f}x",
        ]
    )
    c.table(["checkpointer", "max_parallel", "pipeline", "raw Send", "ratio"], rows)
    sq = results["sqlite"]
    print(
        f"\ncheckpoint data written per run: pipeline {sq['bytes_subject'] / 1e6:.1f} MB, "
        f"raw {sq['bytes_ref'] / 1e6:.1f} MB (each Send carries the item's whole scope)"
    )
    for kind, report in reports:
        print(f"\ncProfile, 3 runs of the {count}-item parallel for (max_parallel {BOUNDS[0]}, checkpointer {kind})\n")
        print(report.strip())
    print(f"\n{c.load_note(load)}")
    print()
    for saver, r in results.items():
        for mp in BOUNDS:
            note = "" if mp == BOUNDS[0] else ", informational: the raw fan-out has no bound"
            print(
                f"ABS fanout[{saver},max_parallel={mp}] {c.ms(r[f'mp{mp}'])} raw {c.ms(r['ref'])} "
                f"({r[f'mp{mp}'] / r['ref']:.2f}x{note})"
            )
    print(
        f"ABS fanout.checkpoint_bytes per run {sq['bytes_subject'] / 1e6:.1f} MB raw {sq['bytes_ref'] / 1e6:.1f} MB "
        f"({sq['bytes_subject'] / max(sq['bytes_ref'], 1):.1f}x)"
    )
    no = results["none"]
    print(
        f"ABS fanout.cpu[none] per run {c.ms(no['cpu_subject'])} raw {c.ms(no['cpu_ref'])} "
        f"({no['cpu_subject'] / no['cpu_ref']:.2f}x, CPU of the server process and its workers)"
    )
    print(
        f"ABS fanout[none,async skill] {c.ms(fa['subject'])} raw {c.ms(fa['ref'])} "
        f"({fa['subject'] / fa['ref']:.2f}x, informational: no thread hop on either side)"
    )
    for saver, r in results.items():
        print(c.ratio_line(f"fanout[{saver}]", r[f"mp{BOUNDS[0]}"] / r["ref"], BUDGET, f"({count} items)"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000, help="items of the loop (default: 1000)")
    parser.add_argument("--reps", type=int, default=6, help="runs of each graph without checkpointer (default: 6)")
    parser.add_argument("--reps-sqlite", type=int, default=3, help="runs of each graph with SQLite (default: 3)")
    parser.add_argument("--profile", action="store_true", help="print cProfiles of the pipeline runs")
    args = parser.parse_args()
    main(args.items, args.reps, args.reps_sqlite, args.profile)
