"""tools/list with 1,000 generated skills vs 10, in-memory, both protocol eras; and load time.

    .venv/bin/python bench/tools_list.py [--reps N] [--profile]

Budgets (ARCHITECTURE.md): tools/list with 1,000 skills <= 3x tools/list with 10 skills;
1,000 skills load in < 300 ms. Besides the end-to-end latency through `mcp.Client`, the
server's own share is timed by an outermost server middleware, and the SDK's per-request
passes over the listing are timed one by one. `--profile` adds a cProfile of the listing.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import _common as c
import anyio
from mcp import Client
from mcp_types import ListToolsResult
from mcp_types import methods as wire_methods

from mcp_server import OrchestratorServer, create_server
from skills import Catalog, FolderSource

RATIO_BUDGET = 3.0
LOAD_BUDGET = 0.300
ERAS = (("2026-07-28", "auto"), ("handshake", "legacy"))
VERSIONS = {"2026-07-28": "2026-07-28", "handshake": "2025-11-25"}


def load_catalog(folder: Path) -> Catalog:
    return Catalog([FolderSource(folder, "user", label=str(folder))])


def build_server(home: Path, folder: Path) -> OrchestratorServer:
    # No built-in skills: the listing holds exactly the 10 or the 1,000 generated ones, one tool
    # per skill on one page (catalogue mode and paging are measured by bench/wild.py).
    return create_server(
        home=home, skill_dirs=[folder], builtin=False, pipelines=False, catalogue="off", page_size=5_000
    )


def lister(client: Client, expected: int) -> Callable[[], Awaitable[ListToolsResult]]:
    async def list_tools() -> ListToolsResult:
        # bypass: every sample reaches the server (the client's response cache would not).
        result = await client.list_tools(cache_mode="bypass")
        if len(result.tools) != expected or result.next_cursor is not None:
            raise AssertionError(f"expected one page of {expected} tools, got {len(result.tools)}")
        return result

    return list_tools


class EraResult:
    def __init__(self, big: list[float], small: list[float], server_big: float, server_small: float) -> None:
        self.big, self.small = c.median(big), c.median(small)
        self.server_big, self.server_small = server_big, server_small
        self.stages: list[tuple[str, float]] = []
        self.profile = ""


async def measure_era(
    era: str, mode: str, big: OrchestratorServer, small: OrchestratorServer, reps: int, profile: bool
) -> EraResult:
    clocks = c.ServerClock("tools/list"), c.ServerClock("tools/list")
    for server, clock in zip((big, small), clocks, strict=True):
        server._lowlevel_server.middleware.insert(0, clock)
    try:
        async with Client(big, mode=mode) as big_client, Client(small, mode=mode) as small_client:
            list_big, list_small = lister(big_client, 1000), lister(small_client, 10)
            for _ in range(3):  # warm-up: server tool cache, validators, code paths
                await list_big()
                await list_small()
            for clock in clocks:
                clock.samples.clear()
            t_big, t_small = await c.interleave(list_big, list_small, reps)
            out = EraResult(t_big, t_small, c.median(clocks[0].samples), c.median(clocks[1].samples))
            out.stages = await stages(big, big_client, VERSIONS[era])
            if profile:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(10):
                    await list_big()
                prof.disable()
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
                out.profile = text.getvalue()
    finally:
        for server, clock in zip((big, small), clocks, strict=True):
            server._lowlevel_server.middleware.remove(clock)
    return out


async def stages(server: OrchestratorServer, client: Client, version: str) -> list[tuple[str, float]]:
    """The passes the SDK makes over one 1,000-tool listing, each timed alone (best of 15)."""
    tools = await server.list_tools()
    model = ListToolsResult(tools=tools)
    dumped = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    wire = wire_methods.serialize_server_result("tools/list", version, dumped)
    session: Any = client.session
    parsed = ListToolsResult.model_validate(wire, by_name=False)

    def absorb() -> object:
        return session._absorb_tool_listing(parsed, complete=True)

    steps: list[tuple[str, Callable[[], object]]] = [
        (
            "server  handler result -> dict (runner._dump_result: model_dump)",
            lambda: model.model_dump(by_alias=True, mode="json", exclude_none=True),
        ),
        (
            "server  surface check (methods.serialize_server_result: validate + dump)",
            lambda: wire_methods.serialize_server_result("tools/list", version, dumped),
        ),
        (
            "client  surface check (methods.validate_server_result: validate + dump)",
            lambda: wire_methods.validate_server_result("tools/list", version, wire),
        ),
        (
            "client  parse (ListToolsResult.model_validate)",
            lambda: ListToolsResult.model_validate(wire, by_name=False),
        ),
        ("client  session._absorb_tool_listing", absorb),
    ]
    timings = []
    for label, fn in steps:
        fn()
        timings.append((label, min(c.timed(fn) for _ in range(15))))
    start = time.perf_counter()
    for _ in range(15):
        await server.list_tools()
    hit = (time.perf_counter() - start) / 15
    timings.insert(0, ("server  OrchestratorServer.list_tools() (cache hit)", hit))
    return timings


def main(reps: int, profile: bool) -> None:
    with c.bench_env() as tmp:
        home = tmp / "home"
        big_dir = c.write_skills(tmp / "skills-1000", 1000)
        small_dir = c.write_skills(tmp / "skills-10", 10)
        build_server(home, small_dir)  # creates the home once, outside the measurements

        # Load: a fresh Catalog (and a fresh server) reads every folder from disk each time.
        load_cat = [c.timed(lambda: load_catalog(big_dir)) for _ in range(5)]
        # Cold: a fresh home each time, so every folder is parsed (no stamp cache yet).
        load_cold = [c.timed(lambda i=i: build_server(home.parent / f"cold-{i}", big_dir)) for i in range(3)]
        load_srv = [c.timed(lambda: build_server(home, big_dir)) for _ in range(5)]
        load_small = [c.timed(lambda: build_server(home, small_dir)) for _ in range(5)]

        big, small = build_server(home, big_dir), build_server(home, small_dir)
        if len(big.catalog) != 1000 or len(small.catalog) != 10:
            raise AssertionError(f"loaded {len(big.catalog)} and {len(small.catalog)} skills")
        results = {era: anyio.run(measure_era, era, mode, big, small, reps, profile) for era, mode in ERAS}

    print("load (fresh objects, files in the OS cache), median of 5\n")
    c.table(
        ["what", "median", "min"],
        [
            ["Catalog([FolderSource(1,000 folders)])", c.ms(c.median(load_cat)), c.ms(min(load_cat))],
            ["create_server(skill_dirs=[1,000 folders]), cold", c.ms(c.median(load_cold)), c.ms(min(load_cold))],
            ["create_server(skill_dirs=[1,000 folders]), warm", c.ms(c.median(load_srv)), c.ms(min(load_srv))],
            ["create_server(skill_dirs=[10 folders])", c.ms(c.median(load_small)), c.ms(min(load_small))],
        ],
    )
    print(f"\ntools/list through the in-memory client, {reps} samples each, interleaved (medians)\n")
    c.table(
        ["era", "1,000 skills", "10 skills", "ratio", "server share 1,000 / 10", "server ratio"],
        [
            [
                era,
                c.ms(r.big),
                c.ms(r.small),
                f"{r.big / r.small:.1f}x",
                f"{c.ms(r.server_big)} / {c.ms(r.server_small)}",
                f"{r.server_big / r.server_small:.1f}x",
            ]
            for era, r in results.items()
        ],
    )
    for era, r in results.items():
        print(f"\nSDK passes over one 1,000-tool listing, {era} (best of 15)\n")
        c.table(["pass", "time"], [[label, c.ms(t)] for label, t in r.stages])
    for era, r in results.items():
        if r.profile:
            print(f"\ncProfile, 10 listings of 1,000 tools, {era} (sorted by own time)\n")
            print(r.profile.strip())
    print()
    load = c.median(load_srv)
    print(c.abs_line("tools_list.load_1000", c.ms(load), "< 300 ms", load < LOAD_BUDGET))
    cold = c.median(load_cold)
    print(c.abs_line("tools_list.load_1000_cold", c.ms(cold), "< 300 ms", cold < LOAD_BUDGET))
    for era, r in results.items():
        print(
            f"ABS tools_list.list[{era}] 1000: {c.ms(r.big)} 10: {c.ms(r.small)} "
            f"(server side {c.ms(r.server_big)} / {c.ms(r.server_small)})"
        )
    for era, r in results.items():
        print(
            c.ratio_line(
                f"tools_list.server[{era}]",
                r.server_big / r.server_small,
                RATIO_BUDGET,
                "(server share only)",
            )
        )
    for era, r in results.items():
        print(c.ratio_line(f"tools_list[{era}]", r.big / r.small, RATIO_BUDGET))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40, help="samples per listing and era (default: 40)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the 1,000-tool listing")
    args = parser.parse_args()
    main(args.reps, args.profile)
