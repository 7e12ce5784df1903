"""Spawn -> initialized over stdio: `orchestrator serve` vs a bare `MCPServer` with one tool.

Each sample starts the server as a child process through a real `mcp.Client` in legacy mode
(the `initialize` handshake every deployed client uses) and stops the clock when the first
`tools/list` has answered. Samples alternate between subject and reference (ABBA).

    .venv/bin/python bench/spawn.py [--reps N]

Budget (ARCHITECTURE.md): <= 1.25x the bare server.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import _common as c
import anyio
from mcp import Client, StdioServerParameters

from mcp_server import create_server

BUDGET = 1.25
BARE = Path(__file__).resolve().parent / "_bare_server.py"


def orchestrator_command(home: Path) -> tuple[str, list[str], str]:
    """The real console script when installed, else `python -m mcp_server` (same code path)."""
    script = Path(sys.executable).parent / "orchestrator"
    if script.exists():
        return str(script), ["serve", "--home", str(home)], "orchestrator serve"
    found = shutil.which("orchestrator")
    if found:
        return found, ["serve", "--home", str(home)], "orchestrator serve"
    return sys.executable, ["-m", "mcp_server", "serve", "--home", str(home)], "python -m mcp_server serve"


async def spawn_once(params: StdioServerParameters) -> tuple[float, int]:
    """Seconds from spawning the child to the answer of its first tools/list; and the tool count."""
    start = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        tools = await client.list_tools()
        elapsed = time.perf_counter() - start
    return elapsed, len(tools.tools)


def import_time(args: list[str]) -> float:
    """Seconds a fresh interpreter takes to run `args` (no MCP traffic)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True)
    return time.perf_counter() - start


async def main(reps: int) -> None:
    with c.bench_env() as tmp:
        home = tmp / "home"
        env = {"ORCHESTRATOR_HOME": str(home)}
        if "PYTHONPATH" in os.environ:
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        command, args, label = orchestrator_command(home)
        subject = StdioServerParameters(command=command, args=args, env=env)
        reference = StdioServerParameters(command=sys.executable, args=[str(BARE)], env=env)

        # Warm-up: the first start creates the home and fills the OS file cache for both.
        _, n_subject = await spawn_once(subject)
        _, n_reference = await spawn_once(reference)

        subj: list[float] = []
        ref: list[float] = []
        for i in range(reps):
            order = [(subject, subj), (reference, ref)]
            for params, out in order if i % 2 == 0 else order[::-1]:
                out.append((await spawn_once(params))[0])

        # Where the start-up goes: interpreter + imports only, no MCP traffic.
        create_server(home=home)
        build = c.median([c.timed(lambda: create_server(home=home)) for _ in range(5)])
        imports = {
            "python -c pass": import_time(["-c", "pass"]),
            "import mcp.server (bare)": import_time(["-c", "import mcp.server"]),
            "import mcp_server.cli": import_time(["-c", "import mcp_server.cli"]),
            "import mcp_server.app": import_time(["-c", "import mcp_server.app"]),
        }

    s_med, r_med = c.median(subj), c.median(ref)
    s_q, r_q = c.quartiles(subj), c.quartiles(ref)
    print(f"spawn -> initialize + first tools/list over stdio, {reps} samples each, interleaved\n")
    c.table(
        ["server", "tools", "median", "q1..q3"],
        [
            [label, str(n_subject), c.ms(s_med), f"{c.ms(s_q[0])}..{c.ms(s_q[1])}"],
            ["bare MCPServer (1 tool)", str(n_reference), c.ms(r_med), f"{c.ms(r_q[0])}..{c.ms(r_q[1])}"],
        ],
    )
    print("\nfresh interpreter, one sample each (context for the figures above)\n")
    c.table(["command", "wall"], [[k, c.ms(v)] for k, v in imports.items()])
    print(f"\ncreate_server(home) in this process (built-in skills only), median of 5: {c.ms(build)}")
    print()
    print(f"ABS spawn.subject {c.ms(s_med)} reference {c.ms(r_med)} (+{c.ms(s_med - r_med)})")
    print(c.ratio_line("spawn", s_med / r_med, BUDGET))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10, help="samples per server (default: 10)")
    anyio.run(main, parser.parse_args().reps)
