"""A confined call's memory and processes are bounded in total by the kernel (issue 26, finding 2).

A script that forks children of 480 MB each, every one under its own `memory_mb`, filled 4 GB
and the out-of-memory killer took the server. Here the same script (8 children: 3.8 GB, safe
on this machine unbounded, twice the 2 GB budget the home sets) fails with a clear
`limit_exceeded` error, and the server keeps serving another client; a process bomb past the
call's process budget is refused; no cgroup is left behind, after a timeout or a cancelled call
too. Each test runs unconfined (the jail-less path) and confined (bubblewrap). Budgets need a
cgroup per call: where this host has none, the tests are skipped with `orchestrator doctor`'s
reason (the doctor test below checks that line on any host).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server import create_server
from skills import Home
from skills.executors._cgroup import _prepare_v2, cgroup_mounts, own_cgroups
from skills.executors.isolation import budget_support, probe
from tests._attack import answered_while, poll_until
from tests.helpers import assert_none_left, run_cli, write_skill

SUPPORT = budget_support()
needs_cgroups = pytest.mark.skipif(not SUPPORT.enforced, reason=f"no per-call cgroups here: {SUPPORT.detail}")

HOG = """\
import json, os, sys
children, size = int(sys.argv[1]) if len(sys.argv) > 1 else 8, 480 << 20
hold_r, hold_w = os.pipe()  # every child keeps its memory until the parent lets go
held = 0
for _ in range(children):
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.close(hold_w)
        block = b"x" * size  # written, so really in memory
        os.write(ready_w, b"1")
        os.read(hold_r, 1)
        os._exit(0)
    os.close(ready_w)
    held += os.read(ready_r, 1) == b"1"  # "" when the child was killed first
    os.close(ready_r)
os.close(hold_w)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
print(json.dumps({"held": held}))
"""

BOMB = """\
import json, os, time
started = 0
for _ in range(200):
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    started += 1
print(json.dumps({"started": started}))
"""

HANG = """\
import os, subprocess, sys, time
subprocess.Popen(["setsid", sys.executable, "-c", "import time; time.sleep(600)", os.path.abspath(__file__)])
time.sleep(600)
"""


def _script(root: Path, name: str, source: str, **contract: Any) -> None:
    write_skill(root, name, contract={"run": {"script": "run.py"}, "timeout": 60, **contract}, files={"run.py": source})


@pytest.fixture(params=["unconfined", "confined"])
def server(request: pytest.FixtureRequest, home: Path, tmp_path: Path) -> Any:
    """A server whose home sets a 2 GB per-call budget; once without a jail, once in one."""
    isolation = "  total_memory_mb: 2048\n"
    if request.param == "unconfined":
        isolation += "  bwrap: /nonexistent/bwrap\n"
    elif not probe().available:
        pytest.skip(f"confinement is not available here: {probe().reason}")
    Home(home).install()
    (home / "config.yaml").write_text(f"isolation:\n{isolation}")
    skills = tmp_path / "skills"
    _script(skills, "hog", HOG, memory_mb=640)
    _script(skills, "bomb", BOMB)
    _script(skills, "small-bomb", BOMB, max_processes=16)
    _script(skills, "hang", HANG, timeout=2)
    write_skill(skills, "hello", contract={"run": {"script": "run.py"}}, files={"run.py": "print('{\"hello\": 1}')\n"})
    return create_server(home=home, skill_dirs=[skills])


def _groups_left() -> list[Path]:
    """The call groups this process (the in-memory server) still has."""
    prefix = f"orchestrator-{os.getpid()}-"
    return [entry for parent in SUPPORT.parents for entry in parent.iterdir() if entry.name.startswith(prefix)]


def _envelope(result: Any) -> dict[str, Any]:
    assert result.is_error, result.content
    return (result.structured_content or {})["error"]


@needs_cgroups
async def test_a_call_over_its_memory_budget_fails_clearly_and_the_server_serves_another_client(
    server: Any, tmp_path: Path
) -> None:
    async with Client(server) as attacker, Client(server) as bystander:
        result = await answered_while(lambda: attacker.call_tool("hog", {}), bystander, answers=5)
        error = _envelope(result)
        assert error["type"] == "limit_exceeded"
        assert "'hog' went over its memory budget of 2048 MiB for all its processes together" in error["message"]
        assert "total_memory_mb" in error["hint"] and "config.yaml" in error["hint"]
        assert (await bystander.call_tool("hello", {})).structured_content == {"hello": 1}
    assert _groups_left() == []
    await assert_none_left(tmp_path)


@needs_cgroups
@pytest.mark.parametrize(("skill", "budget", "where"), [("bomb", 64, "config.yaml"), ("small-bomb", 16, "skill.yaml")])
async def test_a_process_bomb_beyond_the_calls_process_budget_is_refused(
    server: Any, tmp_path: Path, skill: str, budget: int, where: str
) -> None:
    async with Client(server) as client:
        error = _envelope(await client.call_tool(skill, {}))
    assert error["type"] == "limit_exceeded"
    assert f"'{skill}' tried to run more than {budget} processes at once" in error["message"]
    assert "max_processes" in error["hint"] and where in error["hint"]
    assert _groups_left() == []
    await assert_none_left(tmp_path)


@needs_cgroups
async def test_no_cgroup_is_left_after_a_timeout_or_a_cancelled_call(server: Any, tmp_path: Path) -> None:
    async with Client(server) as client:
        result = await client.call_tool("hang", {})
        assert _envelope(result)["type"] == "timeout"
        assert _groups_left() == []
        await assert_none_left(tmp_path)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "hang", {})
            await poll_until(lambda: bool(_groups_left()), 30)  # the call is under way, in its group
            tg.cancel_scope.cancel()
        await poll_until(lambda: not _groups_left(), 10)
        await assert_none_left(tmp_path)


def test_doctor_says_how_the_per_call_budgets_are_enforced_here(tmp_path: Path) -> None:
    home = tmp_path / "home"
    Home(home).install()
    (home / "config.yaml").write_text("isolation:\n  total_memory_mb: 2048\n  max_processes: 32\n")
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    budgets = run_cli("doctor", "--json", env=env, cwd=tmp_path).json()["isolation"]["budgets"]  # type: ignore[index]
    line = next(x for x in run_cli("doctor", env=env, cwd=tmp_path).out.splitlines() if x.startswith("budgets:"))
    assert budgets["mechanism"] in ("cgroup2", "cgroup1", "rlimits")
    assert budgets["enforced"] is (budgets["mechanism"] != "rlimits")
    if budgets["enforced"]:  # the claim holds: the cgroup it names is there and this user may make groups in it
        assert "at most 2048 MiB and 32 processes in total" in line and budgets["detail"] in line
        for parent in SUPPORT.parents:
            assert str(parent) in budgets["detail"] and os.access(parent, os.W_OK)
    else:
        assert "NOT ENFORCED per call" in line and budgets["detail"] in line


HYBRID = """\
4:memory:/process_api/abc
8:pids:/
9:name=systemd:/
0::/
"""
HYBRID_MOUNTS = """\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/pids rw,relatime shared:10 - cgroup cgroup rw,pids
33 25 0:29 / /sys/fs/cgroup/unified rw,relatime shared:12 - cgroup2 cgroup2 rw
"""
PURE_V2 = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope\n"
PURE_V2_MOUNTS = "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
CONTAINER_MOUNTS = "600 590 0:30 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n"


def test_the_cgroup_of_this_process_is_found_in_each_layout() -> None:
    hybrid, mounts = own_cgroups(HYBRID), cgroup_mounts(HYBRID_MOUNTS)
    assert [(m.kind, m.controllers) for m in mounts] == [
        ("cgroup", frozenset({"rw", "memory"})),
        ("cgroup", frozenset({"rw", "pids"})),
        ("cgroup2", frozenset()),
    ]
    assert mounts[0].inside(hybrid["memory"]) == Path("/sys/fs/cgroup/memory/process_api/abc")
    assert mounts[1].inside(hybrid["pids"]) == Path("/sys/fs/cgroup/pids")
    pure = cgroup_mounts(PURE_V2_MOUNTS)[0]
    assert pure.inside(own_cgroups(PURE_V2)[""]) == Path(
        "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope"
    )
    container = cgroup_mounts(CONTAINER_MOUNTS)[0]  # the host's path, under the mount of its own cgroup
    assert container.inside("/docker/abc/init") == Path("/sys/fs/cgroup/init")
    assert container.inside("/") == Path("/sys/fs/cgroup")  # a cgroup namespace of its own


def _fake_v2(root: Path, controllers: str, procs: list[int], *, delegated: bool) -> Path:
    """A directory laid out like a cgroup v2 one (the files the decision reads)."""
    base = root / "app.slice" / "run-r1.scope"
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text(controllers + "\n")
    (base / "cgroup.subtree_control").write_text("\n")
    (base / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in procs))
    if delegated:
        try:
            os.setxattr(base, "user.delegate", b"1")  # what systemd sets on a Delegate=yes unit
        except OSError as exc:
            pytest.skip(f"no user xattrs on {root}: {exc.strerror}")
    return base


@pytest.mark.parametrize(
    ("controllers", "procs", "delegated", "expected"),
    [
        ("cpu io memory pids", ["self"], True, None),
        ("cpu io", ["self"], True, "has no memory or pids controller to hand down"),
        ("cpu io memory pids", ["self", 1], True, "also holds processes that are not this server's (pid 1)"),
        ("cpu io memory pids", ["self"], False, "is not delegated to this server"),
    ],
    ids=["delegated", "no-controllers", "shared", "not-delegated"],
)
def test_a_cgroup_v2_is_used_only_where_it_is_this_servers_to_divide(
    tmp_path: Path, controllers: str, procs: list[Any], delegated: bool, expected: str | None
) -> None:
    """The decisions of the v2 path (the host here is v1, so they run on a look-alike tree, without moving)."""
    if not delegated and os.geteuid() != 0:
        pytest.skip("a user's writable cgroup is delegated to it by definition")
    base = _fake_v2(tmp_path, controllers, [os.getpid() if p == "self" else p for p in procs], delegated=delegated)
    found, why = _prepare_v2(base, at_root=False, move=False)
    if expected is None:
        assert (found, why) == (base, "")
    else:
        assert found is None and expected in why and str(base) in why
        if "delegated" in expected or "not this server's" in expected:
            assert "systemd-run --user --scope -p Delegate=yes orchestrator serve" in why
