"""The output schema of a pipeline tool, inferred from its `outputs` expressions.

A pipeline's outputs are expressions, so their types are known only in part before a run. What
can be inferred is (clients show it, and strict ones want a `type` on every property): a literal
keeps its type, text around an expression is a string, `| length` is an integer, a comparison a
boolean, `a.b` of an input or of a top-level step the type its schema declares. Anything else is
`ANY_JSON`: the documented typed spelling of "any value" (`anyOf` of every JSON type), never `{}`.

Inference stays on the safe side, because the server (and clients) check every result against
this schema: a step that may be skipped (`condition:`) may be null, a step that may fail and
continue (`on_error: continue`) or is nested in a branch or loop is not inferred at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jinja2 import nodes

from skills.core.schema import ANY_JSON, nullable, typed

from .expressions import is_template, lone_expression
from .sandbox import ENVIRONMENT
from .spec import USAGE_SCHEMA
from .summary import SUMMARY_SCHEMA, summary_key

if TYPE_CHECKING:
    from skills import Catalog

    from .spec import PipelineSpec, StepSpec

__all__ = ["declared_output_schema", "infer_output_schema"]

_UNKNOWN: dict[str, Any] = {**ANY_JSON, "description": "Any JSON value (known only when the pipeline runs)."}
_FILTERS: dict[str, str] = {
    **dict.fromkeys(("length", "count", "wordcount", "int"), "integer"),
    **dict.fromkeys(("float", "round", "abs"), "number"),
    **dict.fromkeys(
        ("string", "upper", "lower", "title", "capitalize", "trim", "join", "tojson", "replace", "format", "e"),
        "string",
    ),
    **dict.fromkeys(("list", "sort", "dictsort"), "array"),  # not map/select/...: those yield generators
}
_LITERALS: dict[type, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def declared_output_schema(spec: PipelineSpec) -> dict[str, Any]:
    """The tool's output schema before inference: an entry per output (any JSON), `run_id`,
    `usage` and the run summary (under `summary_key`)."""
    names = list(spec.outputs) if spec.outputs is not None else [s.id for s in spec.steps]
    props: dict[str, Any] = {n: dict(ANY_JSON) for n in names}
    props["run_id"] = {"type": "string", "description": "Identifier of this run (runs show / resume)."}
    props["usage"] = USAGE_SCHEMA
    props[summary_key(spec)] = SUMMARY_SCHEMA
    return {"type": "object", "properties": props, "required": ["run_id"]}


def infer_output_schema(spec: PipelineSpec, catalog: Catalog | None, *, depth: int = 0) -> dict[str, Any]:
    """The declared output schema (`declared_output_schema`) with every output property given
    the most precise type that is certain."""
    base = declared_output_schema(spec)
    inferer = _Inferer(spec, catalog, depth)
    names = list(spec.outputs) if spec.outputs is not None else [s.id for s in spec.steps]
    props = dict(base["properties"])
    for name in names:
        if spec.outputs is not None:
            found = inferer.value(spec.outputs[name])
        else:
            found = inferer.step(name)
        props[name] = found if found is not None and typed(found) else _UNKNOWN
    return {**base, "properties": props}


class _Inferer:
    def __init__(self, spec: PipelineSpec, catalog: Catalog | None, depth: int) -> None:
        self.spec, self.catalog, self.depth = spec, catalog, depth
        self.inputs = spec.all_inputs()
        self.steps: dict[str, StepSpec] = {s.id: s for s in spec.steps}

    def value(self, value: object) -> dict[str, Any] | None:
        if value is None:
            return {"type": "null"}
        if isinstance(value, dict):
            return {"type": "object"}
        if isinstance(value, list):
            return {"type": "array"}
        if not isinstance(value, str):
            kind = _LITERALS.get(type(value))
            return {"type": kind} if kind else None
        if not is_template(value):
            return {"type": "string"}
        try:
            ast = ENVIRONMENT.parse(value)
        except Exception:  # any parse failure: the verifier reports it; here the type is just unknown
            return None
        expr = lone_expression(ast)
        return {"type": "string"} if expr is None else self.expr(expr)

    def expr(self, node: nodes.Expr) -> dict[str, Any] | None:
        if isinstance(node, nodes.Const):
            return self.value(node.value) if not isinstance(node.value, str) else {"type": "string"}
        if isinstance(node, nodes.Compare | nodes.Not | nodes.Test):
            return {"type": "boolean"}
        if isinstance(node, nodes.Concat):
            return {"type": "string"}
        if isinstance(node, nodes.Sub | nodes.Div | nodes.FloorDiv | nodes.Mod | nodes.Pow | nodes.Neg):
            return {"type": "number"}
        if isinstance(node, nodes.List | nodes.Tuple):
            return {"type": "array"}
        if isinstance(node, nodes.Dict):
            return {"type": "object"}
        if isinstance(node, nodes.Filter):
            kind = _FILTERS.get(node.name)
            return {"type": kind} if kind else None
        if isinstance(node, nodes.CondExpr) and node.expr2 is not None:
            both = [self.expr(node.expr1), self.expr(node.expr2)]
            if all(b is not None and isinstance(b.get("type"), str) for b in both):
                kinds = list(dict.fromkeys(b["type"] for b in both if b is not None))
                return {"type": kinds[0]} if len(kinds) == 1 else {"anyOf": [{"type": k} for k in kinds]}
            return None
        return self.path(node)

    def path(self, node: nodes.Expr) -> dict[str, Any] | None:
        keys: list[str] = []
        while isinstance(node, nodes.Getattr | nodes.Getitem):
            if isinstance(node, nodes.Getattr):
                keys.append(node.attr)
            elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
                keys.append(node.arg.value)
            else:
                return None
            node = node.node
        if not isinstance(node, nodes.Name):
            return None
        keys.reverse()
        if node.name == "inputs" and keys:
            node_name, keys = keys[0], keys[1:]
            schema = self.inputs.get(node_name)
        elif node.name in self.inputs and node.name not in self.steps:
            schema = self.inputs.get(node.name)
        else:
            schema = self.step(node.name)
        for key in keys:
            if schema is None or schema.get("type") != "object":
                return None
            props: dict[str, Any] = schema.get("properties") or {}
            schema = props.get(key)
        return _bare(schema)

    def step(self, step_id: str) -> dict[str, Any] | None:
        """What a top-level step's output is certain to look like (None when nothing is)."""
        step = self.steps.get(step_id)
        if step is None or step.on_error == "continue":
            return None
        kind = step.kind
        if kind == "for":
            found: dict[str, Any] | None = {"type": "array"}
        elif kind == "if":
            found = {"type": "object", "properties": {"branch": {"type": "string"}}}
        elif kind == "while":
            found = {"type": "object", "properties": {"iterations": {"type": "integer"}}}
        elif kind in ("group", "agent", "ask"):
            found = {"type": "object"}
        elif kind == "prompt":
            found = step.output if step.output is not None else {"type": "string"}
        elif step.skill and self.catalog is not None and self.depth < 4:
            callee = self.catalog.find(step.skill)
            found = callee.output_schema if callee is not None else None
        else:
            found = None
        if found is not None and step.condition is not None:
            return nullable(found)
        return found


def _bare(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """A schema taken over from elsewhere, without the parts that describe it there."""
    if schema is None:
        return None
    return {k: v for k, v in schema.items() if k not in ("default", "required", "description", "title")} or None
