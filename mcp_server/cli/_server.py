"""The server a command works with, built from its options (--home, --skills, --servers,
--allow-dir, the listing and the --state/--queue/--artifacts backends).

Apart from `_common` because it builds on the option modules (`_allow`), which build on
`_common`; like `_common`, it imports nothing beyond the standard library until it runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ._allow import allowed_dirs
from ._common import UsageError, home

if TYPE_CHECKING:
    from pipelines.storage.state import Backends

    from ..app import OrchestratorServer

__all__ = ["backends", "server"]


def backends(args: argparse.Namespace) -> Backends:
    """The checked --state/--queue/--artifacts of a command (a bad URL is a usage error, redacted)."""
    from pipelines.errors import PipelineError
    from pipelines.storage.state import Backends

    try:
        return Backends.of(getattr(args, "state", None), getattr(args, "queue", None), getattr(args, "artifacts", None))
    except PipelineError as exc:
        raise UsageError(exc.message, exc.hint) from None


def server(args: argparse.Namespace, *, watch: bool = False) -> OrchestratorServer:
    from ..app import create_server

    for extra in getattr(args, "skills", []):
        path = Path(extra).expanduser()
        if not path.is_dir() and not (path.is_file() and path.suffix.lower() in (".zip", ".skill")):
            raise UsageError(
                f"--skills {extra}: not a directory or a skill archive",
                "give a folder that holds skill folders, or a .zip/.skill archive",
            )
    servers = getattr(args, "servers", None)
    if servers and not Path(servers).expanduser().is_file():
        raise UsageError(f"--servers {servers}: no such file", "give a JSON file with an mcpServers object")
    options = ("catalogue", "catalogue_threshold", "page_size", "connect_grace", "handle_after")
    listing = {k: getattr(args, k) for k in options if hasattr(args, k)}
    return create_server(
        backends=backends(args),
        home=home(args),
        skill_dirs=getattr(args, "skills", []),
        watch=watch,
        servers=servers,
        allow_dirs=allowed_dirs(args),
        **listing,
    )
