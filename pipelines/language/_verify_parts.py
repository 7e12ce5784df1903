"""The verifier's small parts (private to pipelines.language.verify): walking strings in a value, the JSON types
a literal satisfies and how to name them in messages, and paths through the graph of pipeline calls.
Kept apart from the checks themselves so verify.py reads as the list of checks."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from . import expressions
from .yamlmap import Path_

if TYPE_CHECKING:
    from .spec import PipelineSpec, StepSpec


JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})
TYPE_NAMES: dict[type[object], str] = {float: "number", str: "string", list: "list", dict: "mapping"}


def strings_in(value: Any, path: Path_) -> Iterator[tuple[Path_, str]]:
    """Every string in a nested value, with its path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in cast("dict[Any, Any]", value).items():
            yield from strings_in(item, (*path, key if isinstance(key, str | int) else str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(cast("list[Any]", value)):
            yield from strings_in(item, (*path, index))


def has_template(value: Any) -> bool:
    return any(expressions.is_template(text) for _, text in strings_in(value, ()))


def close_name(name: str, candidates: Collection[str]) -> str | None:
    found = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def json_types(value: Any) -> set[str] | None:
    """The JSON Schema types a literal value satisfies (None: not a JSON value, do not judge)."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number", "integer"} if value.is_integer() else {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    if isinstance(value, dict):
        return {"object"}
    return None


def type_hint(value: Any, wanted: list[str], scope: Collection[str]) -> str:
    """How to fix a literal argument of the wrong type."""
    if isinstance(value, str):
        text = value.strip()
        if {"integer", "number"} & set(wanted):
            try:
                float(text)
            except ValueError:
                pass
            else:
                return f"write the number without quotes: {text}"
        if "boolean" in wanted and text.lower() in ("true", "false", "yes", "no"):
            return "write true or false without quotes"
        if text.split(".")[0] in scope:
            return f'to pass the value of {text}, write "{{{{ {text} }}}}"'
    return f"give {kinds_named(wanted)}, or an expression that yields one"


ARTICLE = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "null",
}


def kinds_named(wanted: list[str]) -> str:
    return " or ".join(ARTICLE.get(t, t) for t in wanted)


def declared_types(prop: dict[str, Any]) -> list[str]:
    """The JSON type names a property's `type` declares (`x` or `[x, y]`); empty when it is anything else."""
    declared = prop.get("type")
    wanted: list[Any] = (
        [declared] if isinstance(declared, str) else cast("list[Any]", declared) if isinstance(declared, list) else []
    )
    return wanted if all(isinstance(t, str) and t in JSON_TYPES for t in wanted) else []


def short_text(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    kind = type(value)
    return TYPE_NAMES.get(kind, kind.__name__)


def bare_expression(text: str) -> str:
    """An expression without its braces, for messages: `{{ a.b }}` -> `a.b`."""
    stripped = text.strip()
    if stripped.startswith("{{") and stripped.endswith("}}") and stripped.count("{{") == 1:
        return stripped[2:-2].strip()
    return stripped


def path_between(calls: Mapping[str, list[str]], start: str, goal: str) -> list[str] | None:
    """Shortest call chain start -> ... -> goal (both included), or None."""
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    for node in queue:
        for callee in calls.get(node, ()):
            if callee == goal:
                chain, probe = [goal], node
                while probe is not None:
                    chain.append(probe)
                    probe = previous[probe]
                return chain[::-1]
            if callee not in previous:
                previous[callee] = node
                queue.append(callee)
    return None


def cycle_from(calls: Mapping[str, list[str]], start: str) -> list[str] | None:
    """A call cycle reachable from `start` (as a -> ... -> a), or None."""
    seen: set[str] = set()
    for node in [start, *reachable(calls, start)]:
        if node in seen:
            continue
        seen.add(node)
        back = path_between(calls, node, node)
        if back is not None:
            return back
    return None


def reachable(calls: Mapping[str, list[str]], start: str) -> list[str]:
    out: list[str] = []
    stack = [start]
    seen = {start}
    while stack:
        for callee in calls.get(stack.pop(), ()):
            if callee not in seen:
                seen.add(callee)
                out.append(callee)
                stack.append(callee)
    return out


def check_shadowing(
    add: Callable[..., None],
    spec: PipelineSpec,
    inputs: Collection[str],
    helpers: Collection[str],
    state_vars: Collection[str],
    first: Mapping[str, StepSpec],
) -> None:
    """Warn of a state variable, step id or loop variable that takes the name of an input, a helper
    or another of them (`add` is the verifier's)."""
    reserved = {"inputs": "the inputs mapping", "loop": "the loop counter"}
    takes: dict[str, str] = dict.fromkeys(inputs, "an input")
    takes.update(reserved)
    for name in helpers:
        takes.setdefault(name, "a helper")
    for name in spec.state:
        if name in takes:
            add(
                ("state", name),
                f"state variable '{name}' has the name of {takes[name]}",
                "rename it",
                "shadowed",
                key=True,
                warning=True,
            )
    for name in state_vars:
        takes.setdefault(name, "a state variable")
    for step in spec.walk():
        if step.id in takes:
            add(
                (*step.path, "id"),
                f"step id '{step.id}' is also the name of {takes[step.id]}",
                "expressions would see only one of them; rename the step",
                "shadowed",
                warning=True,
            )
        if step.for_ is not None:
            var = step.for_.variable
            what = takes.get(var) or ("a step" if var in first else None)
            if what is not None:
                add(
                    (*step.path, "for", "variable"),
                    f"loop variable '{var}' is also the name of {what}",
                    "inside the loop it hides the other one; pick another `variable:`",
                    "shadowed",
                    warning=True,
                )
