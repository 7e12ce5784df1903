"""Replicas: two `serve --transport http --stateless` processes on one shared state (real
PostgreSQL) and queue (real Redis), with two workers doing the runs.

A client talks to either replica (as a load balancer would send it): a task made through A is
polled and fetched through B, a pipeline registered through A is called through B, and both
replicas list the same runs. Every process has its own home: they share only the database, the
queue and the skills folder.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests import _scale
from tests._http import Served, http_server
from tests._scale import Workers, _env, two_workers
from tests._tasks_client import TasksExtension, TaskState, cancel, drive, get, result, start, start_core
from tests.fixtures.model_client import ClientModel
from tests.helpers import run_cli
from tests.mcp_server import test_rounds_continue as rounds
from tests.mcp_server.test_rounds_continue import _marks
from tests.mcp_server.test_tasks_sdk import LONG
from tests.pipelines.storage.test_scale_state import SHOUT

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


def _run_id(state: TaskState) -> str | None:
    return (state.meta or {}).get("io.orchestrator/run-id")


def _adopting(tmp_path: Path, skills: Path, workers: Workers, pipeline: str = "long", text: str = LONG) -> Any:
    """Replicas A and B on the workers' state and queue (logging what they do)."""
    homes = [tmp_path / "replica-a", tmp_path / "replica-b"]
    options = ("--state", workers.state, "--queue", workers.queue, "--log-level", "info")
    return _replicas(homes, pipeline, text, *options, skills=skills)


async def _kill_mid_run(a: Served, via_b: Client, task_id: str, log: Path, count: int, *, gently: bool = False) -> None:
    """Once the task's run is on record and its worker has marked twice, SIGKILL replica A (or
    `gently`: SIGTERM, as a rolling restart stops it)."""
    await drive(via_b, task_id, until=lambda s: len(_marks(log)) >= 2 and bool(_run_id(s)), timeout=120)
    if gently:
        a.process.terminate()
    else:
        a.process.kill()
    await a.process.wait()  # reaped: a zombie would still pass for a live process
    assert len(_marks(log)) < count, "the run ended before its replica was killed: make it longer"


@asynccontextmanager
async def _orphaned(
    tmp_path: Path, skills: Path, workers: Workers, count: int, *, gently: bool = False
) -> AsyncIterator[tuple[Served, Client, str]]:
    """A `long` task of `count` marks started through A, and A killed mid-run (`gently`: stopped
    with SIGTERM): (B, a client of B, the task id); the marks go to tmp_path/marks.log."""
    log = tmp_path / "marks.log"
    async with _adopting(tmp_path, skills, workers) as (a, b), _client(b.url) as via_b:
        async with _client(a.url) as via_a:
            created = await start(via_a, "long", {"log": str(log), "count": count})
        await _kill_mid_run(a, via_b, created.task_id, log, count, gently=gently)
        yield b, via_b, created.task_id


async def test_a_task_outlives_the_replica_that_created_it(tmp_path: Path, skills: Path, workers: Workers) -> None:
    """Replica A is killed (SIGKILL) while a worker runs its task's pipeline: B adopts the task and
    completes it with the run's real result, which the worker went on computing."""
    log = tmp_path / "marks.log"
    async with _orphaned(tmp_path, skills, workers, 12) as (b, via_b, task_id):
        done = await drive(via_b, task_id, timeout=120)
    assert done.status == "completed", done
    assert done.result is not None and done.result["structuredContent"]["marked"] == 12
    assert not done.result.get("isError")
    assert _run_id(done) is not None
    assert _marks(log) == [f"m{n}" for n in range(12)]  # the worker's run, each item once, not run again
    assert "adopted by" in b.stderr()


async def test_a_task_outlives_a_rolling_restart_of_its_replica(tmp_path: Path, skills: Path, workers: Workers) -> None:
    """Replica A is stopped cleanly (SIGTERM, as a deploy does) while a worker runs its task's
    pipeline: A hands the task over instead of cancelling its run, and B completes it."""
    log = tmp_path / "marks.log"
    async with _orphaned(tmp_path, skills, workers, 12, gently=True) as (b, via_b, task_id):
        done = await drive(via_b, task_id, timeout=120)
    assert done.status == "completed", done
    assert done.result is not None and done.result["structuredContent"]["marked"] == 12
    assert _marks(log) == [f"m{n}" for n in range(12)]  # the run went on: nothing cancelled, nothing twice
    assert "adopted by" in b.stderr()


async def test_a_task_whose_replica_lives_is_never_adopted_by_another(
    tmp_path: Path, skills: Path, workers: Workers
) -> None:
    """B, polled all through the run, sees A alive and leaves A's task to A."""
    import psycopg

    log = tmp_path / "marks.log"
    owners: set[int] = set()
    seen: list[TaskState] = []

    def owner(state: TaskState) -> bool:
        with psycopg.connect(workers.state) as conn:
            row = conn.execute("SELECT owner_pid FROM orchestrator_tasks WHERE task_id=%s", (state.task_id,)).fetchone()
        assert row is not None
        owners.add(int(row[0]))
        return False

    async with _adopting(tmp_path, skills, workers) as (a, b):
        async with _client(a.url) as via_a, _client(b.url) as via_b:
            created = await start(via_a, "long", {"log": str(log), "count": 6})
            done = await drive(via_b, created.task_id, seen=seen, until=owner, timeout=120)
    assert done.status == "completed" and done.result is not None, done
    assert done.result["structuredContent"]["marked"] == 6
    assert len(seen) > 2 and owners == {a.process.pid}  # B never took it over
    assert not any("adopted" in (s.status_message or "") for s in seen)
    assert "adopted" not in b.stderr()


DOOMED = """
id: doomed
inputs: {log: {type: string}, count: {type: integer, default: 4}, bad: {type: string}}
steps:
  - id: marks
    for: {items: "{{ range(count) | list }}", variable: n, parallel: false}
    skill: mark
    parameters: {log: "{{ log }}", call: "m{{ n }}"}
  - id: last
    skill: mark
    parameters: {log: "{{ bad }}", call: "end"}
outputs: {marked: "{{ marks | length }}"}
"""


async def test_an_adopted_task_whose_run_fails_ends_as_a_failed_call_does(
    tmp_path: Path, skills: Path, workers: Workers
) -> None:
    """The run fails on the worker after A is gone: the task B completes carries the same error
    envelope (type, step, where, how to resume) as the same failure of a task A saw to its end."""
    bad = str(tmp_path / "no-such-folder" / "x.log")
    async with _adopting(tmp_path, skills, workers, "doomed", DOOMED) as (a, b):
        async with _client(b.url) as via_b:
            async with _client(a.url) as via_a:
                arguments = {"log": str(tmp_path / "first.log"), "count": 1, "bad": bad}
                normal = await drive(via_a, (await start(via_a, "doomed", arguments)).task_id, timeout=120)
                log = tmp_path / "second.log"
                created = await start(via_a, "doomed", {"log": str(log), "count": 12, "bad": bad})
            await _kill_mid_run(a, via_b, created.task_id, log, 12)
            adopted = await drive(via_b, created.task_id, timeout=120)
    assert normal.status == adopted.status == "completed"
    assert normal.result is not None and adopted.result is not None
    assert normal.result.get("isError") and adopted.result.get("isError")
    first, second = (json.loads(s.result["content"][0]["text"])["error"] for s in (normal, adopted))  # type: ignore[index]
    runs = [_run_id(normal), _run_id(adopted)]
    assert all(runs) and runs[0] != runs[1]
    for error, run in zip((first, second), runs, strict=True):
        assert "step 'last'" in error["where"] and f"orchestrator runs resume {run}" in error["hint"]
    same = {k: str(v).replace(runs[1] or "", runs[0] or "") for k, v in second.items()}
    assert same == {k: str(v) for k, v in first.items()}, (first, second)
    assert _marks(log) == [f"m{n}" for n in range(12)]


async def test_an_adopted_task_cancelled_stops_its_run_on_the_worker(
    tmp_path: Path, skills: Path, workers: Workers
) -> None:
    log = tmp_path / "marks.log"
    async with _orphaned(tmp_path, skills, workers, 100) as (_, via_b, task_id):
        adopted = await drive(via_b, task_id, until=lambda s: "adopted" in (s.status_message or ""))
        await cancel(via_b, task_id)
        state = await drive(via_b, task_id, timeout=60)
        run_id = _run_id(state)
        with anyio.fail_after(120):  # the worker stops the run and records it so
            while (run := _run(workers.state, run_id, tmp_path)) is None or run["status"] == "running":
                await anyio.sleep(0.1)
    assert adopted.status == "working"
    assert state.status == "cancelled" and f"orchestrator runs resume {run_id}" in (state.status_message or "")
    assert run["status"] == "cancelled", run
    assert len(_marks(log)) < 100  # it stopped: the loop did not run to its end


def _task(state: str, task_id: str, cwd: Path) -> dict[str, Any]:
    listed = run_cli("runs", "list", "--state", state, "--json", env=_env(cwd / "reader"), cwd=cwd).json()
    return next(t for t in listed["tasks"] if t["task_id"] == task_id)


async def test_a_replica_adopts_an_orphaned_task_that_no_client_asks_about(
    tmp_path: Path, skills: Path, workers: Workers
) -> None:
    """Nobody polls after A is killed: B finds the task on its own and completes it on record."""
    async with _orphaned(tmp_path, skills, workers, 8) as (_, via_b, task_id):
        with anyio.fail_after(120):  # read from the database, not through a replica
            while (task := _task(workers.state, task_id, tmp_path))["status"] != "completed":
                await anyio.sleep(0.2)
        done = await get(via_b, task_id)
    assert task["run_id"] == _run_id(done)
    assert done.status == "completed" and done.result is not None
    assert done.result["structuredContent"]["marked"] == 8
