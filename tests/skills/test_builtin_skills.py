"""The built-in skill library, called through a real in-memory MCP client.

Each skill works on files written into tmp_path and is checked for what a user would see:
the structured result (validated by the client against the tool's outputSchema) or an
`isError` result with a clear message.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client
from mcp_types import CallToolResult

from mcp_server import create_server
from skills import BUILTIN_SKILLS_DIR, check_folder
from tests.helpers import assert_none_left, envelope, holding

TOOL_SKILLS = {
    "code-analyzer", "collect", "diff-files", "flaky-check", "json-query", "list-files",
    "markdown-report", "number-stats", "read-file", "run-tests", "text-stats", "write-file",
}  # fmt: skip
INSTRUCTION_SKILLS = {"code-review-checklist", "pipeline-authoring", "writing-skills"}
OFF_BY_DEFAULT = {"shell-command"}


async def call(home: Path, name: str, arguments: dict[str, Any], **kwargs: Any) -> CallToolResult:
    async with Client(create_server(home=home)) as client:
        return await client.call_tool(name, arguments, **kwargs)


async def ok(home: Path, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await call(home, name, arguments)
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


async def error_text(home: Path, name: str, arguments: dict[str, Any]) -> str:
    """The message and hint of a failed call (its error envelope), as one text."""
    result = await call(home, name, arguments)
    error = envelope(result)
    assert "Traceback" not in result.content[0].text
    return f"{error['message']}\nHint: {error['hint']}" if error["hint"] else error["message"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small Python project with the clutter real projects have."""
    root = tmp_path / "project"
    files = {
        "pkg/__init__.py": "",
        "pkg/core.py": '''\
            """Core logic."""
            import os
            from collections.abc import Mapping
            from . import helpers


            # Storage of things.
            class Store(Base):
                """A store."""

                def load(self, key, default=None):
                    if key in self.data and default:
                        return self.data[key]
                    elif key:
                        for item in self.items:
                            if item:
                                return item
                    return default

                async def save(self):
                    return None


            def shout(text):
                return text.upper()
            ''',
        "pkg/helpers.py": "def helper(a, b, *rest, **options):\n    return [x for x in rest if x]\n",
        "pkg/__pycache__/core.cpython-311.pyc": "",
        ".venv/lib/site.py": "x = 1\n",
        "node_modules/lib/index.py": "",
        "README.md": "# Project\n",
        "setup.py": "print('setup')\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


# -- the library as a whole -----------------------------------------------------------------


async def test_every_builtin_skill_is_a_tool_with_explicit_schemas_title_and_honest_annotations(
    home: Path,
) -> None:
    async with Client(create_server(home=home)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert TOOL_SKILLS | INSTRUCTION_SKILLS <= set(tools)
    assert not OFF_BY_DEFAULT & set(tools)
    for name in TOOL_SKILLS:
        tool = tools[name]
        assert tool.title, name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False, name
        assert all(prop.get("description") for prop in schema["properties"].values()), name
        hints = tool.annotations
        assert hints is not None, name
        assert None not in (
            hints.read_only_hint,
            hints.destructive_hint,
            hints.idempotent_hint,
            hints.open_world_hint,
        ), name
    assert tools["list-files"].annotations.read_only_hint is True
    assert tools["write-file"].annotations.read_only_hint is False
    for name in INSTRUCTION_SKILLS:
        assert tools[name].description.startswith("Instructions:")


def test_builtin_skill_folders_pass_strict_validation() -> None:
    folders = sorted(p for p in BUILTIN_SKILLS_DIR.iterdir() if (p / "SKILL.md").is_file())
    assert {p.name for p in folders} == TOOL_SKILLS | INSTRUCTION_SKILLS | OFF_BY_DEFAULT
    for folder in folders:
        _, _, problems = check_folder(folder, strict=True)
        assert problems == [], [str(p) for p in problems]


def test_python_defaults_match_the_published_schema_defaults() -> None:
    """What the schema advertises as a default is what the function does when it is omitted."""
    for folder in sorted(BUILTIN_SKILLS_DIR.iterdir()):
        contract_file = folder / "skill.yaml"
        if not contract_file.is_file():
            continue
        contract = yaml.safe_load(contract_file.read_text())
        module, _, function = contract["run"]["python"].partition(":")
        spec = importlib.util.spec_from_file_location(f"_check_{folder.name}", folder / f"{module}.py")
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        params = {k: p for k, p in inspect.signature(getattr(loaded, function)).parameters.items() if k != "ctx"}
        properties = contract["inputs"]["properties"]
        assert set(params) == set(properties), folder.name
        for name, param in params.items():
            if name in contract["inputs"].get("required", []):
                assert param.default is inspect.Parameter.empty, (folder.name, name)
            elif "default" in properties[name] and param.default is not None:
                assert param.default == properties[name]["default"], (folder.name, name)
            elif "default" not in properties[name]:
                assert param.default is None, (folder.name, name)


# -- list-files ------------------------------------------------------------------------------


async def test_list_files_globs_recursively_sorted_and_skips_hidden_and_cache_folders(
    home: Path, project: Path
) -> None:
    result = await ok(home, "list-files", {"directory": str(project), "pattern": "**/*.py"})
    assert result["relative"] == ["pkg/__init__.py", "pkg/core.py", "pkg/helpers.py", "setup.py"]
    assert result["paths"] == [str(project.resolve() / rel) for rel in result["relative"]]
    assert (result["count"], result["total"], result["truncated"]) == (4, 4, False)
    assert result["root"] == str(project.resolve())

    top_level = await ok(home, "list-files", {"directory": str(project), "pattern": "*.py"})
    assert top_level["relative"] == ["setup.py"]


async def test_list_files_caps_results_and_can_include_hidden_files(home: Path, project: Path) -> None:
    capped = await ok(home, "list-files", {"directory": str(project), "max_results": 2})
    assert capped["count"] == 2 and capped["total"] == 5 and capped["truncated"] is True
    everything = await ok(
        home,
        "list-files",
        {"directory": str(project), "pattern": "**/*.py", "include_hidden": True, "exclude": []},
    )
    assert ".venv/lib/site.py" in everything["relative"]
    assert "node_modules/lib/index.py" in everything["relative"]


async def test_list_files_reports_a_missing_directory_and_an_escaping_pattern(home: Path, tmp_path: Path) -> None:
    text = await error_text(home, "list-files", {"directory": str(tmp_path / "nope")})
    assert "directory not found" in text and "Hint:" in text
    text = await error_text(home, "list-files", {"directory": str(tmp_path), "pattern": "../*"})
    assert "'..'" in text


# -- read-file -------------------------------------------------------------------------------


async def test_read_file_returns_a_line_range_and_caps_bytes(home: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("one\ntwo\nthree\nfour\n", encoding="utf-8")
    whole = await ok(home, "read-file", {"path": str(notes)})
    assert whole["content"] == "one\ntwo\nthree\nfour\n"
    assert (whole["lines"], whole["size"], whole["truncated"]) == (4, 19, False)

    middle = await ok(home, "read-file", {"path": str(notes), "start_line": 2, "end_line": 3})
    assert middle["content"] == "two\nthree\n"
    assert (middle["start_line"], middle["end_line"], middle["lines"]) == (2, 3, 2)

    capped = await ok(home, "read-file", {"path": str(notes), "max_bytes": 6})
    assert capped["content"] == "one\ntw" and capped["truncated"] is True


async def test_read_file_refuses_binary_and_wrongly_encoded_files_with_a_hint(home: Path, tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    assert "binary" in await error_text(home, "read-file", {"path": str(tmp_path / "blob.bin")})
    (tmp_path / "latin.txt").write_bytes("café\n".encode("latin-1"))
    text = await error_text(home, "read-file", {"path": str(tmp_path / "latin.txt")})
    assert "not valid utf-8" in text and "encoding" in text
    latin = await ok(home, "read-file", {"path": str(tmp_path / "latin.txt"), "encoding": "latin-1"})
    assert latin["content"] == "café\n"
    assert "file not found" in await error_text(home, "read-file", {"path": str(tmp_path / "missing.txt")})


# -- write-file ------------------------------------------------------------------------------


async def test_write_file_writes_inside_the_run_artifact_directory(home: Path) -> None:
    result = await ok(home, "write-file", {"path": "out/summary.md", "content": "héllo\n"})
    written = Path(result["path"])
    assert written.read_text(encoding="utf-8") == "héllo\n"
    assert result["bytes"] == len("héllo\n".encode())
    assert result["relative"] == "out/summary.md"
    assert written.is_relative_to(home.resolve()) and written.parent.parent == Path(result["artifact_dir"])


@pytest.mark.parametrize("path", ["/etc/passwd-copy", "../escape.txt", "a/../../escape.txt"])
async def test_write_file_refuses_paths_that_leave_the_artifact_directory(home: Path, path: str) -> None:
    text = await error_text(home, "write-file", {"path": path, "content": "x"})
    assert "artifact directory" in text or "absolute" in text
    assert not (home / "escape.txt").exists() and not (home.parent / "escape.txt").exists()


# -- code-analyzer ---------------------------------------------------------------------------


async def test_code_analyzer_measures_functions_classes_imports_and_lines(home: Path, project: Path) -> None:
    result = await ok(home, "code-analyzer", {"path": str(project / "pkg/core.py"), "complexity_threshold": 4})
    functions = {f["qualname"]: f for f in result["functions"]}
    assert set(functions) == {"Store.load", "Store.save", "shout"}
    # if + `and` + elif + for + inner if = 1 + 5
    assert functions["Store.load"]["complexity"] == 6
    assert functions["Store.load"]["args"] == 3 and functions["Store.load"]["line"] == 11
    assert functions["Store.save"]["is_async"] is True and functions["shout"]["complexity"] == 1
    assert result["classes"] == [
        {
            "name": "Store",
            "qualname": "Store",
            "line": 8,
            "end_line": 21,
            "bases": ["Base"],
            "methods": ["load", "save"],
            "has_docstring": True,
        },
    ]
    assert result["imports"] == [".", "collections.abc", "os"]
    assert (result["total_lines"], result["comment_lines"]) == (25, 1)
    assert result["code_lines"] + result["comment_lines"] + result["blank_lines"] == 25
    assert result["max_complexity"] == 6 and result["average_complexity"] == round(8 / 3, 2)
    assert result["complex_functions"] == ["Store.load"]
    assert result["ok"] is True and result["error"] is None and result["path"] == str(project / "pkg/core.py")


async def test_code_analyzer_reports_a_syntax_error_as_a_result(home: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n    pass\n")
    result = await ok(home, "code-analyzer", {"path": str(broken)})
    assert result["ok"] is False
    assert result["error"]["type"] == "SyntaxError" and result["error"]["line"] == 1
    assert result["functions"] == [] and result["total_lines"] == 2


async def test_code_analyzer_records_parse_warnings_instead_of_failing(home: Path) -> None:
    source = "pattern = '\\d+'\n"
    result = await ok(home, "code-analyzer", {"source": source})
    assert result["ok"] is True and result["path"] is None
    with warnings.catch_warnings(record=True) as caught:  # what Python's parser warns of it, in its words
        warnings.simplefilter("always")
        ast.parse(source, filename="<source>")
    (said,) = caught
    assert result["warnings"] == [f"line 1: {said.message}"]


async def test_code_analyzer_refuses_a_directory_and_missing_arguments(home: Path, project: Path) -> None:
    assert "is a directory" in await error_text(home, "code-analyzer", {"path": str(project)})
    assert "exactly one of" in await error_text(home, "code-analyzer", {})


# -- text-stats ------------------------------------------------------------------------------


async def test_text_stats_counts_words_sentences_and_top_words(home: Path, tmp_path: Path) -> None:
    text = "Skills are folders. Pipelines chain skills! Is it fast?\n\nYes: 3.5 times faster"
    result = await ok(home, "text-stats", {"text": text, "top": 2})
    assert result["words"] == 13 and result["sentences"] == 4 and result["paragraphs"] == 2
    assert result["lines"] == 3 and result["characters"] == len(text)
    assert result["top_words"][0] == {"word": "skills", "count": 2}
    assert result["reading_time_seconds"] == 4

    doc = tmp_path / "doc.txt"
    doc.write_text(text)
    from_file = await ok(home, "text-stats", {"path": str(doc), "top": 2})
    assert from_file["words"] == 13 and from_file["path"] == str(doc.resolve())


# -- json-query ------------------------------------------------------------------------------


async def test_json_query_follows_paths_wildcards_and_defaults(home: Path, tmp_path: Path) -> None:
    data = {"items": [{"name": "a", "tags": ["x"]}, {"name": "b"}], "odd.key": {"v": [1, 2, 3]}}
    names = await ok(home, "json-query", {"data": data, "query": "items[*].name"})
    assert names == {"query": "items[*].name", "result": ["a", "b"], "found": True, "count": 2}
    assert (await ok(home, "json-query", {"data": data, "query": "items[0].tags[-1]"}))["result"] == "x"
    assert (await ok(home, "json-query", {"data": data, "query": '["odd.key"].v[1:]'}))["result"] == [2, 3]
    missing = await ok(home, "json-query", {"data": data, "query": "items[5].name", "default": "none"})
    assert missing["found"] is False and missing["result"] == "none"

    file = tmp_path / "data.json"
    file.write_text(json.dumps(data))
    assert (await ok(home, "json-query", {"path": str(file), "query": "items.1.name"}))["result"] == "b"


async def test_json_query_reports_a_bad_query_with_its_position(home: Path) -> None:
    text = await error_text(home, "json-query", {"data": {"a": 1}, "query": "a..b"})
    assert "character 3" in text and "Hint:" in text


# -- diff-files ------------------------------------------------------------------------------


async def test_diff_files_gives_a_unified_diff_with_counts(home: Path, tmp_path: Path) -> None:
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text("alpha\nbeta\ngamma\n")
    new.write_text("alpha\nBETA\ngamma\ndelta\n")
    result = await ok(home, "diff-files", {"old_path": str(old), "new_path": str(new)})
    assert (result["added"], result["removed"], result["hunks"], result["identical"]) == (2, 1, 1, False)
    assert result["diff"].splitlines()[:2] == [f"--- {old}", f"+++ {new}"]
    assert "-beta" in result["diff"] and "+BETA" in result["diff"] and "+delta" in result["diff"]

    same = await ok(home, "diff-files", {"old_path": str(old), "new_text": old.read_text()})
    assert same["identical"] is True and same["diff"] == ""
    assert "exactly one of" in await error_text(home, "diff-files", {"old_text": "a"})


# -- run-tests -------------------------------------------------------------------------------


def write_tests(folder: Path, text: str, name: str = "test_sample.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(text))
    return folder


async def test_run_tests_summarises_passes_failures_errors_and_skips(home: Path, tmp_path: Path) -> None:
    tests = write_tests(
        tmp_path / "suite",
        """\
        import pytest

        def test_passes():
            assert True

        def test_fails():
            assert 1 == 2, "one is not two"

        @pytest.mark.skip(reason="later")
        def test_skipped():
            pass

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture exploded")

        def test_errors(broken):
            pass

        class TestGroup:
            def test_in_class(self):
                assert False
        """,
    )
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    result = await call(home, "run-tests", {"path": str(tests)}, progress_callback=on_progress)
    assert not result.is_error, result.content[0].text
    summary = result.structured_content
    assert summary is not None
    counts = {k: summary[k] for k in ("passed", "failed", "errors", "skipped", "total")}
    assert counts == {"passed": 1, "failed": 2, "errors": 1, "skipped": 1, "total": 5}
    assert summary["ok"] is False and summary["exit_code"] == 1 and summary["timed_out"] is False
    failures = {f["test"]: f for f in summary["failures"]}
    assert set(failures) == {
        "test_sample.py::test_fails",
        "test_sample.py::test_errors",
        "test_sample.py::TestGroup::test_in_class",
    }
    assert "one is not two" in failures["test_sample.py::test_fails"]["message"]
    assert failures["test_sample.py::test_fails"]["line"] == 6
    assert failures["test_sample.py::test_errors"]["kind"] == "error"
    assert "fixture exploded" in failures["test_sample.py::test_errors"]["details"]
    assert progress and progress[-1] == 100


async def test_run_tests_with_no_tests_is_ok_and_a_missing_path_is_an_error(home: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = await ok(home, "run-tests", {"path": str(tmp_path / "empty")})
    assert result["ok"] is True and result["total"] == 0 and result["exit_code"] == 5
    assert "path not found" in await error_text(home, "run-tests", {"path": str(tmp_path / "nowhere")})


@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
async def test_run_tests_stopped_at_its_timeout_leaves_nothing_running(home: Path, tmp_path: Path) -> None:
    tests = write_tests(tmp_path / "slow", "import threading\n\ndef test_hangs():\n    threading.Event().wait()\n")
    result = await ok(home, "run-tests", {"path": str(tests), "timeout": 0.5})
    assert result["timed_out"] is True and result["ok"] is False
    await assert_none_left(tmp_path)  # pytest and its jail


@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
async def test_run_tests_cancelled_kills_the_suite_and_every_child_even_one_that_left_its_group(
    home: Path, tmp_path: Path
) -> None:
    tests = write_tests(
        tmp_path / "hang",
        """\
        import subprocess, sys, threading

        def test_hangs():
            wait = "import threading; threading.Event().wait()"
            subprocess.Popen([sys.executable, "-c", wait, __file__])  # in pytest's process group
            subprocess.Popen([sys.executable, "-c", wait, __file__], start_new_session=True)  # left it
            threading.Event().wait()
        """,
    )
    marker = str(tests / "test_sample.py")
    async with Client(create_server(home=home)) as client, anyio.create_task_group() as tg:
        tg.start_soon(lambda: client.call_tool("run-tests", {"path": str(tests), "timeout": 600}))
        with anyio.fail_after(60):  # pytest starts slowly on a busy machine; no event says the children run
            while len(holding(marker)) < 2:
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    await assert_none_left(tmp_path)  # pytest, both children and the jail


# -- markdown-report -------------------------------------------------------------------------


async def test_markdown_report_renders_records_as_a_table_into_an_artifact_file(home: Path) -> None:
    data = {
        "files": 2,
        "results": [
            {"path": "a.py", "max_complexity": 3, "functions": [{"name": "f"}], "imports": ["os"]},
            {"path": "b.py", "max_complexity": 12, "functions": [], "imports": []},
        ],
    }
    result = await ok(home, "markdown-report", {"title": "Review", "data": data, "description": "Two files."})
    report = Path(result["path"])
    text = report.read_text(encoding="utf-8")
    assert text == result["markdown"] and result["bytes"] == len(text.encode())
    assert report.name == "report.md" and report.is_relative_to(home.resolve())
    assert text.startswith("# Review\n\nTwo files.\n")
    assert "- **files**: 2" in text
    assert "| path | max_complexity | functions | imports |" in text
    assert "| a.py | 3 | 1 item | os |" in text and "| b.py | 12 |  |  |" in text


async def test_markdown_report_renders_a_custom_sandboxed_template(home: Path) -> None:
    template = "# {{ title }}\n{% for r in data.items %}- {{ r.name }}: {{ r.score }}\n{% endfor %}"
    data = {"items": [{"name": "x", "score": 1}, {"name": "y", "score": 2}]}
    arguments = {"title": "Scores", "data": data, "template": template, "filename": "out/scores.md"}
    result = await ok(home, "markdown-report", arguments)
    assert result["markdown"] == "# Scores\n- x: 1\n- y: 2\n"
    assert Path(result["path"]).parts[-2:] == ("out", "scores.md")

    unsafe = await error_text(home, "markdown-report", {"title": "t", "template": "{{ title.__class__.__mro__ }}"})
    assert "not allowed" in unsafe and "__mro__" in unsafe
    undefined = await error_text(home, "markdown-report", {"title": "t", "template": "{{ missing }}"})
    assert "undefined variable 'missing'" in undefined
    escaping = await error_text(home, "markdown-report", {"title": "t", "filename": "../../report.md"})
    assert "artifact directory" in escaping


# -- collect and number-stats: aggregation after a parallel `for` ----------------------------


async def test_the_bricks_compose_into_a_hotspot_report(home: Path, project: Path) -> None:
    """list-files -> code-analyzer per file -> collect / number-stats -> markdown-report."""
    async with Client(create_server(home=home)) as client:

        async def run(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, result.content[0].text
            assert result.structured_content is not None
            return result.structured_content

        files = await run("list-files", {"directory": str(project), "pattern": "pkg/*.py"})
        analyses = [await run("code-analyzer", {"path": path}) for path in files["paths"]]
        hotspots = await run(
            "collect",
            {
                "items": analyses,
                "unnest": "functions",
                "keep": ["path"],
                "where": [{"field": "complexity", "op": ">", "value": 1}],
                "sort_by": "complexity",
                "descending": True,
                "limit": 2,
                "fields": ["path", "qualname", "complexity"],
            },
        )
        stats = await run("number-stats", {"values": analyses, "field": "max_complexity", "percentiles": [50]})
        report = await run("markdown-report", {"title": "Hot spots", "data": hotspots["items"]})

    core, helpers = str(project / "pkg/core.py"), str(project / "pkg/helpers.py")
    assert hotspots["items"] == [
        {"path": core, "qualname": "Store.load", "complexity": 6},
        {"path": helpers, "qualname": "helper", "complexity": 3},
    ]
    assert (hotspots["total"], hotspots["count"], hotspots["returned"]) == (4, 2, 2)
    assert (stats["count"], stats["max"], stats["min"], stats["median"]) == (3, 6, 0, 3.0)
    assert files["paths"][stats["max_index"]] == core
    assert "| Store.load | 6 |" in Path(report["path"]).read_text()


async def test_collect_filters_plain_values_and_reports_a_bad_regex(home: Path) -> None:
    where = [{"field": ".", "op": ">=", "value": 2}]
    result = await ok(home, "collect", {"items": [5, 1, 4, 2], "where": where, "sort_by": ".", "limit": 2})
    assert result == {"items": [2, 4], "count": 3, "total": 4, "returned": 2}
    text = await error_text(home, "collect", {"items": [], "where": [{"field": "a", "op": "matches", "value": "("}]})
    assert "bad regular expression" in text


async def test_number_stats_skips_non_numbers_and_handles_an_empty_list(home: Path) -> None:
    result = await ok(home, "number-stats", {"values": [2, 3, "x", 6, 11, None], "percentiles": [90]})
    assert (result["count"], result["ignored"], result["sum"], result["mean"], result["median"]) == (
        4,
        2,
        22,
        5.5,
        4.5,
    )
    assert result["percentiles"] == {"p90": 9.5} and result["max_index"] == 4
    empty = await ok(home, "number-stats", {"values": []})
    assert empty["count"] == 0 and empty["mean"] is None


# -- flaky-check -----------------------------------------------------------------------------


async def test_flaky_check_succeeds_from_the_given_attempt(home: Path) -> None:
    outcomes = [(await ok(home, "flaky-check", {"attempt": n, "succeed_at": 3}))["ok"] for n in (1, 2, 3, 4)]
    assert outcomes == [False, False, True, True]
    text = await error_text(home, "flaky-check", {"attempt": 1, "succeed_at": 2, "fail_with_error": True})
    assert "attempt 1 failed" in text and "retry" in text


async def test_flaky_check_counts_calls_within_one_run(home: Path) -> None:
    """Without `attempt`, calls are counted per run; a bare tool call is a run of its own."""
    first = await ok(home, "flaky-check", {"succeed_at": 2})
    second = await ok(home, "flaky-check", {"succeed_at": 2})
    assert first["attempt"] == second["attempt"] == 1 and first["ok"] is False


# -- shell-command (off by default) ----------------------------------------------------------


async def test_shell_command_is_off_by_default(home: Path) -> None:
    async with Client(create_server(home=home)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("shell-command", {"argv": ["echo", "hi"]})
    assert "shell-command" not in names
    assert result.is_error and "disabled" in result.content[0].text


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX programs")
async def test_shell_command_once_enabled_runs_argv_without_a_shell_in_a_scrubbed_env(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCHESTRATOR_TEST_SECRET", "hunter2")
    (home / "skills").mkdir(parents=True)
    (home / "skills" / "registry.yaml").write_text("skills:\n  shell-command: {source: builtin, enabled: true}\n")
    async with Client(create_server(home=home)) as client:
        echo = await client.call_tool("shell-command", {"argv": ["echo", "a; rm -rf / $(whoami)"]})
        env = await client.call_tool("shell-command", {"argv": ["env"]})
        slow = await client.call_tool("shell-command", {"argv": ["sleep", "30"], "timeout": 0.5})
    assert echo.structured_content is not None and env.structured_content is not None
    assert echo.structured_content["stdout"] == "a; rm -rf / $(whoami)\n"
    assert "hunter2" not in env.structured_content["stdout"]
    assert f"HOME={env.structured_content['cwd']}" in env.structured_content["stdout"]
    assert slow.structured_content is not None
    assert slow.structured_content["timed_out"] is True and slow.structured_content["ok"] is False


# -- instructions skills ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("code-review-checklist", "references/checklist.md"),
        ("code-review-checklist", "references/python-pitfalls.md"),
        ("pipeline-authoring", "references/syntax.md"),
        ("writing-skills", "references/format.md"),
    ],
)
async def test_instructions_skills_return_their_body_and_serve_their_references(
    home: Path, name: str, reference: str
) -> None:
    async with Client(create_server(home=home)) as client:
        result = await client.call_tool(name, {"task": "review pkg/core.py"})
        content = await client.read_resource(f"skill://{name}/{reference}")
    assert not result.is_error and result.structured_content is not None
    assert reference in result.structured_content["files"]
    assert f"`{reference}`" in result.structured_content["instructions"]
    text = content.contents[0].text  # type: ignore[union-attr]
    assert text.startswith("# ") and len(text) > 500
