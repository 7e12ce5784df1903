"""Compile a `PipelineSpec` straight to a LangGraph `StateGraph` (no model is asked).

Every step becomes nodes and edges of one graph, so LangGraph's checkpointer records progress
node by node and a failed or killed run resumes where it stopped:

- a skill step is one node;
- `if` / `elif` / `else` is a router node with conditional edges into each branch and a join
  node that assembles `{substep: output, branch}`;
- a `while` is a guard node with an edge back from the end of its body;
- a sequential `for` is an init node, a guard, the body, and a `next` node looping back;
- a parallel `for` fans out with `Send` (one task per item, bounded by `max_parallel`) and fans
  back in through a reducer keyed by item index, so results keep item order whatever order
  the items finish in; a body of several steps runs per item as a compiled sub-graph.

Nodes get the run's services (skill calls, progress, limits) from LangGraph's run context,
never from the checkpointed state, so one compiled graph serves every run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from .errors import PipelineError
from .spec import DEFAULT_MAX_ITERATIONS, PipelineSpec, StepSpec

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph, StateGraph

    from .runtime import RunContext

__all__ = ["CompiledPipeline", "RunState", "compile_pipeline", "state_names"]

DEFAULT_MAX_PARALLEL = 16


def _merge(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    if not new:
        return old or {}
    return {**(old or {}), **new}


def _merge_fanin(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    out = dict(old or {})
    for key, items in (new or {}).items():
        out[key] = None if items is None else {**(out.get(key) or {}), **items}
    return out


def _add_usage(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    """Sum the per-step usage tallies (several items, attempts or nested calls of one step add up)."""
    if not new:
        return old or {}
    out = dict(old or {})
    for step, tally in new.items():
        mine = out.get(step)
        out[step] = tally if mine is None else {k: mine.get(k, 0) + v for k, v in tally.items()}
    return out


class RunState(TypedDict, total=False):
    """What the graph carries (and checkpoints) between nodes."""

    scope: Annotated[dict[str, Any], _merge]
    """Names visible to expressions: inputs, state variables, step outputs, loop variables."""
    ctl: Annotated[dict[str, Any], _merge]
    """Control data of loops and branches (indexes, saved loop variables, branch taken)."""
    fanin: Annotated[dict[str, Any], _merge_fanin]
    """Results of parallel items by step id and item index, until the loop's done node orders them."""
    usage: Annotated[dict[str, Any], _add_usage]
    """Tokens and cost of the model calls of each step (checkpointed: a resumed run keeps the
    spend of the steps it does not run again)."""


def state_names(spec: PipelineSpec) -> list[str]:
    """Declared state variables plus every name some step's `state:` assigns."""
    names = list(spec.state)
    for step in spec.walk():
        names += [n for n in step.state if n not in names]
    return names


@dataclass
class CompiledPipeline:
    """A pipeline compiled to a LangGraph graph, ready to run with any checkpointer."""

    spec: PipelineSpec
    builder: StateGraph[Any, Any, Any, Any]
    state_vars: list[str]
    _graphs: dict[int, CompiledStateGraph[Any, Any, Any, Any]] = field(default_factory=dict)

    def graph(self, checkpointer: Any = None) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The compiled graph bound to `checkpointer`.

        LangGraph's compile walks every node (~8 ms for 50 steps, ~100 ms for 300); it runs once
        and each run gets a shallow copy bound to its checkpointer (~0.1 ms).
        """
        base = self._graphs.get(0)
        if base is None:
            base = self._graphs[0] = self.builder.compile()
        return base if checkpointer is None else base.copy(update={"checkpointer": checkpointer})


def compile_pipeline(spec: PipelineSpec) -> CompiledPipeline:
    """Compile `spec` (already verified) to a LangGraph `StateGraph`."""
    from langgraph.graph import END, START

    names = state_names(spec)
    builder = _Builder(names)
    entry, exits = builder.block(spec.steps)
    builder.graph.add_edge(START, entry)
    for node in exits:
        builder.graph.add_edge(node, END)
    return CompiledPipeline(spec, builder.graph, names)


Node = Callable[..., Any]


def _ctx(runtime: Any) -> RunContext:
    return runtime.context  # type: ignore[no-any-return]


class _Builder:
    """Adds the nodes and edges of blocks of steps to one StateGraph."""

    def __init__(self, state_vars: list[str], graph: Any = None) -> None:
        from langgraph.graph import StateGraph

        from .runtime import RunContext

        self.state_vars = state_vars
        self.graph = graph if graph is not None else StateGraph(RunState, context_schema=RunContext)
        self._ids: set[str] = set()

    # -- blocks ----------------------------------------------------------------------------------
    def block(self, steps: list[StepSpec]) -> tuple[str, list[str]]:
        """Chain `steps`; return the entry node and the nodes whose edge leads on."""
        if not steps:
            raise PipelineError("an empty block of steps cannot be compiled", hint="add a step or remove the block")
        entry = ""
        exits: list[str] = []
        for step in steps:
            first, last = self.step(step)
            for node in exits:
                self.graph.add_edge(node, first)
            entry = entry or first
            exits = last
        return entry, exits

    def step(self, step: StepSpec) -> tuple[str, list[str]]:
        if step.id in self._ids:
            raise PipelineError(f"duplicate step id '{step.id}'", hint="step ids must be unique in a pipeline")
        self._ids.add(step.id)
        kind = step.kind
        if kind in ("skill", "agent"):
            name = self._add(step.id, _skill_node(step))
            return name, [name]
        if kind == "for":
            return self._parallel_for(step) if step.for_ and step.for_.parallel else self._sequential_for(step)
        if kind == "while":
            return self._while(step)
        if kind == "if":
            return self._if(step)
        return self._group(step)

    def _add(self, name: str, fn: Node) -> str:
        self.graph.add_node(name, fn)
        return name

    def _body(self, step: StepSpec) -> tuple[str, list[str]]:
        """The body of a loop: its nested steps, or one node calling its skill for the item."""
        if step.steps:
            return self.block(step.steps)
        name = self._add(f"{step.id}.call", _skill_node(step, output_key=f"{step.id}.item"))
        return name, [name]

    # -- group -----------------------------------------------------------------------------------
    def _group(self, step: StepSpec) -> tuple[str, list[str]]:
        start = self._add(f"{step.id}.start", _start_node(step))
        done = self._add(f"{step.id}.done", _group_done_node(step, self.state_vars))
        entry, exits = self.block(step.steps or [])
        self.graph.add_conditional_edges(start, _skip_router(step), {"run": entry, "skip": done})
        for node in exits:
            self.graph.add_edge(node, done)
        return start, [done]

    # -- if / elif / else --------------------------------------------------------------------
    def _if(self, step: StepSpec) -> tuple[str, list[str]]:
        router = self._add(f"{step.id}.if", _if_node(step))
        join = self._add(f"{step.id}.join", _if_join_node(step))
        targets: dict[str, str] = {"none": join, "skipped": join}  # "skipped": the step's own condition is false
        for label, _, steps in step.branches():
            if steps:
                entry, exits = self.block(steps)
                targets[label] = entry
                for node in exits:
                    self.graph.add_edge(node, join)
            else:
                targets[label] = join
        self.graph.add_conditional_edges(router, _branch_router(step), targets)
        return router, [join]

    # -- while -----------------------------------------------------------------------------------
    def _while(self, step: StepSpec) -> tuple[str, list[str]]:
        start = self._add(f"{step.id}.start", _while_start_node(step))
        guard = self._add(f"{step.id}.guard", _while_guard_node(step))
        done = self._add(f"{step.id}.done", _while_done_node(step))
        entry, exits = self._body(step)
        self.graph.add_edge(start, guard)
        self.graph.add_conditional_edges(guard, _loop_router(step), {"body": entry, "done": done})
        for node in exits:
            self.graph.add_edge(node, guard)
        return start, [done]

    # -- for -------------------------------------------------------------------------------------
    def _sequential_for(self, step: StepSpec) -> tuple[str, list[str]]:
        start = self._add(f"{step.id}.start", _for_start_node(step))
        guard = self._add(f"{step.id}.guard", _for_guard_node(step))
        nxt = self._add(f"{step.id}.next", _for_next_node(step))
        done = self._add(f"{step.id}.done", _for_done_node(step))
        entry, exits = self._body(step)
        self.graph.add_edge(start, guard)
        self.graph.add_conditional_edges(guard, _loop_router(step), {"body": entry, "done": done})
        for node in exits:
            self.graph.add_edge(node, nxt)
        self.graph.add_edge(nxt, guard)
        return start, [done]

    def _parallel_for(self, step: StepSpec) -> tuple[str, list[str]]:
        from langgraph.graph import END, START

        body_graph = None
        if step.steps:
            sub = _Builder(self.state_vars)
            entry, exits = sub.block(step.steps)
            sub.graph.add_edge(START, entry)
            for node in exits:
                sub.graph.add_edge(node, END)
            # checkpointer=False: an item is the unit of resume; its inner steps are not checkpointed.
            body_graph = sub.graph.compile(checkpointer=False)
            self._ids |= sub._ids
        start = self._add(f"{step.id}.start", _fan_start_node(step))
        item = self._add(f"{step.id}.item", _fan_item_node(step, body_graph, self.state_vars))
        done = self._add(f"{step.id}.done", _fan_done_node(step))
        self.graph.add_conditional_edges(start, _fan_router(step, item), [item, done])
        self.graph.add_edge(item, done)
        return start, [done]


# -- node factories (imported lazily by the builder; they run inside the graph) ---------------


def _skill_node(step: StepSpec, output_key: str | None = None) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        return await _ctx(runtime).run_skill_step(step, state, output_key)

    return node


def _start_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        run = _ctx(runtime).condition_holds(step, state["scope"])
        return {"ctl": {f"{step.id}:run": run}}

    return node


def _skip_router(step: StepSpec) -> Callable[[RunState], str]:
    return lambda state: "run" if state["ctl"].get(f"{step.id}:run") else "skip"


def _group_done_node(step: StepSpec, state_vars: list[str]) -> Node:
    ids = [s.id for s in step.steps or []]

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = _ctx(runtime)
        scope = state["scope"]
        output = {i: scope.get(i) for i in ids} if state["ctl"].get(f"{step.id}:run") else None
        return ctx.finish_step(step, scope, output)

    return node


def _if_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        return {"ctl": {f"{step.id}:branch": _ctx(runtime).choose_branch(step, state["scope"])}}

    return node


def _branch_router(step: StepSpec) -> Callable[[RunState], str]:
    return lambda state: state["ctl"].get(f"{step.id}:branch") or "none"


def _if_join_node(step: StepSpec) -> Node:
    by_label = {label: [s.id for s in steps] for label, _, steps in step.branches()}

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        label = state["ctl"].get(f"{step.id}:branch")
        scope = state["scope"]
        if label == "skipped":
            output = None
        else:
            output = {i: scope.get(i) for i in by_label.get(label or "", [])}
            output["branch"] = label or "none"
        return _ctx(runtime).finish_step(step, scope, output)

    return node


def _loop_router(step: StepSpec) -> Callable[[RunState], str]:
    return lambda state: "body" if state["ctl"].get(f"{step.id}:go") else "done"


def _while_start_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        run = _ctx(runtime).condition_holds(step, state["scope"])
        saved = {"loop": state["scope"].get("loop")}
        return {"ctl": {f"{step.id}:i": 0, f"{step.id}:run": run, f"{step.id}:saved": saved}}

    return node


def _while_guard_node(step: StepSpec) -> Node:
    assert step.while_ is not None
    cap = step.while_.max_iterations or DEFAULT_MAX_ITERATIONS

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctl = state["ctl"]
        done = ctl[f"{step.id}:i"]
        loop = {"index": done + 1, "index0": done, "first": done == 0}
        go = bool(ctl.get(f"{step.id}:run")) and done < cap
        if go:
            go = _ctx(runtime).check(step.while_.condition, {**state["scope"], "loop": loop}, step)  # type: ignore[union-attr]
        update: dict[str, Any] = {"ctl": {f"{step.id}:go": go, f"{step.id}:i": done + 1 if go else done}}
        if go:
            update["scope"] = {"loop": loop}
        return update

    return node


def _while_done_node(step: StepSpec) -> Node:
    ids = [s.id for s in step.steps or []] or [f"{step.id}.item"]

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctl, scope = state["ctl"], state["scope"]
        if not ctl.get(f"{step.id}:run"):
            output = None
        else:
            output = {i.removesuffix(".item"): scope.get(i) for i in ids}
            output["iterations"] = ctl[f"{step.id}:i"]
        restored = {**scope, **ctl[f"{step.id}:saved"]}
        return _ctx(runtime).finish_step(step, restored, output, restore=ctl[f"{step.id}:saved"])

    return node


def _for_start_node(step: StepSpec) -> Node:
    assert step.for_ is not None
    var = step.for_.variable

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = _ctx(runtime)
        scope = state["scope"]
        run = ctx.condition_holds(step, scope)
        items = ctx.loop_items(step, scope) if run else []
        saved = {var: scope.get(var), "loop": scope.get("loop")}
        return {
            "ctl": {
                f"{step.id}:run": run,
                f"{step.id}:items": items,
                f"{step.id}:i": 0,
                f"{step.id}:results": [],
                f"{step.id}:saved": saved,
            }
        }

    return node


def _loop_info(index0: int, length: int) -> dict[str, Any]:
    return {
        "index": index0 + 1,
        "index0": index0,
        "first": index0 == 0,
        "last": index0 == length - 1,
        "length": length,
        "revindex": length - index0,
    }


def _for_guard_node(step: StepSpec) -> Node:
    assert step.for_ is not None
    var = step.for_.variable

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctl = state["ctl"]
        items, i = ctl[f"{step.id}:items"], ctl[f"{step.id}:i"]
        if i >= len(items):
            return {"ctl": {f"{step.id}:go": False}}
        return {"ctl": {f"{step.id}:go": True}, "scope": {var: items[i], "loop": _loop_info(i, len(items))}}

    return node


def _for_next_node(step: StepSpec) -> Node:
    ids = [s.id for s in step.steps or []]

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctl, scope = state["ctl"], state["scope"]
        i, items = ctl[f"{step.id}:i"], ctl[f"{step.id}:items"]
        result = {k: scope.get(k) for k in ids} if ids else scope.get(f"{step.id}.item")
        await _ctx(runtime).item_done(step, i + 1, len(items))
        return {"ctl": {f"{step.id}:i": i + 1, f"{step.id}:results": [*ctl[f"{step.id}:results"], result]}}

    return node


def _for_done_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctl, scope = state["ctl"], state["scope"]
        output = ctl[f"{step.id}:results"] if ctl.get(f"{step.id}:run") else None
        saved = ctl[f"{step.id}:saved"]
        return _ctx(runtime).finish_step(step, {**scope, **saved}, output, restore=saved)

    return node


def _fan_start_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = _ctx(runtime)
        scope = state["scope"]
        run = ctx.condition_holds(step, scope)
        items = ctx.loop_items(step, scope) if run else []
        return {"ctl": {f"{step.id}:run": run, f"{step.id}:n": len(items)}, "fanin": {step.id: None}}

    return node


def _fan_router(step: StepSpec, item_node: str) -> Callable[[RunState], Any]:
    from langgraph.types import Send

    assert step.for_ is not None
    var = step.for_.variable

    def route(state: RunState) -> Any:
        ctl = state["ctl"]
        if not ctl.get(f"{step.id}:run") or not ctl.get(f"{step.id}:n"):
            return f"{step.id}.done"
        scope = state["scope"]
        items = _items_cache(state, step)
        n = len(items)
        return [
            Send(item_node, {"scope": {**scope, var: item, "loop": _loop_info(i, n)}, "index": i})
            for i, item in enumerate(items)
        ]

    return route


def _items_cache(state: RunState, step: StepSpec) -> list[Any]:
    # The items were evaluated by the start node; re-rendering here is cheap and keeps them out
    # of the checkpoint (a 1,000-item list would otherwise be stored twice).
    from .runtime import loop_items

    return loop_items(step, state["scope"])


def _fan_item_node(step: StepSpec, body: Any, state_vars: list[str]) -> Node:
    ids = [s.id for s in step.steps or []]

    async def node(payload: dict[str, Any], runtime: Any) -> dict[str, Any]:
        ctx = _ctx(runtime)
        index = payload["index"]
        async with ctx.parallel_slot(step):
            if body is None:
                update = await ctx.run_skill_step(step, {"scope": payload["scope"], "ctl": {}}, f"{step.id}.item")
                result: Any = update["scope"][f"{step.id}.item"]
                changed = {k: v for k, v in update["scope"].items() if k in state_vars}
                spent = update.get("usage")
            else:
                # An own thread id gives the body its own lineage instead of the parent's ambient
                # configurable (checkpoint namespace, `durability="sync"`, which LangGraph cannot
                # honour in a graph compiled without a checkpointer).
                config = {"configurable": {"thread_id": f"{ctx.run_id}/{step.id}/{index}"}}
                final = await body.ainvoke({"scope": payload["scope"], "ctl": {}, "fanin": {}}, config, context=ctx)
                inner = final["scope"]
                result = {k: inner.get(k) for k in ids}
                changed = {k: inner[k] for k in state_vars if k in inner and inner[k] != payload["scope"].get(k)}
                spent = final.get("usage")
        await ctx.item_done(step, None, None)
        update = {"fanin": {step.id: {str(index): {"result": result, "state": changed}}}}
        if spent:
            update["usage"] = spent
        return update

    return node


def _fan_done_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctl, scope = state["ctl"], state["scope"]
        if not ctl.get(f"{step.id}:run"):
            return _ctx(runtime).finish_step(step, scope, None)
        got = (state.get("fanin") or {}).get(step.id) or {}
        ordered = [got[str(i)] for i in range(ctl[f"{step.id}:n"])]
        state_updates: dict[str, Any] = {}
        for entry in ordered:  # in item order: the last item's assignment wins
            state_updates.update(entry["state"])
        update = _ctx(runtime).finish_step(step, {**scope, **state_updates}, [e["result"] for e in ordered])
        update["scope"] = {**state_updates, **update.get("scope", {})}
        update["fanin"] = {step.id: None}
        return update

    return node
