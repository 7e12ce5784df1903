"""The first code of every jailed process: limits, the sandbox user, then the program.

A tiny `python -I -S -c` program (~10 ms) sets the resource limits (address space, CPU
seconds, file size, descriptors, no core files, a process count) and execs the program, or runs
a Python script itself. `anyio.open_process` has no `preexec_fn`, and a `preexec_fn` is unsafe
in a threaded server anyway (the forked child can deadlock on a lock another thread held). In
root mode it first becomes the sandbox user, for good, with no capability left.

In a jail it also hands the work directory (a size-capped tmpfs, `skills.executors._workdir`) to
the server, fills it with a copy of the files the host's directory holds, and loads the
system-call filter (`skills.executors.seccomp`) as its last step: nothing of the skill runs before it.
"""

from __future__ import annotations

import math
import resource
import shutil
import signal
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .seccomp import LOADER, syscall_filter

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

# argv[1]: "resource:soft:hard,...", argv[2]: "uid:gid" to become (root mode) or "-", argv[3]: the
# working directory ("-": keep), argv[4]: the descriptor of a Unix socket to send the work
# directory's descriptor on ("-": none), argv[5]: the work directory, argv[6]: a read-only folder
# whose files the work directory starts with ("-": none), argv[7]: the system-call filter, a BPF
# program in hex ("-": none), argv[8:]: the program, or RUN_PYTHON script paths. The directory is
# entered as the sandbox user (root without capabilities may not enter the sandbox user's 0700
# folder). Root mode: the user namespace the sandbox user makes gives it its own process count,
# and every capability in it, which it drops at once (the program keeps none even when it runs in
# this process). Limits are set after the user namespace exists so that the kernel counts
# processes per sandbox. Python ignores SIGPIPE and SIGXFSZ and ignored signals survive exec, so
# they are reset for the program. A script run here sees `python script.py`: its folder first
# on sys.path, then the standard library and the given site-packages (their .pth files are not
# run), `__main__`, UTF-8 standard streams, no bytecode written.
_BOOTSTRAP = (
    """\
import _signal as s, os, resource as r, sys
a = sys.argv
def fail(what):
    sys.stderr.write(f"orchestrator: {what}\\n"); os._exit(126)
if a[2] != "-":
    import ctypes
    uid, gid = map(int, a[2].split(":"))
    try:
        os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)
    except OSError as e:
        fail(f"cannot become the sandbox user: {e}")
    libc = ctypes.CDLL(None)
    libc.unshare(0x10000000)  # CLONE_NEWUSER: its own process count (fails quietly where not allowed)
    for cap in range(64):  # PR_CAPBSET_DROP each, until past the last one the kernel knows
        if libc.prctl(24, cap, 0, 0, 0) != 0: break
    libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)())  # none effective or permitted
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, cleared by the change of user: /proc/self is the script's
if a[4] != "-":
    import _socket
    try:
        w, c = os.open(a[5], os.O_RDONLY | os.O_DIRECTORY), _socket.socket(fileno=int(a[4]))
        c.sendmsg([b"w"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, w.to_bytes(4, sys.byteorder))])
        c.close(); os.close(w)
    except OSError as e:
        fail(f"cannot hand over the work directory: {e}")
def seed(src, dst):  # copy the tree (links as links), modes and times; no shutil: its import costs ~10 ms
    for e in os.scandir(src):
        d = os.path.join(dst, e.name)
        try:
            st = e.stat(follow_symlinks=False)
            if e.is_symlink():
                os.symlink(os.readlink(e.path), d)
            elif e.is_dir(follow_symlinks=False):
                os.mkdir(d, 0o700); seed(e.path, d); os.chmod(d, st.st_mode & 0o777)
            elif e.is_file(follow_symlinks=False):
                i, o, n = os.open(e.path, os.O_RDONLY), os.open(d, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), 0
                try:
                    while n < st.st_size and (k := os.sendfile(o, i, n, st.st_size - n)): n += k
                finally:
                    os.close(i); os.close(o)
                os.chmod(d, st.st_mode & 0o777)
            else:
                continue
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
        except OSError as x:
            if os.statvfs(dst).f_bavail == 0: os._exit(125)  # full: the server says so
            sys.stderr.write(f"orchestrator: {e.name} was not copied into the work directory: {x.strerror}\\n")
if a[6] != "-":
    seed(a[6], a[5])
if a[3] != "-":
    os.chdir(a[3])
for spec in filter(None, a[1].split(",")):
    k, soft, hard = map(int, spec.split(":"))
    cap = r.getrlimit(k)[1]
    cap = hard if cap == r.RLIM_INFINITY else cap
    try: r.setrlimit(k, (min(soft, cap), min(hard, cap)))
    except (ValueError, OSError) as e: sys.stderr.write(f"orchestrator: resource limit {k}: {e}\\n")
s.signal(s.SIGPIPE, s.SIG_DFL); s.signal(s.SIGXFSZ, s.SIG_DFL)
os.closerange(3, 1 << 16)  # nothing of the server's but stdin, stdout, stderr (the cgroup gate's pipe)
if a[7] != "-":
    program = a[7]
"""
    + textwrap.indent(LOADER, "    ")
    + """\
if a[8] == "--run-python":
    script, paths = a[9], a[10]
    try:
        with open(script, "rb") as f: code = compile(f.read(), script, "exec")
    except OSError as e:
        fail(f"cannot execute {script}: {e.strerror}")
    sys.argv, sys.dont_write_bytecode = [script], True
    sys.path[:0] = [os.path.dirname(script)]
    sys.path += [p for p in paths.split(os.pathsep) if p]
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        stream.reconfigure(encoding="utf-8")
    main = type(sys)("__main__"); main.__file__ = script; sys.modules["__main__"] = main
    exec(code, main.__dict__)
else:
    try:
        os.execv(a[8], a[8:])
    except OSError as e:
        fail(f"cannot execute {a[8]}: {e.strerror}")
"""
)


def bootstrap_argv(
    command: Sequence[str],
    *,
    nproc: int | None,
    memory_mb: int | None,
    timeout: float | None,
    mode: BwrapMode | None,
    cwd: Path | None = None,
    handoff: int | None = None,
    workdir: Path | None = None,
    seed: Path | None = None,
) -> list[str]:
    """`python -I -S -c BOOTSTRAP ...` that limits itself, then execs `command`.

    Confined (`mode` given), it loads the jails' system-call filter where there is one. With
    `handoff` (a Unix socket's descriptor it inherits) it sends the descriptor of `workdir` on it,
    then copies the files of `seed` into `workdir`.
    """
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
    program = syscall_filter().program if mode is not None else None
    jail = [
        "-" if handoff is None or workdir is None else str(handoff),
        str(workdir or "-"),
        str(seed or "-"),
        program.hex() if program is not None else "-",
    ]
    return [PYTHON, "-I", "-S", "-c", _BOOTSTRAP, limits, drop, str(cwd or "-"), *jail, *command]


def exit_signal(returncode: int, confined: bool) -> int | None:
    """The signal that killed the program, if one did (bwrap reports it as 128 + N)."""
    if returncode < 0:
        return -returncode
    if confined and returncode > 128 and (returncode - 128) in signal.valid_signals():
        return returncode - 128
    return None
