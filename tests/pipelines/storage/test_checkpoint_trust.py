"""A checkpoint is data, never code: a forged one is refused when the run is resumed, not run.

The attack: whoever can write to state.sqlite (or the shared PostgreSQL) replaces a failed run's
checkpoint with one naming a callable (LangGraph's msgpack extension "module, name, argument":
`os.system("touch MARKER")`) or with a pickle. Resuming the run must fail with our message,
and the marker must not exist. The PostgreSQL checkpointer reads with the same serializer
(`pipelines.storage.checkpoints.serializer`): its forged row is tested in test_scale_trust.py.

Real SQLite, the CLI as the installed console script.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from mcp import Client

from mcp_server import create_server
from tests.fixtures.run_skills import failed_run, publish, python_skills
from tests.helpers import run_cli


class _Touch:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def forged(kind: str, marker: Path) -> tuple[str, bytes]:
    """A checkpoint row's (type, blob) that runs `touch marker` when a permissive reader loads it."""
    if kind == "pickle":
        return "pickle", pickle.dumps(_Touch(marker))
    call = ormsgpack.Ext(0, ormsgpack.packb(["os", "system", f"touch {marker}"]))  # "constructor, one argument"
    return "msgpack", ormsgpack.packb({"v": 4, "id": "forged", "ts": "", "channel_values": {"scope": call}})


@pytest.mark.parametrize("kind", ["msgpack-call", "pickle"])
async def test_a_forged_checkpoint_in_state_sqlite_is_refused_on_resume_not_run(
    home: Path, tmp_path: Path, kind: str
) -> None:
    skills = python_skills(tmp_path / "skills", "echo", "gate")
    gate, marker = tmp_path / "open", tmp_path / "pwned"
    pid = publish(
        home,
        f"""\
        id: gated
        steps:
          - {{id: first, skill: echo, parameters: {{x: 1}}}}
          - {{id: check, skill: gate, parameters: {{marker: "{gate}"}}}}
        """,
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        run_id = failed_run(await client.call_tool(pid, {}))  # failed at the gate: its checkpoints are kept
    gate.write_text("open")
    db = sqlite3.connect(home / "state.sqlite")
    with db:
        db.execute("UPDATE checkpoints SET type=?, checkpoint=? WHERE thread_id=?", (*forged(kind, marker), run_id))
    db.close()

    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    resumed = run_cli("runs", "resume", run_id, "--skills", str(skills), env=env, cwd=tmp_path)

    assert not marker.exists(), "resuming the run loaded the forged checkpoint and ran its command"
    assert resumed.code != 0
    assert "checkpoint" in resumed.err and "refused" in resumed.err, resumed.err
    assert "trust model" in resumed.err  # the hint says where to read why
