"""The `script` executor: a skill's program as a confined subprocess (a security boundary).

- Confinement (`skills.executors.confine`, bubblewrap where it works): no network unless skill.yaml says
  `network: true`; the system and the skill folder read-only; the call's artifact directory as
  the one writable work directory; private /tmp; its own PID namespace, so nothing of the
  server's is visible in /proc and every descendant dies with the call, `setsid` ones too.
  Without bubblewrap the same limits apply except the jail (the server says so at start-up).
- Time: at the deadline the whole jail is stopped (SIGTERM, grace, SIGKILL) and reaped;
  RLIMIT_CPU backs the wall clock up.
- Memory, file size, descriptors, core dumps, process count: RLIMIT_AS/FSIZE/NOFILE/CORE/NPROC,
  set by the jail's bootstrap before the script starts, for each process; for the whole call
  (every process it starts together) a cgroup where the host has one: `total_memory_mb` and
  `max_processes`, the server's budget unless skill.yaml asks for less (`skills.executors._cgroup`).
- Output: stdout is capped while it is read; stderr goes to the log, bounded, never the result.
- Environment: built from scratch; nothing of the server's (API keys, tokens, cloud
  credentials) reaches the script unless skill.yaml lists the name under `env:`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import site
import sys
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio import CancelScope
from anyio.abc import ByteReceiveStream, ByteSendStream

from ..core.base import LogFn, LogLevel
from ..core.errors import OutputError, SkillRunError, SkillTimeoutError
from .confine import PYTHON, RUN_PYTHON, SYSTEM_PATH, Jail, Jailed
from .isolation import Isolation, probe

__all__ = ["run_script"]

_DRAIN = 1.0  # seconds to finish reading pipes once the script has exited
_LOG_LINES = 200  # stderr lines forwarded per call; the rest are counted
_LINE_CHARS = 2000
_TAIL = 5  # stderr lines quoted in an error message
_OOM_MARKERS = ("memoryerror", "cannot allocate memory", "out of memory", "bad_alloc")
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")  # log spoofing
_logger = logging.getLogger("skills.script")
_SITE_PACKAGES = tuple(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
"""What a Python script may import besides the standard library: the server's installed packages."""


async def run_script(
    program: Path,
    arguments: dict[str, Any],
    *,
    skill: str,
    workdir: Path,
    timeout: float,
    memory_mb: int,
    max_output_bytes: int,
    disk_mb: int | None = None,
    env_allow: Sequence[str] = (),
    log: LogFn | None = None,
    folder: Path | None = None,
    network: bool = False,
    isolation: Isolation | None = None,
    total_memory_mb: int | None = None,
    max_processes: int | None = None,
) -> Any:
    """Run `program` with `arguments` as JSON on stdin and return the JSON it prints on stdout.

    `folder` is the skill folder the script may read (default: the program's folder);
    `isolation` says how to confine it (default: as this machine allows); `disk_mb` sizes its
    work directory when confined (default: the isolation's). `total_memory_mb` and
    `max_processes` are what the skill asks of the call's budget (None: the server's).

    Raises:
        SkillTimeoutError: it did not finish within `timeout` seconds (it was killed).
        WorkdirFull: it filled its work directory (nothing it wrote there is kept).
        OutputError: it printed more than `max_output_bytes`, or something that is not JSON.
        SkillRunError: it could not start, exited non-zero, or ran out of memory.
        LimitExceededError: the call went over its memory or process budget (all its processes).
    """
    isolation = isolation if isolation is not None else await anyio.to_thread.run_sync(probe)
    command = _command(program, skill)
    budget = isolation.budget(total_memory_mb, max_processes)
    jail = Jail(
        workdir=workdir,
        read_only=(folder or program.parent,),
        network=network,
        nproc=budget.processes,
        memory_mb=memory_mb,
        timeout=timeout,
        tmp_mb=min(memory_mb, 1024),
        disk_mb=disk_mb,
        total_memory_mb=budget.memory_mb,
        max_processes=budget.processes,
        label=f"'{skill}'",
    )
    out, err = _Stdout(max_output_bytes), _Stderr(skill, log or _to_logger)
    payload = json.dumps(arguments, ensure_ascii=False).encode() + b"\n"
    try:
        jailed = await Jailed.open(command, jail, isolation, env=_environment(env_allow, isolation.available))
    except OSError as exc:
        raise SkillRunError(
            f"'{skill}' could not be started: {exc.strerror or exc}", hint="check the skill's run: script:"
        ) from None
    returncode: int | None = None
    try:
        with anyio.move_on_after(timeout) as deadline:
            returncode = await _communicate(jailed, payload, out, err)
    finally:
        await jailed.close()
    if deadline.cancelled_caught:
        raise SkillTimeoutError(
            f"'{skill}' did not finish within {timeout:g}s and was stopped",
            hint="raise timeout: in skill.yaml or make the script faster",
        )
    if out.overflow or returncode is None:
        raise OutputError(
            f"'{skill}' printed more than {max_output_bytes} bytes on stdout and was stopped",
            hint="write large data to a file in the working directory and return its path, "
            "or raise max_output_bytes: in skill.yaml",
        )
    if returncode != 0:
        raise _failure(skill, returncode, jailed.signal(returncode), list(err.tail), memory_mb)
    return _parse(skill, bytes(out.data))


def _command(program: Path, skill: str) -> list[str]:
    """The argv that runs `program` (docs/skills.md, "How a script is started").

    1. `.py`: the server's own Python, whatever its `#!` line says: the packages installed
       beside the server are importable, and the jail has that interpreter.
    2. A `#!` line: its interpreter, with the line's one optional argument (as the kernel
       reads it), the run bit not needed (archives and copies often lose it). So a `.sh`
       script that starts with `#!/bin/bash` runs in bash, not in `/bin/sh`.
    3. `.sh` without one: `/bin/sh`.
    4. Anything else must be executable (a binary): run as it is.
    """
    if not program.is_file():
        raise SkillRunError(
            f"'{skill}': script {program} does not exist",
            hint="run: script: in skill.yaml is a path relative to the skill folder",
        )
    if program.suffix == ".py":  # in the jail's own interpreter: one Python start-up, not two
        return [RUN_PYTHON, str(program), os.pathsep.join(_SITE_PACKAGES)]
    shebang = _shebang(program, skill)
    if shebang:
        return [*shebang, str(program)]
    if program.suffix == ".sh":
        return ["/bin/sh", str(program)]
    if not os.access(program, os.X_OK):
        raise SkillRunError(
            f"'{skill}': script {program} has no #! line and is not executable",
            hint="start it with a #! line (e.g. #!/bin/sh), name it .py or .sh, or chmod +x a binary",
        )
    return [str(program)]


_SHEBANG_MAX = 256
"""Bytes of the first line read for a `#!` line (Linux reads at most 256 as well)."""


def _shebang(program: Path, skill: str) -> list[str]:
    """The interpreter and its optional argument from `program`'s `#!` line ([] without one)."""
    try:
        with program.open("rb") as fh:
            head = fh.read(_SHEBANG_MAX)
    except OSError as exc:
        raise SkillRunError(f"'{skill}': cannot read script {program}: {exc.strerror}") from None
    if not head.startswith(b"#!"):
        return []
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace")
    words = line.split(None, 1)  # the interpreter, then the rest as one argument (as the kernel does)
    if not words or not words[0].startswith("/"):
        named = words[0] if words else "(nothing)"
        raise SkillRunError(
            f"'{skill}': the #! line of {program} names '{named}', not an absolute path",
            hint="write e.g. #!/bin/bash or #!/usr/bin/env bash",
        )
    return [words[0], words[1].strip()] if len(words) == 2 else [words[0]]


def _environment(allow: Sequence[str], confined: bool) -> dict[str, str]:
    """A minimal environment plus the allowed names; nothing else of the server's leaks.

    No VIRTUAL_ENV or PYTHONPATH: running the venv's own interpreter by path is what makes its
    packages importable. Its folder leads PATH so that `python3` in a .sh script is that one
    too. MALLOC_ARENA_MAX keeps glibc's per-thread arenas from eating the RLIMIT_AS budget.
    HOME and TMPDIR are the jail's (`Jailed.open`).
    """
    rest = SYSTEM_PATH if confined else (os.environ.get("PATH") or os.defpath)  # the host's is not there
    env = {"PATH": os.pathsep.join([str(Path(PYTHON).parent), rest]), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env |= {"PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1", "MALLOC_ARENA_MAX": "2"}
    if site.ENABLE_USER_SITE and site.getusersitepackages() in sys.path:
        env["PYTHONUSERBASE"] = site.getuserbase()  # `pip install --user`: HOME moved, keep it
    env.update((name, os.environ[name]) for name in allow if name in os.environ)
    return env


async def _communicate(jailed: Jailed, payload: bytes, out: _Stdout, err: _Stderr) -> int | None:
    """Feed stdin and read both pipes until the script exits; None if stdout overflowed."""
    process = jailed.process
    assert process.stdin and process.stdout and process.stderr
    returncode: int | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_feed, process.stdin, payload)
            tg.start_soon(out.pump, process.stdout, tg.cancel_scope)
            tg.start_soon(err.pump, process.stderr)
            returncode = await process.wait()
            jailed.kill()  # what it left running would hold the pipes
            with anyio.move_on_after(_DRAIN):
                await out.done.wait()
                await err.done.wait()
            tg.cancel_scope.cancel()
    except ExceptionGroup as group:  # a failing log callback: surface it as itself
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    return None if out.overflow else returncode


async def _feed(stdin: ByteSendStream, payload: bytes) -> None:
    try:
        await stdin.send(payload)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionResetError):
        pass  # the script exited or closed stdin without reading its arguments: its choice
    finally:
        await stdin.aclose()


class _Stdout:
    """Collects stdout up to a cap; past it, flags the overflow and cancels the run."""

    def __init__(self, cap: int) -> None:
        self.cap, self.data, self.overflow, self.done = cap, bytearray(), False, anyio.Event()

    async def pump(self, stream: ByteReceiveStream, run: CancelScope) -> None:
        try:
            async for chunk in stream:
                if len(self.data) + len(chunk) > self.cap:
                    self.overflow = True
                    run.cancel()
                    return
                self.data += chunk
        finally:
            self.done.set()


class _Stderr:
    """Forwards stderr to the log line by line; keeps the last lines for error messages."""

    def __init__(self, skill: str, log: LogFn) -> None:
        self.skill, self.log, self.sent, self.dropped = skill, log, 0, 0
        self.tail: deque[str] = deque(maxlen=_TAIL)
        self.done = anyio.Event()

    async def pump(self, stream: ByteReceiveStream) -> None:
        pending, cut = b"", False  # cut: the start of an overlong line was shown, skip its rest
        try:
            async for chunk in stream:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if not cut:
                        await self._line(line)
                    cut = False
                if len(pending) > 4 * _LINE_CHARS:  # never buffer a whole endless line
                    if not cut:
                        await self._line(pending)
                    pending, cut = b"", True
            if not cut:
                await self._line(pending)
            if self.dropped:
                await self.log("warning", f"{self.dropped} more stderr lines not shown")
        finally:
            self.done.set()

    async def _line(self, raw: bytes) -> None:
        text = _CONTROL.sub("", raw.decode("utf-8", "replace")).rstrip()
        if not text:
            return
        text = text if len(text) <= _LINE_CHARS else text[:_LINE_CHARS] + "..."
        self.tail.append(text)
        if self.sent < _LOG_LINES:
            self.sent += 1
            await self.log("info", text)
        else:
            self.dropped += 1


def _failure(skill: str, returncode: int, killer: int | None, tail: list[str], memory_mb: int) -> SkillRunError:
    """A client-safe error for a non-zero exit: the cause when recognisable, else the code."""
    quoted = "\n".join(line[:300] for line in tail)
    if any(marker in quoted.lower() for marker in _OOM_MARKERS):
        return SkillRunError(
            f"'{skill}' ran out of memory (limit {memory_mb} MiB)",
            hint="raise memory_mb: in skill.yaml or make the script use less memory",
        )
    what = f"exited with code {returncode}"
    if killer is not None:
        name = signal.Signals(killer).name if killer in signal.valid_signals() else killer
        what = f"was killed by {name}" + (" (CPU time limit)" if killer == signal.SIGXCPU else "")
    detail = f"; last stderr lines:\n{quoted}" if quoted else " and printed nothing on stderr"
    return SkillRunError(
        f"'{skill}' {what}{detail}",
        hint="a script must exit 0 after printing one JSON value on stdout; see its stderr in the log",
    )


def _parse(skill: str, data: bytes) -> Any:
    """stdout as one JSON value (None when empty); strict: UTF-8, no NaN, bounded nesting."""
    try:
        text = data.decode("utf-8").strip()
        return json.loads(text, parse_constant=_no_constant) if text else None
    except json.JSONDecodeError as exc:
        reason = exc.msg
    except UnicodeDecodeError:
        reason = "not UTF-8"
    except RecursionError:
        reason = "nested too deeply"
    except ValueError as exc:  # NaN / Infinity
        reason = str(exc)
    shown = _CONTROL.sub("", data[:800].decode("utf-8", "replace"))[:200]
    raise OutputError(
        f"'{skill}' printed something that is not JSON ({reason}): {shown!r}",
        hint="print exactly one JSON value on stdout; use stderr for logs",
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


async def _to_logger(level: LogLevel, message: str) -> None:
    _logger.log(logging.getLevelNamesMapping()[level.upper()], "%s", message)
