"""run-tests: run pytest in a confined subprocess and summarise its JUnit XML report.

The tests are code the server did not write, so pytest runs in a jail (`skills.executors.confine`):
the project folder (which must be inside the allowed roots) and the interpreter read-only, a
private /tmp (pytest's tmp_path), no network unless this skill's skill.yaml says
`network: true`, a scrubbed environment, and a process limit. A timeout or a cancelled call
stops the whole jail (SIGTERM, grace, SIGKILL): nothing the tests started outlives the call,
without bubblewrap too (its process group, and what left it but carries the jail's token).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import anyio

from skills.executors.confine import SYSTEM_PATH, Jail, Jailed
from skills.core.base import SkillContext
from skills.core.errors import SkillRunError
from skills.executors.isolation import isolation_of
from skills.core.roots import allowed_path, roots_of

_OUTPUT_TAIL = 8000
_DETAILS = 2000
_PERCENT = re.compile(rb"\[\s*(\d{1,3})%\]")
_NPROC = 512  # pytest-xdist workers and the processes tests start
_TMP_MB = 1024


def _test_id(case: ET.Element) -> str:
    name = case.get("name", "")
    classname = case.get("classname", "")
    file = case.get("file")
    if file and not classname:  # a collection error: the whole module failed to import
        return file
    if file and file.endswith(".py"):
        module = file[:-3].replace("/", ".").replace("\\", ".")
        rest = classname[len(module) :].lstrip(".") if classname.startswith(module) else ""
        return "::".join(part for part in (file, *rest.split("."), name) if part)
    return f"{classname}::{name}" if classname else name


def _summarise(xml_file: Path, max_failures: int) -> dict[str, Any] | None:
    try:
        root = ET.parse(xml_file).getroot()
    except (OSError, ET.ParseError):
        return None
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures: list[dict[str, Any]] = []
    for case in root.iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "errors"
                if len(failures) < max_failures:
                    text = (child.text or "").strip()
                    message = child.get("message") or (text.splitlines()[0] if text else child.tag)
                    failures.append(
                        {
                            "test": _test_id(case),
                            "kind": child.tag,
                            "message": message[:500],
                            "details": text[-_DETAILS:],
                            "file": case.get("file"),
                            "line": int(line) + 1 if (line := case.get("line") or "").isdigit() else None,
                        }
                    )
                break
            if child.tag == "skipped":
                outcome = "skipped"
        counts[outcome] += 1
    return {**counts, "total": sum(counts.values()), "failures": failures}


def _install_of(interpreter: str, ctx: SkillContext | None) -> tuple[Path, ...]:
    """The folders of a `python` the jail must show: its venv and its base installation.

    Only folders that are a Python installation (a venv's pyvenv.cfg, or a lib/python3.*),
    never a secret one: a client cannot use `python` to make an arbitrary folder readable.
    """
    found: list[Path] = []
    for exe in (Path(interpreter), Path(os.path.realpath(interpreter))):
        prefix = Path(os.path.realpath(exe.parent.parent))
        if prefix in found:
            continue
        looks = (prefix / "pyvenv.cfg").is_file() or any(prefix.glob("lib/python3*"))
        if not looks or prefix == Path("/") or roots_of(getattr(ctx, "extras", None)).never(prefix):
            raise SkillRunError(
                f"python: {interpreter} is not inside a Python installation the sandbox can show ({prefix})",
                hint="give the python of a virtual environment or of a system installation",
            )
        found.append(prefix)
    return tuple(found)


def _interpreter(python: str | None) -> str:
    if python is None:
        return sys.executable
    found = Path(python).expanduser()
    if found.is_file():
        return str(found)
    import shutil

    which = shutil.which(python)
    if which is None:
        raise SkillRunError(
            f"python interpreter not found: {python}", hint="give the path of a python executable"
        )
    return which


async def run_tests(
    path: str,
    keyword: str | None = None,
    markers: str | None = None,
    extra_args: list[str] | None = None,
    cwd: str | None = None,
    python: str | None = None,
    timeout: float = 300,
    max_failures: int = 20,
    ctx: SkillContext | None = None,
) -> dict[str, Any]:
    target = allowed_path(ctx, path)
    if not target.exists():
        raise SkillRunError(
            f"path not found: {path}", hint="give a test file or a folder that contains tests"
        )
    workdir = allowed_path(ctx, cwd, field="cwd") if cwd else (target if target.is_dir() else target.parent)
    if not workdir.is_dir():
        raise SkillRunError(f"cwd is not a directory: {cwd}", hint="give the project's root folder")
    interpreter = _interpreter(python)
    extras = ctx.extras if ctx is not None else {}
    isolation = await anyio.to_thread.run_sync(isolation_of, extras)
    installs = _install_of(interpreter, ctx) if python is not None and isolation.available else ()

    with tempfile.TemporaryDirectory(prefix="orchestrator-run-tests-") as tmp:
        report = Path(tmp).resolve()
        xml_file = report / "junit.xml"
        command = [
            interpreter, "-m", "pytest", str(target), "-q", "--color=no", "-p", "no:cacheprovider",
            f"--junitxml={xml_file}", "-o", "junit_family=xunit1",
        ]  # fmt: skip
        if keyword:
            command += ["-k", keyword]
        if markers:
            command += ["-m", markers]
        command += list(extra_args or [])
        path_var = SYSTEM_PATH if isolation.available else os.environ.get("PATH", SYSTEM_PATH)
        env = {"PATH": os.pathsep.join([str(Path(interpreter).parent), path_var]), "LANG": "C.UTF-8"}
        env.update(LC_ALL="C.UTF-8", PYTHONDONTWRITEBYTECODE="1", PY_COLORS="0", NO_COLOR="1")
        jail = Jail(
            workdir=report,
            cwd=workdir,
            read_only=(workdir, target, *installs),
            network=ctx is not None and bool(ctx.limits.get("network", False)),
            nproc=_NPROC,
            tmp_mb=_TMP_MB,
        )

        if ctx is not None:
            await ctx.progress(0, 100, f"pytest {target.name}")
        started = time.monotonic()
        try:
            jailed = await Jailed.open(command, jail, isolation, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        except OSError as exc:
            raise SkillRunError(
                f"cannot start {interpreter}: {exc.strerror}", hint="check `python`"
            ) from None

        process = jailed.process
        output = bytearray()
        percent = -1
        timed_out = False
        try:
            with anyio.move_on_after(timeout) as scope:
                assert process.stdout is not None
                async for chunk in process.stdout:
                    output += chunk
                    if len(output) > 4 * _OUTPUT_TAIL:
                        del output[: len(output) - 2 * _OUTPUT_TAIL]
                    found = _PERCENT.findall(chunk)
                    if ctx is not None and found and int(found[-1]) != percent:
                        percent = int(found[-1])
                        await ctx.progress(percent, 100, f"pytest {percent}%")
                await process.wait()
            timed_out = scope.cancelled_caught
        finally:
            await jailed.close()
        duration = round(time.monotonic() - started, 3)
        exit_code = process.returncode if process.returncode is not None else -1
        killer = jailed.signal(exit_code)
        exit_code = -killer if killer is not None else exit_code
        summary = None if timed_out else _summarise(xml_file, max_failures)

    tail = output.decode("utf-8", errors="replace")[-_OUTPUT_TAIL:]
    if summary is None and not timed_out and "No module named pytest" in tail:
        raise SkillRunError(
            f"pytest is not installed for {interpreter}",
            hint="install pytest in that environment, or pass `python` pointing at one that has it",
        )
    summary = summary or {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "total": 0, "failures": []}
    if ctx is not None and percent < 100:
        await ctx.progress(100, 100, "timed out" if timed_out else f"{summary['total']} test(s) run")
    return {
        "ok": not timed_out and exit_code in (0, 5),
        "exit_code": exit_code,
        "timed_out": timed_out,
        **summary,
        "duration": duration,
        "path": str(target),
        "command": command,
        "output": tail,
    }
