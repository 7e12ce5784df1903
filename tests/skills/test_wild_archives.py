"""Skill archives (.zip, .skill): served like folders, and refused with a reason when hostile."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from mcp import Client

from mcp_server import create_server
from tests._wild import skill_md, skill_zip


def _problems(server) -> dict[str, str]:
    return {p.path.name: p.problems[0].message for p in server.catalog.problems()}


async def test_an_exported_skill_file_is_served_with_its_files(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "exports"
    root.mkdir()
    # Claude's export: the skill's files at the top of the archive.
    (root / "pdf-tools.skill").write_bytes(
        skill_zip({"SKILL.md": skill_md("pdf-tools"), "scripts/run.py": "print(1)\n", "__MACOSX/._x": "junk"})
    )
    server = create_server(skill_dirs=[root], builtin=False, pipelines=False)
    async with Client(server) as client:
        result = await client.call_tool("pdf-tools", {"task": "go"})
        script = await client.read_resource("skill://pdf-tools/scripts/run.py")
    assert result.structured_content["files"] == ["SKILL.md", "scripts/run.py"]
    assert script.contents[0].text == "print(1)\n"
    assert server.catalog.get("pdf-tools").root.is_relative_to(home / "cache" / "archives")


def test_an_archive_given_as_the_root_is_unpacked_once(tmp_path: Path, home: Path) -> None:
    archive = tmp_path / "one.zip"
    archive.write_bytes(skill_zip({"one/SKILL.md": skill_md("one")}))
    first = create_server(skill_dirs=[archive], builtin=False, pipelines=False).catalog.get("one").root
    marker = first / "marker"
    marker.write_text("still here")  # a second start reuses the unpacked folder
    second = create_server(skill_dirs=[archive], builtin=False, pipelines=False).catalog.get("one").root
    assert second == first and marker.exists()


def _bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb/SKILL.md", skill_md("bomb"))
        zf.writestr("bomb/zeros.bin", b"\0" * (20 << 20))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (skill_zip({"../evil/SKILL.md": skill_md("evil")}), "points outside"),
        (skill_zip({"/abs/SKILL.md": skill_md("abs")}), "points outside"),
        (skill_zip({"x/SKILL.md": skill_md("x")}, links={"x/data": "/etc/passwd"}), "symbolic link"),
        (skill_zip({f"many/f{i}.txt": "" for i in range(2_001)} | {"many/SKILL.md": skill_md("many")}), "entries"),
        (_bomb(), "zip bomb"),
        (b"this is not a zip", "not a readable zip"),
        (skill_zip({"readme.txt": "no skill"}), "no SKILL.md"),
        (skill_zip({"a/SKILL.md": "x", "A/skill.md": "y"}), "appears twice"),
    ],
    ids=["traversal", "absolute", "symlink", "member-count", "bomb", "not-zip", "no-skill", "duplicate"],
)
async def test_a_hostile_archive_is_refused_with_its_reason_and_the_rest_is_served(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "hostile.zip").write_bytes(content)
    (root / "fine.skill").write_bytes(skill_zip({"fine/SKILL.md": skill_md("fine")}))
    server = create_server(skill_dirs=[root], builtin=False, pipelines=False)
    assert reason in _problems(server)["hostile.zip"]
    assert not (tmp_path / "evil").exists() and not Path("/abs/SKILL.md").exists()
    async with Client(server) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["fine"]
