"""Skills from the wild: whole repositories searched, nothing dropped without a word.

The corpus (tests/_wild.py) reproduces each shape seen in the public skill collections.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_server import create_server
from tests._wild import EXPECTED, FONT, LONG_DESCRIPTION, build_repo
from tests.helpers import write_skill


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return build_repo(tmp_path)


async def test_a_repository_root_publishes_skills_at_every_depth_and_in_dot_folders(repo: Path) -> None:
    server = create_server(skill_dirs=[repo], builtin=False, pipelines=False)
    async with Client(server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert names == EXPECTED  # node_modules/ and .git/ are not searched


async def test_a_name_two_folders_declare_is_a_warning_naming_both_and_the_winner(
    repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="skills.catalog"):
        server = create_server(skill_dirs=[repo], builtin=False, pipelines=False)
    served = server.catalog.get("pdf")
    assert served.root == repo / "skills/pdf"  # the later folder in path order wins
    clash = [r.getMessage() for r in caplog.records if "'pdf'" in r.getMessage()]
    assert len(clash) == 1
    assert str(repo / "skills/pdf") in clash[0] and str(repo / "document-skills/pdf") in clash[0]
    assert "not served" in clash[0]


def test_skills_list_json_reports_overrides_and_every_skipped_folder_with_its_reason(repo: Path, cli) -> None:
    done = cli("skills", "list", "--skills", str(repo), "--json")
    assert done.code == 0, done.err
    data = done.json()
    assert {
        "name": "pdf",
        "served": f"{repo / 'skills/pdf'} ({repo})",
        "not_served": f"{repo / 'document-skills/pdf'} ({repo})",
    } in data["overrides"]
    # the built-in writing-skills is not replaced here, but any override of a built-in is listed too
    reasons = {Path(p["path"]).name: p["problems"][0]["message"] for p in data["problems"]}
    assert "does not exist" in reasons["dangling"]
    assert "outside the root" in reasons["escape"]
    assert "folder link that leads outside the root" in reasons["elsewhere"]
    assert "warning: skill 'pdf'" in done.err


def test_overriding_a_builtin_skill_is_a_warning_too(tmp_path: Path, cli) -> None:
    mine = write_skill(tmp_path / "mine" / "skills", "writing-skills", description="My own writing-skills.")
    done = cli("skills", "list", "--skills", str(tmp_path / "mine"), "--json")
    override = next(o for o in done.json()["overrides"] if o["name"] == "writing-skills")
    assert str(mine) in override["served"] and "builtin" in override["not_served"]


def test_a_root_that_gives_no_skill_is_a_warning_with_a_hint(tmp_path: Path, cli) -> None:
    empty = tmp_path / "not-skills"
    (empty / "src").mkdir(parents=True)
    (empty / "src" / "README.md").write_text("no skills here")
    done = cli("skills", "list", "--skills", str(empty))
    assert done.code == 0
    assert f"skills root {empty} gave no skill" in done.err and "hint:" in done.err


def test_serve_says_what_each_root_gave(repo: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with caplog.at_level(logging.INFO, logger="skills.catalog"):
        create_server(skill_dirs=[repo, empty], builtin=False, pipelines=False)
    lines = [r for r in caplog.records if r.getMessage().startswith("skills root")]
    assert any(f"skills root {repo}: 9 skill(s), 1 archive(s)" in r.getMessage() for r in lines)
    assert any(r.levelno == logging.WARNING and str(empty) in r.getMessage() for r in lines)


def test_warnings_survive_the_parse_cache(repo: Path, cli) -> None:
    cold = cli("skills", "show", "ahrefs-automation", "--skills", str(repo), "--json")
    warm = cli("skills", "show", "ahrefs-automation", "--skills", str(repo), "--json")
    assert cold.code == warm.code == 0
    assert cold.json()["warnings"] == warm.json()["warnings"]
    assert any("Ahrefs Automation" in w and "folder name" in w for w in warm.json()["warnings"])


async def test_lenient_loading_serves_title_case_names_and_long_descriptions(repo: Path) -> None:
    server = create_server(skill_dirs=[repo], builtin=False, pipelines=False)
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("ahrefs-automation", {"task": "audit"})
    assert tools["claude-api"].description == "Instructions: " + LONG_DESCRIPTION[:1024]
    assert not result.is_error
    assert server.catalog.get("meta-skill").front.metadata == {"tags": '["a", "b"]', "version": "2"}


def test_validate_is_strict_about_what_loading_forgives(repo: Path, cli) -> None:
    done = cli("skills", "validate", str(repo), "--json")
    assert done.code == 2
    report = {Path(f["path"]).name: f for f in done.json()["folders"]}
    assert not report["ahrefs-automation"]["ok"] and not report["claude-api"]["ok"]
    meta = [p for p in report["meta-skill"]["problems"] if p["field"].startswith("metadata")]
    assert {p["field"] for p in meta} == {"metadata.tags", "metadata.version"}
    assert all(p["severity"] == "error" for p in meta)
    assert report["pdf"]["ok"] and report["dot-skill"]["ok"] and report["deep-skill"]["ok"]


async def test_a_skill_md_linked_inside_the_root_is_readable_as_a_resource(repo: Path) -> None:
    server = create_server(skill_dirs=[repo], builtin=False, pipelines=False)
    async with Client(server) as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert "skill://board/SKILL.md" in listed
        read = await client.read_resource("skill://board/SKILL.md")
    assert "Board body." in read.contents[0].text


async def test_hidden_files_are_neither_listed_nor_served_and_binary_files_come_back_whole(repo: Path) -> None:
    server = create_server(skill_dirs=[repo], builtin=False, pipelines=False)
    async with Client(server) as client:
        result = await client.call_tool("pdf", {"task": "x"})
        files = result.structured_content["files"]
        assert "assets/font.ttf" in files and not any(".env" in f for f in files)
        with pytest.raises(MCPError) as refused:
            await client.read_resource("skill://pdf/assets/.env.example")
        font = await client.read_resource("skill://pdf/assets/font.ttf")
    assert refused.value.error.code == -32602 and "hidden" in refused.value.error.message
    import base64

    assert base64.b64decode(font.contents[0].blob) == FONT


def test_a_skill_yaml_without_skill_md_is_reported(tmp_path: Path, cli) -> None:
    broken = tmp_path / "root" / "deep" / "half-skill"
    broken.mkdir(parents=True)
    (broken / "skill.yaml").write_text("run: {python: impl:main}\n")
    done = cli("skills", "list", "--skills", str(tmp_path / "root"), "--json")
    problem = next(p for p in done.json()["problems"] if p["path"] == str(broken))
    assert problem["problems"][0]["message"] == "SKILL.md is missing"


def test_doctor_reports_name_clashes_and_skipped_folders(repo: Path, cli) -> None:
    report = cli("doctor", "--skills", str(repo), "--json").json()["skills"]
    assert [o["name"] for o in report["overrides"]] == ["pdf"]
    assert {Path(p["path"]).name for p in report["not_published"]} >= {"dangling", "escape"}
    text = cli("doctor", "--skills", str(repo)).out
    assert "1 name clash(es)" in text and f"clash 'pdf': {repo / 'skills/pdf'}" in text
