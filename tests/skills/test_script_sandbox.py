"""The `script` executor as a security boundary: time, memory, output, environment, leftovers.

Real subprocesses written into tmp_path, each test run twice: unconfined (no bubblewrap, the
path every machine has) and confined (bubblewrap; skipped with the reason where it does not
work). Nothing sleeps here: the scripts under test sleep, the tests wait on events (a log line)
or poll /proc for what is left of a script, with a bound. Processes are found by their command
line, which holds the test's own tmp_path: pids read inside a jail are not the host's.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server import create_server
from skills.core.errors import OutputError, SkillRunError, SkillTimeoutError
from skills.executors.isolation import UNCONFINED, Isolation, budget_support, probe
from skills.executors.script import run_script
from tests.helpers import assert_none_left, raised_by, write_skill

Logged = list[tuple[str, str]]


def script(tmp_path: Path, name: str, source: str, *, mode: int = 0o644) -> Path:
    path = tmp_path / "skill" / "scripts" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    path.chmod(mode)
    return path


@pytest.fixture(params=["unconfined", "confined"])
def isolation(request: pytest.FixtureRequest) -> Isolation:
    """Each test once without a jail and once in one (where bubblewrap works here)."""
    if request.param == "unconfined":
        return UNCONFINED
    found = probe()
    if not found.available:
        pytest.skip(f"confinement is not available here: {found.reason}")
    return found


async def run(
    tmp_path: Path, isolation: Isolation, program: Path, arguments: dict[str, Any] | None = None, **options: Any
) -> Any:
    settings: dict[str, Any] = {
        "skill": "probe",
        "workdir": tmp_path / "work",
        "timeout": 10.0,
        "memory_mb": 256,
        "max_output_bytes": 100_000,
        "isolation": isolation,
    }
    settings.update(options)
    with anyio.fail_after(20):  # no run may hang a test
        return await run_script(program, arguments or {}, **settings)


def recorder() -> tuple[Logged, Any]:
    logged: Logged = []

    async def log(level: str, message: str) -> None:
        logged.append((level, message))

    return logged, log


HANG = """\
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", os.environ["HOME"]])
    print("ready", file=sys.stderr, flush=True)
    time.sleep(600)
"""


FLOOD = """\
    import os, sys
    while True:
        sys.stdout.write("x" * 65536)
"""
ENVIRON = "import json, os\nprint(json.dumps(dict(os.environ)))\n"


async def test_a_script_gets_its_arguments_on_stdin_and_its_json_stdout_is_the_result(
    tmp_path: Path, isolation: Isolation
) -> None:
    program = script(
        tmp_path,
        "echo.py",
        """\
        import json, os, sys
        args = json.load(sys.stdin)
        print(json.dumps({"twice": args["n"] * 2, "text": args["text"], "cwd": os.getcwd()}))
        """,
    )
    result = await run(tmp_path, isolation, program, {"n": 21, "text": "héllo ✓"})
    assert result == {"twice": 42, "text": "héllo ✓", "cwd": str(tmp_path / "work")}


async def test_empty_stdout_is_a_none_result_and_other_json_values_pass_through(
    tmp_path: Path, isolation: Isolation
) -> None:
    assert await run(tmp_path, isolation, script(tmp_path, "quiet.py", "pass\n")) is None
    assert await run(tmp_path, isolation, script(tmp_path, "list.sh", "echo ' [1, 2] '\n")) == [1, 2]


async def test_an_executable_with_a_shebang_runs_directly(tmp_path: Path, isolation: Isolation) -> None:
    program = script(tmp_path, "tool", "#!/bin/sh\necho '\"direct\"'\n", mode=0o755)
    assert await run(tmp_path, isolation, program) == "direct"


BASH_ONLY = '#!/bin/bash\nwords=(a b c)\necho "\\"${#words[@]} words in ${BASH_VERSION:+bash}\\""\n'


async def test_the_interpreter_is_chosen_by_the_shebang_then_the_suffix(tmp_path: Path, isolation: Isolation) -> None:
    # a .sh with #!/bin/bash runs in bash (its arrays would be a syntax error in /bin/sh), run bit or not
    assert await run(tmp_path, isolation, script(tmp_path, "count.sh", BASH_ONLY)) == "3 words in bash"
    # no run bit, no suffix: the #! line decides, with its one argument
    env_bash = script(tmp_path, "answer", BASH_ONLY.replace("#!/bin/bash", "#!/usr/bin/env bash"))
    assert await run(tmp_path, isolation, env_bash) == "3 words in bash"
    # a .py is run by the server's own Python whatever its #! line says (its packages are importable)
    python = script(tmp_path, "which.py", "#!/bin/false\nimport json, sys\nprint(json.dumps(sys.version_info[0]))\n")
    assert await run(tmp_path, isolation, python) == 3
    # a .sh without a #! line: /bin/sh
    assert await run(tmp_path, isolation, script(tmp_path, "plain.sh", "echo '\"sh\"'\n")) == "sh"


async def test_a_missing_or_non_executable_program_is_refused_with_a_hint(tmp_path: Path, isolation: Isolation) -> None:
    with pytest.raises(SkillRunError, match="does not exist") as missing:
        await run(tmp_path, isolation, tmp_path / "skill" / "scripts" / "nope.py")
    assert "relative to the skill folder" in missing.value.hint
    with pytest.raises(SkillRunError, match="no #! line and is not executable") as plain:
        await run(tmp_path, isolation, script(tmp_path, "tool", "echo 1\n"))
    assert "#!" in plain.value.hint and "chmod +x" in plain.value.hint
    with pytest.raises(SkillRunError, match="not an absolute path") as relative:
        await run(tmp_path, isolation, script(tmp_path, "tool.sh", "#!bash\necho 1\n"))
    assert "#!/usr/bin/env bash" in relative.value.hint
    not_executable = re.escape(os.strerror(errno.ENOEXEC))  # the system's words for "no #! line, not a binary"
    with pytest.raises(SkillRunError, match=rf"cannot execute .*{not_executable}"):
        await run(tmp_path, isolation, script(tmp_path, "no-shebang", "echo 1\n", mode=0o755))


async def test_a_hanging_script_and_its_grandchild_are_killed_at_the_timeout(
    tmp_path: Path, isolation: Isolation
) -> None:
    program = script(tmp_path, "hang.py", HANG)
    started = time.monotonic()
    with pytest.raises(SkillTimeoutError) as caught:
        await run(tmp_path, isolation, program, timeout=1.0)
    assert time.monotonic() - started < 5
    assert str(caught.value.message) == "'probe' did not finish within 1s and was stopped"
    assert "raise timeout:" in caught.value.hint
    await assert_none_left(tmp_path)  # the script, its grandchild and the jail: killed and reaped


async def test_a_script_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path, isolation: Isolation) -> None:
    program = script(
        tmp_path,
        "stubborn.py",
        "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + textwrap.dedent(HANG),
    )
    with pytest.raises(SkillTimeoutError):
        await run(tmp_path, isolation, program, timeout=0.5)
    await assert_none_left(tmp_path)


async def test_a_background_process_left_behind_does_not_hold_the_call_and_is_killed(
    tmp_path: Path, isolation: Isolation
) -> None:
    program = script(
        tmp_path, "daemon.sh", 'python3 -c "import time; time.sleep(600)" "$HOME" &\necho \'{"ok": true}\'\n'
    )
    started = time.monotonic()
    assert await run(tmp_path, isolation, program, timeout=30.0) == {"ok": True}
    assert time.monotonic() - started < 5  # not held until the timeout by the open pipe
    await assert_none_left(tmp_path)


async def test_a_flood_on_stdout_is_cut_at_the_cap_quickly(tmp_path: Path, isolation: Isolation) -> None:
    program = script(tmp_path, "flood.py", FLOOD)
    started = time.monotonic()
    with pytest.raises(OutputError, match="printed more than 10000 bytes") as caught:
        await run(tmp_path, isolation, program, max_output_bytes=10_000)
    assert time.monotonic() - started < 5
    assert "max_output_bytes" in caught.value.hint
    await assert_none_left(tmp_path)


SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-secret-1",
    "ORCHESTRATOR_TOKEN": "token-secret-2",
    "AWS_ACCESS_KEY_ID": "AKIA-secret-3",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-4",
    "GITHUB_TOKEN": "ghp-secret-5",
    "PYTHONPATH": "/secret/path-6",
}


@pytest.mark.parametrize("name", ["environ.py", "environ.sh"])
async def test_a_script_sees_no_secret_only_a_minimal_environment_and_allowed_names(
    tmp_path: Path, isolation: Isolation, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SKILL_REGION", "eu-west-1")
    source = ENVIRON if name.endswith(".py") else "python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'\n"
    env = await run(tmp_path, isolation, script(tmp_path, name, source), env_allow=["SKILL_REGION", "NOT_SET_ANYWHERE"])
    text = json.dumps(env)
    assert not [secret for secret in [*SECRETS, *SECRETS.values()] if secret in text]
    assert env["SKILL_REGION"] == "eu-west-1"
    assert "NOT_SET_ANYWHERE" not in env
    work = tmp_path / "work"
    assert env["HOME"] == str(work)
    if isolation.available:
        assert env["TMPDIR"] == "/tmp"  # the jail's own, gone with it
    else:
        assert Path(env["TMPDIR"]).parent == work
    assert env["PYTHONIOENCODING"] == "utf-8"
    assert set(env) - {"SKILL_REGION", "PWD", "SHLVL", "_"} <= {
        "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING",
        "PYTHONDONTWRITEBYTECODE", "MALLOC_ARENA_MAX", "PYTHONUSERBASE", "ORCHESTRATOR_JAIL",
    }  # fmt: skip
    assert not list(work.glob(".tmp-*"))  # the private TMPDIR is removed afterwards


async def test_a_python_script_can_import_installed_packages_and_its_sibling_modules(
    tmp_path: Path, isolation: Isolation
) -> None:
    script(tmp_path, "helper.py", "ANSWER = 42\n")
    program = script(
        tmp_path,
        "imports.py",
        "import json, yaml, helper\nprint(json.dumps({'yaml': yaml.__name__, 'answer': helper.ANSWER}))\n",
    )
    assert await run(tmp_path, isolation, program) == {"yaml": "yaml", "answer": 42}


async def test_the_resource_limits_are_applied_in_the_child(tmp_path: Path, isolation: Isolation) -> None:
    program = script(
        tmp_path,
        "limits.py",
        """\
        import json, resource as r
        print(json.dumps({k: r.getrlimit(getattr(r, k)) for k in
                          ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_NPROC")}))
        """,
    )
    limits = await run(tmp_path, isolation, program, memory_mb=300, timeout=7.5)
    assert limits["RLIMIT_AS"] == [300 * 2**20] * 2
    assert limits["RLIMIT_CPU"] == [9, 10]
    assert limits["RLIMIT_FSIZE"] == [100 * 2**20] * 2
    parent_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 1024 if parent_hard == resource.RLIM_INFINITY else min(1024, parent_hard)
    assert limits["RLIMIT_NOFILE"] == [nofile, nofile]
    assert limits["RLIMIT_CORE"] == [0, 0]
    nproc = limits["RLIMIT_NPROC"]
    if isolation.available:  # counted in the jail's own user namespace; one above a cgroup's budget
        assert nproc == [65, 65] if budget_support().enforced else [64, 64]
    elif os.getuid() == 0:
        assert nproc == list(resource.getrlimit(resource.RLIMIT_NPROC))  # root is not held by it: left alone
    else:
        assert nproc[0] == nproc[1] > 64  # the user's running threads plus 64


async def test_a_script_that_allocates_beyond_its_memory_limit_fails_clearly(
    tmp_path: Path, isolation: Isolation
) -> None:
    program = script(tmp_path, "greedy.py", "block = bytearray(400 * 2**20)\nprint(len(block))\n")
    with pytest.raises(SkillRunError, match=r"ran out of memory \(limit 64 MiB\)") as caught:
        await run(tmp_path, isolation, program, memory_mb=64)
    assert "memory_mb" in caught.value.hint


def _json_says(text: str) -> str:
    """Python's json module's own words for why `text` is not one JSON value (passed on as the reason)."""
    return raised_by(lambda: json.loads(text), json.JSONDecodeError).msg


@pytest.mark.parametrize(
    ("printed", "reason"),
    [
        ("hello world", _json_says("hello world")),
        ('{"a": 1}\n{"b": 2}', _json_says('{"a": 1}\n{"b": 2}')),
        ("NaN", "NaN is not valid JSON"),
        ("[" * 50_000, "nested too deeply"),
    ],
)
async def test_stdout_that_is_not_one_json_value_is_an_output_error(
    tmp_path: Path, isolation: Isolation, printed: str, reason: str
) -> None:
    program = script(tmp_path, "chatty.py", f"print({printed!r})\n")
    with pytest.raises(OutputError, match="not JSON") as caught:
        await run(tmp_path, isolation, program)
    assert f"printed something that is not JSON ({reason})" in caught.value.message
    assert printed[:5] in caught.value.message
    assert len(caught.value.message) < 400
    assert caught.value.hint == "print exactly one JSON value on stdout; use stderr for logs"


async def test_a_non_zero_exit_reports_the_code_and_the_last_stderr_lines(tmp_path: Path, isolation: Isolation) -> None:
    program = script(
        tmp_path,
        "fails.py",
        """\
        import sys
        for i in range(20):
            print(f"step {i}", file=sys.stderr)
        print("boom: \\x1b[31mthe input file is empty\\x1b[0m", file=sys.stderr)
        print('{"partial": true}')
        sys.exit(3)
        """,
    )
    with pytest.raises(SkillRunError) as caught:
        await run(tmp_path, isolation, program)
    error = caught.value
    assert type(error) is SkillRunError
    assert "'probe' exited with code 3" in error.message
    assert "boom: the input file is empty" in error.message  # escapes stripped
    assert "step 19" in error.message and "step 1\n" not in error.message  # only the last lines
    assert error.hint


async def test_a_script_killed_by_a_signal_says_which(tmp_path: Path, isolation: Isolation) -> None:
    program = script(tmp_path, "segv.sh", "kill -SEGV $$\n")
    with pytest.raises(SkillRunError, match="was killed by SIGSEGV and printed nothing on stderr"):
        await run(tmp_path, isolation, program)


async def test_stderr_lines_go_to_the_log_bounded_and_never_into_the_result(
    tmp_path: Path, isolation: Isolation
) -> None:
    program = script(
        tmp_path,
        "talks.py",
        """\
        import json, sys
        print("reading input", file=sys.stderr)
        print("a \\x1b[2Jspoof\\rline", file=sys.stderr)
        print("x" * 100_000, file=sys.stderr)
        for i in range(500):
            print(f"noise {i}", file=sys.stderr)
        print(json.dumps({"answer": 42}))
        """,
    )
    logged, log = recorder()
    assert await run(tmp_path, isolation, program, log=log) == {"answer": 42}
    assert logged[:4] == [
        ("info", "reading input"),
        ("info", "a spoofline"),
        ("info", "x" * 2000 + "..."),  # an overlong line is cut once, not split
        ("info", "noise 0"),
    ]
    assert len([m for m in logged if m[0] == "info"]) == 200
    assert logged[-1] == ("warning", "303 more stderr lines not shown")
    assert all(len(m) < 2100 for _, m in logged)


async def test_large_arguments_do_not_deadlock_a_script_that_never_reads_them(
    tmp_path: Path, isolation: Isolation
) -> None:
    big = {"blob": "y" * 1_000_000}
    assert await run(tmp_path, isolation, script(tmp_path, "ignores.py", "print(1)\n"), big) == 1
    size = script(tmp_path, "reads.py", "import json, sys\nprint(len(json.load(sys.stdin)['blob']))\n")
    assert await run(tmp_path, isolation, size, big) == 1_000_000


async def test_cancelling_the_call_kills_the_script_and_its_children(tmp_path: Path, isolation: Isolation) -> None:
    program = script(tmp_path, "waits.py", HANG)
    ready = anyio.Event()

    async def log(level: str, message: str) -> None:
        if message.endswith("ready"):
            ready.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run(tmp_path, isolation, program, log=log))
        with anyio.fail_after(10):
            await ready.wait()
        tg.cancel_scope.cancel()
    await assert_none_left(tmp_path)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
async def test_a_script_inherits_no_file_descriptor_of_the_server(tmp_path: Path, isolation: Isolation) -> None:
    listing = "import json, os\nprint(json.dumps(sorted(os.listdir('/proc/self/fd'))))\n"
    program = script(tmp_path, "fds.py", listing)
    with (tmp_path / "held-open").open("w"):
        fds = await run(tmp_path, isolation, program)
    assert len(fds) <= 4  # stdin, stdout, stderr and the directory being listed


async def test_a_failing_log_callback_surfaces_as_itself_and_stops_the_script(
    tmp_path: Path, isolation: Isolation
) -> None:
    async def broken_log(level: str, message: str) -> None:
        raise RuntimeError("client went away")

    with pytest.raises(RuntimeError, match="client went away"):
        await run(tmp_path, isolation, script(tmp_path, "hang.py", HANG), log=broken_log)
    await assert_none_left(tmp_path)


# -- through a real MCP client ---------------------------------------------------------------


def script_skill(root: Path, name: str, source: str, **contract: Any) -> None:
    write_skill(
        root,
        name,
        contract={"run": {"script": f"scripts/{name}.py"}, **contract},
        files={f"scripts/{name}.py": textwrap.dedent(source)},
    )


@pytest.fixture
def sandbox_server(tmp_path: Path) -> Any:
    root = tmp_path / "skills"
    script_skill(root, "hang", HANG, timeout=1)
    script_skill(root, "flood", FLOOD, max_output_bytes=4096)
    script_skill(root, "environ", ENVIRON, env=["SKILL_REGION"])
    script_skill(
        root,
        "double",
        "import json, sys\nprint(json.dumps({'twice': json.load(sys.stdin)['n'] * 2}))\n",
        inputs={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    )
    return create_server(home=tmp_path / "home", skill_dirs=[root], builtin=False)


async def test_through_mcp_a_hanging_script_is_an_error_result_and_the_server_keeps_serving(
    tmp_path: Path, sandbox_server: Any
) -> None:
    async with Client(sandbox_server) as client:
        with anyio.fail_after(15):
            hung = await client.call_tool("hang", {})
            after = await client.call_tool("double", {"n": 21})
    assert hung.is_error
    assert "did not finish within 1" in hung.content[0].text and "timeout" in hung.content[0].text
    assert not after.is_error and after.structured_content == {"twice": 42}
    await assert_none_left(tmp_path)


async def test_through_mcp_a_flood_is_capped_and_the_server_keeps_serving(tmp_path: Path, sandbox_server: Any) -> None:
    async with Client(sandbox_server) as client:
        with anyio.fail_after(15):
            flood = await client.call_tool("flood", {})
            after = await client.call_tool("double", {"n": 1})
    assert flood.is_error and "printed more than 4096 bytes" in flood.content[0].text
    assert len(flood.content[0].text) < 1000
    await assert_none_left(tmp_path)
    assert not after.is_error and after.structured_content == {"twice": 2}


async def test_through_mcp_a_script_reads_no_secret_from_the_environment(
    sandbox_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SKILL_REGION", "eu-west-1")
    async with Client(sandbox_server) as client:
        with anyio.fail_after(15):
            result = await client.call_tool("environ", {})
    assert not result.is_error
    env = result.structured_content
    assert env is not None and env["SKILL_REGION"] == "eu-west-1"
    text = json.dumps(env) + result.content[0].text
    assert not [secret for secret in [*SECRETS, *SECRETS.values()] if secret in text]
