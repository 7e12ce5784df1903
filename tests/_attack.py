"""Helpers of the hostile-input tests: payloads, and a bystander client that must stay served.

An attack is one client's call; the bystander is a second client of the same server. The
bystander's requests (`tools/list`, answered by the server every time: `ping` is deprecated in
the SDK and gone from the 2026-07-28 era) are bounded by `fail_after(ANSWER_WITHIN)`: a server frozen by the attack
misses that bound whatever the machine's load, a working one answers in milliseconds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import Client

ANSWER_WITHIN = 5.0
"""Seconds a bystander's request may take (a frozen server never answers; a busy 2-core CI machine
can stall a healthy one for a second)."""

DEEP = "[" * 50_000
"""Unclosed flow sequences: libyaml's C composer recursed once per bracket and died (SIGSEGV)."""


def billion_laughs(levels: int = 9) -> str:
    """The classic alias bomb: 9 levels of 9 aliases each, about 600 bytes, 9**9 values expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        name, prev = chr(ord("a") + level), chr(ord("a") + level - 1)
        lines.append(f"{name}: &{name} [{','.join(f'*{prev}' for _ in range(9))}]")
    return "id: laughs\nsteps: []\n" + "\n".join(lines) + "\n"


async def still_answers(client: Client) -> None:
    """The bystander's request is answered in time."""
    with anyio.fail_after(ANSWER_WITHIN):
        listed = await client.list_tools(cache_mode="bypass")
    assert listed.tools


async def poll_until(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Wait for a condition that no event reports (a process ending, a file a skill writes)."""
    with anyio.fail_after(within):
        while not condition():
            await anyio.sleep(0.02)  # polling: the kernel and other processes send us no event


async def answered_while(attack: Callable[[], Awaitable[Any]], bystander: Client, *, answers: int = 20) -> Any:
    """Run `attack`; require `answers` answers to the bystander before the attack's own answer.

    The first requests may be answered before the server has even read the attack (a server
    that verifies a megabyte on its event loop still answered 2 that way), so a few answers
    prove nothing; 20 while the attack is still unanswered show that the server keeps serving
    during it (a working server answered 400 during that verification).
    """
    outcome: list[Any] = []
    finished = anyio.Event()

    async def run_attack() -> None:
        outcome.append(await attack())
        finished.set()

    answered = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_attack)
        while not finished.is_set():
            await still_answers(bystander)
            if not finished.is_set():
                answered += 1
        assert answered >= answers, f"the bystander got {answered} answer(s) while the attack ran"
    return outcome[0]
