"""The run as an MCP App: `ui://orchestrator/run`, named in `_meta.ui.resourceUri` by the tools that start runs.

The app's HTML is read from the server through a real client, then loaded in headless Chromium
inside a small host harness: a page that speaks the host side of the bridge (JSON-RPC over
postMessage) — it answers `ui/initialize`, hands the app a real pipeline tool result, and
answers the app's `tools/call` of `get_run` as a host would forward them to the server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import TextResourceContents

from mcp_server import create_server
from tests._browser import CHROMIUM, chromium
from tests.helpers import write_skill

URI = "ui://orchestrator/run"
HOSTILE = '<script>window.parent.pwned = 1</script>"><img src=x onerror="window.parent.pwned = 2">'


def _pipeline(home: Path) -> None:
    write_skill(home / "skills", "fine", contract={"run": {"python": "impl:fine"}}, impl="def fine():\n    return 1\n")
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    (home / "pipelines" / "quick.yaml").write_text("id: quick\nsteps:\n  - id: only\n    skill: fine\n")


async def test_pipeline_tools_and_long_meta_tools_name_the_run_app_which_the_server_serves(home: Path) -> None:
    _pipeline(home)
    async with Client(create_server(home=home)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        listed = {str(r.uri): r for r in (await client.list_resources()).resources}
        read = await client.read_resource(URI)
    assert (tools["quick"].meta or {})["ui"] == {"resourceUri": URI}
    assert (tools["plan_and_run"].meta or {})["ui"] == {"resourceUri": URI}
    assert tools["fine"].meta is None  # a plain skill's result has no run to show
    assert listed[URI].mime_type == "text/html;profile=mcp-app"
    content = read.contents[0]
    assert isinstance(content, TextResourceContents) and content.mime_type == "text/html;profile=mcp-app"
    assert "ui/initialize" in content.text and "<script src=" not in content.text  # self-contained


HARNESS = """<!doctype html><html><body><iframe id="app" sandbox="allow-scripts allow-same-origin"></iframe>
<script>
window.log = [];
window.answers = ANSWERS;
const frame = document.getElementById("app");
window.addEventListener("message", (event) => {
  if (event.source !== frame.contentWindow) return;
  const m = event.data;
  window.log.push(m);
  const reply = (result) => frame.contentWindow.postMessage({ jsonrpc: "2.0", id: m.id, result }, "*");
  if (m.method === "ui/initialize") {
    const hostInfo = { name: "harness", version: "1" };
    reply({ protocolVersion: "2026-01-26", hostInfo, hostCapabilities: { serverTools: {} }, hostContext: {} });
  } else if (m.method === "ui/notifications/initialized") {
    frame.contentWindow.postMessage({ jsonrpc: "2.0", method: "ui/notifications/tool-result", params: RESULT }, "*");
  } else if (m.method === "tools/call") {
    reply(window.answers.shift());
  }
});
frame.srcdoc = APP;
</script></body></html>"""


def _get_run(run_id: str, status: str, steps: list[dict[str, Any]], outputs: Any = None) -> dict[str, Any]:
    data = {"run_id": run_id, "status": status, "steps": steps, "progress": None}
    if outputs is not None:
        data["outputs"] = outputs
    return {"content": [{"type": "text", "text": json.dumps(data)}], "structuredContent": data, "isError": False}


def _js(value: Any) -> str:
    """A value as a JavaScript literal inside a <script> element (no `<` at all: `</script>` or
    `<!--` in it would change how the HTML parser reads the element)."""
    return json.dumps(value).replace("<", "\\u003c")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")
async def test_the_run_app_shows_the_tool_result_and_follows_the_run_through_the_host_bridge(
    home: Path, tmp_path: Path
) -> None:
    _pipeline(home)
    async with Client(create_server(home=home)) as client:
        app = (await client.read_resource(URI)).contents[0]
        result = await client.call_tool("quick", {})
    assert isinstance(app, TextResourceContents)
    wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    run_id = wire["structuredContent"]["run_id"]
    step = {"path": "only", "status": "running", "duration": None, "usage": None, "error": None}
    answers = [
        _get_run(run_id, "running", [step]),
        _get_run(run_id, "succeeded", [{**step, "status": "succeeded", "duration": 0.25}], {"html": HOSTILE}),
    ]
    page_file = tmp_path / "host.html"
    page_file.write_text(
        HARNESS.replace("ANSWERS", _js(answers)).replace("RESULT", _js(wire)).replace("APP", _js(app.text))
    )
    async with chromium() as browser:
        page = await browser.page()
        await page.goto(page_file.as_uri())
        doc = "document.getElementById('app').contentDocument"
        # the tool result says `succeeded` at once; the second get_run's outputs say it was followed
        shown = f"{doc}.getElementById('outputs').textContent"
        await page.wait_until(f"{doc} && {doc}.body && {shown}.includes('window.parent.pwned')")
        assert await page.evaluate(f"{doc}.body.dataset.status") == "succeeded"
        log = await page.evaluate("window.log")
        steps = await page.evaluate(f"{doc}.querySelector('#steps').innerText")
        outputs = await page.evaluate(f"{doc}.getElementById('outputs').textContent")
        title = await page.evaluate(f"{doc}.getElementById('title').textContent")
        images = await page.evaluate(f"{doc}.querySelectorAll('img, #outputs script').length")
        pwned = await page.evaluate("typeof window.pwned")
    methods = [m.get("method") for m in log]
    assert methods[:2] == ["ui/initialize", "ui/notifications/initialized"]
    calls = [m["params"] for m in log if m.get("method") == "tools/call"]
    assert [c["name"] for c in calls] == ["get_run", "get_run"]  # followed until the run ended
    assert all(c["arguments"]["run_id"] == run_id for c in calls)
    assert run_id in title and "only" in steps and "succeeded" in steps
    assert "<script>window.parent.pwned = 1</script>" in outputs  # text, not markup
    assert images == 0 and pwned == "undefined"
