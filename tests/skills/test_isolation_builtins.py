"""`run-tests` and `shell-command` run their programs confined, like script skills.

The tests under test and the commands are the stranger's code here: a test suite that tries to
read the server's secrets, write into the project or reach the network fails those attempts
while it still reads the project it tests. Real bubblewrap (skipped, saying why, without it).
"""

from __future__ import annotations

import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server import create_server
from skills.executors.isolation import probe

ISOLATION = probe()
pytestmark = pytest.mark.skipif(
    not ISOLATION.available, reason=f"confinement (bubblewrap) does not work here: {ISOLATION.reason}"
)


async def call(home: Path, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(120):
        async with Client(create_server(home=home)) as client:
            result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


async def test_a_test_suite_reads_its_project_but_no_secret_no_outside_file_and_no_network(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-the-server")
    secret = tmp_path / "secret.txt"
    secret.write_text("the server's")
    project = tmp_path / "project"
    project.mkdir()
    (project / "data.txt").write_text("project data")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        (project / "test_escape.py").write_text(
            textwrap.dedent(
                f"""\
                import os, pathlib, socket, pytest

                HERE = pathlib.Path(__file__).parent

                def test_reads_its_project():
                    assert (HERE / "data.txt").read_text() == "project data"

                def test_cannot_read_outside():
                    with pytest.raises(OSError):
                        open({str(secret)!r}).read()

                def test_cannot_write_into_the_project():
                    with pytest.raises(OSError):
                        (HERE / "planted.txt").write_text("x")

                def test_cannot_connect():
                    with pytest.raises(OSError):
                        socket.create_connection(("127.0.0.1", {port}), timeout=5)

                def test_sees_no_secret():
                    seen = [open(f"/proc/{{p}}/environ", "rb").read() for p in os.listdir("/proc") if p.isdigit()
                            and os.access(f"/proc/{{p}}/environ", os.R_OK)]
                    assert not any(b"sk-ant-from-the-server" in e for e in seen)
                    assert "ANTHROPIC_API_KEY" not in os.environ

                def test_has_a_private_tmp(tmp_path):
                    (tmp_path / "x").write_text("scratch")
                """
            )
        )
        out = await call(home, "run-tests", {"path": str(project), "timeout": 120})
    assert out["failures"] == [] and out["passed"] == 6, out["output"]
    assert not (project / "planted.txt").exists()


async def test_run_tests_shows_the_venv_of_an_explicit_python_and_refuses_a_non_python(
    home: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_one.py").write_text("def test_one():\n    assert True\n")
    out = await call(home, "run-tests", {"path": str(project), "python": sys.executable})
    assert out["passed"] == 1 and out["ok"] is True
    async with Client(create_server(home=home)) as client:
        refused = await client.call_tool("run-tests", {"path": str(project), "python": "/bin/sh"})
    assert refused.is_error and "not inside a Python installation" in refused.content[0].text


async def test_shell_command_cannot_read_the_servers_environment_through_proc(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-from-the-server")
    (home / "skills").mkdir(parents=True)
    (home / "skills" / "registry.yaml").write_text("skills:\n  shell-command: {source: builtin, enabled: true}\n")
    out = await call(home, "shell-command", {"argv": ["sh", "-c", "cat /proc/$PPID/environ; ls /proc"]})
    assert "aws-from-the-server" not in out["stdout"] + out["stderr"]
    assert len([p for p in out["stdout"].split() if p.isdigit()]) <= 4  # its own PID namespace
