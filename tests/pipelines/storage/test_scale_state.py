"""Shared state in PostgreSQL (`--state postgresql://...`): runs, checkpoints, tasks and registered
pipelines that every process on the database sees, against a real PostgreSQL server.

Each "machine" is its own home folder: what one process wrote is read through the database by
another that shares nothing else with it. The embedded default (state.sqlite) is untouched.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server import create_server
from mcp_server.tasks.postgres import PostgresTaskStore
from pipelines.storage.pg import Postgres
from pipelines.storage.state import Backends
from tests import _scale
from tests._scale import free_port
from tests._tasks_client import TasksExtension, drive, start
from tests.helpers import run_cli, write_skill
from tests.mcp_server import test_rounds_continue as rounds
from tests.mcp_server.test_rounds_continue import _marks
from tests.mcp_server.test_tasks_sdk import LONG

skills = rounds.skills  # the fixture: the `mark` tool
postgres_server, pg_url, redis_url = _scale.postgres_server, _scale.pg_url, _scale.redis_url  # real servers

GATED = """
id: gated
inputs: {log: {type: string}, marker: {type: string}}
steps:
  - id: first
    skill: record
    parameters: {log: "{{ log }}", label: first}
  - id: gate
    skill: gate
    parameters: {log: "{{ log }}", marker: "{{ marker }}"}
  - id: last
    skill: record
    parameters: {log: "{{ log }}", label: last}
outputs: {done: "{{ last.label }}"}
"""


def _env(home: Path) -> dict[str, str]:
    drop = ("ORCHESTRATOR_TOKEN", "ORCHESTRATOR_STATE", "ORCHESTRATOR_QUEUE")
    return {k: v for k, v in os.environ.items() if k not in drop} | {"ORCHESTRATOR_HOME": str(home)}


@pytest.fixture
def gated(tmp_path: Path) -> Path:
    """Skills `record` (appends a label to a log) and `gate` (fails until a marker file exists)."""
    root = tmp_path / "skills"
    for name, impl in (
        (
            "record",
            "def record(log, label):\n    open(log, 'a').write(label + '\\n')\n    return {'label': label}\n",
        ),
        (
            "gate",
            "from pathlib import Path\n\ndef gate(log, marker):\n    open(log, 'a').write('gate\\n')\n"
            "    if not Path(marker).exists():\n        raise RuntimeError('the gate is closed')\n"
            "    return {'open': True}\n",
        ),
    ):
        write_skill(root, name, contract={"inputs": {"type": "object"}, "run": {"python": f"impl:{name}"}}, impl=impl)
    return root


def test_a_run_recorded_on_one_machine_is_listed_and_resumed_on_another(
    tmp_path: Path, gated: Path, pg_url: str
) -> None:
    pipeline, log, marker = tmp_path / "gated.yaml", tmp_path / "steps.log", tmp_path / "open"
    pipeline.write_text(GATED)
    one, two = _env(tmp_path / "one"), _env(tmp_path / "two")
    state = ("--state", pg_url)
    args = ("--skills", str(gated), *state, "--json")
    inputs = ("--input", f"log={log}", "--input", f"marker={marker}")
    failed = run_cli("run", str(pipeline), *inputs, *args, env=one, cwd=tmp_path)
    assert failed.code == 1, failed.err
    # Another machine (its own home, nothing shared but the database) sees the failed run ...
    listed = run_cli("runs", "list", *state, "--json", env=two, cwd=tmp_path).json()
    (run,) = [r for r in listed["runs"] if r["pipeline"] == "gated"]
    assert run["status"] == "failed" and run["failed_step"] == "gate"
    # ... which the first machine's own state.sqlite never held.
    assert "gated" not in run_cli("runs", "list", env=one, cwd=tmp_path).out
    marker.write_text("open")
    resumed = run_cli("runs", "resume", run["run_id"], *args, env=two, cwd=tmp_path)
    assert resumed.code == 0, resumed.err
    assert resumed.json()["done"] == "last"
    # The checkpoint in PostgreSQL: `first` ran once, only the gate and what follows ran again.
    assert log.read_text().split() == ["first", "gate", "gate", "last"]
    shown = run_cli("runs", "show", run["run_id"], *state, "--json", env=one, cwd=tmp_path).json()
    assert shown["status"] == "succeeded" and shown["result"]["done"] == "last"
    pruned = run_cli("runs", "prune", "--older-than", "0s", *state, "--json", env=two, cwd=tmp_path)
    assert pruned.code == 0, pruned.err
    assert "gated" not in run_cli("runs", "list", *state, env=one, cwd=tmp_path).out


def test_migrations_run_at_once_from_several_processes_and_again(pg_url: str) -> None:
    failures: list[BaseException] = []

    def migrate() -> None:
        pg = Postgres(pg_url)
        try:
            PostgresTaskStore(pg).list()  # the run tables, then the task store's
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)
        finally:
            pg.close()

    threads = [threading.Thread(target=migrate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    Postgres(pg_url).migrate()  # and once more on a migrated database
    assert failures == []
    import psycopg

    with psycopg.connect(pg_url) as conn:
        versions = conn.execute("SELECT version FROM orchestrator_schema").fetchall()
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname='public'")}
    assert versions == [(1,)]
    assert {"orchestrator_runs", "orchestrator_tasks", "orchestrator_pipelines", "checkpoints"} <= tables


def test_doctor_checks_the_state_and_the_queue_and_never_shows_a_password(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    secret = pg_url.replace("postgres@", "postgres:s3cret-pw@")
    env = _env(tmp_path / "home")
    report = run_cli("doctor", "--state", secret, "--queue", redis_url, "--json", env=env, cwd=tmp_path).json()
    assert report["state"]["ok"] is True and report["state"]["server"].startswith("PostgreSQL")
    assert report["queue"]["ok"] is True and report["queue"]["server"].startswith("Redis")
    text = run_cli("doctor", "--state", secret, env=env, cwd=tmp_path)
    assert "postgres:***@" in text.out and "s3cret" not in text.out + text.err
    nobody = f"postgresql://postgres:s3cret-pw@127.0.0.1:{free_port()}/nowhere"
    down = run_cli("doctor", "--state", nobody, "--queue", f"redis://127.0.0.1:{free_port()}/0", env=env, cwd=tmp_path)
    assert down.code == 1  # a check failed (both are unreachable)
    assert "state:      postgresql postgresql://postgres:***@" in down.out and "UNREACHABLE" in down.out
    assert "queue:      redis redis://127.0.0.1:" in down.out
    assert "s3cret" not in down.out + down.err
    bad = run_cli("run", "fan-out", "--state", "mysql://root:s3cret@db/x", env=env, cwd=tmp_path)
    assert bad.code == 2 and "not a PostgreSQL URL" in bad.err and "s3cret" not in bad.err


def _client(server: Any) -> Client:
    return Client(server, mode="auto", extensions=[TasksExtension()])  # type: ignore[arg-type]


async def test_a_task_made_through_one_server_is_polled_and_fetched_through_another(
    tmp_path: Path, skills: Path, pg_url: str
) -> None:
    backends = Backends.of(state=pg_url, queue="", artifacts=str(tmp_path / "artifacts"))
    homes = [tmp_path / "a", tmp_path / "b"]
    for home in homes:
        (home / "pipelines").mkdir(parents=True)
        (home / "pipelines" / "long.yaml").write_text(LONG)
    a, b = (create_server(home=h, skill_dirs=[skills], backends=backends) for h in homes)
    log = tmp_path / "marks.log"
    async with _client(a) as first, _client(b) as other:
        created = await start(first, "long", {"log": str(log), "count": 3})
        with anyio.fail_after(60):
            done = await drive(other, created.task_id)
    assert done.status == "completed", done
    assert done.result is not None and done.result["structuredContent"]["marked"] == 3
    assert _marks(log) == ["m0", "m1", "m2"]
    run_id = done.result["structuredContent"]["run_id"]
    listed = run_cli("runs", "list", "--state", pg_url, "--json", env=_env(tmp_path / "c"), cwd=tmp_path).json()
    assert [t["status"] for t in listed["tasks"] if t["task_id"] == created.task_id] == ["completed"]
    (run,) = [r for r in listed["runs"] if r["run_id"] == run_id]
    assert run["status"] == "succeeded"
    assert run["artifacts"] == str(tmp_path / "artifacts" / "long" / "runs" / run_id)  # the configured shared folder


SHOUT = """
id: shout
inputs: {log: {type: string}, word: {type: string}}
steps:
  - id: one
    skill: mark
    parameters: {log: "{{ log }}", call: "{{ word }}!"}
outputs: {said: "{{ one.marked }}"}
"""


async def test_a_pipeline_registered_through_one_server_reaches_the_clients_of_another(
    tmp_path: Path, skills: Path, pg_url: str
) -> None:
    from mcp_types import ToolListChangedNotification

    backends = Backends.of(state=pg_url, queue="")
    a, b = (create_server(home=tmp_path / h, skill_dirs=[skills], backends=backends) for h in ("a", "b"))
    send, receive = anyio.create_memory_object_stream[str](10)

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            send.send_nowait("tools/list_changed")

    log = tmp_path / "marks.log"
    with send, receive:
        async with (
            b.running(),  # what `serve` runs around its transport: here, B's LISTEN on the shared state
            Client(b, mode="legacy", message_handler=on_message) as on_b,
            Client(a, mode="legacy") as on_a,
        ):
            assert "shout" not in {t.name for t in (await on_b.list_tools()).tools}
            registered = await on_a.call_tool("register_pipeline", {"yaml": SHOUT})
            assert not registered.is_error, registered.content
            with anyio.fail_after(30):
                while await receive.receive() != "tools/list_changed":
                    pass
            assert "shout" in {t.name for t in (await on_b.list_tools()).tools}
            called = await on_b.call_tool("shout", {"log": str(log), "word": "hey"})
            assert not called.is_error, called.content
            assert called.structured_content is not None and called.structured_content["said"] == "hey!"
    assert not (tmp_path / "a" / "pipelines" / "shout.yaml").exists()  # in the database, not on A's disk
