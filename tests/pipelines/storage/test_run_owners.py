"""A run belongs to the identity that started it (issue 26, finding 4).

Over HTTP a handshake-era session is an identity of its own; a 2026-07-28 request carries no
session, so without authentication it is an identity of one request. Another identity gets,
for a run it did not start, exactly the answer an unknown run id gets: completion does not offer
it, `run://` does not serve it, `run_pipeline {resume}` does not finish it. A stdio client is
this machine's user, as the command line is: it sees its own runs and the command line's, not
an HTTP client's. Real servers (HTTP and stdio subprocesses) and the installed console script.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ResourceTemplateReference, TextResourceContents

from pipelines.storage.runs import RunStore
from tests._http import TIMEOUT, http_server
from tests.fixtures.run_skills import failed_run, publish, python_skills, text_of
from tests.helpers import ORCHESTRATOR, run_cli

RUN_TEMPLATE = ResourceTemplateReference(uri="run://{run_id}/{path}")
UNKNOWN = "0123456789ab"
"""A run id that no run has (the shape of a real one)."""


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    return python_skills(tmp_path / "skills", "gate")


def _keeper(home: Path, marker: Path) -> str:
    """A pipeline that writes an artifact, then fails until `marker` exists (so it can be resumed)."""
    return publish(
        home,
        f"""\
        id: keeper
        steps:
          - id: note
            skill: write-file
            parameters: {{path: notes/out.txt, content: "for its owner only"}}
          - id: check
            skill: gate
            parameters: {{marker: "{marker}"}}
        """,
    )


def _writer(home: Path) -> str:
    return publish(
        home,
        """\
        id: writer
        steps:
          - id: note
            skill: write-file
            parameters: {path: notes/out.txt, content: "written"}
        """,
    )


async def _offered(client: Client, run_id: str) -> list[str]:
    """The run ids completion offers for the first characters of `run_id`."""
    answer = await client.complete(RUN_TEMPLATE, {"name": "run_id", "value": run_id[:3]})
    return answer.completion.values


async def _files(client: Client, run_id: str) -> list[str]:
    answer = await client.complete(RUN_TEMPLATE, {"name": "path", "value": ""}, {"run_id": run_id})
    return answer.completion.values


async def _read_refusal(client: Client, run_id: str) -> tuple[int, str]:
    with pytest.raises(MCPError) as refused:
        await client.read_resource(f"run://{run_id}/notes/out.txt")
    return refused.value.error.code, refused.value.error.message.replace(run_id, "<id>")


def _envelope(result: CallToolResult, run_id: str) -> dict[str, Any]:
    assert result.is_error, text_of(result)
    error = json.loads(text_of(result))["error"]
    return {k: str(v).replace(run_id, "<id>") for k, v in error.items()}


async def _resume(client: Client, run_id: str) -> CallToolResult:
    return await client.call_tool("run_pipeline", {"resume": run_id})


async def _text(client: Client, uri: str) -> str:
    content = (await client.read_resource(uri)).contents[0]
    assert isinstance(content, TextResourceContents)
    return content.text


@pytest.mark.parametrize("other_era", ["legacy", "auto"])
async def test_another_client_cannot_complete_read_or_resume_a_run_and_is_answered_as_for_an_unknown_id(
    home: Path, skills: Path, tmp_path: Path, other_era: str
) -> None:
    marker = tmp_path / "open"
    pid = _keeper(home, marker)
    async with http_server(home, "--skills", str(skills)) as served:
        with anyio.fail_after(TIMEOUT):
            async with Client(served.url, mode="legacy") as owner, Client(served.url, mode=other_era) as other:
                run_id = failed_run(await owner.call_tool(pid, {}))
                assert run_id in await _offered(owner, run_id)
                assert await _files(owner, run_id) == ["notes/out.txt"]
                assert await _text(owner, f"run://{run_id}/notes/out.txt") == "for its owner only"

                assert run_id not in await _offered(other, run_id)
                assert await _files(other, run_id) == await _files(other, UNKNOWN) == []
                assert await _read_refusal(other, run_id) == await _read_refusal(other, UNKNOWN)
                for path in ("../../../config.yaml", "notes/none.txt"):  # no path tells the run exists
                    with pytest.raises(MCPError) as refused:
                        await other.read_resource(f"run://{run_id}/{path}")
                    assert f"no run '{run_id}'" in refused.value.error.message
                theirs = _envelope(await _resume(other, run_id), run_id)
                assert theirs == _envelope(await _resume(other, UNKNOWN), UNKNOWN)
                assert "no run '<id>'" in theirs["message"]

                marker.write_text("open")
                assert RunStore(home / "state.sqlite").get(run_id).status == "failed"  # type: ignore[union-attr]
                mine = await _resume(owner, run_id)
    assert not mine.is_error, text_of(mine)
    assert mine.structured_content is not None and mine.structured_content["status"] == "succeeded"


async def test_a_2026_client_over_http_without_authentication_has_no_identity_that_outlives_its_request(
    home: Path, skills: Path
) -> None:
    pid = _writer(home)
    async with http_server(home, "--skills", str(skills)) as served:
        with anyio.fail_after(TIMEOUT):
            async with Client(served.url, mode="auto") as modern:
                done = await modern.call_tool(pid, {})
                assert not done.is_error and done.structured_content is not None
                run_id = done.structured_content["run_id"]  # its result names the run
                offered = await _offered(modern, run_id)
                refusal = await _read_refusal(modern, run_id)
                unknown = await _read_refusal(modern, UNKNOWN)
    assert run_id not in offered and refusal == unknown


@contextlib.asynccontextmanager
async def _bearing(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    """A client whose every request carries `Authorization: Bearer <token>`."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


async def test_a_bearer_token_is_an_identity_a_2026_client_comes_back_with_in_a_new_connection(
    home: Path, skills: Path
) -> None:
    pid = _writer(home)
    mine, theirs = secrets.token_hex(16), secrets.token_hex(16)
    async with http_server(home, "--skills", str(skills)) as served:
        with anyio.fail_after(TIMEOUT):
            async with _bearing(served.url, mine) as first:
                done = await first.call_tool(pid, {})
                assert not done.is_error and done.structured_content is not None
                run_id = done.structured_content["run_id"]
            async with _bearing(served.url, mine, mode="legacy") as again, _bearing(served.url, theirs) as other:
                assert run_id in await _offered(again, run_id)  # another connection, another era: the same key
                assert await _text(again, f"run://{run_id}/notes/out.txt") == "written"
                assert run_id not in await _offered(other, run_id)
                assert await _read_refusal(other, run_id) == await _read_refusal(other, UNKNOWN)


async def test_everyone_holding_the_servers_auth_token_is_one_identity(home: Path, skills: Path) -> None:
    pid = _writer(home)
    async with http_server(home, "--skills", str(skills), "--auth-token", "team-secret") as served:
        with anyio.fail_after(TIMEOUT):
            async with _bearing(served.url, "team-secret") as alice, _bearing(served.url, "team-secret") as bob:
                done = await alice.call_tool(pid, {})
                assert done.structured_content is not None
                run_id = done.structured_content["run_id"]
                assert await _text(bob, f"run://{run_id}/notes/out.txt") == "written"


def _stdio(home: Path, skills: Path, tmp_path: Path) -> StdioServerParameters:
    env = {"ORCHESTRATOR_HOME": str(home), "ORCHESTRATOR_ALLOW_DIRS": str(tmp_path), "PATH": os.environ["PATH"]}
    return StdioServerParameters(command=str(ORCHESTRATOR), args=["serve", "--skills", str(skills)], env=env)


def _old_run(home: Path, run_id: str) -> None:
    """A run recorded by a version without owners: the table as it was, with one finished run."""
    artifacts = home / "pipelines" / "writer" / "runs" / run_id
    (artifacts / "notes").mkdir(parents=True)
    (artifacts / "notes" / "out.txt").write_text("from before owners")
    conn = sqlite3.connect(home / "state.sqlite")
    with conn:
        conn.execute(
            "CREATE TABLE orchestrator_runs (run_id TEXT PRIMARY KEY, pipeline TEXT NOT NULL, file TEXT,"
            " status TEXT NOT NULL, started REAL NOT NULL, ended REAL, inputs TEXT NOT NULL, result TEXT,"
            " error TEXT, failed_step TEXT, artifacts TEXT, owner_host TEXT, owner_boot TEXT, owner_pid INTEGER,"
            " owner_started INTEGER, heartbeat REAL)"
        )
        conn.execute(
            "INSERT INTO orchestrator_runs (run_id, pipeline, status, started, ended, inputs, artifacts)"
            " VALUES (?, 'writer', 'succeeded', ?, ?, '{}', ?)",
            (run_id, time.time() - 60, time.time() - 59, str(artifacts)),
        )
    conn.close()


async def test_a_stdio_client_sees_its_own_and_the_command_lines_runs_but_not_an_http_clients(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    pid = _writer(home)
    old = "00000000cafe"
    _old_run(home, old)  # recorded before runs had owners: the local operator's
    env = {"ORCHESTRATOR_HOME": str(home), "ORCHESTRATOR_ALLOW_DIRS": str(tmp_path), "PATH": os.environ["PATH"]}
    cli = run_cli("run", pid, "--skills", str(skills), "--json", env=env, cwd=tmp_path)
    assert cli.code == 0, cli.err
    by_cli = json.loads(cli.out)["run_id"]
    async with http_server(home, "--skills", str(skills)) as served:
        with anyio.fail_after(TIMEOUT):
            async with Client(served.url, mode="legacy") as remote:
                done = await remote.call_tool(pid, {})
                assert done.structured_content is not None
                by_http = done.structured_content["run_id"]
                remote_sees = {r: r in await _offered(remote, r) for r in (by_cli, by_http, old)}
                remote_refused = await _read_refusal(remote, by_cli)
            async with Client(_stdio(home, skills, tmp_path)) as local:
                local_sees = {r: r in await _offered(local, r) for r in (by_cli, by_http, old)}
                texts = [await _text(local, f"run://{r}/notes/out.txt") for r in (by_cli, old)]
                local_refused = await _read_refusal(local, by_http)
                unknown = await _read_refusal(local, UNKNOWN)
                mine = await local.call_tool(pid, {})
            assert mine.structured_content is not None
    assert remote_sees == {by_cli: False, by_http: True, old: False}
    assert local_sees == {by_cli: True, by_http: False, old: True}
    assert texts == ["written", "from before owners"]
    assert local_refused == unknown and remote_refused[1] == unknown[1]
    listed = run_cli("runs", "list", "--json", env=env, cwd=tmp_path)  # the operator's view: every run
    assert listed.code == 0, listed.err
    runs = {r["run_id"]: r for r in json.loads(listed.out)["runs"]}
    started_by = {run_id: runs[run_id]["started_by"] for run_id in (by_cli, old, mine.structured_content["run_id"])}
    assert started_by == {by_cli: "local", old: None, mine.structured_content["run_id"]: "local"}
    assert runs[by_http]["started_by"].startswith("session:")
