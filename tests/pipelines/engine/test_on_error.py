"""`on_error: continue`: a failed step leaves a failure record that expressions can tell apart.

The record is `{error, step, step_failed: true}`; `{{ x is failed }}` is true for it and for
nothing a skill returns, even a result with its own `error` key. Run through a real in-memory
MCP client with small folder skills written into tmp_path.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from mcp import Client

from mcp_server import create_server
from tests.helpers import envelope, write_skill

OPEN = {"type": "object"}


def _skills(root: Path) -> Path:
    for name, impl in {
        "echo": "def run(**kwargs):\n    return kwargs\n",
        "fail": "def run(message='boom'):\n    raise RuntimeError(message)\n",
        "odd-only": "def run(n):\n    if n % 2 == 0:\n        raise ValueError(f'{n} is even')\n    return {'n': n}\n",
        "own-error": "def run():\n    return {'ok': False, 'error': 'a result, not a failure', 'step': 'x'}\n",
    }.items():
        write_skill(root, name, contract={"inputs": OPEN, "run": {"python": "impl:run"}}, impl=impl)
    return root


async def _run(home: Path, skills: Path, text: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call the pipeline; its outputs. Its steps fail under `on_error: continue`, so the run is
    PARTIAL: an error result whose structured content still holds every output."""
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tolerant.yaml").write_text(textwrap.dedent(text))
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool("tolerant", arguments or {})
    error = envelope(result)
    assert error["type"] == "skill_failed" and "PARTIAL" in error["message"]
    assert result.structured_content is not None
    return result.structured_content


PIPELINE = """\
id: tolerant
inputs:
  message: {type: string, default: "disk on fire"}
steps:
  - id: broken
    skill: fail
    parameters: {message: "{{ message }}"}
    on_error: continue
  - id: real
    skill: own-error
  - id: items
    for: {items: [1, 2, 3, 4], variable: n, parallel: true}
    skill: odd-only
    parameters: {n: "{{ n }}"}
    on_error: continue
  - id: only_after_a_failure
    skill: echo
    condition: "{{ broken is failed }}"
    parameters: {saw: "{{ broken.error }}"}
outputs:
  broken: "{{ broken }}"
  broken_failed: "{{ broken is failed }}"
  real_failed: "{{ real is failed }}"
  real_error: "{{ real.error }}"
  failed_items: "{{ items | select('failed') | map(attribute='error') | list }}"
  good_items: "{{ items | reject('failed') | map(attribute='n') | list }}"
  followed_up: "{{ only_after_a_failure is not none }}"
"""


async def test_a_failed_step_is_recorded_as_a_marked_failure_and_the_run_goes_on(home: Path, tmp_path: Path) -> None:
    out = await _run(home, _skills(tmp_path / "skills"), PIPELINE)
    assert out["broken"]["step"] == "broken" and out["broken"]["step_failed"] is True
    assert "disk on fire" in out["broken"]["error"]
    assert out["broken_failed"] is True
    assert out["followed_up"] is True


async def test_is_failed_tells_a_failure_from_a_result_with_its_own_error_key(home: Path, tmp_path: Path) -> None:
    out = await _run(home, _skills(tmp_path / "skills"), PIPELINE)
    assert out["real_failed"] is False and out["real_error"] == "a result, not a failure"


async def test_is_failed_picks_the_failed_items_of_a_loop(home: Path, tmp_path: Path) -> None:
    out = await _run(home, _skills(tmp_path / "skills"), PIPELINE)
    assert out["good_items"] == [1, 3]
    assert len(out["failed_items"]) == 2
    assert "2 is even" in out["failed_items"][0] and "4 is even" in out["failed_items"][1]


async def test_a_condition_on_is_failed_skips_the_step_when_nothing_failed(home: Path, tmp_path: Path) -> None:
    skills = _skills(tmp_path / "skills")
    write_skill(
        skills, "fail", contract={"inputs": OPEN, "run": {"python": "impl:run"}}, impl="def run(**k):\n    return {}\n"
    )
    out = await _run(home, skills, PIPELINE)
    assert out["broken_failed"] is False and out["followed_up"] is False
