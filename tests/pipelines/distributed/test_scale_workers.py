"""Runs and loop items handed to `orchestrator worker` processes through Docket on real Redis, with
their state in real PostgreSQL (`--state`, `--queue`).

Two workers (real subprocesses, each its own home: they share only the database, the queue and
the skills folder) take the run and the items of its parallel `for`; one killed with SIGKILL
mid-run leaves the run to the other, which resumes it from its checkpoint without running a
recorded item again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import _scale
from tests._scale import ORCHESTRATOR, Workers, _env, _until, two_workers
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.helpers import run_cli, write_skill

postgres_server, pg_url, redis_url = _scale.postgres_server, _scale.pg_url, _scale.redis_url  # real servers


MANY = """
id: many
inputs: {log: {type: string}, count: {type: integer}}
steps:
  - id: each
    for: {items: "{{ range(count) | list }}", variable: n, parallel: true, max_parallel: 64}
    skill: tick
    parameters: {log: "{{ log }}", n: "{{ n }}", pause: 0}
outputs: {ticked: "{{ each | length }}", last: "{{ (each | last).n }}"}
"""

SLOW = MANY.replace("id: many", "id: slow").replace("pause: 0", "pause: 0.25")
SLOW_ITEMS = 30
"""Items of a SLOW run: ten are done before the test strikes, and the other twenty (2.5 s of work
per worker at the least) are still to do while the run goes on without what it struck."""


@pytest.fixture
def tick(tmp_path: Path) -> Path:
    """`tick`: logs `start N`, pauses, logs `done N` (a python skill, in a worker process)."""
    root = tmp_path / "skills"
    write_skill(
        root,
        "tick",
        contract={"inputs": {"type": "object"}, "run": {"python": "impl:tick"}},
        impl="import time\n\ndef tick(log, n, pause):\n"
        "    with open(log, 'a') as f:\n        f.write(f'start {n}\\n')\n"
        "    time.sleep(pause)\n"
        "    with open(log, 'a') as f:\n        f.write(f'done {n}\\n')\n"
        "    return {'n': n}\n",
    )
    return root


@pytest.fixture
def workers(tmp_path: Path, tick: Path, pg_url: str, redis_url: str) -> Iterator[Workers]:
    with two_workers(tmp_path, tick, pg_url, redis_url) as group:
        yield group


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_thousand_items_of_a_parallel_for_run_on_both_workers(tmp_path: Path, workers: Workers) -> None:
    pipeline, log = tmp_path / "many.yaml", tmp_path / "ticks.log"
    pipeline.write_text(MANY)
    flags = ("--state", workers.state, "--queue", workers.queue, "--skills", str(workers.skills), "--json")
    here = _env(tmp_path / "client")  # the starting machine runs nothing itself
    ran = run_cli(
        "run",
        str(pipeline),
        "--input",
        f"log={log}",
        "--input",
        "count=1000",
        *flags,
        env=here,
        cwd=tmp_path,
        timeout=600,
    )
    assert ran.code == 0, ran.err
    result = ran.json()
    assert result["ticked"] == 1000 and result["last"] == 999
    done = Counter(line for line in _lines(log) if line.startswith("done"))
    assert len(done) == 1000 and set(done.values()) == {1}  # every item once
    shown = run_cli("runs", "show", result["run_id"], "--state", workers.state, "--json", env=here, cwd=tmp_path).json()
    assert shown["status"] == "succeeded"
    assert set(shown["workers"]) == {"w1", "w2"} and all(n > 0 for n in shown["workers"].values())
    assert sum(shown["workers"].values()) == 1000


ROUNDS = """
id: rounds
inputs: {log: {type: string}}
steps:
  - id: outer
    for: {items: [10, 20, 30], variable: o}
    steps:
      - id: inner
        for: {items: [1, 2], variable: i, parallel: true}
        skill: tick
        parameters: {log: "{{ log }}", n: "{{ o + i }}", pause: 0}
outputs: {seen: "{{ outer | map(attribute='inner') | list }}"}
"""


def test_a_parallel_for_inside_a_sequential_one_runs_its_items_again_each_turn(
    tmp_path: Path, workers: Workers
) -> None:
    """Each turn of the outer loop runs the inner items with that turn's values (not the first
    turn's results again, which the workers recorded under the same step and index)."""
    pipeline, log = tmp_path / "rounds.yaml", tmp_path / "ticks.log"
    pipeline.write_text(ROUNDS)
    flags = ("--state", workers.state, "--queue", workers.queue, "--skills", str(workers.skills), "--json")
    ran = run_cli("run", str(pipeline), "--input", f"log={log}", *flags, env=_env(tmp_path / "client"), cwd=tmp_path)
    assert ran.code == 0, ran.err
    assert ran.json()["seen"] == [[{"n": 11}, {"n": 12}], [{"n": 21}, {"n": 22}], [{"n": 31}, {"n": 32}]]
    assert sorted(line for line in _lines(log) if line.startswith("done")) == sorted(
        f"done {n}" for n in (11, 12, 21, 22, 31, 32)
    )


def test_a_worker_killed_mid_run_leaves_the_run_to_the_other_without_rerunning_finished_items(
    tmp_path: Path, workers: Workers
) -> None:
    _kill_the_driver_mid_run(tmp_path, workers)


def test_a_worker_on_another_host_killed_mid_run_is_taken_over_once_its_lease_ends(
    tmp_path: Path, tick: Path, pg_url: str, redis_url: str
) -> None:
    """Each worker says it is on a host of its own (`$ORCHESTRATOR_HOST_ID`), so the survivor cannot
    look for the dead one's process: it takes the run over only once its heartbeat is older than
    the lease (`$ORCHESTRATOR_LEASE`, shortened here)."""
    group = Workers(tmp_path, tick, pg_url, redis_url)
    try:
        for name in ("w1", "w2"):
            group.start(name, env={"ORCHESTRATOR_HOST_ID": f"host-of-{name}", "ORCHESTRATOR_LEASE": "5"})
        hosts = _kill_the_driver_mid_run(tmp_path, group)
    finally:
        group.stop()
    assert hosts[0] in ("host-of-w1", "host-of-w2")  # the owner was recorded with the configured host id
    assert hosts[1] in ("host-of-w1", "host-of-w2") and hosts[1] != hosts[0]  # the other host finished it


@contextlib.contextmanager
def _slow_run(tmp_path: Path, workers: Workers) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`orchestrator run` of SLOW (SLOW_ITEMS items) through the queue, once ten items are done: (its
    process, the tick log); killed when left still running."""
    pipeline, log = tmp_path / "slow.yaml", tmp_path / "ticks.log"
    pipeline.write_text(SLOW)
    flags = ("--state", workers.state, "--queue", workers.queue, "--skills", str(workers.skills), "--json")
    client = subprocess.Popen(
        [str(ORCHESTRATOR), "run", str(pipeline), "--input", f"log={log}", "--input", f"count={SLOW_ITEMS}", *flags],
        env=_env(tmp_path / "client"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        _until(lambda: sum(line.startswith("done") for line in _lines(log)) >= 10, "ten items done")
        yield client, log
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()


def _kill_the_driver_mid_run(tmp_path: Path, workers: Workers) -> tuple[str, str]:
    """Run SLOW through the queue, SIGKILL the worker that drives it after ten items, and check the
    other one finished it without running a recorded item again; (first owner host, last)."""
    import json

    import psycopg

    query = "SELECT owner_pid, owner_host FROM orchestrator_runs WHERE pipeline='slow'"

    def recorded_items() -> set[int]:
        with psycopg.connect(workers.state) as conn:
            return {row[0] for row in conn.execute("SELECT idx FROM orchestrator_items")}

    with _slow_run(tmp_path, workers) as (client, log):
        # an item's "done" line comes a moment before its worker records it: wait for the records
        _until(lambda: len(recorded_items()) >= 10, "ten items recorded")
        with psycopg.connect(workers.state) as conn:
            (pid, first_host) = conn.execute(query).fetchone()  # type: ignore[misc]
        driver = next(name for name, proc in workers.procs.items() if proc.pid == pid)
        os.kill(pid, signal.SIGKILL)  # the worker that drives the run, mid-run
        workers.procs[driver].wait(30)
        recorded = recorded_items()
        assert len(recorded) >= 10
        out, err = client.communicate(timeout=300)
    assert client.returncode == 0, err.decode()
    result = json.loads(out)
    assert result["ticked"] == SLOW_ITEMS
    starts = Counter(line for line in _lines(log) if line.startswith("start"))
    assert all(starts[f"start {i}"] == 1 for i in recorded), "an item recorded before the kill ran again"
    assert {f"done {i}" for i in range(SLOW_ITEMS)} <= set(_lines(log))
    here = _env(tmp_path / "client")
    shown = run_cli("runs", "show", result["run_id"], "--state", workers.state, "--json", env=here, cwd=tmp_path).json()
    survivor = next(name for name in workers.procs if name != driver)
    assert shown["status"] == "succeeded" and shown["workers"].get(survivor, 0) > 0
    with psycopg.connect(workers.state) as conn:
        (_, last_host) = conn.execute(query).fetchone()  # type: ignore[misc]
    return str(first_host), str(last_host)


def test_a_run_survives_redis_dropping_every_pub_sub_connection_mid_run(tmp_path: Path, workers: Workers) -> None:
    """Redis drops the subscriptions (a fail-over, a network blip: here `CLIENT KILL TYPE pubsub`)
    after ten items: the driver subscribes again, and the items whose messages were lost meanwhile
    are found through the queue; every item ran once and the run ends with all of them."""
    import json

    import redis

    with _slow_run(tmp_path, workers) as (client, log):
        with redis.Redis.from_url(workers.queue) as admin:
            assert admin.client_kill_filter(_type="pubsub") >= 1  # the driver's, at least
        out, err = client.communicate(timeout=300)
    assert client.returncode == 0, err.decode()
    assert json.loads(out)["ticked"] == SLOW_ITEMS
    done = Counter(line for line in _lines(log) if line.startswith("done"))
    assert len(done) == SLOW_ITEMS and set(done.values()) == {1}


SHARED_BUDGET = """
id: shared-budget
limits: {max_agent_tokens: 100}
steps:
  - id: work
    for: {items: [a, b, c, d], variable: name, parallel: true, max_parallel: 1}
    agent: {skills: [number-stats], max_tokens: 10000, max_iterations: 10}
    parameters: {task: "Measure {{ name }}"}
    on_error: continue
outputs:
  statuses: "{{ work | map(attribute='status') | list }}"
  summaries: "{{ work | map(attribute='summary') | list }}"
"""


def test_the_agent_limits_of_a_run_count_every_workers_items_together(
    tmp_path: Path, tick: Path, pg_url: str, redis_url: str, stub: AnthropicStub
) -> None:
    """Four loop items, each an agent of one 60-token turn, on two workers (which use the API:
    they have no client) under a run limit of 100 tokens: the first two spend 120 together, so
    the last two start over the run's budget wherever they run (counted per item, all four would
    succeed)."""
    for _ in range(2):
        stub.reply("measured", input_tokens=50, output_tokens=10)
    pipeline = tmp_path / "shared-budget.yaml"
    pipeline.write_text(SHARED_BUDGET)
    with two_workers(tmp_path, tick, pg_url, redis_url) as workers:  # started after the stub: its address
        flags = ("--state", workers.state, "--queue", workers.queue, "--skills", str(tick), "--json")
        ran = run_cli("run", str(pipeline), *flags, env=_env(tmp_path / "client"), cwd=tmp_path, timeout=300)
    assert ran.code == 1, ran.err  # two agents stopped before their answers: PARTIAL, not a success
    data = ran.json()
    assert data["statuses"] == ["success", "success", "budget_exceeded", "budget_exceeded"], data["summaries"]
    assert len(stub.requests) == 2
    assert data["status"] == "failed" and data["usage"]["calls"] == 2  # what the workers' items spent


def test_a_queued_run_that_needs_a_model_nobody_offers_fails_saying_how_to_get_one(
    tmp_path: Path, tick: Path, pg_url: str, redis_url: str
) -> None:
    """`orchestrator run --queue` has no client and here no API key: the worker's prompt step asks
    the starting process, which answers that no model can, with the hint; the run fails at that step."""
    write_skill(
        tick,
        "tell",
        contract={"inputs": {"type": "object"}, "run": {"prompt": "prompt.md"}},
        files={"prompt.md": "Write a line."},
    )
    pipeline = tmp_path / "story.yaml"
    pipeline.write_text("id: story\nsteps:\n  - id: line\n    skill: tell\noutputs: {line: '{{ line }}'}\n")
    with two_workers(tmp_path, tick, pg_url, redis_url) as workers:
        flags = ("--state", workers.state, "--queue", workers.queue, "--skills", str(tick))
        ran = run_cli("run", str(pipeline), *flags, env=_env(tmp_path / "client"), cwd=tmp_path, timeout=300)
    assert ran.code != 0
    assert "step 'line'" in ran.err and "no model provider can answer" in ran.err, ran.err
    assert "ANTHROPIC_API_KEY" in ran.err, ran.err
