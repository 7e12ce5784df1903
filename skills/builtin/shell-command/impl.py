"""shell-command: run one program (an argv list, never a shell) in the run's artifact directory.

Sandboxing: no shell, a scrubbed environment, the artifact directory as working directory
and HOME, resource limits (address space, CPU seconds, no core files) set by a tiny Python
wrapper that then execs the program, a wall-clock timeout and an output cap, both of which
kill the whole process group. It is still a real program with the server's file-system
rights, which is why the skill ships disabled (`enabled: false` in skill.yaml).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import anyio
from anyio.abc import ByteReceiveStream, Process

from skills.base import SkillContext
from skills.errors import SkillRunError

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# argv[1]: address-space bytes, argv[2]: CPU seconds, argv[3]: program path, argv[4:]: its argv.
# Files are capped at 100 MiB. Limits never exceed the hard limits already in place; Python
# ignores SIGPIPE and SIGXFSZ and ignored signals survive exec, so they are reset for the program.
_WRAPPER = """
import os, resource as r, signal as s, sys
mem, cpu = int(sys.argv[1]), int(sys.argv[2])
for k, soft, hard in ((r.RLIMIT_AS, mem, mem), (r.RLIMIT_CPU, cpu, cpu + 1), (r.RLIMIT_CORE, 0, 0),
                      (r.RLIMIT_FSIZE, 100 * 2**20, 100 * 2**20)):
    cap = r.getrlimit(k)[1]
    cap = hard if cap == r.RLIM_INFINITY else cap
    try: r.setrlimit(k, (min(soft, cap), min(hard, cap)))
    except (ValueError, OSError) as e: sys.stderr.write(f"shell-command: resource limit {k}: {e}\\n")
s.signal(s.SIGPIPE, s.SIG_DFL); s.signal(s.SIGXFSZ, s.SIG_DFL)
try:
    os.execv(sys.argv[3], sys.argv[4:])
except OSError as e:
    sys.stderr.write(f"shell-command: cannot execute {sys.argv[3]}: {e.strerror}\\n")
    os._exit(126)
"""


def _workdir(base: Path, cwd: str) -> Path:
    normalised = cwd.replace("\\", "/")
    if (
        normalised.startswith("/")
        or re.match(r"^[A-Za-z]:", normalised)
        or ".." in PurePosixPath(normalised).parts
    ):
        raise SkillRunError(
            f"cwd {cwd!r} must be a relative folder inside the run's artifact directory",
            hint="omit cwd, or give a sub-folder such as 'work'",
        )
    root = base.resolve()
    target = (root / normalised).resolve()
    if not target.is_relative_to(root):
        raise SkillRunError(f"cwd {cwd!r} leads out of the artifact directory", hint="use a plain sub-folder")
    target.mkdir(parents=True, exist_ok=True)
    return target


def _kill_group(process: Process) -> None:
    if process.returncode is not None:
        return
    try:
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signal.SIGKILL)
        else:  # pragma: no cover
            process.kill()
    except ProcessLookupError:
        pass


async def shell_command(
    argv: list[str],
    cwd: str = ".",
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 30,
    max_output_bytes: int = 100_000,
    memory_mb: int = 1024,
    ctx: SkillContext | None = None,
) -> dict:
    context = ctx or SkillContext(skill="shell-command")
    workdir = _workdir(context.artifacts(), cwd)
    search_path = os.environ.get("PATH", _DEFAULT_PATH)
    program = shutil.which(argv[0], path=search_path) if "/" not in argv[0] else argv[0]
    if program is None or not Path(program).is_file():
        raise SkillRunError(
            f"program not found: {argv[0]}", hint="give a program on PATH or an absolute path"
        )
    clean_env = {"PATH": search_path, "LANG": "C.UTF-8", "HOME": str(workdir), "TMPDIR": str(workdir)}
    clean_env.update(env or {})
    if hasattr(os, "killpg"):
        command = [sys.executable, "-I", "-c", _WRAPPER, str(memory_mb * 1024 * 1024),
                   str(max(1, int(timeout) + 1)), program, *argv]  # fmt: skip
    else:  # pragma: no cover - no rlimits / process groups on Windows
        command = [program, *argv[1:]]

    started = time.monotonic()
    process = await anyio.open_process(
        command,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=clean_env,
        start_new_session=hasattr(os, "killpg"),
    )
    buffers = {"stdout": bytearray(), "stderr": bytearray()}
    truncated = False

    async def drain(name: str, stream: ByteReceiveStream | None) -> None:
        nonlocal truncated
        if stream is None:
            return
        async for chunk in stream:
            buffer = buffers[name]
            room = max_output_bytes - len(buffer)
            buffer += chunk[: max(room, 0)]
            if len(chunk) > room:
                truncated = True
                _kill_group(process)
                return

    timed_out = False
    try:
        with anyio.move_on_after(timeout) as scope:
            if stdin is not None and process.stdin is not None:
                try:
                    await process.stdin.send(stdin.encode("utf-8"))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
                await process.stdin.aclose()
            async with anyio.create_task_group() as group:
                group.start_soon(drain, "stdout", process.stdout)
                group.start_soon(drain, "stderr", process.stderr)
            await process.wait()
        timed_out = scope.cancelled_caught
    finally:
        _kill_group(process)
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()
    exit_code = process.returncode if process.returncode is not None else -1
    return {
        "ok": exit_code == 0 and not timed_out and not truncated,
        "exit_code": exit_code,
        "stdout": buffers["stdout"].decode("utf-8", errors="replace"),
        "stderr": buffers["stderr"].decode("utf-8", errors="replace"),
        "timed_out": timed_out,
        "truncated": truncated,
        "duration": round(time.monotonic() - started, 3),
        "cwd": str(workdir),
        "argv": list(argv),
    }
