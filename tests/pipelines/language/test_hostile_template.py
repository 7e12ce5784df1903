"""A client's report template is a program: it runs under the expression sandbox's limits (issue 9, item 6).

`markdown-report` rendered `template` in plain Jinja: `{{ 'a'*(10**9) }}` wrote a 1 GB file and
returned it, a nested loop burnt CPU past the skill's timeout. Now every operator is bounded
before it runs, loops check a deadline, and the output is capped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server import create_server
from tests._attack import answered_while, still_answers


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ 'a' * (10 ** 9) }}", "too large"),
        ("{{ data * 100000000 }}", "too large"),
        ("{% for i in range(10 ** 9) %}x{% endfor %}", "too large"),
        ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "nested too deeply"),
        ("{{ title.__class__ }}", "not allowed"),
    ],
)
async def test_a_template_bomb_is_refused_before_it_builds_anything(
    home: Path, tmp_path: Path, template: str, expected: str
) -> None:
    server = create_server(home=home)
    async with Client(server) as attacker, Client(server) as bystander:
        with anyio.fail_after(30):
            result = await attacker.call_tool(
                "markdown-report", {"title": "t", "data": ["x"], "template": template, "filename": "bomb.md"}
            )
        assert result.is_error and expected in _text(result), _text(result)
        assert "Traceback" not in _text(result)
        assert not list(home.rglob("bomb.md"))  # nothing was written
        await still_answers(bystander)


async def test_a_nested_loop_template_is_stopped_by_the_deadline_while_others_are_served(home: Path) -> None:
    template = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    server = create_server(home=home)
    async with Client(server) as attacker, Client(server) as bystander:
        with anyio.fail_after(30):  # the skill's own timeout is 60 s: the sandbox's deadline is what stops it
            result = await answered_while(
                lambda: attacker.call_tool("markdown-report", {"title": "t", "template": template}), bystander
            )
        assert result.is_error and "took too long" in _text(result), _text(result)


async def test_a_template_within_the_limits_still_renders_the_data(home: Path) -> None:
    template = (
        "# {{ title }}\n{% for row in data %}- {{ row.name }} ({{ row | json(None) }})\n{% endfor %}{{ data | table }}"
    )
    data = [{"name": "a", "n": 1}, {"name": "b", "n": 2}]
    async with Client(create_server(home=home)) as client:
        result = await client.call_tool("markdown-report", {"title": "T", "data": data, "template": template})
        assert not result.is_error, _text(result)
        markdown = result.structured_content["markdown"]
        assert markdown.startswith('# T\n- a ({"name": "a", "n": 1})\n- b (')
        assert "| name | n |" in markdown
