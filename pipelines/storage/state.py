"""Where runs keep their state, and who runs them: embedded (the default) or distributed.

Embedded: one process runs each pipeline, with its run history, task records and checkpoints in
the home's `state.sqlite`. Distributed (`--state postgresql://...`, `--queue redis://...`): the
same records, the checkpoints and the registered pipelines live in PostgreSQL, shared by every
server replica and worker; with a queue, runs and the items of parallel loops are handed to
`orchestrator worker` processes through Docket on Redis. `Backends` is that choice, made once
per process from the command line (or `$ORCHESTRATOR_STATE`, `$ORCHESTRATOR_QUEUE`,
`$ORCHESTRATOR_ARTIFACTS`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import PipelineError
from .pg import is_postgres, redact

__all__ = ["Backends", "redact"]

_QUEUE_SCHEMES = ("redis://", "rediss://", "redis+sentinel://", "unix://")


@dataclass(frozen=True)
class Backends:
    """The state and queue a process uses (all None: the embedded mode)."""

    state: str | None = None
    """A PostgreSQL URL (`postgresql://user:password@host:5432/db`); None: the home's state.sqlite."""
    queue: str | None = None
    """A Redis URL (`redis://host:6379/0`); None: runs execute in the process that starts them."""
    artifacts: Path | None = None
    """The folder under which run artifacts go (`<folder>/<pipeline>/runs/<run>/`); None: the home's
    pipelines/. In the distributed mode, a folder every replica and worker mounts."""

    @property
    def kind(self) -> Literal["sqlite", "postgresql"]:
        return "postgresql" if self.state else "sqlite"

    @property
    def distributed(self) -> bool:
        return self.queue is not None

    @classmethod
    def of(cls, state: str | None = None, queue: str | None = None, artifacts: str | Path | None = None) -> Backends:
        """Checked settings from flags, falling back on `$ORCHESTRATOR_STATE`, `_QUEUE`, `_ARTIFACTS`."""
        # None: not given, the environment decides; "" : given empty, the embedded mode.
        state = (os.environ.get("ORCHESTRATOR_STATE") if state is None else state) or None
        queue = (os.environ.get("ORCHESTRATOR_QUEUE") if queue is None else queue) or None
        folder = (os.environ.get("ORCHESTRATOR_ARTIFACTS") if artifacts is None else artifacts) or None
        if state is not None and not is_postgres(state):
            raise PipelineError(
                f"--state {redact(state)}: not a PostgreSQL URL",
                hint="give postgresql://USER:PASSWORD@HOST:5432/DATABASE, or leave it out for the home's state.sqlite",
            )
        if queue is not None and not queue.startswith(_QUEUE_SCHEMES):
            raise PipelineError(
                f"--queue {redact(queue)}: not a Redis URL", hint="give redis://HOST:6379/0 (rediss:// for TLS)"
            )
        if queue is not None and state is None:
            raise PipelineError(
                "--queue needs --state: workers on other machines read and write the runs in the shared state",
                hint="add --state postgresql://USER:PASSWORD@HOST:5432/DATABASE",
            )
        return cls(state, queue, Path(folder).expanduser().resolve() if folder else None)

    def describe(self) -> str:
        """What a person should read about these settings (passwords redacted)."""
        if not self.state:
            return "embedded (state.sqlite in the home, runs in this process)"
        text = f"state {redact(self.state)}"
        text += f", queue {redact(self.queue)}" if self.queue else ", runs in this process"
        return text


def check_state(url: str, timeout: float = 5.0) -> dict[str, object]:
    """Connect to the state database and migrate its schema (as every replica does on start).

    The report `doctor` shows: `ok`, the server's version and the schema version, or the error
    (the URL redacted: a driver's message may quote it).
    """
    from .pg import SCHEMA_VERSION, postgres

    shown = redact(url)
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=max(1, int(timeout))) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        postgres(url).migrate()
    except ImportError as exc:
        return {"url": shown, "ok": False, "error": f"{exc.name} is not installed", "hint": _EXTRA_HINT}
    except Exception as exc:  # why: any failure to reach or migrate the database is the finding itself
        return {
            "url": shown,
            "ok": False,
            "error": _scrub(str(exc), url),
            "hint": "check the URL, the server, and the password",
        }
    return {"url": shown, "ok": True, "server": f"PostgreSQL {row[0] if row else '?'}", "schema": SCHEMA_VERSION}


def check_queue(url: str, timeout: float = 5.0) -> dict[str, object]:
    """PING the queue's Redis and read its version (Docket needs streams: Redis 6.2 or newer)."""
    shown = redact(url)
    try:
        from redis import Redis

        # redis-py leaves the **kwargs of these methods untyped
        with Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout) as client:  # pyright: ignore[reportUnknownMemberType]
            client.ping()  # pyright: ignore[reportUnknownMemberType]
            version = str(client.info("server").get("redis_version", "?"))  # pyright: ignore[reportUnknownMemberType]
    except ImportError as exc:
        return {"url": shown, "ok": False, "error": f"{exc.name} is not installed", "hint": _EXTRA_HINT}
    except Exception as exc:  # why: any failure to reach Redis is the finding itself
        return {"url": shown, "ok": False, "error": _scrub(str(exc), url), "hint": "check the URL and that Redis runs"}
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts and parts < (6, 2):
        return {"url": shown, "ok": False, "server": f"Redis {version}", "error": "Redis 6.2 or newer is needed"}
    return {"url": shown, "ok": True, "server": f"Redis {version}"}


_EXTRA_HINT = 'pip install "mcp-orchestrator[distributed]"'


def _scrub(text: str, url: str) -> str:
    """An error message without the URL's password (drivers may quote the URL or its parts)."""
    from urllib.parse import urlsplit

    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    text = text.replace(url, redact(url))
    return text.replace(password, "***") if password else text
