"""The `script` executor: a skill's program as a confined subprocess (a security boundary).

- Time: at the deadline the script's whole process group gets SIGTERM, SIGKILL after a short
  grace, and is reaped; RLIMIT_CPU backs the wall clock up.
- Memory, file size, descriptors, core dumps: RLIMIT_AS/FSIZE/NOFILE/CORE, set in the child by
  a tiny bootstrap (`python -I -S -c`: setrlimit, then execv the script). `anyio.open_process`
  has no `preexec_fn`, and `preexec_fn` is unsafe in a threaded server anyway (the forked child
  can deadlock on a lock another thread held); the bootstrap costs ~10 ms on any anyio backend.
- Output: stdout is capped while it is read; stderr goes to the log, bounded, never the result.
- Environment: built from scratch; nothing of the server's (API keys, tokens, cloud
  credentials) reaches the script unless skill.yaml lists the name under `env:`.
- No leftovers: its own session; when the script exits, or on timeout, overflow or
  cancellation, everything left in its process group is killed.

Not covered (needs containers or cgroups): network, files the server's user can read, and a
descendant that leaves the process group (setsid/setpgid).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import resource
import shutil
import signal
import site
import sys
import tempfile
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio import CancelScope
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from .base import LogFn, LogLevel
from .errors import OutputError, SkillRunError, SkillTimeoutError

__all__ = ["run_script"]

_GRACE = 1.0  # seconds between SIGTERM and SIGKILL: time for the script to clean up
_DRAIN = 1.0  # seconds to finish reading pipes once the script has exited
_FSIZE = 100 * 2**20  # largest file the script may write
_NOFILE = 1024
_LOG_LINES = 200  # stderr lines forwarded per call; the rest are counted
_LINE_CHARS = 2000
_TAIL = 5  # stderr lines quoted in an error message
_OOM_MARKERS = ("memoryerror", "cannot allocate memory", "out of memory", "bad_alloc")
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")  # log spoofing
_PYTHON = sys.executable or shutil.which("python3") or "/usr/bin/python3"
_logger = logging.getLogger("skills.script")

# argv[1]: "resource:soft:hard,..."; argv[2:]: the program. Python ignores SIGPIPE and SIGXFSZ
# and ignored signals survive exec, so they are reset for non-Python programs.
_BOOTSTRAP = """\
import os, resource as r, signal as s, sys
for spec in sys.argv[1].split(","):
    k, soft, hard = map(int, spec.split(":"))
    cap = r.getrlimit(k)[1]
    cap = hard if cap == r.RLIM_INFINITY else cap
    try: r.setrlimit(k, (min(soft, cap), min(hard, cap)))
    except (ValueError, OSError) as e: sys.stderr.write(f"orchestrator: resource limit {k}: {e}\\n")
s.signal(s.SIGPIPE, s.SIG_DFL); s.signal(s.SIGXFSZ, s.SIG_DFL)
try:
    os.execv(sys.argv[2], sys.argv[2:])
except OSError as e:
    sys.stderr.write(f"orchestrator: cannot execute {sys.argv[2]}: {e.strerror}\\n")
    os._exit(126)
"""


async def run_script(
    program: Path,
    arguments: dict[str, Any],
    *,
    skill: str,
    workdir: Path,
    timeout: float,
    memory_mb: int,
    max_output_bytes: int,
    env_allow: Sequence[str] = (),
    log: LogFn | None = None,
) -> Any:
    """Run `program` with `arguments` as JSON on stdin and return the JSON it prints on stdout.

    Raises:
        SkillTimeoutError: it did not finish within `timeout` seconds (it was killed).
        OutputError: it printed more than `max_output_bytes`, or something that is not JSON.
        SkillRunError: it could not start, exited non-zero, or ran out of memory.
    """
    command = _command(program, skill)
    limits = _limits(timeout, memory_mb)
    out, err = _Stdout(max_output_bytes), _Stderr(skill, log or _to_logger)
    payload = json.dumps(arguments, ensure_ascii=False).encode() + b"\n"
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        tmpdir = Path(tempfile.mkdtemp(prefix=".tmp-", dir=workdir))
    except OSError as exc:
        raise SkillRunError(f"'{skill}' has no usable working directory: {exc}") from None
    try:
        process = await anyio.open_process(
            [_PYTHON, "-I", "-S", "-c", _BOOTSTRAP, limits, *command],
            cwd=workdir,
            env=_environment(workdir, tmpdir, env_allow),
            start_new_session=True,  # its own process group: one killpg reaches its children
        )
    except OSError as exc:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise SkillRunError(
            f"'{skill}' could not be started: {exc.strerror or exc}", hint="check the skill's run: script:"
        ) from None
    returncode: int | None = None
    try:
        with anyio.move_on_after(timeout) as deadline:
            returncode = await _communicate(process, payload, out, err)
    finally:
        await _stop(process)
        shutil.rmtree(tmpdir, ignore_errors=True)  # refuses a symlink planted in its place
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
        raise _failure(skill, returncode, list(err.tail), memory_mb)
    return _parse(skill, bytes(out.data))


def _command(program: Path, skill: str) -> list[str]:
    """The argv that runs `program`: by suffix for .py and .sh, else the file must be executable."""
    if not program.is_file():
        raise SkillRunError(
            f"'{skill}': script {program} does not exist",
            hint="run: script: in skill.yaml is a path relative to the skill folder",
        )
    if program.suffix == ".py":
        # Not -I: it would drop the script's folder from sys.path (sibling imports) and ignore
        # PYTHONIOENCODING; the environment is built from scratch, which is what -E would give.
        return [_PYTHON, str(program)]
    if program.suffix == ".sh":
        return ["/bin/sh", str(program)]
    if not os.access(program, os.X_OK):
        raise SkillRunError(
            f"'{skill}': script {program} is not executable",
            hint="chmod +x it (with a #! line), or use a .py or .sh script",
        )
    return [str(program)]


def _limits(timeout: float, memory_mb: int) -> str:
    """Resource limits for the bootstrap; soft == hard so the script cannot raise them."""
    memory, cpu = memory_mb * 2**20, math.ceil(timeout) + 1
    specs = [
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU first, SIGKILL a second later
        (resource.RLIMIT_FSIZE, _FSIZE, _FSIZE),
        (resource.RLIMIT_NOFILE, _NOFILE, _NOFILE),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    return ",".join(f"{k}:{soft}:{hard}" for k, soft, hard in specs)


def _environment(workdir: Path, tmpdir: Path, allow: Sequence[str]) -> dict[str, str]:
    """A minimal environment plus the allowed names; nothing else of the server's leaks.

    No VIRTUAL_ENV or PYTHONPATH: running the venv's own interpreter by path is what makes its
    packages importable. Its folder leads PATH so that `python3` in a .sh script is that one
    too. MALLOC_ARENA_MAX keeps glibc's per-thread arenas from eating the RLIMIT_AS budget.
    """
    path = os.pathsep.join([str(Path(_PYTHON).parent), os.environ.get("PATH") or os.defpath])
    env = {"PATH": path, "HOME": str(workdir), "TMPDIR": str(tmpdir), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env |= {"PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1", "MALLOC_ARENA_MAX": "2"}
    if site.ENABLE_USER_SITE and site.getusersitepackages() in sys.path:
        env["PYTHONUSERBASE"] = site.getuserbase()  # `pip install --user`: HOME moved, keep it
    env.update((name, os.environ[name]) for name in allow if name in os.environ)
    return env


async def _communicate(process: Process, payload: bytes, out: _Stdout, err: _Stderr) -> int | None:
    """Feed stdin and read both pipes until the script exits; None if stdout overflowed."""
    assert process.stdin and process.stdout and process.stderr
    returncode: int | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_feed, process.stdin, payload)
            tg.start_soon(out.pump, process.stdout, tg.cancel_scope)
            tg.start_soon(err.pump, process.stderr)
            returncode = await process.wait()
            _signal_group(process.pid, signal.SIGKILL)  # what it left running would hold the pipes
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


async def _stop(process: Process) -> None:
    """Stop the whole group (SIGTERM, grace, SIGKILL) and reap it, even when cancelled."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            with anyio.move_on_after(_GRACE):
                await process.wait()
        _signal_group(process.pid, signal.SIGKILL)
        await process.aclose()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already empty


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


def _failure(skill: str, returncode: int, tail: list[str], memory_mb: int) -> SkillRunError:
    """A client-safe error for a non-zero exit: the cause when recognisable, else the code."""
    quoted = "\n".join(line[:300] for line in tail)
    if any(marker in quoted.lower() for marker in _OOM_MARKERS):
        return SkillRunError(
            f"'{skill}' ran out of memory (limit {memory_mb} MiB)",
            hint="raise memory_mb: in skill.yaml or make the script use less memory",
        )
    what = f"exited with code {returncode}"
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else -returncode
        what = f"was killed by {name}" + (" (CPU time limit)" if -returncode == signal.SIGXCPU else "")
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
