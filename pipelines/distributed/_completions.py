"""How the worker that drives a run hears that its loop items ended: one pub/sub channel per run.

Waiting for each item through Docket (`Execution.get_result`) cost the driving worker a new
Redis connection per item (a pub/sub one: connect, HELLO, SUBSCRIBE) and three reads of the
task's state, ~20 ms of its CPU per item. That cost is the same however many workers run the
items, so a 1,000-item loop took as long on three workers as on one. Now the worker that ran an
item publishes its outcome (with the item's result when it is small) on the run's channel
(`announce`), and the driving process holds one pub/sub connection for every run it drives
(`Completions`): an item costs the driver one message.

A message is checked before it is believed (`outcome_problem`): one of another shape is logged
and dropped. Nothing rests on a message arriving: an item not heard of within `POLL` seconds is looked up in
Docket (its task's state and result), so a message lost while the connection was down (redis-py
subscribes again when it reconnects) costs that item a little latency, never its outcome.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, cast

import anyio
from docket import Docket
from redis.exceptions import RedisError

from .wire import outcome_problem

__all__ = ["POLL", "Completions", "announce", "channel"]

log = logging.getLogger("pipelines.queue")

POLL = 2.0
"""Seconds an item waits for its message before it asks Docket instead."""
SMALL = 256 * 1024
"""Largest item result (JSON characters) that rides in the message; a bigger one is read from the
shared state."""


def channel(docket: Docket, run_id: str) -> str:
    return docket.key(f"done:{run_id}")


async def announce(docket: Docket, run_id: str, key: str, outcome: dict[str, Any]) -> None:
    """Tell the run's driver that item `key` ended (best effort: the driver also polls)."""
    text = json.dumps({"key": key, "outcome": outcome}, default=str)
    if len(text) > SMALL and "update" in outcome:
        text = json.dumps({"key": key, "outcome": {k: v for k, v in outcome.items() if k != "update"}}, default=str)
    try:
        async with docket.redis() as redis:
            await redis.publish(channel(docket, run_id), text)
    except (OSError, RedisError) as exc:  # the driver polls: a lost message costs latency only
        log.warning("could not announce item %s: %s", key, exc)


class Completions:
    """One process's pub/sub connection for the items of the runs it drives."""

    def __init__(self, docket: Docket) -> None:
        self.docket = docket
        self._waiting: dict[str, dict[str, asyncio.Future[dict[str, Any]]]] = {}
        """Futures of the items in flight, by channel and item key."""
        self._confirmed: dict[str, anyio.Event] = {}
        """The channels subscribed to (set once Redis confirmed the subscription)."""
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._lock = anyio.Lock()

    async def expect(self, run_id: str, key: str) -> asyncio.Future[dict[str, Any]]:
        """A future for item `key`'s outcome; registered (and the run's channel subscribed) before
        the item is queued, so its message cannot come first."""
        name = channel(self.docket, run_id)
        async with self._lock:
            if self._pubsub is None:
                async with self.docket.redis() as redis:
                    self._pubsub = redis.pubsub()
            confirmed = self._confirmed.get(name)
            if confirmed is None:
                confirmed = self._confirmed[name] = anyio.Event()
                try:
                    await self._pubsub.subscribe(name)
                except BaseException:  # (Redis down: the next item subscribes again)
                    del self._confirmed[name]
                    raise
            if self._reader is None:  # after the first subscription: reading needs a connection
                self._reader = asyncio.get_running_loop().create_task(self._read())
        with anyio.move_on_after(POLL):  # not confirmed: the poll still finds the outcome
            await confirmed.wait()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(name, {})[key] = future
        return future

    def forget(self, run_id: str, key: str) -> None:
        self._waiting.get(channel(self.docket, run_id), {}).pop(key, None)

    async def release(self, run_id: str) -> None:
        """The run is no longer driven here: its channel goes."""
        name = channel(self.docket, run_id)
        async with self._lock:
            if self._confirmed.pop(name, None) is not None and not self._waiting.pop(name, None):
                try:
                    await self._pubsub.unsubscribe(name)
                except (OSError, RedisError) as exc:
                    log.debug("unsubscribe %s: %s", name, exc)

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with anyio.CancelScope(shield=True):
                try:
                    await self._reader
                except asyncio.CancelledError:
                    pass
                if self._pubsub is not None:
                    await self._pubsub.aclose()
        self._reader = self._pubsub = None
        for futures in self._waiting.values():
            for future in futures.values():
                future.cancel()
        self._waiting.clear()
        self._confirmed.clear()

    async def _read(self) -> None:
        while True:
            try:
                message = await self._pubsub.get_message(timeout=None)
            except (OSError, RedisError) as exc:  # redis-py reconnects and subscribes again
                log.warning("item messages: %s; reconnecting", exc)
                await anyio.sleep(0.5)
                continue
            if message is None:
                continue
            name = _text(message.get("channel"))
            if message["type"] == "subscribe":
                event = self._confirmed.get(name)
                if event is not None:
                    event.set()
            elif message["type"] == "message":
                outcome: Any = None
                try:
                    body = json.loads(message["data"])
                    key, outcome = str(body["key"]), body["outcome"]
                except (ValueError, KeyError, TypeError):
                    key = ""
                problem = outcome_problem(outcome)
                if problem is not None:
                    log.warning(
                        "refused an item message on %s: %s; dropped (the item's outcome is polled)", name, problem
                    )
                    continue
                future = self._waiting.get(name, {}).pop(key, None)
                if future is not None and not future.done():
                    future.set_result(cast("dict[str, Any]", outcome))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
