"""Per-step overhead of a pipeline vs a raw LangGraph graph doing the same work, same run.

The pipeline is N sequential steps, each calling the python skill `bench-add` (sync, so it
runs in a worker thread) with `a: "{{ s<i-1>.sum }}"`, `b: 1`; it runs through
`run_pipeline` without a checkpointer and with an `AsyncSqliteSaver`. The reference is a
`StateGraph` of N sync nodes calling the very same function object (LangGraph runs sync nodes
in its executor, so both pay one thread hop per step), passing the value along, with no
checkpointer and with its own `AsyncSqliteSaver`. A variant with an `async def` skill and
async raw nodes (no thread hop on either side) shows the overhead without the hop.

Per step = (median run of N steps - median run of 1 step) / (N - 1): the marginal cost of a
step, without what every run pays once (graph start, inputs, outputs). The whole-run figures
and one run of the pipeline tool through an in-memory MCP client (run history, checkpointer
open and close, result schema: informational) are printed too.

    .venv/bin/python bench/pipeline_step.py [--steps N] [--reps N] [--reps-sqlite N] [--profile]

Budget (ARCHITECTURE.md): <= 2x per step.
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
from typing import Any, TypedDict

import _common as c
import anyio
import yaml

BUDGET = 2.0
ASYNC_IMPL = "async def add(a: int, b: int) -> dict[str, int]:\n    return {'sum': a + b}\n"


class Value(TypedDict):
    value: int


def pipeline_yaml(pid: str, skill: str, steps: int) -> str:
    spec: dict[str, Any] = {
        "id": pid,
        "description": f"{steps} sequential additions (benchmark).",
        "inputs": {"x": {"type": "integer"}},
        "steps": [
            {
                "id": f"s{i}",
                "skill": skill,
                "parameters": {"a": "{{ x }}" if i == 0 else f"{{{{ s{i - 1}.sum }}}}", "b": 1},
            }
            for i in range(steps)
        ],
        "outputs": {"result": f"{{{{ s{steps - 1}.sum }}}}"},
    }
    return yaml.safe_dump(spec, sort_keys=False)


def raw_graph(fn: Callable[..., Any], steps: int, is_async: bool) -> Any:
    """N nodes, each calling `fn(value, 1)` and passing the sum on (sync or async nodes)."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(Value)
    if is_async:

        async def node(state: Value) -> Value:
            return {"value": (await fn(a=state["value"], b=1))["sum"]}

    else:

        def node(state: Value) -> Value:  # type: ignore[misc]
            return {"value": fn(a=state["value"], b=1)["sum"]}

    previous = START
    for i in range(steps):
        graph.add_node(f"n{i}", node)
        graph.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    graph.add_edge(previous, END)
    return graph


class Bench:
    """Everything one skill flavour (sync or async) needs: specs, graphs, savers, runners."""

    def __init__(self, server: Any, skill: str, steps: int, tmp: Path, flavour: str) -> None:
        from pipelines.engine.compiler import compile_pipeline
        from pipelines.language.loader import load_spec
        from skills.executors._python import load_entry

        self.server, self.catalog, self.tmp, self.steps = server, server.catalog, tmp, steps
        self.flavour = flavour
        found = self.catalog.get(skill)
        self.fn = load_entry(found.root, "impl:add", skill).fn  # the very function the skill calls
        self.is_async = flavour == "async"
        self.compiled = {
            n: compile_pipeline(load_spec(pipeline_yaml(f"chain-{flavour}-{n}", skill, n))[0]) for n in (1, steps)
        }
        self.raw = {n: raw_graph(self.fn, n, self.is_async) for n in (1, steps)}
        self.expected = {n: n for n in (1, steps)}

    def subject(self, n: int, saver: Any) -> Callable[[], Awaitable[object]]:
        from pipelines.engine.runtime import run_pipeline
        from skills import SkillContext

        compiled, expected = self.compiled[n], self.expected[n]
        artifacts = self.tmp / "artifacts"

        async def run() -> object:
            out = await run_pipeline(
                compiled,
                {"x": 0},
                catalog=self.catalog,
                ctx=SkillContext(),
                run_id=uuid.uuid4().hex[:12],
                artifact_dir=artifacts,
                checkpointer=saver,
            )
            if out["result"] != expected:
                raise AssertionError(f"pipeline: unexpected result {out}")
            return out

        return run

    def reference(self, n: int, saver: Any) -> Callable[[], Awaitable[object]]:
        graph = self.raw[n].compile(checkpointer=saver)
        expected = self.expected[n]

        async def run() -> object:
            config = {"configurable": {"thread_id": uuid.uuid4().hex[:12]}}
            out = await graph.ainvoke({"value": 0}, config)
            if out["value"] != expected:
                raise AssertionError(f"raw graph: unexpected result {out}")
            return out

        return run


async def measure(bench: Bench, reps: dict[str, int]) -> dict[str, dict[str, float]]:
    """Medians of subject and reference, N steps and 1 step, without and with SQLite savers."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    out: dict[str, dict[str, float]] = {}
    n = bench.steps
    async with AsyncExitStack() as stack:
        db = bench.tmp / f"ckpt-{bench.flavour}"
        s_saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(f"{db}-pipeline.db"))
        r_saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(f"{db}-raw.db"))
        for label, (s, r) in (("none", (None, None)), ("sqlite", (s_saver, r_saver))):
            keys = [f"subject{n}", f"reference{n}", "subject1", "reference1"]
            runs = [bench.subject(n, s), bench.reference(n, r), bench.subject(1, s), bench.reference(1, r)]
            for _ in range(3):  # warm-up: graph compile, module import, worker threads, SQLite tables
                for run in runs:
                    await run()
            dbs = (Path(f"{db}-pipeline.db"), Path(f"{db}-raw.db"))
            before = [c.db_bytes(path) for path in dbs]
            samples = await c.rotate(runs, reps[label])
            row = {key: c.median(t) for key, t in zip(keys, samples, strict=True)}
            if label == "sqlite":  # checkpoint bytes of one N-step run plus one 1-step run
                row["bytes_subject"] = (c.db_bytes(dbs[0]) - before[0]) / reps[label]
                row["bytes_reference"] = (c.db_bytes(dbs[1]) - before[1]) / reps[label]
            row["subject_step"] = (row[f"subject{n}"] - row["subject1"]) / (n - 1)
            row["reference_step"] = (row[f"reference{n}"] - row["reference1"]) / (n - 1)
            out[label] = row
    return out


async def measure_mcp(server: Any, pid: str, steps: int, reps: int) -> dict[str, float]:
    """Median of one call of the pipeline tool through the in-memory client (the server opens its
    own SQLite saver and records the run), and how often the server compiled the graph."""
    from mcp import Client

    compiled = server.catalog.get(pid).compiled()
    compiles = 0
    original = compiled.builder.compile

    def counting_compile(*args: Any, **kwargs: Any) -> Any:
        nonlocal compiles
        compiles += 1
        return original(*args, **kwargs)

    compiled.builder.compile = counting_compile
    try:
        async with Client(server) as client:

            async def call() -> None:
                result = await client.call_tool(pid, {"x": 0})
                if result.is_error or (result.structured_content or {}).get("result") != steps:
                    raise AssertionError(f"{pid}: unexpected result {result}")

            for _ in range(3):
                await call()
            compiles = 0
            samples = [await c.atimed(call) for _ in range(reps)]
            per_call = compiles / reps
    finally:
        compiled.builder.compile = original
    graph_compile = c.median([c.timed(lambda: original(checkpointer=None)) for _ in range(5)])
    return {"mcp": c.median(samples), "compiles_per_call": per_call, "graph_compile": graph_compile}


async def profile_runs(bench: Bench, saver_kind: str, reps: int) -> str:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncExitStack() as stack:
        saver = None
        if saver_kind == "sqlite":
            db = bench.tmp / "profile.db"
            saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(str(db)))
        run = bench.subject(bench.steps, saver)
        await run()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(reps):
            await run()
        prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats("pipelines|skills|langgraph", 40)
    return text.getvalue()


async def step_parts(bench: Bench) -> list[tuple[str, float]]:
    """The pieces of one pipeline skill step around the skill's own work, each timed alone (medians)."""
    import asyncio
    import functools

    import anyio.to_thread

    from pipelines.engine.runtime import RunContext
    from pipelines.language.expressions import render
    from skills import SkillContext
    from skills.core.schema import check_arguments
    from skills.executors._python import load_entry

    skill = bench.catalog.get("bench-add")
    spec = bench.compiled[bench.steps].spec
    step = spec.steps[1]
    scope: dict[str, Any] = {"x": 0, "inputs": {"x": 0}, "s0": {"sum": 1}}
    run = RunContext(catalog=bench.catalog, spec=spec, run_id="parts", skill_ctx=SkillContext(), artifact_dir=bench.tmp)
    args = {"a": 1, "b": 1}
    fn = bench.fn
    loop = asyncio.get_running_loop()

    async def deadline() -> None:
        with anyio.fail_after(30):
            pass

    async def anyio_hop() -> None:
        await anyio.to_thread.run_sync(functools.partial(fn, a=1, b=1), abandon_on_cancel=True)

    async def executor_hop() -> None:
        await loop.run_in_executor(None, functools.partial(fn, a=1, b=1))

    async def whole_step() -> None:
        await run.run_skill_step(step, {"scope": scope, "ctl": {}}, None)  # type: ignore[typeddict-item]

    sync_parts: list[tuple[str, Callable[[], object]]] = [
        ("render(step.parameters, scope) ({{ s0.sum }}, fast path)", lambda: render(step.parameters, scope)),
        ("catalog.get(step.skill)", lambda: bench.catalog.get("bench-add")),
        ("check_arguments (input schema)", lambda: check_arguments(skill.name, skill.input_schema, args)),
        (
            "SkillContext(...) per call",
            lambda: SkillContext(skill="bench-add", artifact_dir=bench.tmp, run_id="r", extras={"step": "s1"}),
        ),
        ("load_entry (Path build + stat, cache hit)", lambda: load_entry(skill.root, "impl:add", skill.name)),
        ("finish_step (scope update, progress queued)", lambda: run.finish_step(step, scope, {"sum": 2})),
    ]
    async_parts: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("anyio.fail_after(timeout) enter + exit (FolderSkill.run)", deadline),
        ("anyio.to_thread.run_sync (the skill's thread hop)", anyio_hop),
        ("loop.run_in_executor (the raw sync node's hop)", executor_hop),
        ("RunContext.run_skill_step, whole (skill work included)", whole_step),
    ]
    out = []
    for label, f in sync_parts:
        f()
        out.append((label, c.median([c.timed(f) for _ in range(2000)])))
    for label, af in async_parts:
        await af()
        out.append((label, c.median([await c.atimed(af) for _ in range(500)])))
    return out


def main(steps: int, reps: int, reps_sqlite: int, profile: bool) -> None:
    from mcp_server import create_server

    load = os.getloadavg()[0]

    with c.bench_env() as tmp:
        skills_dir = tmp / "skills"
        c.write_skill(skills_dir, "bench-add")
        c.write_skill(skills_dir, "bench-add-async", impl=ASYNC_IMPL)
        home = tmp / "home"
        (home / "pipelines").mkdir(parents=True)
        pid = "bench-chain"
        (home / "pipelines" / f"{pid}.yaml").write_text(pipeline_yaml(pid, "bench-add", steps), encoding="utf-8")
        server = create_server(home=home, skill_dirs=[skills_dir])
        if server.catalog.find(pid) is None:
            raise SystemExit(f"the pipeline {pid} was not published: {server.catalog.problems()}")
        benches = {
            "sync": Bench(server, "bench-add", steps, tmp, "sync"),
            "async": Bench(server, "bench-add-async", steps, tmp, "async"),
        }
        counts = {"none": reps, "sqlite": reps_sqlite}
        results = {flavour: anyio.run(measure, bench, counts) for flavour, bench in benches.items()}
        e2e = anyio.run(measure_mcp, server, pid, steps, 8)
        reports = (
            [(kind, anyio.run(profile_runs, benches["sync"], kind, 20)) for kind in ("none", "sqlite")]
            if profile
            else []
        )
        parts = anyio.run(step_parts, benches["sync"]) if profile else []

    print(
        f"{steps} sequential skill steps vs {steps} raw LangGraph nodes, {reps} runs each ({reps_sqlite} with SQLite), "
        "rotated (medians)\n"
    )
    rows = []
    for flavour, by_saver in results.items():
        for saver, r in by_saver.items():
            rows.append(
                [
                    f"{flavour} skill, {saver}",
                    c.ms(r[f"subject{steps}"]),
                    c.ms(r[f"reference{steps}"]),
                    c.ms(r["subject1"]),
                    c.ms(r["reference1"]),
                    c.us(r["subject_step"]),
                    c.us(r["reference_step"]),
                    f"{r['subject_step'] / r['reference_step']:.2f}x",
                ]
            )
    c.table(
        ["skill, checkpointer", f"pipeline {steps}", f"raw {steps}", "pipeline 1", "raw 1", "per step", "raw", "ratio"],
        rows,
    )
    print(
        f"\none call of the {steps}-step pipeline tool through the in-memory MCP client (run history, "
        f"SQLite saver opened and closed, result schema): {c.ms(e2e['mcp'])}"
    )
    why = (
        "; CompiledPipeline.graph() caches by id(checkpointer) and PipelineService opens a new saver per run"
        if e2e["compiles_per_call"] > 0.5
        else ""
    )
    print(
        f"LangGraph compiles of the pipeline's graph per tool call: {e2e['compiles_per_call']:.2f} "
        f"({c.ms(e2e['graph_compile'])} each{why})"
    )
    if parts:
        print("\nthe pieces of one pipeline skill step (sync skill), each timed alone (medians)\n")
        c.table(["piece", "median"], [[label, c.us(t)] for label, t in parts])
    for kind, report in reports:
        print(f"\ncProfile, 20 runs of the {steps}-step pipeline (sync skill, checkpointer {kind})\n")
        print(report.strip())
    print(f"\n{c.load_note(load)}")
    print()
    for flavour, by_saver in results.items():
        for saver, r in by_saver.items():
            print(
                f"ABS pipeline_step[{flavour},{saver}] per step {c.us(r['subject_step'])} "
                f"raw {c.us(r['reference_step'])}; run of {steps} {c.ms(r[f'subject{steps}'])} "
                f"raw {c.ms(r[f'reference{steps}'])}"
            )
    sq = results["sync"]["sqlite"]
    print(
        f"ABS pipeline_step.checkpoint_bytes per run of {steps} + run of 1: {sq['bytes_subject'] / 1e3:.0f} kB "
        f"raw {sq['bytes_reference'] / 1e3:.0f} kB (informational)"
    )
    print(
        f"ABS pipeline_step.mcp_call run of {steps} {c.ms(e2e['mcp'])} ({c.us(e2e['mcp'] / steps)} per step, "
        "informational)"
    )
    print(
        f"ABS pipeline_step.graph_compiles_per_call {e2e['compiles_per_call']:.2f} x {c.ms(e2e['graph_compile'])} "
        "(informational)"
    )
    for flavour, by_saver in results.items():
        for saver, r in by_saver.items():
            print(c.ratio_line(f"pipeline_step[{flavour},{saver}]", r["subject_step"] / r["reference_step"], BUDGET))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="steps of the pipeline (default: 50)")
    parser.add_argument("--reps", type=int, default=30, help="runs of each graph, no checkpointer (default: 30)")
    parser.add_argument("--reps-sqlite", type=int, default=16, help="runs of each graph with SQLite (default: 16)")
    parser.add_argument("--profile", action="store_true", help="print cProfiles of the pipeline runs")
    args = parser.parse_args()
    main(args.steps, args.reps, args.reps_sqlite, args.profile)
