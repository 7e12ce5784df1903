"""Which files the file built-ins may touch: the allowed roots.

The convention of the reference filesystem MCP server: a client's MCP roots (asked with
`roots/list` in a handshake-era session) when it declares them, else the directories the
server was started with (`--allow-dir DIR`, or `ORCHESTRATOR_ALLOW_DIRS` with `:` between
them), else a default: the server's working directory, so that a user can review the project
they are in without configuration. The default is empty when that directory is `/` or the
home directory itself. A client's roots can only narrow directories the server was given
explicitly; they replace the default.

Whatever the roots, some places are never readable: /proc, /sys, /dev and /run (process
environments, devices, sockets, container secrets), system secret files (/etc/shadow, sudoers,
SSH host keys, private TLS keys), secret dot-folders wherever they are (~/.ssh, ~/.aws,
~/.gnupg, ...) and the server's own home directory — except the artifact directory of the
call, which holds the files a pipeline wrote. Paths are resolved (symbolic links followed)
before they are checked, and checked before anything about them (even whether they exist) is
told.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from .errors import SkillRunError

__all__ = [
    "ROOTS_ENV",
    "AllowedRoots",
    "PathNotAllowedError",
    "RootsOrigin",
    "allowed_path",
    "current_roots",
    "roots_of",
]

ROOTS_ENV = "ORCHESTRATOR_ALLOW_DIRS"
RootsOrigin = Literal["client", "allow-dir", "default"]

_SYSTEM_DENIED = ("/proc", "/sys", "/dev", "/run", "/var/run")
_SECRET_FILES = (
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
    "/etc/ssh", "/etc/ssl/private", "/etc/security/opasswd", "/var/lib/sss",
)  # fmt: skip
SECRET_NAMES = frozenset(
    {
        ".ssh", ".aws", ".gnupg", ".kube", ".docker", ".azure", ".password-store", ".netrc", ".git-credentials",
        ".pypirc", ".npmrc", ".pgpass", ".vault-token", ".terraform.d", ".gcloud", ".oci", ".config/gcloud",
        ".config/gh", ".config/hub", ".local/share/keyrings", ".mozilla", ".thunderbird",
    }
)  # fmt: skip
"""Folders (and files) holding credentials, refused wherever they are."""

_current: ContextVar[AllowedRoots | None] = ContextVar("allowed_roots", default=None)
current_roots = _current
"""The roots of the call under way, for code that gets no `ctx` (the `list_files` expression helper)."""


class PathNotAllowedError(SkillRunError):
    """A file built-in was given a path outside the allowed roots, or one never readable.

    A failure of the call (like a missing file), not a malformed argument: the value is valid,
    the server refuses the place. `where` names the argument.
    """

    def __init__(self, message: str, *, hint: str = "", field: str = "") -> None:
        super().__init__(message, hint=hint)
        self.where = field


@dataclass(frozen=True)
class AllowedRoots:
    """The folders file built-ins may read (and what they may never read)."""

    roots: tuple[Path, ...]
    origin: RootsOrigin
    state: Path | None = None
    """The server's home directory: its state is never readable."""

    @classmethod
    def resolve(cls, dirs: Sequence[str | Path] | None = None, *, state: Path | None = None) -> AllowedRoots:
        """`dirs` when given, else `$ORCHESTRATOR_ALLOW_DIRS`, else the default."""
        if not dirs:
            env = os.environ.get(ROOTS_ENV, "")
            dirs = [d for d in env.split(os.pathsep) if d.strip()]
        if dirs:
            return cls(_real(dirs), "allow-dir", _real([state])[0] if state else None)
        return cls.default(state=state)

    @classmethod
    def default(cls, *, state: Path | None = None, cwd: Path | None = None) -> AllowedRoots:
        """The working directory, unless it is / or the home directory itself (then nothing)."""
        here = Path(os.path.realpath(cwd or os.getcwd()))
        broad = here == Path("/") or here == Path(os.path.realpath(Path.home())) or _under(here, _SYSTEM_DENIED)
        return cls(() if broad else (here,), "default", _real([state])[0] if state else None)

    def narrowed(self, client_roots: Iterable[Path]) -> AllowedRoots:
        """The client's roots; within explicit `--allow-dir` directories only."""
        wanted = _real(client_roots)
        if self.origin != "allow-dir":
            return AllowedRoots(wanted, "client", self.state)
        kept: list[Path] = []
        for root in wanted:
            for allowed in self.roots:
                inner = root if root.is_relative_to(allowed) else allowed if allowed.is_relative_to(root) else None
                if inner is not None and inner not in kept:
                    kept.append(inner)
        return AllowedRoots(tuple(kept), "client", self.state)

    def never(self, path: Path) -> str | None:
        """Why `path` (resolved) is never readable, or None."""
        if _under(path, _SYSTEM_DENIED):
            return "process, device and runtime information is never served"
        if _under(path, _SECRET_FILES):
            return "system secrets are never served"
        text = path.as_posix() + "/"
        for name in SECRET_NAMES:
            if f"/{name}/" in text:
                return f"'{name}' holds credentials and is never served"
        if self.state is not None and _under(path, (str(self.state),)):
            return "it is the orchestrator's own home directory (read run files as run:// resources)"
        return None

    def refuses(self, path: Path, artifacts: Path | None = None) -> bool:
        """True when `path` (resolved) is never readable; the call's artifact directory is."""
        if artifacts is not None and _under(path, (os.path.realpath(artifacts),)):
            return False
        return self.never(path) is not None

    def allows(self, resolved: Path) -> bool:
        """True when `resolved` (a real path) is inside a root and not a never-readable place."""
        inside = any(resolved == root or resolved.is_relative_to(root) for root in self.roots)
        return inside and self.never(resolved) is None

    def check(self, path: str | Path, *, field: str = "path", artifacts: Path | None = None) -> Path:
        """The resolved path if a file built-in may read it; else `PathNotAllowedError`."""
        given = str(path)
        resolved = Path(os.path.realpath(Path(given).expanduser()))
        if artifacts is not None and _under(resolved, (os.path.realpath(artifacts),)):
            return resolved  # what this run wrote
        why = self.never(resolved)
        if why is not None:
            raise PathNotAllowedError(f"{given} is not readable: {why}", hint=self._hint(), field=field)
        if not self.allows(resolved):
            where = f"the allowed roots ({self.shown()})"
            raise PathNotAllowedError(f"{given} is outside {where}", hint=self._hint(), field=field)
        return resolved

    def shown(self) -> str:
        if not self.roots:
            return "none"
        listed = ", ".join(str(r) for r in self.roots)
        return f"{listed}; from the client's roots" if self.origin == "client" else listed

    def _hint(self) -> str:
        if self.origin == "client":
            return "add the folder as a root in your MCP client (its roots decide what file skills may read)"
        return (
            "start the server with --allow-dir DIR (repeatable; or ORCHESTRATOR_ALLOW_DIRS), "
            "or declare the folder as a root in your MCP client"
        )

    def as_dict(self) -> dict[str, Any]:
        return {"roots": [str(r) for r in self.roots], "origin": self.origin}

    def as_plain(self) -> dict[str, Any]:
        """Plain data for `ctx.extras`: it must reach a skill run in another process too."""
        return {**self.as_dict(), "state": str(self.state) if self.state is not None else None}

    @classmethod
    def from_plain(cls, data: dict[str, Any]) -> AllowedRoots:
        origin = data.get("origin")
        state = data.get("state")
        return cls(
            tuple(Path(r) for r in data.get("roots") or ()),
            origin if origin in ("client", "allow-dir", "default") else "allow-dir",
            Path(state) if state else None,
        )


def roots_of(extras: dict[str, Any] | None) -> AllowedRoots:
    """The roots of a call: `ctx.extras["roots"]`, else the call's context, else the default."""
    found = (extras or {}).get("roots")
    if isinstance(found, AllowedRoots):
        return found
    if isinstance(found, dict):
        return AllowedRoots.from_plain(cast("dict[str, Any]", found))
    return _current.get() or AllowedRoots.resolve()


def allowed_path(ctx: Any, path: str | Path, *, field: str = "path") -> Path:
    """`path` resolved, if the skill running with `ctx` (a SkillContext or None) may read it."""
    extras = getattr(ctx, "extras", None)
    artifacts = getattr(ctx, "artifact_dir", None)
    return roots_of(extras).check(path, field=field, artifacts=artifacts)


def _real(paths: Iterable[str | Path | None]) -> tuple[Path, ...]:
    out: list[Path] = []
    for path in paths:
        if path is None:
            continue
        real = Path(os.path.realpath(Path(path).expanduser()))
        if real not in out:
            out.append(real)
    return tuple(out)


def _under(path: Path, prefixes: Iterable[str]) -> bool:
    return any(path == Path(p) or path.is_relative_to(p) for p in prefixes)
