"""Pipeline checks remembered across restarts (`pipelines.checks`): a start whose pipelines,
skills and code did not change answers from `<home>/cache` (no Jinja at start-up), and whatever a
check depends on that did change is checked again, so a pipeline broken by it is still refused."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_server import create_server
from tests.helpers import write_skill

PIPELINE = """\
id: hello
description: Greets someone.
inputs:
  who: {type: string}
steps:
  - id: who
    skill: greet
    parameters: {name: "{{ inputs.who }}"}
"""
"""A pipeline with a warning (the step id `who` is also an input's name) that calls a home skill."""


def _greet(skills: Path, argument: str) -> None:
    contract = {
        "inputs": {
            "type": "object",
            "properties": {argument: {"type": "string"}},
            "required": [argument],
            "additionalProperties": False,
        },
        "outputs": {"type": "object", "properties": {"text": {"type": "string"}}},
        "run": {"python": "impl:greet"},
    }
    write_skill(skills, "greet", contract=contract, impl=f"def greet({argument}):\n    return {{'text': {argument}}}\n")


@pytest.fixture
def home(home: Path) -> Path:
    _greet(home / "skills", "name")
    (home / "pipelines").mkdir(parents=True)
    (home / "pipelines" / "hello.yaml").write_text(PIPELINE)
    return home


_START = textwrap.dedent(
    """
    import json, sys
    import anyio
    from mcp import Client
    from mcp_server import create_server

    async def main():
        server = create_server(home=sys.argv[1])
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
        hello = server.catalog.find("hello")
        print(json.dumps({
            "tools": [t.model_dump(mode="json") for t in tools],
            "warnings": [str(w) for w in getattr(hello, "warnings", [])],
            "jinja": "jinja2" in sys.modules,
        }))

    anyio.run(main)
    """
)


def _start(home: Path) -> dict[str, Any]:
    """A fresh interpreter's server on `home`: its first tool listing, hello's warnings, whether it imported Jinja."""
    done = subprocess.run([sys.executable, "-c", _START, str(home)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_a_restart_lists_the_same_tools_without_checking_unchanged_pipelines_again(home: Path) -> None:
    cold = _start(home)
    warm = _start(home)
    assert cold["jinja"], "the first start checks every pipeline"
    assert not warm["jinja"], "an unchanged home is answered from the cache"
    assert warm["tools"] == cold["tools"]
    assert "hello" in [t["name"] for t in warm["tools"]]
    assert warm["warnings"] == cold["warnings"] != []


async def test_a_pipeline_broken_by_a_changed_skill_is_still_refused_after_a_cached_start(home: Path) -> None:
    server = create_server(home=home)
    assert server.catalog.find("hello") is not None
    _greet(home / "skills", "person")  # `name` is no longer an argument of greet

    server = create_server(home=home)
    assert server.catalog.find("hello") is None
    problems = [str(p.error) for p in server.catalog.problems() if p.path.name == "hello.yaml"]
    assert len(problems) == 1 and "person" in problems[0]
    async with Client(server) as client:
        assert "hello" not in [t.name for t in (await client.list_tools()).tools]

    _greet(home / "skills", "name")  # fixed again: published again, from what the cache kept
    assert create_server(home=home).catalog.find("hello") is not None


def test_a_changed_pipeline_file_is_checked_again(home: Path) -> None:
    create_server(home=home)
    (home / "pipelines" / "hello.yaml").write_text(PIPELINE.replace("skill: greet", "skill: greeet"))
    server = create_server(home=home)
    assert server.catalog.find("hello") is None
    problems = [str(p.error) for p in server.catalog.problems() if p.path.name == "hello.yaml"]
    assert len(problems) == 1 and "greeet" in problems[0] and "greet" in problems[0].replace("greeet", "")


def test_an_unreadable_cache_is_ignored_and_rewritten(home: Path) -> None:
    create_server(home=home)
    cache = next((home / "cache").glob("pipeline-checks*.json"))
    cache.write_text("{not json")
    server = create_server(home=home)
    assert server.catalog.find("hello") is not None
    assert json.loads(cache.read_text())["verified"]


async def test_entries_not_of_the_servers_making_are_checked_again(home: Path) -> None:
    server = create_server(home=home)
    async with Client(server) as client:
        before = [t.model_dump() for t in (await client.list_tools()).tools]
    cache = next((home / "cache").glob("pipeline-checks*.json"))
    data = json.loads(cache.read_text())
    data["verified"] = {key: [["too", "short"]] for key in data["verified"]}
    data["schemas"] = {key: {"type": "string"} for key in data["schemas"]}
    cache.write_text(json.dumps(data))

    server = create_server(home=home)
    assert server.catalog.find("hello") is not None
    async with Client(server) as client:
        assert [t.model_dump() for t in (await client.list_tools()).tools] == before
