"""`orchestrator docs [PAGE[#SECTION]]`: the user reference of docs/, wherever it was installed.

Errors and hints cite the reference as `docs/<page>.md#<section>` (GitHub's anchors). In a
checkout that is a file beside the packages; an installed package (pip, pipx, uvx) carries the
same files under `<prefix>/share/doc/mcp-orchestrator/` (pyproject's data-files), so this
command prints them, a whole page or the one section a hint names.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sysconfig
from pathlib import Path
from typing import Any

from ._common import EXIT_OK, PROG, Parents, UsageError

SHARE = Path("share") / "doc" / "mcp-orchestrator"
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def add_parsers(sub: Any, parents: Parents) -> None:
    docs = sub.add_parser(
        "docs",
        parents=[parents.common],
        help="print the user reference (a page, or the section a hint cites)",
        description="Print the reference of docs/: the list of pages, one page (e.g. `pipelines`), or one "
        "section as errors cite it (e.g. docs/pipelines.md#on_error-continue).",
    )
    docs.add_argument("page", metavar="PAGE[#SECTION]", nargs="?", help="a page, optionally with a section anchor")
    docs.set_defaults(handler=_cmd_docs)


def docs_dir() -> Path | None:
    """The folder holding the reference: the checkout's docs/, else the installed copy."""
    candidates = [Path(__file__).resolve().parents[2] / "docs"]
    for scheme in (None, f"{os.name}_user"):
        try:
            data = sysconfig.get_path("data", scheme) if scheme else sysconfig.get_path("data")
        except KeyError:  # no user scheme on this platform
            continue
        candidates.append(Path(data) / SHARE)
    return next((c for c in candidates if (c / "index.md").is_file()), None)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> list[str]:
    """Every heading anchor of a Markdown text, in order (fenced code blocks skipped)."""
    return [slug(title) for _, title, _ in _headings(text)]


def _headings(text: str) -> list[tuple[int, str, int]]:
    """(level, title, line index) of each heading outside fenced code."""
    found: list[tuple[int, str, int]] = []
    fenced = False
    for index, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2), index))
    return found


def section(text: str, anchor: str) -> str | None:
    """The section under the heading whose anchor is `anchor`, up to the next one of its level or above."""
    lines = text.splitlines()
    headings = _headings(text)
    for position, (level, title, start) in enumerate(headings):
        if slug(title) == anchor:
            end = next((i for lvl, _, i in headings[position + 1 :] if lvl <= level), len(lines))
            return "\n".join(lines[start:end]).rstrip() + "\n"
    return None


def _cmd_docs(args: argparse.Namespace) -> int:
    root = docs_dir()
    if root is None:
        raise UsageError("the reference is not installed here", "read docs/ in the project's source distribution")
    pages = sorted(p.stem for p in root.glob("*.md"))
    if not args.page:
        print((root / "index.md").read_text(encoding="utf-8"), end="")
        print(f"\nPages: {', '.join(pages)} (in {root})")
        return EXIT_OK
    page: str = args.page
    name, _, anchor = page.partition("#")
    name = name.removeprefix("docs/").removesuffix(".md")
    if name not in pages:
        close = difflib.get_close_matches(name, pages, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"the pages: {', '.join(pages)}"
        raise UsageError(f"no page '{name}' in the reference", hint)
    text = (root / f"{name}.md").read_text(encoding="utf-8")
    if not anchor:
        print(text, end="")
        return EXIT_OK
    found = section(text, anchor)
    if found is None:
        known = anchors(text)
        plain = anchor.replace("_", "-")
        close = [a for a in known if plain in a.replace("_", "-")] or difflib.get_close_matches(anchor, known, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"`{PROG} docs {name}` prints the whole page"
        raise UsageError(f"no section '#{anchor}' in {name}.md", hint)
    print(found, end="")
    return EXIT_OK
