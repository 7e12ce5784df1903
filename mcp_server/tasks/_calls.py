"""How the server runs one tool call: at once, parked across 2026-07-28 input rounds, or as a task.

- At once: the client can be asked mid-call (handshake era), or the call needs no client input.
- Parked rounds (2026-07-28, no task): the body runs as an `Execution`; when it waits for the
  client's model, the call answers an input-required result whose `request_state` names the
  execution (sealed by the SDK's request-state boundary, so the client can neither read nor
  forge it). The retry hands the answers to the waiting body and waits for its next pause or
  its end. A retry whose execution is gone (it expired, the server restarted, another replica
  answers) resumes the call's pipeline run from its checkpoint; other calls get a clear error.
- Task: see `_service`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import anyio
from mcp.server.request_state import authenticated_principal
from mcp_types import CallToolResult, InputRequiredResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from adapters.context import input_round_of, request_of
from pipelines.storage.runs import LOCAL
from skills import SkillContext, SkillRunError
from skills.core.errors import LimitExceededError

from .._results import cancel_pending, error_result
from ._execution import Execution

if TYPE_CHECKING:
    from skills import Skill

    from ._service import TaskService

__all__ = ["RUN_IDS_KEY", "CallTarget", "Identity", "continue_in_rounds", "identity_of"]

log = logging.getLogger("mcp_server.tasks")

RUN_IDS_KEY = "run_ids"
"""`ctx.extras` list where a pipeline run records its run id (`pipelines.service.RUN_IDS_KEY`;
the parked call resumes that run if its body is gone)."""
_STATE_VERSION = 2


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
    """Whose runs it starts and whose runs it may see (`pipelines.runs.may_see`): the principal;
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


async def continue_in_rounds(
    service: TaskService,
    target: CallTarget,
    arguments: dict[str, Any],
    context: Any,
    make_ctx: Callable[[], SkillContext],
    bound: Callable[[SkillContext], AbstractAsyncContextManager[Any]],
) -> CallToolResult | InputRequiredResult:
    """One round of a call that may pause for the client's model (see the module doc)."""
    principal, requester, _, _ = identity_of(context)
    request_state, responses = input_round_of(context)
    state = _decode(request_state)
    execution = service.host.get(state.get("x", "")) if state else None
    if execution is not None and (execution.principal != principal or execution.tool != target.name):
        execution = None  # never continue someone else's call
    if execution is not None and execution.expired:  # it timed out just now and is still stopping
        with anyio.fail_after(30):
            await execution.finished.wait()  # its run is recorded as cancelled before the retry resumes it
        execution = None
    if execution is None:
        ctx = make_ctx()
        async with bound(ctx):  # its roots and isolation: the body (even a parked one) keeps them
            started = await _start(service, target, arguments, ctx, state, responses, principal, requester)
        if not isinstance(started, Execution):
            return started
        execution = started
    elif execution.inbox is not None:
        execution.inbox.answer(responses)
    return await _round(service, target, execution, context)


async def _start(
    service: TaskService,
    target: CallTarget,
    arguments: dict[str, Any],
    ctx: SkillContext,
    state: dict[str, Any],
    responses: Any,
    principal: str | None,
    requester: str,
) -> Execution | CallToolResult:
    """Run the call now (nothing can pause it), or start its parked execution."""
    from adapters.models import INBOX_KEY, InputInbox

    inbox = ctx.extras.get(INBOX_KEY)
    if not isinstance(inbox, InputInbox):  # nothing can pause: run it here and now
        handles = service.handles
        if handles is not None and handles.applies(target):  # a long call: a run handle if it takes long
            return await handles.call(target, arguments, ctx, target.body(arguments, ctx))
        return await target.body(arguments, ctx)()
    if state:
        run_id = (state.get("run") or [None])[0]
        if not (target.is_pipeline and run_id and service.pipelines is not None):
            return error_result(
                SkillRunError(
                    f"'{target.name}' waited too long for this answer and was stopped",
                    hint=f"call the tool again (a paused call is kept for {service.limits.paused_call_expiry_s:g}s)",
                ),
                error_type="timeout",
                output_schema=target.output_schema,
            )
        inbox.seed(responses)  # its unfinished step asks again and gets the answer at once
        body = _resume_body(service, target, run_id, ctx)
    else:
        body = target.body(arguments, ctx)
    if service.host.count(requester, waiting_only=True) >= service.limits.max_paused_calls:
        return error_result(
            LimitExceededError(
                f"{service.limits.max_paused_calls} calls of this client already wait for their next input round",
                limit=f"paused calls per client <= {service.limits.max_paused_calls}",
                hint="answer or cancel those first (tasks: max_paused_calls in config.yaml raises it)",
            ),
            output_schema=target.output_schema,
        )
    execution = Execution(
        tool=target.name,
        requester=requester,
        principal=principal,
        inbox=inbox,
        idle_limit=service.limits.paused_call_expiry_s,
    )
    ctx.progress_fn, ctx.log_fn = execution.report, execution.log
    ctx.extras[RUN_IDS_KEY] = execution.run_ids
    service.host.start(execution, body)
    return execution


async def _round(
    service: TaskService, target: CallTarget, execution: Execution, context: Any
) -> CallToolResult | InputRequiredResult:
    execution.attach(*service.sinks(context, target.name))
    try:
        finished = await execution.next_stop()
    except BaseException:
        if cancel_pending():  # the client cancelled this round: it gave up on the call
            execution.cancel()
        raise
    finally:
        execution.detach()
    if not finished:
        assert execution.inbox is not None
        state = {"v": _STATE_VERSION, "x": execution.id, "run": execution.run_ids[:1]}
        return InputRequiredResult(input_requests=dict(execution.inbox.pending), request_state=json.dumps(state))
    service.host.forget(execution)
    if execution.result is not None:
        return execution.result
    return error_result(
        SkillRunError(f"'{target.name}' was stopped before it finished", hint="call it again"),
        error_type="cancelled",
        output_schema=target.output_schema,
    )


def _resume_body(
    service: TaskService, target: CallTarget, run_id: str, ctx: SkillContext
) -> Callable[[], Awaitable[CallToolResult]]:
    """The pipeline run of a call whose parked body is gone, resumed from its checkpoint."""

    async def resume() -> Any:
        assert service.pipelines is not None
        ctx.extras[RUN_IDS_KEY].append(run_id)
        return await service.pipelines.resume(run_id, ctx)

    return lambda: target.finish(resume, ctx)


def _decode(request_state: str | None) -> dict[str, Any]:
    """Our state from a retry (the SDK has verified it is ours); anything else is a first round."""
    if not request_state:
        return {}
    try:
        state: Any = json.loads(request_state)
    except ValueError:
        return {}
    if not isinstance(state, dict):
        return {}
    known = cast("dict[str, Any]", state)
    return known if known.get("v") == _STATE_VERSION else {}
