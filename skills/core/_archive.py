"""Skill archives (`.zip`, and `.skill`: the zip Claude exports) unpacked safely into a cache.

An archive is someone else's file and is read as hostile: its members' names may climb out
(`../../.bashrc`, `/etc/x`), be links, repeat, or be counted in the hundreds of thousands; its
declared sizes may lie and a few kilobytes may inflate to gigabytes. Every one of these is
bounded here before a byte lands on disk, and counted while it is written (the sizes in the
zip directory are not trusted).

An archive is unpacked once into `<cache>/archives/<sha256 of the archive>/` (written to a
temporary folder, then renamed into place): its skills are then ordinary skill folders
(resources, digests, python and script skills work unchanged) and a restart with the same
archive unpacks nothing. A changed archive has another hash and so another folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

__all__ = ["MAX_ARCHIVE_BYTES", "MAX_MEMBERS", "MAX_UNPACKED_BYTES", "ArchiveError", "unpack"]

MAX_ARCHIVE_BYTES = 64 << 20
"""Largest archive file read (64 MiB)."""
MAX_MEMBERS = 2_000
"""Most entries in one archive (SEP-2640 hosts must take 512 files a skill)."""
MAX_UNPACKED_BYTES = 64 << 20
"""Most bytes all members may unpack to (SEP-2640's per-skill limit is 16 MiB)."""
MAX_RATIO = 200
"""Most a member may inflate relative to its compressed size (a zip bomb does 1000x and more)."""
_CHUNK = 1 << 16


class ArchiveError(Exception):
    """An archive that is refused; the message says which bound it broke, `hint` how to fix it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def unpack(archive: Path, cache_dir: Path) -> Path:
    """The folder holding `archive`'s files, unpacking it on first use; `ArchiveError` if refused."""
    size = archive.stat().st_size
    if size > MAX_ARCHIVE_BYTES:
        raise ArchiveError(
            f"the archive is {size:,} bytes, over the {MAX_ARCHIVE_BYTES:,} bytes the server reads",
            "unpack it into a folder and serve that",
        )
    digest = hashlib.sha256()
    with archive.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    target = cache_dir / "archives" / digest.hexdigest()[:32]
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=target.parent))
    try:
        _extract(archive, staging)
        try:
            staging.rename(target)
        except OSError:  # another process unpacked the same archive first: theirs is identical
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _extract(archive: Path, into: Path) -> None:
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArchiveError(f"not a readable zip archive: {exc}", "re-export the skill, or unpack it by hand") from None
    with zf:
        members = zf.infolist()
        if len(members) > MAX_MEMBERS:
            raise ArchiveError(
                f"the archive has {len(members):,} entries, more than the {MAX_MEMBERS:,} the server unpacks",
                "split it, or unpack it into a folder and serve that",
            )
        names: set[str] = set()
        total = 0
        # An archive of one skill's files (SKILL.md at the top) unpacks into a folder named after
        # the archive, so that the skill's folder name is its name, as for any other skill.
        top = any(_member_name(info) == "SKILL.md" for info in members)
        prefix = _folder_name(archive.stem) + "/" if top else ""
        for info in members:
            name = _member_name(info)
            if name is None:
                continue
            name = prefix + name
            if name.lower() in names:
                raise ArchiveError(f"the entry '{name}' appears twice", "re-create the archive")
            names.add(name.lower())
            dest = into / name
            if info.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            total = _copy_member(zf, info, dest, total)


def _folder_name(stem: str) -> str:
    """A safe folder name from an archive's file name (`PDF Tools (1)` -> `pdf-tools-1`)."""
    name = "-".join("".join(c if c.isalnum() else " " for c in stem.lower()).split())
    return name[:64] or "skill"


def _member_name(info: zipfile.ZipInfo) -> str | None:
    """The member's safe relative path; `ArchiveError` for a name or a kind that is refused."""
    raw = info.filename
    name = raw.replace("\\", "/")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if raw.startswith(("/", "\\")) or ":" in (parts[0] if parts else "") or ".." in parts or "\0" in raw:
        raise ArchiveError(
            f"the entry '{raw[:200]}' points outside the archive's folder",
            "archives must hold relative paths without '..'",
        )
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise ArchiveError(f"the entry '{raw[:200]}' is a symbolic link", "store the file itself, not a link")
    if parts and parts[0] == "__MACOSX":
        return None  # Finder's resource forks: not part of any skill
    return "/".join(parts) if parts else None


def _copy_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, total: int) -> int:
    """Write one member, counting the bytes actually inflated against every bound."""
    allowed = max(info.compress_size, 1) * MAX_RATIO
    written = 0
    with zf.open(info) as src, dest.open("wb") as out:
        while chunk := src.read(_CHUNK):
            written += len(chunk)
            total += len(chunk)
            if written > allowed and written > _CHUNK:
                raise ArchiveError(
                    f"the entry '{info.filename[:200]}' inflates more than {MAX_RATIO}x: a zip bomb",
                    "store files with ordinary compression",
                )
            if total > MAX_UNPACKED_BYTES:
                raise ArchiveError(
                    f"the archive unpacks to more than {MAX_UNPACKED_BYTES:,} bytes",
                    "keep a skill's files small, or unpack it into a folder and serve that",
                )
            out.write(chunk)
    os.chmod(dest, 0o644 | (0o111 if (info.external_attr >> 16) & 0o100 else 0))
    return total
