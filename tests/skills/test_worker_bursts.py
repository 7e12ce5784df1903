"""Bursts of short synchronous python skill calls (skills._pool queues them on busy workers).

A burst of tiny calls is served by few worker processes, several calls sent to one worker at a
time; each call still gets its own answer, its own progress, and its own failure: a call that
ends or hangs its worker costs that call only (the calls queued behind it never started and are
sent again), and a call whose caller gave up before it started never runs.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server import create_server
from tests._attack import poll_until
from tests.helpers import write_skill

IMPL = """
import asyncio, os

def main(n, mode="ok", marks=None, gate=None, pad="", ctx=None):
    if mode == "exit":
        os._exit(3)
    if mode == "spin":
        while True:
            pass
    if mode == "gated":  # waits at a FIFO until the test opens it
        open(os.path.join(marks, f"started-{n}"), "w").write(str(os.getpid()))
        open(gate).read()
    if mode == "progress":
        asyncio.run(ctx.progress(n, None, f"call {n}"))
    if marks:
        open(os.path.join(marks, str(n)), "w").close()
    return {"n": n, "pad": len(pad)}
"""

CONTRACT: dict[str, Any] = {
    "inputs": {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "mode": {"type": "string"},
            "marks": {"type": "string"},
            "gate": {"type": "string"},
            "pad": {"type": "string"},
        },
        "required": ["n"],
    },
    "timeout": 3,
    "run": {"python": "impl:main"},
}


@pytest.fixture
def server(home: Path, tmp_path: Path) -> Any:
    write_skill(tmp_path / "skills", "burst", contract=CONTRACT, impl=IMPL)
    return create_server(home=home, skill_dirs=[tmp_path / "skills"])


async def _burst(client: Client, calls: list[dict[str, Any]]) -> dict[int, Any]:
    """Make every call at once; the results by `n`."""
    results: dict[int, Any] = {}

    async def one(arguments: dict[str, Any]) -> None:
        results[arguments["n"]] = await client.call_tool("burst", arguments)

    async with anyio.create_task_group() as tg:
        for arguments in calls:
            tg.start_soon(one, arguments)
    return results


async def _warm(client: Client) -> None:
    """A few calls first, so the pool knows the skill's calls are short (then they queue)."""
    for n in range(5):
        assert (await client.call_tool("burst", {"n": n})).structured_content == {"n": n, "pad": 0}


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def test_a_burst_of_short_calls_gets_every_answer_right(server: Any) -> None:
    async with Client(server) as client:
        await _warm(client)
        # Some requests are too large to travel with others: they wait for a worker of their own.
        calls = [{"n": n, "pad": "x" * (9000 if n % 40 == 0 else 0)} for n in range(300)]
        results = await _burst(client, calls)
    assert {n: r.structured_content for n, r in results.items()} == {
        n: {"n": n, "pad": 9000 if n % 40 == 0 else 0} for n in range(300)
    }


async def test_calls_that_end_their_worker_in_a_burst_fail_alone(server: Any) -> None:
    exits = {13, 38, 61, 87}
    async with Client(server) as client:
        await _warm(client)
        results = await _burst(client, [{"n": n, "mode": "exit" if n in exits else "ok"} for n in range(100)])
        for n, result in results.items():
            if n in exits:
                assert result.is_error and "exited with status 3" in _text(result), _text(result)
            else:
                assert result.structured_content == {"n": n, "pad": 0}, _text(result)


async def test_a_runaway_in_a_burst_is_stopped_and_the_calls_behind_it_are_answered(server: Any) -> None:
    async with Client(server) as client:
        await _warm(client)
        results = await _burst(client, [{"n": n, "mode": "spin" if n == 5 else "ok"} for n in range(60)])
    assert results[5].is_error and "did not finish within 3s" in _text(results[5])
    assert all(results[n].structured_content == {"n": n, "pad": 0} for n in range(60) if n != 5)


async def test_calls_given_up_before_they_pass_the_gate_never_finish_and_the_rest_do(
    server: Any, tmp_path: Path
) -> None:
    """Every call stops at a gate (a FIFO the test opens to let the waiting ones through), so
    while the test cancels a third of them nothing can start or end: each cancelled call is
    then waiting for a worker, queued behind a blocked call (skipped by its worker), or
    blocked itself (its worker killed, the calls queued behind it sent elsewhere)."""
    marks, gate = tmp_path / "marks", tmp_path / "gate"
    marks.mkdir()
    os.mkfifo(gate)
    calls, cancelled = range(60), {n for n in range(60) if n % 3 == 1}
    scopes: dict[int, anyio.CancelScope] = {}
    answered: dict[int, Any] = {}

    async def one(client: Client, n: int) -> None:
        with anyio.CancelScope() as scopes[n]:
            arguments = {"n": n, "mode": "gated", "marks": str(marks), "gate": str(gate)}
            answered[n] = await client.call_tool("burst", arguments)

    def started() -> dict[int, int]:
        return {int(p.name[8:]): int(p.read_text() or 0) for p in marks.glob("started-*")}

    def release() -> bool:
        """Let the calls waiting at the gate through; True once every wanted call is answered."""
        with contextlib.suppress(OSError):  # ENXIO: no call is waiting at the gate right now
            os.close(os.open(gate, os.O_WRONLY | os.O_NONBLOCK))
        return len(answered) == len(calls) - len(cancelled)

    async with Client(server) as client:
        await _warm(client)
        async with anyio.create_task_group() as tg:
            for n in calls:
                tg.start_soon(one, client, n)
            await poll_until(lambda: bool(started()))
            for n in cancelled:
                scopes[n].cancel()
            await client.list_tools()  # the server has taken in the cancellations before this answer
            blocked = {pid for n, pid in started().items() if n in cancelled}
            await poll_until(lambda: all(_gone(pid) for pid in blocked))  # their workers were killed
            await poll_until(release, 60)
        assert all(answered[n].structured_content == {"n": n, "pad": 0} for n in answered), answered
    assert {p.name for p in marks.iterdir() if p.name.isdigit()} == {str(n) for n in calls if n not in cancelled}


def _gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def test_each_call_of_a_burst_gets_its_own_progress(server: Any) -> None:
    seen: dict[int, list[tuple[float, str | None]]] = {n: [] for n in range(40)}

    async def one(client: Client, n: int) -> None:
        async def progress(done: float, total: float | None, message: str | None) -> None:
            seen[n].append((done, message))

        result = await client.call_tool("burst", {"n": n, "mode": "progress"}, progress_callback=progress)
        assert result.structured_content == {"n": n, "pad": 0}

    async with Client(server) as client:
        await _warm(client)
        async with anyio.create_task_group() as tg:
            for n in range(40):
                tg.start_soon(one, client, n)
    assert seen == {n: [(n, f"call {n}")] for n in range(40)}
