"""What a tool call is and who makes it, as the tasks machinery sees it: `CallTarget` (a tool as
the call path needs it) and `Identity` (who asks). The words every module of tasks shares (the
service, the rounds, adoption, the task methods) and the server's run handles: kept below all
of them, so that each imports it and it imports none of them.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

from mcp.server.request_state import authenticated_principal
from mcp_types import CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from adapters.context import request_of
from pipelines.storage.runs import LOCAL
from skills import SkillContext

if TYPE_CHECKING:
    from skills import Skill

__all__ = ["RUN_IDS_KEY", "CallTarget", "Handles", "Identity", "identity_of", "seen_tasks", "share_of"]

RUN_IDS_KEY = "run_ids"
"""`ctx.extras` list where a pipeline run records its run id (`pipelines.service.RUN_IDS_KEY`;
the parked call resumes that run if its body is gone)."""


@dataclass(frozen=True)
class CallTarget:
    """A tool as the call path needs it."""

    name: str
    skill: Skill
    """The Skill called (a meta tool is one too): its context is made for it."""
    output_schema: dict[str, Any] | None
    may_task: bool
    """Whether the tool may run as a task (pipelines, agents, create_skill, plan_and_run, ...)."""
    run: Callable[[dict[str, Any], SkillContext], Awaitable[Any]]
    """The tool's work (its raw value)."""
    finish: Callable[[Callable[[], Awaitable[Any]], SkillContext], Awaitable[CallToolResult]]
    """Await some work of this tool and make its value (or failure: an error envelope) the result."""
    is_pipeline: bool = False

    def body(self, arguments: dict[str, Any], ctx: SkillContext) -> Callable[[], Awaitable[CallToolResult]]:
        """The whole call: its work, made a result."""
        return lambda: self.finish(lambda: self.run(arguments, ctx), ctx)


class Handles(Protocol):
    """The server's run handles (`mcp_server._handles.RunHandles`) as a call needs them: a long
    call without a task answers with a run handle if it takes long. (Declared here, where it is
    used, so that tasks never imports the module built on it.)"""

    def applies(self, target: CallTarget) -> bool: ...

    async def call(
        self,
        target: CallTarget,
        arguments: dict[str, Any],
        ctx: SkillContext,
        body: Callable[[], Awaitable[CallToolResult]],
    ) -> CallToolResult: ...


class Identity(NamedTuple):
    """Who is asking, as every per-client rule of the server sees it."""

    principal: str | None
    """The authenticated identity (OAuth client, issuer, subject); None on an unauthenticated
    transport. Only it may read or cancel a task it created."""
    requester: str
    """What per-client limits count, across all its sessions: the principal, else (over HTTP) the
    client's address as the transport reports it, else `local` (stdio, in-process)."""
    client: str
    """The client's name (clientInfo), for people reading logs and `orchestrator runs`."""
    owner: str
    """Whose runs it starts and whose runs it may see (`pipelines.storage.runs.may_see`): the principal;
    else over HTTP the bearer token the request carries (everyone holding one token is one
    identity, in every era and session: what lets a 2026-07-28 client come back to its runs),
    else the handshake-era session, or, with neither (2026-07-28 requests and stateless HTTP
    carry no session), this request alone; else `local`, the stdio client, which shares the runs
    of the command line on the same home."""


def identity_of(context: Any) -> Identity:
    """The `Identity` of a request (`context`: a tool's `Context`, or anything whose
    `request_context` is the SDK's request context); `local` outside any request."""
    request = request_of(context)
    if request is None:
        return Identity(None, LOCAL, "", LOCAL)
    principal = authenticated_principal(request)
    session = request.session
    params = getattr(session, "client_params", None)
    info = getattr(params, "client_info", None) if params is not None else None
    client = getattr(info, "name", "") or ""
    if principal is not None:
        return Identity(principal, f"principal:{principal}", client, f"principal:{principal}")
    scope = getattr(getattr(request, "request", None), "scope", None)
    if not isinstance(scope, dict):  # stdio or in-process: the process's one client
        return Identity(None, LOCAL, client, LOCAL)
    from .._sessions import client_of

    requester = f"address:{client_of(cast('dict[str, Any]', scope))}"
    session_id = getattr(getattr(session, "_connection", None), "session_id", None)  # no public accessor
    token = _bearer(cast("dict[str, Any]", scope))
    # Digests: the state database is no place for a key that would let its reader act as the client.
    if token:
        owner = f"token:{hashlib.sha256(token).hexdigest()[:32]}"
    elif isinstance(session_id, str) and session_id:
        owner = f"session:{hashlib.sha256(session_id.encode()).hexdigest()[:32]}"
    else:
        owner = f"request:{secrets.token_hex(16)}"
    return Identity(None, requester, client, owner)


def share_of(context: Any, identity: Identity) -> str:
    """Whose share of the worker pool a call counts against: the requester (principal, else the
    client's address) over HTTP; else (stdio has one client, an in-process server may serve
    several) its connection, or on 2026-07-28 requests, which carry none, the client's name."""
    if identity.requester != LOCAL:
        return identity.requester
    request = request_of(context)
    if request is None:
        return LOCAL
    if request.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return f"client:{identity.client or 'anonymous'}"
    session = request.session
    return f"connection:{id(getattr(session, '_connection', session)):x}"


def _bearer(scope: dict[str, Any]) -> bytes:
    """The bearer token of an HTTP request (checked by `--auth-token`'s middleware when one is set;
    otherwise a key the client chose for itself), or b""."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return bytes(value[7:]).strip()
    return b""


def seen_tasks(request: Any) -> set[str]:
    """Task ids the connection of `request` created or was given: without an authenticated
    identity, what its 2025-11-25 `tasks/list` shows (never the tasks of another connection,
    even from the same address)."""
    session = request.session
    connection = getattr(session, "_connection", session)
    found: set[str] | None = getattr(connection, "_orchestrator_tasks", None)
    if found is None:
        found = set()
        try:
            connection._orchestrator_tasks = found
        except AttributeError:  # a connection that takes no attributes keeps no list
            pass
    return found
