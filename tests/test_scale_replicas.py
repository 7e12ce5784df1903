"""Replicas: two `serve --transport http --stateless` processes on one shared state (real
PostgreSQL) and queue (real Redis), with two workers doing the runs.

A client talks to either replica (as a load balancer would send it): a task made through A is
polled and fetched through B, a pipeline registered through A is called through B, and both
replicas list the same runs. Every process has its own home: they share only the database, the
queue and the skills folder.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import _scale
import anyio
import pytest
import test_rounds_continue as rounds
from _http import Served, http_server
from _scale import Workers, _env, two_workers
from _tasks_client import TasksExtension, TaskState, cancel, drive, get, result, start, start_core
from fixtures.model_client import ClientModel
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


@asynccontextmanager
async def _replicas(
    homes: list[Path], pipeline: str, text: str, *options: str, skills: Path, stateless: bool = True
) -> AsyncIterator[tuple[Served, Served]]:
    """Two HTTP replicas on the shared state, each with its own home publishing the same pipeline
    (as from one image); stateless unless told (a handshake-era client keeps a session on each)."""
    for home in homes:
        (home / "pipelines").mkdir(parents=True)
        (home / "pipelines" / f"{pipeline}.yaml").write_text(text)
    shared = (*(("--stateless",) if stateless else ()), *options, "--skills", str(skills))
    async with (
        http_server(homes[0], *shared, env=_env(homes[0])) as a,
        http_server(homes[1], *shared, env=_env(homes[1])) as b,
    ):
        yield a, b


def _client(url: str) -> Client:
    return Client(url, extensions=[TasksExtension()])  # type: ignore[arg-type]


async def test_two_replicas_share_tasks_runs_and_registered_pipelines(
    tmp_path: Path, skills: Path, workers: Workers
) -> None:
    homes = [tmp_path / "replica-a", tmp_path / "replica-b"]
    log = tmp_path / "marks.log"
    async with _replicas(homes, "long", LONG, "--state", workers.state, "--queue", workers.queue, skills=skills) as (
        a,
        b,
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


def _sampling_client(url: str, model: ClientModel) -> Client:
    return Client(
        url,
        extensions=[TasksExtension()],  # type: ignore[arg-type]
        sampling_callback=model,
        sampling_capabilities=model.capabilities,
    )


async def test_a_task_waiting_for_the_clients_model_is_answered_through_another_replica(
    tmp_path: Path, skills: Path, pg_url: str
) -> None:
    rounds._teller(skills)
    homes = [tmp_path / "replica-a", tmp_path / "replica-b"]
    log = tmp_path / "marks.log"
    model = ClientModel("Once upon a time.", "The end.")
    seen: list[TaskState] = []
    async with _replicas(homes, "story", rounds.STORY, "--state", pg_url, skills=skills) as (a, b):  # no queue
        async with _sampling_client(a.url, model) as via_a, _sampling_client(b.url, model) as via_b:
            created = await start(via_a, "story", {"log": str(log)})
            # B shows A's waits, takes the answers (tasks/update) and hands them to A's task
            done = await drive(via_b, created.task_id, model, seen=seen, timeout=120)
            on_a = await get(via_a, created.task_id)
    assert done.status == "completed" and done.result is not None, done
    assert done.result.get("structuredContent", {}).get("story") == "Once upon a time. The end."
    assert on_a.status == "completed" and on_a.result == done.result
    waits = [s for s in seen if s.status == "input_required"]
    assert waits and all(s.input_requests for s in waits)  # B showed the requests of the task A runs
    assert len(model.requests) == 2  # each request answered once, through B
    assert _marks(log) == ["first", "second"]  # nothing ran twice


async def test_a_task_cancelled_through_another_replica_stops_its_run_on_the_worker(
    tmp_path: Path, skills: Path, workers: Workers
) -> None:
    homes = [tmp_path / "replica-a", tmp_path / "replica-b"]
    log = tmp_path / "marks.log"
    async with _replicas(homes, "long", LONG, "--state", workers.state, "--queue", workers.queue, skills=skills) as (
        a,
        b,
    ):
        async with _client(a.url) as via_a, _client(b.url) as via_b:
            created = await start(via_a, "long", {"log": str(log), "count": 100})
            await drive(via_b, created.task_id, until=lambda s: len(_marks(log)) >= 2, timeout=120)
            await cancel(via_b, created.task_id)
            state = await drive(via_b, created.task_id, timeout=60)
            on_a = await get(via_a, created.task_id)
            run_id = (state.meta or {}).get("io.orchestrator/run-id")
            # the worker that drove the run stopped it and recorded it so (not only the task record)
            with anyio.fail_after(120):
                while (run := _run(workers.state, run_id, tmp_path)) is None or run["status"] == "running":
                    await anyio.sleep(0.1)
    assert state.status == on_a.status == "cancelled"
    assert run_id and "orchestrator runs resume" in (state.status_message or "")
    assert run["status"] == "cancelled", run
    assert len(_marks(log)) < 100  # it stopped: the loop did not run to its end


def _run(state: str, run_id: Any, cwd: Path) -> dict[str, Any] | None:
    if not run_id:
        return None
    shown = run_cli("runs", "show", str(run_id), "--state", state, "--json", env=_env(cwd / "reader"), cwd=cwd)
    return shown.json() if shown.code == 0 else None


async def test_a_core_task_is_answered_and_fetched_with_tasks_result_through_another_replica(
    tmp_path: Path, skills: Path, pg_url: str
) -> None:
    """2025-11-25: `tasks/result` on B blocks while A runs the task, sends the task's sampling
    requests to the client on its own stream and hands the answers to A through the database."""
    rounds._teller(skills)
    homes = [tmp_path / "replica-a", tmp_path / "replica-b"]
    log = tmp_path / "marks.log"
    model = ClientModel("Once upon a time.", "The end.")
    async with _replicas(homes, "story", rounds.STORY, "--state", pg_url, skills=skills, stateless=False) as (a, b):
        extra: dict[str, Any] = {"sampling_callback": model, "sampling_capabilities": model.capabilities}
        async with Client(a.url, mode="legacy", **extra) as via_a, Client(b.url, mode="legacy", **extra) as via_b:
            answer = await start_core(via_a, "story", {"log": str(log)})
            task_id = answer["task"]["taskId"]
            with anyio.fail_after(120):
                final = await result(via_b, task_id)  # blocks; the model is asked on B's stream
            state = await get(via_a, task_id)
    assert final.structured_content is not None, final.content[0].text  # type: ignore[union-attr]
    assert final.structured_content is not None and final.structured_content["story"] == "Once upon a time. The end."
    assert state.status == "completed" and len(model.requests) == 2
    assert _marks(log) == ["first", "second"]


async def test_a_run_on_a_worker_asks_the_clients_model_through_the_replica_that_started_it(
    tmp_path: Path, skills: Path, pg_url: str, redis_url: str
) -> None:
    """A worker has no client: the prompt steps of a queued run ask the client's model through
    the replica that handed the run out, here as the task's input requests answered through the
    other replica. Both answers shape the result, and the worker (not a replica) ran the run."""
    rounds._teller(skills)  # before the workers start: they load the same skills
    homes = [tmp_path / "replica-a", tmp_path / "replica-b"]
    log = tmp_path / "marks.log"
    model = ClientModel("Once upon a time.", "The end.")
    with two_workers(tmp_path, skills, pg_url, redis_url) as workers:
        options = ("--state", workers.state, "--queue", workers.queue)
        async with _replicas(homes, "story", rounds.STORY, *options, skills=skills) as (a, b):
            async with _sampling_client(a.url, model) as via_a, _sampling_client(b.url, model) as via_b:
                created = await start(via_a, "story", {"log": str(log)})
                done = await drive(via_b, created.task_id, model, timeout=120)
        listed = run_cli("runs", "list", "--state", workers.state, "--json", env=_env(homes[0]), cwd=tmp_path).json()
    assert done.status == "completed" and done.result is not None, done
    assert done.result.get("structuredContent", {}).get("story") == "Once upon a time. The end."
    assert len(model.requests) == 2 and model.left == 0  # each asked once
    assert "an opening" in rounds_prompt(model, 0) and "Once upon a time." in rounds_prompt(model, 1)
    assert _marks(log) == ["first", "second"]
    (run,) = [r for r in listed["runs"] if r["pipeline"] == "story"]
    assert run["status"] == "succeeded"


def rounds_prompt(model: ClientModel, index: int) -> str:
    return model.prompt(index)
