"""The examples tell the truth: every input changes what an example does, and a step that failed
or timed out shows in the result and the report (never "0 passed" for tests that did not run).

Run through a real in-memory MCP client like tests/pipelines/engine/test_pipeline_examples.py, whose fixtures
and sources this module reuses.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pipelines.source import EXAMPLES_DIR
from tests.helpers import write_skill
from tests.pipelines.engine.test_pipeline_examples import COMPLEX, MEDIUM, TESTS, _artifacts, call

HANGING_TESTS = """\
import threading


def test_waits_for_ever():
    threading.Event().wait()
"""


@pytest.mark.parametrize("example", sorted(p.stem for p in EXAMPLES_DIR.glob("*.yaml")))
def test_every_input_of_an_example_is_used_by_an_expression(example: str) -> None:
    text = (EXAMPLES_DIR / f"{example}.yaml").read_text()
    expressions = " ".join(re.findall(r"\{\{(.*?)\}\}", text, re.S))
    names = set(re.findall(r"[A-Za-z_]\w*", expressions))
    unused = set(yaml.safe_load(text).get("inputs") or {}) - names
    assert not unused, f"{example}: inputs that no expression reads: {sorted(unused)}"


def _project(root: Path, tests: str) -> Path:
    root.mkdir()
    (root / "calc.py").write_text(COMPLEX)
    (root / "test_calc.py").write_text(tests)
    return root


async def test_code_review_reports_tests_that_timed_out_as_timed_out(home: Path, tmp_path: Path) -> None:
    project = _project(tmp_path / "project", HANGING_TESTS)
    out = await call(home, "code-review", {"directory": str(project), "test_timeout": 1})
    assert out["tests"] == "timed out after 1s"
    assert (out["tests_passed"], out["tests_failed"]) == (0, 0)
    text = Path(out["report"]).read_text()
    assert "2 Python files; tests timed out after 1s." in text
    assert "0 passed" not in text


async def test_code_review_reports_tests_that_could_not_run_with_the_reason(home: Path, tmp_path: Path) -> None:
    # A home skill overrides the built-in run-tests: the one of a machine without pytest.
    write_skill(
        home / "skills",
        "run-tests",
        contract={"inputs": {"type": "object"}, "run": {"python": "impl:run"}},
        impl="def run(**kwargs):\n    raise RuntimeError('No module named pytest')\n",
    )
    project = _project(tmp_path / "project", TESTS)
    out = await call(home, "code-review", {"directory": str(project)}, partial="tests")  # reported, and not a success
    assert out["tests"].startswith("error: ") and "No module named pytest" in out["tests"]
    assert (out["tests_passed"], out["tests_failed"]) == (0, 0)
    text = Path(out["report"]).read_text()
    assert "tests error: " in text and "No module named pytest" in text
    health = await call(home, "project-health", {"directory": str(project)}, partial="review/tests")
    assert health["tests"] == out["tests"]


async def test_code_review_says_when_there_is_nothing_to_test(home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (await call(home, "code-review", {"directory": str(empty)}))["tests"] == "not run: no Python files"
    only_code = tmp_path / "code"
    only_code.mkdir()
    (only_code / "calc.py").write_text(MEDIUM)
    assert (await call(home, "code-review", {"directory": str(only_code)}))["tests"] == "no tests found"


async def test_route_by_complexity_reports_the_functions_above_its_own_threshold(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "medium.py"
    path.write_text(MEDIUM)  # max complexity 3: "medium" by default, "complex" above 2
    out = await call(home, "route-by-complexity", {"path": str(path), "complex_above": 2})
    assert out["branch"] == "elif1"
    report = _artifacts(home, "route-by-complexity", out["run_id"]) / "report.md"
    assert out["detail"]["complex"]["path"] == str(report)
    text = report.read_text()
    assert "- four\n" in text and "(none)" not in text


async def test_similarity_matrix_compares_the_files_its_pattern_selects(home: Path, tmp_path: Path) -> None:
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text("one\n")
    (texts / "x.md").write_text("one\n")
    (texts / "y.md").write_text("one\ntwo\n")
    out = await call(home, "similarity-matrix", {"directory": str(texts), "pattern": "*.md"})
    assert out["files"] == ["x.md", "y.md"]
    assert out["changed_lines"] == [[0, 1], [0, 0]]
    assert out["identical_pairs"] == 2


async def test_docs_digest_digests_only_the_top_documents(home: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(1, 5):
        (docs / f"d{n}.md").write_text("word " * n * 10)
    out = await call(home, "docs-digest", {"directory": str(docs), "top": 3})
    assert [Path(d["path"]).name for d in out["longest"]] == ["d4.md", "d3.md", "d2.md"]
    assert out["unreadable"] == []
