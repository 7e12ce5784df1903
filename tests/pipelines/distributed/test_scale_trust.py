"""What arrives through Redis is data, never code: a pickle on the queue is refused, not run.

The attack these tests replay: anyone who can write to the queue's Redis `XADD`s a task message
in Docket's layout whose `args` are a pickle that runs a command when unpickled (here: creates a
marker file). A real `orchestrator worker` must log that it refused the message (where it came
from: stream, message id, worker), drop it, never run it, and go on taking real runs.

To prove the negative without sleeping, each test sends the poison first and a real run after
it: a stream is read in order, so once the real run finished, the worker had read the poison.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests import _scale
from tests._scale import Workers, _env
from tests.helpers import run_cli, write_skill

postgres_server, pg_url, redis_url = _scale.postgres_server, _scale.pg_url, _scale.redis_url  # real servers

PIPELINE = """
id: fan
inputs: {count: {type: integer}}
steps:
  - id: each
    for: {items: "{{ range(count) | list }}", variable: n, parallel: true}
    skill: echo
    parameters: {n: "{{ n }}"}
outputs: {seen: "{{ each | map(attribute='n') | list }}"}
"""


class _Touch:
    """Pickles as "call os.system(touch MARKER)" (what the attacker's payload did with `id`)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def worker(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Workers]:
    skills = tmp_path / "skills"
    write_skill(
        skills,
        "echo",
        contract={"inputs": {"type": "object"}, "run": {"python": "impl:echo"}},
        impl="def echo(n):\n    return {'n': n}\n",
    )
    group = Workers(tmp_path, skills, pg_url, redis_url)
    try:
        yield group  # started by the test: before the poison, or after it (a strike is read at start)
    finally:
        group.stop()


def test_pydocket_unpickles_nowhere_the_orchestrator_has_not_replaced(tmp_path: Path) -> None:
    """The build turns red on a pydocket release that reads pickles somewhere new (or on any new
    release at all: `install` refuses one it was not checked against)."""
    import shutil
    from importlib.metadata import version

    import docket

    from pipelines.distributed import wire as _wire

    assert _wire.PYDOCKET == version("pydocket")  # a new release: review it, then move PYDOCKET
    assert _wire.uncovered() == {}
    copy = tmp_path / "docket"
    shutil.copytree(Path(docket.__file__).parent, copy)
    with open(copy / "agenda.py", "a") as f:  # what a new release could bring
        f.write("\n\ndef restore(blob):\n    import pickle\n\n    return pickle.loads(blob)\n")
    assert _wire.uncovered(copy) == {"agenda.py": {"restore"}}


def test_the_queue_codec_refuses_a_pickle_without_unpickling_it(tmp_path: Path) -> None:
    from pipelines.distributed import wire as _wire
    from pipelines.errors import RefusedData

    marker = tmp_path / "pwned"
    with pytest.raises(RefusedData, match="pickle"):
        _wire.loads(pickle.dumps(_Touch(marker)))
    assert not marker.exists()
    assert _wire.loads(_wire.dumps(("run-1",))) == ("run-1",)  # what the queue does carry: data


def _run(tmp_path: Path, workers: Workers, count: int) -> Any:
    pipeline = tmp_path / "fan.yaml"
    pipeline.write_text(PIPELINE)
    flags = ("--state", workers.state, "--queue", workers.queue, "--skills", str(workers.skills), "--json")
    ran = run_cli(
        "run", str(pipeline), "--input", f"count={count}", *flags, env=_env(tmp_path / "client"), cwd=tmp_path
    )
    assert ran.code == 0, ran.err
    return ran.json()


def _task_message(function: str, args: bytes, kwargs: bytes) -> dict[str, bytes]:
    """A task in Docket's stream layout (as `Execution.as_message` writes it)."""
    return {
        "key": b"evil-task",
        "when": datetime.now(UTC).isoformat().encode(),
        "function": function.encode(),
        "args": args,
        "kwargs": kwargs,
        "attempt": b"1",
        "generation": b"0",
    }


def _strike_message(value: bytes) -> dict[str, bytes]:
    """A strike in Docket's strike-stream layout (`StrikeInstruction.as_message`)."""
    return {"direction": b"strike", "function": b"orchestrator_item", "operator": b"==", "value": value}


POISONS = {
    # a whole run's task, pickled arguments (the attack as it was found), sent to a running worker
    "runs": ("orchestrator-runs:stream", lambda p: _task_message("orchestrator_run", p, pickle.dumps({})), True),
    # a loop item's task, the pickle in its keyword arguments
    "items": ("orchestrator-items:stream", lambda p: _task_message("orchestrator_item", pickle.dumps(()), p), True),
    # a strike instruction: read by a worker before it takes any task (so sent before it starts)
    "strikes": ("orchestrator-items:strikes", _strike_message, False),
}


@pytest.mark.parametrize("where", sorted(POISONS))
def test_a_pickle_written_to_the_queue_is_logged_and_dropped_not_run(
    tmp_path: Path, worker: Workers, where: str
) -> None:
    from redis import Redis

    marker = tmp_path / "pwned"
    stream, message, running = POISONS[where]
    if running:
        worker.start("w1")
    with Redis.from_url(worker.queue) as redis:  # pyright: ignore[reportUnknownMemberType]
        message_id = redis.xadd(stream, message(pickle.dumps(_Touch(marker))))  # pyright: ignore[reportUnknownMemberType, reportArgumentType]
    if not running:
        worker.start("w1")

    assert _run(tmp_path, worker, 3)["seen"] == [0, 1, 2]  # the worker goes on taking runs and items

    assert not marker.exists(), "the worker unpickled the payload and ran its command"
    log = (tmp_path / "w1.log").read_text()
    ident = message_id.decode() if isinstance(message_id, bytes) else str(message_id)
    refused = [line for line in log.splitlines() if "refused" in line and stream in line]
    assert refused, log
    assert ident in refused[0] and "w1" in refused[0]
    assert "Traceback" not in log


GATED = """
id: gated
inputs: {gate: {type: string}}
steps:
  - {id: first, skill: echo, parameters: {x: 1}}
  - {id: check, skill: gate, parameters: {marker: "{{ gate }}"}}
"""


@pytest.mark.parametrize("kind", ["msgpack-call", "pickle"])
def test_a_forged_checkpoint_in_postgresql_is_refused_on_resume_not_run(tmp_path: Path, pg_url: str, kind: str) -> None:
    """The PostgreSQL checkpointer rebuilds a run's variables (`scope`, a delta channel) from its
    rows in `checkpoint_writes` (type, blob): one forged there is refused when the run resumes,
    and its command never runs."""
    import psycopg

    from tests.fixtures.run_skills import python_skills
    from tests.pipelines.storage.test_checkpoint_trust import forged

    skills = python_skills(tmp_path / "skills", "echo", "gate")
    gate, marker, pipeline = tmp_path / "open", tmp_path / "pwned", tmp_path / "gated.yaml"
    pipeline.write_text(GATED)
    env, flags = _env(tmp_path / "client"), ("--state", pg_url, "--skills", str(skills))
    failed = run_cli("run", str(pipeline), "--input", f"gate={gate}", *flags, env=env, cwd=tmp_path)
    assert failed.code != 0  # failed at the gate: its checkpoints are kept for resume
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT run_id FROM orchestrator_runs").fetchone()
        assert row is not None
        run_id = str(row[0])
        forged_type, blob = forged(kind, marker)
        changed = conn.execute(
            "UPDATE checkpoint_writes SET type=%s, blob=%s WHERE thread_id=%s AND channel='scope'",
            (forged_type, blob, run_id),
        ).rowcount
    assert changed > 0
    gate.write_text("open")

    resumed = run_cli("runs", "resume", run_id, *flags, env=env, cwd=tmp_path)

    assert not marker.exists(), "resuming the run loaded the forged checkpoint and ran its command"
    assert resumed.code != 0
    assert "checkpoint" in resumed.err and "refused" in resumed.err, resumed.err


def test_doctor_warns_of_a_queue_off_this_machine_without_a_password(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    env = _env(tmp_path / "home") | {"ORCHESTRATOR_STATE": pg_url}
    here = run_cli("doctor", "--queue", redis_url, "--json", env=env, cwd=tmp_path).json()
    assert here["queue"]["ok"] is True and "warning" not in here["queue"]  # loopback: only this machine
    # 0.0.0.0 reaches this machine's Redis too, but names no loopback address: as a remote host would
    remote = redis_url.replace("127.0.0.1", "0.0.0.0")
    text = run_cli("doctor", "--queue", remote, env=env, cwd=tmp_path).out
    assert "WARNING: the queue on 0.0.0.0 asks for no password" in text
    assert "redis://:PASSWORD@" in text and "rediss://" in text
    with_password = remote.replace("redis://", "rediss://:s3cret@")
    assert "warning" not in run_cli("doctor", "--queue", with_password, "--json", env=env, cwd=tmp_path).json()["queue"]
