"""Run limits: a registering client cannot make a run take more steps, items, data or time than
the server's configuration (`runs:` in the home's config.yaml) allows; a pipeline may ask for less.

Every case goes through a real in-memory client; after each refused run the same server still
answers another call.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from mcp_server import create_server
from pipelines.errors import RunLimitError
from pipelines.language.limits import DEFAULT_LIMITS, ServerLimits
from pipelines.storage.runs import RunStore
from skills import SkillContext
from tests.fixtures.run_skills import failed_run, publish, python_skills, text_of
from tests.helpers import envelope

TIMEOUT = 60


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    return python_skills(tmp_path / "skills", "echo", "blob", "hang")


def configure(home: Path, **limits: object) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump({"runs": limits}))


NESTED = """\
id: nested
description: "A million trivial calls: a nested for of 1000 x 1000"
steps:
  - id: outer
    for: {items: "{{ range(1000) | list }}", variable: i, parallel: true, max_parallel: 4}
    steps:
      - id: inner
        for: {items: "{{ range(1000) | list }}", variable: j}
        skill: echo
        parameters: {i: "{{ i }}", j: "{{ j }}"}
"""


async def test_a_registered_nested_loop_is_refused_up_front_when_its_items_cannot_fit_the_step_limit(
    home: Path, skills: Path
) -> None:
    configure(home, max_steps=300)
    what = "stopped at step 'outer': 1,000 items, but only 300 of the run's 300 steps are left"
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        registered = await client.call_tool("register_pipeline", {"yaml": NESTED})
        assert not registered.is_error, text_of(registered)
        with anyio.fail_after(TIMEOUT):
            result = await client.call_tool("nested", {})
        assert result.is_error
        text = text_of(result)
        assert what in text and "(max_steps)" in text
        error = envelope(result)
        assert error["type"] == "limit_exceeded" and error["where"].startswith("step 'outer'")
        assert "config.yaml" in error["hint"]  # where the server's limit is set
        still = await client.call_tool("echo", {"ok": True})
        assert not still.is_error and still.structured_content == {"ok": True}
    [record] = RunStore(home / "state.sqlite").list()
    assert record.status == "failed" and record.failed_step == "outer"
    assert record.error is not None and "(max_steps)" in record.error


async def test_a_pipeline_cannot_raise_a_server_limit_by_asking_for_more(home: Path, skills: Path) -> None:
    configure(home, max_loop_items=10)
    greedy = NESTED.replace('description: "', 'limits: {max_loop_items: 1000000, max_steps: 100000000}\ndescription: "')
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        assert not (await client.call_tool("register_pipeline", {"yaml": greedy})).is_error
        result = await client.call_tool("nested", {})
    assert result.is_error
    text = text_of(result)
    assert "1,000 items, over the limit of 10 per loop (max_loop_items)" in text and "step 'outer'" in text


async def test_a_pipeline_may_ask_for_less_and_is_refused_before_any_item_runs(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    text = textwrap.dedent(
        """\
        id: modest
        limits: {max_loop_items: 3}
        steps:
          - id: each
            for: {items: [1, 2, 3, 4, 5], variable: n}
            skill: echo
            parameters: {n: "{{ n }}"}
        """
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        assert not (await client.call_tool("register_pipeline", {"yaml": text})).is_error
        result = await client.call_tool("modest", {})
    assert result.is_error
    message = text_of(result)
    assert "5 items, over the limit of 3 per loop (max_loop_items)" in message
    assert "the pipeline's `limits: {max_loop_items: ...}`" in message  # who set it
    assert "50,000" in message  # and what the server would allow


async def test_the_data_a_run_stores_is_bounded(home: Path, skills: Path) -> None:
    configure(home, max_state_bytes="20kB")
    text = textwrap.dedent(
        """\
        id: hoard
        steps:
          - id: grow
            for: {items: "{{ range(10) | list }}", variable: n}
            skill: blob
            parameters: {size: 5000}
        """
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        assert not (await client.call_tool("register_pipeline", {"yaml": text})).is_error
        result = await client.call_tool("hoard", {})
    assert result.is_error
    assert "the run's data passed its limit of 20 kB (max_state_bytes)" in text_of(result)
    assert "step 'grow'" in text_of(result)


async def test_a_run_past_its_wall_time_is_stopped_and_names_the_running_step(home: Path, skills: Path) -> None:
    text = textwrap.dedent(
        """\
        id: slow
        timeout: 0.5
        steps:
          - {id: first, skill: echo, parameters: {a: 1}}
          - {id: stuck, skill: hang, parameters: {}}
        """
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        assert not (await client.call_tool("register_pipeline", {"yaml": text})).is_error
        with anyio.fail_after(TIMEOUT):
            result = await client.call_tool("slow", {})
        assert result.is_error
        assert "step 'stuck': the run did not finish within 0.5s (max_wall_time)" in text_of(result)
        assert not (await client.call_tool("echo", {})).is_error
    [record] = RunStore(home / "state.sqlite").list()
    assert record.status == "failed" and record.failed_step == "stuck"


async def test_after_raising_the_limit_the_stopped_run_resumes_and_keeps_its_count(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    configure(home, max_steps=5)
    text = textwrap.dedent(
        """\
        id: counted
        steps:
          - id: each
            for: {items: [1, 2, 3, 4, 5, 6, 7, 8], variable: n}
            steps:
              - {id: call, skill: echo, parameters: {n: "{{ n }}"}}
        outputs:
          ns: "{{ each | map(attribute='call') | map(attribute='n') | list }}"
        """
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        assert not (await client.call_tool("register_pipeline", {"yaml": text})).is_error
        failed = await client.call_tool("counted", {})
        assert failed.is_error and "(max_steps)" in text_of(failed)
        run_id = failed_run(failed)
        configure(home, max_steps=17)  # 8 iterations + 8 calls: 16 steps
        resumed = await client.call_tool("counted", {})  # a new run fits
        assert not resumed.is_error, text_of(resumed)
    service = create_server(home=home, skill_dirs=[skills]).pipelines  # what `orchestrator runs resume` calls
    assert service is not None
    configure(home, max_steps=12)  # the stopped run had spent 5 or so; 16 in all do not fit in 12
    with pytest.raises(RunLimitError, match=r"max_steps") as refused:
        await service.resume(run_id, SkillContext())
    assert refused.value.error_type == "limit_exceeded" and refused.value.limit == "max_steps"
    configure(home, max_steps=16)
    out = await service.resume(run_id, SkillContext())
    assert out["ns"] == [1, 2, 3, 4, 5, 6, 7, 8]
    db = sqlite3.connect(home / "state.sqlite")
    try:  # a succeeded run keeps no checkpoints: its result is in the history
        assert db.execute("SELECT count(*) FROM checkpoints WHERE thread_id=?", (run_id,)).fetchone() == (0,)
    finally:
        db.close()


async def test_the_steps_of_a_pipeline_called_by_a_step_count_towards_the_callers_run(home: Path, skills: Path) -> None:
    configure(home, max_steps=20)
    publish(
        home,
        """
        id: child
        steps:
          - {id: a, skill: echo, parameters: {x: 1}}
          - {id: b, skill: echo, parameters: {x: 2}}
          - {id: c, skill: echo, parameters: {x: 3}}
        """,
    )
    pid = publish(
        home,
        """
        id: parent
        steps:
          - id: each
            for: {items: "{{ range(10) | list }}", variable: n}
            skill: child
            parameters: {}
        """,
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool(pid, {})
    # 10 calls of the child alone fit in 20 steps; with the child's 3 steps each they do not
    assert result.is_error
    assert "the run reached its limit of 20 steps (max_steps)" in text_of(result)
    [parent] = [r for r in RunStore(home / "state.sqlite").list() if r.pipeline == "parent"]
    assert parent.pipeline == "parent" and parent.status == "failed" and parent.failed_step == "each"


def test_the_configuration_page_shows_the_default_limits_and_parses(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    label = "`~/.orchestrator/config.yaml` (these are the defaults; a file without a key keeps its default):"
    match = re.search(re.escape(label) + r"\s*\n+```yaml\n(.*?)```", readme, re.S)
    assert match, "docs/configuration.md has no config.yaml block"
    config = tmp_path / "config.yaml"
    config.write_text(match.group(1))
    assert ServerLimits(config).current() == DEFAULT_LIMITS
    config.write_text("runs:\n  max_steps: 10\n  max_state_bytes: 2kB\n")
    expected = DEFAULT_LIMITS.model_copy(update={"max_steps": 10, "max_state_bytes": 2000})
    assert ServerLimits(config).current() == expected


def test_a_broken_config_is_logged_with_the_file_and_key_and_the_defaults_apply(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("runs:\n  max_stepz: 10\n  max_wall_time: soon\n")
    assert ServerLimits(config).current() == DEFAULT_LIMITS
    [record] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert str(config) in record.getMessage()
    assert "runs.max_stepz" in record.getMessage() and "runs.max_wall_time" in record.getMessage()


async def test_another_client_is_served_while_a_registered_nested_loop_runs_into_its_limit(
    home: Path, skills: Path
) -> None:
    configure(home, max_steps=1200)
    server = create_server(home=home, skill_dirs=[skills])
    running = anyio.Event()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if message and message.startswith("inner: ") and not message.startswith("inner: 0/"):
            running.set()

    outcome: list[CallToolResult] = []
    with anyio.fail_after(TIMEOUT):
        async with Client(server) as attacker, Client(server) as other, anyio.create_task_group() as tg:
            assert not (await attacker.call_tool("register_pipeline", {"yaml": NESTED})).is_error

            async def attack() -> None:
                try:
                    outcome.append(await attacker.call_tool("nested", {}, progress_callback=on_progress))
                finally:
                    running.set()

            tg.start_soon(attack)
            await running.wait()  # inner items are finishing: the loop is under way
            during = await other.call_tool("echo", {"during": True})
            assert not during.is_error and during.structured_content == {"during": True}
            assert not outcome  # it was answered while the loop ran
    [result] = outcome
    # reached while the calls ran, or refused at an item whose inner loop no longer fits
    assert result.is_error and "(max_steps)" in text_of(result) and "1,200 steps" in text_of(result)
    async with Client(server) as after:
        assert (await after.call_tool("echo", {"after": True})).structured_content == {"after": True}


async def test_over_stdio_the_limit_error_reaches_the_client_and_the_server_keeps_serving(
    home: Path, skills: Path
) -> None:
    configure(home, max_steps=300)
    params = StdioServerParameters(
        command=str(Path(sys.executable).parent / "orchestrator"),
        args=["serve", "--home", str(home), "--skills", str(skills)],
        env={**os.environ, "ORCHESTRATOR_HOME": str(home)},
    )
    with anyio.fail_after(TIMEOUT):
        async with Client(params, mode="legacy") as client:
            assert not (await client.call_tool("register_pipeline", {"yaml": NESTED})).is_error
            result = await client.call_tool("nested", {})
            assert result.is_error and "(max_steps)" in text_of(result) and "config.yaml" in text_of(result)
            assert (await client.call_tool("echo", {"still": 1})).structured_content == {"still": 1}


async def test_a_pipelines_limits_are_checked_with_line_column_and_did_you_mean(home: Path, skills: Path) -> None:
    text = "id: lim\nlimits: {max_stepz: 3, max_state_bytes: lots}\nsteps:\n  - {id: a, skill: echo, parameters: {}}\n"
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool("validate_pipeline", {"yaml": text})
    data = result.structured_content
    assert data is not None and data["valid"] is False
    by_place = {(i["line"], i["col"]): i for i in data["issues"]}
    assert "did you mean 'max_steps'?" in by_place[(2, 10)]["hint"]
    assert "'lots' is not a size" in by_place[(2, 41)]["message"]
