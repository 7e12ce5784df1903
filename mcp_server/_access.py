"""What the calls of one server may reach: the allowed roots (the client's own when it declares
them) and the home's isolation settings, handed to each call in its `ctx`.

Roots: `--allow-dir` / `ORCHESTRATOR_ALLOW_DIRS`, else the default (`skills.core.roots`). A
handshake-era client that declares the `roots` capability is asked `roots/list` on its first
tool call; the answer narrows what its calls may read and is kept for the connection until the
client sends `notifications/roots/list_changed`. 2026-07-28 clients cannot be asked (no
server-to-client requests in that era), so the server's own roots apply to them. A client that
does not answer in time, or answers nonsense, gets the server's roots and a log line.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from contextvars import Token
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import anyio
import mcp_types as types
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from adapters.context import request_of
from skills import Home, SkillContext
from skills.core.roots import AllowedRoots, current_roots
from skills.executors.isolation import IsolationSettings, budget_support, load_settings, probe
from skills.executors.seccomp import syscall_filter

__all__ = ["Access"]

log = logging.getLogger("mcp_server.access")

ROOTS_TIMEOUT = 10.0
"""Seconds a client has to answer roots/list."""
PROBE_DELAY = 2.0
"""Seconds `Access.report` waits at most for the first tools/list before it probes bwrap."""


class Access:
    """The allowed roots and isolation settings of one server's calls."""

    def __init__(self, home: Home | None, allow_dirs: Sequence[str | Path] | None = None) -> None:
        self.base = AllowedRoots.resolve(allow_dirs, state=home.root if home is not None else None)
        self.settings = load_settings(home.root) if home is not None else IsolationSettings()
        self._client: weakref.WeakKeyDictionary[Any, AllowedRoots] = weakref.WeakKeyDictionary()
        self._isolation = self.settings.model_dump()
        self._plain: dict[int, tuple[AllowedRoots, dict[str, Any]]] = {}
        """`as_plain()` of the roots calls get (the server's, each client's), made once each."""
        for root in self.base.roots:
            if why := self.base.never(root):
                log.warning("allowed root %s is never readable: %s", root, why)

    def install(self, lowlevel: Any) -> None:
        """Forget a client's roots when it says they changed."""
        lowlevel.add_notification_handler(
            "notifications/roots/list_changed", types.NotificationParams, self._on_roots_changed
        )

    def report(self, begin: threading.Event | None = None, *, at_most: float = PROBE_DELAY) -> None:
        """Say once at start-up how subprocesses of skills will be confined (this probes bwrap).

        The per-call budgets are prepared first (on cgroup v2 the server moves into a leaf of its
        own cgroup, before any call starts a process). The bwrap probe, a real jail whose processes
        take ~0.2 s of the machine, waits for `begin` (set once the first tools/list is answered)
        or `at_most` seconds: on a busy machine it would otherwise compete with the start-up a
        client is waiting for. A call that needs confinement sooner probes by itself.
        """
        budgets = budget_support()  # on cgroup v2 this moves the server into a leaf of its own cgroup, once
        if begin is not None:
            begin.wait(at_most)
        isolation = probe(self.settings)
        if isolation.available:
            log.info("isolation: %s; work directories of %d MiB", isolation.summary(), isolation.disk_mb)
            syscalls = syscall_filter()
            if syscalls.available:
                log.info("jails: %s", syscalls.summary())
            else:
                log.warning(
                    "jails run WITHOUT a system-call filter (namespaces and mounts are refused only by the "
                    "capabilities they lack): %s",
                    syscalls.reason,
                )
        else:
            log.warning(
                "isolation %s; script skills, run-tests and shell-command run UNCONFINED (with the server's "
                "file and network access) and create_skill will not test or publish skills%s",
                isolation.summary(),
                " (allowed by isolation: allow_unconfined)" if self.settings.allow_unconfined else "",
            )
        if budgets.enforced:
            log.info(
                "per-call budgets: %d MiB and %d processes in total, %s",
                self.settings.total_memory_mb,
                self.settings.max_processes,
                budgets.summary(),
            )
        else:
            log.warning("per-call budgets are NOT enforced (only each process's rlimits): %s", budgets.detail)
        log.info("file skills may read: %s", self.base.shown())

    def bound(self, ctx: SkillContext, context: Any) -> Bound:
        """While inside, the call of `ctx` has its roots and isolation (also for expressions)."""
        return Bound(self, ctx, context)

    def apply(self, ctx: SkillContext) -> None:
        """`bound` without a client, for the rest of the current task (a run from the command line)."""
        self._put(ctx, self.base)
        current_roots.set(self.base)

    def _put(self, ctx: SkillContext, roots: AllowedRoots) -> None:
        # Plain data: a skill may run in another process (a worker), which gets a copy of extras.
        # Made once per roots and settings (a model_dump per call cost more than the rest of
        # this); each call gets its own copy, so a skill that changes its copy changes no other call's.
        cached = self._plain.get(id(roots))
        if cached is None or cached[0] is not roots:
            if len(self._plain) > 64:
                self._plain.clear()
            cached = self._plain[id(roots)] = (roots, roots.as_plain())
        ctx.extras["roots"] = {**cached[1], "roots": list(cached[1]["roots"])}
        ctx.extras["isolation"] = dict(self._isolation)

    async def roots_for(self, context: Any) -> AllowedRoots:
        request = request_of(context)
        session = getattr(request, "session", None)
        if session is None or not _can_ask_roots(session):
            return self.base
        key = getattr(session, "_connection", session)
        found = self._client.get(key)
        if found is None:
            found = await self._ask(session, request)
            self._client[key] = found
        return found

    async def _ask(self, session: Any, request: Any) -> AllowedRoots:
        related = ServerMessageMetadata(related_request_id=request.request_id)
        try:
            with anyio.fail_after(ROOTS_TIMEOUT):
                result = await session.send_request(types.ListRootsRequest(), types.ListRootsResult, metadata=related)
        except Exception as exc:  # a client that fails roots/list must not fail the call: the server's roots apply
            log.warning("the client declared roots but roots/list failed (%r); using %s", exc, self.base.shown())
            return self.base
        paths = [p for p in (_path_of(root.uri) for root in result.roots) if p is not None]
        if not paths:
            log.info("the client declared no file roots; using %s", self.base.shown())
            return self.base
        narrowed = self.base.narrowed(paths)
        log.info("client roots: %s", narrowed.shown())
        return narrowed

    async def _on_roots_changed(self, ctx: Any, params: Any) -> None:
        session = getattr(ctx, "session", None)
        self._client.pop(getattr(session, "_connection", session), None)


class Bound:
    """`Access.bound`: a class, not an `asynccontextmanager` (a generator per call cost more
    than the rest of it)."""

    __slots__ = ("_access", "_context", "_ctx", "_token")

    def __init__(self, access: Access, ctx: SkillContext, context: Any) -> None:
        self._access, self._ctx, self._context = access, ctx, context
        self._token: Token[AllowedRoots | None] | None = None

    async def __aenter__(self) -> None:
        roots = await self._access.roots_for(self._context)
        self._access._put(self._ctx, roots)  # pyright: ignore[reportPrivateUsage]  # its own helper
        self._token = current_roots.set(roots)

    async def __aexit__(self, *exc: object) -> None:
        if self._token is not None:
            current_roots.reset(self._token)


def _can_ask_roots(session: Any) -> bool:
    if session.protocol_version in MODERN_PROTOCOL_VERSIONS or not session.can_send_request:
        return False
    caps = session.client_capabilities
    return caps is not None and caps.roots is not None


def _path_of(uri: Any) -> Path | None:
    """The local path of a `file://` root URI (other schemes are not folders of this machine)."""
    parsed = urlparse(str(uri))
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        log.info("ignoring a root that is not a local folder: %s", uri)
        return None
    return Path(unquote(parsed.path))
