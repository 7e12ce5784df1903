"""Durable runs that cannot fill the disk or get lost: checkpoint size linear in the work,
checkpoints of succeeded runs deleted, `orchestrator runs prune`, dead owners shown as
interrupted, and a damaged state.sqlite set aside while the server keeps serving.

Real SQLite files throughout; the CLI runs as the installed console script.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_server import create_server
from pipelines.storage.owner import Owner
from pipelines.storage.runs import RunStore
from tests.fixtures.run_skills import failed_run, publish, python_skills, text_of
from tests.helpers import run_cli

GARBAGE = b"this is not a database, it is a text file that someone saved over state.sqlite\n" * 50


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    return python_skills(tmp_path / "skills", "echo", "gate")


def stored_bytes(db: Path, thread: str | None = None) -> int:
    """Bytes of checkpoints, metadata and writes in the saver's tables (of one run, or all)."""
    conn = sqlite3.connect(db)
    try:
        where, args = ("WHERE thread_id=?", (thread,)) if thread else ("", ())
        ck = conn.execute(f"SELECT total(length(checkpoint)) + total(length(metadata)) FROM checkpoints {where}", args)
        wr = conn.execute(f"SELECT total(length(value)) FROM writes {where}", args)
        return int(ck.fetchone()[0] + wr.fetchone()[0])
    finally:
        conn.close()


# -- checkpoint size ------------------------------------------------------------------------------


async def test_checkpoints_of_a_loop_grow_linearly_and_a_1000_item_loop_stays_under_5_mb(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    # the run fails after its loop, so its checkpoints are kept (for resume) and can be measured
    pid = publish(
        home,
        f"""\
        id: long-loop
        inputs: {{n: {{type: integer}}}}
        steps:
          - id: each
            for: {{items: "{{{{ range(n) | list }}}}", variable: x}}
            skill: echo
            parameters: {{x: "{{{{ x }}}}", label: "item {{{{ x }}}} of the loop"}}
          - id: fanned
            for: {{items: "{{{{ range(n) | list }}}}", variable: x, parallel: true}}
            skill: echo
            parameters: {{x: "{{{{ x }}}}"}}
          - id: stop
            skill: gate
            parameters: {{marker: "{tmp_path / "never"}"}}
        """,
    )
    sizes: dict[int, int] = {}
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        for n in (250, 1000):
            with anyio.fail_after(120):
                result = await client.call_tool(pid, {"n": n})
            assert result.is_error and "closed" in text_of(result)
            run_id = failed_run(result)
            sizes[n] = stored_bytes(home / "state.sqlite", run_id)
    assert sizes[1000] < 5_000_000
    # linear: bytes per item stay flat (a whole-state checkpoint per step made this ratio ~4)
    assert sizes[1000] / 1000 < 1.25 * sizes[250] / 250, sizes


GRID = """\
id: grid
inputs: {n: {type: integer}, marker: {type: string}}
state: {count: 0}
steps:
  - id: rows
    for: {items: "{{ range(n) | list }}", variable: i}
    steps:
      - id: cells
        for: {items: "{{ range(n) | list }}", variable: j}
        steps:
          - id: cell
            skill: echo
            parameters: {x: "{{ i * n + j }}", seen: "{{ count }}"}
            state: {count: "{{ count + 1 }}"}
  - id: stop
    skill: gate
    parameters: {marker: "{{ marker }}"}
outputs: {rows: "{{ rows }}", count: "{{ count }}"}
"""


async def test_checkpoints_of_a_nested_loop_stay_small_and_grow_linearly_with_its_items(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    # issue 26: a 200 x 200 nested loop left 553 MB: every inner item took checkpoints that each
    # record the whole graph; an inner loop is now checkpointed once per outer iteration
    pid = publish(home, GRID)
    opened = tmp_path / "open"
    opened.write_text("open")
    sizes: dict[int, int] = {}
    # handle_after=0: this client waits for the end however long the 10,000 items take on a busy
    # machine (by default a call answers with a run handle after 45 s, and the sizes are read then)
    async with Client(create_server(home=home, skill_dirs=[skills], handle_after=0)) as client:
        with anyio.fail_after(60):
            small = await client.call_tool(pid, {"n": 3, "marker": str(opened)})
        for n in (50, 100):
            with anyio.fail_after(300):
                result = await client.call_tool(pid, {"n": n, "marker": str(tmp_path / "never")})
            sizes[n] = stored_bytes(home / "state.sqlite", failed_run(result))  # kept for resume
    assert small.structured_content is not None, text_of(small)
    rows = small.structured_content["rows"]
    # every cell saw the state the cell before it left, across inner and outer iterations
    assert [[c["cell"] for c in row["cells"]] for row in rows] == [
        [{"x": i * 3 + j, "seen": i * 3 + j} for j in range(3)] for i in range(3)
    ]
    assert small.structured_content["count"] == 9
    assert sizes[100] < 2_000_000, sizes  # 10,000 inner items; inlined they took about 40 MB
    assert sizes[100] / 10_000 < 1.25 * sizes[50] / 2_500, sizes  # linear in the items


async def test_the_checkpoints_a_failed_run_keeps_are_bounded_by_max_state_bytes(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("runs:\n  max_state_bytes: 300kB\n")
    pid = publish(
        home,
        f"""\
        id: many-small
        steps:
          - id: each
            for: {{items: "{{{{ range(3000) | list }}}}", variable: x}}
            skill: echo
            parameters: {{x: "{{{{ x }}}}"}}
          - id: stop
            skill: gate
            parameters: {{marker: "{tmp_path / "never"}"}}
        """,
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        with anyio.fail_after(120):
            result = await client.call_tool(pid, {})  # its data is about 30 kB, its checkpoints were 3 MB
    error = json.loads(text_of(result))["error"]
    assert error["type"] == "limit_exceeded", error
    assert "the run's checkpoints passed its limit of 300 kB (max_state_bytes)" in error["message"]
    run_id = failed_run(result)
    assert stored_bytes(home / "state.sqlite", run_id) < 2 * 300_000  # its data, and that much again
    record = RunStore(home / "state.sqlite").get(run_id)
    assert record is not None and record.status == "failed" and record.failed_step == "each"


async def test_an_output_holding_an_undefined_value_fails_the_run_cleanly(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    expression = "{{ [''] | map(attribute='__class__') | list }}"
    pid = publish(
        home,
        f"""\
        id: undefined-inside
        steps:
          - {{id: a, skill: echo, parameters: {{x: 1}}}}
        outputs:
          v: "{expression}"
        """,
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool(pid, {})
        still = await client.call_tool("text-stats", {"text": "still served"})
    error = json.loads(text_of(result))["error"]
    assert error["type"] == "skill_failed", error  # not `internal`
    assert "outputs.v:" in error["message"] and expression in error["message"]
    assert "'__class__'" in error["message"] and "Traceback" not in error["message"]
    assert not still.is_error
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    listed = run_cli("runs", "list", "--json", env=env, cwd=tmp_path)
    assert listed.code == 0, listed.err
    runs = json.loads(listed.out)["runs"]
    assert [(r["run_id"], r["status"]) for r in runs] == [(failed_run(result), "failed")]  # not interrupted


async def test_a_succeeded_run_leaves_no_checkpoints_and_a_failed_one_keeps_what_resume_needs(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "open"
    pid = publish(
        home,
        f"""\
        id: gated
        steps:
          - id: each
            for: {{items: [1, 2, 3], variable: x}}
            skill: echo
            parameters: {{x: "{{{{ x }}}}"}}
          - {{id: check, skill: gate, parameters: {{marker: "{marker}"}}}}
        """,
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        failed = await client.call_tool(pid, {})
        marker.write_text("open")
        succeeded = await client.call_tool(pid, {})
    assert failed.is_error and not succeeded.is_error
    failed_id = failed_run(failed)
    assert succeeded.structured_content is not None
    db = home / "state.sqlite"
    assert stored_bytes(db, succeeded.structured_content["run_id"]) == 0
    assert stored_bytes(db, failed_id) > 0
    out = await create_server(home=home, skill_dirs=[skills]).pipelines.resume(failed_id, _ctx())  # type: ignore[union-attr]
    assert out["each"] == [{"x": 1}, {"x": 2}, {"x": 3}]
    assert stored_bytes(db) == 0  # resumed to success: nothing left


def _ctx():
    from skills import SkillContext

    return SkillContext()


def test_runs_prune_keeps_resumable_runs_and_forgets_old_ones_with_their_artifacts(home: Path, tmp_path: Path) -> None:
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    pipeline = tmp_path / "note.yaml"
    note = tmp_path / "note.txt"
    pipeline.write_text(
        textwrap.dedent(
            f"""\
            id: note
            steps:
              - {{id: stamp, skill: write-file, parameters: {{path: log.txt, content: x}}}}
              - {{id: read, skill: read-file, parameters: {{path: "{note}"}}}}
            """
        )
    )
    failed = run_cli("run", str(pipeline), "--json", env=env, cwd=tmp_path)
    assert failed.code == 1
    failed_id = json.loads(failed.out)["run_id"]
    note.write_text("hello\n")
    ok = run_cli("run", str(pipeline), "--json", env=env, cwd=tmp_path)
    assert ok.code == 0, ok.err
    db = home / "state.sqlite"
    kept = stored_bytes(db, failed_id)
    assert kept > 0

    pruned = run_cli("runs", "prune", "--json", env=env, cwd=tmp_path)
    assert pruned.code == 0, pruned.err
    assert json.loads(pruned.out)["forgotten"] == []
    assert stored_bytes(db, failed_id) == kept  # still resumable

    dry = run_cli("runs", "prune", "--older-than", "0s", "--dry-run", env=env, cwd=tmp_path)
    assert dry.code == 0 and "would forget 2 run(s)" in dry.out and failed_id in dry.out
    assert stored_bytes(db, failed_id) == kept

    artifacts = home / "pipelines" / "note" / "runs" / failed_id
    assert (artifacts / "log.txt").is_file()
    gone = run_cli("runs", "prune", "--older-than", "0s", env=env, cwd=tmp_path)
    assert gone.code == 0, gone.err
    assert "forgot 2 run(s)" in gone.out and "MB ->" in gone.out
    assert not artifacts.exists()
    assert stored_bytes(db) == 0
    assert run_cli("runs", "list", env=env, cwd=tmp_path).out.strip() == "no runs yet"

    bad = run_cli("runs", "prune", "--older-than", "soon", env=env, cwd=tmp_path)
    assert bad.code == 2 and "'soon' is not a duration" in bad.err


# -- owners -----------------------------------------------------------------------------------------


def _insert_running(db: Path, run_id: str, host: str, boot: str, pid: int, started: int | None, beat: float) -> None:
    store = RunStore(db)
    store.ensure()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO orchestrator_runs (run_id, pipeline, status, started, inputs, owner_host, owner_boot,"
            " owner_pid, owner_started, heartbeat) VALUES (?, 'p', 'running', ?, '{}', ?, ?, ?, ?, ?)",
            (run_id, time.time(), host, boot, pid, started, beat),
        )
    conn.close()


def test_a_running_run_is_interrupted_when_its_process_is_gone_or_was_replaced(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite"
    me = Owner.current()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        from pipelines.storage.owner import _process_start

        alive_start = _process_start(sleeper.pid)
        _insert_running(db, "live", me.host, me.boot, sleeper.pid, alive_start, time.time())
        _insert_running(db, "reused", me.host, me.boot, sleeper.pid, (alive_start or 0) + 12345, time.time())
        _insert_running(db, "rebooted", me.host, "an-earlier-boot", sleeper.pid, alive_start, time.time())
        _insert_running(db, "remote-alive", "another-host", "b", 1, 1, time.time())
        _insert_running(db, "remote-stale", "another-host", "b", 1, 1, time.time() - 3600)
        status = {r.run_id: r.status for r in RunStore(db).list()}
        assert status["live"] == "running"
        if alive_start is not None:  # Linux: a recycled pid is told apart by its start time
            assert status["reused"] == "interrupted"
        assert status["rebooted"] == "interrupted"
        assert status["remote-alive"] == "running"  # a fresh heartbeat
        assert status["remote-stale"] == "interrupted"  # no heartbeat for an hour
    finally:
        sleeper.kill()
        sleeper.wait()
    assert RunStore(db).get("live").status == "interrupted"  # type: ignore[union-attr]


# -- a damaged state.sqlite ---------------------------------------------------------------------------


async def test_a_garbage_state_database_is_set_aside_and_recreated_and_the_server_keeps_serving(
    home: Path, skills: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pid = publish(
        home,
        """\
        id: hello
        steps:
          - {id: say, skill: echo, parameters: {text: hi}}
        """,
    )
    db = home / "state.sqlite"
    db.write_bytes(GARBAGE)
    told: list[str] = []

    async def on_log(params: object) -> None:
        told.append(str(getattr(params, "data", "")))

    caplog.set_level(logging.ERROR, logger="pipelines")
    async with Client(create_server(home=home, skill_dirs=[skills]), mode="legacy", logging_callback=on_log) as client:
        first = await client.call_tool(pid, {})
        assert not first.is_error, text_of(first)
        [aside] = list(home.glob("state.sqlite.corrupt-*"))
        assert aside.read_bytes() == GARBAGE
        assert any(str(db) in m and str(aside) in m and "runs recorded before are gone" in m for m in told), told
        logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any(str(db) in m and str(aside) in m for m in logged), logged

        db.write_bytes(GARBAGE)  # damaged again while the server runs
        second = await client.call_tool(pid, {})
        assert not second.is_error, text_of(second)
        assert len(list(home.glob("state.sqlite.corrupt-*"))) == 2
        assert not (await client.call_tool("echo", {"still": "serving"})).is_error
    records = RunStore(db).list()
    assert [r.status for r in records] == ["succeeded"]  # only the run after the second recovery


def test_runs_list_on_a_garbage_database_says_what_happened(home: Path, tmp_path: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "state.sqlite").write_bytes(GARBAGE)
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    listed = run_cli("runs", "list", env=env, cwd=tmp_path)
    assert listed.code == 0, listed.err
    assert listed.out.strip() == "no runs yet"
    assert "moved it aside to" in listed.err and "state.sqlite.corrupt-" in listed.err
