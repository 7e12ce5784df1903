"""Every failed tool call is one error envelope (SPEC 7), in both eras, over memory and stdio."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from anyio.streams.text import TextReceiveStream
from mcp import Client, StdioServerParameters
from pydantic import TypeAdapter, ValidationError

from mcp_server import create_server
from skills import Catalog
from tests.fixtures.adapter_support import fixture_stdio
from tests.helpers import ORCHESTRATOR, envelope, raised_by, write_skill

ERAS = ["auto", "legacy"]
OUTPUTS = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def _skills(root: Path) -> Path:
    write_skill(
        root,
        "adder",
        contract={
            "inputs": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a"],
                "additionalProperties": False,
            },
            "outputs": {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]},
            "run": {"python": "impl:add"},
        },
        impl="def add(a, b=1):\n    return {'sum': a + b}\n",
    )
    write_skill(
        root,
        "crash",
        contract={"run": {"python": "impl:main"}},
        impl="def main():\n    raise KeyError('missing-key')\n",
    )
    write_skill(
        root,
        "slow",
        contract={"run": {"python": "impl:main"}, "timeout": 0.2, "outputs": OUTPUTS},
        impl="import anyio\nasync def main():\n    await anyio.sleep(30)\n",
    )
    write_skill(
        root,
        "gives-up",  # a library inside the skill cancels its own work
        contract={"run": {"python": "impl:main"}},
        impl="import asyncio\nasync def main():\n    raise asyncio.CancelledError()\n",
    )
    write_skill(
        root,
        "odd",  # results JSON cannot carry
        contract={
            "inputs": {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]},
            "run": {"python": "impl:main"},
        },
        impl="""
        import math
        class Thing:
            pass
        def main(kind):
            return {
                "set": {"tags": {1, 2}},
                "bytes": {"raw": b"x"},
                "object": {"thing": Thing()},
                "nan": {"mean": math.nan, "top": [1.0, math.inf], "n": 2},
            }[kind]
        """,
    )
    return root


PY_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/weather/stations.py", line 41, in reading\n'
    "    return READINGS[city]\n"
    "           ~~~~~~~~^^^^^^\n"
    "ValueError: no reading for 'Atlantis'"
)
"""What a server that puts its traceback into its error text sends."""

DEEP: list[Any] = [1]
for _ in range(70):  # deeper than the 64 levels arguments may nest
    DEEP = [DEEP]

CASES: list[tuple[str, dict[str, Any], str, bool, str]] = [
    # tool, arguments, type, retryable, where
    ("adder", {"a": "two"}, "invalid_arguments", False, "a"),
    ("adder", {"a": 1, "c": 3}, "invalid_arguments", False, "c"),
    ("addr", {"a": 1}, "unknown_tool", False, "name"),
    ("crash", {}, "skill_failed", False, "impl.py:2"),
    ("slow", {}, "timeout", True, ""),
    ("gives-up", {}, "cancelled", True, ""),
    ("odd", {"kind": "set"}, "skill_failed", False, "result.tags"),
    ("odd", {"kind": "bytes"}, "skill_failed", False, "result.raw"),
    ("odd", {"kind": "object"}, "skill_failed", False, "result.thing"),
    ("json-query", {"query": "a", "data": DEEP}, "limit_exceeded", False, "data"),
]


@pytest.mark.parametrize("mode", ERAS)
async def test_every_kind_of_failure_is_one_envelope_and_the_server_goes_on(tmp_path: Path, mode: str) -> None:
    server = create_server(skill_dirs=[_skills(tmp_path / "skills")])
    async with Client(server, mode=mode) as client, Client(server, mode=mode) as other:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name, arguments, kind, retryable, where in CASES:
            with anyio.fail_after(20):
                result = await client.call_tool(name, arguments)
            error = envelope(result)
            assert (error["type"], error["retryable"], error["where"]) == (kind, retryable, where), (name, error)
            assert error["message"] and "Traceback" not in result.content[0].text
            declared = tools.get(name) is not None and tools[name].output_schema is not None
            assert (result.structured_content is None) == declared, "structured only where no outputSchema binds it"
            assert (await other.call_tool("adder", {"a": 1})).structured_content == {"sum": 2}


@pytest.mark.parametrize("mode", ERAS)
async def test_call_skill_relays_a_failure_as_the_envelope_in_structured_content_and_bound_tools_keep_theirs(
    tmp_path: Path, mode: str
) -> None:
    server = create_server(skill_dirs=[_skills(tmp_path / "skills")], catalogue="on")
    async with Client(server, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        invalid = await client.call_tool("call_skill", {"name": "adder", "arguments": {"a": "two"}})
        deep = await client.call_tool("call_skill", {"name": "json-query", "arguments": {"query": "a", "data": DEEP}})
        unsearched = await client.call_tool("find_skills", {"limit": 3})
        unknown = await client.call_tool("read_skill", {"name": "addr"})
    assert tools["call_skill"].output_schema is None  # so its failures carry the envelope as structured content
    for result, kind in ((invalid, "invalid_arguments"), (deep, "limit_exceeded")):
        error = envelope(result)
        assert error["type"] == kind and result.structured_content == {"error": error}
    missing = envelope(unsearched)  # find_skills and read_skill declare an outputSchema: the text only
    assert (missing["type"], missing["where"], unsearched.structured_content) == ("invalid_arguments", "query", None)
    assert (envelope(unknown)["type"], unknown.structured_content) == ("unknown_tool", None)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_meta_tool_failure_report_fits_its_output_schema_and_carries_the_envelope(
    home: Path, mode: str
) -> None:
    server = create_server(home=home)  # no model provider: create_skill and plan_and_run cannot start
    async with Client(server, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        results = {
            "create_skill": await client.call_tool("create_skill", {"request": "a skill that greets"}),
            "plan_and_run": await client.call_tool("plan_and_run", {"request": "count the words of a text"}),
            "register_pipeline": await client.call_tool("register_pipeline", {"yaml": "id: a\nsteps: []\n"}),
        }
    for name, result in results.items():
        error = envelope(result, report=True)
        report = result.structured_content
        assert report is not None and report["error"] == error, name
        jsonschema.validate(report, tools[name].output_schema)  # a strict client accepts it
    assert envelope(results["create_skill"], report=True)["type"] == "skill_failed"
    assert results["create_skill"].structured_content["created"] is False  # type: ignore[index]
    assert "no model provider" in results["plan_and_run"].structured_content["issues"][0]  # type: ignore[index]
    assert envelope(results["register_pipeline"], report=True)["type"] == "invalid_arguments"


@pytest.mark.parametrize("mode", ERAS)
async def test_nan_and_infinity_come_back_as_null_with_a_warning(tmp_path: Path, mode: str) -> None:
    server = create_server(skill_dirs=[_skills(tmp_path / "skills")])
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    async with Client(server, mode=mode, logging_callback=on_log, log_level="warning") as client:
        result = await client.call_tool("odd", {"kind": "nan"})
    assert not result.is_error
    assert result.structured_content == {"mean": None, "top": [1.0, None], "n": 2}
    assert json.loads(result.content[0].text) == {"mean": None, "top": [1.0, None], "n": 2}
    [warning] = [entry for entry in logs if entry.level == "warning"]
    assert "NaN or Infinity at result.mean, result.top[1]" in warning.data


@pytest.mark.parametrize("mode", ERAS)
async def test_a_10_mb_argument_is_not_echoed_back_and_others_are_served_meanwhile(tmp_path: Path, mode: str) -> None:
    server = create_server(skill_dirs=[_skills(tmp_path / "skills")])
    huge = "x" * 10_000_000
    answered = anyio.Event()
    async with Client(server, mode=mode) as client, Client(server, mode=mode) as other:

        async def meanwhile() -> None:
            assert (await other.call_tool("adder", {"a": 5})).structured_content == {"sum": 6}
            answered.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(meanwhile)
            with anyio.fail_after(60):
                result = await client.call_tool("adder", {"a": huge})
        await answered.wait()
        assert (await other.call_tool("adder", {"a": 2})).structured_content == {"sum": 3}
    error = envelope(result)
    assert error["type"] == "invalid_arguments"
    assert len(result.content[0].text) < 2_000
    assert "… (10000002 chars)" in error["message"]  # the repr of the value, cut with its length


@pytest.mark.parametrize("mode", ERAS)
async def test_a_failed_pipeline_step_is_named_with_its_line(tmp_path: Path, home: Path, mode: str) -> None:
    pipelines = home / "pipelines"
    pipelines.mkdir(parents=True)
    (pipelines / "breaks.yaml").write_text(
        "id: breaks\nsteps:\n  - id: fine\n    skill: adder\n    parameters: {a: 1}\n  - id: boom\n    skill: crash\n"
    )
    (pipelines / "waits.yaml").write_text("id: waits\nsteps:\n  - id: wait\n    skill: slow\n")
    server = create_server(home=home, skill_dirs=[_skills(tmp_path / "skills")])
    async with Client(server, mode=mode) as client:
        result = await client.call_tool("breaks", {})
        with anyio.fail_after(20):
            waited = await client.call_tool("waits", {})
        registered = await client.call_tool(
            "register_pipeline", {"yaml": "id: nope\nsteps:\n  - id: a\n    skill: nada\n"}
        )
    error = envelope(result)
    assert error["type"] == "skill_failed" and error["where"] == "step 'boom' (breaks.yaml:6)"
    assert "failed at step 'boom'" in error["message"] and "runs resume" in error["hint"]
    late = envelope(waited)  # the step's own kind of failure is the run's
    assert (late["type"], late["retryable"], late["where"]) == ("timeout", True, "step 'wait' (waits.yaml:3)")
    refused = envelope(registered, report=True)
    assert refused["type"] == "invalid_arguments" and refused["where"] == "yaml:4:12"
    assert "unknown skill 'nada'" in refused["message"]
    report = registered.structured_content  # the meta tool's own report, which fits its outputSchema
    assert report is not None and report["registered"] is False and report["issues"][0]["line"] == 4


@pytest.mark.parametrize("mode", ERAS)
async def test_a_failed_imported_tool_is_the_envelope_in_its_own_words_and_a_dead_one_is_not_connected(
    home: Path, mode: str
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "servers.json").write_text(json.dumps({"mcpServers": {"fx": fixture_stdio()}}))
    server = create_server(home=home)
    ready = anyio.Event()

    async def on_change(catalog: Catalog) -> None:
        if "fx_die_loudly" in catalog:
            ready.set()

    server.catalog.subscribe(on_change)
    async with server.running(), Client(server, mode=mode) as client:
        with anyio.fail_after(30):
            await ready.wait()
        pictured = await client.call_tool("fx_boom", {"message": "the station is closed"})
        boxed = await client.call_tool("fx_boom_rich", {})
        schema_bound = await client.call_tool("fx_fail", {"message": "nope"})
        traced = await client.call_tool("fx_fail", {"message": PY_TRACEBACK})
        with anyio.fail_after(10):
            died = await client.call_tool("fx_die_loudly", {})
    said = envelope(pictured)  # no outputSchema: the envelope is the structured content too
    assert pictured.structured_content == {"error": said}
    assert (said["type"], said["message"], said["retryable"]) == ("skill_failed", "the station is closed", False)
    assert said["where"] == "upstream server 'fx'" and "'boom'" in said["hint"]
    assert [c.type for c in pictured.content] == ["text", "image"]  # the upstream's other content follows
    plain = envelope(boxed)  # a rich traceback in ANSI colours: its exception line and its place
    assert plain["message"] == "LookupError: no station for Atlantis"
    assert plain["where"] == "upstream server 'fx': server.py:213 in call_tool"
    assert not any(mark in boxed.content[0].text for mark in ("\x1b", "\u2502", "\u2771", "\u256d"))
    bound = envelope(schema_bound)  # an outputSchema: the envelope travels as the text only
    assert schema_bound.structured_content is None and bound["message"] == "Error executing tool fail: nope"
    python = envelope(traced)  # a Python traceback after words of the server's own: no frames, the place kept
    assert python["message"] == "Error executing tool fail: ValueError: no reading for 'Atlantis'"
    assert python["where"] == "upstream server 'fx': stations.py:41 in reading"
    gone = envelope(died)
    assert (gone["type"], gone["retryable"], gone["where"]) == ("not_connected", True, "upstream server 'fx'")
    assert "LookupError: no station for Atlantis (at server.py:213 in call_tool)" in gone["message"]
    assert not any(mark in died.content[0].text for mark in ("\x1b", "\u2502", "\u2771", "\u256d"))


async def test_over_stdio_failures_are_envelopes_and_a_deep_raw_payload_is_refused_cleanly(
    tmp_path: Path, home: Path
) -> None:
    skills = _skills(tmp_path / "skills")
    params = StdioServerParameters(
        command=str(ORCHESTRATOR), args=["serve", "--home", str(home), "--skills", str(skills)], env={}
    )
    with anyio.fail_after(60):
        async with Client(params, mode="legacy") as client:
            unknown = envelope(await client.call_tool("addr", {}))
            invalid = envelope(await client.call_tool("adder", {"a": "x"}))
            assert (unknown["type"], invalid["type"]) == ("unknown_tool", "invalid_arguments")
    # A client that is not the SDK can send nesting the SDK would refuse to serialize: depth 70
    # passes the transport and meets our bound; depth 5,000 breaks the transport's parser, and
    # the request still gets an answer (not silence) while the server serves the next one.
    messages = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": _init()}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        _deep_call(2, 70),
        _deep_call(3, 5000),
        json.dumps(
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "adder", "arguments": {"a": 1}}}
        ),
    ]
    answers: dict[Any, Any] = {}
    command = [str(ORCHESTRATOR), "serve", "--home", str(home), "--skills", str(skills)]
    with anyio.fail_after(60):
        async with await anyio.open_process(command) as process:
            assert process.stdin is not None and process.stdout is not None
            await process.stdin.send(("\n".join(messages) + "\n").encode())
            pending = ""
            async for chunk in TextReceiveStream(process.stdout):
                *lines, pending = (pending + chunk).split("\n")
                answers.update({a["id"]: a for a in map(json.loads, lines) if "id" in a})
                if {2, 3, 4} <= answers.keys():
                    break
            await process.stdin.aclose()
            await process.wait()
    bounded = json.loads(answers[2]["result"]["content"][0]["text"])["error"]
    assert bounded["type"] == "limit_exceeded" and "64 levels" in bounded["message"]
    # a JSON-RPC parse error: the parser's own reason (read from pydantic here), then our hint
    said = raised_by(lambda: TypeAdapter(Any).validate_json(messages[3]), ValidationError).errors()[0]["msg"]
    assert answers[3]["error"]["code"] == -32700
    assert answers[3]["error"]["message"] == f"{said} (send flatter data: tool arguments may nest at most 64 levels)"
    assert answers[4]["result"]["structuredContent"] == {"sum": 2}


def _deep_call(request_id: int, depth: int) -> str:
    data = "[" * depth + "]" * depth
    params = f'{{"name":"json-query","arguments":{{"query":"a","data":{data}}}}}'
    return f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{params}}}'


def _init() -> dict[str, Any]:
    return {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}


@pytest.mark.parametrize("mode", ERAS)
async def test_an_unexpected_failure_is_an_envelope_without_internals(tmp_path: Path, home: Path, mode: str) -> None:
    root = tmp_path / "skills"
    write_skill(
        root,
        "thing",
        contract={"run": {"python": "impl:main"}},
        impl="class Thing:\n    pass\ndef main():\n    return {'t': Thing()}\n",
    )
    (home / "pipelines").mkdir(parents=True)
    (home / "pipelines" / "things.yaml").write_text("id: things\nsteps:\n  - id: a\n    skill: thing\n")
    server = create_server(home=home, skill_dirs=[root])
    async with Client(server, mode=mode) as client:
        # A step result the run's checkpoints cannot store fails below the pipeline layer: the
        # call still ends in an envelope (internal today), never a traceback or a dropped answer.
        result = await client.call_tool("things", {})
        assert (await client.call_tool("json-query", {"query": "a", "data": {"a": 1}})).structured_content
    error = envelope(result)
    assert error["type"] in ("internal", "skill_failed")
    text = result.content[0].text
    assert ("Traceback" not in text and "msgpack" not in text and "Thing" not in text) or error["type"] != "internal"
