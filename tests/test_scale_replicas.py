"""Replicas: two `serve --transport http --stateless` processes on one shared state (real
PostgreSQL) and queue (real Redis), with two workers doing the runs.

A client talks to either replica (as a load balancer would send it): a task made through A is
polled and fetched through B, a pipeline registered through A is called through B, and both
replicas list the same runs. Every process has its own home: they share only the database, the
queue and the skills folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _scale
import anyio
import pytest
import test_rounds_continue as rounds
from _http import http_server
from _scale import Workers, _env, two_workers
from _tasks_client import TasksExtension, drive, start
from helpers import run_cli
from mcp import Client
from test_rounds_continue import _marks
from test_scale_state import SHOUT
from test_tasks_sdk import LONG

skills = rounds.skills  # the fixture: the `mark` tool
postgres_server, pg_url, redis_url = _scale.postgres_server, _scale.pg_url, _scale.redis_url  # real servers


@pytest.fixture
def workers(tmp_path: Path, skills: Path, pg_url: str, redis_url: str) -> Iterator[Workers]:
    with two_workers(tmp_path, skills, pg_url, redis_url) as group:
        yield group


def _client(url: str) -> Client:
    return Client(url, extensions=[TasksExtension()])  # type: ignore[arg-type]


async def test_two_replicas_share_tasks_runs_and_registered_pipelines(
    tmp_path: Path, skills: Path, workers: Workers
) -> None:
    shared = ("--stateless", "--state", workers.state, "--queue", workers.queue, "--skills", str(skills))
    homes = [tmp_path / "replica-a", tmp_path / "replica-b"]
    for home in homes:  # the same published pipeline on both (as from one image)
        (home / "pipelines").mkdir(parents=True)
        (home / "pipelines" / "long.yaml").write_text(LONG)
    log = tmp_path / "marks.log"
    async with (
        http_server(homes[0], *shared, env=_env(homes[0])) as a,
        http_server(homes[1], *shared, env=_env(homes[1])) as b,
    ):
        async with _client(a.url) as via_a, _client(b.url) as via_b, Client(b.url) as plain_b:
            created = await start(via_a, "long", {"log": str(log), "count": 3})
            with anyio.fail_after(120):
                done = await drive(via_b, created.task_id)
            assert done.status == "completed", done
            result: Any = done.result
            assert result["structuredContent"]["marked"] == 3

            registered = await via_a.call_tool("register_pipeline", {"yaml": SHOUT})
            assert not registered.is_error, registered.content
            with anyio.fail_after(60):
                called = await plain_b.call_tool("shout", {"log": str(log), "word": "hi"})
            assert not called.is_error, called.content
            assert called.structured_content is not None and called.structured_content["said"] == "hi!"
            assert "shout" in {t.name for t in (await plain_b.list_tools()).tools}
    assert _marks(log) == ["m0", "m1", "m2", "hi!"]
    runs = {}
    for home in homes:
        listed = run_cli("runs", "list", "--state", workers.state, "--json", env=_env(home), cwd=tmp_path).json()
        runs[home.name] = sorted((r["pipeline"], r["status"]) for r in listed["runs"])
    assert runs["replica-a"] == runs["replica-b"] == [("long", "succeeded"), ("shout", "succeeded")]
    assert not (homes[0] / "pipelines" / "shout.yaml").exists()  # in the shared state, not one replica's disk
