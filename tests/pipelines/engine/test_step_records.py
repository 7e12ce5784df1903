"""Per-step records of a run: what the run viewer, `get_run` and `runs show` read (`RunStore.steps`).

Each test runs a real pipeline through an in-memory client and reads the records back from the
run store (SQLite here; the PostgreSQL store shares the statements, see test_run_handles.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp import Client

from mcp_server import create_server
from pipelines.storage.runs import RunStore, StepRecord
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.fixtures.model_client import connect
from tests.fixtures.run_skills import failed_run, publish, python_skills, text_of
from tests.helpers import write_skill


def _by_path(home: Path, run_id: str) -> dict[str, StepRecord]:
    return {s.path: s for s in RunStore(home / "state.sqlite").steps(run_id)}


async def test_every_step_loop_item_and_nested_step_is_recorded_with_status_times_inputs_and_outputs(
    home: Path, tmp_path: Path
) -> None:
    skills = python_skills(tmp_path / "skills", "echo", "blob")
    pid = publish(
        home,
        """
        id: recorded
        steps:
          - id: first
            skill: echo
            parameters: {word: hello}
          - id: each
            for: {items: [a, b], variable: x}
            skill: echo
            parameters: {word: "{{ x }}"}
          - id: fanned
            for: {items: [c, d], variable: x, parallel: true}
            steps:
              - id: inner
                skill: echo
                parameters: {word: "{{ x }}"}
          - id: never
            skill: echo
            condition: "{{ false }}"
            parameters: {}
          - id: big
            skill: blob
            parameters: {size: 100000}
        """,
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool(pid, {})
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    steps = _by_path(home, result.structured_content["run_id"])
    assert set(steps) == {
        "first",
        "each",
        "each[0]",
        "each[1]",
        "fanned",
        "fanned[0]/inner",
        "fanned[1]/inner",
        "never",
        "big",
    }
    first = steps["first"]
    assert (first.status, first.kind, first.parent) == ("succeeded", "skill", None)
    assert first.inputs == {"word": "hello"} and first.outputs == {"word": "hello"}
    assert first.duration is not None and first.duration >= 0
    assert (steps["each[1]"].kind, steps["each[1]"].parent, steps["each[1]"].outputs) == ("item", "each", {"word": "b"})
    assert steps["fanned[1]/inner"].parent == "fanned" and steps["fanned[1]/inner"].outputs == {"word": "d"}
    assert steps["fanned"].status == "succeeded" and steps["fanned"].kind == "for"
    assert steps["never"].status == "skipped"
    big = steps["big"].outputs
    assert big["truncated"] is True and big["bytes"] > 100000 and len(json.dumps(big)) < 2000


async def test_a_failed_step_keeps_its_error_envelope_and_the_run_its_envelope(home: Path, tmp_path: Path) -> None:
    skills = python_skills(tmp_path / "skills", "echo", "gate")
    pid = publish(
        home,
        f"""
        id: gated
        steps:
          - id: soft
            skill: gate
            on_error: continue
            parameters: {{marker: "{tmp_path / "nowhere"}"}}
          - id: hard
            skill: gate
            parameters: {{marker: "{tmp_path / "nowhere"}"}}
          - id: after
            skill: echo
            parameters: {{}}
        """,
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool(pid, {})
    run_id = failed_run(result)
    steps = _by_path(home, run_id)
    assert set(steps) == {"soft", "hard"}  # `after` never started
    for path in ("soft", "hard"):
        error: dict[str, Any] = (steps[path].error or {})["error"]
        assert steps[path].status == "failed"
        assert error["type"] == "skill_failed" and "closed" in error["message"] and error["where"] == f"step '{path}'"
    run = RunStore(home / "state.sqlite").get(run_id)
    assert run is not None and run.envelope is not None
    assert run.envelope["error"]["type"] == "skill_failed" and "hard" in run.envelope["error"]["where"]


async def test_a_steps_model_usage_is_recorded_and_summed_into_its_loop(
    home: Path, tmp_path: Path, stub: AnthropicStub
) -> None:
    root = tmp_path / "skills"
    write_skill(
        root,
        "haiku",
        body="You are a poet.\n",
        contract={
            "inputs": {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]},
            "run": {"prompt": "prompt.md"},
        },
        files={"prompt.md": "A haiku about {{ topic }}."},
    )
    pid = publish(
        home,
        """
        id: poems
        steps:
          - id: each
            for: {items: [sea, sky], variable: topic, parallel: true}
            skill: haiku
            parameters: {topic: "{{ topic }}"}
        """,
    )
    stub.reply("Waves.", input_tokens=200, output_tokens=20)
    stub.reply("Clouds.", input_tokens=300, output_tokens=30)
    async with connect(home, None, skill_dirs=[root]) as client:
        result = await client.call_tool(pid, {})
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    steps = _by_path(home, result.structured_content["run_id"])
    items = [steps["each[0]"].usage, steps["each[1]"].usage]
    assert all(u is not None and u["calls"] == 1 for u in items)
    loop = steps["each"].usage
    assert loop is not None
    assert (loop["input_tokens"], loop["output_tokens"], loop["total_tokens"], loop["calls"]) == (500, 50, 550, 2)
