"""Helpers for tests: writing skill folders into tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
import yaml

MakeSkill = Callable[..., Path]
E = TypeVar("E", bound=BaseException)


def write_skill(
    parent: Path,
    name: str,
    *,
    description: str | None = None,
    body: str = "Use this skill.\n",
    contract: dict[str, Any] | None = None,
    impl: str | None = None,
    files: dict[str, str] | None = None,
    front: dict[str, Any] | None = None,
) -> Path:
    """Write a skill folder `parent/name` and return it."""
    folder = parent / name
    folder.mkdir(parents=True, exist_ok=True)
    fm = {"name": name, "description": description or f"The {name} skill, for tests."}
    fm.update(front or {})
    (folder / "SKILL.md").write_text(f"---\n{yaml.safe_dump(fm, sort_keys=False)}---\n{body}")
    if contract is not None:
        (folder / "skill.yaml").write_text(yaml.safe_dump(contract, sort_keys=False))
    if impl is not None:
        (folder / "impl.py").write_text(textwrap.dedent(impl))
    for rel, text in (files or {}).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"


# -- other libraries' words, read from them at test time --------------------------------------------
# A dependency's (or Python's) wording is theirs to change: where a test checks that we pass such
# words on, it reads them from the library here, so a release that rewords them cannot fail us.


def schema_says(schema: dict[str, Any], value: Any) -> str:
    """jsonschema's own explanation of the first way `value` breaks `schema`."""
    from jsonschema.validators import validator_for

    return next(validator_for(schema)(schema).iter_errors(value)).message


def raised_by(call: Callable[[], object], kind: type[E]) -> E:
    """The `kind` exception that `call` raises: a library's, to read its words (`str`, `.msg`, ...)."""
    with pytest.raises(kind) as caught:
        call()
    return caught.value


@dataclass
class Run:
    """The outcome of one `orchestrator` command."""

    code: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


def run_cli(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120, allow_traceback: bool = False) -> Run:
    """Run the installed console script; a traceback on stderr fails the test (unless asked for)."""
    done = subprocess.run(
        [str(ORCHESTRATOR), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    assert allow_traceback or "Traceback" not in done.stderr, done.stderr
    return Run(done.returncode, done.stdout, done.stderr)


ENVELOPE_KEYS = {"type", "message", "hint", "retryable", "where"}


def envelope(result: Any, *, report: bool = False) -> dict[str, Any]:
    """The error body of a failed tool result, checked for the SPEC 7 shape.

    The envelope is always the result's JSON text; it is also the structured content unless the
    tool declares an output schema (strict clients validate structured content against it), in
    which case a meta tool may send its failure `report` (fitting that schema) instead. Beside
    `error`, the envelope of a run's failure carries what the run left (`run_id`, its outputs,
    `summary`, `usage`); it is then also the structured content when it fits the schema.
    """
    assert result.is_error, result
    body = json.loads(result.content[0].text)
    assert "error" in body and set(body["error"]) == ENVELOPE_KEYS, body
    error = body["error"]
    assert isinstance(error["retryable"], bool) and all(
        isinstance(error[k], str) for k in ENVELOPE_KEYS - {"retryable"}
    )
    if result.structured_content is not None and not report:
        assert result.structured_content == body
    return error


def holding(marker: str) -> list[int]:
    """Host pids of the live processes whose command line contains `marker`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return found


async def assert_none_left(tmp_path: Path) -> None:
    """Wait (bounded) until no process of this test is left: what it started, and their jails.

    Processes are found by their command line, which holds the test's own tmp_path (pids read
    inside a jail are not the host's). There is no event for "every such process has exited",
    so /proc is polled.
    """
    if not Path("/proc/self/cmdline").is_file():
        pytest.skip("needs /proc to find the processes a skill left")
    with anyio.fail_after(5):
        while holding(str(tmp_path)):
            await anyio.sleep(0.02)
