"""The bubblewrap command line of a confined process: what it sees and what it shares.

The sandbox's `/` is an empty tmpfs; only what this module lists is mounted in it:

- the system, read-only: /usr and the host's /bin, /sbin, /lib* (directories or the merged-/usr
  links), and the few /etc files programs need (users and groups, the dynamic linker, name
  resolution, certificates, time zone, locale). Not /etc as a whole: /etc/shadow, sudoers, SSH
  host keys and private TLS keys stay out;
- the Python installation that runs scripts (the server's venv and its base interpreter);
- what the caller asks for read-only (the skill folder, the project under test) and one
  writable work directory, each at its own path so that paths in arguments keep working. The
  work directory is a tmpfs of a fixed size (`work_bytes`): writing past it fails with ENOSPC
  inside the jail and the server's disk never sees it; the host's directory is mounted
  read-only at `SEED` so the jail's first step can copy what it holds (`skills.executors._workdir`
  brings the result back);
- a /proc of its own PID namespace, a minimal /dev, and private size-capped /tmp and /dev/shm.

Nothing else: not the user's home, not the server's home directory, not /root, /run or /var.

Two modes, chosen by who runs the server:

- `userns` (a normal user): an unprivileged user namespace that maps that user. The kernel
  counts RLIMIT_NPROC per user namespace, so the process limit is the sandbox's own.
- `root`: no user namespace (root in one would still be the host's root for file access and
  the process limit). bwrap keeps only CAP_SETUID and CAP_SETGID; the bootstrap uses them to
  become the sandbox user (`nobody`) before any code of the skill runs, with no way back
  (bwrap sets no_new_privs).
"""

from __future__ import annotations

import functools
import os
import site
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

__all__ = ["SEED", "BwrapMode", "bwrap_argv", "python_paths"]

BwrapMode = Literal["userns", "root"]

_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = (
    "passwd", "group", "nsswitch.conf", "hosts", "resolv.conf", "gai.conf", "services", "protocols",
    "localtime", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl/certs", "ssl/openssl.cnf",
    "ca-certificates", "pki/tls/certs", "pki/ca-trust", "mime.types", "os-release",
    f"python3.{sys.version_info.minor}",
)  # fmt: skip
_SHM_BYTES = 64 * 2**20
SEED = Path("/.orchestrator-seed")
"""Where a jail sees, read-only, the host's work directory whose files its tmpfs starts with."""


def bwrap_argv(
    bwrap: str,
    mode: BwrapMode,
    *,
    workdir: Path,
    read_only: Sequence[Path] = (),
    network: bool = False,
    tmp_bytes: int,
    work_bytes: int | None = None,
    seed: bool = False,
) -> list[str]:
    """The `bwrap ...` prefix that runs a command in a jail with these paths (resolved ones).

    With `work_bytes`, `workdir` is a tmpfs of that size (with `seed`, the host's `workdir` is
    at `SEED` too); without, the host's `workdir` itself is mounted writable.
    """
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    argv += ["--hostname", "sandbox"]
    if not network:
        argv.append("--unshare-net")
    if mode == "userns":
        argv += ["--unshare-user", "--disable-userns"]
    else:
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    argv += _system_args()
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    argv += ["--perms", "1777", "--size", str(_SHM_BYTES), "--tmpfs", "/dev/shm"]
    # After the private /tmp: a venv or a work directory under the host's /tmp is mounted onto it
    # (mounted before, the tmpfs would hide it and the jail would find no interpreter).
    argv += _python_args()
    extra = [p for p in _outside_system(read_only) if not _covered(p, python_paths())]
    binds = [(p, "--ro-bind") for p in extra] + [(workdir, "--bind" if work_bytes is None else "--tmpfs")]
    argv += _ancestors([p for p, _ in binds], [Path(p) for p in _SYSTEM] + list(python_paths()))
    for path, flag in sorted(binds, key=lambda b: len(b[0].parts)):  # a parent before what it holds
        if flag == "--tmpfs":  # writable by the sandbox user of root mode too
            argv += ["--perms", "0777", "--size", str(work_bytes), "--tmpfs", str(path)]
        else:
            argv += [flag, str(path), str(path)]
    if work_bytes is not None and seed:
        argv += ["--ro-bind", str(workdir), str(SEED)]
    argv += ["--chdir", "/", "--"]  # the bootstrap enters the work directory
    return argv


@functools.cache
def python_paths() -> tuple[Path, ...]:
    """The installation that runs scripts: the venv, its base interpreter, the user site."""
    candidates = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    candidates.append(str(Path(os.path.realpath(sys.executable)).parent.parent))
    if site.ENABLE_USER_SITE and site.getusersitepackages() in sys.path:
        candidates.append(site.getusersitepackages())  # `pip install --user` packages, not the home
    found = [Path(os.path.realpath(c)) for c in candidates if c and os.path.isdir(c)]
    return tuple(p for p in _outside_system(found) if not _covered(p, [q for q in found if q != p]))


@functools.cache
def _system_args() -> tuple[str, ...]:
    """Read-only binds of the system: the same for every jail of this process."""
    args: list[str] = []
    for name in _SYSTEM:
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    for name in _ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return tuple(args)


@functools.cache
def _python_args() -> tuple[str, ...]:
    """Read-only binds of the installation that runs scripts (it may live under /tmp)."""
    args = list(_ancestors(python_paths(), [Path(p) for p in _SYSTEM]))
    for path in python_paths():
        args += ["--ro-bind", str(path), str(path)]
    return tuple(args)


def _outside_system(paths: Iterable[Path]) -> list[Path]:
    """Paths not already visible through the system binds, each once."""
    system = [Path(p) for p in _SYSTEM if not os.path.islink(p)]
    out: list[Path] = []
    for path in paths:
        if path not in out and not _covered(path, system):
            out.append(path)
    return out


def _covered(path: Path, by: Iterable[Path]) -> bool:
    return any(path == other or path.is_relative_to(other) for other in by)


def _ancestors(paths: Iterable[Path], mounted: Sequence[Path]) -> list[str]:
    """`--dir` for every folder above `paths` that no mount provides, world-traversable.

    bwrap would create them 0700 and owned by root, which the sandbox user of root mode could
    not traverse.
    """
    wanted = set(paths)
    dirs: list[Path] = []
    for path in paths:
        for parent in reversed(path.parents[:-1]):  # outermost first, without "/"
            inside = _covered(parent, mounted) or any(parent.is_relative_to(w) for w in wanted if w != path)
            if not inside and parent not in dirs:
                dirs.append(parent)
    return [arg for d in sorted(dirs, key=lambda p: len(p.parts)) for arg in ("--perms", "0755", "--dir", str(d))]
