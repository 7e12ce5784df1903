"""A corpus of skill repositories shaped like the public collections (written into tmp_path).

Each shape the public collections showed is here once: skills nested at several depths and in
dot-folders, a name two folders declare, SKILL.md links inside and outside the root, a dangling
link, a link loop, a Title-Case name, an over-long description, non-string metadata, hidden and
binary files, tooling folders that must not be searched, and a `.skill` archive.
"""

from __future__ import annotations

import io
import json
import stat
import zipfile
from pathlib import Path

from tests.helpers import write_skill

LONG_DESCRIPTION = "Use the Claude API. " + "x" * 1_048
"""1,068 characters, like anthropics/skills' claude-api."""
FONT = bytes(range(256)) * 4
"""A binary bundled file (the corpus had a font)."""


def build_repo(base: Path) -> Path:
    """A repository whose skills sit at several depths; returns its root."""
    repo = base / "repo"
    write_skill(
        repo / "skills",
        "pdf",
        description="Anthropic's pdf skill.",
        files={"references/forms.md": "# Forms\n", "scripts/fill.py": "print('fill')\n"},
    )
    (repo / "skills/pdf/assets").mkdir(parents=True)
    (repo / "skills/pdf/assets/font.ttf").write_bytes(FONT)
    (repo / "skills/pdf/assets/.env.example").write_text("TOKEN=secret\n")
    write_skill(repo / "skills", "claude-api", description=LONG_DESCRIPTION)
    write_skill(repo / "document-skills", "pdf", description="Composio's pdf skill.")
    write_skill(repo / "composio-skills", "ahrefs-automation", front={"name": "Ahrefs Automation"})
    write_skill(repo / ".claude/skills", "dot-skill")
    write_skill(repo / "plugins/tools/.codex/skills", "deep-skill")
    write_skill(repo / "skills", "meta-skill", front={"metadata": {"tags": ["a", "b"], "version": 2}})
    write_skill(repo / "node_modules/some-package/skills", "vendored")
    write_skill(repo / ".git/skills", "in-git")
    # board/SKILL.md links to a file elsewhere in the repo: followed (inside the root).
    (repo / "shared").mkdir()
    (repo / "shared/board.md").write_text("---\nname: board\ndescription: The board skill.\n---\nBoard body.\n")
    (repo / "board").mkdir()
    (repo / "board/SKILL.md").symlink_to("../shared/board.md")
    # A link that dangles, and one that leaves the root: skipped, each with its reason.
    (repo / "dangling").mkdir()
    (repo / "dangling/SKILL.md").symlink_to("../nowhere/SKILL.md")
    outside = write_skill(base / "outside", "escape")
    (repo / "escape").mkdir()
    (repo / "escape/SKILL.md").symlink_to(outside / "SKILL.md")
    # A folder link back to the root: the walk must end. One to a folder outside: not followed.
    (repo / "skills/loop").symlink_to("..")
    (repo / "elsewhere").symlink_to(base / "outside")
    (repo / "exports").mkdir()
    (repo / "exports/report-writer.skill").write_bytes(
        skill_zip({"report-writer/SKILL.md": skill_md("report-writer"), "report-writer/templates/t.md": "# T\n"})
    )
    return repo


EXPECTED = {"pdf", "claude-api", "ahrefs-automation", "dot-skill", "deep-skill", "meta-skill", "board", "report-writer"}
"""What build_repo's root publishes (besides built-ins)."""


def skill_md(name: str, description: str = "A skill from an archive.") -> str:
    return f"---\nname: {name}\ndescription: {json.dumps(description)}\n---\nBody of {name}.\n"


def skill_zip(members: dict[str, str | bytes], *, links: dict[str, str] | None = None) -> bytes:
    """A zip archive of `members` (name -> content), and `links` (name -> target) as symlinks."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in members.items():
            zf.writestr(name, content)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buffer.getvalue()


def many_skills(parent: Path, count: int, *, nested: bool = True) -> Path:
    """`count` instructions skills, spread over nested folders as a big collection spreads them."""
    for i in range(count):
        folder = parent / f"group-{i % 12}" / "skills" if nested else parent
        name = f"skill-{i:04d}"
        folder.joinpath(name).mkdir(parents=True, exist_ok=True)
        folder.joinpath(name, "SKILL.md").write_text(
            skill_md(name, f"Skill number {i}: converts {['pdf', 'csv', 'image', 'audio'][i % 4]} files.")
        )
    return parent
