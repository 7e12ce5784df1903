"""The client's model for a run a worker drives: asked through the replica that started the run.

A worker has no MCP client, so a prompt skill or an agent of a queued run could only use the
Anthropic API. The replica that handed the run to the queue still has the call's model access
(the client's sampling, or its 2026-07-28 input rounds when the run is a task), and it waits
for the run anyway. So while it waits it answers the run's model requests (`Answerer`): the
worker's `RelayProvider` publishes a request on the run's channel and waits for the answer on
one of its own. Plain data crosses (the request's messages, tools and model id; the
completion's blocks and usage), never code.

A request nobody listens for (the replica stopped, or it has no model to offer) fails at once
with a message that says so; one unanswered for `ASK_WAIT` seconds fails too. Both sides check
what they read against its shape (`_ask_problem`, `_answer_problem`): a request of another shape
is logged and ignored, an answer of another shape fails the step; neither is acted upon.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import uuid
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
from docket import Docket
from redis.exceptions import RedisError

from skills import SkillRunError, SkillsError
from skills.core.models import Completion, Usage

__all__ = ["ASK_WAIT", "Answerer", "RelayProvider"]

log = logging.getLogger("pipelines.queue")

ASK_WAIT = 900.0
"""Seconds a worker waits for the client's answer (a person may be approving it)."""
_HINT = "give the workers ANTHROPIC_API_KEY, or run pipelines that need the client's model without --queue"


def _asks(docket: Docket, run_id: str) -> str:
    return docket.key(f"asks:{run_id}")


def _answer(docket: Docket, ask_id: str) -> str:
    return docket.key(f"answer:{ask_id}")


class RelayProvider:
    """A worker's `sampling` provider: the run's replica asks its client and sends the answer back."""

    name = "sampling"

    def __init__(self, docket: Any, run_id: str) -> None:
        self._docket = docket
        """An async function giving the queue's `Docket` (opened on first use in this loop)."""
        self.run_id = run_id

    def unavailable(self, request: Any) -> str | None:
        return None  # whether the replica can answer is known only by asking it

    async def complete(self, request: Any) -> Completion:
        docket: Docket = await self._docket()
        ask_id = uuid.uuid4().hex
        ask = {
            "id": ask_id,
            "messages": request.messages,
            "model": request.model.id,
            "max_tokens": request.max_tokens,
            "system": request.system,
            "tools": request.tools,
            "temperature": request.temperature,
            "thinking": request.thinking,
        }
        async with docket.redis() as redis:
            pubsub: Any = redis.pubsub()
            try:
                await pubsub.subscribe(_answer(docket, ask_id))
                confirmed: dict[str, Any] = {}
                while confirmed.get("type") != "subscribe":  # then the answer cannot come before we listen
                    confirmed = await pubsub.get_message(timeout=None) or {}
                if not await redis.publish(_asks(docket, self.run_id), json.dumps(ask, default=str)):
                    raise SkillRunError(
                        f"run {self.run_id} needs the client's model, and the replica that started it "
                        "does not offer one (it has no client model, or it stopped)",
                        hint=_HINT,
                    )
                with anyio.fail_after(ASK_WAIT):
                    message: dict[str, Any] = {}
                    while message.get("type") != "message":
                        message = await pubsub.get_message(timeout=None) or {}
            except TimeoutError:
                raise SkillRunError(
                    f"run {self.run_id}: the client's model did not answer within {ASK_WAIT:.0f} s", hint=_HINT
                ) from None
            except RedisError as exc:
                raise SkillRunError(f"run {self.run_id}: lost the queue asking the client's model ({exc})") from None
            finally:
                with anyio.CancelScope(shield=True):
                    await pubsub.aclose()
        answer, problem = _read(message["data"], _answer_problem)
        if problem is not None:
            log.warning("run %s: refused a model answer on %s: %s", self.run_id, _answer(docket, ask_id), problem)
            raise SkillRunError(
                f"run {self.run_id}: the answer relayed from the client's model is not the orchestrator's ({problem})",
                hint="something other than the orchestrator writes to its Redis: docs/distributed.md#trust-model",
            )
        error = answer.get("error")
        if error:
            raise SkillRunError(str(error.get("message", "")), hint=str(error.get("hint", "")))
        return Completion(
            text=answer["text"],
            content=answer["content"],
            stop_reason=answer["stop_reason"],
            model=answer["model"],
            provider=answer["provider"],
            usage=Usage(**answer["usage"]),
        )


class Answerer:
    """The replica's side: answers a queued run's model requests with the call's own access."""

    def __init__(self, docket: Docket, run_id: str, model: Any) -> None:
        self.docket, self.run_id, self.model = docket, run_id, model

    @asynccontextmanager
    async def serving(self) -> AsyncGenerator[None]:
        """Listen for the run's requests (from before the run is queued) until the block ends."""
        async with self.docket.redis() as redis:
            pubsub: Any = redis.pubsub()
            await pubsub.subscribe(_asks(self.docket, self.run_id))
            reader = asyncio.get_running_loop().create_task(self._read(pubsub))
            try:
                yield
            finally:
                reader.cancel()
                with anyio.CancelScope(shield=True):
                    try:
                        await reader
                    except asyncio.CancelledError:
                        pass
                    await pubsub.aclose()

    async def _read(self, pubsub: Any) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                try:
                    message = await pubsub.get_message(timeout=None)
                except RedisError as exc:  # redis-py subscribes again when it reconnects
                    log.warning("run %s: model requests: %s; listening again", self.run_id, exc)
                    await anyio.sleep(0.5)
                    continue
                if message and message.get("type") == "message":
                    ask, problem = _read(message["data"], _ask_problem)
                    if problem is not None:
                        log.warning(
                            "run %s: refused a model request on %s: %s", self.run_id, message.get("channel"), problem
                        )
                        continue
                    tg.start_soon(self._answer, cast("dict[str, Any]", ask))

    async def _answer(self, ask: dict[str, Any]) -> None:
        try:
            completion: Completion = await self.model.complete(
                ask["messages"],
                system=ask.get("system"),
                model=ask.get("model"),
                max_tokens=ask.get("max_tokens"),
                tools=ask.get("tools"),
                temperature=ask.get("temperature"),
                thinking=ask.get("thinking"),
            )
            answer: dict[str, Any] = {
                "text": completion.text,
                "content": completion.content,
                "stop_reason": completion.stop_reason,
                "model": completion.model,
                "provider": completion.provider,
                "usage": dataclasses.asdict(completion.usage),
            }
        except SkillsError as exc:
            answer = {"error": {"type": exc.error_type, "message": exc.message, "hint": exc.hint}}
        except Exception as exc:  # why: the worker waits for an answer; it gets this failure as one
            log.warning("run %s: a model request failed: %s", self.run_id, exc)
            answer = {"error": {"type": "skill_failed", "message": f"the client's model failed: {exc}", "hint": ""}}
        try:
            async with self.docket.redis() as redis:
                await redis.publish(_answer(self.docket, ask["id"]), json.dumps(answer, default=str))
        except RedisError as exc:  # the worker times out with a clear message
            log.warning("run %s: could not send a model answer: %s", self.run_id, exc)


def _read(data: Any, check: Callable[[Any], str | None]) -> tuple[Any, str | None]:
    """A message's JSON and what is wrong with its shape (None: nothing)."""
    try:
        value: Any = json.loads(data)
    except ValueError:
        return None, "not JSON"
    return value, check(value)


def _of(value: Any, *kinds: type) -> bool:
    return value is None or (isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds))


def _ask_problem(ask: Any) -> str | None:
    """What is wrong with a model request read from Redis (None: it is of `RelayProvider`'s shape)."""
    if not isinstance(ask, dict):
        return "not a mapping"
    found = cast("dict[str, Any]", ask)
    ask_id = found.get("id")
    if not (isinstance(ask_id, str) and len(ask_id) == 32 and all(c in "0123456789abcdef" for c in ask_id)):
        return "no request id"
    if not isinstance(found.get("messages"), list):
        return "no messages"
    fields = (
        _of(found.get("model"), str)
        and _of(found.get("max_tokens"), int)
        and _of(found.get("system"), str, list)
        and _of(found.get("tools"), list)
        and _of(found.get("temperature"), int, float)
        and _of(found.get("thinking"), int)
    )
    return None if fields else "a field of the wrong type"


def _answer_problem(answer: Any) -> str | None:
    """What is wrong with a model answer read from Redis (None: it is of `Answerer`'s shape)."""
    if not isinstance(answer, dict):
        return "not a mapping"
    found = cast("dict[str, Any]", answer)
    if "error" in found:
        return None if isinstance(found["error"], dict) else "an error that is not a mapping"
    usage = found.get("usage")
    known = {f.name: f.type for f in dataclasses.fields(Usage)}
    if not (isinstance(usage, dict) and set(cast("dict[str, Any]", usage)) <= set(known)):
        return "no usage of the known fields"
    numbers = all(type(v) in (int, float, bool) for v in cast("dict[str, Any]", usage).values())
    texts = all(isinstance(found.get(k), str) for k in ("text", "stop_reason", "model", "provider"))
    return None if numbers and texts and isinstance(found.get("content"), list) else "a field of the wrong type"
