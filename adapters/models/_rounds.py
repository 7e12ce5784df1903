"""The client's model for a tool body that runs apart from the request: requests wait in an inbox.

In 2026-07-28 a server cannot send the client a request while a call runs, and a call run as a
task (either era) outlives the request that started it. In both cases a model call of the tool
body cannot go to the client directly. Instead the body is *parked* (the server keeps it running
between requests, `mcp_server.tasks`) and its model calls wait here:

1. `InputInbox.ask` files the sampling request under a key and waits for its answer; the body
   stays where it is (its clock, its finished tool calls and its pipeline run go on as they are).
2. Whoever carries requests to the client reads `pending`: an input-required result of the call
   (2026-07-28 without tasks), a task's `inputRequests` (tasks extension), or real server-to-client
   requests sent while the client waits on `tasks/result` (2025-11-25 core tasks).
3. The answers come back through `answer` (the call's retry, `tasks/update`, the client's
   responses) and the waiting model calls continue. Parallel model calls that are asked together
   are carried together, so they cost the client one round.

Keys are `sample-<digest>-<n>` (`elicit-...` for a pipeline's `ask:` question): the digest of the
exact request and how many times the same request was asked before. A key is never reused
within one inbox (the tasks extension requires it), and the same request asked again after a
restart has the same key, so answers the client sends for a body that is gone can be `seed`ed
into the one that replaces it (a pipeline resumed from its checkpoint asks its unfinished
step's question again and gets the answer at once).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any, TypeVar, cast

import anyio
import anyio.lowlevel
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
)

__all__ = ["INBOX_KEY", "InputInbox"]

log = logging.getLogger("adapters.models")

INBOX_KEY = "input_inbox"
"""Where a parked call's `InputInbox` sits in `ctx.extras` (calls whose model is the client's)."""

R = TypeVar("R", CreateMessageResult, CreateMessageResultWithTools)

_SETTLE_QUIET = 20
"""Scheduler turns without a new request before the requests so far are handed out (lets
parallel steps ask too, so that they share one round)."""
_SETTLE_MAX = 2000


class _Slot:
    """One outstanding request: its answer (wire dict) once it came, or the client's refusal."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.answer: dict[str, Any] | None = None
        self.refusal: str | None = None


class InputInbox:
    """The requests a parked tool body waits on, and their answers."""

    def __init__(self) -> None:
        self.pending: dict[str, CreateMessageRequest | ElicitRequest] = {}
        """Outstanding requests by key, in the order they were asked."""
        self.asked = 0
        """How many requests were ever filed (a request answered from `seed` counts too)."""
        self._slots: dict[str, _Slot] = {}
        self._made: dict[str, int] = {}
        self._seeded: dict[str, dict[str, Any]] = {}
        self._changed = anyio.Event()

    # -- the body's side -------------------------------------------------------------------------
    async def ask(self, params: CreateMessageRequestParams, result_type: type[R]) -> R:
        """The client's answer to this request (the body waits here until it comes)."""
        return result_type.model_validate(await self._file("sample", CreateMessageRequest(params=params)))

    async def elicit(self, params: ElicitRequestFormParams) -> ElicitResult:
        """The person's answer to this elicitation (a pipeline's `ask:` step), carried like sampling."""
        return ElicitResult.model_validate(await self._file("elicit", ElicitRequest(params=params)))

    async def _file(self, kind: str, request: CreateMessageRequest | ElicitRequest) -> dict[str, Any]:
        digest = _digest(request.params)
        seen = self._made.get(digest, 0)
        self._made[digest] = seen + 1
        key = f"{kind}-{digest}-{seen}"
        self.asked += 1
        seeded = self._seeded.pop(key, None)
        if seeded is not None:
            return seeded
        slot = self._slots[key] = _Slot()
        self.pending[key] = request
        self._notify()
        try:
            await slot.event.wait()
        finally:
            self.pending.pop(key, None)
            self._slots.pop(key, None)
        if slot.refusal is not None:
            raise MCPError(code=INTERNAL_ERROR, message=slot.refusal)
        assert slot.answer is not None
        return slot.answer

    # -- the carrier's side ----------------------------------------------------------------------
    def answer(self, responses: Mapping[str, Any] | None) -> int:
        """Deliver answers; only keys outstanding now count (others are ignored, as the specs ask).

        Returns how many were taken.
        """
        taken = 0
        for key, response in (responses or {}).items():
            slot = self._slots.get(key)
            if slot is None or slot.event.is_set():
                continue
            wire = _wire(response)
            if wire is None:
                continue
            slot.answer = wire
            slot.event.set()
            taken += 1
        return taken

    def refuse(self, key: str, message: str) -> None:
        """The client refused (or failed) one request: the model call that waits on it fails."""
        slot = self._slots.get(key)
        if slot is not None and not slot.event.is_set():
            slot.refusal = message
            slot.event.set()

    def seed(self, responses: Mapping[str, Any] | None) -> None:
        """Answers for requests the body will ask again (its earlier body is gone)."""
        for key, response in (responses or {}).items():
            wire = _wire(response)
            if wire is not None and key.startswith(("sample-", "elicit-")):
                self._seeded[key] = wire

    def next_request(self) -> anyio.Event:
        """An event set when the next request is filed (take it before looking at `pending`)."""
        return self._changed

    async def settle(self) -> None:
        """Wait until no new request has been filed for a few scheduler turns."""
        quiet, count = 0, self.asked
        for _ in range(_SETTLE_MAX):
            await anyio.lowlevel.checkpoint()
            if self.asked != count:
                quiet, count = 0, self.asked
            else:
                quiet += 1
                if quiet >= _SETTLE_QUIET:
                    return

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


def _wire(response: Any) -> dict[str, Any] | None:
    """An answer as its wire dict (a typed response from the SDK, or the JSON of `tasks/update`)."""
    if hasattr(response, "model_dump"):
        response = response.model_dump(mode="json", by_alias=True, exclude_none=True)
    return cast("dict[str, Any]", response) if isinstance(response, dict) else None


def _digest(params: CreateMessageRequestParams | ElicitRequestParams) -> str:
    wire = params.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw = json.dumps(wire, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest()[:12]).decode().rstrip("=")
