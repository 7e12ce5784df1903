"""Imported tools against real third-party MCP servers from PyPI: mcp-server-time and mcp-server-git.

They run through `uvx` (shipped with the `uv` dependency), which brings each server with its own
SDK from uv's cache; the first run downloads them from PyPI (a session fixture does it once,
with a generous timeout), later runs start offline from the cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, TextContent

from adapters import RemoteSkill
from skills import Catalog, SkillContext
from tests.fixtures.adapter_support import UVX, alive, connected, descendants, running, source_of, uv_env
from tests.helpers import write_skill

FIRST_RUN_TIMEOUT = 300  # seconds for uv to download a server and its dependencies from PyPI


@pytest.fixture(scope="session")
def uvx_servers() -> None:
    """Download both servers into uv's cache once per session (later starts are offline)."""
    env = {**os.environ, **uv_env()}
    for package in ("mcp-server-time", "mcp-server-git"):
        try:
            done = subprocess.run(
                [UVX, package, "--help"], env=env, capture_output=True, text=True, timeout=FIRST_RUN_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"uvx could not fetch {package} from PyPI within {FIRST_RUN_TIMEOUT}s")
        if done.returncode != 0:
            pytest.fail(f"uvx could not run {package}: {done.stderr.strip()[-800:]}")


def time_entry(**extra: Any) -> dict[str, Any]:
    args = ["--offline", "mcp-server-time", "--local-timezone", "UTC"]
    return {"command": UVX, "args": args, "env": uv_env(), **extra}


def git_entry(repo: Path, **extra: Any) -> dict[str, Any]:
    args = ["--offline", "mcp-server-git", "--repository", str(repo)]
    return {"command": UVX, "args": args, "env": uv_env(), **extra}


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "repo"
    path.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    (path / "README.md").write_text("hello\n")
    for command in (["init", "-q", "-b", "main"], ["add", "README.md"], ["commit", "-q", "-m", "first commit"]):
        subprocess.run(["git", *command], cwd=path, env=env, check=True)
    yield path


async def call(catalog: Catalog, name: str, arguments: dict[str, Any]) -> CallToolResult:
    result = await catalog.get(name).run(arguments, SkillContext(skill=name))
    assert isinstance(result, CallToolResult)
    return result


@pytest.mark.usefixtures("uvx_servers")
async def test_time_and_git_tools_are_imported_with_schemas_intact_namespaced_and_filtered(repo: Path) -> None:
    source = source_of(
        {
            "time": time_entry(),
            "vcs": git_entry(
                repo, namespace="git", include=["git_log", "git_status", "git_diff*"], exclude=["git_diff_s*"]
            ),
        },
        connect_timeout=FIRST_RUN_TIMEOUT,
    )
    async with running(source) as catalog:
        await connected(*source.adapters.values(), timeout=FIRST_RUN_TIMEOUT)
        await catalog.refresh([source])
        for adapter, entry in ((source.adapters["time"], time_entry()), (source.adapters["vcs"], git_entry(repo))):
            params = StdioServerParameters(command=entry["command"], args=entry["args"], env=entry["env"])
            async with Client(params) as direct:
                listed = {t.name: t for t in (await direct.list_tools()).tools}
            imported = {s.upstream_name: s for s in adapter.skills()}
            assert set(imported) == {n for n in listed if adapter.config.selects(n)}
            for name, skill in imported.items():
                published = catalog.get(skill.name)
                assert isinstance(published, RemoteSkill)
                assert published.input_schema == listed[name].input_schema
                assert published.output_schema == listed[name].output_schema
                assert published.description == listed[name].description
        time_names = sorted(n for n in catalog.names() if n.startswith("time_"))
        assert time_names == ["time_convert_time", "time_get_current_time"]
        git_names = sorted(n for n in catalog.names() if n.startswith("git_"))
        assert "git_git_log" in git_names and "git_git_status" in git_names and "git_git_diff_unstaged" in git_names
        assert "git_git_diff_staged" not in git_names and "git_git_commit" not in git_names
        assert "git_diff_staged" in source.adapters["vcs"].excluded

        now = await call(catalog, "time_get_current_time", {"timezone": "UTC"})
        assert now.structured_content is not None and now.structured_content["timezone"] == "UTC"
        log = await call(catalog, "git_git_log", {"repo_path": str(repo)})
        assert not log.is_error and "first commit" in "".join(c.text for c in log.content if isinstance(c, TextContent))


@pytest.mark.usefixtures("uvx_servers")
async def test_a_third_party_server_killed_mid_session_comes_back_and_leaves_nothing_behind() -> None:
    before = descendants()
    source = source_of({"time": time_entry()}, backoff=(0.5, 2.0), connect_timeout=FIRST_RUN_TIMEOUT)
    adapter = source.adapters["time"]
    async with running(source) as catalog:
        await connected(adapter, timeout=FIRST_RUN_TIMEOUT)
        await catalog.refresh([source])
        first = descendants() - before
        assert first, "uvx and the server run as our descendants"
        for pid in first:
            with contextlib.suppress(ProcessLookupError):  # a short-lived helper of uvx may be gone already
                os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(10):
            await adapter.wait_for("retrying", "starting")
        await connected(adapter, timeout=60)
        now = await call(catalog, "time_get_current_time", {"timezone": "Europe/Paris"})
        assert now.structured_content is not None and now.structured_content["timezone"] == "Europe/Paris"
        second = descendants() - before
        assert second and not (second & first)
    assert not any(alive(pid) for pid in second)
    assert descendants() - before == set()


@pytest.mark.usefixtures("uvx_servers")
async def test_a_pipeline_mixes_a_folder_skill_and_an_imported_tool(home: Path, tmp_path: Path) -> None:
    from mcp_server import create_server

    write_skill(
        home / "skills",
        "zone-label",
        contract={
            "inputs": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
            "outputs": {"type": "object", "properties": {"label": {"type": "string"}}},
            "run": {"python": "impl:label"},
        },
        impl="def label(zone):\n    return {'label': f'zone {zone.upper()}'}\n",
    )
    pipeline = {
        "id": "what-time",
        "description": "The time in a zone, labelled by a folder skill",
        "inputs": {"zone": {"type": "string", "default": "UTC"}},
        "steps": [
            {"id": "now", "skill": "time_get_current_time", "parameters": {"timezone": "{{ zone }}"}},
            {"id": "tag", "skill": "zone-label", "parameters": {"zone": "{{ now.timezone }}"}},
        ],
        "outputs": {"label": "{{ tag.label }}", "weekday": "{{ now.day_of_week }}"},
    }
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    (home / "pipelines" / "what-time.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))

    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"time": time_entry()}}))
    server = create_server(home=home, servers=servers)
    assert server.pipelines is not None and server.servers is not None
    assert "what-time" not in server.catalog  # its imported step is not there yet
    published = anyio.Event()

    async def on_change(catalog: Catalog) -> None:
        if "what-time" in catalog:
            published.set()

    server.catalog.subscribe(on_change)
    async with server.running(), Client(server) as client:
        with anyio.fail_after(60):  # the server is in uv's cache already
            await published.wait()
        assert "what-time" in {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("what-time", {"zone": "Asia/Tokyo"})
        assert not result.is_error, result
        assert result.structured_content is not None
        assert result.structured_content["label"] == "zone ASIA/TOKYO"
        assert result.structured_content["weekday"] in {
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
            "Sunday",
        }
        direct = await client.call_tool("time_get_current_time", {"timezone": "UTC"})
        assert direct.structured_content is not None and direct.structured_content["timezone"] == "UTC"
