"""Pipeline runs over time: progress a client receives, failed runs resumed after the fix, a
server process killed mid-run and its run resumed by another process, and cancellation.

Finished steps are counted by a `record` skill that appends to a log file, so "not re-run"
is read from disk. The killed server is a real `orchestrator serve` stdio subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import Client, StdioServerParameters

from mcp_server import create_server
from pipelines.storage.runs import RunStore
from tests.fixtures.run_skills import failed_run, publish, text_of
from tests.helpers import write_skill

ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
OPEN = {"type": "object"}
TIMEOUT = 60


def _skill(parent: Path, name: str, impl: str, *, timeout: float = 30) -> None:
    write_skill(
        parent,
        name,
        contract={"inputs": OPEN, "run": {"python": f"impl:{name}"}, "timeout": timeout},
        impl=impl,
    )


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    """record (counts calls in a log), gate (fails until a marker exists), wait (blocks until a
    marker exists, telling the client its pid first), hang (blocks until cancelled)."""
    root = tmp_path / "skills"
    _skill(
        root,
        "record",
        """
        def record(log, label, **rest):
            with open(log, "a") as f:
                f.write(label + "\\n")
            return {"label": label, **rest}
        """,
    )
    _skill(
        root,
        "gate",
        """
        from pathlib import Path

        def gate(marker, log, label="gate"):
            with open(log, "a") as f:
                f.write(label + "\\n")
            if not Path(marker).exists():
                raise RuntimeError(f"the gate is closed: {marker} is missing")
            return {"open": True, "label": label}
        """,
    )
    _skill(
        root,
        "wait",
        """
        import os
        from pathlib import Path

        import anyio

        async def wait(marker, log, ctx):
            with open(log, "a") as f:
                f.write("wait\\n")
            await ctx.info(f"waiting pid={os.getpid()} run={ctx.run_id}")
            while not Path(marker).exists():  # another process creates it
                await anyio.sleep(0.02)
            return {"waited": True}
        """,
        timeout=600,
    )
    _skill(
        root,
        "hang",
        """
        from pathlib import Path

        import anyio

        async def hang(marker, ctx):
            await ctx.info("hanging")
            try:
                await anyio.sleep_forever()
            finally:
                Path(marker).write_text("cancelled")
        """,
        timeout=600,
    )
    return root


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _resume_cli(home: Path, skills: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ORCHESTRATOR), "runs", "resume", run_id, "--json", "--home", str(home), "--skills", str(skills)],
        env={**os.environ, "ORCHESTRATOR_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _runs_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ORCHESTRATOR), "runs", *args, "--home", str(home)],
        env={**os.environ, "ORCHESTRATOR_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


async def resume(home: Path, skills: Path, run_id: str) -> dict[str, Any]:
    """Resume a run in a new process: `orchestrator runs resume RUN --json`."""
    proc = await anyio.to_thread.run_sync(_resume_cli, home, skills, run_id)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


# -- progress ----------------------------------------------------------------------------------


async def test_a_client_receives_progress_naming_each_step_and_loop_items(home: Path, skills: Path) -> None:
    log = home / "calls.log"
    pid = publish(
        home,
        f"""
        id: progressing
        steps:
          - id: first
            skill: record
            parameters: {{log: "{log}", label: first}}
          - id: items
            for: {{items: [a, b, c], variable: x}}
            skill: record
            parameters: {{log: "{log}", label: "{{{{ x }}}}"}}
          - id: fanned
            for: {{items: [d, e], variable: x, parallel: true}}
            skill: record
            parameters: {{log: "{log}", label: "{{{{ x }}}}"}}
          - id: skipped
            skill: record
            condition: "{{{{ false }}}}"
            parameters: {{log: "{log}", label: never}}
          - id: last
            skill: record
            parameters: {{log: "{log}", label: last}}
        """,
    )
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool(pid, {}, progress_callback=on_progress)
    assert not result.is_error, text_of(result)
    messages = [m for _, _, m in seen]
    assert messages == [
        "first: started",
        "first: done",
        "items: started",
        "items: 0/3 items",
        "items: 1/3 items",
        "items: 2/3 items",
        "items: 3/3 items",
        "items: done",
        "fanned: started",
        "fanned: 0/2 items",
        "fanned: 1/2 items",
        "fanned: 2/2 items",
        "fanned: done",
        "skipped: started",
        "skipped: skipped",
        "last: started",
        "last: done",
    ]
    assert {total for _, total, _ in seen} == {5}
    done = [d for d, _, _ in seen]
    assert done == sorted(done) and done[-1] == 5
    assert [d for d, _, m in seen if m and m.endswith(": started")] == [0, 1, 2, 3, 4]
    assert [d for d, _, m in seen if m and m.endswith((": done", ": skipped"))] == [1, 2, 3, 4, 5]
    calls = _lines(log)
    assert calls[:4] == ["first", "a", "b", "c"] and sorted(calls[4:6]) == ["d", "e"] and calls[6:] == ["last"]


# -- resume after a failure ----------------------------------------------------------------------


def _gated(home: Path, marker: Path, log: Path) -> str:
    return publish(
        home,
        f"""
        id: gated
        steps:
          - id: first
            skill: record
            parameters: {{log: "{log}", label: first}}
          - id: items
            for: {{items: [1, 2, 3], variable: n, parallel: true}}
            skill: record
            parameters: {{log: "{log}", label: "item{{{{ n }}}}"}}
          - id: check
            skill: gate
            parameters: {{marker: "{marker}", log: "{log}"}}
          - id: last
            skill: record
            parameters: {{log: "{log}", label: last, saw: "{{{{ check.open }}}}"}}
        outputs:
          first: "{{{{ first.label }}}}"
          items: "{{{{ items | map(attribute='label') | list }}}}"
          opened: "{{{{ last.saw }}}}"
        """,
    )


async def test_a_failed_run_resumes_after_the_fix_without_rerunning_finished_steps(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    marker, log = tmp_path / "gate.open", tmp_path / "calls.log"
    pid = _gated(home, marker, log)
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        failed = await client.call_tool(pid, {})
    assert failed.is_error
    text = text_of(failed)
    assert "step 'check'" in text and "the gate is closed" in text
    run_id = text.split("run ", 1)[1].split()[0]
    record = RunStore(home / "state.sqlite").get(run_id)
    assert record is not None and record.status == "failed" and record.failed_step == "check"
    calls = _lines(log)
    assert calls[0] == "first" and sorted(calls[1:4]) == ["item1", "item2", "item3"] and calls[4:] == ["gate"]

    marker.write_text("fixed")
    out = await resume(home, skills, run_id)
    summary = out.pop("summary")
    usage = out.pop("usage")
    assert usage["calls"] == 0
    assert summary["line"] == "SUCCESS: 4/4 steps succeeded, 0 failed, 0 skipped"  # those finished before count too
    assert out == {"first": "first", "items": ["item1", "item2", "item3"], "opened": True, "run_id": run_id}
    calls = _lines(log)
    assert calls.count("first") == 1
    assert sorted(c for c in calls if c.startswith("item")) == ["item1", "item2", "item3"]
    assert calls[-2:] == ["gate", "last"] and calls.count("gate") == 2
    record = RunStore(home / "state.sqlite").get(run_id)
    assert record is not None and record.status == "succeeded"
    assert record.result == {**out, "summary": summary, "usage": usage}


async def test_a_failed_parallel_item_is_the_only_item_run_again_on_resume(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    marker, log = tmp_path / "gate.open", tmp_path / "calls.log"
    log.write_text("")
    # one item at a time, the failing one last: the items before it are finished and checkpointed
    pid = publish(
        home,
        f"""
        id: items_gated
        steps:
          - id: each
            for: {{items: [1, 2, 3], variable: n, parallel: true, max_parallel: 1}}
            skill: gate
            parameters:
              marker: "{{{{ '{marker}' if n == 3 else '{log}' }}}}"
              log: "{log}"
              label: "item{{{{ n }}}}"
        outputs:
          labels: "{{{{ each | map(attribute='label') | list }}}}"
        """,
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        failed = await client.call_tool(pid, {})
    assert failed.is_error and "the gate is closed" in text_of(failed)
    run_id = failed_run(failed)
    assert _lines(log) == ["item1", "item2", "item3"]
    marker.write_text("fixed")
    out = await resume(home, skills, run_id)
    assert out.pop("summary")["succeeded"] == 1 and out.pop("usage")["calls"] == 0
    assert out == {"labels": ["item1", "item2", "item3"], "run_id": run_id}
    assert _lines(log) == ["item1", "item2", "item3", "item3"]


async def test_a_succeeded_run_cannot_be_resumed(home: Path, skills: Path, tmp_path: Path) -> None:
    marker, log = tmp_path / "gate.open", tmp_path / "calls.log"
    marker.write_text("open")
    pid = _gated(home, marker, log)
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool(pid, {})
    assert not result.is_error
    assert result.structured_content is not None
    run_id = result.structured_content["run_id"]
    proc = await anyio.to_thread.run_sync(_resume_cli, home, skills, run_id)
    assert proc.returncode != 0
    assert "already succeeded" in proc.stdout + proc.stderr
    assert _lines(log).count("first") == 1


# -- a killed server -----------------------------------------------------------------------------


async def test_a_run_of_a_killed_server_is_resumed_by_another_process_without_rerunning_finished_steps(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    marker, log = tmp_path / "go.marker", tmp_path / "calls.log"
    pid = publish(
        home,
        f"""
        id: interrupted
        steps:
          - id: first
            skill: record
            parameters: {{log: "{log}", label: first}}
          - id: blocked
            skill: wait
            timeout: 600
            parameters: {{marker: "{marker}", log: "{log}"}}
          - id: last
            skill: record
            parameters: {{log: "{log}", label: last, after: "{{{{ blocked.waited }}}}"}}
        outputs:
          first: "{{{{ first.label }}}}"
          last: "{{{{ last }}}}"
        """,
    )
    params = StdioServerParameters(
        command=str(ORCHESTRATOR),
        args=["serve", "--home", str(home), "--skills", str(skills)],
        env={**os.environ, "ORCHESTRATOR_HOME": str(home)},
    )
    first_done = anyio.Event()
    waiting: dict[str, str] = {}
    waiting_seen = anyio.Event()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if message == "first: done":
            first_done.set()

    async def on_log(params: Any) -> None:
        data = str(params.data)
        if data.startswith("waiting "):
            waiting.update(part.split("=", 1) for part in data.split()[1:])
            waiting_seen.set()

    # the stdio client owns the server process: leaving its context ends (and reaps) it either way
    with anyio.fail_after(TIMEOUT):
        async with Client(params, mode="legacy", logging_callback=on_log) as client, anyio.create_task_group() as tg:

            async def calling() -> None:
                await client.call_tool(pid, {}, progress_callback=on_progress)

            tg.start_soon(calling)
            await first_done.wait()
            await waiting_seen.wait()
            os.kill(int(waiting["pid"]), signal.SIGKILL)
            tg.cancel_scope.cancel()
    with pytest.raises(ProcessLookupError):
        os.kill(int(waiting["pid"]), 0)
    run_id = waiting["run"]
    record = RunStore(home / "state.sqlite").get(run_id)
    # nobody was left to record the end: the dead owner is detected
    assert record is not None and record.status == "interrupted"
    assert record.owner is not None and record.owner.endswith(f":{waiting['pid']}")
    assert _lines(log) == ["first", "wait"]
    listed = await anyio.to_thread.run_sync(_runs_cli, home, "list")
    assert listed.returncode == 0, listed.stderr
    [row] = [line.split() for line in listed.stdout.splitlines() if line.startswith(run_id)]
    assert row[1:3] == ["interrupted", "interrupted"]  # pipeline id, status
    assert f"orchestrator runs resume {run_id}" in listed.stderr
    shown = await anyio.to_thread.run_sync(_runs_cli, home, "show", run_id)
    assert "status:      interrupted" in shown.stdout
    assert f"run {run_id} interrupted: `orchestrator runs resume {run_id}` continues it" in shown.stderr

    marker.write_text("go")
    out = await resume(home, skills, run_id)
    assert out.pop("summary")["line"].startswith("SUCCESS: ") and out.pop("usage")["calls"] == 0
    assert out == {"first": "first", "last": {"label": "last", "after": True}, "run_id": run_id}
    assert _lines(log) == ["first", "wait", "wait", "last"]
    record = RunStore(home / "state.sqlite").get(run_id)
    assert record is not None and record.status == "succeeded"


# -- cancellation --------------------------------------------------------------------------------


async def test_cancelling_the_call_stops_the_run_and_records_it_cancelled(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    marker, log = tmp_path / "hang.cancelled", tmp_path / "calls.log"
    pid = publish(
        home,
        f"""
        id: hanging
        steps:
          - id: first
            skill: record
            parameters: {{log: "{log}", label: first}}
          - id: stuck
            skill: hang
            parameters: {{marker: "{marker}"}}
          - id: never
            skill: record
            parameters: {{log: "{log}", label: never}}
        """,
    )
    hanging = anyio.Event()
    run_ids: list[str] = []

    async def on_log(params: Any) -> None:
        data = str(params.data)
        if data.startswith("starting pipeline"):
            run_ids.append(data.rsplit("run ", 1)[1])
        if data == "hanging":
            hanging.set()

    with anyio.fail_after(TIMEOUT):
        async with Client(create_server(home=home, skill_dirs=[skills]), mode="legacy", logging_callback=on_log) as c:
            with anyio.CancelScope() as scope:

                async def cancel_when_hanging() -> None:
                    await hanging.wait()
                    scope.cancel()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_when_hanging)
                    await c.call_tool(pid, {})
            assert scope.cancelled_caught
            still = await c.call_tool("record", {"log": str(log), "label": "after"})
            assert not still.is_error
    # leaving the client waited for the server's handlers: the run's clean-up has happened
    assert marker.read_text() == "cancelled"
    assert _lines(log) == ["first", "after"]
    [run_id] = run_ids
    record = RunStore(home / "state.sqlite").get(run_id)
    assert record is not None and record.status == "cancelled"
