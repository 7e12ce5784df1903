"""The example pipelines shipped in `pipelines/examples/`, each run through a real MCP client on
fixture data written into tmp_path, with their outputs checked value by value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from mcp_server import create_server
from pipelines.source import EXAMPLES_DIR

COMPLEX = '''\
"""A module with one complex function."""


def classify(n, flags):
    """Branch a lot."""
    result = []
    if n < 0:
        result.append("negative")
    elif n == 0:
        result.append("zero")
    elif n < 10:
        result.append("small")
    else:
        result.append("large")
    for flag in flags:
        if flag == "a":
            result.append(1)
        elif flag == "b":
            result.append(2)
        elif flag == "c" and n > 3:
            result.append(3)
        elif flag == "d" or n > 100:
            result.append(4)
        while n > 1000:
            n //= 2
    try:
        n = int(n)
    except ValueError:
        pass
    return result


def add(a, b):
    return a + b
'''

TESTS = """\
from calc import add, classify


def test_add():
    assert add(2, 3) == 5


def test_classify_is_wrong():
    assert classify(0, []) == ["nothing"]
"""

MEDIUM = """\
def one(x):
    return x


def two(x):
    if x:
        return 1
    return 2


def three(x):
    return [x]


def four(x):
    for _ in range(x):
        if x > 2:
            return x
    return 0
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A tiny Python project: a complex module, a passing and a failing test."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "calc.py").write_text(COMPLEX)
    (root / "test_calc.py").write_text(TESTS)
    return root


def _cell(path: Path) -> str:
    """A path as the report's table shows it: values past 80 characters are cut, ending in "…"
    (a temporary folder's path is longer on some machines and under pytest-xdist)."""
    text = str(path)
    return text if len(text) <= 80 else text[:79] + "…"


async def call(home: Path, tool: str, arguments: dict[str, Any], *, partial: str = "") -> dict[str, Any]:
    """Call the tool; its outputs. `partial`: a step fails under `on_error: continue`, so the run
    is PARTIAL (an error whose message names the failed step, `partial`) with every output kept."""
    async with Client(create_server(home=home)) as client:
        result = await client.call_tool(tool, arguments)
    if partial:
        assert result.is_error and "PARTIAL: " in _text(result) and f"failed ({partial})" in _text(result)
    else:
        assert not result.is_error, _text(result)
    assert result.structured_content is not None
    out = dict(result.structured_content)
    assert out.pop("usage")["calls"] == 0  # reported by every run; these examples call no model
    return out


def _text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def _artifacts(home: Path, pipeline: str, run_id: str) -> Path:
    return home / "pipelines" / pipeline / "runs" / run_id


def test_there_are_at_least_eight_examples() -> None:
    assert len(list(EXAMPLES_DIR.glob("*.yaml"))) >= 8


async def test_the_examples_are_all_published_as_tools(home: Path) -> None:
    async with Client(create_server(home=home)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert {p.stem for p in EXAMPLES_DIR.glob("*.yaml")} <= names


async def test_code_review_analyses_the_files_runs_the_tests_and_writes_a_report(home: Path, project: Path) -> None:
    out = await call(home, "code-review", {"directory": str(project), "top": 2, "note": "Checked by CI."})
    run_id = out["run_id"]
    report = _artifacts(home, "code-review", run_id) / "review.md"
    # the tests failed, but the step that ran them did not: every step succeeded
    assert out.pop("summary")["line"] == "SUCCESS: 5/5 steps succeeded, 0 failed, 0 skipped"
    assert out == {
        "report": str(report),
        "files_reviewed": 2,
        "tests": "failed",
        "tests_passed": 1,
        "tests_failed": 1,
        "most_complex": "classify",
        "most_complex_path": str(project / "calc.py"),
        "run_id": run_id,
    }
    text = report.read_text()
    assert text.startswith(f"# Review of {project}\n")
    assert "2 Python files; tests failed: 1 passed, 1 failed. Checked by CI." in text
    assert f"| {_cell(project / 'calc.py')} | classify | 13 | 4 |" in text
    assert "test_calc.py::test_classify_is_wrong" in text
    rows = [line for line in text.split("## failures")[0].splitlines() if line.startswith("| /")]  # a file's row
    assert len(rows) == 2  # top: 2


async def test_project_health_calls_the_review_and_the_router_pipelines(home: Path, project: Path) -> None:
    out = await call(home, "project-health", {"directory": str(project)})
    review_run = out["review_run"]
    assert review_run != out["run_id"]
    assert out.pop("summary")["line"] == "SUCCESS: 2/2 steps succeeded, 0 failed, 0 skipped"
    assert out == {
        "report": str(_artifacts(home, "code-review", review_run) / "review.md"),
        "files_reviewed": 2,
        "tests": "failed",
        "review_run": review_run,
        "worst_file": str(project / "calc.py"),
        "worst_branch": "elif1",  # complexity 13 > complex_above 5
        "run_id": out["run_id"],
    }
    assert Path(out["report"]).is_file()


async def test_project_health_on_a_folder_without_python_skips_the_router(home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = await call(home, "project-health", {"directory": str(empty)})
    assert out["files_reviewed"] == 0
    assert out["worst_file"] is None
    assert out["worst_branch"] == "skipped"


async def test_similarity_matrix_compares_every_file_with_every_file(home: Path, tmp_path: Path) -> None:
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text("one\ntwo\nthree\n")
    (texts / "b.txt").write_text("one\ntwo\nthree\n")
    (texts / "c.txt").write_text("one\n2\n3\nfour\n")
    (texts / "ignored.md").write_text("not a txt\n")
    out = await call(home, "similarity-matrix", {"directory": str(texts)})
    assert out["files"] == ["a.txt", "b.txt", "c.txt"]
    # lines added going from the row's file to the column's file
    assert out["changed_lines"] == [[0, 0, 3], [0, 0, 3], [2, 2, 0]]
    assert out["identical_pairs"] == 5  # the diagonal, a/b and b/a


async def test_docs_digest_measures_every_markdown_file_and_digests_the_longest(home: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "short.md").write_text("# Short\n\nTiny doc.\n")
    (docs / "sub" / "long.md").write_text("# Long\n\n" + "Pipelines compile to graphs. " * 40 + "\n")
    (docs / "mid.md").write_text("# Mid\n\n" + "Words words words here. " * 5 + "\n")
    (docs / "broken.md").write_bytes(b"\xff\xfe\x00 not utf-8 \xc3\x28")
    (docs / "notes.txt").write_text("not markdown " * 100)
    out = await call(home, "docs-digest", {"directory": str(docs), "top": 2}, partial="measured/stats")
    # ^ broken.md could not be measured: the run goes on (on_error: continue) but is not a success
    run_id = out["run_id"]
    assert out["documents"] == 4
    assert len(out["unreadable"]) == 1 and f"{docs / 'broken.md'} is not valid utf-8 text" in out["unreadable"][0]
    assert out["longest"] == [
        {"path": str(docs / "sub" / "long.md"), "words": 161, "reading_time_minutes": 0.8},
        {"path": str(docs / "mid.md"), "words": 21, "reading_time_minutes": 0.1},
    ]
    digest = _artifacts(home, "docs-digest", run_id) / "digest.md"
    assert out["digest"] == str(digest)
    text = digest.read_text()
    assert text.startswith(f"# Longest documents in {docs}\n")
    assert f"| {_cell(docs / 'sub' / 'long.md')} | 161 | 0.8 |" in text
    assert "short.md" not in text and "broken.md" not in text


async def test_docs_digest_without_documents_writes_no_digest(home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "no-docs"
    (empty / "src").mkdir(parents=True)
    (empty / "src" / "main.py").write_text("print(1)\n")
    out = await call(home, "docs-digest", {"directory": str(empty)})
    assert out["documents"] == 0 and out["longest"] == [] and out["digest"] is None and out["unreadable"] == []


@pytest.mark.parametrize(
    ("source", "branch"),
    [
        (COMPLEX, "elif1"),
        (MEDIUM, "elif2"),
        ("def f():\n    return 1\n", "else"),
        ("def broken(:\n", "then"),
    ],
)
async def test_route_by_complexity_routes_on_the_analysis(home: Path, tmp_path: Path, source: str, branch: str) -> None:
    path = tmp_path / "target.py"
    path.write_text(source)
    out = await call(home, "route-by-complexity", {"path": str(path)})
    assert out["branch"] == branch
    detail = out["detail"]
    assert detail["branch"] == branch
    artifacts = _artifacts(home, "route-by-complexity", out["run_id"])
    if branch == "elif1":
        assert out["max_complexity"] == 13
        assert set(detail) == {"complex", "branch"}
        assert detail["complex"]["path"] == str(artifacts / "report.md")
        assert detail["complex"]["markdown"].startswith(f"# Complex: {path}\n\n- classify\n")
    elif branch == "elif2":
        assert out["max_complexity"] == 3
        assert detail["medium"]["items"] == [
            {"name": "four", "complexity": 3},
            {"name": "two", "complexity": 2},
            {"name": "one", "complexity": 1},
            {"name": "three", "complexity": 1},
        ]
    elif branch == "else":
        assert out["max_complexity"] == 1
        assert detail["simple"]["path"] == str(path)
        assert detail["simple"]["lines"] == 2
    else:
        assert detail["broken"]["path"] == str(artifacts / "triage.txt")
        assert (artifacts / "triage.txt").read_text().startswith("syntax error: ")


async def test_fan_out_measures_hundreds_of_items_in_item_order(home: Path) -> None:
    out = await call(home, "fan-out", {})
    assert out.pop("summary")["succeeded"] == 2  # its step `summary` is not an output: the key is the run's
    # item n is "word " * (n % 7 + 1) + "item n.": n % 7 + 3 words
    assert out == {
        "items": 300,
        "words_total": sum(n % 7 + 3 for n in range(300)),
        "first_words": 3,
        "last_words": 299 % 7 + 3,
        "run_id": out["run_id"],
    }
    small = await call(home, "fan-out", {"count": 9})
    assert small["items"] == 9 and small["words_total"] == sum(n % 7 + 3 for n in range(9))
    assert small["last_words"] == 8 % 7 + 3


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, {"succeeded": True, "attempts": 3, "failures": 2}),
        ({"succeed_at": 1}, {"succeeded": True, "attempts": 1, "failures": 0}),
        ({"succeed_at": 9}, {"succeeded": False, "attempts": 5, "failures": 5}),
        ({"succeed_at": 30, "max_attempts": 50}, {"succeeded": False, "attempts": 10, "failures": 10}),
    ],
)
async def test_retry_until_success_loops_until_success_or_a_limit(
    home: Path, arguments: dict[str, Any], expected: dict[str, Any]
) -> None:
    out = await call(home, "retry-until-success", arguments)
    assert out.pop("summary")["line"] == "SUCCESS: 1/1 steps succeeded, 0 failed, 0 skipped"
    assert out == {**expected, "run_id": out["run_id"]}


async def test_running_totals_carries_state_across_iterations(home: Path) -> None:
    out = await call(home, "running-totals", {})
    assert out.pop("summary")["total"] == 1
    assert out == {
        "total": 25,
        "largest": 9,
        "over_threshold": 2,
        "running": [3, 11, 12, 21, 25],
        "run_id": out["run_id"],
    }
    out = await call(home, "running-totals", {"values": [-2, 7.5, 7.5, 1], "threshold": 7})
    assert out["total"] == 14 and out["largest"] == 7.5 and out["over_threshold"] == 2
    assert out["running"] == [-2, 5.5, 13, 14]


async def test_every_example_has_help_text_and_a_graph(home: Path) -> None:
    async with Client(create_server(home=home)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for example in sorted(EXAMPLES_DIR.glob("*.yaml")):
            tool = tools[example.stem]
            assert tool.description and tool.output_schema is not None
            graph = await client.read_resource(f"pipeline://{example.stem}/graph")
            assert getattr(graph.contents[0], "text", "").startswith(("flowchart", "graph"))
    assert tools["code-review"].input_schema["properties"]["directory"]["description"] == "Folder to review"
