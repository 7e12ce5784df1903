"""The state a pipeline's graph carries between nodes, and the LangGraph channels that hold it.

`scope`, `ctl`, `fanin` and `spent` are delta channels: a checkpoint stores a marker for them and
each node's update is stored once, as a write. A checkpoint therefore does not hold the whole
state, and checkpoint bytes grow with the work done rather than with the work done times the
size of the state (which made a 2,000-item loop leave half a gigabyte in state.sqlite). The
reducers take a batch of writes at once (a fan-in of 1,000 items is one batch) and copy each
mapping once per batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Required, TypedDict

__all__ = ["SNAPSHOT_EVERY", "RunState", "add_counts", "graph_state"]

SNAPSHOT_EVERY = 10**9
"""Updates of a channel between full snapshots of it: never by count. LangGraph still writes
one every 5,000 supersteps (`LANGGRAPH_DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT`), which bounds how
many writes a resume replays."""


def _merge_all(state: dict[str, Any], writes: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """Later keys win; one copy of the mapping per batch of writes (a fan-in is one batch)."""
    out = dict(state)
    for update in writes:
        if update:
            out.update(update)
    return out


def _merge_fanin(state: dict[str, Any], writes: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """Item results by step id and item index; `{step: None}` clears a step's (its loop starts or ends).

    Each step's mapping is copied at most once per batch, so 1,000 parallel items arriving
    together cost 1,000 inserts, not 1,000 copies of a growing mapping.
    """
    out = dict(state)
    fresh: set[str] = set()
    for update in writes:
        for key, items in (update or {}).items():
            if items is None:
                out[key] = None
                fresh.discard(key)
                continue
            if key not in fresh:
                out[key] = dict(out.get(key) or {})
                fresh.add(key)
            out[key].update(items)
    return out


def add_counts(state: dict[str, Any] | None, *writes: dict[str, Any] | None) -> dict[str, Any]:
    """Counts (`steps`, `bytes`) added up."""
    out = dict(state or {})
    for update in writes:
        for key, value in (update or {}).items():
            out[key] = out.get(key, 0) + value
    return out


def _add_counts(state: dict[str, Any], writes: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    return add_counts(state, *writes)


def _add_usage(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    """Sum the per-step usage tallies (several items, attempts or nested calls of one step add up)."""
    if not new:
        return old or {}
    out = dict(old or {})
    for step, tally in new.items():
        mine = out.get(step)
        if mine is None:
            out[step] = tally
            continue
        summed = {**mine, **{k: mine.get(k, 0) + v for k, v in tally.items() if not isinstance(v, bool)}}
        if tally.get("estimated") or mine.get("estimated"):  # a flag, not a count
            summed["estimated"] = True
        out[step] = summed
    return out


class RunState(TypedDict, total=False):
    """What the graph carries (and checkpoints) between nodes (the types; `graph_state` adds the channels).

    `scope` and `ctl` are required for the nodes that read them: a run's input carries both, a
    loop body's input carries `scope`, and a node reads a `ctl` key only after the node that
    writes it (a loop's or branch's start) has run.
    """

    scope: Required[dict[str, Any]]
    """Names visible to expressions: inputs, state variables, step outputs, loop variables."""
    ctl: Required[dict[str, Any]]
    """Control data of loops and branches (indexes, loop items, saved loop variables, branch taken)."""
    fanin: dict[str, Any]
    """Results of loop items by step id and item index, until the loop's done node orders them."""
    usage: dict[str, Any]
    """Tokens and cost of the model calls of each step (checkpointed: a resumed run keeps the
    spend of the steps it does not run again)."""
    spent: dict[str, Any]
    """Steps and bytes the run has used against its limits (a resumed run goes on from them)."""


@functools.cache
def graph_state() -> Any:
    """`RunState` with its LangGraph channels, built on first use (LangGraph is imported lazily)."""
    # langgraph ships `py.typed` at its namespace root only, so pyright misses it in sub-packages
    from langgraph.channels.delta import DeltaChannel  # pyright: ignore[reportMissingTypeStubs]

    def delta(reducer: Callable[..., Any]) -> Any:
        channel: DeltaChannel[dict[str, Any]] = DeltaChannel(reducer, dict, snapshot_frequency=SNAPSHOT_EVERY)
        return channel

    fields = {
        "scope": Annotated[dict[str, Any], delta(_merge_all)],
        "ctl": Annotated[dict[str, Any], delta(_merge_all)],
        "fanin": Annotated[dict[str, Any], delta(_merge_fanin)],
        "usage": Annotated[dict[str, Any], _add_usage],
        "spent": Annotated[dict[str, Any], delta(_add_counts)],
    }
    return TypedDict("RunState", fields, total=False)  # pyright: ignore[reportArgumentType]  # the fields need LangGraph, imported on first use
