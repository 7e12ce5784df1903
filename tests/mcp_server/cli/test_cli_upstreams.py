"""The command line sees what the server sees: imported tools of servers.json (`--servers FILE`).

`call`, `run`, `pipelines list|validate|show` and `skills list|show` start the upstream servers
their target needs (our fixture server over stdio, the real mcp-server-time through uvx) and
only those: a folder skill starts none. Every command runs the installed console script.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.test_adapter_thirdparty import FIRST_RUN_TIMEOUT, time_entry, uvx_servers  # noqa: F401 (a fixture)
from tests.fixtures.adapter_support import FIXTURE
from tests.helpers import Run, run_cli, write_skill

SHOUT = """\
id: shout
inputs:
  text: {type: string, default: "hi"}
steps:
  - id: echoed
    skill: fixture_echo
    parameters: {text: "{{ text }}!"}
outputs:
  said: "{{ echoed.result }}"
"""

LOUDER = """\
id: louder
steps:
  - id: twice
    skill: shout
    parameters: {text: "again"}
outputs:
  said: "{{ twice.said }}"
"""


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    return {**os.environ, "ORCHESTRATOR_HOME": str(home)}


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """A file the fixture upstream appends a line to each time it is started."""
    return tmp_path / "started.txt"


@pytest.fixture
def servers(tmp_path: Path, marker: Path) -> Path:
    start = f"echo started >> '{marker}'; exec '{sys.executable}' '{FIXTURE}' stdio"
    path = tmp_path / "servers.json"
    entries: dict[str, Any] = {
        "fixture": {"command": "/bin/sh", "args": ["-c", start], "include": ["echo", "add", "fail"]},
        "dead": {"command": "/bin/false"},
        "mute": {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]},
    }
    path.write_text(json.dumps({"mcpServers": entries}))
    return path


def cli(*args: str, env: dict[str, str], cwd: Path) -> Run:
    return run_cli(*args, env=env, cwd=cwd, timeout=180)


def test_call_reaches_an_imported_tool_and_starts_only_its_server(
    servers: Path, marker: Path, env: dict[str, str], tmp_path: Path
) -> None:
    done = cli("call", "fixture_add", "--arg", "a=2", "--arg", "b=3", "--servers", str(servers), env=env, cwd=tmp_path)
    assert done.code == 0, done.err
    assert json.loads(done.out) == {"total": 5}
    assert marker.read_text().splitlines() == ["started"]


def test_call_of_a_folder_skill_starts_no_upstream(
    servers: Path, marker: Path, env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("a")
    done = cli(
        "call",
        "list-files",
        "--arg",
        "directory=.",
        "--arg",
        "pattern=*.txt",
        "--servers",
        str(servers),
        env=env,
        cwd=tmp_path,
    )
    assert done.code == 0, done.err
    assert json.loads(done.out)["count"] == 1
    assert not marker.exists()


def test_the_home_servers_file_is_used_without_the_option(
    servers: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "servers.json").write_text(servers.read_text())
    done = cli("call", "fixture_echo", "--arg", "text=from the home", env=env, cwd=tmp_path)
    assert done.code == 0, done.err
    assert "from the home" in done.out


def test_an_imported_tool_whose_server_cannot_start_fails_with_the_reason(
    servers: Path, env: dict[str, str], tmp_path: Path
) -> None:
    done = cli("call", "dead_anything", "--servers", str(servers), env=env, cwd=tmp_path)
    assert done.code == 1
    assert "upstream server did not connect: 'dead': " in done.err
    assert "orchestrator servers test dead" in done.err


def test_a_server_that_never_answers_is_given_up_after_the_connect_timeout(
    servers: Path, env: dict[str, str], tmp_path: Path
) -> None:
    done = cli("call", "mute_x", "--connect-timeout", "1", "--servers", str(servers), env=env, cwd=tmp_path)
    assert done.code == 1
    assert "'mute': no answer within 1s" in done.err and "raise --connect-timeout" in done.err


def test_skills_before_the_tool_name_does_not_swallow_it(env: dict[str, str], tmp_path: Path) -> None:
    contract = {"inputs": {"type": "object"}, "run": {"python": "impl:run"}}
    write_skill(tmp_path / "more", "hello", contract=contract, impl="def run():\n    return {'hello': 'world'}\n")
    done = cli("call", "--skills", str(tmp_path / "more"), "hello", env=env, cwd=tmp_path)
    assert done.code == 0, done.err
    assert json.loads(done.out) == {"hello": "world"}


def test_a_pipeline_calling_an_imported_tool_validates_lists_and_runs(
    servers: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    (home / "pipelines").mkdir(parents=True)
    (home / "pipelines" / "shout.yaml").write_text(SHOUT)
    (home / "pipelines" / "louder.yaml").write_text(LOUDER)  # through another pipeline
    opts = ("--servers", str(servers))
    file = str(home / "pipelines" / "shout.yaml")

    valid = cli("pipelines", "validate", file, *opts, env=env, cwd=tmp_path)
    assert valid.code == 0, valid.out + valid.err
    unknown = cli("pipelines", "validate", file, env=env, cwd=tmp_path)  # no servers file: the tool is unknown
    assert unknown.code == 2 and "unknown skill 'fixture_echo'" in unknown.out

    listed = cli("pipelines", "list", "--json", *opts, env=env, cwd=tmp_path)
    assert listed.code == 0, listed.err
    data = listed.json()
    assert isinstance(data, dict)
    assert {"shout", "louder"} <= {p["id"] for p in data["pipelines"]} and data["problems"] == []

    run = cli("run", "shout", "--input", "text=hey", "--json", *opts, env=env, cwd=tmp_path)
    assert run.code == 0, run.err
    assert run.json()["said"] == "hey!"  # type: ignore[index]
    nested = cli("run", "louder", "--json", *opts, env=env, cwd=tmp_path)
    assert nested.code == 0, nested.err
    assert nested.json()["said"] == "again!"  # type: ignore[index]
    shown = cli("pipelines", "show", "louder", *opts, env=env, cwd=tmp_path)
    assert shown.code == 0 and "# louder" in shown.out


def test_a_run_whose_upstream_cannot_start_fails_naming_it(
    servers: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    (home / "pipelines").mkdir(parents=True)
    (home / "pipelines" / "dead.yaml").write_text(SHOUT.replace("id: shout", "id: dead").replace("fixture_", "dead_"))
    done = cli("run", "dead", "--servers", str(servers), env=env, cwd=tmp_path)
    assert done.code == 1
    assert "upstream server did not connect: 'dead'" in done.err


def test_a_run_failing_at_an_imported_tool_fails_like_any_run_and_resumes(
    servers: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    (home / "pipelines").mkdir(parents=True)
    text = SHOUT.replace("id: shout", "id: failing").replace("fixture_echo", "fixture_fail")
    (home / "pipelines" / "failing.yaml").write_text(text.replace("{text: ", "{message: "))
    done = cli("run", "failing", "--servers", str(servers), env=env, cwd=tmp_path)
    assert done.code == 1, done.err
    assert "failed at step 'echoed'" in done.err and "hi!" in done.err and "orchestrator runs resume" in done.err
    run_id = done.err.split("failed at step")[0].split("run ")[-1].strip()
    again = cli("runs", "resume", run_id, "--servers", str(servers), env=env, cwd=tmp_path)
    assert again.code == 1 and "failed at step 'echoed'" in again.err  # reached the upstream again


def test_skills_list_shows_imported_tools_and_reports_servers_that_did_not_connect(
    servers: Path, env: dict[str, str], tmp_path: Path
) -> None:
    done = cli("skills", "list", "--json", "--connect-timeout", "5", "--servers", str(servers), env=env, cwd=tmp_path)
    assert done.code == 0, done.err
    data = done.json()
    assert isinstance(data, dict)
    names = {s["name"]: s for s in data["skills"]}
    assert {"fixture_echo", "fixture_add", "list-files", "code-review"} <= set(names)
    assert names["fixture_add"]["source"] == "server"
    assert "upstream server 'dead' did not connect" in done.err
    assert "upstream server 'mute' did not connect: no answer within 5s" in done.err
    shown = cli("skills", "show", "fixture_add", "--servers", str(servers), env=env, cwd=tmp_path)
    assert shown.code == 0 and "Add two integers" in shown.out


@pytest.mark.usefixtures("uvx_servers")
def test_call_reaches_the_real_mcp_server_time(tmp_path: Path, env: dict[str, str]) -> None:
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"time": time_entry()}}))
    timeout = str(FIRST_RUN_TIMEOUT)
    done = cli(
        "call", "time_get_current_time", "--arg", "timezone=UTC", "--servers", str(servers),
        "--connect-timeout", timeout, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.code == 0, done.err
    now = json.loads(done.out)
    assert now["timezone"] == "UTC" and now["datetime"].endswith("+00:00")
