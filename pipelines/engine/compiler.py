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
  the items finish in; a body of several steps runs per item as a compiled sub-graph;
- a sequential `for` or `while` inside the body of another sequential loop is a *unit*: one
  node that runs the whole inner loop as a compiled sub-graph without checkpoints. Each
  checkpoint records every node of the graph (LangGraph's channel versions), so inlined, a
  200 x 200 nested loop took 40,000 checkpoints of the whole graph's bookkeeping (hundreds of
  MB for a pipeline of a few dozen nodes); as a unit it takes one per outer iteration. The
  price: an inner loop interrupted half-way runs again from its first item on resume, as an
  item of a parallel loop does (the outer loop's finished iterations are kept).

Nodes get the run's services (skill calls, progress, limits) from LangGraph's run context,
never from the checkpointed state, so one compiled graph serves every run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from ..errors import PipelineError
from ..language.spec import PipelineSpec, StepSpec
from . import loops as _loops
from ._nodes import CALL_KINDS, end_node, entry_node
from ._state import RunState, graph_state

if TYPE_CHECKING:
    from langgraph.types import StateSnapshot


__all__ = [
    "CompiledPipeline",
    "GraphBuilder",
    "RunGraph",
    "RunState",
    "compile_pipeline",
    "end_node",
    "entry_node",
    "graph_state",
    "state_names",
]

Node = Callable[..., Any]


class RunGraph(Protocol):
    """What runs use of a compiled LangGraph graph, typed.

    LangGraph's `CompiledStateGraph` is generic in four parameters and its signatures are partly
    Unknown to a type checker (no stubs for its sub-packages); the compiler hands out this view.
    """

    def copy(self, *, update: dict[str, Any]) -> RunGraph: ...

    async def ainvoke(self, input: Any, config: dict[str, Any], *, context: Any) -> dict[str, Any]: ...

    def astream(
        self,
        input: Any,
        config: dict[str, Any],
        *,
        context: Any,
        stream_mode: Literal["values"],
        durability: Literal["sync"] | None,
        interrupt_after: list[str] | None,
    ) -> AsyncIterator[dict[str, Any]]: ...

    async def aget_state(self, config: dict[str, Any]) -> StateSnapshot: ...

    def aget_state_history(self, config: dict[str, Any]) -> AsyncIterator[StateSnapshot]: ...


class GraphBuilder(Protocol):
    """What the compiler uses of LangGraph's `StateGraph` (typed, as `RunGraph` is)."""

    def add_node(self, node: str, action: Node, /) -> object: ...

    def add_edge(self, start_key: str, end_key: str, /) -> object: ...

    def add_conditional_edges(
        self, source: str, path: Callable[[RunState], Any], path_map: dict[str, str] | list[str], /
    ) -> object: ...

    def compile(self, checkpointer: Literal[False] | None = None) -> RunGraph: ...


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
    builder: GraphBuilder
    state_vars: list[str]
    bodies: dict[str, RunGraph] = field(default_factory=dict[str, "RunGraph"])
    """The compiled body of each parallel `for` with nested steps, by step id (a worker runs one
    item of it with `_loops.run_item`)."""
    _graphs: dict[int, RunGraph] = field(default_factory=dict[int, "RunGraph"])

    def graph(self, checkpointer: Any = None) -> RunGraph:
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
    from langgraph.graph import END, START  # pyright: ignore[reportMissingTypeStubs]  # py.typed only at the namespace root

    names = state_names(spec)
    builder = _Builder(names)
    entry, exits = builder.block(spec.steps)
    builder.graph.add_edge(START, entry)
    for node in exits:
        builder.graph.add_edge(node, END)
    return CompiledPipeline(spec, builder.graph, names, builder.bodies)


class _Builder:
    """Adds the nodes and edges of blocks of steps to one StateGraph."""

    def __init__(
        self, state_vars: list[str], bodies: dict[str, RunGraph] | None = None, *, checkpointed: bool = True
    ) -> None:
        from langgraph.graph import StateGraph  # pyright: ignore[reportMissingTypeStubs]  # py.typed only at the namespace root

        from .context import RunContext

        self.state_vars = state_vars
        self.graph = cast("GraphBuilder", StateGraph(graph_state(), context_schema=RunContext))
        self._ids: set[str] = set()
        self.bodies: dict[str, RunGraph] = bodies if bodies is not None else {}
        self.checkpointed = checkpointed
        """Whether this graph runs with the run's checkpointer (not: a parallel body, a unit)."""
        self._in_loop = 0
        """Sequential loops whose body is being added to this graph (a loop in one is a unit)."""

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
        if kind in CALL_KINDS:
            name = self._add(step.id, _skill_node(step))
            return name, [name]
        if kind == "for" and step.for_ and step.for_.parallel:
            return self._parallel_for(step)
        if kind in ("for", "while") and self.checkpointed and self._in_loop:
            return self._unit(step)
        if kind == "for":
            return self._sequential_for(step)
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
            return self._loop_block(step.steps)
        name = self._add(f"{step.id}.call", _skill_node(step, output_key=f"{step.id}.item"))
        return name, [name]

    def _loop_block(self, steps: list[StepSpec]) -> tuple[str, list[str]]:
        """The nested steps of a sequential loop, added to this graph (loops among them are units)."""
        self._in_loop += 1
        try:
            return self.block(steps)
        finally:
            self._in_loop -= 1

    def _sub_graph(self, steps: list[StepSpec]) -> RunGraph:
        """`steps` compiled as a graph of their own, run without checkpoints (a parallel body, a unit)."""
        from langgraph.graph import END, START  # pyright: ignore[reportMissingTypeStubs]  # py.typed only at the namespace root

        sub = _Builder(self.state_vars, bodies=self.bodies, checkpointed=False)
        entry, exits = sub.block(steps)
        sub.graph.add_edge(START, entry)
        for node in exits:
            sub.graph.add_edge(node, END)
        self._ids |= sub._ids
        return sub.graph.compile(checkpointer=False)

    # -- unit --------------------------------------------------------------------------------------
    def _unit(self, step: StepSpec) -> tuple[str, list[str]]:
        """A loop inside another loop's body: one node running it whole (see the module doc)."""
        name = self._add(step.id, _loops.unit_node(step, self._sub_graph([step]), self.state_vars))
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
        start = self._add(f"{step.id}.start", _loops.while_start_node(step))
        guard = self._add(f"{step.id}.guard", _loops.while_guard_node(step))
        done = self._add(f"{step.id}.done", _loops.while_done_node(step))
        entry, exits = self._body(step)
        self.graph.add_edge(start, guard)
        self.graph.add_conditional_edges(guard, _loops.loop_router(step), {"body": entry, "done": done})
        for node in exits:
            self.graph.add_edge(node, guard)
        return start, [done]

    # -- for -------------------------------------------------------------------------------------
    def _sequential_for(self, step: StepSpec) -> tuple[str, list[str]]:
        start = self._add(f"{step.id}.start", _loops.for_start_node(step))
        done = self._add(f"{step.id}.done", _loops.for_done_node(step))
        router = _loops.loop_router(step)
        if not step.steps:  # one node per item, looping back to itself
            item = self._add(f"{step.id}.call", _loops.for_item_node(step))
            self.graph.add_conditional_edges(start, router, {"body": item, "done": done})
            self.graph.add_conditional_edges(item, router, {"body": item, "done": done})
            return start, [done]
        guard = self._add(f"{step.id}.next", _loops.for_guard_node(step))
        entry, exits = self._loop_block(step.steps)
        self.graph.add_conditional_edges(start, router, {"body": entry, "done": done})
        for node in exits:
            self.graph.add_edge(node, guard)
        self.graph.add_conditional_edges(guard, router, {"body": entry, "done": done})
        return start, [done]

    def _parallel_for(self, step: StepSpec) -> tuple[str, list[str]]:
        body_graph = None
        if step.steps:
            # checkpointer=False: an item is the unit of resume; its inner steps are not checkpointed.
            body_graph = self.bodies[step.id] = self._sub_graph(step.steps)
        start = self._add(f"{step.id}.start", _loops.fan_start_node(step))
        item = self._add(f"{step.id}.item", _loops.fan_item_node(step, body_graph, self.state_vars))
        wave = self._add(f"{step.id}.wave", _loops.fan_wave_node(step))
        done = self._add(f"{step.id}.done", _loops.fan_done_node(step))
        router = _loops.fan_router(step, item)
        self.graph.add_conditional_edges(start, router, [item, done])
        self.graph.add_edge(item, wave)
        self.graph.add_conditional_edges(wave, router, [item, done])
        return start, [done]


# -- node factories (imported lazily by the builder; they run inside the graph) ---------------


def _skill_node(step: StepSpec, output_key: str | None = None) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        return await _loops.run_context(runtime).run_skill_step(step, state["scope"], output_key)

    return node


def _start_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = _loops.run_context(runtime)
        await ctx.step_started(step, state["scope"])
        run = ctx.condition_holds(step, state["scope"])
        return {"ctl": {f"{step.id}:run": run}}

    return node


def _skip_router(step: StepSpec) -> Callable[[RunState], str]:
    return lambda state: "run" if state["ctl"].get(f"{step.id}:run") else "skip"


def _group_done_node(step: StepSpec, state_vars: list[str]) -> Node:
    ids = [s.id for s in step.steps or []]

    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = _loops.run_context(runtime)
        scope = state["scope"]
        output = {i: scope.get(i) for i in ids} if state["ctl"].get(f"{step.id}:run") else None
        return ctx.finish_step(step, scope, output)

    return node


def _if_node(step: StepSpec) -> Node:
    async def node(state: RunState, runtime: Any) -> dict[str, Any]:
        ctx = _loops.run_context(runtime)
        await ctx.step_started(step, state["scope"])
        return {"ctl": {f"{step.id}:branch": ctx.choose_branch(step, state["scope"])}}

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
        return _loops.run_context(runtime).finish_step(step, scope, output)

    return node
