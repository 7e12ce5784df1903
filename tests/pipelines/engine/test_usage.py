"""Usage accounting: tokens and cost of every model call, per step and per run, kept in history.

Token counts and prices need a provider that reports them: the real `anthropic` SDK against a
local Messages API stand-in (`AnthropicStub`). The client's model (sampling) reports calls only.
Money spent is reported on every outcome (issue 22): a run that failed, the router's part of an
`orchestrate` whose work failed, a model turn cut off by a timeout; and it is summed exactly.
"""

from __future__ import annotations

import json
import os
import textwrap
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from mcp_types import CallToolResult

from adapters.models import load_registry
from mcp_server import create_server
from pipelines.storage.runs import RunStore
from skills import Home, SkillContext
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.fixtures.model_client import ClientModel, connect, final
from tests.helpers import envelope, run_cli, write_skill

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
    write_skill(
        root,
        "slow-poet",
        body="You get poems written, slowly.",
        contract={"run": {"agent": {"skills": ["haiku"], "timeout": 1}}},
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
        "estimated": False,
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


def body_of(result: CallToolResult) -> dict[str, Any]:
    """The whole JSON text of an error result: the envelope and what the run left beside it."""
    data: dict[str, Any] = json.loads(getattr(result.content[0], "text", ""))
    return data


FAILING = """
    id: failing
    inputs: {text: {type: string}}
    steps:
      - id: poem
        skill: haiku
        parameters: {topic: "{{ text }}"}
      - id: summary
        skill: summarize
        parameters: {text: "{{ text }}"}
    """


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_run_that_called_a_model_and_then_failed_reports_its_usage(
    home: Path, skills: Path, tmp_path: Path, stub: AnthropicStub, mode: str
) -> None:
    _pipeline(home, "failing", FAILING)
    stub.reply("Waves.", input_tokens=200, output_tokens=20)  # poem: fine
    stub.reply("not JSON", input_tokens=500, output_tokens=50)  # summary: unusable, asked again,
    stub.reply("still not JSON", input_tokens=600, output_tokens=60)  # unusable again: the step fails
    async with connect(home, None, skill_dirs=[skills], mode=mode) as client:
        result = await client.call_tool("failing", {"text": "A long text."})
    error = envelope(result)
    assert error["where"].startswith("step 'summary'")
    usage = body_of(result)["usage"]
    orchestrator = load_registry(home).info("orchestrator")
    assert usage == {
        **_tally(1300, 130, orchestrator.cost(1300, 130), 3),
        "steps": {
            "poem": _tally(200, 20, orchestrator.cost(200, 20), 1),
            "summary": _tally(1100, 110, orchestrator.cost(1100, 110), 2),  # the failing step's own calls
        },
    }
    run_id = body_of(result)["run_id"]
    record = RunStore(Home.resolve(home).state_db).get(run_id)
    assert record is not None and record.status == "failed" and record.usage == usage
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    shown = run_cli("runs", "show", run_id, "--json", env=env, cwd=tmp_path)
    assert shown.code == 0, shown.err
    data = shown.json()
    assert isinstance(data, dict) and data["status"] == "failed" and data["usage"] == usage
    text = run_cli("runs", "show", run_id, env=env, cwd=tmp_path)
    assert "usage:       3 model call(s), 1,300 in + 130 out tokens" in text.out


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_orchestrate_routed_to_a_failing_skill_keeps_the_routers_usage(
    home: Path, tmp_path: Path, stub: AnthropicStub, mode: str
) -> None:
    missing = str(tmp_path / "nope.txt")
    route = {"route": "skill", "skill": "read-file", "arguments": {"path": missing}, "reason": "one call"}
    stub.reply(json.dumps(route), input_tokens=1000, output_tokens=100)
    async with connect(home, None, mode=mode) as client:
        result = await client.call_tool("orchestrate", {"request": "Show me nope.txt"})
    error = envelope(result)
    assert error["type"] == "skill_failed" and "nope.txt" in error["message"]
    data = body_of(result)
    haiku = load_registry(home).info("validation")
    assert data["route"] == "skill" and data["skill"] == "read-file"
    assert data["usage"]["router"]["calls"] == 1 and data["usage"]["router"]["total_tokens"] == 1100
    assert data["usage"]["cost_usd"] == pytest.approx(haiku.cost(1000, 100), abs=1e-9)
    assert result.structured_content == data  # it fits orchestrate's output schema


async def test_cost_is_summed_exactly_and_rounded_only_when_shown(
    home: Path, skills: Path, stub: AnthropicStub
) -> None:
    _pipeline(
        home,
        "three",
        """
        id: three
        steps:
          - id: poems
            for: {items: [sea, sky, sand], variable: topic}
            skill: haiku
            model: validation
            parameters: {topic: "{{ topic }}"}
        """,
    )
    for _ in range(3):
        stub.reply("A poem.", input_tokens=9270, output_tokens=1)
    async with connect(home, None, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("three", {}))
    haiku = load_registry(home).info("validation")
    per_call = (Decimal(repr(haiku.input_price)) * 9270 + Decimal(repr(haiku.output_price))) / 10**6
    true = per_call * 3
    shown = float(true.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP))
    assert true != true.quantize(Decimal("0.000001"))  # the true total has more than 6 decimals
    assert round(round(float(per_call), 6) * 3, 6) != shown  # rounding each call first loses money
    assert data["usage"]["cost_usd"] == shown and data["usage"]["steps"]["poems"]["cost_usd"] == shown


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_agent_turn_cut_off_by_the_timeout_counts_its_tokens_as_estimated(
    home: Path, skills: Path, stub: AnthropicStub, mode: str
) -> None:
    stub.reply(tool_uses=[{"name": "haiku", "input": {"topic": "rain"}}], input_tokens=300, output_tokens=30)
    stub.reply("Rain.", input_tokens=100, output_tokens=10)  # the haiku skill's own call
    stub.hold()  # the second turn never answers: the agent's timeout cuts it off
    async with connect(home, None, skill_dirs=[skills], mode=mode) as client:
        data = data_of(await client.call_tool("slow-poet", {"task": "A poem about rain"}))
    assert stub.held.is_set()
    assert data["status"] == "timeout" and data["iterations"] == 2
    assert data["tokens"] > 300 + 30 + 100 + 10  # the cut-off turn's input counts, estimated


async def test_a_pipelines_agent_step_cut_off_mid_turn_reports_the_estimate_as_estimated(
    home: Path, skills: Path, stub: AnthropicStub
) -> None:
    _pipeline(
        home,
        "slow",
        """
        id: slow
        steps:
          - id: poet
            skill: slow-poet
            parameters: {task: "A poem about rain"}
            on_error: continue
        """,
    )
    stub.hold()
    async with connect(home, None, skill_dirs=[skills]) as client:
        result = await client.call_tool("slow", {})
    assert "PARTIAL: 0/1 steps succeeded, 1 failed (poet)" in envelope(result)["message"]
    data = body_of(result)
    assert data["poet"]["status"] == "timeout" and data["poet"]["step_failed"] is True
    assert data["poet"]["iterations"] == 1 and data["poet"]["tokens"] > 0
    usage = data["usage"]
    assert usage["calls"] == 1 and usage["input_tokens"] == data["poet"]["tokens"] and usage["output_tokens"] == 0
    assert usage["estimated"] is True and usage["cost_usd"] > 0
