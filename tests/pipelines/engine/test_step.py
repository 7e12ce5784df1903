"""Step-through (seed 004): pause after each step; continue, stop, re-run; a stopped run resumes.

From the command line in a real pseudo-terminal (the installed console script, answered as a
person would type), and over MCP through a real client whose elicitation callback answers.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from collections import deque
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from mcp_server import create_server
from pipelines.storage.runs import RunStore
from tests.helpers import ORCHESTRATOR, envelope, run_cli, write_skill

PIPELINE = """\
id: three-notes
inputs:
  log: {{type: string, default: "{log}"}}
steps:
  - id: first
    skill: note
    parameters: {{log: "{{{{ log }}}}", label: first}}
  - id: second
    skill: note
    parameters: {{log: "{{{{ log }}}}", label: second}}
  - id: third
    skill: note
    parameters: {{log: "{{{{ log }}}}", label: third}}
outputs:
  last: "{{{{ third.label }}}}"
"""


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    inputs = {"type": "object", "properties": {"log": {"type": "string"}, "label": {"type": "string"}}}
    impl = (
        "from pathlib import Path\n\n"
        "def run(log, label):\n"
        "    with open(log, 'a') as f:\n"
        "        f.write(label + '\\n')\n"
        "    return {'label': label, 'calls': Path(log).read_text().split().count(label)}\n"
    )
    write_skill(root, "note", contract={"inputs": inputs, "run": {"python": "impl:run"}}, impl=impl)
    return root


@pytest.fixture
def pipeline(home: Path, tmp_path: Path) -> tuple[str, Path]:
    log = tmp_path / "notes.log"
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "three-notes.yaml").write_text(PIPELINE.format(log=log))
    return "three-notes", log


class Terminal:
    """The console script in a pseudo-terminal: read what it shows, type answers."""

    def __init__(self, *args: str, env: dict[str, str], cwd: Path) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [str(ORCHESTRATOR), *args], stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True
        )
        os.close(slave)
        self.master = master
        self.seen = ""

    def expect(self, text: str, timeout: float = 60) -> str:
        """Everything shown until `text` appears (polling the terminal with a deadline)."""
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never appeared; the terminal showed:\n{self.seen[-3000:]}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the program ended: its side of the terminal is closed
                    chunk = b""
                assert chunk or text in self.seen, f"ended before {text!r}:\n{self.seen[-3000:]}"
                self.seen += chunk.decode(errors="replace")
        shown, _, self.seen = self.seen.partition(text)
        return shown + text

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def finish(self, timeout: float = 60) -> int:
        try:
            while select.select([self.master], [], [], 0.5)[0] and os.read(self.master, 65536):
                pass
        except OSError:
            pass
        code = self.proc.wait(timeout=timeout)
        os.close(self.master)
        return code


QUESTION = "[r]e-run the step? "


def test_the_command_line_continues_reruns_and_stops_a_run_that_then_resumes_step_by_step(
    home: Path, tmp_path: Path, skills: Path, pipeline: tuple[str, Path]
) -> None:
    pid, log = pipeline
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home), "COLUMNS": "100"}
    term = Terminal("run", pid, "--step", "--skills", str(skills), env=env, cwd=tmp_path)
    shown = term.expect(QUESTION)
    assert "step 1/3 'first' finished" in shown and '"label": "first"' in shown
    term.type("c")
    assert "step 2/3 'second' finished" in term.expect(QUESTION)
    term.type("r")  # the step runs again, and is shown again
    again = term.expect(QUESTION)
    assert "step 2/3 'second' finished" in again and '"calls": 2' in again
    term.type("s")
    stopped = term.expect("continues with the next step")
    assert "stopped after step 'second' (2/3)" in stopped
    assert term.finish() == 130
    assert log.read_text().split() == ["first", "second", "second"]
    records = RunStore(home / "state.sqlite").list()
    assert [r.status for r in records] == ["stopped"]
    run_id = records[0].run_id

    shown = run_cli("runs", "show", run_id, env=env, cwd=tmp_path)
    assert "status:      stopped" in shown.out and f"runs resume {run_id}" in shown.err

    term = Terminal("runs", "resume", run_id, "--step", "--skills", str(skills), env=env, cwd=tmp_path)
    last = term.expect(QUESTION)
    assert "step 3/3 'third' finished" in last and "[c]ontinue (finish the run)" in last
    term.type("")  # Enter: continue
    assert '"last": "third"' in term.expect("succeeded")
    assert term.finish() == 0
    assert log.read_text().split() == ["first", "second", "second", "third"]  # nothing finished ran again
    assert RunStore(home / "state.sqlite").get(run_id).status == "succeeded"  # type: ignore[union-attr]


def test_answers_typed_ahead_are_read_one_per_step_and_the_end_of_input_stops(
    home: Path, tmp_path: Path, skills: Path, pipeline: tuple[str, Path]
) -> None:
    pid, log = pipeline
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    done = subprocess.run(
        [str(ORCHESTRATOR), "run", pid, "--step", "--json", "--skills", str(skills)],
        input="c\nwhat\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 130, done.stderr
    assert "'what' is not an answer: type c, s or r and Enter" in done.stderr
    assert '"status": "stopped"' in done.stdout and '"stopped_after": "second"' in done.stdout
    assert log.read_text().split() == ["first", "second"]


def _answers(*actions: str, seen: list[str]) -> Any:
    queue = deque(actions)

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params.message)
        action = queue.popleft()
        if action == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"action": action})

    return elicit


async def test_over_mcp_a_run_in_step_mode_asks_the_client_after_each_step_and_resumes(
    home: Path, skills: Path, pipeline: tuple[str, Path]
) -> None:
    pid, log = pipeline
    seen: list[str] = []
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(
        server, mode="legacy", elicitation_callback=_answers("continue", "rerun", "stop", seen=seen)
    ) as c:
        stopped = await c.call_tool("run_pipeline", {"pipeline": pid, "step": True})
    data = stopped.structured_content
    assert data is not None and data["status"] == "stopped" and data["stopped_after"] == "second", stopped
    assert "Step 1/3 'first' finished" in seen[0] and '"label": "first"' in seen[0]
    assert "Continue, stop, or re-run it?" in seen[1] and '"calls": 2' in seen[2]
    assert log.read_text().split() == ["first", "second", "second"]
    run_id = data["run_id"]
    assert RunStore(home / "state.sqlite").get(run_id).status == "stopped"  # type: ignore[union-attr]

    seen.clear()
    async with Client(server, mode="legacy", elicitation_callback=_answers("rerun", "continue", seen=seen)) as c:
        resumed = await c.call_tool("run_pipeline", {"resume": run_id, "step": True})
    data = resumed.structured_content
    assert data is not None and data["status"] == "succeeded" and data["result"]["last"] == "third", resumed
    assert len(seen) == 2 and all("Step 3/3 'third'" in m and "to finish the run" in m for m in seen)
    assert log.read_text().split() == ["first", "second", "second", "third", "third"]


async def test_declining_the_question_stops_the_run(home: Path, skills: Path, pipeline: tuple[str, Path]) -> None:
    pid, log = pipeline
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server, mode="legacy", elicitation_callback=_answers("decline", seen=[])) as client:
        result = await client.call_tool("run_pipeline", {"pipeline": pid, "step": True})
    assert result.structured_content is not None and result.structured_content["stopped_after"] == "first"
    assert log.read_text().split() == ["first"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_step_mode_without_elicitation_and_bad_runs_are_clear_errors(
    home: Path, skills: Path, pipeline: tuple[str, Path], mode: str
) -> None:
    pid, log = pipeline
    async with Client(create_server(home=home, skill_dirs=[skills]), mode=mode) as client:
        no_elicitation = await client.call_tool("run_pipeline", {"pipeline": pid, "step": True})
        unknown_run = await client.call_tool("run_pipeline", {"resume": "0123456789ab"})
        unknown_pipeline = await client.call_tool("run_pipeline", {"pipeline": "three-note"})
        both = await client.call_tool("run_pipeline", {"pipeline": pid, "resume": "0123456789ab"})
        plain = await client.call_tool("run_pipeline", {"pipeline": pid})
    error = envelope(no_elicitation)
    assert error["type"] == "invalid_arguments" and error["where"] == "step" and "elicitation" in error["message"]
    assert "orchestrator run ID --step" in error["hint"]
    error = envelope(unknown_run)
    assert error["type"] == "invalid_arguments" and error["where"] == "resume" and "0123456789ab" in error["message"]
    error = envelope(unknown_pipeline)
    assert error["where"] == "pipeline" and "did you mean three-notes?" in error["hint"]
    assert envelope(both)["where"] == "pipeline"
    assert plain.structured_content is not None and plain.structured_content["result"]["last"] == "third"
    assert log.read_text().split() == ["first", "second", "third"]  # only the plain run ran anything


async def test_run_pipeline_runs_as_a_task_but_step_mode_cannot_ask_from_one(
    home: Path, skills: Path, pipeline: tuple[str, Path]
) -> None:
    from tests._tasks_client import TasksExtension, drive, start

    pid, log = pipeline
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server, mode="auto", extensions=[TasksExtension()]) as client:
        plain = await drive(client, (await start(client, "run_pipeline", {"pipeline": pid})).task_id)
        stepped = await drive(client, (await start(client, "run_pipeline", {"pipeline": pid, "step": True})).task_id)
    assert plain.status == "completed" and plain.result is not None
    assert plain.result["structuredContent"]["result"]["last"] == "third"
    assert stepped.result is not None and stepped.result["isError"] is True, stepped
    error = envelope(types.CallToolResult.model_validate(stepped.result))
    assert error["type"] == "invalid_arguments" and error["where"] == "step" and "not as a task" in error["message"]
    assert log.read_text().split() == ["first", "second", "third"]  # the step-mode task ran nothing
