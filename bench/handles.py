"""A long call answered with a run handle vs the same call answered directly, same run.

Subject: a pipeline whose one step naps `--nap` seconds (an async python skill), called on a
server with `handle_after` shorter than the nap: the call answers its run handle, and `get_run
{wait}` returns the outputs; timed from the call to the outputs in hand. Reference: the same
call on a server with handles off (`handle_after: 0`), answered directly with the outputs.
Both through in-memory clients of one process, interleaved (ABBA).

Also (informational): what handles cost a short call that ends before the handle time (a
one-step `echo` pipeline, handles on at 45 s vs off), and how long `cancel_run` takes until the
run is recorded cancelled.

    .venv/bin/python bench/handles.py [--reps N] [--nap SECONDS] [--quick-reps N]

Budget (ARCHITECTURE.md): <= 1.1x.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import _common as c
import anyio

BUDGET = 1.1
NAP = "import anyio\n\nasync def nap(seconds, **kw):\n    await anyio.sleep(seconds)\n    return {'slept': seconds}\n"
ECHO = "def echo(**kw):\n    return kw\n"
HANG = "import anyio\n\nasync def hang(**kw):\n    await anyio.sleep_forever()\n"


def _skill(root: Path, name: str, impl: str) -> None:
    import yaml

    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {name} (benchmark).\n---\n\n# {name}\n")
    contract = {"inputs": {"type": "object"}, "run": {"python": f"impl:{name}"}, "timeout": 600}
    (folder / "skill.yaml").write_text(yaml.safe_dump(contract))
    (folder / "impl.py").write_text(impl)


def _setup(tmp: Path) -> tuple[Path, Path]:
    home, skills = tmp / "home", tmp / "skills"
    for name, impl in (("nap", NAP), ("echo", ECHO), ("hang", HANG)):
        _skill(skills, name, impl)
    pipelines = home / "pipelines"
    pipelines.mkdir(parents=True)
    (pipelines / "napper.yaml").write_text(
        "id: napper\ninputs: {seconds: {type: number}}\nsteps:\n"
        "  - id: nap\n    skill: nap\n    parameters: {seconds: '{{ seconds }}'}\n"
        "outputs: {slept: '{{ nap.slept }}'}\n"
    )
    (pipelines / "quick.yaml").write_text("id: quick\nsteps:\n  - id: one\n    skill: echo\n    parameters: {x: 1}\n")
    (pipelines / "stuck.yaml").write_text("id: stuck\nsteps:\n  - id: wait\n    skill: hang\n")
    return home, skills


async def main(args: argparse.Namespace) -> None:
    from mcp import Client

    from mcp_server import create_server

    with c.bench_env() as tmp:
        home, skills = _setup(tmp)
        direct_server = create_server(home=home, skill_dirs=[skills], handle_after=0)
        handle_server = create_server(home=home, skill_dirs=[skills], handle_after=args.nap / 3)
        quick_server = create_server(home=home, skill_dirs=[skills], handle_after=45)
        async with Client(direct_server) as direct, Client(handle_server) as handled, Client(quick_server) as quick:
            arguments = {"seconds": args.nap}

            async def by_handle() -> Any:
                answer = await handled.call_tool("napper", arguments)
                data = answer.structured_content or {}
                assert data.get("status") == "running", data
                done = await handled.call_tool("get_run", {"run_id": data["run_id"], "wait": 60})
                outputs = (done.structured_content or {}).get("outputs") or {}
                assert outputs.get("slept") == args.nap, done.structured_content
                return outputs

            async def answered() -> Any:
                answer = await direct.call_tool("napper", arguments)
                data = answer.structured_content or {}
                assert data.get("slept") == args.nap, data
                return data

            await by_handle(), await answered()  # warm: worker processes, imports
            subject, reference = await c.interleave(by_handle, answered, args.reps)

            async def quick_on() -> Any:
                return await quick.call_tool("quick", {})

            async def quick_off() -> Any:
                return await direct.call_tool("quick", {})

            await quick_on(), await quick_off()
            q_on, q_off = await c.interleave(quick_on, quick_off, args.quick_reps)

            cancels: list[float] = []
            for _ in range(3):
                answer = await handled.call_tool("stuck", {})
                run_id = (answer.structured_content or {})["run_id"]
                start = time.perf_counter()
                stopped = await handled.call_tool("cancel_run", {"run_id": run_id})
                cancels.append(time.perf_counter() - start)
                assert (stopped.structured_content or {}).get("status") == "cancelled", stopped.structured_content

    ratio = c.median(subject) / c.median(reference)
    quick_ratio = c.median(q_on) / c.median(q_off)
    print(f"{'case':<48} {'median':>10}")
    print(f"{f'{args.nap:g} s pipeline, handle + get_run(wait)':<48} {c.ms(c.median(subject)):>10}")
    print(f"{f'{args.nap:g} s pipeline, answered directly':<48} {c.ms(c.median(reference)):>10}")
    print(f"{'one-step pipeline, handles on (45 s)':<48} {c.ms(c.median(q_on)):>10}")
    print(f"{'one-step pipeline, handles off':<48} {c.ms(c.median(q_off)):>10}")
    print(f"ABS cancel_run until recorded cancelled: median {c.ms(c.median(cancels))}, max {c.ms(max(cancels))}")
    print(f"ABS short call with handles on / off: {quick_ratio:.3f}x (informational)")
    print(c.ratio_line("handle", ratio, BUDGET, f"{args.reps} reps, {args.nap:g} s pipeline"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--nap", type=float, default=1.5)
    parser.add_argument("--quick-reps", type=int, default=30)
    anyio.run(main, parser.parse_args())
