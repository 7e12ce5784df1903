"""Run handles over HTTP and across replicas: two `serve --transport http` processes on one real
PostgreSQL state. A run handed over by replica A is followed (`get_run`, `list_runs`) and
cancelled (`cancel_run`) through replica B by the client that started it, and is "no run" to any
other client. The identity is the bearer token the client sends (the same on every replica).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests import _scale
from tests._http import http_server
from tests._scale import _env
from tests.fixtures.run_skills import python_skills, text_of
from tests.mcp_server.test_run_handles import SLOW, _data, _handle, _until_step

postgres_server, pg_url = _scale.postgres_server, _scale.pg_url  # real servers


@contextlib.asynccontextmanager
async def _bearing(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


async def test_another_replica_follows_and_cancels_a_run_handed_over_by_the_first_and_no_one_else_sees_it(
    tmp_path: Path, pg_url: str
) -> None:
    skills = python_skills(tmp_path / "skills", "echo", "hold", "hang")
    homes = [tmp_path / "replica-a", tmp_path / "replica-b"]
    for home in homes:
        (home / "pipelines").mkdir(parents=True)
        (home / "pipelines" / "slow.yaml").write_text(SLOW)
        (home / "pipelines" / "stuck.yaml").write_text("id: stuck\nsteps:\n  - id: wait\n    skill: hang\n")
    shared = ("--state", pg_url, "--skills", str(skills), "--handle-after", "1")
    mine, theirs = secrets.token_hex(16), secrets.token_hex(16)
    marker = tmp_path / "marker"
    async with (
        http_server(homes[0], *shared, env=_env(homes[0])) as a,
        http_server(homes[1], *shared, env=_env(homes[1])) as b,
        _bearing(a.url, mine, mode="legacy") as via_a,
        _bearing(b.url, mine) as via_b,
        _bearing(b.url, theirs) as other,
    ):
        run_id = await _handle(via_a, "slow", {"marker": str(marker)})
        running = await _until_step(via_b, run_id, "held")
        assert running["status"] == "running"
        assert run_id in [r["run_id"] for r in _data(await via_b.call_tool("list_runs", {}))["runs"]]
        for tool in ("get_run", "cancel_run"):  # another client: as for an unknown id
            refused = await other.call_tool(tool, {"run_id": run_id})
            unknown = await other.call_tool(tool, {"run_id": "0123456789ab"})
            assert refused.is_error and text_of(refused) == text_of(unknown).replace("0123456789ab", run_id)
        assert _data(await other.call_tool("list_runs", {}))["runs"] == []
        marker.touch()
        done = _data(await via_b.call_tool("get_run", {"run_id": run_id, "wait": 60}))
        assert done["status"] == "succeeded" and done["outputs"]["held"] is True

        stuck = await _handle(via_a, "stuck", {})
        await _until_step(via_b, stuck, "wait")
        stopped = _data(await via_b.call_tool("cancel_run", {"run_id": stuck}))
        assert stopped == {"run_id": stuck, "status": "cancelled", "cancelled": True}
        after = _data(await via_a.call_tool("get_run", {"run_id": stuck}))
    assert after["status"] == "cancelled" and [s["status"] for s in after["steps"]] == ["cancelled"]
