"""One skill tool call in-memory vs a bare `MCPServer` tool doing the same work, both eras.

The skill is a python skill adding two ints with explicit schemas (sync function, so it runs
in a worker process of `skills._pool`; a sync `@mcp.tool()` runs in a worker thread); the
reference is `@mcp.tool()` on the same function returning a TypedDict, so both answer with
structured content checked against an output schema. Beside wall time, the CPU time per call.

    .venv/bin/python bench/call.py [--reps N] [--profile]

Budget (ARCHITECTURE.md): <= 1.3x the bare tool.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
from collections.abc import Awaitable, Callable
from typing import Any, TypedDict

import _common as c
import anyio
from mcp import Client
from mcp.server import MCPServer
from mcp_types import CallToolResult

from mcp_server import OrchestratorServer, create_server

BUDGET = 1.3
ERAS = (("2026-07-28", "auto"), ("handshake", "legacy"))
ARGS = {"a": 2, "b": 3}


class Sum(TypedDict):
    sum: int


def bare_server() -> MCPServer:
    mcp = MCPServer(name="bare")

    @mcp.tool()
    def add(a: int, b: int) -> Sum:
        """Add two integers."""
        return {"sum": a + b}

    return mcp


def caller(client: Client, name: str) -> Callable[[], Awaitable[CallToolResult]]:
    async def call() -> CallToolResult:
        result = await client.call_tool(name, ARGS)
        if result.is_error or result.structured_content != {"sum": 5}:
            raise AssertionError(f"{name}: unexpected result {result}")
        return result

    return call


async def measure_era(mode: str, subject: OrchestratorServer, reference: MCPServer, reps: int) -> dict[str, Any]:
    clocks = c.ServerClock("tools/call"), c.ServerClock("tools/call")
    servers = (subject, reference)
    for server, clock in zip(servers, clocks, strict=True):
        server._lowlevel_server.middleware.insert(0, clock)
    try:
        async with Client(subject, mode=mode) as s_client, Client(reference, mode=mode) as r_client:
            s_call, r_call = caller(s_client, "bench-add"), caller(r_client, "add")
            for _ in range(50):  # warm-up: module import, validators, worker thread, output schemas
                await s_call()
                await r_call()
            for clock in clocks:
                clock.samples.clear()
            t_s, t_r = await c.interleave(s_call, r_call, reps)
            out: dict[str, Any] = {
                "subject": c.median(t_s),
                "reference": c.median(t_r),
                "server_subject": c.median(clocks[0].samples),
                "server_reference": c.median(clocks[1].samples),
            }
            out["cpu_subject"], out["cpu_reference"] = await cpu_per_call(s_call, r_call, max(100, reps // 15))
    finally:
        for server, clock in zip(servers, clocks, strict=True):
            server._lowlevel_server.middleware.remove(clock)
    return out


async def cpu_per_call(
    subject: Callable[[], Awaitable[object]], reference: Callable[[], Awaitable[object]], block: int
) -> tuple[float, float]:
    """Median CPU seconds per call (this process, client included, and the skill's worker
    process), over blocks of `block` calls of each, alternating: load moves it less than wall time."""
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(10):
        k = i % 2
        start = c.family_cpu()
        for _ in range(block):
            await (subject, reference)[k]()
        samples[k].append((c.family_cpu() - start) / block)
    return c.median(samples[0]), c.median(samples[1])


async def direct_split(subject: OrchestratorServer, reference: MCPServer) -> list[tuple[str, float]]:
    """`call_tool` of each server without any client or transport (median of 300)."""
    out = []
    for label, fn in (
        ("OrchestratorServer.call_tool('bench-add')", lambda: subject.call_tool("bench-add", ARGS)),
        ("MCPServer.call_tool('add')", lambda: reference.call_tool("add", ARGS)),
    ):
        for _ in range(30):
            await fn()
        samples = [await c.atimed(fn) for _ in range(300)]
        out.append((label, c.median(samples)))
    return out


async def overhead_steps(subject: OrchestratorServer) -> list[tuple[str, float]]:
    """The steps of `OrchestratorServer.call_tool` around the skill's own work, each alone."""
    import anyio.to_thread

    from mcp_server._results import to_result
    from skills.core.schema import check_arguments, check_output
    from skills.executors._python import is_async_entry, run_python

    skill = subject.catalog.get("bench-add")
    schema, out_schema = skill.input_schema, skill.output_schema or {}
    value = {"sum": 5}
    ctx = subject.skill_context(skill, None)

    async def deadline() -> None:
        with anyio.fail_after(60):
            pass

    async def in_thread() -> None:
        await anyio.to_thread.run_sync(lambda: None)

    sync_steps: list[tuple[str, Callable[[], object]]] = [
        ("catalog.find(name)", lambda: subject.catalog.find("bench-add")),
        ("check_arguments (jsonschema iter_errors)", lambda: check_arguments(skill.name, schema, ARGS)),
        ("skill_context (run id, SkillContext, a def skill's placement)", lambda: subject.skill_context(skill, None)),
        ("is_async_entry (stat, cache hit)", lambda: is_async_entry(skill.root, "impl:add")),
        ("check_output (jsonschema, inside to_result)", lambda: check_output(skill.name, out_schema, value)),
        ("to_result (check_output + json.dumps + CallToolResult)", lambda: to_result(skill, value)),
    ]
    async_steps: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("anyio.fail_after(timeout) enter + exit", deadline),
        ("anyio.to_thread.run_sync (the bare tool pays it too)", in_thread),
        (
            "run_python (worker process round trip + the skill's work)",
            lambda: run_python(skill.root, "impl:add", skill.name, ARGS, ctx, 30),
        ),
    ]
    out = []
    for label, fn in sync_steps:
        fn()
        out.append((label, c.median([c.timed(fn) for _ in range(2000)])))
    for label, afn in async_steps:
        await afn()
        out.append((label, c.median([await c.atimed(afn) for _ in range(500)])))
    return out


async def profile_direct(subject: OrchestratorServer) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        await subject.call_tool("bench-add", ARGS)
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats("mcp_server|skills|jsonschema", 25)
    return text.getvalue()


def main(reps: int, profile: bool) -> None:
    with c.bench_env() as tmp:
        skills_dir = tmp / "skills"
        c.write_skill(skills_dir, "bench-add")
        subject = create_server(home=tmp / "home", skill_dirs=[skills_dir])
        reference = bare_server()
        results = {era: anyio.run(measure_era, mode, subject, reference, reps) for era, mode in ERAS}
        split = anyio.run(direct_split, subject, reference)
        steps = anyio.run(overhead_steps, subject)
        report = anyio.run(profile_direct, subject) if profile else ""

    print(f"one tools/call through the in-memory client, {reps} samples each, interleaved (medians)\n")
    c.table(
        ["era", "skill", "bare tool", "ratio", "server share skill / bare", "server ratio"],
        [
            [
                era,
                c.ms(r["subject"]),
                c.ms(r["reference"]),
                f"{r['subject'] / r['reference']:.2f}x",
                f"{c.ms(r['server_subject'])} / {c.ms(r['server_reference'])}",
                f"{r['server_subject'] / r['server_reference']:.2f}x",
            ]
            for era, r in results.items()
        ],
    )
    print("\nthe servers' own call_tool, no client or transport (median of 300)\n")
    c.table(["what", "median"], [[label, c.ms(t)] for label, t in split])
    print("\nsteps of OrchestratorServer.call_tool, each timed alone (medians)\n")
    c.table(["step", "median"], [[label, c.us(t)] for label, t in steps])
    if report:
        print("\ncProfile, 2,000 direct OrchestratorServer.call_tool (cumulative, our code and jsonschema)\n")
        print(report.strip())
    print()
    for era, r in results.items():
        print(
            f"ABS call[{era}] skill {c.ms(r['subject'])} bare {c.ms(r['reference'])} "
            f"(+{c.ms(r['subject'] - r['reference'])})"
        )
    for era, r in results.items():
        print(
            f"ABS call.cpu[{era}] skill {c.us(r['cpu_subject'])} bare {c.us(r['cpu_reference'])} per call "
            f"({r['cpu_subject'] / r['cpu_reference']:.2f}x, CPU of this process, client included, and the worker)"
        )
    for era, r in results.items():
        print(c.ratio_line(f"call[{era}]", r["subject"] / r["reference"], BUDGET))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1500, help="calls per server and era (default: 1500)")
    parser.add_argument("--profile", action="store_true", help="print cProfiles of both servers' calls")
    args = parser.parse_args()
    main(args.reps, args.profile)
