"""Client-supplied patterns never backtrack (issue 9, item 3).

`collect`'s `matches` with `(a+)+$` against forty `a`s and a `!` held the GIL inside one call to
Python's regex engine: every client stopped, the timeout never fired. Patterns from clients now
run on RE2 (linear time); so do the globs of `list-files`, which compiled to backtracking regexes
(`*a*a*a...` against a long file name is exponential too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from mcp_server import create_server
from tests._attack import still_answers

EVIL = "(a+)+$"
VICTIM = "a" * 40 + "!"


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def test_collect_matches_a_catastrophic_pattern_in_linear_time(home: Path) -> None:
    server = create_server(home=home)
    async with Client(server) as attacker, Client(server) as bystander:
        items = [{"a": VICTIM}, {"a": "aaa"}, {"a": "b"}]
        with anyio.fail_after(20):  # Python's engine needs about 2**40 steps for the first item
            result = await attacker.call_tool(
                "collect", {"items": items, "where": [{"field": "a", "op": "matches", "value": EVIL}]}
            )
        assert not result.is_error, _text(result)
        assert result.structured_content["items"] == [{"a": "aaa"}]
        await still_answers(bystander)


async def test_collect_refuses_a_pattern_re2_cannot_run_with_a_hint(home: Path) -> None:
    async with Client(create_server(home=home)) as client:
        where = [{"field": "a", "op": "matches", "value": r"(a)\1"}]
        result = await client.call_tool("collect", {"items": [{"a": "aa"}], "where": where})
        assert result.is_error
        text = _text(result)
        assert "where[0]: bad regular expression" in text and "backreferences" in text


async def test_list_files_matches_a_many_star_glob_against_a_long_name_in_linear_time(
    home: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / ("a" * 200)).write_text("x")
    (folder / "ab").write_text("x")
    server = create_server(home=home)
    async with Client(server) as attacker, Client(server) as bystander:
        with anyio.fail_after(20):
            result = await attacker.call_tool("list-files", {"directory": str(folder), "pattern": "*a" * 15 + "*b"})
        assert not result.is_error, _text(result)
        assert result.structured_content["relative"] == []
        await still_answers(bystander)
        found = await attacker.call_tool("list-files", {"directory": str(folder), "pattern": "*b"})
        assert found.structured_content["relative"] == ["ab"]


async def test_list_files_glob_classes_keep_their_meaning_and_never_cross_a_folder(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "files"
    (folder / "x").mkdir(parents=True)
    for name in ("a.c", "a.h", "a.py", "x.y", "x/y"):
        (folder / name).write_text("x")
    async with Client(create_server(home=home)) as client:

        async def listed(pattern: str) -> list[str]:
            result = await client.call_tool("list-files", {"directory": str(folder), "pattern": pattern})
            assert not result.is_error, _text(result)
            return result.structured_content["relative"]

        assert await listed("*.[ch]") == ["a.c", "a.h"]
        assert await listed("a.[!ch]*") == ["a.py"]
        assert await listed("x[!a]y") == ["x.y"]  # '[!a]' matches '.', never the '/' of x/y
        assert await listed("x[+-0]y") == ["x.y"]  # the range '+'..'0' holds '.' and '/': '/' is cut out
