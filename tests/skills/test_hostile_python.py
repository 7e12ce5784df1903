"""Python skills that exit, interrupt, crash or never end: each is one failed call (issue 9, items 4-5).

A synchronous python skill runs in a worker process (skills._pool): its timeout kills the work,
pure-Python loop and C call alike, and `sys.exit()` / `os._exit()` / `KeyboardInterrupt` end
at most that worker. An async python skill runs on the server's event loop (trusted code), so
there the guard is that its exceptions, `SystemExit` included, become `isError` results.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server import create_server
from skills.executors._pool import MAX_PER_SKILL
from tests._attack import answered_while, poll_until, still_answers
from tests.helpers import write_skill

CONTRACT: dict[str, Any] = {"inputs": {"type": "object", "properties": {"pidfile": {"type": "string"}}}, "timeout": 2}

SKILLS = {
    "exit-at-import": "import sys\nsys.exit(3)\ndef main(pidfile=None):\n    return 1\n",
    "exit-in-call": "import sys\ndef main(pidfile=None):\n    sys.exit(0)\n",
    "interrupt": "def main(pidfile=None):\n    raise KeyboardInterrupt\n",
    "hard-exit": "import os\ndef main(pidfile=None):\n    os._exit(1)\n",
    "async-exit": "import sys\nasync def main(pidfile=None):\n    sys.exit(2)\n",
    "async-exit-at-import": "import sys\nsys.exit(4)\nasync def main(pidfile=None):\n    return 1\n",
    "async-interrupt": "async def main(pidfile=None):\n    raise KeyboardInterrupt\n",
    # Runaways: each writes its process id first, so the test can see the work stop.
    "spin": (
        "import os\ndef main(pidfile):\n    open(pidfile, 'w').write(str(os.getpid()))\n    while True:\n        pass\n"
    ),
    "backtrack": (  # one C call that holds the GIL: 2**27 steps of Python's backtracking regex engine
        "import os, re\ndef main(pidfile):\n"
        "    open(pidfile, 'w').write(str(os.getpid()))\n"
        "    return {'m': bool(re.match(r'(a+)+$', 'a' * 27 + '!'))}\n"
    ),
    "spawner": (  # leaves a child process behind, then spins
        "import os, subprocess\ndef main(pidfile):\n"
        "    child = subprocess.Popen(['sleep', '600'])\n"
        "    open(pidfile, 'w').write(str(child.pid))\n"
        "    while True:\n        pass\n"
    ),
    "spin-long": (
        "import os, time\ndef main(pidfile):\n"
        "    open(f'{pidfile}.{os.getpid()}', 'w').write('')\n"
        "    while True:\n        pass\n"
    ),
    "noisy": "def main(pidfile=None):\n    print('chatter on stdout')\n    return {'ok': True}\n",
    "where": (
        "import os\ndef main(pidfile=None):\n"
        "    return {'cwd': os.getcwd(), 'value': os.environ.get('HOSTILE_PROBE')}\n"
    ),
}


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    for name, impl in SKILLS.items():
        # the runaways stop at 2 s; the skills that must answer get room for a busy machine
        timeout = 60 if name in ("spin-long", "noisy") else CONTRACT["timeout"]
        write_skill(root, name, contract={**CONTRACT, "timeout": timeout, "run": {"python": "impl:main"}}, impl=impl)
    return root


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def _assert_error(result: Any, *words: str, kind: str | None = None) -> None:
    """An `isError` result naming what happened; with the protocol's error envelope, of `kind`."""
    assert result.is_error, _text(result)
    text = _text(result)
    for word in words:
        assert word in text, text
    assert "Traceback" not in text
    envelope = (result.structured_content or {}).get("error")
    if kind is not None and isinstance(envelope, dict):
        assert envelope.get("type") == kind, envelope


def _gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def _wait_gone(pid: int) -> None:
    await poll_until(lambda: _gone(pid))


@pytest.mark.parametrize(
    ("skill", "words"),
    [
        ("exit-at-import", ["SystemExit"]),
        ("exit-in-call", ["SystemExit"]),
        ("interrupt", ["KeyboardInterrupt"]),
        ("hard-exit", ["ended its worker process", "exited with status 1"]),
        ("async-exit", ["SystemExit"]),
        ("async-exit-at-import", ["SystemExit"]),
        ("async-interrupt", ["KeyboardInterrupt"]),
    ],
)
async def test_a_skill_that_exits_or_interrupts_fails_alone(
    home: Path, skills: Path, skill: str, words: list[str]
) -> None:
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server) as attacker, Client(server) as bystander:
        for _ in range(2):  # the second call meets a fresh worker (or the same import error again)
            _assert_error(await attacker.call_tool(skill, {}), *words, kind="skill_failed")
            await still_answers(bystander)
        assert (await bystander.call_tool("noisy", {})).structured_content == {"ok": True}


@pytest.mark.parametrize("skill", ["spin", "backtrack"])
async def test_a_runaway_skill_is_killed_at_its_timeout_while_others_are_served(
    home: Path, skills: Path, tmp_path: Path, skill: str
) -> None:
    pidfile = tmp_path / f"{skill}.pid"
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server) as attacker, Client(server) as bystander:
        result = await answered_while(lambda: attacker.call_tool(skill, {"pidfile": str(pidfile)}), bystander)
        _assert_error(result, "did not finish within 2s", "was stopped", kind="timeout")
        pid = int(pidfile.read_text())
        assert pid != os.getpid()  # the work ran outside the server ...
        await _wait_gone(pid)  # ... and was stopped, not abandoned
        assert (await bystander.call_tool("noisy", {})).structured_content == {"ok": True}


async def test_a_timed_out_skill_takes_the_processes_it_started_with_it(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "child.pid"
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        _assert_error(await client.call_tool("spawner", {"pidfile": str(pidfile)}), "was stopped", kind="timeout")
        await _wait_gone(int(pidfile.read_text()))


async def test_a_cancelled_call_stops_its_worker(home: Path, skills: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "spin.pid"
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        with anyio.move_on_after(30) as scope:  # cancelled below, as soon as the skill has started
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "spin", {"pidfile": str(pidfile)})
                await poll_until(lambda: pidfile.exists() and bool(pidfile.read_text()))  # the skill's first act
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        await _wait_gone(int(pidfile.read_text()))
        assert (await client.call_tool("noisy", {})).structured_content == {"ok": True}


async def test_a_skill_printing_to_stdout_does_not_disturb_its_result(home: Path, skills: Path) -> None:
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        for _ in range(3):
            assert (await client.call_tool("noisy", {})).structured_content == {"ok": True}


async def test_a_worker_sees_the_servers_current_directory_and_environment(
    home: Path, skills: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        await client.call_tool("where", {})  # a worker exists before the change
        monkeypatch.setenv("HOSTILE_PROBE", "changed")
        monkeypatch.chdir(tmp_path)
        seen = (await client.call_tool("where", {})).structured_content
        assert seen == {"cwd": str(tmp_path), "value": "changed"}


async def test_one_skill_cannot_take_every_worker_and_others_are_served_meanwhile(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    started = lambda: list(marks.iterdir())  # noqa: E731 - one file per worker that started a spin
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        async with anyio.create_task_group() as tg:
            for _ in range(MAX_PER_SKILL + 2):
                tg.start_soon(client.call_tool, "spin-long", {"pidfile": str(marks / "spin")})
            await poll_until(lambda: len(started()) >= 1, 60)
            with anyio.fail_after(60):  # another skill gets a worker of its own at once
                assert (await client.call_tool("noisy", {})).structured_content == {"ok": True}
            await poll_until(lambda: len(started()) >= MAX_PER_SKILL, 60)
            assert (await client.call_tool("noisy", {})).structured_content == {"ok": True}
            assert len(started()) == MAX_PER_SKILL  # the last two calls wait for a worker of their own
            tg.cancel_scope.cancel()  # cancelling the calls kills their workers
        pids = [int(p.name.rsplit(".", 1)[1]) for p in started()]
        for pid in pids:
            await _wait_gone(pid)
