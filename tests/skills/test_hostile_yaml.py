"""Hostile YAML and JSON: nothing a client sends or a file holds takes the server down (issue 9, items 1-2).

Payloads: 50,000 unclosed brackets (libyaml's C composer recursed until SIGSEGV), a 600-byte
billion-laughs alias bomb (the position walk revisited every alias: minutes on the event loop),
recursive aliases, oversized documents, and a pipeline of a megabyte that takes seconds to
verify. In-memory clients here; `test_hostile_stdio.py` repeats them over a real stdio server.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from mcp import Client

from mcp_server import create_server
from skills.core.jsontext import load_json
from skills.core.yamltext import MAX_DEPTH, MAX_TEXT, YAMLError, describe_yaml_error, load_yaml
from tests._attack import DEEP, answered_while, billion_laughs, still_answers
from tests.helpers import raised_by, write_skill


def _issue(result: object) -> dict[str, object]:
    data = result.structured_content  # type: ignore[attr-defined]
    assert data is not None and data.get("issues"), data
    return data["issues"][0]


async def test_a_pipeline_50000_brackets_deep_is_refused_with_its_position(home: Path) -> None:
    server = create_server(home=home)
    async with Client(server) as attacker, Client(server) as bystander:
        for tool in ("validate_pipeline", "register_pipeline"):
            result = await attacker.call_tool(tool, {"yaml": "id: x\nsteps: " + DEEP})
            issue = _issue(result)
            assert (issue["line"], issue["col"]) == (2, 7 + MAX_DEPTH)  # the top-level mapping is the first level
            assert f"nested more than {MAX_DEPTH} levels deep" in str(issue["message"])
            assert "nesting" in str(issue["hint"])
            await still_answers(bystander)
        assert "x" not in {t.name for t in (await bystander.list_tools()).tools}


async def test_a_billion_laughs_pipeline_is_refused_at_once(home: Path) -> None:
    text = billion_laughs()
    assert len(text) < 700
    server = create_server(home=home)
    async with Client(server) as attacker, Client(server) as bystander:
        for tool in ("validate_pipeline", "register_pipeline"):
            issue = _issue(await attacker.call_tool(tool, {"yaml": text}))
            assert "aliases counted as what they repeat" in str(issue["message"])
            assert issue["line"] > 1
            await still_answers(bystander)


async def test_an_alias_inside_its_own_anchor_is_refused_as_recursive(home: Path) -> None:
    async with Client(create_server(home=home)) as client:
        issue = _issue(await client.call_tool("validate_pipeline", {"yaml": "id: x\nsteps: &s [*s]\n"}))
        assert "inside its own anchor" in str(issue["message"]) and (issue["line"], issue["col"]) == (2, 12)


async def test_a_pipeline_text_over_the_size_limit_is_refused_with_a_hint(home: Path) -> None:
    text = "id: big\nsteps: []\n# " + "x" * MAX_TEXT + "\n"
    async with Client(create_server(home=home)) as client:
        issue = _issue(await client.call_tool("validate_pipeline", {"yaml": text}))
        assert f"more than the {MAX_TEXT:,}" in str(issue["message"]) and "small" in str(issue["hint"])


async def test_a_megabyte_pipeline_is_verified_while_other_clients_are_answered(home: Path) -> None:
    steps = "".join(f"  - id: s{i}\n    skill: collect\n    parameters: {{items: [1, 2]}}\n" for i in range(10_000))
    text = "id: big\nsteps:\n" + steps
    server = create_server(home=home)
    async with Client(server) as attacker, Client(server) as bystander:
        result = await answered_while(lambda: attacker.call_tool("validate_pipeline", {"yaml": text}), bystander)
        assert result.structured_content["valid"] is True


def _home_with_poisoned_files(home: Path, payload: str) -> None:
    create_server(home=home)  # installs the home's defaults
    write_skill(home / "skills", "good", contract={"run": {"python": "impl:main"}}, impl="def main():\n    return 1\n")
    front = home / "skills" / "bad-front"
    front.mkdir()
    (front / "SKILL.md").write_text(f"---\nname: bad-front\ndescription: x\nmetadata: {payload}\n---\nbody\n")
    contract = write_skill(home / "skills", "bad-contract")
    (contract / "skill.yaml").write_text(f"inputs: {payload}\n")
    (home / "pipelines" / "bad.yaml").write_text(f"id: bad\nsteps: {payload}\n")
    registry = home / "models" / "registry.yaml"
    registry.write_text(registry.read_text() + f"\nextra: {payload}\n")


@pytest.mark.parametrize("payload", [DEEP, billion_laughs().split("\n", 2)[2].replace("\n", " ")])
async def test_a_home_full_of_poisoned_yaml_loads_the_rest_and_names_each_file(home: Path, payload: str) -> None:
    if not payload.startswith("["):  # the bomb as one flow mapping on the `metadata:` line
        payload = "{" + payload.replace("] ", "], ") + "}"
    _home_with_poisoned_files(home, payload)
    server = create_server(home=home)
    async with Client(server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "good" in names and not {"bad-front", "bad-contract", "bad"} & names
        assert (await client.call_tool("good", {})).is_error is False
    reported = {p.path.name: str(p.error) for p in server.catalog.problems()}
    assert {"bad-front", "bad-contract", "bad.yaml"} <= set(reported)
    for text in reported.values():
        assert "line" in text and ("nested more than" in text or "aliases counted" in text)


def test_servers_json_nested_50000_deep_is_a_json_error_with_its_position() -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        load_json('{"mcpServers": ' + DEEP + "}")
    assert (caught.value.lineno, caught.value.colno) == (1, 15 + MAX_DEPTH)


async def test_a_deep_servers_json_is_reported_and_the_server_serves(home: Path) -> None:
    create_server(home=home)
    (home / "servers.json").write_text('{"mcpServers": ' + DEEP + "}")
    server = create_server(home=home)
    async with Client(server) as client:
        assert "list-files" in {t.name for t in (await client.list_tools()).tools}
    reported = [str(p.error) for p in server.catalog.problems() if p.path.name == "servers.json"]
    assert reported and "line 1, column 115" in reported[0] and "nested more than" in reported[0]


NO_MONTH_13 = str(raised_by(lambda: datetime.date(2001, 13, 45), ValueError))
"""Python's own words for the 13th month, which PyYAML's date conversion raises and we pass on."""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: " + "1" * 5000, "at line 1, column 4: cannot read this value"),
        ("a:\n  when: 2001-13-45", f"at line 2, column 9: cannot read this value: {NO_MONTH_13}"),
        ("- " * (MAX_DEPTH + 1) + "x", f"nested more than {MAX_DEPTH} levels"),
    ],
)
def test_values_yaml_cannot_convert_are_yaml_errors_at_their_position(text: str, expected: str) -> None:
    with pytest.raises(YAMLError) as caught:
        load_yaml(text)
    assert expected in describe_yaml_error(caught.value)


def test_ordinary_documents_within_the_bounds_load_as_before() -> None:
    nested = "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert load_yaml(nested) is not None
    shared = "base: &b {x: 1}\nuse: [*b, *b]\n"
    assert load_yaml(shared) == {"base": {"x": 1}, "use": [{"x": 1}, {"x": 1}]}
