"""Progress that shows what is happening: what a client and the CLI see while a run is under way.

- through a real client, in both protocol eras: every top-level step says when it starts and
  ends, loops say how many items they have before setting them up, and the progress value never
  goes down (nested loops, parallel items, a resumed run);
- `orchestrator run` without a terminal: one line per event whose `[k/N]` is the step's place,
  finished steps with their duration;
- `orchestrator run` in a terminal (a pty): a step that is not a loop has a row with a running
  clock while it runs and its real duration when done;
- Ctrl-C on a 20,000-item loop ends the command with exit status 130.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from mcp import Client

from mcp_server import create_server
from skills import SkillContext
from tests.fixtures.run_skills import failed_run, publish, python_skills, text_of

ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
TIMEOUT = 120
DISPLAY_VARS = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "COLUMNS", "TERM")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
MOVES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    return python_skills(tmp_path / "skills", "echo", "gate", "hold")


@pytest.fixture
def env(tmp_path: Path, home: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in DISPLAY_VARS}
    return environ | {"ORCHESTRATOR_HOME": str(home), "HOME": str(tmp_path)}


NESTED = """\
id: nested-progress
steps:
  - {id: first, skill: echo, parameters: {x: 0}}
  - id: outer
    for: {items: [1, 2, 3], variable: i}
    steps:
      - id: inner
        for: {items: [a, b], variable: j}
        skill: echo
        parameters: {i: "{{ i }}", j: "{{ j }}"}
  - id: fanned
    for: {items: [1, 2, 3, 4], variable: i, parallel: true, max_parallel: 2}
    steps:
      - id: deep
        for: {items: [x, y, z], variable: j}
        skill: echo
        parameters: {i: "{{ i }}", j: "{{ j }}"}
  - {id: last, skill: echo, parameters: {x: 9}}
"""


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # handshake era, 2026-07-28
async def test_progress_values_never_go_back_and_name_each_step_in_both_eras(
    home: Path, skills: Path, mode: str
) -> None:
    pid = publish(home, NESTED)
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    async with Client(create_server(home=home, skill_dirs=[skills]), mode=mode) as client:  # type: ignore[arg-type]
        result = await client.call_tool(pid, {}, progress_callback=on_progress)
    assert not result.is_error, text_of(result)
    values = [done for done, _, _ in seen]
    assert values == sorted(values), values  # nested loops report inside their top-level step's share
    assert values[-1] == 4 and {total for _, total, _ in seen} == {4}
    messages = [m for _, _, m in seen]
    for step in ("first", "outer", "fanned", "last"):
        assert messages.index(f"{step}: started") < messages.index(f"{step}: done")
    assert messages.index("outer: 0/3 items") < messages.index("inner: 1/2 items") < messages.index("outer: 1/3 items")
    assert messages.index("fanned: 0/4 items") < messages.index("fanned: 4/4 items")


async def test_a_resumed_run_reports_progress_from_the_steps_it_had_finished(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "open"
    pid = publish(
        home,
        f"""\
        id: resumable
        steps:
          - {{id: one, skill: echo, parameters: {{x: 1}}}}
          - {{id: two, skill: echo, parameters: {{x: 2}}}}
          - {{id: check, skill: gate, parameters: {{marker: "{marker}"}}}}
          - {{id: four, skill: echo, parameters: {{x: 4}}}}
        """,
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        failed = await client.call_tool(pid, {})
    assert failed.is_error
    run_id = failed_run(failed)
    marker.write_text("open")
    seen: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, message))

    service = create_server(home=home, skill_dirs=[skills]).pipelines
    assert service is not None
    await service.resume(run_id, SkillContext(progress_fn=on_progress))
    assert seen == [(2, "check: started"), (3, "check: done"), (3, "four: started"), (4, "four: done")]


# -- the CLI ----------------------------------------------------------------------------------------

PLAIN = """\
id: plain-lines
steps:
  - {id: first, skill: echo, parameters: {x: 0}}
  - id: analyses
    for: {items: [1], variable: i, parallel: true}
    steps:
      - {id: analyse, skill: echo, parameters: {i: "{{ i }}"}}
  - id: many
    for: {items: "{{ range(30) | list }}", variable: i}
    skill: echo
    parameters: {i: "{{ i }}"}
"""


def test_without_a_terminal_the_lines_agree_on_which_step_they_are_about(
    env: dict[str, str], tmp_path: Path, skills: Path
) -> None:
    pipeline = tmp_path / "plain.yaml"
    pipeline.write_text(PLAIN)
    done = subprocess.run(
        [str(ORCHESTRATOR), "run", str(pipeline), "--skills", str(skills)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [
        line.removeprefix("orchestrator: ") for line in done.stderr.splitlines() if line.startswith("orchestrator: [")
    ]
    places = {"first": "1/3", "analyses": "2/3", "analyse": "2/3", "many": "3/3"}
    for line in lines:
        where, step = re.match(r"\[(\S+)\] (\w+): ", line).groups()  # type: ignore[union-attr]
        assert where == places[step], line
    assert "[2/3] analyses: 1/1 items" in lines and "[3/3] many: 0/30 items" in lines
    finished = [line for line in lines if ": done (" in line]
    assert [line.split(":")[0] for line in finished] == ["[1/3] first", "[2/3] analyses", "[3/3] many"]
    assert all(re.search(r": done \(\d+\.\ds\)$", line) for line in finished), finished
    assert lines.index("[3/3] many: started") < lines.index("[3/3] many: 0/30 items")


def _rows(raw: str) -> str:
    """Terminal output as text, one row per line (colours dropped, cursor moves become line breaks)."""
    return MOVES.sub("\n", COLOUR.sub("", raw))


def _read_until(fd: int, pattern: re.Pattern[str], seen: list[str], deadline: float) -> str:
    """Read the pty until the text (ANSI stripped) matches `pattern`; everything read goes to `seen`."""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen.append(chunk.decode(errors="replace"))
        text = _rows("".join(seen))
        if pattern.search(text):
            return text
    raise AssertionError(f"{pattern.pattern!r} never appeared in: {_rows(''.join(seen))[-2000:]!r}")


def test_in_a_terminal_a_running_step_has_a_row_with_its_clock_and_its_real_duration_when_done(
    env: dict[str, str], tmp_path: Path, skills: Path
) -> None:
    marker = tmp_path / "release"
    pipeline = tmp_path / "held.yaml"
    pipeline.write_text(
        textwrap.dedent(
            f"""\
            id: held
            steps:
              - {{id: quick, skill: echo, parameters: {{x: 1}}}}
              - {{id: holding, skill: hold, parameters: {{marker: "{marker}"}}}}
              - {{id: after, skill: echo, parameters: {{x: 2}}}}
            """
        )
    )
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [str(ORCHESTRATOR), "run", str(pipeline), "--skills", str(skills)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env | {"TERM": "xterm-256color", "COLUMNS": "100"},
        text=True,
    )
    os.close(slave)
    seen: list[str] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        # the step that is not a loop has a row while it runs, whose clock runs (here up to 0.5s or more)
        _read_until(master, re.compile(r"holding\s[^\n]*\b(0\.[5-9]|[1-9]\d*\.\d)s"), seen, deadline)
        assert proc.poll() is None
        marker.write_text("go")
        out, _ = proc.communicate(timeout=TIMEOUT)
        _read_until(master, re.compile(r"succeeded"), seen, deadline)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 0, _rows("".join(seen))[-2000:]
    assert json.loads(out) == {"quick": {"x": 1}, "holding": {"held": True}, "after": {"x": 2}}
    text = _rows("".join(seen))
    frames = text.split("orchestrator: SUCCESS:")[0]  # the display, before the run's summary line
    last_frame = frames[frames.rindex("3/3") :]  # the display's last frame: every step done
    [row] = [line for line in last_frame.splitlines() if re.match(r"\s*✓\s+holding\s", line)]
    # its real duration, not 0: at least the 0.5s its clock showed while it ran
    assert float(re.findall(r"(\d+\.\d)s", row)[-1]) >= 0.5, row


def test_ctrl_c_on_a_20000_item_loop_exits_130_without_waiting_for_the_fan_out(
    env: dict[str, str], tmp_path: Path, skills: Path
) -> None:
    pipeline = tmp_path / "big.yaml"
    pipeline.write_text(
        textwrap.dedent(
            """\
            id: big
            steps:
              - id: each
                for: {items: "{{ range(20000) | list }}", variable: x, parallel: true}
                skill: echo
                parameters: {x: "{{ x }}"}
            """
        )
    )
    proc = subprocess.Popen(
        [str(ORCHESTRATOR), "run", str(pipeline), "--skills", str(skills)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    watchdog = threading.Timer(TIMEOUT, proc.kill)
    watchdog.start()
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "each: 0/20000 items" in line:  # the setup phase is shown before the first item runs
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        watchdog.cancel()
    assert proc.returncode == 130, "".join(lines) + err
    assert "Traceback" not in err and out == ""
    message = err.strip().splitlines()[-1]
    assert " cancelled " in message and "runs resume" in message
