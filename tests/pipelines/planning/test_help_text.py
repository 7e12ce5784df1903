"""Help text (seed 000, 3.2): every published pipeline gets a model-written overview in the
background when the API is available, cached by file hash; `pipelines show` prints it.

The server runs as `serve` runs it (`server.running()`), with a real MCP client attached; the
model is the real `anthropic` SDK against the local Messages-API stand-in, or nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import textwrap
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp_types import ToolListChangedNotification

from mcp_server import create_server
from tests._scripted import Script
from tests._scripted import connect as connect_scripted
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.helpers import run_cli, write_skill

ONE = """\
id: {pid}
description: "Echo a word"
inputs:
  word: {{type: string, default: hello}}
steps:
  - id: said
    skill: echo
    parameters: {{word: "{{{{ word }}}}"}}
outputs:
  word: "{{{{ said.word }}}}"
"""


@pytest.fixture
def skills(tmp_path: Path, home: Path) -> Path:
    root = tmp_path / "skills"
    inputs = {"type": "object", "properties": {"word": {"type": "string"}}}
    write_skill(
        root,
        "echo",
        contract={"inputs": inputs, "run": {"python": "impl:run"}},
        impl="def run(word):\n    return {'word': word}\n",
    )
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    for pid in ("first-echo", "second-echo"):
        (folder / f"{pid}.yaml").write_text(ONE.format(pid=pid))
    return root


def _digest(home: Path, pid: str) -> str:
    return hashlib.sha256((home / "pipelines" / f"{pid}.yaml").read_bytes()).hexdigest()


async def test_every_published_pipeline_gets_an_overview_in_the_background(
    home: Path, skills: Path, stub: AnthropicStub
) -> None:
    stub.reply("Echoes one word back. Give `word`.")
    stub.reply("Echoes one word back. Give `word`.")
    server = create_server(home=home, skill_dirs=[skills], builtin=False)
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ToolListChangedNotification):
            changed.set()

    # The client first, so that it is there to hear tools/list_changed when the overviews are written.
    async with Client(server, mode="legacy", message_handler=on_message) as client, server.running():  # type: ignore[arg-type]
        with anyio.fail_after(30):
            await changed.wait()  # the overviews are written: the descriptions changed
        after = {t.name: t.description for t in (await client.list_tools()).tools}
    assert server.help_writer.written == 2 and stub.pending == 0
    for pid in ("first-echo", "second-echo"):
        assert "Echoes one word back. Give `word`." in (after[pid] or "")
        assert (home / "cache" / f"help-{_digest(home, pid)}.txt").is_file()
    bodies = [r["body"] for r in stub.requests]
    assert all(b["model"] == "claude-sonnet-5-5" and "overview at the top" in b["system"] for b in bodies)

    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    shown = run_cli("pipelines", "show", "first-echo", "--skills", str(skills), env=env, cwd=home)
    assert shown.code == 0 and "Echoes one word back. Give `word`." in shown.out
    as_json = run_cli("pipelines", "show", "first-echo", "--json", "--skills", str(skills), env=env, cwd=home)
    assert as_json.json()["overview"] == "Echoes one word back. Give `word`."  # type: ignore[index]


async def test_a_failed_overview_is_logged_once_and_not_asked_again(
    home: Path, skills: Path, stub: AnthropicStub, caplog: pytest.LogCaptureFixture
) -> None:
    (home / "pipelines" / "second-echo.yaml").unlink()
    stub.fail(status=400, kind="invalid_request_error", message="no")
    third = textwrap.dedent(ONE.format(pid="third-echo"))
    stub.reply("Echoes a third word.")  # register_pipeline's own overview, asked by the call
    server = create_server(home=home, skill_dirs=[skills], builtin=False)
    writer = server.help_writer
    with caplog.at_level(logging.WARNING, logger="pipelines.help"):
        async with server.running(), Client(server) as client:
            with anyio.fail_after(30):
                while writer.passes < 1:  # no event says "the first pass is over" but the writer's own
                    await writer.idle.wait()
            registered = await client.call_tool("register_pipeline", {"yaml": third})
            with anyio.fail_after(30):
                while writer.passes < 2:  # the change woke it: another pass
                    await writer.idle.wait()
    assert registered.structured_content is not None and registered.structured_content["registered"]
    warnings = [r.getMessage() for r in caplog.records if "no help overview" in r.getMessage()]
    assert len(warnings) == 1 and "first-echo" in warnings[0] and "not retried" in warnings[0]
    assert len(stub.requests) == 2 and stub.pending == 0  # the failed one was not asked again
    assert writer.written == 0 and _digest(home, "first-echo") in writer.failed


async def test_without_the_api_no_client_sampling_is_spent_in_the_background(home: Path, skills: Path) -> None:
    script = Script.of()  # a client whose model would answer: it must not be asked
    async with connect_scripted(home, script, skill_dirs=[skills], builtin=False) as session:
        server = session.server
        async with server.running():
            with anyio.fail_after(30):
                await server.help_writer.idle.wait()
            tools = await session.tool_names()
    assert {"first-echo", "second-echo"} <= tools
    assert script.requests == [] and server.help_writer.written == 0
    assert not list((home / "cache").glob("help-*.txt"))
