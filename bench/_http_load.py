"""The load of `http_load.py`, in its own process: N real `mcp.Client`s calling one tool.

    python bench/_http_load.py URL --clients 200 --seconds 4 --mode legacy|auto [--server-pid PID]
    python bench/_http_load.py URL --clients 200 --burst 20 --mode legacy|auto [--server-pid PID]

Every client connects (legacy: `initialize` and a session with its GET stream; auto: the
2026-07-28 era, one POST per request) and makes one call; then the process prints one JSON line
(`connect_s`, connect errors) and waits. Each `go` line on stdin runs one window: every client
calls `add` in a loop for `--seconds`, and one JSON line reports calls completed inside the
window, errors by kind, p50 and p99 latency and the server's CPU seconds in the window. The
clients stay connected between windows, so windows against two servers can alternate without
paying for 200 connections each time. End of stdin closes every client.

With `--burst K` the process runs one burst instead and exits: every client connects at once,
makes K calls and closes, as a fleet of short-lived clients does; one JSON line reports every
call's latency quantiles (the first call of a client, which lists the tools, included), the
connect times and the calls per second of the whole burst.
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import _common as c
import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

ARGS = {"a": 2, "b": 3}


@dataclass
class Window:
    """One measured stretch of load, shared by every client task."""

    end: float
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class Shared:
    current: Window | None = None
    """The window running now; None once stdin ended (clients close)."""
    begun: anyio.Event = field(default_factory=anyio.Event)
    """Set when a window starts (or the run ends); replaced for the next one."""
    connected: int = 0
    finished: int = 0
    all_connected: anyio.Event = field(default_factory=anyio.Event)
    all_finished: anyio.Event = field(default_factory=anyio.Event)
    connect_errors: Counter[str] = field(default_factory=Counter)


async def run(url: str, clients: int, seconds: float, mode: str, server_pid: int | None) -> None:
    shared = Shared()
    began = time.perf_counter()
    # One TLS context for all (loopback is plain HTTP anyway): loading the CA bundle per client
    # costs ~50 ms of this process's CPU each, which would be measured as connect time.
    tls = ssl.create_default_context()
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    alive = clients

    def connected() -> None:
        shared.connected += 1
        if shared.connected == alive:
            shared.all_connected.set()

    def finished() -> None:
        shared.finished += 1
        if shared.finished == alive:
            shared.all_finished.set()

    async def call(client: Client) -> None:
        result = await client.call_tool("add", ARGS)
        if result.is_error or result.structured_content != {"sum": 5}:
            raise ValueError(f"unexpected result {result.content}")

    async def one() -> None:
        nonlocal alive
        try:
            http = httpx2.AsyncClient(timeout=timeout, verify=tls)
            async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                await call(client)
                connected()
                window = None
                while True:
                    while shared.current is window:  # wait for the next window (or the end)
                        await shared.begun.wait()
                    window = shared.current
                    if window is None:
                        return
                    while (start := time.perf_counter()) < window.end:
                        try:
                            await call(client)
                        except Exception as exc:  # counted, not fatal: the figure is how many fail
                            window.errors[_leaf(exc)] += 1
                            continue
                        if time.perf_counter() <= window.end:
                            window.latencies.append(time.perf_counter() - start)
                    finished()
        except Exception as exc:  # a client that cannot connect (or is cut off) is an error of the server
            shared.connect_errors[f"connect: {_leaf(exc)}"] += 1
            alive -= 1
            if shared.connected == alive:
                shared.all_connected.set()
            if shared.finished == alive:
                shared.all_finished.set()

    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(one)
        await shared.all_connected.wait()
        say({"connect_s": time.perf_counter() - began, "errors": dict(shared.connect_errors)})
        reported = Counter(shared.connect_errors)
        while (await anyio.to_thread.run_sync(sys.stdin.readline)).strip() == "go":
            result = await measure(shared, seconds, server_pid)
            result["errors"] |= dict(shared.connect_errors - reported)  # clients cut off in the window
            reported = Counter(shared.connect_errors)
            say(result)
        shared.current = None
        shared.begun.set()


async def measure(shared: Shared, seconds: float, server_pid: int | None) -> dict[str, Any]:
    cpu = c.cpu_seconds(server_pid) if server_pid else 0.0
    window = shared.current = Window(end=time.perf_counter() + seconds)
    shared.finished = 0
    shared.all_finished = anyio.Event()
    begun, shared.begun = shared.begun, anyio.Event()
    begun.set()
    await anyio.sleep(window.end - time.perf_counter())
    server_cpu = c.cpu_seconds(server_pid) - cpu if server_pid else 0.0
    await shared.all_finished.wait()  # calls in flight at the end complete before the next window
    latencies = window.latencies
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {
        "calls": len(latencies),
        "calls_per_s": len(latencies) / seconds,
        "errors": dict(window.errors),
        "p50": statistics.median(latencies) if latencies else 0.0,
        "p99": quantiles[98],
        "server_cpu_s": server_cpu,
    }


async def burst(url: str, clients: int, calls: int, mode: str, server_pid: int | None) -> None:
    """All clients connect at once, make `calls` calls each and close; one JSON line of figures."""
    tls = ssl.create_default_context()
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    latencies: list[float] = []
    firsts: list[float] = []
    connects: list[float] = []
    errors: Counter[str] = Counter()

    async def one() -> None:
        try:
            start = time.perf_counter()
            http = httpx2.AsyncClient(timeout=timeout, verify=tls)
            async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                connects.append(time.perf_counter() - start)
                for i in range(calls):
                    start = time.perf_counter()
                    result = await client.call_tool("add", ARGS)
                    if result.is_error or result.structured_content != {"sum": 5}:
                        errors[f"unexpected result {result.content}"[:100]] += 1
                        continue
                    latencies.append(time.perf_counter() - start)
                    if i == 0:
                        firsts.append(latencies[-1])
        except Exception as exc:  # counted: the figure is how many fail
            errors[_leaf(exc)] += 1

    cpu = c.cpu_seconds(server_pid) if server_pid else 0.0
    began, own = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(one)
    wall = time.perf_counter() - began

    def q(samples: list[float], at: int) -> float:
        return statistics.quantiles(samples, n=100)[at - 1] if len(samples) > 1 else 0.0

    say(
        {
            "calls": len(latencies),
            "calls_per_s": len(latencies) / wall,
            "errors": dict(errors),
            "p50": q(latencies, 50),
            "p99": q(latencies, 99),
            "first_p50": q(firsts, 50),
            "first_p99": q(firsts, 99),
            "connect_p50": q(connects, 50),
            "connect_p99": q(connects, 99),
            "server_cpu_s": c.cpu_seconds(server_pid) - cpu if server_pid else 0.0,
            "load_cpu_s": time.process_time() - own,
        }
    )


def say(data: dict[str, Any]) -> None:
    print(json.dumps(data), flush=True)


def _leaf(exc: BaseException) -> str:
    """The first real error inside task-group wrappers, as `Type: message` (message cut short)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {str(exc)[:80]}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--mode", choices=("legacy", "auto"), default="legacy")
    parser.add_argument("--server-pid", type=int, default=None, help="report this process's CPU in each window")
    parser.add_argument("--burst", type=int, default=0, metavar="K", help="one burst of K calls per client, then exit")
    args = parser.parse_args()
    if args.burst:
        anyio.run(burst, args.url, args.clients, args.burst, args.mode, args.server_pid)
    else:
        anyio.run(run, args.url, args.clients, args.seconds, args.mode, args.server_pid)
