"""Sampling for 2026-07-28 clients: a tool call that pauses for the client's model and resumes.

In 2026-07-28 a server cannot send the client a request while a call runs. What it can do
(and the SDK's `Resolve`/`Sample` resolvers do it for arguments, before a tool body starts) is
answer the call with an `InputRequiredResult` carrying the requests; the client's `call_tool`
answers them through its sampling callback and retries the call with `input_responses` and the
echoed `request_state` (sealed and time-limited by the SDK's request-state boundary, so the
client can neither read nor forge it).

A skill asks the model in the middle of its body, any number of times, so the body is replayed:

1. `run_resumable` runs the tool body while watching for model calls.
2. A model call looks up its answer by a digest of the exact request (and how many times the
   same request was made before in this call). Recorded → returned at once.
3. Not recorded → the request is queued and the call blocks; once the body has had a moment to
   queue concurrent requests too (parallel steps), the body is cancelled and the call answers
   `InputRequiredResult(input_requests=<queued>, request_state=<every answer so far>)`.
4. The client answers and retries; the body runs again from the start, its earlier model calls
   are answered from `request_state`, and it gets one step further, until it returns.

The contract for skills: a body must make the same model calls for the same answers (true of
prompt skills, agents and pipelines whose inputs do not change between rounds). Work done before
a model call is done again in each round (one round per sequential model call; the client's
`input_required_max_rounds`, 10 by default, caps how many a call may make in this era).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
from mcp_types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    InputRequiredResult,
)

from skills import SkillContext

__all__ = ["ROUNDS_KEY", "SamplingRounds", "run_resumable"]

log = logging.getLogger("adapters.models")

ROUNDS_KEY = "model_rounds"
"""Where the call's `SamplingRounds` sits in `ctx.extras` (only on 2026-07-28 calls that may sample)."""

T = TypeVar("T")
R = TypeVar("R", CreateMessageResult, CreateMessageResultWithTools)

_STATE_VERSION = 1
_SETTLE_QUIET = 20
"""Scheduler turns without a new request before the round is closed (lets parallel steps ask too)."""
_SETTLE_MAX = 2000


class SamplingRounds:
    """One tool call's model calls across its input-required rounds."""

    def __init__(self, request_state: str | None = None, responses: Mapping[str, Any] | None = None) -> None:
        state = _decode(request_state)
        self._answers: dict[str, Any] = dict(state.get("answers") or {})
        asked = set(state.get("asked") or ())
        for key, answer in (responses or {}).items():
            # Only answers to what this call asked last round count (never a volunteered one).
            if key in asked and key not in self._answers and hasattr(answer, "model_dump"):
                self._answers[key] = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
        self._made: dict[str, int] = {}
        self.pending: dict[str, CreateMessageRequest] = {}
        self.driven = False
        """True while `run_resumable` runs the body (only then can a call pause)."""
        self._asked: anyio.Event | None = None

    @property
    def round(self) -> int:
        """How many answers this call already has (0 on the first round)."""
        return len(self._answers)

    async def ask(self, params: CreateMessageRequestParams, result_type: type[R]) -> R:
        """The recorded answer to this request, or pause the call until the client gives one."""
        digest = _digest(params)
        seen = self._made.get(digest, 0)
        self._made[digest] = seen + 1
        key = f"sample-{digest}-{seen}"
        wire = self._answers.get(key)
        if wire is not None:
            return result_type.model_validate(wire)
        if not self.driven or self._asked is None:
            raise RuntimeError("SamplingRounds.ask outside run_resumable")  # unavailable() prevents this
        self.pending[key] = CreateMessageRequest(params=params)
        self._asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    def state(self) -> str:
        return json.dumps(
            {"v": _STATE_VERSION, "answers": self._answers, "asked": sorted(self.pending)}, separators=(",", ":")
        )

    async def drive(self, run: Callable[[], Awaitable[T]]) -> T | InputRequiredResult:
        """Run the body; its result, or the input-required result that pauses the call."""
        self.driven = True
        self._asked = anyio.Event()
        outcome: list[tuple[bool, Any]] = []
        async with anyio.create_task_group() as tg:

            async def body() -> None:
                try:
                    outcome.append((True, await run()))
                except Exception as exc:  # re-raised below as itself, not wrapped in an ExceptionGroup
                    outcome.append((False, exc))
                tg.cancel_scope.cancel()

            tg.start_soon(body)
            await self._asked.wait()
            await self._settle()
            tg.cancel_scope.cancel()
        self.driven = False
        if outcome:
            ok, value = outcome[0]
            if not ok:
                raise value
            return value  # type: ignore[no-any-return]
        log.debug("tool call paused for %d sampling request(s) after %d answer(s)", len(self.pending), self.round)
        return InputRequiredResult(input_requests=dict(self.pending), request_state=self.state())

    async def _settle(self) -> None:
        quiet, count = 0, len(self.pending)
        for _ in range(_SETTLE_MAX):
            await anyio.lowlevel.checkpoint()
            if len(self.pending) != count:
                quiet, count = 0, len(self.pending)
            else:
                quiet += 1
                if quiet >= _SETTLE_QUIET:
                    return


async def run_resumable(ctx: SkillContext, run: Callable[[], Awaitable[T]]) -> T | InputRequiredResult:
    """Run a tool body so that its model calls can pause it on 2026-07-28 connections.

    The body's value (or exception) as is; on a call that samples the client's model in the
    2026-07-28 era, an `InputRequiredResult` for the tool handler to return instead. Costs
    nothing where it is not needed (other eras, the API provider, no sampling client).
    """
    rounds = ctx.extras.get(ROUNDS_KEY)
    if not isinstance(rounds, SamplingRounds):
        return await run()
    return await rounds.drive(run)


def _digest(params: CreateMessageRequestParams) -> str:
    wire = params.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw = json.dumps(wire, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest()[:12]).decode().rstrip("=")


def _decode(request_state: str | None) -> dict[str, Any]:
    """Our state from a retry; anything else (another handler's, an old version) is no progress."""
    if not request_state:
        return {}
    try:
        state = json.loads(request_state)
    except ValueError:
        return {}
    return state if isinstance(state, dict) and state.get("v") == _STATE_VERSION else {}
