"""2026-07-28 clients without tasks: each input round continues the call instead of replaying it.

The client's model answers through sampling between rounds (the SDK client's input-required
driver). Measured from outside: the agent's clock runs from the first round, each tool runs
once per decision of the model, a pipeline's progress never goes back and leaves one run, and
plan_and_run runs each step once per plan.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from pipelines.storage.runs import RunStore
from skills import Home
from tests._scripted import Script
from tests._scripted import connect as scripted
from tests.fixtures.model_client import ClientModel, connect, final, tool_use
from tests.helpers import write_skill

STRING = {"type": "string"}


def _python(root: Path, name: str, props: dict[str, Any], impl: str) -> None:
    inputs = {"type": "object", "properties": props, "required": list(props)}
    write_skill(root, name, contract={"inputs": inputs, "run": {"python": f"impl:{name}"}}, impl=impl)


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    # A tool with a side effect: it appends the call's id to a file (and takes a moment).
    _python(
        root,
        "mark",
        {"log": STRING, "call": STRING},
        """
        import anyio
        async def mark(log, call):
            await anyio.sleep(0.2)
            with open(log, "a") as f:
                f.write(call + "\\n")
            return {"marked": call}
        """,
    )
    write_skill(
        root,
        "marker",
        description="Marks things, for tests.",
        body="You mark.",
        contract={"run": {"agent": {"skills": ["mark"], "timeout": 1.5, "max_iterations": 20}}},
    )
    write_skill(
        root,
        "counter",
        description="Marks things, many turns, for tests.",
        body="You mark.",
        contract={"run": {"agent": {"skills": ["mark"], "max_iterations": 20}}},
    )
    return root


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return result.structured_content


def _marks(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


async def test_an_agents_timeout_counts_from_the_first_round_and_stops_it_there(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    log = tmp_path / "marks.log"
    model = ClientModel(*[[tool_use("mark", {"log": str(log), "call": f"c{n}"}, f"c{n}")] for n in range(1, 60)])
    started = time.monotonic()
    async with connect(home, model, skill_dirs=[skills], mode="auto") as client:
        client.input_required_max_rounds = 100
        data = _data(await client.call_tool("marker", {"task": "mark forever"}))
    took = time.monotonic() - started
    print(f"agent with timeout 1.5s: stopped after {took:.2f}s of wall time, duration_s={data['duration_s']}")
    assert data["status"] == "timeout"
    assert 1.5 <= data["duration_s"] < 10 and took < 10  # the clock did not restart each round
    marks = _marks(log)
    assert marks == sorted(set(marks), key=marks.index)  # no tool call ran twice
    assert len(marks) >= data["iterations"] - 1  # every decision before the stop ran, once


async def test_a_twelve_turn_agent_succeeds_and_runs_each_tool_call_once(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    """In this era each sequential model call is one round (the client must answer it before the
    next one can be asked), so the client's cap on rounds has to allow the turns; the default of
    10 would stop it. Clients that declare tasks have no such cap (test_tasks_*)."""
    log = tmp_path / "marks.log"
    turns = [[tool_use("mark", {"log": str(log), "call": f"c{n}"}, f"c{n}")] for n in range(1, 12)]
    model = ClientModel(*turns, final({"marked": 11}, "Marked eleven."))
    async with connect(home, model, skill_dirs=[skills], mode="auto") as client:
        client.input_required_max_rounds = 16
        data = _data(await client.call_tool("counter", {"task": "mark eleven times"}))
    assert data["status"] == "success" and data["iterations"] == 12 and data["output"] == {"marked": 11}
    assert _marks(log) == [f"c{n}" for n in range(1, 12)]  # each decision ran exactly once
    assert len(model.requests) == 12  # each question reached the client once
    assert data["tokens"] > 0  # estimated: the client's sampling reports no token counts


def _pipeline(home: Path, text: str) -> None:
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "story.yaml").write_text(text)


STORY = """
id: story
inputs: {log: {type: string}}
steps:
  - id: first
    skill: mark
    parameters: {log: "{{ log }}", call: first}
  - id: opening
    skill: tell
    parameters: {topic: "an opening"}
  - id: second
    skill: mark
    parameters: {log: "{{ log }}", call: second}
  - id: ending
    skill: tell
    parameters: {topic: "an ending after {{ opening }}"}
outputs: {story: "{{ opening }} {{ ending }}"}
"""


def _teller(skills: Path) -> None:
    write_skill(
        skills,
        "tell",
        description="Tells a line, for tests.",
        body="Answer in one line.",
        contract={
            "inputs": {"type": "object", "properties": {"topic": STRING}, "required": ["topic"]},
            "run": {"prompt": "prompt.md"},
        },
        files={"prompt.md": "Write {{ topic }}."},
    )


async def test_a_pipeline_asking_the_model_twice_progresses_monotonically_and_leaves_one_run(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    _teller(skills)
    _pipeline(home, STORY)
    log = tmp_path / "marks.log"
    model = ClientModel("Once upon a time.", "The end.")
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with connect(home, model, skill_dirs=[skills], mode="auto") as client:
        result = await client.call_tool("story", {"log": str(log)}, progress_callback=on_progress)
    data = _data(result)
    assert data["story"] == "Once upon a time. The end."
    assert _marks(log) == ["first", "second"]  # finished steps did not run again in later rounds
    assert progress and progress == sorted(progress)  # never backwards across rounds
    runs = RunStore(Home(home).state_db).list()
    assert [(r.run_id, r.status) for r in runs] == [(data["run_id"], "succeeded")]  # no cancelled leftovers


PLAN = """\
id: marked
description: "Marks once"
inputs:
  log: {type: string, default: "LOG"}
steps:
  - id: tick
    skill: mark
    parameters: {log: "{{ log }}", call: tick}
outputs:
  marked: "{{ tick.marked }}"
"""


async def test_plan_and_run_runs_each_pipeline_step_once_per_plan(home: Path, skills: Path, tmp_path: Path) -> None:
    log = tmp_path / "marks.log"
    plan = PLAN.replace("LOG", str(log))
    fenced = f"```yaml\n{plan}```\n"
    needs_fix = {"verdict": "needs_fix", "reasons": ["check it again"], "fix_instructions": "run it again"}
    complete = {"verdict": "complete", "reasons": ["marked"], "fix_instructions": ""}
    script = Script.of(fenced, needs_fix, fenced, complete)
    async with scripted(home, script, mode="auto", skill_dirs=[skills]) as session:
        session.client.input_required_max_rounds = 20
        result = await session.client.call_tool("plan_and_run", {"request": "mark once"})
    data = result.structured_content
    assert data is not None and data["status"] == "complete", result.content
    assert data["iterations"] == 2
    assert _marks(log) == ["tick", "tick"]  # one run of the step for each of the two plans
    assert script.left == 0 and len(script.requests) == 4


async def test_a_late_retry_resumes_the_pipeline_run_from_its_checkpoint(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    """A parked call whose client did not come back in time is stopped; the retry that comes
    later resumes the call's run: finished steps are kept and the answer it carries is used."""
    import anyio
    from mcp_types import CallToolResult, InputRequiredResult

    _teller(skills)
    _pipeline(home, STORY)
    (home / "config.yaml").write_text("tasks: {paused_call_expiry_s: 0.2}\n")
    log = tmp_path / "marks.log"
    model = ClientModel("Once upon a time.", "The end.")
    store = RunStore(Home(home).state_db)
    async with connect(home, model, skill_dirs=[skills], mode="auto") as client:
        await client.list_tools()
        first = await client.session.call_tool("story", {"log": str(log)}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        ((key, request),) = first.input_requests.items()
        with anyio.fail_after(10):  # the paused call expires: its run is recorded as cancelled
            while not (runs := store.list()) or runs[0].status != "cancelled":
                await anyio.sleep(0.05)
        answer = await model(None, request.params)  # type: ignore[union-attr]
        result: Any = await client.session.call_tool(
            "story",
            {"log": str(log)},
            input_responses={key: answer},
            request_state=first.request_state,
            allow_input_required=True,
        )
        while isinstance(result, InputRequiredResult):
            responses = {k: await model(None, r.params) for k, r in result.input_requests.items()}  # type: ignore[union-attr]
            result = await client.session.call_tool(
                "story",
                {"log": str(log)},
                input_responses=responses,
                request_state=result.request_state,
                allow_input_required=True,
            )
    assert isinstance(result, CallToolResult)
    data = _data(result)
    assert data["story"] == "Once upon a time. The end." and data["run_id"] == runs[0].run_id
    assert _marks(log) == ["first", "second"]  # the first step was not run again
    assert len(model.requests) == 2  # the resumed step's question was answered by the late retry
    assert json.loads(json.dumps(store.get(data["run_id"]).status)) == "succeeded"  # type: ignore[union-attr]


async def test_a_call_that_cannot_ask_the_client_is_not_held_to_the_paused_call_limit(
    home: Path, tmp_path: Path
) -> None:
    """A synchronous python skill runs in a worker process, which cannot ask the client's model
    or the person anything: its call never waits for an input round, so it is answered even when
    no call of this client may be parked. An async skill, which could ask, is still parked (and
    here refused, with the limit named)."""
    root = tmp_path / "skills"
    _python(root, "plain", {"word": STRING}, "def plain(word):\n    return {'word': word}\n")
    _python(root, "asking", {"word": STRING}, "async def asking(word, ctx):\n    return {'word': word}\n")
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("tasks:\n  max_paused_calls: 0\n")
    async with connect(home, ClientModel(), skill_dirs=[root], mode="auto") as client:
        assert _data(await client.call_tool("plain", {"word": "here"})) == {"word": "here"}
        refused = await client.call_tool("asking", {"word": "here"})
    assert refused.is_error
    assert "max_paused_calls" in json.dumps(refused.structured_content)
