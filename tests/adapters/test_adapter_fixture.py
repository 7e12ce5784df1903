"""Imported tools against an upstream server of ours (tests/fixtures/upstream_server.py).

It does what third-party servers do not: progress, sampling and elicitation in both protocol
eras, an image, isError, a tool that never answers, tools added at runtime, a tool that kills
its own process. Every test runs the real server in a subprocess (stdio, or streamable HTTP
on a loopback port) and goes through the public surface: ServerSource, the Catalog, skills.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import (
    CallToolResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ImageContent,
    TextContent,
)

from adapters import (
    MCPSkillAdapter,
    RemoteSkill,
    UpstreamCallError,
    UpstreamTimeoutError,
    UpstreamToolError,
    UpstreamUnavailableError,
    parse_servers_config,
)
from adapters import test_server as check_server  # (as imported, pytest would collect it as a test)
from skills import TOOL_NAME, Catalog, SkillContext
from tests.fixtures.adapter_support import (
    FIXTURE,
    alive,
    connected,
    descendants,
    fixture_stdio,
    http_fixture,
    running,
    source_of,
)


async def scripted_model(params: CreateMessageRequestParams) -> CreateMessageResult:
    """Our client's model, scripted: it answers with the question upside down."""
    content = params.messages[0].content
    question = content.text if isinstance(content, TextContent) else "?"
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text=question[::-1]), model="script")


async def scripted_user(params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"answer": f"yes to '{params.message}'"})


def text_of(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent), result
    return first.text


async def call(catalog: Catalog, name: str, arguments: dict[str, Any], **ctx: Any) -> CallToolResult:
    result = await catalog.get(name).run(arguments, SkillContext(skill=name, **ctx))
    assert isinstance(result, CallToolResult)
    return result


async def test_tools_are_imported_with_definitions_intact_under_valid_namespaced_names() -> None:
    source = source_of({"fx": fixture_stdio(), "fx.legacy": fixture_stdio("--legacy", namespace="old")})
    params = StdioServerParameters(command=sys.executable, args=[str(FIXTURE), "stdio"])
    async with Client(params) as direct:
        upstream = {t.name: t for t in (await direct.list_tools()).tools}
    async with running(source) as catalog:
        await connected(*source.adapters.values())
        await catalog.refresh([source])
        skills = {s.upstream_name: s for s in source.skills() if isinstance(s, RemoteSkill) and s.server == "fx"}
        assert set(skills) == set(upstream)
        for name, tool in upstream.items():
            skill = skills[name]
            assert catalog.get(skill.name) is skill
            assert TOOL_NAME.match(skill.name)
            assert skill.description == tool.description
            assert skill.input_schema == tool.input_schema
            assert skill.output_schema == tool.output_schema
            want = None if tool.annotations is None else tool.annotations.model_dump(by_alias=True, exclude_none=True)
            assert skill.annotations == want
            assert skill.kind == "remote" and skill.source == "server"
        assert skills["echo"].name == "fx_echo"
        assert skills["echo"].title == "Echo"
        assert skills["echo"].annotations == {"readOnlyHint": True, "idempotentHint": True}
        assert skills["add"].output_schema is not None
        assert skills["odd.name v2"].name == "fx_odd_name_v2"
        long = skills["a_tool_whose_name_is_far_too_long_for_claude_desktop_to_accept_as_it_is"].name
        assert len(long) == 64 and long.startswith("fx_a_tool_whose_name")
        # the other server: its own namespace, the server's instructions as every skill's body
        assert "old_echo" in catalog and "old_ask_model_direct" in catalog
        assert catalog.get("old_echo").body() == "Fixture server for the adapter tests. Call echo first."


async def test_every_content_type_passes_through_unchanged_and_a_failure_is_raised_in_the_upstreams_words() -> None:
    source = source_of({"fx": fixture_stdio()})
    params = StdioServerParameters(command=sys.executable, args=[str(FIXTURE), "stdio"])
    async with running(source) as catalog, Client(params) as direct:
        await connected(source.adapters["fx"])
        await catalog.refresh([source])
        cases: list[tuple[str, dict[str, Any]]] = [
            ("picture", {}),
            ("add", {"a": 2, "b": 3}),
        ]
        for tool, arguments in cases:
            ours = await call(catalog, f"fx_{tool}", arguments)
            theirs = await direct.call_tool(tool, arguments)
            # the upstream's per-hop serverInfo stamp is not relayed; everything else is identical
            assert ours.model_dump(exclude={"meta"}) == theirs.model_dump(exclude={"meta"})
            assert not (ours.meta or {}).get("io.modelcontextprotocol/serverInfo")
        picture = await call(catalog, "fx_picture", {})
        assert isinstance(picture.content[0], ImageContent) and picture.content[0].mime_type == "image/png"
        with pytest.raises(UpstreamToolError) as failed:  # isError: a failure like any skill's
            await call(catalog, "fx_fail", {"message": "nope"})
        theirs = await direct.call_tool("fail", {"message": "nope"})
        assert failed.value.message == text_of(theirs) and failed.value.where == "upstream server 'fx'"
        with pytest.raises(UpstreamToolError) as pictured:
            await call(catalog, "fx_boom", {"message": "it broke"})
        assert pictured.value.message == "it broke" and isinstance(pictured.value.content[0], ImageContent)
        assert (await call(catalog, "fx_add", {"a": 2, "b": 3})).structured_content == {"total": 5}


async def test_upstream_progress_reaches_the_caller() -> None:
    source = source_of({"fx": fixture_stdio()})
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    async with running(source) as catalog:
        await connected(source.adapters["fx"])
        await catalog.refresh([source])
        result = await call(catalog, "fx_count", {"n": 3}, progress_fn=progress)
    assert text_of(result) == "counted to 3"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_sampling_and_elicitation_reach_our_client_in_both_protocol_eras() -> None:
    source = source_of({"new": fixture_stdio(), "old": fixture_stdio("--legacy")})
    extras = {"sampling": scripted_model, "elicitation": scripted_user}
    async with running(source) as catalog:
        await connected(*source.adapters.values())
        await catalog.refresh([source])
        assert source.adapters["new"].protocol_version == "2026-07-28"
        assert source.adapters["old"].protocol_version == "2025-11-25"
        for name in ("new_ask_model", "old_ask_model", "old_ask_model_direct"):
            result = await call(catalog, name, {"question": "stressed"}, extras=dict(extras))
            assert text_of(result) == "model said: desserts", name
        for name in ("new_ask_user", "old_ask_user"):
            result = await call(catalog, name, {"question": "Proceed?"}, extras=dict(extras))
            assert text_of(result) == "user said: yes to 'Proceed?'", name


async def test_sampling_is_refused_cleanly_when_our_client_cannot_sample() -> None:
    source = source_of({"new": fixture_stdio(), "old": fixture_stdio("--legacy")})
    async with running(source) as catalog:
        await connected(*source.adapters.values())
        await catalog.refresh([source])
        for name in ("new_ask_model", "old_ask_model", "old_ask_model_direct"):
            with pytest.raises(UpstreamCallError, match="the client of the orchestrator does not support sampling"):
                await call(catalog, name, {"question": "q"})
        # and the session is unharmed
        assert text_of(await call(catalog, "old_echo", {"text": "still here"})) == "still here"


async def test_an_upstream_that_never_answers_times_out_and_the_call_is_cancelled_upstream() -> None:
    source = source_of({"fx": fixture_stdio(timeout=0.5)})
    async with running(source) as catalog:
        await connected(source.adapters["fx"])
        await catalog.refresh([source])
        with anyio.fail_after(10), pytest.raises(UpstreamTimeoutError, match=r"did not answer within 0\.5s") as err:
            await call(catalog, "fx_hang", {})
        assert 'raise "timeout"' in err.value.hint
        assert (await call(catalog, "fx_was_cancelled", {"timeout": 0.4})).structured_content == {"result": True}


async def test_cancelling_our_call_cancels_the_upstream_call() -> None:
    source = source_of({"fx": fixture_stdio()})
    async with running(source) as catalog:
        await connected(source.adapters["fx"])
        await catalog.refresh([source])
        waiting = anyio.Event()

        async def progress(done: float, total: float | None, message: str | None) -> None:
            waiting.set()  # the upstream is inside the tool now

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: call(catalog, "fx_hang", {}, progress_fn=progress))
                await waiting.wait()
                tg.cancel_scope.cancel()
            result = await call(catalog, "fx_was_cancelled", {"timeout": 10})
        assert result.structured_content == {"result": True}


async def test_an_upstream_killed_mid_session_fails_fast_then_comes_back_with_its_tools() -> None:
    source = source_of({"fx": fixture_stdio()}, backoff=(1.5, 3.0))  # a wide window to observe "retrying"
    adapter = source.adapters["fx"]
    async with running(source) as catalog:
        await connected(adapter)
        await catalog.refresh([source])
        names = sorted(catalog.names())
        first = (await call(catalog, "fx_pid", {})).structured_content
        assert first is not None
        with anyio.fail_after(5), pytest.raises(UpstreamUnavailableError, match="closed the connection during"):
            await call(catalog, "fx_die", {})
        # while it restarts: the tools stay published and a call fails at once, saying why and when
        with anyio.fail_after(5):
            await adapter.wait_for("retrying")
        with anyio.fail_after(0.5), pytest.raises(UpstreamUnavailableError) as err:
            await call(catalog, "fx_echo", {"text": "anyone?"})
        assert "upstream 'fx' is not connected: the server exited" in err.value.message
        assert "retrying in" in err.value.message
        assert sorted(catalog.names()) == names
        await connected(adapter)
        assert text_of(await call(catalog, "fx_echo", {"text": "back"})) == "back"
        second = (await call(catalog, "fx_pid", {})).structured_content
        assert second is not None and second != first
        assert not alive(first["result"])
        assert adapter.status()["restarts"] == 1
        assert sorted(catalog.names()) == names


async def test_upstream_tools_list_changed_is_followed_and_announced_in_both_eras() -> None:
    source = source_of({"new": fixture_stdio(), "old": fixture_stdio("--legacy")})
    catalog = Catalog([source])
    announced: list[int] = []
    grown = anyio.Event()

    async def listener(cat: Catalog) -> None:
        announced.append(cat.version)
        if "new_late" in cat and "old_late" in cat:
            grown.set()

    catalog.subscribe(listener)
    async with running(source, catalog):
        await connected(*source.adapters.values())
        await catalog.refresh([source])
        assert announced, "connecting an upstream announces its tools"
        await call(catalog, "new_grow", {"name": "late"})
        await call(catalog, "old_grow", {"name": "late"})
        with anyio.fail_after(10):
            await grown.wait()
        assert text_of(await call(catalog, "new_late", {})) == "grown"
        assert text_of(await call(catalog, "old_late", {})) == "grown"


async def test_a_stdio_server_gets_exactly_the_environment_its_config_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_TEST_SECRET", "must-not-leak")
    source = source_of({"fx": fixture_stdio(env={"GIVEN": "yes"})})
    async with running(source) as catalog:
        await connected(source.adapters["fx"])
        await catalog.refresh([source])

        async def env(name: str) -> str:
            return text_of(await call(catalog, "fx_env", {"name": name}))

        assert await env("GIVEN") == "yes"
        assert await env("ORCHESTRATOR_TEST_SECRET") == "<unset>"
        assert await env("ORCHESTRATOR_HOME") == "<unset>"
        assert await env("PATH") != "<unset>"


async def test_no_child_process_is_left_after_shutdown() -> None:
    before = descendants()
    source = source_of({"a": fixture_stdio(), "b": fixture_stdio("--legacy")})
    async with running(source) as catalog:
        await connected(*source.adapters.values())
        await catalog.refresh([source])
        pids = [(await call(catalog, f"{n}_pid", {})).structured_content for n in ("a", "b")]
        children = descendants() - before
        assert {p["result"] for p in pids if p} <= children
    assert not any(alive(pid) for pid in children)
    assert descendants() - before == set()
    assert {a.state for a in source.adapters.values()} == {"closed"}


async def test_a_broken_entry_is_reported_and_the_other_upstreams_still_serve() -> None:
    source = source_of(
        {
            "good": fixture_stdio(),
            "broken": {"args": ["--nothing-to-run"]},
            "missing": {"command": "/nonexistent/mcp-server"},
            "crashing": {"command": sys.executable, "args": ["-c", "import sys; sys.exit('cannot start: no token')"]},
        }
    )
    assert [p.error.problems[0].field for p in source.problems()] == ["mcpServers.broken"]
    async with running(source) as catalog:
        with anyio.fail_after(30):
            await source.adapters["good"].wait_for("connected")
            await source.adapters["missing"].wait_for("retrying")
            await source.adapters["crashing"].wait_for("retrying")
        await catalog.refresh([source])
        assert text_of(await call(catalog, "good_echo", {"text": "fine"})) == "fine"
        rows = {row["name"]: row for row in source.status()}
        assert rows["good"]["state"] == "connected" and rows["good"]["tools"] > 10
        assert rows["missing"]["last_error"] == "command not found: /nonexistent/mcp-server"
        assert "cannot start: no token" in rows["crashing"]["last_error"]
        assert rows["broken"]["state"] == "invalid" and "neither `command` nor `url`" in rows["broken"]["last_error"]
        assert not [n for n in catalog.names() if not n.startswith("good_")]


async def test_start_up_never_waits_for_a_slow_upstream() -> None:
    silent = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}  # never answers initialize
    source = source_of({"silent": silent, "fx": fixture_stdio()}, connect_timeout=5)
    async with running(source) as catalog:
        await connected(source.adapters["fx"])
        assert source.adapters["silent"].state == "starting"
        await catalog.refresh([source])
        assert "fx_echo" in catalog
        with anyio.fail_after(10):
            await source.adapters["silent"].wait_for("retrying")
        assert "no answer to initialize" in (source.adapters["silent"].last_error or "")


async def test_a_streamable_http_upstream_with_headers() -> None:
    with http_fixture() as server:
        source = source_of({"web": {"url": server.url, "headers": {"X-Api-Key": "k-123"}}})
        async with running(source) as catalog:
            await connected(source.adapters["web"])
            await catalog.refresh([source])
            assert text_of(await call(catalog, "web_header", {"name": "X-Api-Key"})) == "k-123"
            seen: list[float] = []

            async def progress(done: float, total: float | None, message: str | None) -> None:
                seen.append(done)

            await call(catalog, "web_count", {"n": 2}, progress_fn=progress)
            assert seen == [1, 2]
            result = await call(catalog, "web_ask_model", {"question": "live"}, extras={"sampling": scripted_model})
            assert text_of(result) == "model said: evil"


async def test_an_http_upstream_that_goes_away_fails_fast_and_is_reconnected_when_back() -> None:
    with http_fixture() as first:
        port = first.port
        source = source_of({"web": {"url": first.url}}, backoff=(0.2, 0.5))
        adapter = source.adapters["web"]
        async with running(source) as catalog:
            await connected(adapter)
            await catalog.refresh([source])
            assert text_of(await call(catalog, "web_echo", {"text": "one"})) == "one"
            first.process.kill()
            first.process.wait()
            with anyio.fail_after(5), pytest.raises(UpstreamUnavailableError):
                await call(catalog, "web_echo", {"text": "two"})
            with anyio.fail_after(10):
                await adapter.wait_for("retrying")
            with http_fixture(port=port):
                await connected(adapter)
                assert text_of(await call(catalog, "web_echo", {"text": "three"})) == "three"


async def test_through_our_server_an_imported_tool_is_listed_called_and_reports_progress(home: Path) -> None:
    from mcp_server import create_server

    before = descendants()
    home.mkdir(parents=True, exist_ok=True)
    (home / "servers.json").write_text(json.dumps({"mcpServers": {"fx": fixture_stdio()}}))
    server = create_server(home=home)  # the home's servers.json, as `orchestrator serve` reads it
    announced = anyio.Event()

    async def on_change(catalog: Catalog) -> None:
        if "fx_count" in catalog:
            announced.set()

    server.catalog.subscribe(on_change)
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with server.running(), Client(server) as client:
        with anyio.fail_after(30):
            await announced.wait()
        listed = {t.name: t for t in (await client.list_tools()).tools}
        params = StdioServerParameters(command=sys.executable, args=[str(FIXTURE), "stdio"])
        async with Client(params) as direct:
            upstream = {t.name: t for t in (await direct.list_tools()).tools}
            theirs = await direct.call_tool("picture", {})
        for name in ("echo", "add", "count", "picture"):
            assert listed[f"fx_{name}"].input_schema == upstream[name].input_schema
            assert listed[f"fx_{name}"].output_schema == upstream[name].output_schema
            assert listed[f"fx_{name}"].annotations == upstream[name].annotations
        result = await client.call_tool("fx_count", {"n": 2}, progress_callback=progress)
        assert text_of(result) == "counted to 2"
        assert seen == [(1, 2, "step 1"), (2, 2, "step 2")]
        picture = await client.call_tool("fx_picture", {})
        assert picture.content == theirs.content
        failed = await client.call_tool("fx_fail", {"message": "nope"})
        assert failed.is_error and "nope" in text_of(failed)
        invalid = await client.call_tool("fx_echo", {"text": 5})  # our server checks the upstream's schema
        assert invalid.is_error and "text" in text_of(invalid)
    assert descendants() - before == set()


async def test_one_adapter_on_its_own_connects_lists_calls_and_closes() -> None:
    (config,), _ = parse_servers_config({"mcpServers": {"solo": fixture_stdio(include=["echo", "pid"])}})
    async with MCPSkillAdapter(config) as adapter:
        with anyio.fail_after(30):
            await adapter.wait_for("connected")
        assert [s.name for s in adapter.skills()] == ["solo_echo", "solo_pid"]
        assert adapter.status()["excluded"] > 0 and adapter.status()["server"] == {"name": "fixture", "version": "1.0"}
        echo = adapter.skills()[0]
        assert text_of(await echo.run({"text": "hi"}, SkillContext())) == "hi"
        pid = (await adapter.skills()[1].run({}, SkillContext())).structured_content
        assert pid is not None and alive(pid["result"])
    assert adapter.state == "closed" and not alive(pid["result"])
    with pytest.raises(UpstreamUnavailableError, match=r"not connected: not running \(closed\)"):
        await echo.run({"text": "hi"}, SkillContext())


async def test_servers_test_reports_a_working_and_a_broken_server() -> None:
    configs, _ = parse_servers_config(
        {
            "mcpServers": {
                "fx": fixture_stdio(exclude=["die"]),
                "gone": {"command": sys.executable, "args": ["-c", "raise SystemExit('no API key given')"]},
            }
        }
    )
    before = descendants()
    good = await check_server(configs[0], timeout=30)
    bad = await check_server(configs[1], timeout=30)
    assert descendants() - before == set()
    assert good["ok"] and good["error"] is None and good["protocol_version"] == "2026-07-28"
    assert {"name": "fx_echo", "upstream": "echo", "description": "Return the text unchanged."} in good["tools"]
    assert good["excluded"] == ["die"] and good["instructions"].startswith("Fixture server")
    assert not bad["ok"] and "no API key given" in bad["error"] and bad["tools"] == []


async def test_a_disabled_server_is_not_started() -> None:
    before = descendants()
    source = source_of({"off": fixture_stdio(enabled=False), "on": fixture_stdio(include=["echo"])})
    async with running(source) as catalog:
        await connected(source.adapters["on"])
        await catalog.refresh([source])
        assert source.adapters["off"].state == "disabled"
        assert catalog.names() == ["on_echo"]
        assert len(descendants() - before) == 1
        assert {r["name"]: r["state"] for r in source.status()} == {"off": "disabled", "on": "connected"}


async def test_an_sse_upstream() -> None:
    with http_fixture(sse=True) as server:
        source = source_of({"old-web": {"type": "sse", "url": server.url}})
        async with running(source) as catalog:
            await connected(source.adapters["old-web"])
            await catalog.refresh([source])
            assert text_of(await call(catalog, "old-web_echo", {"text": "over sse"})) == "over sse"


async def test_an_imported_tool_reaches_the_model_and_the_person_of_a_handshake_era_client(tmp_path: Path) -> None:
    """End to end: an MCP client calls imported tools whose upstream samples and elicits; the
    upstream's requests reach that client mid-call and its answers reach the upstream. (A
    2026-07-28 client, which is asked through input rounds, is not reached this way yet.)"""
    from mcp_server import create_server

    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"fx": fixture_stdio(include=["ask_model", "ask_user"])}}))
    server = create_server(home=tmp_path / "home", servers=servers, connect_grace=120)
    assert server.servers is not None

    async def model(context: Any, params: CreateMessageRequestParams) -> CreateMessageResult:
        return await scripted_model(params)

    async def person(context: Any, params: ElicitRequestParams) -> ElicitResult:
        return await scripted_user(params)

    async with (
        server.running(),
        Client(server, mode="legacy", sampling_callback=model, elicitation_callback=person) as client,  # type: ignore[arg-type]
    ):
        with anyio.fail_after(120):
            await server.servers.wait_started()
        asked = await client.call_tool("fx_ask_model", {"question": "stressed"})
        assert not asked.is_error and text_of(asked) == "model said: desserts", asked
        answered = await client.call_tool("fx_ask_user", {"question": "Proceed?"})
        assert not answered.is_error and text_of(answered) == "user said: yes to 'Proceed?'", answered
