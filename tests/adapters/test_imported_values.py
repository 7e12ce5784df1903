"""What a pipeline step gets from an imported tool that answers with text only.

Many MCP servers return JSON as text without `structuredContent`. In a pipeline such a text,
when it is one JSON value, is that value (`{{ fc.days }}` works); any other text stays a
string. The upstream is our fixture server over stdio (its `say` tool returns the text it is
given, with no structured content); the client is the SDK's in-memory one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import yaml
from mcp import Client

from tests.fixtures.adapter_support import fixture_stdio

PIPELINE = {
    "id": "forecast",
    "description": "Reads a JSON forecast and a plain sentence from a text-only tool",
    "steps": [
        {"id": "fc", "skill": "weather_say", "parameters": {"text": '{"days": [{"high": 21}, {"high": 18}]}'}},
        {"id": "sky", "skill": "weather_say", "parameters": {"text": "sunny, then rain"}},
        {"id": "almost", "skill": "weather_say", "parameters": {"text": '{"days": 3} and more'}},
        {"id": "count", "skill": "weather_say", "parameters": {"text": "42"}},
    ],
    "outputs": {
        "first_high": "{{ fc.days[0].high }}",
        "days": "{{ fc.days | length }}",
        "sky": "{{ sky }}",
        "almost": "{{ almost }}",
        "next": "{{ count + 1 }}",
    },
}


async def test_a_text_only_result_that_is_json_is_that_value_in_a_pipeline(home: Path, tmp_path: Path) -> None:
    from mcp_server import create_server

    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    (home / "pipelines" / "forecast.yaml").write_text(yaml.safe_dump(PIPELINE, sort_keys=False))
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"weather": fixture_stdio(include=["say"])}}))
    server = create_server(home=home, servers=servers, connect_grace=120)
    assert server.servers is not None
    async with server.running(), Client(server) as client:
        with anyio.fail_after(120):
            await server.servers.wait_started()  # connected, and the pipeline verified against its tool
        result = await client.call_tool("forecast", {})
    assert not result.is_error, result
    outputs: dict[str, Any] | None = result.structured_content
    assert outputs is not None
    assert outputs["first_high"] == 21
    assert outputs["days"] == 2
    assert outputs["sky"] == "sunny, then rain"  # not JSON: the text as it came
    assert outputs["almost"] == '{"days": 3} and more'  # JSON and then more: still text
    assert outputs["next"] == 43
