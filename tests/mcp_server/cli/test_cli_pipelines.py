"""`orchestrator run`, `pipelines` and `runs`, run as the installed console script in a subprocess.

Every run gets a throw-away home (ORCHESTRATOR_HOME under tmp_path) and HOME: nothing here can
touch the real ones. Pipelines are built-in examples or files written into tmp_path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests.helpers import Run, run_cli, schema_says, write_skill

ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
TIMEOUT = 120
# Variables that would switch the progress display to rich's terminal mode (or off colour).
DISPLAY_VARS = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "COLUMNS")

GREETING = """\
id: greeting
description: "Write a greeting into the run's artifacts and count its words"
inputs:
  who: {type: string, description: "Whom to greet"}
  times: {type: integer, default: 2}
steps:
  - id: compose
    skill: write-file
    parameters: {path: greeting.txt, content: "{{ ('hello ' ~ who ~ ' ') * times }}"}
  - id: measure
    skill: text-stats
    parameters: {text: "{{ ('hello ' ~ who ~ ' ') * times }}"}
outputs:
  words: "{{ measure.words }}"
  file: "{{ compose.relative }}"
"""

# Three independent errors and one warning, all past the schema stage so all are reported.
BROKEN = """\
id: broken-one
steps:
  - id: listing
    skill: list-filez
    parameters: {directory: "{{ dirr }}"}
  - id: again
    while: {condition: "{{ loop.index < 3 }}"}
    steps:
      - id: read
        skill: read-file
        parameters: {path: notes.txt, colour: red}
"""

WARNING_ONLY = """\
id: warned
steps:
  - id: again
    while: {condition: "{{ loop.index < 3 }}"}
    steps:
      - {id: check, skill: flaky-check, parameters: {attempt: "{{ loop.index }}"}}
"""


@pytest.fixture
def env(tmp_path: Path, home: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("ORCHESTRATOR_TOKEN", *DISPLAY_VARS)}
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    return environ | {"ORCHESTRATOR_HOME": str(home), "HOME": str(user_home)}


@pytest.fixture
def orchestrator(env: dict[str, str], tmp_path: Path):
    def run(*args: str, extra_env: dict[str, str] | None = None) -> Run:
        return run_cli(*args, env=env | (extra_env or {}), cwd=tmp_path, timeout=TIMEOUT)

    return run


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def issue_lines(text: str, file: Path) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(f"{file}:")]


# -- run -------------------------------------------------------------------------------------------
def test_run_of_an_example_with_json_prints_its_outputs_and_run_id_and_the_run_is_recorded(orchestrator) -> None:
    run = orchestrator("run", "retry-until-success", "--json")
    assert run.code == 0, run.err
    result = run.json()
    assert isinstance(result, dict)
    run_id = result.pop("run_id")
    assert result.pop("summary")["line"] == "SUCCESS: 1/1 steps succeeded, 0 failed, 0 skipped"
    assert result.pop("usage")["calls"] == 0
    assert result == {"succeeded": True, "attempts": 3, "failures": 2}
    assert "[" not in run.err  # --json: no progress lines

    listed = orchestrator("runs", "list", "--json").json()
    assert [(r["run_id"], r["pipeline"], r["status"]) for r in listed["runs"]] == [
        (run_id, "retry-until-success", "succeeded")
    ]
    shown = orchestrator("runs", "show", run_id[:6], "--json").json()
    assert shown["status"] == "succeeded"
    assert shown["inputs"] == {"succeed_at": 3, "max_attempts": 5}
    assert shown["result"]["attempts"] == 3
    assert shown["ended"] is not None and shown["error"] is None


def test_run_of_a_file_shows_progress_on_stderr_and_outputs_on_stdout(orchestrator, tmp_path: Path, home: Path) -> None:
    pipeline = write(tmp_path / "greeting.yaml", GREETING)
    run = orchestrator("run", str(pipeline), "--input", "who=world", "--input", "times=3")
    assert run.code == 0, run.err
    assert json.loads(run.out) == {"words": 6, "file": "greeting.txt"}
    lines = run.err.splitlines()
    assert lines.index("orchestrator: [1/2] compose: started") < lines.index("orchestrator: [2/2] measure: started")
    assert any(line.startswith("orchestrator: [1/2] compose: done (") and line.endswith("s)") for line in lines)
    assert any(line.startswith("orchestrator: [2/2] measure: done (") for line in lines)
    last = run.err.splitlines()[-1]
    assert last.startswith("orchestrator: run ") and " of greeting succeeded; artifacts in " in last
    artifacts = Path(last.split("artifacts in ", 1)[1])
    assert artifacts.parent == home / "pipelines" / "greeting" / "runs"
    assert (artifacts / "greeting.txt").read_text() == "hello world " * 3


def test_run_on_a_terminal_draws_a_live_display_per_step(orchestrator, tmp_path: Path) -> None:
    pipeline = write(tmp_path / "greeting.yaml", GREETING)
    terminal = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "100"}
    run = orchestrator("run", str(pipeline), "--input", "who=you", extra_env=terminal)
    assert run.code == 0, run.err
    assert json.loads(run.out) == {"words": 4, "file": "greeting.txt"}
    assert "\x1b[" in run.err  # drawn by rich, not plain lines
    assert "compose" in run.err and "measure" in run.err
    assert "starting pipeline greeting" in run.err  # log lines printed above the bars


def test_run_of_a_file_with_errors_lists_every_issue_and_exits_2(orchestrator, tmp_path: Path) -> None:
    pipeline = write(tmp_path / "broken.yaml", BROKEN)
    run = orchestrator("run", str(pipeline))
    assert run.code == 2
    issues = issue_lines(run.err, pipeline)
    assert [line.split(": ", 2)[:2] for line in issues] == [
        [f"{pipeline}:4:12", "error"],
        [f"{pipeline}:5:29", "error"],
        [f"{pipeline}:7:5", "warning"],
        [f"{pipeline}:11:39", "error"],
    ], run.err
    assert "list-files" in issues[0] and "dirr" in issues[1] and "colour" in issues[3]
    assert run.err.splitlines()[-1].startswith("orchestrator: error: 3 problem(s)")
    assert run.out == ""


# A schema error (the timeout) beside mistakes verification finds in the rest of the file.
BROKEN_SCHEMA = """\
id: broken-two
steps:
  - id: a
    skill: nope-skill
    parameters: {x: "{{ undefined_var }}"}
  - id: b
    skill: other-nope
    timeout: banana
outputs: {o: "{{ zzz }}"}
"""


def test_run_of_a_file_with_a_schema_error_counts_every_error_it_lists(orchestrator, tmp_path: Path) -> None:
    pipeline = write(tmp_path / "broken.yaml", BROKEN_SCHEMA)
    run = orchestrator("run", str(pipeline))
    assert run.code == 2
    errors = [line for line in issue_lines(run.err, pipeline) if ": error: " in line]
    assert len(errors) == 5, run.err
    assert run.err.splitlines()[-1].startswith(f"orchestrator: error: 5 problem(s) in {pipeline}"), run.err


@pytest.mark.parametrize(
    ("inputs", "message", "named"),
    [
        (
            ["--input", "succeed_at=soon"],
            f"invalid --input for 'retry-until-success': succeed_at: {schema_says({'type': 'integer'}, 'soon')}",
            "succeed_at",
        ),
        (["--input", "colour=red"], "invalid --input for 'retry-until-success':", "colour"),
        (["--input", "succeed_at"], "bad --input 'succeed_at': expected KEY=VALUE", "succeed_at"),
    ],
)
def test_run_with_bad_input_exits_2_naming_the_field(orchestrator, inputs: list[str], message: str, named: str) -> None:
    run = orchestrator("run", "retry-until-success", *inputs)
    assert run.code == 2
    assert run.err.startswith(f"orchestrator: error: {message}"), run.err
    assert named in run.err.split("(hint: ")[0]
    assert "(hint: " in run.err
    assert run.out == ""


def test_run_of_an_unknown_pipeline_exits_2_with_a_suggestion(orchestrator) -> None:
    run = orchestrator("run", "retry-until-succes")
    assert run.code == 2
    assert run.err.startswith("orchestrator: error: no pipeline named 'retry-until-succes'")
    assert "retry-until-success" in run.err


def test_a_failed_run_exits_1_and_resumes_after_the_fix_without_redoing_finished_steps(
    orchestrator, tmp_path: Path, home: Path
) -> None:
    note = tmp_path / "note.txt"
    pipeline = write(
        tmp_path / "read-note.yaml",
        yaml.safe_dump(
            {
                "id": "read-note",
                "steps": [
                    {
                        "id": "stamp",
                        "skill": "write-file",
                        "parameters": {"path": "log.txt", "content": "x", "append": True},
                    },
                    {"id": "read", "skill": "read-file", "parameters": {"path": str(note)}},
                ],
                "outputs": {"lines": "{{ read.lines }}"},
            }
        ),
    )
    failed = orchestrator("run", str(pipeline))
    assert failed.code == 1
    error = failed.err.splitlines()[-1]
    assert error.startswith("orchestrator: error: run ") and "failed at step 'read'" in error
    run_id = error.split()[3]
    assert f"orchestrator runs resume {run_id}" in error

    shown = orchestrator("runs", "show", run_id)
    assert shown.code == 0
    assert "status:      failed" in shown.out and "failed step: read" in shown.out
    assert "log.txt" in shown.out
    assert f"runs resume {run_id}" in shown.err

    note.write_text("one\ntwo\n")
    resumed = orchestrator("runs", "resume", run_id, "--json")
    assert resumed.code == 0, resumed.err
    assert {k: v for k, v in resumed.json().items() if k not in ("summary", "usage")} == {"lines": 2, "run_id": run_id}
    log = home / "pipelines" / "read-note" / "runs" / run_id / "log.txt"
    assert log.read_text() == "x"  # the finished step did not run again

    again = orchestrator("runs", "resume", run_id)
    assert again.code == 2
    assert "already succeeded" in again.err and str(pipeline) in again.err


def test_ctrl_c_cancels_the_run_records_it_and_says_how_to_resume(
    env: dict[str, str], orchestrator, tmp_path: Path, home: Path
) -> None:
    impl = "import anyio\n\nasync def main(ctx):\n    await ctx.info('holding')\n    await anyio.sleep_forever()\n"
    write_skill(home / "skills", "hold", contract={"run": {"python": "impl:main"}}, impl=impl)
    pipeline = write(tmp_path / "hold.yaml", "id: ctrl-c-me\nsteps:\n  - {id: hold, skill: hold, parameters: {}}\n")
    proc = subprocess.Popen(
        [str(ORCHESTRATOR), "run", str(pipeline)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    watchdog = threading.Timer(TIMEOUT, proc.kill)
    watchdog.start()
    try:
        seen = []
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if line.rstrip().endswith("info: holding"):  # the skill is running
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        watchdog.cancel()
    assert seen and seen[-1].rstrip().endswith("info: holding"), seen
    assert proc.returncode == 130, err
    assert "Traceback" not in err and out == ""
    message = err.splitlines()[-1]
    assert message.startswith("orchestrator: error: run ") and " cancelled " in message
    run_id = message.split()[3]
    assert f"orchestrator runs resume {run_id}" in message
    assert orchestrator("runs", "show", run_id, "--json").json()["status"] == "cancelled"


# -- pipelines ---------------------------------------------------------------------------------
def test_pipelines_list_shows_examples_and_home_pipelines_and_reports_broken_files(orchestrator, home: Path) -> None:
    write(home / "pipelines" / "greeting.yaml", GREETING)
    broken = write(home / "pipelines" / "broken-one.yaml", BROKEN)
    run = orchestrator("pipelines", "list")
    assert run.code == 0, run.err
    rows = {line.split()[0]: line.split() for line in run.out.splitlines()}
    assert rows["retry-until-success"][1:4] == ["builtin", "1", "step"]
    assert rows["greeting"][1:4] == ["home", "2", "steps"]
    assert "broken-one" not in rows
    assert "1 pipeline file(s) not published" in run.err
    assert len(issue_lines(run.err, broken)) == 4

    data = orchestrator("pipelines", "list", "--json").json()
    by_id = {p["id"]: p for p in data["pipelines"]}
    assert by_id["code-review"]["source"] == "builtin" and by_id["greeting"]["steps"] == 2
    assert [Path(p["file"]).name for p in data["problems"]] == ["broken-one.yaml"]
    assert [(i["line"], i["col"]) for i in data["problems"][0]["issues"]] == [(4, 12), (5, 29), (7, 5), (11, 39)]


def test_pipelines_show_prints_the_help_text_and_a_command_line(orchestrator) -> None:
    run = orchestrator("pipelines", "show", "retry-until-success")
    assert run.code == 0, run.err
    assert run.out.startswith("# Retry until success (`retry-until-success`)")
    assert "## Inputs" in run.out and "`succeed_at` (integer, default 3)" in run.out
    assert "orchestrator run retry-until-success --input succeed_at=3 --input max_attempts=5" in run.out


def test_pipelines_graph_prints_mermaid_of_an_id_or_a_file(orchestrator, tmp_path: Path) -> None:
    run = orchestrator("pipelines", "graph", str(write(tmp_path / "greeting.yaml", GREETING)))
    assert run.code == 0, run.err
    assert run.out.startswith("flowchart TD")
    assert "compose" in run.out and "measure" in run.out and "-->" in run.out


def test_pipelines_validate_reports_every_issue_and_exits_2_on_errors(orchestrator, tmp_path: Path) -> None:
    pipeline = write(tmp_path / "broken.yaml", BROKEN)
    run = orchestrator("pipelines", "validate", "broken.yaml")
    assert run.code == 2
    lines = run.out.splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == [
        "broken.yaml:4:12",
        "broken.yaml:5:29",
        "broken.yaml:7:5",
        "broken.yaml:11:39",
    ]
    assert all(" (hint: " in line for line in lines)
    assert "3 error(s), 1 warning(s)" in run.err
    assert pipeline.is_file()


def test_pipelines_validate_exits_0_with_warnings_only_and_prints_json(orchestrator, tmp_path: Path) -> None:
    write(tmp_path / "warned.yaml", WARNING_ONLY)
    run = orchestrator("pipelines", "validate", "warned.yaml", "--json")
    assert run.code == 0, run.err
    data = run.json()
    assert data["valid"] is True and data["errors"] == 0 and data["warnings"] == 1
    assert [(i["line"], i["col"], i["severity"]) for i in data["issues"]] == [(4, 5, "warning")]
    assert "max_iterations" in data["issues"][0]["hint"]
