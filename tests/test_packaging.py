"""What a stranger installs: the wheel in a fresh venv (not editable), and `uvx --from <checkout>`.

Every other test sees the checkout, where files the wheel forgets are still on disk. Here the
wheel (built once per session with `uv build`: sdist first, the wheel from the sdist, as an
index would) is installed into a fresh venv whose only copy of our packages is the wheel's;
the dependencies are borrowed from the test venv through a `.pth` path line (a path line adds
a directory to sys.path without running its `.pth` hooks, so the checkout's editable finder
stays out). Every command runs with its working directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.fixtures.adapter_support import UVX, uv_env

REPO = Path(__file__).resolve().parents[1]
UV = str(Path(sys.executable).parent / "uv")
BUILD_TIMEOUT = 600  # seconds: the first build downloads setuptools into uv's cache
FIRST_UVX_TIMEOUT = 600  # seconds: the first `uvx --from` downloads every dependency into uv's cache
SHIPPED_DATA = ("skills/builtin", "skills/defaults", "pipelines/examples")


def _files_under(root: Path, rel: str) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in (root / rel).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    try:
        done = subprocess.run(
            [UV, "build", "--out-dir", str(out), str(REPO)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            cwd=out,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"uv build did not finish within {BUILD_TIMEOUT}s")
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = out.glob("*.whl")
    return found


@pytest.fixture(scope="session")
def fresh_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding our packages only from the wheel; returns its bin/ folder."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run(
        [UV, "pip", "install", "--python", str(python), "--no-deps", "--offline", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin"


@pytest.fixture
def outside(tmp_path: Path, home: Path) -> Iterator[dict[str, str]]:
    """The environment of a command run outside the checkout (cwd: tmp_path)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["ORCHESTRATOR_HOME"] = str(home)
    yield env


def _run(
    bin_dir: Path, *args: str, env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(bin_dir / "orchestrator"), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _examples_in(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {
            Path(name).stem
            for name in archive.namelist()
            if name.startswith("pipelines/examples/") and name.endswith(".yaml")
        }


def test_the_wheel_carries_every_builtin_skill_file_example_pipeline_doc_and_the_license(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    expected = set().union(*(_files_under(REPO, rel) for rel in SHIPPED_DATA))
    assert any(n.endswith("/references/checklist.md") for n in expected)  # the walk found bundled files
    assert expected - names == set()
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    docs = {
        f"mcp_orchestrator-0.1.0.data/data/share/doc/mcp-orchestrator/{p.name}" for p in (REPO / "docs").glob("*.md")
    }
    assert docs and docs <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def _project(root: Path) -> dict[str, Path]:
    """Inputs for the examples: a tiny project, text files, Markdown files."""
    project = root / "project"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    if a:\n        return a + b\n    return b\n")
    (project / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    texts = root / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text("one\ntwo\n")
    (texts / "b.txt").write_text("one\nthree\n")
    (texts / "notes.md").write_text("# Notes\n\nSome words to measure here.\n")
    return {"project": project, "texts": texts}


def _arguments(paths: dict[str, Path]) -> dict[str, dict[str, Any]]:
    project, texts = str(paths["project"]), str(paths["texts"])
    return {
        "code-review": {"directory": project, "top": 1},
        "docs-digest": {"directory": texts},
        "fan-out": {"count": 12},
        "project-health": {"directory": project},
        "retry-until-success": {"succeed_at": 2},
        "route-by-complexity": {"path": str(paths["project"] / "calc.py")},
        "running-totals": {"values": [1, 2, 3]},
        "similarity-matrix": {"directory": texts},
    }


def test_a_wheel_install_runs_from_its_own_files_not_the_checkout(
    fresh_venv: Path, outside: dict[str, str], tmp_path: Path
) -> None:
    names = ("adapters", "mcp_server", "pipelines", "skills")
    code = f"import importlib; print(*(importlib.import_module(n).__file__ for n in {names!r}))"
    done = subprocess.run(
        [str(fresh_venv / "python"), "-c", code], capture_output=True, text=True, env=outside, cwd=tmp_path, check=True
    )
    site = str(fresh_venv.parent / "lib")
    assert all(path.startswith(site) for path in done.stdout.split()), done.stdout


def test_a_wheel_install_lists_every_example_pipeline(
    wheel: Path, fresh_venv: Path, outside: dict[str, str], tmp_path: Path
) -> None:
    done = _run(fresh_venv, "pipelines", "list", "--json", env=outside, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listed = {p["id"]: p for p in json.loads(done.stdout)["pipelines"]}
    assert set(listed) == _examples_in(wheel) == {p.stem for p in (REPO / "pipelines" / "examples").glob("*.yaml")}
    assert {p["source"] for p in listed.values()} == {"builtin"}
    total = _run(fresh_venv, "call", "running-totals", "--arg", "values=[2,3]", env=outside, cwd=tmp_path)
    assert total.returncode == 0, total.stderr
    assert json.loads(total.stdout)["total"] == 5


PARTIAL_WITHOUT_PYTEST = {"code-review", "project-health"}
"""Examples that run the project's tests: the fresh environment has no pytest, so they end PARTIAL."""


async def test_a_wheel_install_serves_and_runs_every_example_over_stdio(
    wheel: Path, fresh_venv: Path, outside: dict[str, str], tmp_path: Path
) -> None:
    arguments = _arguments(_project(tmp_path))
    assert set(arguments) == _examples_in(wheel), "give the new example its arguments here"
    params = StdioServerParameters(command=str(fresh_venv / "orchestrator"), args=["serve"], env=outside, cwd=tmp_path)
    with anyio.fail_after(300):
        async with Client(params, mode="legacy") as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert set(arguments) <= tools
            for name, args in sorted(arguments.items()):
                result = await client.call_tool(name, args)
                if name in PARTIAL_WITHOUT_PYTEST:  # its tests step fails (on_error: continue): PARTIAL, outputs kept
                    assert result.is_error and "ended PARTIAL" in getattr(result.content[0], "text", ""), result
                else:
                    assert not result.is_error, (name, result.content)
                assert result.structured_content is not None and result.structured_content["run_id"]
            listed = await client.read_resource("skill://code-review-checklist/references/checklist.md")
    assert listed.contents and getattr(listed.contents[0], "text", "")


async def test_uvx_from_the_checkout_serves_over_stdio(tmp_path: Path, home: Path) -> None:
    """`uvx --from <checkout> orchestrator serve`: uv builds the checkout (a normal, non-editable
    install) into its own cached environment; `--refresh-package` rebuilds what changed."""
    env = {"PATH": os.environ["PATH"], "ORCHESTRATOR_HOME": str(home), **uv_env()}
    args = ["--refresh-package", "mcp-orchestrator", "--from", str(REPO), "orchestrator", "serve"]
    params = StdioServerParameters(command=UVX, args=args, env=env, cwd=tmp_path)
    with anyio.fail_after(FIRST_UVX_TIMEOUT):
        async with Client(params, mode="legacy") as client:
            assert client.server_info is not None and client.server_info.name == "orchestrator"
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"running-totals", "code-analyzer", "validate_pipeline"} <= tools
            result = await client.call_tool("running-totals", {"values": [4, 5]})
    assert not result.is_error, result.content
    assert result.structured_content is not None and result.structured_content["total"] == 9


def test_a_wheel_install_prints_the_reference_errors_cite(
    fresh_venv: Path, outside: dict[str, str], tmp_path: Path
) -> None:
    listed = _run(fresh_venv, "docs", env=outside, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert f"(in {fresh_venv.parent / 'share' / 'doc' / 'mcp-orchestrator'})" in listed.stdout
    section = _run(fresh_venv, "docs", "docs/pipelines.md#on_error-continue", env=outside, cwd=tmp_path)
    assert section.returncode == 0, section.stderr
    assert section.stdout.startswith("## on_error: continue\n") and "step_failed" in section.stdout
