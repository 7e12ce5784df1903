"""The error envelope through another SDK's client: the TypeScript SDK 1.x over stdio.

Its `callTool` validates any `structuredContent` against the tool's `outputSchema`, even on an
`isError` result, and throws -32602 when it does not fit; the envelope therefore travels as
structured content only where no output schema binds it (see `mcp_server._results`). The SDK is
installed from the npm registry into a temporary folder; without `npm` (or the registry) the
test is skipped, saying so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ORCHESTRATOR, write_skill

CLIENT = Path(__file__).resolve().parents[1] / "fixtures" / "ts_client.mjs"


@pytest.fixture(scope="module")
def ts_sdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("node/npm are not installed: the TypeScript SDK client cannot run")
    folder = tmp_path_factory.mktemp("ts-sdk")
    (folder / "package.json").write_text('{"name": "ts-check", "private": true, "type": "module"}')
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent", "@modelcontextprotocol/sdk@1"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"npm could not install @modelcontextprotocol/sdk: {done.stderr.strip()[-300:]}")
    return folder


def test_the_typescript_sdk_client_accepts_every_error_envelope(ts_sdk: Path, tmp_path: Path, home: Path) -> None:
    skills = tmp_path / "skills"
    write_skill(
        skills,
        "crash",  # no outputs: its envelope is structured content too
        contract={"run": {"python": "impl:main"}},
        impl="def main():\n    raise ValueError('bad')\n",
    )
    write_skill(
        skills,
        "half",  # outputs: its envelope is text only
        contract={
            "inputs": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            "outputs": {"type": "object", "properties": {"half": {"type": "number"}}, "required": ["half"]},
            "run": {"python": "impl:main"},
        },
        impl="def main(n):\n    return {'half': n / 2} if n else {'half': 'none'}\n",
    )
    calls = [
        ["half", {"n": 4}],
        ["half", {"n": "four"}],  # invalid arguments
        ["half", {"n": 0}],  # a result that breaks the outputs
        ["crash", {}],
        ["nope", {}],  # unknown tool
        ["json-query", {"query": "a", "data": {"a": 1}, "path": "/no/such.json"}],  # a builtin's failure
    ]
    done = subprocess.run(
        ["node", str(CLIENT), str(ts_sdk), str(ORCHESTRATOR), str(home), str(skills), json.dumps(calls)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    assert [o["name"] for o in outcomes] == [c[0] for c in calls]
    thrown = [o for o in outcomes if "thrown" in o]
    assert thrown == [], "the TypeScript client rejected an error result"
    ok, *failed = (o["result"] for o in outcomes)
    assert ok["structuredContent"] == {"half": 2}
    kinds = []
    for result in failed:
        assert result["isError"] is True
        body = json.loads(result["content"][0]["text"])
        kinds.append(body["error"]["type"])
        if "structuredContent" in result:
            assert result["structuredContent"] == body
    assert kinds == ["invalid_arguments", "skill_failed", "skill_failed", "unknown_tool", "skill_failed"]
    assert "structuredContent" in failed[2] and "structuredContent" in failed[3]  # crash, nope: no outputSchema
