"""200 concurrent MCP clients over streamable HTTP: `orchestrator serve` vs a bare `MCPServer`.

What is measured: each server runs in its own process on a loopback port; for each, a load
process (`_http_load.py`) connects N real `mcp.Client`s (the SDK's own, `legacy` mode by
default: the `initialize` handshake and a stateful session with its GET stream, as Claude
Desktop's HTTP clients do; `--mode auto` speaks 2026-07-28, one POST per request). The clients
stay connected; windows of load then alternate between the two servers (ABBA), every client
calling `add(2, 3)` in a loop. Calls completed inside a window give calls/s, their latencies
p50 and p99; failed calls and lost clients are errors; the server's CPU seconds in the window
per call say what each server spends, whatever else the machine is doing. The subject is a
python skill adding two ints (skill.yaml schemas), the reference the `@mcp.tool()` of `call.py`
doing the same: both run the function in a worker thread and return structured content.

    .venv/bin/python bench/http_load.py [--clients 200] [--seconds 4] [--rounds 6] [--mode legacy|auto]
    .venv/bin/python bench/http_load.py --calls 20   # bursts of short-lived clients instead (below)
    .venv/bin/python bench/http_load.py --profile    # cProfile of our server under the load

With `--calls K`, each round is a burst instead of a window: N fresh clients connect at once,
make K calls each and close (the connect, the first call that lists the tools, everything a
fleet of short-lived clients costs), alternating between the servers (ABBA); calls/s is the
burst's calls over its wall time, p99 over every call of the burst.

Budgets (ARCHITECTURE.md): >= 0.8x the bare server's calls/s (printed as reference/subject
<= 1.25) and p99 latency <= 1.5x the bare server's.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import _common as c
import anyio
from mcp import Client
from spawn import orchestrator_command

HERE = Path(__file__).resolve().parent
BUDGET = 0.8
P99_BUDGET = 1.5


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def start(command: list[str], env: dict[str, str], said: list[str] | None = None) -> subprocess.Popen[str]:
    """Start a server and return once it says it serves (both print `serving http://...`).

    Its stderr keeps being drained (a server blocked on a full pipe would measure nothing),
    into `said` when given.
    """
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=HERE)
    stderr = proc.stderr
    assert stderr is not None
    for line in stderr:
        if "serving http://" in line:
            threading.Thread(target=_drain, args=(stderr, said), daemon=True).start()
            return proc
    raise RuntimeError(f"{command[0]} did not start (exit status {proc.wait()})")


def _drain(stream: Iterable[str], into: list[str] | None) -> None:
    for line in stream:
        if into is not None:
            into.append(line)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Fleet:
    """A load process: `--clients` real MCP clients connected to one server, run a window at a time."""

    def __init__(self, url: str, server: subprocess.Popen[str], args: argparse.Namespace) -> None:
        command = [sys.executable, str(HERE / "_http_load.py"), url, "--clients", str(args.clients)]
        command += ["--seconds", str(args.seconds), "--mode", args.mode, "--server-pid", str(server.pid)]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=HERE)
        self.ready = self._answer()
        """`connect_s` (until all clients made their first call) and connect `errors`."""

    def window(self) -> dict[str, Any]:
        """Run one window of load; its figures."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the load process ended (exit status {self.proc.wait()})")
        return json.loads(line)


async def listed_tools(url: str) -> list[dict[str, Any]]:
    """The subject's tools/list, but its `add` (the reference has its own)."""
    async with Client(url, mode="legacy") as client:
        listed = await client.list_tools()
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools if t.name != "add"]


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    errors: dict[str, int] = {}
    for r in rounds:
        for kind, n in r["errors"].items():
            errors[kind] = errors.get(kind, 0) + n
    return {
        "calls_per_s": c.median([r["calls_per_s"] for r in rounds]),
        "p50": c.median([r["p50"] for r in rounds]),
        "p99": c.median([r["p99"] for r in rounds]),
        "cpu_per_call_ms": 1e3 * sum(r["server_cpu_s"] for r in rounds) / max(1, sum(r["calls"] for r in rounds)),
        "errors": errors,
        **{k: c.median([r[k] for r in rounds]) for k in ("first_p99", "connect_p99") if k in rounds[0]},
    }


def bursts(args: argparse.Namespace, urls: tuple[str, str], pids: tuple[int, int]) -> tuple[list[Any], list[Any]]:
    """`--rounds` bursts against each server, alternating (ABBA); the figures of each."""
    out: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    for i in range(args.rounds):
        for which in (0, 1) if i % 2 == 0 else (1, 0):
            command = [sys.executable, str(HERE / "_http_load.py"), urls[which], "--clients", str(args.clients)]
            command += ["--burst", str(args.calls), "--mode", args.mode, "--server-pid", str(pids[which])]
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True, cwd=HERE, check=True)
            out[which].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


def main(args: argparse.Namespace) -> None:
    load_start = os.getloadavg()[0]
    with c.bench_env() as tmp:
        home = tmp / "home"
        skills = c.write_skill(tmp / "skills", "add").parent
        env = dict(os.environ, ORCHESTRATOR_HOME=str(home), PYTHONPATH=os.pathsep.join([str(c.REPO), str(HERE)]))
        ours_port, bare_port = free_port(), free_port()
        script, script_args, label = orchestrator_command(home)
        ours_cmd = [script, *script_args, "--transport", "http", "--port", str(ours_port), "--skills", str(skills)]
        if args.profile:
            ours_cmd = [sys.executable, "-m", "cProfile", "-o", str(tmp / "prof"), "-m", "mcp_server", *ours_cmd[1:]]
        ours = start(ours_cmd, env)
        bare_cmd = [sys.executable, str(HERE / "_bare_http_server.py"), str(bare_port)]
        if args.same_tools:
            tools = tmp / "tools.json"
            tools.write_text(json.dumps(anyio.run(listed_tools, f"http://127.0.0.1:{ours_port}/mcp")))
            bare_cmd.append(str(tools))
        bare = start(bare_cmd, env)
        subject: list[dict[str, Any]] = []
        reference: list[dict[str, Any]] = []
        fleets: list[Fleet] = []
        targets: list[tuple[Fleet, list[dict[str, Any]]]] = []
        try:
            if args.calls:
                urls = (f"http://127.0.0.1:{ours_port}/mcp", f"http://127.0.0.1:{bare_port}/mcp")
                subject, reference = bursts(args, urls, (ours.pid, bare.pid))
            else:
                # One fleet connects at a time, so each connect phase has the machine to itself.
                fleets.append(Fleet(f"http://127.0.0.1:{ours_port}/mcp", ours, args))
                fleets.append(Fleet(f"http://127.0.0.1:{bare_port}/mcp", bare, args))
                targets = [(fleets[0], subject), (fleets[1], reference)]
                for i in range(1 if args.profile else args.rounds):
                    for fleet, out in targets if i % 2 == 0 else targets[::-1]:
                        out.append(fleet.window())
        finally:
            for fleet in fleets:
                fleet.close()
            stop(ours)
            stop(bare)
        connect = {id(out): fleet.ready for fleet, out in targets}
        if args.profile:
            stats = pstats.Stats(str(tmp / "prof"))
            stats.sort_stats("tottime").print_stats(30)
            stats.sort_stats("cumulative").print_stats(r"mcp_server|skills|adapters|pipelines", 30)
            stats.sort_stats("tottime").print_stats(r"/(mcp_server|skills|adapters|pipelines)/", 30)
            return
    s, r = summary(subject), summary(reference)
    for fig, out in ((s, subject), (r, reference)):
        fig["connect_s"] = connect[id(out)]["connect_s"] if id(out) in connect else fig["connect_p99"]
        for kind, n in connect.get(id(out), {"errors": {}})["errors"].items():
            fig["errors"][kind] = fig["errors"].get(kind, 0) + n
    if args.calls:
        print(
            f"{args.clients} fresh mcp.Client ({args.mode}) over streamable HTTP connecting at once, "
            f"{args.calls} calls each, then closing; {args.rounds} bursts per server, alternating (ABBA); "
            "medians of the bursts"
            + ("; the reference lists the subject's tools too" if args.same_tools else "")
            + "\n"
        )
        connected_after = "connect p99"
    else:
        print(
            f"{args.clients} concurrent mcp.Client ({args.mode}) over streamable HTTP, each fleet connected once; "
            f"{args.rounds} windows of {args.seconds:g} s per server, alternating (ABBA); medians of the windows\n"
        )
        connected_after = "all connected after"
    rows = []
    for name, fig in ((f"{label} (python skill)", s), ("bare MCPServer (@mcp.tool)", r)):
        errors = sum(fig["errors"].values())
        rows.append(
            [
                name,
                f"{fig['calls_per_s']:.0f}",
                str(errors),
                c.ms(fig["p50"]),
                c.ms(fig["p99"]),
                c.ms(fig["first_p99"]) if "first_p99" in fig else "-",
                f"{fig['connect_s']:.1f} s",
                f"{fig['cpu_per_call_ms']:.2f} ms",
            ]
        )
    headers = ["server", "calls/s", "errors", "p50", "p99", "first call p99", connected_after, "server CPU/call"]
    c.table(headers, rows)
    for name, fig in (("subject", s), ("reference", r)):
        if fig["errors"]:
            print(f"errors of the {name}: {fig['errors']}")
    print(f"\n{c.load_note(load_start)}\n")
    ratio = s["calls_per_s"] / r["calls_per_s"] if r["calls_per_s"] else 0.0
    print(
        f"ABS http_load.subject {s['calls_per_s']:.0f} calls/s, p99 {c.ms(s['p99'])}, "
        f"{sum(s['errors'].values())} errors; reference {r['calls_per_s']:.0f} calls/s, p99 {c.ms(r['p99'])}"
    )
    # Server CPU per call does not depend on how busy the machine is: the capacity each server
    # would have if it had a core to itself (the calls/s ratio drifts with the load elsewhere).
    capacity = r["cpu_per_call_ms"] / s["cpu_per_call_ms"] if s["cpu_per_call_ms"] else 0.0
    print(
        f"ABS http_load.server_cpu_per_call subject {s['cpu_per_call_ms']:.2f} ms reference "
        f"{r['cpu_per_call_ms']:.2f} ms (capacity {capacity:.3f}x the bare server)"
    )
    kind = f"{args.mode}, {args.calls} calls" if args.calls else args.mode
    kind += ", same tools/list" if args.same_tools else ""
    detail = f"(calls/s {ratio:.3f}x the bare server; budget >= {BUDGET:g}x)"
    print(c.ratio_line(f"http_load[{kind}]", 1 / ratio if ratio else float("inf"), 1 / BUDGET, detail))
    p99 = s["p99"] / r["p99"] if r["p99"] else float("inf")
    print(c.ratio_line(f"http_load_p99[{kind}]", p99, P99_BUDGET, "(p99 latency over the bare server's)"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200, help="concurrent clients (default: 200)")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of one window (default: 4)")
    parser.add_argument("--rounds", type=int, default=6, help="windows per server (default: 6)")
    parser.add_argument("--mode", choices=("legacy", "auto"), default="legacy", help="protocol era of the clients")
    parser.add_argument(
        "--calls", type=int, default=0, metavar="K", help="bursts of fresh clients making K calls each, not windows"
    )
    parser.add_argument("--profile", action="store_true", help="one round under cProfile; print our server's profile")
    parser.add_argument(
        "--same-tools",
        action="store_true",
        help="the reference's tools/list also holds the subject's tools (never called): both clients decode as much",
    )
    main(parser.parse_args())
