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

import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, cast

import anyio
from mcp_types import CallToolResult, InputRequiredResult

from adapters.context import input_round_of
from skills import SkillContext, SkillRunError
from skills.core.errors import LimitExceededError

from .._results import cancel_pending, error_result
from ._execution import Execution
from ._target import RUN_IDS_KEY, CallTarget, Identity, identity_of

if TYPE_CHECKING:
    from ._service import TaskService

__all__ = ["continue_in_rounds"]

log = logging.getLogger("mcp_server.tasks")

_STATE_VERSION = 2


async def continue_in_rounds(
    service: TaskService,
    target: CallTarget,
    arguments: dict[str, Any],
    context: Any,
    make_ctx: Callable[[Identity], SkillContext],
    bound: Callable[[SkillContext], AbstractAsyncContextManager[Any]],
) -> CallToolResult | InputRequiredResult:
    """One round of a call that may pause for the client's model (see the module doc);
    `make_ctx` builds the call's `ctx` for the caller's identity (worked out once a call)."""
    identity = identity_of(context)
    principal, requester = identity.principal, identity.requester
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
        ctx = make_ctx(identity)
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
