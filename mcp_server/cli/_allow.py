"""`--allow-dir DIR`: the folders file built-ins may read (serve, call, run, runs resume)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import UsageError

HELP = (
    "a folder file skills (read-file, list-files, run-tests, ...) may read; repeat for more "
    "(default: $ORCHESTRATOR_ALLOW_DIRS, else the working directory; a client's MCP roots narrow them)"
)


def add_allow_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-dir", metavar="DIR", action="append", default=[], dest="allow_dirs", help=HELP)


def allowed_dirs(args: argparse.Namespace) -> list[Path] | None:
    """The --allow-dir folders, checked; None when none were given (the default applies)."""
    given: list[str] = getattr(args, "allow_dirs", None) or []
    for folder in given:
        if not Path(folder).expanduser().is_dir():
            raise UsageError(f"--allow-dir {folder}: not a directory", "give an existing folder")
    return [Path(folder).expanduser() for folder in given] or None
