"""One client's many slow sync python calls do not hold another client's call back (issue 26, finding 5).

Client A starts many slow calls of synchronous python skills (they run in the worker pool);
client B then calls one of the same skills once A holds every worker it may. B's call must
start while A's calls are still queued (before the change it waited until A's queue drained:
28 s in the issue). The slow
skill marks its start with a file and waits for the test's release file; nothing here sleeps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import Implementation

from mcp_server import create_server
from skills.executors._pool import MAX_PER_CLIENT, MAX_PER_SKILL
from tests._attack import poll_until
from tests.helpers import write_skill

SLOW = """
import os, time

def main(marks, release, who):
    open(os.path.join(marks, f"{who}-{os.getpid()}-{time.monotonic_ns()}"), "w").close()
    while not os.path.exists(release):  # a slow skill: until the test lets it finish
        time.sleep(0.01)
    return {"who": who}
"""
CONTRACT: dict[str, Any] = {
    "inputs": {
        "type": "object",
        "properties": {"marks": {"type": "string"}, "release": {"type": "string"}, "who": {"type": "string"}},
    },
    "run": {"python": "impl:main"},
    "timeout": 120,
}
A_CALLS = 100


def _client(server: Any, name: str) -> Client:
    return Client(server, client_info=Implementation(name=name, version="1"))


@pytest.mark.parametrize("a_skills", [["one-1"], ["two-1", "two-2"]], ids=["one-skill", "two-skills"])
async def test_another_clients_call_starts_while_one_client_has_many_slow_calls_queued(
    home: Path, tmp_path: Path, a_skills: list[str]
) -> None:
    for name in a_skills:  # names of their own: the pool learns how long a skill's calls take
        write_skill(tmp_path / "skills", name, contract=CONTRACT, impl=SLOW)
    marks, release = tmp_path / "marks", tmp_path / "release"
    marks.mkdir()
    started = lambda who: sum(p.name.startswith(f"{who}-") for p in marks.iterdir())  # noqa: E731
    server = create_server(home=home, skill_dirs=[tmp_path / "skills"])
    async with _client(server, "client-a") as a, _client(server, "client-b") as b:
        async with anyio.create_task_group() as tg:
            for n in range(A_CALLS):
                skill = a_skills[n % len(a_skills)]
                tg.start_soon(a.call_tool, skill, {"marks": str(marks), "release": str(release), "who": "a"})
            # A holds every worker it may; the rest of its calls wait for one.
            await poll_until(lambda: started("a") >= min(MAX_PER_CLIENT, len(a_skills) * MAX_PER_SKILL), 120)
            # B's call starts and answers (its own release is there already) while A's queue waits.
            answered = tmp_path / "answered"
            answered.touch()
            with anyio.fail_after(60):  # a hang guard only: before the change B waited for A's whole queue
                result = await b.call_tool(a_skills[0], {"marks": str(marks), "release": str(answered), "who": "b"})
            assert result.structured_content == {"who": "b"}
            assert started("b") == 1
            assert started("a") < A_CALLS  # A's calls were still queued when B's ran
            release.touch()  # now A's calls finish
        assert started("a") == A_CALLS
