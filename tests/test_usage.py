"""Usage accounting: tokens and cost of every model call, per step and per run, kept in history.

Token counts and prices need a provider that reports them: the real `anthropic` SDK against a
local Messages API stand-in (`AnthropicStub`). The client's model (sampling) reports calls only.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fixtures.anthropic_stub import AnthropicStub
from fixtures.model_client import ClientModel, connect, final
from helpers import write_skill
from mcp_types import CallToolResult

from adapters.models import load_registry
from mcp_server import create_server
from pipelines.runs import RunStore
from skills import Home, SkillContext

STRING = {"type": "string"}


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    write_skill(
        root,
        "summarize",
        body="You summarise.\n",
        contract={
            "inputs": {"type": "object", "properties": {"text": STRING}, "required": ["text"]},
            "outputs": {"type": "object", "properties": {"summary": STRING}, "required": ["summary"]},
            "run": {"prompt": "prompt.md"},
        },
        files={"prompt.md": "Summarise: {{ text }}"},
    )
    write_skill(
        root,
        "haiku",
        body="You are a poet.\n",
        contract={
            "inputs": {"type": "object", "properties": {"topic": STRING}, "required": ["topic"]},
            "run": {"prompt": "prompt.md"},
        },
        files={"prompt.md": "A haiku about {{ topic }}."},
    )
    gate = """
        from pathlib import Path
        def gate(flag):
            if not Path(flag).exists():
                raise RuntimeError("the gate is closed")
            return {"open": True}
        """
    write_skill(
        root,
        "gate",
        contract={"inputs": {"type": "object", "properties": {"flag": STRING}}, "run": {"python": "impl:gate"}},
        impl=gate,
    )
    write_skill(
        root,
        "poet",
        body="You get poems written.",
        contract={"run": {"agent": {"skills": ["haiku"], "max_tokens": 5000}}},
    )
    return root


def _pipeline(home: Path, pipeline_id: str, text: str) -> None:
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{pipeline_id}.yaml").write_text(textwrap.dedent(text))


NOTES = """
    id: notes
    model: validation
    inputs: {text: {type: string}, flag: {type: string, default: "/nonexistent"}}
    steps:
      - id: summary
        skill: summarize
        parameters: {text: "{{ text }}"}
      - id: poems
        for: {items: [sea, sky], variable: topic, parallel: true}
        skill: haiku
        model: review
        parameters: {topic: "{{ topic }}"}
      - id: check
        skill: gate
        parameters: {flag: "{{ flag }}"}
    outputs:
      summary: "{{ summary.summary }}"
      poems: "{{ poems }}"
    """


def data_of(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, [getattr(c, "text", c) for c in result.content]
    assert result.structured_content is not None
    return result.structured_content


def _tally(input_tokens: int, output_tokens: int, cost: float, calls: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "cost_usd": pytest.approx(cost),
        "calls": calls,
    }


async def test_usage_is_summed_per_step_and_per_run_and_kept_in_history(
    home: Path, skills: Path, tmp_path: Path, stub: AnthropicStub
) -> None:
    _pipeline(home, "notes", NOTES)
    flag = tmp_path / "flag"
    flag.touch()
    stub.reply("not JSON", input_tokens=500, output_tokens=50)  # summary: a re-ask counts too
    stub.reply(json.dumps({"summary": "Short."}), input_tokens=1000, output_tokens=100)
    stub.reply("Waves.", input_tokens=200, output_tokens=20)  # poems, one per item
    stub.reply("Clouds.", input_tokens=200, output_tokens=20)
    async with connect(home, None, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("notes", {"text": "A long text.", "flag": str(flag)}))
    registry = load_registry(home)
    validation, review = registry.info("validation"), registry.info("review")
    assert [r["body"]["model"] for r in stub.requests] == [validation.id] * 2 + [review.id] * 2
    summary_cost = validation.cost(1500, 150)
    poems_cost = review.cost(400, 40)
    assert summary_cost > 0 and poems_cost > 0
    assert data["summary"] == "Short." and sorted(data["poems"]) == ["Clouds.", "Waves."]
    assert data["usage"] == {
        **_tally(1900, 190, summary_cost + poems_cost, 4),
        "steps": {"summary": _tally(1500, 150, summary_cost, 2), "poems": _tally(400, 40, poems_cost, 2)},
    }
    record = RunStore(Home.resolve(home).state_db).get(data["run_id"])
    assert record is not None and record.result is not None
    assert record.result["usage"] == data["usage"]


async def test_a_resumed_run_keeps_the_usage_of_the_steps_it_does_not_repeat(
    home: Path, skills: Path, tmp_path: Path, stub: AnthropicStub
) -> None:
    _pipeline(home, "notes", NOTES)
    flag = tmp_path / "flag"
    stub.reply(json.dumps({"summary": "Short."}), input_tokens=1000, output_tokens=100)
    stub.reply("Waves.", input_tokens=200, output_tokens=20)
    stub.reply("Clouds.", input_tokens=200, output_tokens=20)
    async with connect(home, None, skill_dirs=[skills]) as client:
        failed = await client.call_tool("notes", {"text": "A long text.", "flag": str(flag)})
    assert failed.is_error
    (run,) = RunStore(Home.resolve(home).state_db).list()
    flag.touch()
    service = create_server(home=home, skill_dirs=[skills]).pipelines
    assert service is not None
    resumed = await service.resume(run.run_id, SkillContext())  # no model: none is asked again
    assert stub.pending == 0 and len(stub.requests) == 3
    assert resumed["usage"]["calls"] == 3 and set(resumed["usage"]["steps"]) == {"summary", "poems"}
    assert resumed["usage"]["total_tokens"] == 1540


async def test_a_pipeline_called_as_a_step_adds_its_usage_to_that_step(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    _pipeline(home, "notes", NOTES)
    flag = tmp_path / "flag"
    flag.touch()
    _pipeline(
        home,
        "outer",
        """
        id: outer
        steps:
          - id: inner
            skill: notes
            parameters: {text: hello, flag: "FLAG"}
          - id: extra
            skill: haiku
            parameters: {topic: more}
        """.replace("FLAG", str(flag)),
    )
    model = ClientModel(json.dumps({"summary": "Hi."}), "One.", "Two.", "Three.")
    async with connect(home, model, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("outer", {}))
    inner = data["inner"]["usage"]
    assert inner["calls"] == 3  # the inner run reports its own
    steps = data["usage"]["steps"]
    # The client's model reports no tokens: they are estimated (and marked), and the inner run's
    # estimate is what its step spent in the outer run.
    assert steps["inner"] == {
        **_tally(inner["input_tokens"], inner["output_tokens"], inner["cost_usd"], 3),
        "estimated": True,
    }
    assert steps["extra"]["calls"] == 1 and steps["extra"]["estimated"] is True
    assert steps["extra"]["total_tokens"] > 0
    assert data["usage"]["calls"] == 4 and data["usage"]["estimated"] is True


async def test_an_agents_budget_counts_the_model_calls_of_its_tools(
    home: Path, skills: Path, stub: AnthropicStub
) -> None:
    stub.reply(tool_uses=[{"name": "haiku", "input": {"topic": "rain"}}], input_tokens=300, output_tokens=30)
    stub.reply("Rain on the roof.", input_tokens=1000, output_tokens=100)  # the haiku skill's own call
    stub.reply(final("Rain on the roof."), input_tokens=400, output_tokens=40)
    async with connect(home, None, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("poet", {"task": "A poem about rain"}))
    assert data["status"] == "success" and data["output"] == "Rain on the roof."
    assert data["tokens"] == 1870
    orchestrator = load_registry(home).info("orchestrator")
    assert data["cost_usd"] == pytest.approx(orchestrator.cost(1700, 170), abs=1e-6)
