"""The first code of every jailed process: limits, the sandbox user, then the program.

A tiny `python -I -S -c` program (~10 ms) sets the resource limits (address space, CPU
seconds, file size, descriptors, no core files, a process count) and execs the program, or runs
a Python script itself. `anyio.open_process` has no `preexec_fn`, and a `preexec_fn` is unsafe
in a threaded server anyway (the forked child can deadlock on a lock another thread held). In
root mode it first becomes the sandbox user, for good.
"""

from __future__ import annotations

import math
import resource
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._bwrap import BwrapMode

__all__ = ["PYTHON", "RUN_PYTHON", "SANDBOX_USER", "bootstrap_argv", "exit_signal"]

SANDBOX_USER = 65534
"""uid and gid (`nobody`) a root server's confined processes run as."""

PYTHON = sys.executable or shutil.which("python3") or "/usr/bin/python3"
_FSIZE = 100 * 2**20  # largest file a jailed process may write
_NOFILE = 1024

RUN_PYTHON = "--run-python"
"""`bootstrap_argv([RUN_PYTHON, script, paths])`: run a Python script in the bootstrap's own
interpreter (with `paths`, os.pathsep-joined, after the script's folder on sys.path) instead of
starting a second one: half the start-up of a Python script skill."""

# argv[1]: "resource:soft:hard,...", argv[2]: "uid:gid" to become (root mode) or "-", argv[3]:
# the working directory ("-": keep), argv[4:]: the program, or RUN_PYTHON script paths. The
# directory is entered as the sandbox user (root without capabilities may not enter the sandbox
# user's 0700 folder). Limits are set after the user namespace exists so that the kernel counts
# processes per sandbox. Python ignores SIGPIPE and SIGXFSZ and ignored signals survive exec, so
# they are reset for the program. A script run here sees `python script.py`: its folder first
# on sys.path, then the standard library and the given site-packages (their .pth files are not
# run), `__main__`, UTF-8 standard streams, no bytecode written.
_BOOTSTRAP = """\
import _signal as s, os, resource as r, sys
if sys.argv[2] != "-":
    import ctypes
    uid, gid = map(int, sys.argv[2].split(":"))
    try:
        os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)
    except OSError as e:
        sys.stderr.write(f"orchestrator: cannot become the sandbox user: {e}\\n"); os._exit(126)
    libc = ctypes.CDLL(None)
    libc.unshare(0x10000000)  # CLONE_NEWUSER: its own process count (fails quietly where not allowed)
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, cleared by the change of user: /proc/self is the script's
if sys.argv[3] != "-":
    os.chdir(sys.argv[3])
for spec in filter(None, sys.argv[1].split(",")):
    k, soft, hard = map(int, spec.split(":"))
    cap = r.getrlimit(k)[1]
    cap = hard if cap == r.RLIM_INFINITY else cap
    try: r.setrlimit(k, (min(soft, cap), min(hard, cap)))
    except (ValueError, OSError) as e: sys.stderr.write(f"orchestrator: resource limit {k}: {e}\\n")
s.signal(s.SIGPIPE, s.SIG_DFL); s.signal(s.SIGXFSZ, s.SIG_DFL)
os.closerange(3, 1 << 16)  # nothing of the server's but stdin, stdout, stderr (the cgroup gate's pipe)
if sys.argv[4] == "--run-python":
    script, paths = sys.argv[5], sys.argv[6]
    try:
        with open(script, "rb") as f: code = compile(f.read(), script, "exec")
    except OSError as e:
        sys.stderr.write(f"orchestrator: cannot execute {script}: {e.strerror}\\n"); os._exit(126)
    sys.argv, sys.dont_write_bytecode = [script], True
    sys.path[:0] = [os.path.dirname(script)]
    sys.path += [p for p in paths.split(os.pathsep) if p]
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        stream.reconfigure(encoding="utf-8")
    main = type(sys)("__main__"); main.__file__ = script; sys.modules["__main__"] = main
    exec(code, main.__dict__)
else:
    try:
        os.execv(sys.argv[4], sys.argv[4:])
    except OSError as e:
        sys.stderr.write(f"orchestrator: cannot execute {sys.argv[4]}: {e.strerror}\\n")
        os._exit(126)
"""


def bootstrap_argv(
    command: Sequence[str],
    *,
    nproc: int | None,
    memory_mb: int | None,
    timeout: float | None,
    mode: BwrapMode | None,
    cwd: Path | None = None,
) -> list[str]:
    """`python -I -S -c BOOTSTRAP ...` that limits itself, then execs `command`."""
    specs = [
        (resource.RLIMIT_FSIZE, _FSIZE, _FSIZE),
        (resource.RLIMIT_NOFILE, _NOFILE, _NOFILE),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if nproc is not None:
        specs.append((resource.RLIMIT_NPROC, nproc, nproc))
    if memory_mb is not None:
        specs.append((resource.RLIMIT_AS, memory_mb * 2**20, memory_mb * 2**20))
    if timeout is not None:
        cpu = math.ceil(timeout) + 1
        specs.append((resource.RLIMIT_CPU, cpu, cpu + 1))  # SIGXCPU first, SIGKILL a second later
    limits = ",".join(f"{k}:{soft}:{hard}" for k, soft, hard in specs)
    drop = f"{SANDBOX_USER}:{SANDBOX_USER}" if mode == "root" else "-"
    return [PYTHON, "-I", "-S", "-c", _BOOTSTRAP, limits, drop, str(cwd or "-"), *command]


def exit_signal(returncode: int, confined: bool) -> int | None:
    """The signal that killed the program, if one did (bwrap reports it as 128 + N)."""
    if returncode < 0:
        return -returncode
    if confined and returncode > 128 and (returncode - 128) in signal.valid_signals():
        return returncode - 128
    return None
