"""Memory of idle HTTP sessions, their reaping, and one client flooding the server with sessions.

What is measured (servers in their own processes, raw HTTP from this one):

1. memory per idle session: N sessions opened (`initialize` + `notifications/initialized`, then
   left alone, as an abandoned or hostile client leaves them); resident memory (VmRSS) of the
   server before and after, per session; for `orchestrator serve` and a bare `MCPServer`;
2. reaping (ours, `--session-idle-timeout`): time until the idle sessions are closed, memory
   after, and the growth when N more are opened (about 0 when closed sessions are not kept);
3. a flood: one address opens `--flood` sessions against default limits while a second address
   (127.0.0.2) opens one and calls a tool; how many of the flooder's sessions the server kept,
   and whether the second client was refused.

    .venv/bin/python bench/http_sessions.py [--sessions 500] [--flood 1200]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import _common as c
import anyio
import httpx2
from http_load import HERE, free_port, start, stop
from spawn import orchestrator_command

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
IDLE_TIMEOUT = 10.0


def session_headers(session: str) -> dict[str, str]:
    return HEADERS | {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}


async def open_sessions(http: httpx2.AsyncClient, url: str, count: int, parallel: int = 16) -> list[str | None]:
    """Open `count` sessions, `parallel` at a time; the session id of each (None where refused)."""
    ids: list[str | None] = [None] * count
    limiter = anyio.CapacityLimiter(parallel)

    async def one(i: int) -> None:
        async with limiter:
            response = await http.post(url, json=INITIALIZE, headers=HEADERS)
            session = response.headers.get("mcp-session-id")
            if response.status_code == 200 and session:
                done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                await http.post(url, json=done, headers=session_headers(session))
                ids[i] = session

    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(one, i)
    return ids


async def alive(http: httpx2.AsyncClient, url: str, session: str) -> bool:
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    return (await http.post(url, json=ping, headers=session_headers(session))).status_code == 200


async def per_session(pid: int, url: str, count: int) -> tuple[float, list[str | None]]:
    """Bytes of resident memory each of `count` new idle sessions costs the server."""
    async with httpx2.AsyncClient(timeout=60) as http:
        await open_sessions(http, url, 20)  # warm-up: first-use allocations are not per session
        before = c.rss(pid)
        ids = await open_sessions(http, url, count)
        return (c.rss(pid) - before) / count, ids


async def measure(args: argparse.Namespace) -> None:
    load_start = os.getloadavg()[0]
    with c.bench_env() as tmp:
        home = tmp / "home"
        skills = c.write_skill(tmp / "skills", "add").parent
        env = dict(os.environ, ORCHESTRATOR_HOME=str(home), PYTHONPATH=os.pathsep.join([str(c.REPO), str(HERE)]))
        script, script_args, label = orchestrator_command(home)
        base = [script, *script_args, "--transport", "http", "--skills", str(skills)]
        n = args.sessions
        room = str(4 * n)  # limits out of the way: this part measures memory, not fairness
        ours_port, bare_port, flood_port = free_port(), free_port(), free_port()
        limits = [
            "--session-idle-timeout",
            str(IDLE_TIMEOUT),
            "--max-sessions",
            room,
            "--max-sessions-per-client",
            room,
        ]
        said: list[str] = []
        ours = start([*base, "--port", str(ours_port), "--log-level", "INFO", *limits], env, said)
        bare = start([sys.executable, str(HERE / "_bare_http_server.py"), str(bare_port)], env)
        ours_url, bare_url = f"http://127.0.0.1:{ours_port}/mcp", f"http://127.0.0.1:{bare_port}/mcp"
        try:
            ours_each, ids = await per_session(ours.pid, ours_url, n)
            opened_at = time.perf_counter()
            bare_each, _ = await per_session(bare.pid, bare_url, n)
            async with httpx2.AsyncClient(timeout=60) as http:
                # A request would keep its session alive: watch the server's log instead.
                with anyio.fail_after(IDLE_TIMEOUT * 6):
                    while sum("closed HTTP session" in line for line in said) < len(ids) + 20:
                        await anyio.sleep(0.1)
                reaped_after = time.perf_counter() - opened_at
                assert not await alive(http, ours_url, next(s for s in ids if s))
                after_reap = c.rss(ours.pid)
                await open_sessions(http, ours_url, n)
                regrowth = (c.rss(ours.pid) - after_reap) / n
        finally:
            stop(ours)
            stop(bare)

        flooder = start([*base, "--port", str(flood_port), "--log-level", "WARNING"], env)
        flood_url = f"http://127.0.0.1:{flood_port}/mcp"
        try:
            async with httpx2.AsyncClient(timeout=60) as http:
                flood_ids = await open_sessions(http, flood_url, args.flood)
                kept = sum([await alive(http, flood_url, s) for s in flood_ids if s])
            transport = httpx2.AsyncHTTPTransport(local_address="127.0.0.2")
            async with httpx2.AsyncClient(timeout=60, transport=transport) as other:
                second = (await other.post(flood_url, json=INITIALIZE, headers=HEADERS)).status_code
        finally:
            stop(flooder)

    print(f"{n} idle HTTP sessions (initialize + initialized, then nothing), resident memory of the server\n")
    c.table(
        ["server", "per idle session", f"{n} sessions"],
        [
            [f"{label}", f"{ours_each / 1024:.1f} KiB", f"{ours_each * n / 2**20:.1f} MiB"],
            ["bare MCPServer", f"{bare_each / 1024:.1f} KiB", f"{bare_each * n / 2**20:.1f} MiB"],
        ],
    )
    print(
        f"\nreaping (--session-idle-timeout {IDLE_TIMEOUT:g}): all {n} closed "
        f"{reaped_after:.1f} s after the last was opened; "
        f"{n} more sessions afterwards grew memory by {regrowth / 1024:.1f} KiB each "
        "(about 0 when nothing of a closed session is kept)"
    )
    print(
        f"flood (default limits): one address opened {args.flood} sessions, the server kept {kept} of them; "
        f"a second address then opened a session: HTTP {second}"
    )
    print(f"\n{c.load_note(load_start)}\n")
    print(f"ABS http_sessions.per_idle_session {ours_each / 1024:.1f} KiB (bare MCPServer {bare_each / 1024:.1f} KiB)")
    print(f"ABS http_sessions.flood kept {kept} of {args.flood}; second client HTTP {second}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=500, help="idle sessions to measure (default: 500)")
    parser.add_argument("--flood", type=int, default=1200, help="sessions the flooding client opens (default: 1200)")
    anyio.run(measure, parser.parse_args())
