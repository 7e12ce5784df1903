"""`mcp run` / `mcp dev` load mcp_server/server.py: the same loader the Inspector uses."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

REPO = Path(__file__).resolve().parents[2]


async def test_mcp_run_serves_the_catalog_from_the_server_file(home: Path) -> None:
    mcp_cli = Path(sys.executable).parent / "mcp"
    params = StdioServerParameters(
        command=str(mcp_cli),
        args=["run", str(REPO / "mcp_server" / "server.py")],
        env={"ORCHESTRATOR_HOME": str(home), "PATH": os.environ["PATH"]},
        cwd=str(REPO),
    )
    with anyio.fail_after(60):
        async with Client(params, mode="legacy") as client:
            assert client.server_info is not None and client.server_info.name == "orchestrator"
            assert client.server_info.version == version("mcp-orchestrator")
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["list-files"].input_schema["properties"]["directory"]["type"] == "string"
            result = await client.call_tool("list-files", {"directory": str(REPO / "mcp_server"), "pattern": "*.py"})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert any(p.endswith("server.py") for p in result.structured_content["paths"])
