"""Workers keep up with the skills and pipelines a run was started with (real PostgreSQL, Redis and
`orchestrator worker` processes).

A worker loads its Catalog when it starts. A skill folder added or changed afterwards reaches it
when a run needs it: the run records the digest of everything it calls where it starts, and a
worker that lacks one, or has another version, reads its skills again before it runs the run or
one of its items. What it still cannot run fails at once, with the problem named (in the error,
in `runs show` and in the worker's log): no run stays `queued` with nothing working on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import _scale
from tests._scale import Workers, _env, two_workers
from tests.helpers import run_cli, write_skill

postgres_server, pg_url, redis_url = _scale.postgres_server, _scale.pg_url, _scale.redis_url  # real servers

SCALE_SKILL = {
    "inputs": {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    },
    "run": {"python": "impl:scale"},
}


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    """The skills folder every worker (and the starting command) serves: `scale` returns `{n}`."""
    root = tmp_path / "skills"
    write_skill(root, "scale", contract=SCALE_SKILL, impl="def scale(n):\n    return {'n': n}\n")
    return root


@pytest.fixture
def workers(tmp_path: Path, skills: Path, pg_url: str, redis_url: str) -> Iterator[Workers]:
    with two_workers(tmp_path, skills, pg_url, redis_url) as group:
        yield group


def _run(tmp_path: Path, workers: Workers, pipeline: Path, *extra: str) -> Any:
    flags = ("--state", workers.state, "--queue", workers.queue, "--skills", str(workers.skills), *extra)
    return run_cli("run", str(pipeline), *flags, env=_env(tmp_path / "client"), cwd=tmp_path, timeout=300)


def _show(tmp_path: Path, workers: Workers, run_id: str) -> dict[str, Any]:
    here = _env(tmp_path / "client")
    shown = run_cli("runs", "show", run_id, "--state", workers.state, "--json", env=here, cwd=tmp_path)
    assert shown.code == 0, shown.err
    data = shown.json()
    assert isinstance(data, dict)
    return data


def _run_id(err: str) -> str:
    found = re.search(r"run ([0-9a-f]{12})", err)
    assert found, err
    return found[1]


def _worker_logs(workers: Workers) -> str:
    return "".join((workers.root / f"{name}.log").read_text(errors="replace") for name in workers.procs)


NAP2 = """
id: par-nap2
steps:
  - id: first
    skill: nap2
    parameters: {n: 1}
  - id: each
    for: {items: [2, 3, 4, 5, 6, 7], variable: n, parallel: true}
    skill: nap2
    parameters: {n: "{{ n }}"}
outputs: {first: "{{ first.slept }}", each: "{{ each | map(attribute='slept') | list }}"}
"""


def test_a_skill_added_after_the_workers_started_serves_a_run_through_the_queue(
    tmp_path: Path, skills: Path, workers: Workers
) -> None:
    """The workers started before `nap2` existed: the run (its items on both workers) succeeds."""
    write_skill(
        skills,
        "nap2",
        contract={
            "inputs": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "run": {"python": "impl:nap"},
        },
        impl="def nap(n):\n    return {'slept': n}\n",
    )
    pipeline = tmp_path / "par-nap2.yaml"
    pipeline.write_text(NAP2)
    ran = _run(tmp_path, workers, pipeline, "--json")
    assert ran.code == 0, ran.err + _worker_logs(workers)
    result = ran.json()
    assert result["first"] == 1 and result["each"] == [2, 3, 4, 5, 6, 7]
    assert _show(tmp_path, workers, result["run_id"])["status"] == "succeeded"


def test_a_skill_changed_after_the_workers_started_serves_the_run_as_it_was_started(
    tmp_path: Path, skills: Path, workers: Workers
) -> None:
    """`scale` gains an input once the workers are up; a run passing it succeeds on them."""
    changed = {**SCALE_SKILL, "inputs": {**SCALE_SKILL["inputs"], "properties": {"n": {}, "times": {}}}}
    write_skill(skills, "scale", contract=changed, impl="def scale(n, times):\n    return {'n': n * times}\n")
    pipeline = tmp_path / "times.yaml"
    pipeline.write_text(
        "id: times\nsteps:\n  - id: each\n    for: {items: [1, 2, 3], variable: n, parallel: true}\n"
        "    skill: scale\n    parameters: {n: '{{ n }}', times: 10}\n"
        "outputs: {ns: \"{{ each | map(attribute='n') | list }}\"}\n"
    )
    ran = _run(tmp_path, workers, pipeline, "--json")
    assert ran.code == 0, ran.err + _worker_logs(workers)
    assert ran.json()["ns"] == [10, 20, 30]


def test_a_run_calling_a_skill_no_worker_has_fails_naming_it_and_is_not_left_queued(
    tmp_path: Path, workers: Workers
) -> None:
    """`ghost` exists only in a folder of the starting command: the run fails at once, saying so,
    in the command's error, in `runs show` and in the log of the worker that took it."""
    own = tmp_path / "only-here"
    write_skill(
        own,
        "ghost",
        contract={"inputs": {"type": "object"}, "run": {"python": "impl:boo"}},
        impl="def boo():\n    return {}\n",
    )
    pipeline = tmp_path / "haunted.yaml"
    pipeline.write_text("id: haunted\nsteps:\n  - id: boo\n    skill: ghost\n")
    ran = _run(tmp_path, workers, pipeline, "--skills", str(own))
    assert ran.code == 1, ran.err
    assert "unknown skill 'ghost'" in ran.err and "haunted.yaml:4:" in ran.err, ran.err
    assert "cannot run it" in ran.err and "runs resume" in ran.err, ran.err
    shown = _show(tmp_path, workers, _run_id(ran.err))
    assert shown["status"] == "failed"
    assert "unknown skill 'ghost'" in shown["error"]
    assert "unknown skill 'ghost'" in _worker_logs(workers)


def test_a_run_started_with_another_version_of_a_skill_fails_naming_the_skill(tmp_path: Path, workers: Workers) -> None:
    """The starting command serves its own `scale` (other code, the same name): the workers
    cannot run the run as it was started, and say which skill differs."""
    own = tmp_path / "only-here"
    write_skill(own, "scale", contract=SCALE_SKILL, impl="def scale(n):\n    return {'n': -n}\n")
    pipeline = tmp_path / "once.yaml"
    pipeline.write_text("id: once\nsteps:\n  - id: one\n    skill: scale\n    parameters: {n: 1}\n")
    ran = _run(tmp_path, workers, pipeline, "--skills", str(own))
    assert ran.code == 1, ran.err
    assert "'scale' here is not the one the run was started with" in ran.err, ran.err
    shown = _show(tmp_path, workers, _run_id(ran.err))
    assert shown["status"] == "failed" and "'scale'" in shown["error"]


STEPS = """
id: steps
steps:
  - id: first
    skill: scale
    parameters: {n: 1}
  - id: each
    for: {items: [1, 2, 3, 4], variable: n, parallel: true}
    skill: scale
    parameters: {n: "{{ n }}"}
  - id: last
    skill: scale
    parameters: {n: 2}
"""


def test_queued_progress_without_a_terminal_is_one_line_per_event(tmp_path: Path, workers: Workers) -> None:
    """Piped stderr: each step's start and end once, each with its message and its place among the
    three steps; no line of the queue's own counting (`[1/100]`)."""
    pipeline = tmp_path / "steps.yaml"
    pipeline.write_text(STEPS)
    ran = _run(tmp_path, workers, pipeline)
    assert ran.code == 0, ran.err
    progress = [line for line in ran.err.splitlines() if line.startswith("orchestrator: [")]
    assert all(re.fullmatch(r"orchestrator: \[[123]/3\] \w+: .+", line) for line in progress), progress
    for step in ("first", "each", "last"):
        assert sum(f"] {step}: started" in line for line in progress) == 1, progress
        assert sum(f"] {step}: done" in line for line in progress) == 1, progress
