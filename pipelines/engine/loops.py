"""The nodes of loops: `while`, sequential `for` and parallel `for` (a `Send` fan-out).

Checkpoint size is the design constraint here. Each node's update is stored once as a write
(the state channels are delta channels), so an update must stay as small as the work it
reports: a loop item writes its own result under its index (`fanin`), never the list of the
results so far, and a parallel item is sent only the names its body reads, never a copy of
the whole scope. Then checkpoint bytes grow linearly with the number of items.

A sequential `for` whose body is one skill is a single node looping back to itself (one
checkpoint per item, like a hand-written LangGraph loop); a body of nested steps goes through
a guard node that records the previous item's result and sets up the next. A sequential loop
inside another one's body is a unit (`unit_node`): its iterations are not checkpointed one by
one, since each checkpoint carries the bookkeeping of the whole graph (see `compiler`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..language.expressions import names_read
from ..language.spec import DEFAULT_MAX_ITERATIONS, PipelineSpec, StepSpec
from ._nodes import RECURSION_LIMIT
from ._state import RunState, add_counts

if TYPE_CHECKING:
    from .context import RunContext

Node = Callable[..., Any]


def run_context(runtime: Any) -> RunContext:
    """The `RunContext` a node runs in (the compiler's nodes use it too)."""
    context: RunContext = runtime.context  # LangGraph hands back, untyped, the context given to ainvoke
    return context


def loop_info(index0: int, length: int) -> dict[str, Any]:
    return {
        "index": index0 + 1,
        "index0": index0,
        "first": index0 == 0,
        "last": index0 == length - 1,
        "length": length,
        "revindex": length - index0,
    }


def loop_router(step: StepSpec) -> Callable[[RunState], str]:
    return lambda state: "body" if state["ctl"].get(f"{step.id}:go") else "done"


def _ordered(state: RunState, step: StepSpec, count: int) -> list[Any]:
    got: dict[str, Any] = (state.get("fanin") or {}).get(step.id) or {}
    return [got[str(i)] for i in range(count)]


# -- while ---------------------------------------------------------------------------------------


def while_start_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = run_context(runtime)
        await ctx.step_started(step, state["scope"])
        run = ctx.condition_holds(step, state["scope"])
        saved = {"loop": state["scope"].get("loop")}
        return {"ctl": {f"{step.id}:i": 0, f"{step.id}:run": run, f"{step.id}:saved": saved}}

    return node


def while_guard_node(step: StepSpec) -> Node:
    assert step.while_ is not None
    cap = step.while_.max_iterations or DEFAULT_MAX_ITERATIONS
    condition = step.while_.condition

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = run_context(runtime)
        ctl = state["ctl"]
        done = ctl[f"{step.id}:i"]
        loop = {"index": done + 1, "index0": done, "first": done == 0}
        go = bool(ctl.get(f"{step.id}:run")) and done < cap
        if go:
            go = ctx.check(condition, {**state["scope"], "loop": loop}, step)
        update: dict[str, Any] = {"ctl": {f"{step.id}:go": go, f"{step.id}:i": done + 1 if go else done}}
        if go:
            update["scope"] = {"loop": loop}
            if step.steps:  # a single-skill body counts as its call
                ctx.charge(step, update, steps=1)
        return update

    return node


def while_done_node(step: StepSpec) -> Node:
    ids = [s.id for s in step.steps or []] or [f"{step.id}.item"]

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctl, scope = state["ctl"], state["scope"]
        if not ctl.get(f"{step.id}:run"):
            output = None
        else:
            output = {i.removesuffix(".item"): scope.get(i) for i in ids}
            output["iterations"] = ctl[f"{step.id}:i"]
        restored = {**scope, **ctl[f"{step.id}:saved"]}
        return run_context(runtime).finish_step(step, restored, output, restore=ctl[f"{step.id}:saved"])

    return node


# -- sequential for ------------------------------------------------------------------------------


async def _begin_loop(ctx: RunContext, step: StepSpec, scope: dict[str, Any]) -> tuple[bool, list[Any]]:
    """Whether a `for` runs (its `condition:`) and its items."""
    await ctx.step_started(step, scope)
    run = ctx.condition_holds(step, scope)
    return run, await ctx.loop_items(step, scope) if run else []


def for_start_node(step: StepSpec) -> Node:
    assert step.for_ is not None
    var = step.for_.variable

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = run_context(runtime)
        scope = state["scope"]
        run, items = await _begin_loop(ctx, step, scope)
        saved = {var: scope.get(var), "loop": scope.get("loop")}
        ctl = {
            f"{step.id}:run": run,
            f"{step.id}:items": items,
            f"{step.id}:i": 0,
            f"{step.id}:go": bool(items),
            f"{step.id}:saved": saved,
        }
        update: dict[str, Any] = {"ctl": ctl, "fanin": {step.id: None}}
        if items and step.steps:  # the body's first item is set up here: one node less per loop
            update["scope"] = {var: items[0], "loop": loop_info(0, len(items))}
            ctx.charge(step, update, steps=1)
        return update

    return node


def for_item_node(step: StepSpec) -> Node:
    """The whole body of a single-skill sequential `for`: call item i, record it, move on."""
    assert step.for_ is not None
    var = step.for_.variable
    key = f"{step.id}.item"

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = run_context(runtime)
        ctl = state["ctl"]
        items, i = ctl[f"{step.id}:items"], ctl[f"{step.id}:i"]
        outer = {**state["scope"], "loop": ctl[f"{step.id}:saved"].get("loop")}
        scope = {**state["scope"], var: items[i], "loop": loop_info(i, len(items))}
        update = await ctx.run_skill_step(step, scope, key, ctx.item_path(step, outer, i))
        result = update.pop("scope")[key]
        await ctx.item_done(step, i + 1, len(items))
        update["ctl"] = {f"{step.id}:i": i + 1, f"{step.id}:go": i + 1 < len(items)}
        update["fanin"] = {step.id: {str(i): result}}
        return update

    return node


def for_guard_node(step: StepSpec) -> Node:
    """Between the items of a nested-steps body: record item i's result, set up item i + 1."""
    assert step.for_ is not None
    var = step.for_.variable
    ids = [s.id for s in step.steps or []]

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = run_context(runtime)
        ctl, scope = state["ctl"], state["scope"]
        items, i = ctl[f"{step.id}:items"], ctl[f"{step.id}:i"]
        update: dict[str, Any] = {"fanin": {step.id: {str(i): {k: scope.get(k) for k in ids}}}}
        await ctx.item_done(step, i + 1, len(items))
        i += 1
        go = i < len(items)
        update["ctl"] = {f"{step.id}:i": i, f"{step.id}:go": go}
        if go:
            update["scope"] = {var: items[i], "loop": loop_info(i, len(items))}
            ctx.charge(step, update, steps=1)
        return update

    return node


def for_done_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctl, scope = state["ctl"], state["scope"]
        run = ctl.get(f"{step.id}:run")
        output = _ordered(state, step, len(ctl[f"{step.id}:items"])) if run else None
        saved = ctl[f"{step.id}:saved"]
        update = run_context(runtime).finish_step(step, {**scope, **saved}, output, restore=saved)
        update["fanin"] = {step.id: None}
        update["ctl"] = {f"{step.id}:items": None}  # the items are in no later checkpoint's way
        return update

    return node


# -- units: a loop inside a loop -------------------------------------------------------------------


def unit_node(step: StepSpec, loop: Any, state_vars: list[str]) -> Node:
    """The whole of `step` (a sequential `for` or `while` inside another loop's body), run by
    `loop`, its own graph compiled without checkpoints; the node's update is the loop's output,
    the state variables it changed, and what it spent: the checkpoint after it is the only one."""

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = run_context(runtime)
        scope = state["scope"]
        # An own thread id: its own lineage, not the parent's checkpoint namespace (as `run_item`).
        config = {"configurable": {"thread_id": f"{ctx.run_id}/{step.id}"}, "recursion_limit": RECURSION_LIMIT}
        here = ctx.item_path(step, scope, 0)  # its records go under the item of the loop around it
        with ctx.nested(None if here is None else here[: -len(f"{step.id}[0]")]):
            final = await loop.ainvoke({"scope": scope, "ctl": {}}, config, context=ctx.here())
        inner = final["scope"]
        changed = {k: inner[k] for k in state_vars if k in inner and inner[k] != scope.get(k)}
        update: dict[str, Any] = {"scope": {**changed, step.id: inner.get(step.id)}}
        update |= {k: v for k, v in final.items() if k in ("usage", "spent") and v}
        return update

    return node


# -- parallel for --------------------------------------------------------------------------------


def fan_start_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        run, items = await _begin_loop(run_context(runtime), step, state["scope"])
        ctl = {f"{step.id}:run": run, f"{step.id}:n": len(items), f"{step.id}:items": items, f"{step.id}:wave": 0}
        # Its round: the step runs again in each turn of a sequential `for` or `while` around it,
        # and a worker's recorded item must be of this turn (the distributed mode keys items by it).
        ctl[f"{step.id}:round"] = (state["ctl"].get(f"{step.id}:round") or 0) + 1
        return {"ctl": ctl, "fanin": {step.id: None}}

    return node


def body_reads(step: StepSpec) -> set[str] | None:
    """Names of the scope a loop's body may read (None: any, a template did not compile)."""
    texts: list[tuple[Any, bool]] = [(step.parameters, False)]
    for inner in step.children() if step.steps else []:
        for sub in [inner, *_descendants(inner)]:
            texts += [(sub.parameters, False), (sub.state, False), (sub.condition, True)]
            if sub.for_ is not None:
                texts.append((sub.for_.items, False))
            if sub.while_ is not None:
                texts.append((sub.while_.condition, True))
            texts += [(condition, True) for _, condition, _ in sub.branches()]
    names: set[str] = set()
    for value, bare in texts:
        if value is None:
            continue
        found = names_read(value, expression=bare)
        if found is None:
            return None
        names |= found
    return names


def _descendants(step: StepSpec) -> list[StepSpec]:
    out: list[StepSpec] = []
    for child in step.children():
        out += [child, *_descendants(child)]
    return out


WAVE = 1000
"""Items of a parallel `for` sent at once. LangGraph sets up every task of a superstep before the
first one runs, and without yielding: 20,000 Sends kept the event loop (progress, Ctrl-C) stuck
for seconds. Waves of this many items keep each set-up short; `max_parallel` items still run at
a time, a wave ending only waits for its own last items."""


def fan_router(step: StepSpec, item_node: str) -> Callable[[RunState], Any]:
    from langgraph.types import Send

    reads = body_reads(step)

    def route(state: RunState) -> Any:
        ctl = state["ctl"]
        n, first = ctl.get(f"{step.id}:n") or 0, ctl.get(f"{step.id}:wave", 0) * WAVE
        if not ctl.get(f"{step.id}:run") or first >= n:
            return f"{step.id}.done"
        scope = state["scope"]
        shared = dict(scope) if reads is None else {k: scope[k] for k in reads if k in scope}
        items, round_ = ctl[f"{step.id}:items"], ctl.get(f"{step.id}:round", 0)
        # Each Send is stored in the checkpoint: it carries the item and what the body reads.
        return [
            Send(item_node, {"scope": shared, "item": items[i], "index": i, "n": n, "round": round_})
            for i in range(first, min(first + WAVE, n))
        ]

    return route


def fan_wave_node(step: StepSpec) -> Node:
    """After a wave of items: move on to the next (the router sends it, or goes to `done`)."""

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        return {"ctl": {f"{step.id}:wave": state["ctl"].get(f"{step.id}:wave", 0) + 1}}

    return node


def fan_item_node(step: StepSpec, body: Any, state_vars: list[str]) -> Node:
    async def node(payload: dict[str, Any], runtime: Any) -> dict[str, Any]:
        ctx = run_context(runtime)
        async with ctx.parallel_slot(step):
            if ctx.dispatch is not None:  # the distributed mode: any worker runs it
                update = await ctx.dispatch(step, payload)
                spent: dict[str, int] = update["fanin"][step.id][str(payload["index"])].get("spent") or {}
                ctx.budget.charge(step.id, spent.get("steps", 0), spent.get("bytes", 0))
            else:
                update = await run_item(ctx, step, body, state_vars, payload)
        await ctx.item_done(step, None, None)
        return update

    return node


async def run_item(
    ctx: RunContext, step: StepSpec, body: Any, state_vars: list[str], payload: dict[str, Any]
) -> dict[str, Any]:
    """One item of a parallel `for` (its skill call, or its nested steps): the graph update it makes.

    Here or in a worker of the distributed mode: the update is plain data either way.
    """
    assert step.for_ is not None
    var = step.for_.variable
    ids = [s.id for s in step.steps or []]
    index = payload["index"]
    scope = {**payload["scope"], var: payload["item"], "loop": loop_info(index, payload["n"])}
    path = ctx.item_path(step, payload["scope"], index)
    if body is None:
        update = await ctx.run_skill_step(step, scope, f"{step.id}.item", path)
        result: Any = update.pop("scope")[f"{step.id}.item"]
        changed: dict[str, Any] = {}
    else:
        # An own thread id gives the body its own lineage instead of the parent's ambient
        # configurable (checkpoint namespace, `durability="sync"`, which LangGraph cannot
        # honour in a graph compiled without a checkpointer).
        config = {"configurable": {"thread_id": f"{ctx.run_id}/{step.id}/{index}"}}
        ctx.charge(step, {}, steps=1)
        with ctx.nested(None if path is None else path + "/"):
            final = await body.ainvoke({"scope": scope}, config, context=ctx)
        inner = final["scope"]
        result = {k: inner.get(k) for k in ids}
        changed = {k: inner[k] for k in state_vars if k in inner and inner[k] != scope.get(k)}
        update = {k: v for k, v in final.items() if k in ("usage", "spent") and v}
        update["spent"] = add_counts(update.get("spent"), {"steps": 1})
    # The item's spend rides in its fan-in entry (the done node adds them up): one write per
    # item, not two. LangGraph re-filters a superstep's pending writes at every task's write.
    entry = {"result": result, "state": changed, "spent": update.pop("spent", None) or {}}
    update["fanin"] = {step.id: {str(index): entry}}
    return update


def fan_done_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = run_context(runtime)
        ctl, scope = state["ctl"], state["scope"]
        if not ctl.get(f"{step.id}:run"):
            return ctx.finish_step(step, scope, None)
        ordered = _ordered(state, step, ctl[f"{step.id}:n"])
        state_updates: dict[str, Any] = {}
        for entry in ordered:  # in item order: the last item's assignment wins
            state_updates.update(entry["state"])
        update = ctx.finish_step(step, {**scope, **state_updates}, [e["result"] for e in ordered])
        update["spent"] = add_counts(update.get("spent"), *(e.get("spent") for e in ordered))
        update["scope"] = {**state_updates, **update.get("scope", {})}
        update["fanin"] = {step.id: None}
        update["ctl"] = {f"{step.id}:items": None}
        return update

    return node


def spent_in_flight(spec: PipelineSpec, fanin: dict[str, Any]) -> dict[str, Any]:
    """What the finished items of unfinished parallel loops spent (a resumed run counts them too)."""
    spent: list[dict[str, Any] | None] = []
    for step in spec.walk():
        if step.for_ is not None and step.for_.parallel:
            entries: dict[str, dict[str, Any]] = fanin.get(step.id) or {}
            spent += [e.get("spent") for e in entries.values()]
    return add_counts({}, *spent)
