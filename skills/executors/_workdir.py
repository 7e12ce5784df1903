"""A jail's work directory: a size-capped tmpfs, seeded from the host's directory and brought back.

A confined process writes into a tmpfs of `disk_mb` MiB mounted at its work directory's path
(`skills.executors._bwrap`), never into the host's directory itself: past the cap its writes fail with
ENOSPC inside the jail, and the server's disk never sees them. What the call leaves there is
brought back afterwards:

1. Before the jail starts, a Unix socket pair: the jail's bootstrap (`skills.executors._bootstrap`)
   sends the descriptor of its work directory on it before any code of the skill runs, then
   copies in the files the host's directory holds (mounted read-only at `SEED`).
2. After the jail ended, that descriptor still holds the tmpfs (its mount is gone with the
   jail's namespace, its files are not while a descriptor refers to them). If the tmpfs is full,
   or holds more than the cap in apparent size (sparse files) or more than `MAX_ENTRIES` files
   and folders, nothing is brought back and the call fails with `WorkdirFull`. Otherwise every
   regular file and folder is copied into the host's directory, except the files the host
   already has with the same size and modification time (those it was seeded with).

Files and folders keep their modes and modification times and, when the server runs as root,
their owner (the sandbox user). The copy never follows a symbolic link on either side (every
step opens the next name relative to a directory descriptor with O_NOFOLLOW), so a link the
skill made, or one planted in the host's directory, leads nowhere. Symbolic links, FIFOs and
sockets the skill made are not brought back, nor are deletions and renames of the files the
directory started with (the host keeps them).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from ..core.errors import LimitExceededError, SkillRunError

__all__ = ["MAX_ENTRIES", "WorkArea", "WorkdirFull"]

log = logging.getLogger("skills.isolation")

MAX_ENTRIES = 100_000
"""Most files and folders a call's work directory may hold at its end (each is copied back)."""
MAX_DEPTH = 100
"""Most levels of folders in it."""

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO cannot hang us
_CHUNK = 2**20


class WorkdirFull(LimitExceededError):
    """A confined call filled its work directory (`disk_mb`); none of what it wrote was kept."""


class _Over(Exception):
    """The tmpfs holds more than may be brought back (the reason is the message)."""


class WorkArea:
    """One confined call's work directory: made before its jail starts, brought back after it ended."""

    def __init__(self, host: Path, cap_bytes: int) -> None:
        self.host, self.cap = host, cap_bytes
        with os.scandir(host) as entries:
            self.seeded = next(entries, None) is not None
        """Whether the host's directory has anything to start with (else no copy, no mount)."""
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._ours.setblocking(False)

    @property
    def handoff(self) -> int:
        """The descriptor the jail inherits (`pass_fds`) and sends its work directory on."""
        return self._theirs.fileno()

    def started(self) -> None:
        """The jail has its copy of the socket: drop ours, so that a jail that dies early is seen as EOF."""
        self._theirs.close()

    def discard(self) -> None:
        """Close both ends (the jail did not start, or its work directory has been dealt with)."""
        self._theirs.close()
        self._ours.close()

    async def bring_back(self, *, complain: bool) -> None:
        """Copy what the call left in its work directory to the host's; a full one is dropped.

        Raises:
            WorkdirFull: the tmpfs was full or over a bound, and `complain` (the process ended by
                itself: a call that is being stopped already has its error).
            SkillRunError: the host's directory could not take the files.
        """
        received = self._receive()
        self.discard()
        if received is None:
            return  # the jail ended before its bootstrap handed the directory over: nothing was written
        try:
            if not _is_work_tmpfs(received, self.cap):
                log.error("the descriptor a jail sent is not its work directory; nothing was brought back")
                return
            try:
                if _busy(received, self.cap):
                    await anyio.to_thread.run_sync(_copy_back, received, self.host, self.cap)
            except _Over as over:
                if complain:
                    raise WorkdirFull(
                        f"the call {over}; nothing it wrote there was kept",
                        limit="disk_mb",
                        hint="write less, or raise `disk_mb:` in skill.yaml (for every skill: `isolation: "
                        "{disk_mb: ...}` in the home's config.yaml); the directory starts with a copy of "
                        "the files already in it, which count too",
                    ) from None
            except OSError as exc:
                raise SkillRunError(
                    f"the files the call wrote could not be saved to {self.host}: {exc.strerror or exc}",
                    hint="check the free space and permissions of that directory",
                ) from None
        finally:
            os.close(received)

    def _receive(self) -> int | None:
        try:
            _, fds, _, _ = socket.recv_fds(self._ours, 16, 1, socket.MSG_CMSG_CLOEXEC)
        except OSError:  # nothing was sent (BlockingIOError), or the socket is gone
            return None
        return fds[0] if fds else None


def _is_work_tmpfs(fd: int, cap: int) -> bool:
    """A directory on a filesystem of exactly the cap's size: the tmpfs the jail was given."""
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        return False
    fs = os.fstatvfs(fd)
    return fs.f_blocks * fs.f_frsize == cap


def _busy(fd: int, cap: int) -> bool:
    """Whether the work directory holds anything (most calls leave it empty: no thread hop then)."""
    fs = os.fstatvfs(fd)
    if fs.f_bavail == 0:
        raise _Over(f"filled its work directory ({_mib(cap)}, `disk_mb`)")
    with os.scandir(fd) as entries:
        return next(entries, None) is not None


def _copy_back(src: int, host: Path, cap: int) -> None:
    """Measure the tmpfs (refusing it whole when over a bound), then copy it into `host`."""
    size, count = _measure(src, cap, 0, 0, 0)
    log.debug("bringing back %d entries, %d bytes, to %s", count, size, host)
    dst = os.open(host, _OPEN_DIR)
    try:
        _copy_dir(src, dst, "", _Left(cap, MAX_ENTRIES), 0)
    finally:
        os.close(dst)


def _measure(fd: int, cap: int, size: int, count: int, depth: int) -> tuple[int, int]:
    """Apparent bytes and entries under `fd`; `_Over` as soon as one bound is passed."""
    if depth > MAX_DEPTH:
        raise _Over(f"nested folders more than {MAX_DEPTH} levels deep in its work directory")
    with os.scandir(fd) as entries:
        for entry in entries:
            count += 1
            if count > MAX_ENTRIES:
                raise _Over(f"left more than {MAX_ENTRIES:,} files and folders in its work directory")
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISREG(info.st_mode):
                size += info.st_size
                if size > cap:
                    what = f"left files of more than {_mib(cap)} in its work directory"
                    raise _Over(f"{what} (`disk_mb`; a sparse file counts whole)")
            elif stat.S_ISDIR(info.st_mode):
                sub = _open_dir(entry.name, fd)
                if sub is not None:
                    try:
                        size, count = _measure(sub, cap, size, count, depth + 1)
                    finally:
                        os.close(sub)
    return size, count


@dataclass
class _Left:
    """What the copy may still write. A jail stopped by a kill may linger a moment after its bwrap
    is reaped and change its files after they were measured: the copy keeps to the bounds anyway."""

    bytes: int
    entries: int


def _copy_dir(src: int, dst: int, where: str, left: _Left, depth: int) -> None:
    with os.scandir(src) as it:
        entries = list(it)
    for entry in entries:
        name, shown = entry.name, f"{where}{entry.name}"
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile (a jail still being torn down)
        left.entries -= 1
        if left.entries < 0 or (stat.S_ISREG(info.st_mode) and info.st_size > left.bytes):
            log.warning("work directory: %s is past the bounds it was measured within; not kept", shown)
        elif stat.S_ISDIR(info.st_mode):
            if depth < MAX_DEPTH:
                _copy_subdir(src, dst, name, shown, info.st_mode, left, depth + 1)
        elif stat.S_ISREG(info.st_mode):
            left.bytes -= info.st_size
            _copy_file(src, dst, name, shown, info)
        else:
            log.info("work directory: %s is not a file or a folder; not kept", shown)


def _copy_subdir(src: int, dst: int, name: str, shown: str, mode: int, left: _Left, depth: int) -> None:
    inner = _open_dir(name, src)
    if inner is None:
        return
    try:
        try:
            os.mkdir(name, stat.S_IMODE(mode) | 0o700, dir_fd=dst)
            if _ROOT:
                os.chown(name, *_owner(inner), dir_fd=dst, follow_symlinks=False)
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno in _FATAL:
                raise
            log.warning("work directory: folder %s could not be made on the host (%s)", shown, exc.strerror)
            return
        target = _open_dir(name, dst)
        if target is None:
            log.warning("work directory: %s is not a folder on the host (a link?); its contents were not kept", shown)
            return
        try:
            _copy_dir(inner, target, f"{shown}/", left, depth)
        finally:
            os.close(target)
    finally:
        os.close(inner)


def _copy_file(src: int, dst: int, name: str, shown: str, info: os.stat_result) -> None:
    try:
        there = os.stat(name, dir_fd=dst, follow_symlinks=False)
    except OSError:
        there = None
    if there is not None and stat.S_ISREG(there.st_mode):
        if (there.st_size, there.st_mtime_ns) == (info.st_size, info.st_mtime_ns):
            return  # what it started with (or the same): left as it is
    try:
        source = os.open(name, _OPEN_FILE, dir_fd=src)
    except OSError as exc:
        log.warning("work directory: %s could not be read (%s); not kept", shown, exc.strerror)
        return
    temp = f".{name[:200]}.{secrets.token_hex(4)}.incoming"
    try:
        if stat.S_ISREG(os.fstat(source).st_mode):
            _write(source, dst, temp, info)
            os.replace(temp, name, src_dir_fd=dst, dst_dir_fd=dst)  # replaces a link itself, never its target
    except OSError as exc:
        try:
            os.unlink(temp, dir_fd=dst)
        except OSError:
            pass
        if exc.errno in _FATAL:
            raise
        log.warning("work directory: %s could not be kept (%s)", shown, exc.strerror or exc)
    finally:
        os.close(source)


_FATAL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})
"""The host's directory cannot take files at all: the call fails rather than keep a part."""


def _write(source: int, dst: int, temp: str, info: os.stat_result) -> None:
    target = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst)
    try:
        _copy_bytes(source, target, info.st_size)
        if _ROOT:  # owned, as the jail wrote it, by the sandbox user: the next jail may change it too
            os.fchown(target, info.st_uid, info.st_gid)
        os.fchmod(target, stat.S_IMODE(info.st_mode) & 0o777)
        os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    finally:
        os.close(target)


def _copy_bytes(source: int, target: int, size: int) -> None:
    """At most `size` bytes (the file's size when measured: nothing grows it now)."""
    done = 0
    while done < size:
        try:
            sent = os.sendfile(target, source, done, min(_CHUNK, size - done))
        except OSError:
            data = os.pread(source, min(_CHUNK, size - done), done)
            sent = os.write(target, data) if data else 0
        if sent == 0:
            return  # shorter than measured
        done += sent


_ROOT = os.geteuid() == 0


def _owner(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_uid, info.st_gid


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:g} MiB"


def _open_dir(name: str, parent: int) -> int | None:
    try:
        return os.open(name, _OPEN_DIR, dir_fd=parent)
    except OSError:
        return None
