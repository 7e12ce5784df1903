"""The distributed mode's recipe with Debian's packages works as written.

The shell blocks of docs/distributed.md ("as your own servers", then "Start the orchestrator")
are run as they are, in order, by bash: only the ports and the password of the first block are
replaced (free loopback ports, a fresh password; the blocks use them through their variables),
`$HOME` is a temporary folder, and `.venv/bin/orchestrator` is this environment's program. As
root (CI), PostgreSQL refuses to run, so the servers' blocks run as the `postgres` user (or
`nobody`), as the page tells a reader to. Then an MCP client calls a pipeline on the replica the
page starts, and the worker it starts runs it.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_server.cli._docs import section
from tests._scale import ORCHESTRATOR, _postgres_bin, _unprivileged, free_port

REPO = Path(__file__).resolve().parents[1]
PAGE = (REPO / "docs" / "distributed.md").read_text(encoding="utf-8")
OWN_SERVERS = "postgresql-and-redis-from-debians-packages-as-your-own-servers"
START = "start-the-orchestrator"


def _bash_blocks(anchor: str) -> list[str]:
    text = section(PAGE, anchor)
    assert text, f"docs/distributed.md has no section #{anchor}"
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"the recipe no longer says {old!r} once"
    return text.replace(old, new)


@pytest.fixture
def user_home() -> Iterator[Path]:
    """A home folder the servers' user can write (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="orchestrator-debian-"))
    drop = _unprivileged()
    if drop:
        os.chown(folder, int(drop["user"]), int(drop["group"]))  # type: ignore[call-overload]
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _bash(script: str, env: dict[str, str], cwd: Path, **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        **options,  # type: ignore[arg-type]
    )


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def test_the_debian_recipe_serves_a_pipeline_that_a_worker_runs(user_home: Path, home: Path) -> None:
    if _postgres_bin() is None or not shutil.which("redis-server") or not shutil.which("redis-cli"):
        pytest.skip("PostgreSQL or Redis is not installed: `apt-get install postgresql redis-server` (.ci/run does)")
    variables, postgres, redis, stop = _bash_blocks(OWN_SERVERS)
    start, _commands = _bash_blocks(START)
    pg_port, redis_port, http_port, password = free_port(), free_port(), free_port(), secrets.token_hex(12)
    variables = _replace_once(variables, "PGPORT=5432", f"PGPORT={pg_port}")
    variables = _replace_once(variables, "REDIS_PORT=6379", f"REDIS_PORT={redis_port}")
    variables = _replace_once(variables, "PASSWORD=change-me", f"PASSWORD={password}")
    start = _replace_once(start, "--port 8000", f"--port {http_port}")
    start = start.replace(".venv/bin/orchestrator", str(ORCHESTRATOR))

    base = {"PATH": os.environ["PATH"], "HOME": str(user_home), "LANG": "C.UTF-8"}
    drop = _unprivileged()
    started = False
    try:
        servers = _bash("\n".join((variables, postgres, redis)), base, user_home, **drop)
        assert servers.returncode == 0, servers.stdout + servers.stderr
        started = True
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCHESTRATOR_STATE", "ORCHESTRATOR_QUEUE"))}
        env |= {"HOME": str(user_home), "ORCHESTRATOR_HOME": str(home)}
        log = home.parent / "orchestrator.log"
        with open(log, "wb") as out:
            orchestrator = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", f"{variables}\n{start}"],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the replica and the worker it starts: stopped together below
            )
        try:
            deadline = time.monotonic() + 120
            while not _listening(http_port):
                assert orchestrator.poll() is None, log.read_text(errors="replace")
                assert time.monotonic() < deadline, log.read_text(errors="replace")
                await anyio.sleep(0.1)  # the replica is starting in another process: no event to wait on
            with anyio.fail_after(120):
                async with Client(f"http://127.0.0.1:{http_port}/mcp") as client:
                    result = await client.call_tool("retry-until-success", {})
            assert not result.is_error, result
            assert result.structured_content is not None
            assert result.structured_content["succeeded"] is True
            assert result.structured_content["attempts"] == 3
        finally:
            os.killpg(orchestrator.pid, signal.SIGTERM)
            try:
                orchestrator.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(orchestrator.pid, signal.SIGKILL)
                orchestrator.wait()
        ran = log.read_text(errors="replace")
        assert "takes runs and items" in ran  # the worker of the page's block was up and took the run
    finally:
        stopped = _bash("\n".join((variables, stop)), base, user_home, **drop)  # whatever started, stopped
        assert not started or stopped.returncode == 0, stopped.stdout + stopped.stderr
