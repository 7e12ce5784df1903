"""What a synchronous python skill starts ends with its call (issue 26, finding 9).

The skill starts a child three ways: `Popen(["sleep" ...])`, `setsid` (another session: a kill
of the worker's process group misses it) and a double fork (the grandchild is re-parented away
from the worker). Each must be gone after the call returns, after its timeout, and after the
server itself gets SIGTERM. Processes are found by their command line, which holds the test's
own marker; there is no event for "a process has exited", so /proc is polled with a bound.
(SIGKILL too: the worker's keeper learns of the server's death from the kernel.)
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcp_server import create_server
from tests._attack import poll_until
from tests.helpers import holding, write_skill

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc to find the processes")

ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
KINDS = ("popen", "setsid", "double-fork")

IMPL = """
import os, subprocess, sys

def _sleeper(marker):
    return [sys.executable, "-c", "import time; time.sleep(600)", marker]

def main(marker, spin=False):
    subprocess.Popen(_sleeper(marker + "-popen"))
    subprocess.Popen(["setsid", *_sleeper(marker + "-setsid")])
    if os.fork() == 0:  # a double fork: the grandchild's parent is gone at once
        if os.fork() == 0:
            os.execv(sys.executable, _sleeper(marker + "-double-fork"))
        os._exit(0)
    os.wait()
    while spin:  # until the timeout
        pass
    return {"started": 3}
"""

CONTRACT: dict[str, Any] = {
    "inputs": {"type": "object", "properties": {"marker": {"type": "string"}, "spin": {"type": "boolean"}}},
    "run": {"python": "impl:main"},
    "timeout": 3,
}


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    write_skill(tmp_path / "skills", "parent", contract=CONTRACT, impl=IMPL)
    return tmp_path / "skills"


def _left(marker: str) -> list[str]:
    return [kind for kind in KINDS if holding(f"{marker}-{kind}")]


async def _all_gone(marker: str) -> None:
    try:
        await poll_until(lambda: not _left(marker), 10)
    except TimeoutError:
        raise AssertionError(f"still running after the call: {_left(marker)}") from None


async def test_the_children_of_a_call_are_gone_after_it_returns(home: Path, skills: Path, tmp_path: Path) -> None:
    marker = str(tmp_path / "returned")
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool("parent", {"marker": marker})
        assert result.structured_content == {"started": 3}
        await _all_gone(marker)
        again = str(tmp_path / "again")  # the worker serves the next call as before
        assert (await client.call_tool("parent", {"marker": again})).structured_content == {"started": 3}
        await _all_gone(again)


async def test_the_children_of_a_call_are_gone_after_its_timeout(home: Path, skills: Path, tmp_path: Path) -> None:
    marker = str(tmp_path / "timed-out")
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool("parent", {"marker": marker, "spin": True})
        assert result.is_error and "did not finish within 3s" in str(result.content[0])
        await _all_gone(marker)


def _server_pid(home: Path) -> int:
    """The `orchestrator serve --home HOME` process (its command line names the test's home)."""
    found = [pid for pid in holding(f"serve\0--home\0{home}\0") if pid != os.getpid()]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
async def test_the_children_of_a_call_are_gone_after_the_server_is_stopped(
    home: Path, skills: Path, tmp_path: Path, stop: signal.Signals
) -> None:
    marker = str(tmp_path / "terminated")
    params = StdioServerParameters(
        command=str(ORCHESTRATOR),
        args=["serve", "--home", str(home), "--skills", str(skills)],
        env={"ORCHESTRATOR_HOME": str(home)},
    )
    with (tmp_path / "stderr.txt").open("w") as errlog, anyio.fail_after(90):
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    try:
                        await client.call_tool("parent", {"marker": marker, "spin": True})
                    except Exception:  # the server is killed under the call: any ending will do
                        pass

                tg.start_soon(call)
                await poll_until(lambda: len(_left(marker)) == len(KINDS), 30)  # the call is under way
                os.kill(_server_pid(home), stop)
                await _all_gone(marker)
                tg.cancel_scope.cancel()
