"""The user reference in docs/: every reference to it (hints in the code, the README, the pages'
own links) points at a page and a section that exist, and `orchestrator docs` prints what a
hint cites."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_server.cli._docs import anchors
from tests.helpers import run_cli, write_skill

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PACKAGES = ("mcp_server", "skills", "pipelines", "adapters")
CITED = re.compile(r"docs/([\w-]+\.md)(?:#([\w-]+))?")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _sources() -> list[Path]:
    files = [REPO / "README.md", *DOCS.glob("*.md")]
    for package in PACKAGES:
        files += [p for p in (REPO / package).rglob("*") if p.suffix in (".py", ".yaml", ".md") and p.is_file()]
    return files


def _references() -> list[tuple[str, str, str]]:
    """(where, page, anchor) of every `docs/<page>.md#<anchor>` and every relative Markdown link."""
    found = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        where = str(path.relative_to(REPO))
        found += [(where, page, anchor) for page, anchor in CITED.findall(text)]
        if path.suffix == ".md":
            for target in LINK.findall(text):
                if "://" in target or target.startswith(("#", "mailto:")):
                    continue
                file, _, anchor = target.partition("#")
                resolved = (path.parent / file).resolve()
                if resolved.parent == DOCS:
                    found.append((where, resolved.name, anchor))
                else:
                    assert resolved.exists(), f"{where}: link to a missing file {target}"
    return found


def test_every_reference_to_the_docs_points_at_a_page_and_section_that_exist() -> None:
    references = _references()
    assert len({page for _, page, _ in references}) >= 5  # the hints, the README and the pages do cite them
    for where, page, anchor in references:
        assert (DOCS / page).is_file(), f"{where}: docs/{page} does not exist"
        if anchor:
            assert anchor in anchors((DOCS / page).read_text(encoding="utf-8")), f"{where}: no #{anchor} in {page}"


def test_nothing_user_facing_cites_files_outside_the_repository() -> None:
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        assert "SPEC section" not in text and "see SPEC" not in text, path
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "SPEC" not in readme and "ARCHITECTURE" not in readme


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    return {**os.environ, "ORCHESTRATOR_HOME": str(home)}


def test_docs_prints_the_section_a_hint_cites(env: dict[str, str], tmp_path: Path) -> None:
    contract = {"inputs": {"type": "object"}, "run": {"python": "impl:run"}, "timout": 5}
    folder = write_skill(tmp_path, "misspelt", contract=contract, impl="def run():\n    return {}\n")
    checked = run_cli("skills", "validate", str(folder), env=env, cwd=tmp_path)
    assert checked.code == 2
    (cited,) = {m.group(0) for m in CITED.finditer(checked.out)}
    shown = run_cli("docs", cited, env=env, cwd=tmp_path)
    assert shown.code == 0, shown.err
    assert shown.out.startswith("## skill.yaml\n") and "| `timeout` |" in shown.out
    assert "## Instructions skills" not in shown.out  # the section only


def test_docs_lists_the_pages_and_says_what_it_cannot_find(env: dict[str, str], tmp_path: Path) -> None:
    listed = run_cli("docs", env=env, cwd=tmp_path)
    pages = ", ".join(sorted(p.stem for p in DOCS.glob("*.md")))
    assert listed.code == 0 and f"Pages: {pages}" in listed.out and "cli, " in pages
    page = run_cli("docs", "servers", env=env, cwd=tmp_path)
    assert page.code == 0 and page.out == (DOCS / "servers.md").read_text(encoding="utf-8")
    typo = run_cli("docs", "pipline", env=env, cwd=tmp_path)
    assert typo.code == 2 and "did you mean 'pipelines'?" in typo.err
    section = run_cli("docs", "pipelines#on-error", env=env, cwd=tmp_path)
    assert section.code == 2 and "did you mean on_error-continue" in section.err


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.is_file():
        pytest.skip("mkdocs is not installed: `uv sync --all-extras` (the `docs` extra) installs it")
    return subprocess.run(
        [str(mkdocs), "build", "--strict", "-f", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
        check=False,
    )


def test_the_site_builds_strictly_and_a_new_page_needs_no_nav_entry(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "docs" / "a-new-page.md").write_text("# A new page\n\nSee [pipelines](pipelines.md#runs).\n")
    built = _mkdocs(copy / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "a-new-page" / "index.html").is_file()
    assert (tmp_path / "site" / "cli-reference" / "index.html").is_file()
    (copy / "docs" / "a-new-page.md").write_text("# A new page\n\nSee [pipelines](pipelines.md#no-such-section).\n")
    broken = _mkdocs(copy / "mkdocs.yml", tmp_path / "site")
    assert broken.returncode != 0 and "no-such-section" in broken.stderr


def test_ci_builds_the_site_strictly() -> None:
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert any(".venv/bin/mkdocs build --strict" in line and not line.startswith("#") for line in lines)
