"""docs/cli-reference.md is generated from the argument parsers and matches them."""

from __future__ import annotations

import argparse
from pathlib import Path

from mcp_server.cli import _parser  # pyright: ignore[reportPrivateUsage]
from mcp_server.cli._docs import anchors
from mcp_server.cli._reference import page, render

PAGE = Path(__file__).resolve().parents[3] / "docs" / "cli-reference.md"


def test_the_committed_page_is_what_the_parsers_generate() -> None:
    assert PAGE.read_text(encoding="utf-8") == page(), (
        "docs/cli-reference.md is stale: `.venv/bin/python -m mcp_server.cli._reference > docs/cli-reference.md`"
    )


def _options(parser: argparse.ArgumentParser) -> set[str]:
    found: set[str] = set()
    for action in parser._actions:  # pyright: ignore[reportPrivateUsage]
        if isinstance(action.choices, dict):
            for sub in action.choices.values():  # pyright: ignore[reportUnknownVariableType]
                found |= _options(sub)  # pyright: ignore[reportUnknownArgumentType]
        elif action.help != argparse.SUPPRESS:
            found.update(action.option_strings)
    return found


def test_every_command_and_option_of_the_program_is_on_the_page() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for option in _options(_parser()) - {"-h", "--help"}:
        assert f"`{option}" in text, option
    titles = set(anchors(text))
    for command in ("serve", "worker", "runs-resume", "skills-validate", "docs", "claude-config"):
        assert f"orchestrator-{command}" in titles


def test_a_new_option_changes_the_page() -> None:
    parser = _parser()
    before = render(parser)
    parser.add_argument("--brand-new", metavar="N", type=int, default=3, help="a new option")
    after = render(parser)
    assert "| `--brand-new N` | a new option (default: `3`) |" in after and before != after
