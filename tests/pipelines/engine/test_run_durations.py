"""A run's duration is the time it ran: not the time it stood failed before its resume, nor the time
a person took to answer a step-through question (`paused`, recorded with the run).

Real runs: the installed console script for a failed run resumed after a fix, and an in-memory
MCP client whose elicitation callback answers the step-through questions.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from mcp_server import create_server
from pipelines.storage.runs import RunStore
from tests.helpers import run_cli, write_skill

TWO_STEPS = """\
id: two-steps
inputs:
  marker: {type: string}
steps:
  - id: first
    skill: ready
    parameters: {marker: "{{ marker }}", wait: false}
  - id: second
    skill: ready
    parameters: {marker: "{{ marker }}", wait: true}
"""


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    """`ready`: fails while `marker` does not exist (when told to wait for it)."""
    root = tmp_path / "skills"
    impl = (
        "from pathlib import Path\n\n"
        "def ready(marker, wait):\n"
        "    if wait and not Path(marker).exists():\n"
        "        raise RuntimeError('the marker is not there yet')\n"
        "    return {'ok': True}\n"
    )
    inputs = {"type": "object", "properties": {"marker": {"type": "string"}, "wait": {"type": "boolean"}}}
    write_skill(root, "ready", contract={"inputs": inputs, "run": {"python": "impl:ready"}}, impl=impl)
    return root


def test_a_resumed_run_s_duration_leaves_out_the_time_it_stood_failed(tmp_path: Path, home: Path, skills: Path) -> None:
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    pipeline, marker = tmp_path / "two-steps.yaml", tmp_path / "marker"
    pipeline.write_text(TWO_STEPS)
    failed = run_cli(
        "run", str(pipeline), "--input", f"marker={marker}", "--skills", str(skills), env=env, cwd=tmp_path
    )
    assert failed.code == 1, failed.err
    stood_from = time.time()  # the run ended before this
    (run,) = RunStore(home / "state.sqlite").list()
    first = run_cli("runs", "show", run.run_id, "--json", env=env, cwd=tmp_path).json()
    assert isinstance(first, dict) and first["status"] == "failed"
    marker.write_text("here")
    stood_until = time.time()  # the resume starts after this
    resumed = run_cli("runs", "resume", run.run_id, "--skills", str(skills), env=env, cwd=tmp_path)
    assert resumed.code == 0, resumed.err
    resumed_by = time.time()
    shown = run_cli("runs", "show", run.run_id, "--json", env=env, cwd=tmp_path).json()
    assert isinstance(shown, dict) and shown["status"] == "succeeded"
    assert shown["paused"] >= stood_until - stood_from
    assert shown["duration"] <= first["duration"] + (resumed_by - stood_until)  # the two parts it ran, no more
    record = RunStore(home / "state.sqlite").get(run.run_id)
    assert record is not None and record.ended is not None
    assert record.duration == pytest.approx(record.ended - record.started - record.paused)


async def test_a_stepped_run_s_duration_leaves_out_the_time_its_questions_waited(
    tmp_path: Path, home: Path, skills: Path
) -> None:
    marker = tmp_path / "marker"
    marker.write_text("here")
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "two-steps.yaml").write_text(TWO_STEPS)
    held: list[float] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        began = time.monotonic()
        try:  # the person reads the step's output: what it shows is looked at before answering
            assert "finished" in params.message
            return types.ElicitResult(action="accept", content={"action": "continue"})
        finally:
            held.append(time.monotonic() - began)

    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server, mode="legacy", elicitation_callback=answer) as client:
        done = await client.call_tool(
            "run_pipeline", {"pipeline": "two-steps", "inputs": {"marker": str(marker)}, "step": True}
        )
    data = done.structured_content
    assert data is not None and data["status"] == "succeeded", done
    assert len(held) == 2
    record = RunStore(home / "state.sqlite").get(data["run_id"])
    assert record is not None and record.ended is not None
    assert record.paused >= sum(held) > 0
    assert record.duration == pytest.approx(record.ended - record.started - record.paused)
    assert record.duration is not None and record.duration < record.ended - record.started
