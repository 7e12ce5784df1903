"""The load of `http_load.py`, in its own process: N real `mcp.Client`s calling one tool.

    python bench/_http_load.py URL --clients 200 --seconds 6 --mode legacy|auto

Every client connects (legacy: `initialize` and a session with its GET stream; auto: the
2026-07-28 era, one POST per request) and makes one call; once all are connected, each calls
`add` in a loop for `--seconds`. Prints one JSON line: calls completed inside the window,
errors by kind, p50 and p99 latency of a call, and how long connecting took.
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import time
from collections import Counter
from typing import Any

import _common as c
import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

ARGS = {"a": 2, "b": 3}


async def load(url: str, clients: int, seconds: float, mode: str, server_pid: int | None) -> dict[str, Any]:
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    arrived = 0
    go = anyio.Event()
    window: dict[str, float] = {}
    began = time.perf_counter()
    # One TLS context for all (loopback is plain HTTP anyway): loading the CA bundle per client
    # costs ~50 ms of this process's CPU each, which would be measured as connect time.
    tls = ssl.create_default_context()
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)

    def arrive() -> None:
        nonlocal arrived
        arrived += 1
        if arrived == clients:
            window["start"] = time.perf_counter()
            window["end"] = window["start"] + seconds
            window["cpu"] = c.cpu_seconds(server_pid) if server_pid else 0.0
            go.set()

    async def call(client: Client) -> None:
        result = await client.call_tool("add", ARGS)
        if result.is_error or result.structured_content != {"sum": 5}:
            raise ValueError(f"unexpected result {result.content}")

    async def one() -> None:
        try:
            http = httpx2.AsyncClient(timeout=timeout, verify=tls)
            async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                await call(client)
                arrive()
                await go.wait()
                while (start := time.perf_counter()) < window["end"]:
                    try:
                        await call(client)
                    except Exception as exc:  # counted, not fatal: the figure is how many fail
                        errors[type(exc).__name__] += 1
                        continue
                    if time.perf_counter() <= window["end"]:
                        latencies.append(time.perf_counter() - start)
                await stop.wait()  # sessions close together, after the window
        except Exception as exc:  # a client that cannot connect is an error of the server under test
            errors[f"connect: {type(exc).__name__}"] += 1
            if not go.is_set():
                arrive()

    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(one)
        await go.wait()
        await anyio.sleep(window["end"] - time.perf_counter())
        server_cpu = c.cpu_seconds(server_pid) - window["cpu"] if server_pid else 0.0
        stop.set()
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {
        "calls": len(latencies),
        "seconds": seconds,
        "calls_per_s": len(latencies) / seconds,
        "errors": dict(errors),
        "p50": statistics.median(latencies) if latencies else 0.0,
        "p99": quantiles[98],
        "connect_s": window.get("start", time.perf_counter()) - began,
        "server_cpu_s": server_cpu,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--mode", choices=("legacy", "auto"), default="legacy")
    parser.add_argument("--server-pid", type=int, default=None, help="report this process's CPU inside the window")
    args = parser.parse_args()
    print(json.dumps(anyio.run(load, args.url, args.clients, args.seconds, args.mode, args.server_pid)))
