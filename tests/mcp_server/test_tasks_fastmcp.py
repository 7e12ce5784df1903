"""Tasks through a real fastmcp 4 client (its tasks extension folded in), over HTTP.

fastmcp pins other packages than this project, so it lives in its own venv (`.venv-fastmcp` in
the worktree, made on first use) and each client is a subprocess script
(`fixtures/fastmcp_tasks_client.py`). When it cannot be installed the tests are skipped, saying why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from pipelines.storage.runs import RunStore
from skills import Home
from tests._http import http_server
from tests.mcp_server import test_rounds_continue as rounds
from tests.mcp_server.test_rounds_continue import _marks
from tests.mcp_server.test_tasks_sdk import LONG

skills = rounds.skills  # the fixture: the `mark` tool

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-fastmcp"
SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "fastmcp_tasks_client.py"
# fastmcp-slim's server extra pins a certifi newer than the index has; the client and
# fastmcp-tasks need only these (fastmcp-tasks imports a few server modules).
PACKAGES = [
    "fastmcp-slim[client]==4.1.4",
    "cyclopts",
    "griffelib",
    "joserfc",
    "jsonref",
    "jsonschema-path",
    "openapi-pydantic",
    "packaging",
    "pyperclip",
    "python-multipart",
    "pyyaml",
    "uncalled-for",
    "uvicorn",
    "watchfiles",
    "websockets",
    "pydocket>=0.26.1",
    "redis!=8.1.0",
    "cryptography>=43",
]


@pytest.fixture(scope="session")
def fastmcp_python() -> Path:
    python = VENV / "bin" / "python"
    check = [str(python), "-c", "import fastmcp_tasks"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, *PACKAGES], check=True, capture_output=True, timeout=600)
        subprocess.run([*pip, "--no-deps", "fastmcp-tasks==4.1.4"], check=True, capture_output=True, timeout=300)
        subprocess.run(check, check=True, capture_output=True)
    except (subprocess.SubprocessError, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        reason = f"fastmcp 4 could not be installed in {VENV}: {exc} {detail.decode(errors='replace')[-400:]}"
        print(reason)
        pytest.skip(reason)
    return python


async def _client(python: Path, url: str, action: str, tool: str, arguments: dict[str, Any], *extra: str) -> Any:
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [str(python), str(SCRIPT), url, action, tool, json.dumps(arguments), *extra], check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


@pytest.fixture
def pipelines(home: Path) -> Path:
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    (home / "pipelines" / "long.yaml").write_text(LONG)
    return home


async def test_fastmcp_polls_a_pipeline_task_to_its_result(
    fastmcp_python: Path, pipelines: Path, skills: Path, tmp_path: Path
) -> None:
    log = tmp_path / "marks.log"
    async with http_server(pipelines, "--skills", str(skills)) as served:
        out = await _client(fastmcp_python, served.url, "call", "long", {"log": str(log), "count": 3})
    assert out["data"]["marked"] == 3 and _marks(log) == ["m0", "m1", "m2"]
    record = RunStore(Home(pipelines).state_db).get(out["data"]["run_id"])
    assert record is not None and record.status == "succeeded"


async def test_fastmcp_leaves_mid_run_and_a_new_session_fetches_the_result(
    fastmcp_python: Path, pipelines: Path, skills: Path, tmp_path: Path
) -> None:
    log = tmp_path / "marks.log"
    async with http_server(pipelines, "--skills", str(skills)) as served:
        started = await _client(fastmcp_python, served.url, "start", "long", {"log": str(log), "count": 5})
        # that client has disconnected; the task goes on in the server
        fetched = await _client(fastmcp_python, served.url, "fetch", "long", {}, started["task_id"])
    assert fetched["status"] == "completed"
    assert fetched["result"]["structuredContent"]["marked"] == 5
    assert _marks(log) == [f"m{n}" for n in range(5)]


async def test_fastmcp_cancels_a_task_mid_run(
    fastmcp_python: Path, pipelines: Path, skills: Path, tmp_path: Path
) -> None:
    log = tmp_path / "marks.log"
    async with http_server(pipelines, "--skills", str(skills)) as served:
        out = await _client(fastmcp_python, served.url, "cancel", "long", {"log": str(log), "count": 50})
    print(f"fastmcp: task {out['status']} {out['took']:.3f}s after tasks/cancel")
    assert out["status"] == "cancelled" and out["took"] < 10
    assert len(_marks(log)) < 50
    assert "orchestrator runs resume" in out["message"]
