"""Wire details of streamable HTTP that SDK clients hide, probed with raw requests.

Handshake era (2025-11-25): a request's SSE stream starts with a priming event (an id, empty
data, `retry:`); a request the client cancels gets no response, and its stream cannot be
resumed; over `--stateless`, a cancellation (a POST of its own) stops the call it names.
2026-07-28: `tasks/result` and `tasks/list` do not exist whatever the task id, and a task
request's `Mcp-Name` header must name its task. The server is the installed console script;
the call that hangs is an imported tool of our fixture upstream, which reports whether it was
cancelled.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2

from tests._http import HANDSHAKE, MCP_HEADERS, TIMEOUT, http_server, initialize
from tests.fixtures.adapter_support import fixture_stdio

MODERN = "2026-07-28"


def _home_with_upstream(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "servers.json").write_text(json.dumps({"mcpServers": {"fx": fixture_stdio()}}))
    return home


def _request(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _cancel(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}


async def _events(response: httpx2.Response) -> AsyncIterator[dict[str, str]]:
    """The SSE events of a response, each as its fields (`id`, `data`, `retry`, `event`)."""
    event: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        event[name] = event[name] + "\n" + value.lstrip(" ") if name in event else value.lstrip(" ")
    if event:
        yield event


async def _tools_ready(http: httpx2.AsyncClient, url: str, headers: dict[str, str], name: str) -> None:
    """Poll tools/list until the imported tool `name` is there (the upstream has connected)."""
    while True:
        listed = await http.post(url, json=_request(90, "tools/list", {}), headers=headers)
        if f'"{name}"' in listed.text:
            return
        await anyio.sleep(0.1)


async def _was_cancelled(http: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> bool:
    asked = _request(91, "tools/call", {"name": "fx_was_cancelled", "arguments": {"timeout": 20}})
    answer = (await http.post(url, json=asked, headers=headers)).text
    data = next(json.loads(line[5:]) for line in answer.splitlines() if line.startswith("data:") and line[5:].strip())
    return data["result"]["structuredContent"]["result"] is True


async def _hang_until_cancelled(
    http: httpx2.AsyncClient, url: str, headers: dict[str, str], request_id: int
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Call fx_hang, cancel it once it waits, and read its stream to the end: its events and
    the priming event (the first)."""
    hang = _request(request_id, "tools/call", {"name": "fx_hang", "arguments": {}, "_meta": {"progressToken": "p"}})
    events: list[dict[str, str]] = []
    async with http.stream("POST", url, json=hang, headers=headers) as stream:
        assert stream.status_code == 200
        async for event in _events(stream):
            events.append(event)
            if "notifications/progress" in event.get("data", ""):  # it waits: cancel it
                sent = await http.post(url, json=_cancel(request_id), headers=headers)
                assert sent.status_code == 202, sent.text
    return events, events[0]


def _answers(events: list[dict[str, str]], request_id: int) -> list[Any]:
    messages = [json.loads(e["data"]) for e in events if e.get("data", "").strip()]
    return [m for m in messages if m.get("id") == request_id and ("result" in m or "error" in m)]


async def test_a_stream_is_primed_and_a_cancelled_request_gets_no_response_and_cannot_be_resumed(home: Path) -> None:
    async with http_server(_home_with_upstream(home)) as served, httpx2.AsyncClient(timeout=TIMEOUT) as http:
        with anyio.fail_after(TIMEOUT):
            opened = await http.post(served.url, json=initialize(), headers=MCP_HEADERS)
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": HANDSHAKE}
            headers = MCP_HEADERS | session
            await http.post(served.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
            await _tools_ready(http, served.url, headers, "fx_hang")
            events, priming = await _hang_until_cancelled(http, served.url, headers, 5)
            stopped = await _was_cancelled(http, served.url, headers)
            again = session | {"accept": "text/event-stream", "last-event-id": priming["id"]}
            resumed = await http.get(served.url, headers=again)
    assert priming["id"] and priming.get("data", "") == "" and int(priming["retry"]) > 0  # resumable, and when to retry
    assert _answers(events, 5) == []  # the stream ended without a response (no -32800)
    assert stopped  # the upstream's call was cancelled too
    assert resumed.status_code == 404 and "send the request again" in resumed.text  # not an empty stream forever


async def test_stateless_a_cancellation_stops_the_call_it_names_and_no_empty_task_list_is_offered(home: Path) -> None:
    async with http_server(_home_with_upstream(home), "--stateless") as served:
        async with httpx2.AsyncClient(timeout=TIMEOUT) as http:
            headers = MCP_HEADERS | {"mcp-protocol-version": HANDSHAKE}
            with anyio.fail_after(TIMEOUT):
                started = await http.post(served.url, json=initialize(), headers=MCP_HEADERS)
                await _tools_ready(http, served.url, headers, "fx_hang")
                events, _ = await _hang_until_cancelled(http, served.url, headers, 7)
                stopped = await _was_cancelled(http, served.url, headers)
    capabilities = next(json.loads(e["data"]) for e in [*_sse(started.text)] if e.get("data", "").strip())
    tasks = capabilities["result"]["capabilities"]["tasks"]
    assert "list" not in tasks and "cancel" in tasks  # tasks/list would only ever show this one request's tasks
    assert _answers(events, 7) == [] and stopped


async def test_2026_removed_task_methods_are_not_found_whatever_the_id_and_mcp_name_must_match(home: Path) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }

    async def post(http: httpx2.AsyncClient, url: str, method: str, params: dict[str, Any], name: str | None) -> Any:
        headers = MCP_HEADERS | {"mcp-protocol-version": MODERN, "mcp-method": method}
        headers |= {"mcp-name": name} if name is not None else {}
        answer = await http.post(url, json=_request(1, method, {**params, "_meta": meta}), headers=headers)
        return answer.json()["error"]

    async with http_server(home) as served, httpx2.AsyncClient(timeout=TIMEOUT) as http:
        with anyio.fail_after(TIMEOUT):
            result = await post(http, served.url, "tasks/result", {"taskId": "no-such-task"}, "no-such-task")
            listed = await post(http, served.url, "tasks/list", {}, None)
            mismatched = await post(http, served.url, "tasks/get", {"taskId": "task-a"}, "task-b")
            unknown = await post(http, served.url, "tasks/get", {"taskId": "task-a"}, "task-a")
    assert (result["code"], listed["code"]) == (-32601, -32601)  # not "unknown task": the method is gone
    assert mismatched["code"] == -32020 and "Mcp-Name" in mismatched["message"]
    assert unknown["code"] == -32602  # a matching header gets to the task lookup


def _sse(text: str) -> list[dict[str, str]]:
    events: list[dict[str, str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(":")
            fields[name] = value.lstrip(" ")
        if fields:
            events.append(fields)
    return events
