"""`ask:` steps: a pipeline asks the person, by elicitation, an input round, a task's input
request, the terminal; or the run waits and `answer_run` / `orchestrator runs answer` resume it."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import textwrap
import time
from collections import deque
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from mcp_server import create_server
from pipelines.language.verify import check_text
from pipelines.storage.runs import RunStore
from pipelines.storage.state import Backends
from tests import _scale
from tests._tasks_client import TasksExtension, get, result, start, start_core, update
from tests.mcp_server import test_rounds_continue as rounds
from tests.mcp_server.test_rounds_continue import _marks
from tests.pipelines.engine.test_run_progress import DISPLAY_VARS, ORCHESTRATOR, TIMEOUT, _read_until

skills = rounds.skills  # the fixture: the `mark` tool (appends its `call` to a log file)
postgres_server, pg_url = _scale.postgres_server, _scale.pg_url  # a real PostgreSQL server

ASK = """
id: greet
inputs: {log: string}
steps:
  - id: before
    skill: mark
    parameters: {log: "{{ log }}", call: before}
  - id: who
    ask: "Who is there? ({{ before.marked }} was marked)"
    schema:
      type: object
      properties:
        name: {type: string, description: "Your name"}
        age: {type: integer}
      required: [name]
  - id: after
    skill: mark
    parameters: {log: "{{ log }}", call: "hello-{{ who.name }}"}
outputs: {greeted: "{{ who.name }}", age: "{{ who.age if who.age is defined else none }}"}
"""
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Your name"}, "age": {"type": "integer"}},
    "required": ["name"],
}
QUESTION = "Who is there? (before was marked)"


def _pipeline(home: Path, text: str = ASK) -> None:
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    spec_id = text.split("id:", 1)[1].split()[0]
    (home / "pipelines" / f"{spec_id}.yaml").write_text(textwrap.dedent(text).lstrip())


def _person(*replies: types.ElicitResult, seen: list[types.ElicitRequestParams]) -> Any:
    queue = deque(replies)

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params)
        return queue.popleft()

    return elicit


def _accept(**content: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content=content)


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def _asked(seen: list[types.ElicitRequestParams]) -> tuple[str, Any]:
    params = seen[0]
    assert isinstance(params, types.ElicitRequestFormParams)
    return params.message, params.requested_schema


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # elicitation mid-call (handshake) / an input round (2026-07-28)
async def test_an_ask_step_reaches_the_person_by_elicitation_or_an_input_round(
    home: Path, skills: Path, tmp_path: Path, mode: str
) -> None:
    _pipeline(home)
    log = tmp_path / "marks.log"
    seen: list[types.ElicitRequestParams] = []
    server = create_server(home=home, skill_dirs=[skills])
    person = _person(_accept(name="Ada", age=36), seen=seen)
    async with Client(server, mode=mode, elicitation_callback=person) as client:
        result = await client.call_tool("greet", {"log": str(log)})
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    assert result.structured_content["greeted"] == "Ada" and result.structured_content["age"] == 36
    message, schema = _asked(seen)
    assert message == QUESTION
    assert schema["properties"]["name"]["type"] == "string" and schema["required"] == ["name"]
    assert _marks(log) == ["before", "hello-Ada"]


async def test_an_ask_step_of_a_task_is_the_tasks_input_request(home: Path, skills: Path, tmp_path: Path) -> None:
    _pipeline(home)
    log = tmp_path / "marks.log"
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(
        server, mode="auto", extensions=[TasksExtension()], elicitation_callback=_person(seen=[])
    ) as client:
        created = await start(client, "greet", {"log": str(log)})
        requests: dict[str, Any] = {}
        with anyio.fail_after(60):
            while True:
                state = await get(client, created.task_id)
                if state.status == "input_required" and state.input_requests:
                    requests = dict(state.input_requests)
                    answers = {key: {"action": "accept", "content": {"name": "Grace"}} for key in requests}
                    await update(client, created.task_id, answers)
                elif state.status in ("completed", "failed", "cancelled"):
                    break
                await anyio.sleep(0.02)
    assert state.status == "completed", state
    assert [r["method"] for r in requests.values()] == ["elicitation/create"]
    assert next(iter(requests.values()))["params"]["message"] == QUESTION
    data = state.result["structuredContent"]  # type: ignore[index]
    assert data["greeted"] == "Grace" and data["age"] is None
    assert _marks(log) == ["before", "hello-Grace"]


async def test_an_ask_step_of_a_handshake_clients_core_task_is_asked_on_its_result_stream(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    _pipeline(home)
    log = tmp_path / "marks.log"
    seen: list[types.ElicitRequestParams] = []
    server = create_server(home=home, skill_dirs=[skills])
    person = _person(_accept(name="Lin"), seen=seen)
    async with Client(server, mode="legacy", elicitation_callback=person) as client:
        answer = await start_core(client, "greet", {"log": str(log)})
        with anyio.fail_after(60):
            final = await result(client, answer["task"]["taskId"])  # the question comes on this stream
    assert not final.is_error, text_of(final)
    assert final.structured_content is not None and final.structured_content["greeted"] == "Lin"
    assert _asked(seen)[0] == QUESTION
    assert _marks(log) == ["before", "hello-Lin"]


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_declined_question_fails_the_step_unless_it_continues(
    home: Path, skills: Path, tmp_path: Path, action: str
) -> None:
    _pipeline(home)
    log = tmp_path / "marks.log"
    server = create_server(home=home, skill_dirs=[skills])
    no = types.ElicitResult(action=action)  # type: ignore[arg-type]
    async with Client(server, mode="legacy", elicitation_callback=_person(no, seen=[])) as client:
        result = await client.call_tool("greet", {"log": str(log)})
    assert result.is_error
    body = json.loads(text_of(result))["error"]
    assert "step 'who'" in body["message"] and ("declined" in body["message"] or "cancelled" in body["message"])
    assert "on_error: continue" in body["hint"]
    assert _marks(log) == ["before"]  # nothing after the refused step ran
    _pipeline(
        home,
        ASK.replace("  - id: who\n", "  - id: who\n    on_error: continue\n")
        .replace('call: "hello-{{ who.name }}"', "call: \"{{ 'nobody' if who is failed else who.name }}\"")
        .replace(
            'greeted: "{{ who.name }}", age: "{{ who.age if who.age is defined else none }}"',
            'asked: "{{ who is failed }}"',
        ),
    )
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server, mode="legacy", elicitation_callback=_person(no, seen=[])) as client:
        result = await client.call_tool("greet", {"log": str(log)})
    # the run goes on to its end, but the declined step still counts: PARTIAL, its outputs kept
    assert result.is_error and result.structured_content is not None, text_of(result)
    assert "PARTIAL" in result.structured_content["error"]["message"]
    assert result.structured_content["asked"] is True
    assert _marks(log) == ["before", "before", "nobody"]


async def test_a_run_nobody_can_be_asked_in_waits_and_is_answered_after_a_restart(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    _pipeline(home)
    log = tmp_path / "marks.log"
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server, mode="legacy") as client:  # no elicitation: nobody to ask
        waiting = await client.call_tool("greet", {"log": str(log)})
    assert not waiting.is_error, text_of(waiting)
    data = waiting.structured_content
    assert data is not None
    assert data["status"] == "waiting" and data["question"] == QUESTION and data["schema"] == SCHEMA
    assert data["step"] == "who" and "answer_run" in data["hint"]
    run_id = data["run_id"]
    record = RunStore(home / "state.sqlite").get(run_id)
    assert record is not None and record.status == "waiting"
    assert record.asking is not None and record.asking["question"] == QUESTION
    assert [r.run_id for r in RunStore(home / "state.sqlite").list(status="waiting")] == [run_id]

    again = create_server(home=home, skill_dirs=[skills])  # a new server over the same state.sqlite
    async with Client(again, mode="auto") as client:
        bad = await client.call_tool("answer_run", {"run_id": run_id, "answer": {"age": "old"}})
        still = RunStore(home / "state.sqlite").get(run_id)
        done = await client.call_tool("answer_run", {"run_id": run_id, "answer": {"name": "Ada", "age": 36}})
        twice = await client.call_tool("answer_run", {"run_id": run_id, "answer": {"name": "Bob"}})
    assert bad.is_error
    error = json.loads(text_of(bad))["error"]
    assert error["type"] == "invalid_arguments" and error["where"] == "answer"
    assert "name" in error["message"] and "age" in error["message"] and "still waits" in error["message"]
    assert still is not None and still.status == "waiting"
    assert not done.is_error, text_of(done)
    assert done.structured_content is not None
    assert done.structured_content["status"] == "succeeded"
    assert done.structured_content["result"]["greeted"] == "Ada"
    assert _marks(log) == ["before", "hello-Ada"]  # `before` finished before the wait: not run again
    final = RunStore(home / "state.sqlite").get(run_id)
    assert final is not None and final.status == "succeeded" and final.asking is None
    assert twice.is_error and "not waiting" in json.loads(text_of(twice))["error"]["message"]


async def test_only_the_runs_owner_may_answer_it(home: Path, skills: Path, tmp_path: Path) -> None:
    _pipeline(home)
    log = tmp_path / "marks.log"
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server, mode="legacy") as client:
        waiting = await client.call_tool("greet", {"log": str(log)})
    assert waiting.structured_content is not None
    run_id = waiting.structured_content["run_id"]
    store = RunStore(home / "state.sqlite")
    with store._connect() as conn:  # pyright: ignore[reportPrivateUsage]  # the run made as another identity's
        conn.execute("UPDATE orchestrator_runs SET started_by='principal:someone-else' WHERE run_id=?", (run_id,))
    async with Client(create_server(home=home, skill_dirs=[skills]), mode="legacy") as client:
        other = await client.call_tool("answer_run", {"run_id": run_id, "answer": {"name": "Eve"}})
    assert other.is_error
    assert json.loads(text_of(other))["error"]["message"] == f"no run '{run_id}'"
    record = store.get(run_id)
    assert record is not None and record.status == "waiting"


def test_the_command_line_run_waits_without_a_terminal_and_runs_answer_resumes_it(
    home: Path, cli: Any, tmp_path: Path
) -> None:
    _pipeline(
        home,
        """
        id: confirm
        inputs: {what: {type: string, default: deploy}}
        steps:
          - id: ok
            ask: "Go ahead with {{ what }}?"
            schema:
              type: object
              properties: {go: {type: boolean}, times: {type: integer}}
              required: [go]
        outputs: {go: "{{ ok.go }}", times: "{{ ok.times }}"}
        """,
    )
    started = cli("run", "confirm", "--json")
    assert started.code == 0, started.err
    data = json.loads(started.out)
    assert data["status"] == "waiting" and data["question"] == "Go ahead with deploy?"
    run_id = data["run_id"]
    assert f"runs answer {run_id}" in started.err
    listed = cli("runs", "list")
    assert run_id in listed.out and "waiting" in listed.out
    bad = cli("runs", "answer", run_id, "--input", "go=perhaps")
    assert bad.code == 2 and "go" in bad.err and "still waits" in bad.err
    shown = cli("runs", "show", run_id)
    assert "waiting" in shown.out and "Go ahead with deploy?" in shown.out
    answered = cli("runs", "answer", run_id, "--input", "go=yes", "--input", "times=3", "--json")
    assert answered.code == 0, answered.err
    result = json.loads(answered.out)
    assert result["go"] is True and result["times"] == 3
    record = RunStore(home / "state.sqlite").get(run_id)
    assert record is not None and record.status == "succeeded"


def test_verification_rejects_a_nested_ask_schema_where_it_is() -> None:
    text = textwrap.dedent(
        """\
        id: nested
        steps:
          - id: who
            ask: "Who? {{ nobody }}"
            schema:
              type: object
              properties:
                address: {type: object, properties: {street: {type: string}}}
        """
    )
    _, issues = check_text(text, "nested.yaml")
    by_code = {i.code: i for i in issues}
    assert by_code["undefined"].line == 4
    assert by_code["ask-schema"].line == 8 and "'object' cannot be asked" in by_code["ask-schema"].message
    assert by_code["ask-schema"].severity == "error"


def test_in_a_terminal_the_command_line_asks_each_field_and_checks_its_type(home: Path, tmp_path: Path) -> None:
    _pipeline(
        home,
        """
        id: hello
        steps:
          - id: who
            ask: "Your details, please"
            schema:
              type: object
              properties: {name: {type: string}, age: {type: integer}, tea: {type: boolean}}
              required: [name]
        outputs: {who: "{{ who }}"}
        """,
    )
    env = {k: v for k, v in os.environ.items() if k not in DISPLAY_VARS} | {
        "ORCHESTRATOR_HOME": str(home),
        "HOME": str(tmp_path),
    }
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [str(ORCHESTRATOR), "run", "hello", "--json"],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env | {"TERM": "dumb"},
        text=True,
    )
    os.close(slave)
    seen: list[str] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        _read_until(master, re.compile(r"Your details, please[\s\S]*name: $", re.M), seen, deadline)
        os.write(master, b"Ada\n")
        _read_until(master, re.compile(r"age: $", re.M), seen, deadline)
        os.write(master, b"thirty\n")
        _read_until(master, re.compile(r"not a whole number[\s\S]*age: $", re.M), seen, deadline)
        os.write(master, b"36\n")
        _read_until(master, re.compile(r"tea \[yes/no\]: $", re.M), seen, deadline)
        os.write(master, b"\n")  # optional: left out
        out, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 0, "".join(seen)[-2000:]
    assert json.loads(out)["who"] == {"name": "Ada", "age": 36}


async def test_a_loop_of_questions_waits_once_per_item_and_keeps_the_answers_given(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    _pipeline(
        home,
        """
        id: survey
        inputs: {log: string}
        steps:
          - id: rate
            for: {items: [tea, coffee], variable: drink}
            steps:
              - id: score
                ask: "How much do you like {{ drink }}?"
                schema: {type: object, properties: {stars: {type: integer, minimum: 1, maximum: 5}}, required: [stars]}
              - id: note
                skill: mark
                parameters: {log: "{{ log }}", call: "{{ drink }}-{{ score.stars }}"}
        outputs: {stars: "{{ rate | map(attribute='score') | map(attribute='stars') | list }}"}
        """,
    )
    log = tmp_path / "marks.log"
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server, mode="legacy") as client:
        first = await client.call_tool("survey", {"log": str(log)})
        assert first.structured_content is not None, text_of(first)
        run_id = first.structured_content["run_id"]
        assert first.structured_content["question"] == "How much do you like tea?"
        second = await client.call_tool("answer_run", {"run_id": run_id, "answer": {"stars": 4}})
        assert second.structured_content is not None, text_of(second)
        assert second.structured_content["status"] == "waiting"
        assert second.structured_content["question"] == "How much do you like coffee?"
        out_of_range = await client.call_tool("answer_run", {"run_id": run_id, "answer": {"stars": 9}})
        third = await client.call_tool("answer_run", {"run_id": run_id, "answer": {"stars": 2}})
    assert out_of_range.is_error and "stars" in json.loads(text_of(out_of_range))["error"]["message"]
    assert not third.is_error, text_of(third)
    assert third.structured_content is not None
    assert third.structured_content["result"]["stars"] == [4, 2]
    assert _marks(log) == ["tea-4", "coffee-2"]


async def test_a_question_of_a_pipeline_called_by_a_step_makes_the_calling_run_wait(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    _pipeline(home)
    _pipeline(
        home,
        """
        id: outer
        inputs: {log: string}
        steps:
          - id: inner
            skill: greet
            parameters: {log: "{{ log }}"}
          - id: last
            skill: mark
            parameters: {log: "{{ log }}", call: "outer-{{ inner.greeted }}"}
        outputs: {greeted: "{{ inner.greeted }}"}
        """,
    )
    log = tmp_path / "marks.log"
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server, mode="legacy") as client:
        waiting = await client.call_tool("outer", {"log": str(log)})
        assert waiting.structured_content is not None, text_of(waiting)
        assert waiting.structured_content["status"] == "waiting"
        assert waiting.structured_content["question"] == QUESTION
        run_id = waiting.structured_content["run_id"]
        assert [r.pipeline for r in RunStore(home / "state.sqlite").list(status="waiting")] == ["outer"]
        done = await client.call_tool("answer_run", {"run_id": run_id, "answer": {"name": "Kay"}})
    assert not done.is_error, text_of(done)
    assert done.structured_content is not None and done.structured_content["result"]["greeted"] == "Kay"
    assert _marks(log)[-2:] == ["hello-Kay", "outer-Kay"]


async def test_a_run_waiting_in_the_shared_state_is_answered_through_another_server(
    tmp_path: Path, skills: Path, pg_url: str
) -> None:
    backends = Backends.of(state=pg_url, queue="", artifacts=str(tmp_path / "artifacts"))
    homes = [tmp_path / "a", tmp_path / "b"]
    for machine in homes:
        _pipeline(machine)
    log = tmp_path / "marks.log"
    a, b = (create_server(home=h, skill_dirs=[skills], backends=backends) for h in homes)
    async with Client(a, mode="legacy") as first:
        waiting = await first.call_tool("greet", {"log": str(log)})
    assert waiting.structured_content is not None, text_of(waiting)
    run_id = waiting.structured_content["run_id"]
    async with Client(b, mode="auto") as other:
        bad = await other.call_tool("answer_run", {"run_id": run_id, "answer": {}})
        done = await other.call_tool("answer_run", {"run_id": run_id, "answer": {"name": "Noor"}})
    assert bad.is_error and "name" in json.loads(text_of(bad))["error"]["message"]
    assert not done.is_error, text_of(done)
    assert done.structured_content is not None and done.structured_content["result"]["greeted"] == "Noor"
    assert _marks(log) == ["before", "hello-Noor"]
