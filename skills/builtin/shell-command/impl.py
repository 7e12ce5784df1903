"""shell-command: run one program (an argv list, never a shell) in the run's artifact directory.

Confinement (`skills.executors.confine`): no shell, a scrubbed environment, the artifact directory as
the one writable folder, working directory and HOME; where bubblewrap works, a jail with the
system read-only, no network unless this skill's skill.yaml says `network: true`, private
/tmp and its own PID namespace. Resource limits (address space, CPU seconds, no core files,
file size, a process count), a wall-clock timeout and an output cap, both of which stop the
whole jail. Without bubblewrap it is still a real program with the server's file-system
rights, which is why the skill ships disabled (`enabled: false` in skill.yaml).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream

from skills.executors.confine import SYSTEM_PATH, Jail, Jailed
from skills.core.base import SkillContext
from skills.core.errors import SkillRunError
from skills.executors.isolation import isolation_of

_NPROC = 128


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


async def shell_command(
    argv: list[str],
    cwd: str = ".",
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 30,
    max_output_bytes: int = 100_000,
    memory_mb: int = 1024,
    ctx: SkillContext | None = None,
) -> dict[str, Any]:
    context = ctx or SkillContext(skill="shell-command")
    workdir = _workdir(context.artifacts(), cwd)
    isolation = await anyio.to_thread.run_sync(isolation_of, context.extras)
    # Confined, only the system's programs are there: look the name up where the jail will.
    search_path = SYSTEM_PATH if isolation.available else os.environ.get("PATH", SYSTEM_PATH)
    program = shutil.which(argv[0], path=search_path) if "/" not in argv[0] else argv[0]
    if program is None or not Path(program).is_file():
        raise SkillRunError(
            f"program not found: {argv[0]}", hint="give a program on PATH or an absolute path"
        )
    clean_env = {"PATH": search_path, "LANG": "C.UTF-8"}
    clean_env.update(env or {})
    jail = Jail(
        workdir=workdir,
        network=bool(context.limits.get("network", False)),
        nproc=_NPROC,
        memory_mb=memory_mb,
        timeout=timeout,
        tmp_mb=min(memory_mb, 1024),
    )

    started = time.monotonic()
    try:
        jailed = await Jailed.open(
            [program, *argv[1:]],
            jail,
            isolation,
            env=clean_env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        )
    except OSError as exc:
        raise SkillRunError(f"cannot start {argv[0]}: {exc.strerror or exc}", hint="check the program") from None
    process = jailed.process
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
                jailed.kill()
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
        await jailed.close()
    exit_code = process.returncode if process.returncode is not None else -1
    killer = jailed.signal(exit_code)
    exit_code = -killer if killer is not None else exit_code
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
