"""Fuzz of every tool's arguments through a real in-memory client.

Each example calls one published tool (skills, example pipelines, meta tools) with arguments
drawn from its input schema, well and badly typed, plus unknown keys; `validate_pipeline` and
`register_pipeline` get hostile pipeline text. Every answer must be a tool result (`isError` or
not) or a clean JSON-RPC error, within a bound, without a traceback; and the server answers the
next request. Derandomized (`_fuzz.FUZZ`), so CI runs the same examples every time.

Left out: `shell-command` and `run-tests`, which run programs the fuzzer would name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from mcp_server import OrchestratorServer, create_server
from tests._fuzz import arguments_for, fuzz, pipeline_texts

LEFT_OUT = {"shell-command", "run-tests"}
CALL_WITHIN = 60.0
"""Seconds one fuzzed call may take (the slowest example pipelines take a few)."""


@pytest.fixture
def fuzzed(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[OrchestratorServer, dict[str, Any]]:
    workdir = tmp_path / "work"
    (workdir / "pkg").mkdir(parents=True)
    (workdir / "pkg" / "mod.py").write_text("def f(x):\n    return x + 1\n")
    (workdir / "notes.md").write_text("# notes\n\nsome words here\n")
    monkeypatch.chdir(workdir)  # relative paths the fuzzer draws land here
    server = create_server(home=home)

    async def listed() -> dict[str, Any]:
        async with Client(server) as client:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools if t.name not in LEFT_OUT}

    return server, anyio.run(listed)


async def _call(server: OrchestratorServer, name: str, arguments: dict[str, Any]) -> None:
    async with Client(server) as client:
        with anyio.fail_after(CALL_WITHIN):
            try:
                result = await client.call_tool(name, arguments)
            except MCPError as exc:  # a clean JSON-RPC error is an acceptable answer
                assert "Traceback" not in str(exc)
            else:
                assert isinstance(result, CallToolResult)
                text = " ".join(getattr(c, "text", "") for c in result.content)
                assert "Traceback" not in text, text
                if result.structured_content is not None:
                    json.dumps(result.structured_content)
            assert (await client.list_tools(cache_mode="bypass")).tools  # still serving


@fuzz(150)
@given(data=st.data())
def test_no_arguments_to_any_tool_crash_hang_or_leak_a_traceback(
    fuzzed: tuple[OrchestratorServer, dict[str, Any]], data: st.DataObject
) -> None:
    server, tools = fuzzed
    name = data.draw(st.sampled_from(sorted(tools)), label="tool")
    schema = tools[name] or {}
    if "yaml" in (schema.get("properties") or {}):
        arguments = {"yaml": data.draw(pipeline_texts, label="yaml")}
    else:
        arguments = data.draw(arguments_for(schema), label="arguments")
    anyio.run(_call, server, name, arguments)
