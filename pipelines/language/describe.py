"""Documentation generated from a pipeline's YAML: help text for people and models, and a graph.

`help_text` is the `.help()` of the seed design, made without a model so it is deterministic:
what the pipeline does, its inputs and outputs, an outline of its steps and an example call.
It ends up in the tool description, so it stays short. `mermaid` draws the same pipeline as a
Mermaid flowchart (loops as subgraphs, branches as a decision with labelled edges).
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from .spec import DEFAULT_MAX_ITERATIONS, PipelineSpec, StepSpec

__all__ = ["example_arguments", "graph", "help_text", "mermaid"]

_WIDTH = 60  # longest expression shown before it is cut


def _short(text: str, width: int = _WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def _show(value: Any, width: int = _WIDTH) -> str:
    """An expression or literal as a reader wants to see it: `{{ a.b }}` -> `a.b`."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{{") and text.endswith("}}") and text.count("{{") == 1:
            text = text[2:-2].strip()
        return _short(text, width)
    return _short(json.dumps(value, default=str), width)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


# -- help text ------------------------------------------------------------------------------------
def help_text(spec: PipelineSpec, *, description: bool = True) -> str:
    """Plain-text help: title, description, inputs, outputs, step outline, example call.

    Pass `description=False` when the text follows `spec.description` already (tool descriptions).
    """
    title = spec.name or spec.id
    lines = [f"# {title}" + (f" (`{spec.id}`)" if spec.name and spec.name != spec.id else "")]
    if description and spec.description.strip():
        lines += ["", spec.description.strip()]
    lines += ["", "## Inputs"]
    schema = spec.input_schema()
    required = set(schema.get("required", []))
    props: dict[str, dict[str, Any]] = schema["properties"]
    lines += [_input_line(name, prop, name in required) for name, prop in props.items()] or ["(none)"]
    outputs = list(spec.outputs) if spec.outputs is not None else [s.id for s in spec.steps]
    lines += ["", "## Outputs", ", ".join(f"`{n}`" for n in [*outputs, "run_id"])]
    lines += ["", "## Steps"]
    for step in spec.steps:
        _outline(step, 0, lines)
    lines += ["", "## Example call", _json(example_arguments(spec))]
    return "\n".join(lines)


def _type_of(prop: dict[str, Any]) -> str:
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = " | ".join(str(k) for k in cast("list[Any]", kind))
    if kind == "array" and isinstance(prop.get("items"), dict) and isinstance(prop["items"].get("type"), str):
        kind = f"array of {prop['items']['type']}"
    return str(kind) if kind else "any"


def _input_line(name: str, prop: dict[str, Any], required: bool) -> str:
    facts = [_type_of(prop), "required" if required else ""]
    if "default" in prop:
        facts.append(f"default {_short(_json(prop['default']), 30)}")
    if isinstance(prop.get("enum"), list):
        facts.append("one of " + ", ".join(_short(_json(v), 20) for v in prop["enum"][:8]))
    text = f"- `{name}` ({', '.join(f for f in facts if f)})"
    about = prop.get("description")
    return text + (f": {_short(str(about), 100)}" if about else "")


def _outline(step: StepSpec, depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    when = f", only if {_show(step.condition)}" if step.condition else ""
    sets = f"; sets {', '.join(step.state)}" if step.state else ""
    if step.if_ is not None:
        for index, (label, condition, steps) in enumerate(step.branches()):
            head = f"- {step.id}: if {_show(condition)}" if index == 0 else f"  {label[:4]}"
            if label.startswith("elif"):
                head += f" {_show(condition)}"
            lines.append(f"{pad}{head}{when if index == 0 else ''}:" if steps else f"{pad}{head}: (nothing)")
            for inner in steps:
                _outline(inner, depth + 2, lines)
        if sets:
            lines.append(f"{pad}  (then{sets[1:]})")
        return
    head = _loop_head(step, _WIDTH)
    if step.callee:
        body = f"{head}: {step.callee}" if head else step.callee
        lines.append(f"{pad}- {step.id}: {body}{when}{sets}")
        return
    lines.append(f"{pad}- {step.id}: {head or 'group'}{when}{sets}:")
    for inner in step.steps or []:
        _outline(inner, depth + 1, lines)


def _loop_head(step: StepSpec, width: int) -> str:
    """`for each x in xs (parallel, max 8)`, `while cond (max 5)`, or "" for other steps."""
    if step.for_ is not None:
        loop = step.for_
        mode = ""
        if loop.parallel:
            mode = f" (parallel, max {loop.max_parallel})" if loop.max_parallel else " (parallel)"
        return f"for each {loop.variable} in {_show(loop.items, width)}{mode}"
    if step.while_ is not None:
        cap = step.while_.max_iterations or DEFAULT_MAX_ITERATIONS
        return f"while {_show(step.while_.condition, width)} (max {cap})"
    return ""


def example_arguments(spec: PipelineSpec) -> dict[str, Any]:
    """Arguments of an example call: the required inputs (as placeholders) and a few defaults."""
    schema = spec.input_schema()
    required = set(schema.get("required", []))
    props: dict[str, dict[str, Any]] = schema["properties"]
    example = {name: _placeholder(name, props[name]) for name in props if name in required}
    for name, prop in props.items():
        if len(example) >= 6:
            break
        if name not in example and prop.get("default") not in (None, "", [], {}):
            example[name] = prop["default"]
    return example


def _placeholder(name: str, prop: dict[str, Any]) -> Any:
    for key in ("examples", "enum"):
        if isinstance(prop.get(key), list) and prop[key]:
            return prop[key][0]
    if "example" in prop:
        return prop["example"]
    kind = prop.get("type")
    if isinstance(kind, list):  # its first type; an empty list names none
        kind = cast("list[Any]", kind)[0] if kind else None
    placeholders: dict[str, Any] = {
        "integer": 1,
        "number": 1.0,
        "boolean": True,
        "array": [],
        "object": {},
        "null": None,
    }
    return placeholders.get(str(kind), f"<{name}>")


# -- mermaid --------------------------------------------------------------------------------------
_ESCAPE = re.compile(r'["#&<>|{}\[\]()`;]')


def _label(text: str) -> str:
    """Text safe inside a quoted Mermaid label: specials as entity codes (`#quot;`, `#123;`)."""
    return _ESCAPE.sub(lambda m: f"#{ord(m.group())};" if m.group() != '"' else "#quot;", text)


Exit = tuple[str, str | None]
"""A node the flow leaves from, and the label of the edge that leaves it."""


class _Chart:
    def __init__(self) -> None:
        self.lines: list[str] = ["flowchart TD"]
        self.edges: list[str] = []  # written after every node: an edge inside a subgraph would pull its nodes in
        self.counter = 0

    def new(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def edge(self, exits: list[Exit], target: str, arrow: str = "-->") -> None:
        for source, label in exits:
            text = f'|"{_label(_short(label, 60))}"|' if label else ""
            self.edges.append(f"  {source} {arrow}{text} {target}")

    def block(self, steps: list[StepSpec], exits: list[Exit], pad: str) -> tuple[str | None, list[Exit]]:
        """Draw `steps` in order after `exits`; the block's first node and the exits of its end."""
        first: str | None = None
        for step in steps:
            entry, exits = self.step(step, exits, pad)
            first = first or entry
        return first, exits

    def step(self, step: StepSpec, exits: list[Exit], pad: str) -> tuple[str | None, list[Exit]]:
        when = f"<br/>only if {_label(_show(step.condition, 40))}" if step.condition else ""
        if step.if_ is not None:
            node = self.new("d")
            self.lines.append(f'{pad}{node}{{"{_label(step.id)}{when}"}}')
            self.edge(exits, node)
            ends: list[Exit] = []
            for label, condition, steps in step.branches():
                text = _show(condition, 40) if condition is not None else "else"
                if label.startswith("elif"):
                    text = f"elif {text}"
                if steps:
                    ends += self.block(steps, [(node, text)], pad)[1]
                else:
                    ends.append((node, text))
            if step.else_ is None:
                ends.append((node, "no branch"))
            return node, ends
        if step.for_ is not None or step.while_ is not None or step.callee is None:
            return self.loop(step, exits, pad, when)
        node = self.new("s")
        self.lines.append(f'{pad}{node}["{_label(step.id)}<br/>{_label(step.callee)}{when}"]')
        self.edge(exits, node)
        return node, [(node, None)]

    def loop(self, step: StepSpec, exits: list[Exit], pad: str, when: str) -> tuple[str | None, list[Exit]]:
        title = _loop_head(step, 40) or "group"
        group = self.new("g")
        self.lines.append(f'{pad}subgraph {group} ["{_label(step.id)}: {_label(title)}{when}"]')
        inner = pad + "  "
        first: str | None
        ends: list[Exit]
        if step.callee:
            node = self.new("s")
            self.lines.append(f'{inner}{node}["{_label(step.id)}<br/>{_label(step.callee)}"]')
            self.edge(exits, node)
            first, ends = node, [(node, None)]
        else:
            first, ends = self.block(step.steps or [], exits, inner)
        if step.while_ is not None and first is not None:
            self.edge([(source, "next iteration") for source, _ in ends], first, "-.->")
        self.lines.append(f"{pad}end")
        return first, ends


def mermaid(spec: PipelineSpec) -> str:
    """A Mermaid `flowchart TD` of the pipeline, from START to END."""
    chart = _Chart()
    chart.lines.append('  START(["start"])')
    _, ends = chart.block(spec.steps, [("START", None)], "  ")
    chart.lines.append('  END(["end"])')
    chart.edge(ends, "END")
    return "\n".join([*chart.lines, *chart.edges]) + "\n"


def graph(spec: PipelineSpec) -> list[dict[str, Any]]:
    """The pipeline's steps as a tree for drawing (the run viewer colours it by step status).

    Each node: `id` (unique in the pipeline: the run's step records name it as `step_id`),
    `kind` (`skill`, `agent`, `for`, `while`, `if`, `group`), `label` (what it calls, or its loop
    head or condition) and `children` (a loop's body, every branch of an `if`, a group's steps).
    """
    return [_node(step) for step in spec.steps]


def _node(step: StepSpec) -> dict[str, Any]:
    kind = step.kind
    if kind == "if":
        label = f"if {_show(step.if_.condition) if step.if_ else ''}"
    elif kind in ("for", "while"):
        label = _loop_head(step, _WIDTH)
    else:
        label = step.callee or kind
    return {"id": step.id, "kind": kind, "label": label, "children": [_node(s) for s in step.children()]}
