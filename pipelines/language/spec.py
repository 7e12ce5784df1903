"""The pipeline file format (SPEC 4) as pydantic models; the field docstrings are its reference.

A pipeline is a YAML file: `id` (its tool name), `inputs`, optional `state`, `steps` and
`outputs`. A step calls a skill, loops (`for`, `while`), branches (`if` / `elif` / `else`) or
groups nested `steps`. Every model keeps `path`, its place in the file, for error positions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from skills.core.contract import AgentSpec
from skills.core.schema import ANY_JSON, typed

from .limits import RunLimits

__all__ = [
    "USAGE_SCHEMA",
    "AgentSpec",
    "ElifBranch",
    "ForSpec",
    "IfSpec",
    "PipelineSpec",
    "RetrySpec",
    "StepKind",
    "StepSpec",
    "WhileSpec",
]

StepKind = Literal["skill", "agent", "prompt", "ask", "for", "while", "if", "group"]
STEP_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PIPELINE_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
DEFAULT_MAX_ITERATIONS = 100
Path_ = tuple[str | int, ...]


def _condition_text(value: Any) -> Any:
    """`condition: false` (a YAML boolean) means the expression `false`."""
    return ("true" if value else "false") if isinstance(value, bool) else value


Condition = Annotated[str, BeforeValidator(_condition_text)]


def _state_names(value: Any) -> Any:
    bad = _unusable_names(value)
    if bad:
        names = ", ".join(bad)
        raise ValueError(f"state variable names must be usable in expressions (letters, digits, _): {names}")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)


class RetrySpec(_Model):
    """Run a failing step again."""

    attempts: int = Field(default=3, ge=1, le=20)
    """Total attempts, the first included."""
    backoff: float = Field(default=0.0, ge=0, le=300)
    """Seconds before the second attempt, doubled before each further one."""


class ForSpec(_Model):
    """Run the step (its `skill`, or its nested `steps`) once per item."""

    items: Any
    """The list to loop over, usually an expression: `"{{ files.paths }}"`."""
    variable: str = "item"
    """Name of the loop variable; `loop.index` (1-based), `loop.index0`, `loop.first`,
    `loop.last` and `loop.length` are in scope too."""
    parallel: bool = False
    """Run items concurrently (results still come back in item order)."""
    max_parallel: int | None = Field(default=None, ge=1, le=1000)
    """At most this many items at once when `parallel` (default: 16)."""

    @field_validator("variable")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not STEP_ID.match(value):
            raise ValueError(f"variable '{value}' must be a name usable in expressions (letters, digits, _)")
        return value


class WhileSpec(_Model):
    """Repeat the nested `steps` while `condition` is true."""

    condition: Condition
    """Checked before each iteration; `loop.index` counts iterations from 1."""
    max_iterations: int | None = Field(default=None, ge=1, le=100_000)
    """Hard stop; required in spirit: when omitted the cap is 100 and verification warns."""


def _unusable_names(value: object) -> list[str]:
    """The keys of a mapping that cannot be names in expressions."""
    if not isinstance(value, dict):
        return []
    return [str(k) for k in cast("dict[Any, Any]", value) if not isinstance(k, str) or not STEP_ID.match(k)]


class ElifBranch(_Model):
    """One `elif` branch: taken when no earlier branch was and `condition` is true."""

    condition: Condition
    then: list[StepSpec] = Field(default_factory=list["StepSpec"])


class IfSpec(_Model):
    """The `if` of a branching step; `elif:` and `else:` sit beside `if:` on the step."""

    condition: Condition
    then: list[StepSpec] = Field(default_factory=list["StepSpec"])


class StepSpec(_Model):
    """One step of a pipeline."""

    id: str
    """Unique in the pipeline; later expressions read this step's output as `{{ <id> }}`."""
    name: str | None = None
    description: str | None = None
    skill: str | None = None
    """Skill, imported tool or pipeline to call. An instructions skill (no skill.yaml) is carried
    out by the model: its SKILL.md body as the instructions, the step's parameters as the task."""
    agent: AgentSpec | None = None
    """Instead of `skill`: an agent working over an allow-list of skills, with hard limits
    (`skills`, `max_iterations`, `max_tokens`, `max_cost_usd`, `timeout`, `model`,
    `instructions`); `parameters` gives it `task` (and `context`). Its output is the agent
    result: status, output, summary, confidence, tokens, cost_usd, duration_s, iterations."""
    prompt: str | None = None
    """Instead of `skill`: ask a model inline. The text may hold `{{ }}` expressions, as
    parameters do. The step's output is the model's answer (its text, or with `output:` the
    JSON value it returned)."""
    system: str | None = None
    """With `prompt`: the system instructions (a template too)."""
    output: dict[str, Any] | None = None
    """With `prompt`: a JSON Schema the answer must fit (it must parse as JSON and fit, or the
    model is asked once more with what did not fit; then the step fails naming it)."""
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    """With `prompt`: the longest answer in tokens (default: the model's, from models/registry.yaml)."""
    ask: str | None = None
    """Instead of `skill`: ask the person (a template too). The step's output is the answer: an
    object with the fields of `schema`. A declined question fails the step."""
    ask_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    """With `ask`: the answer's fields, a flat JSON Schema object (`properties` of strings,
    numbers, integers, booleans or enums), as MCP elicitation allows. Default: one string `answer`."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Arguments of the skill; strings may hold `{{ }}` expressions."""
    condition: Condition | None = None
    """When false, the step is skipped and its output is null."""
    for_: ForSpec | None = Field(default=None, alias="for")
    while_: WhileSpec | None = Field(default=None, alias="while")
    if_: IfSpec | None = Field(default=None, alias="if")
    elif_: list[ElifBranch] = Field(default_factory=list[ElifBranch], alias="elif")
    else_: list[StepSpec] | None = Field(default=None, alias="else")
    steps: list[StepSpec] | None = None
    """Nested steps: the body of a `for` or `while`, or a plain group."""
    state: Annotated[dict[str, Any], BeforeValidator(_state_names)] = Field(default_factory=dict)
    """State assignments run after the step, in scope of its output."""
    model: str | None = None
    """Model role or id for the step's model calls (prompt, instructions and agent skills);
    beats the skill's own `model:` and the pipeline's."""
    timeout: float | None = Field(default=None, gt=0, le=86_400)
    """Seconds one attempt of the step may take."""
    retry: RetrySpec | None = None
    on_error: Literal["fail", "continue"] = "fail"
    """`continue` records `{error: <message>, step: <id>, step_failed: true}` as the step's output
    and goes on; `{{ <id> is failed }}` tells that record from a result."""
    _path: Path_ = PrivateAttr(default=())

    @property
    def path(self) -> Path_:
        """Where the step is in the file (set by the loader; not a key users can write)."""
        return self._path

    @path.setter
    def path(self, value: Path_) -> None:
        self._path = value

    @field_validator("id")
    @classmethod
    def _step_id(cls, value: str) -> str:
        if not STEP_ID.match(value):
            raise ValueError(f"step id '{value}' must be letters, digits and _ (not starting with a digit)")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> StepSpec:
        chosen = [
            k
            for k, v in (("skill", self.skill), ("agent", self.agent), ("prompt", self.prompt), ("ask", self.ask))
            if v is not None and v != ""
        ]
        calls = bool(chosen)
        if len(chosen) > 1:
            raise ValueError(f"a step does one thing: {' and '.join(f'`{k}`' for k in chosen)} cannot go together")
        if self.prompt is None and (self.system is not None or self.output is not None or self.max_tokens is not None):
            raise ValueError("`system`, `output` and `max_tokens` belong to a `prompt:` step")
        if self.ask is None and self.ask_schema is not None:
            raise ValueError("`schema` belongs to an `ask:` step")
        if self.if_ is not None:
            if calls or self.for_ or self.while_ or self.steps:
                raise ValueError("an `if` step only branches: move skill/agent/for/while/steps into its branches")
        elif self.elif_ or self.else_ is not None:
            raise ValueError("`elif` and `else` need an `if:` on the same step")
        if self.while_ is not None and self.for_ is not None:
            raise ValueError("a step is either a `for` or a `while` loop, not both")
        if calls and self.steps:
            raise ValueError("a step has either `skill` (or `agent`, `prompt`, `ask`) or nested `steps`, not both")
        if self.while_ is not None and not self.steps and not calls:
            raise ValueError("a `while` step needs nested `steps` (or a `skill`) to repeat")
        if self.if_ is None and not calls and not self.steps:
            raise ValueError("a step needs `skill`, `agent`, `prompt`, `ask`, nested `steps`, or `if`")
        return self

    @property
    def kind(self) -> StepKind:
        if self.if_ is not None:
            return "if"
        if self.for_ is not None:
            return "for"
        if self.while_ is not None:
            return "while"
        if self.agent is not None:
            return "agent"
        if self.prompt is not None:
            return "prompt"
        if self.ask is not None:
            return "ask"
        return "skill" if self.skill else "group"

    @property
    def calls(self) -> bool:
        """True when the step itself calls something (a skill, an agent, a model or the person), loop or not."""
        return bool(self.skill) or self.agent is not None or self.prompt is not None or self.ask is not None

    @property
    def callee(self) -> str | None:
        """What the step calls, for help text and graphs: the skill's name, `agent`, `prompt` or `ask`."""
        if self.skill:
            return self.skill
        if self.agent is not None:
            return "agent"
        return "prompt" if self.prompt is not None else "ask" if self.ask is not None else None

    def templates(self) -> dict[str, Any]:
        """What is rendered in scope before the step's call: the parameters of a skill or an
        agent, the texts of a `prompt:` (`prompt`, `system`) or an `ask:` (`ask`)."""
        if self.prompt is not None:
            return {"prompt": self.prompt} if self.system is None else {"prompt": self.prompt, "system": self.system}
        if self.ask is not None:
            return {"ask": self.ask}
        return self.parameters

    def branches(self) -> list[tuple[str, str | None, list[StepSpec]]]:
        """(`then`|`elif1`...|`else`, condition, steps) of an `if` step, in order."""
        if self.if_ is None:
            return []
        out: list[tuple[str, str | None, list[StepSpec]]] = [("then", self.if_.condition, self.if_.then)]
        out += [(f"elif{i}", b.condition, b.then) for i, b in enumerate(self.elif_, start=1)]
        if self.else_ is not None:
            out.append(("else", None, self.else_))
        return out

    def children(self) -> list[StepSpec]:
        """Directly nested steps (loop bodies, groups, every branch)."""
        if self.if_ is not None:
            return [s for _, _, steps in self.branches() for s in steps]
        return list(self.steps or [])


class PipelineSpec(_Model):
    """A pipeline file."""

    id: str
    """Tool name of the pipeline: letters, digits, `_` and `-`, 1-64 chars."""
    name: str | None = None
    """Human title."""
    description: str = ""
    """What it does and when to use it; the start of the tool description."""
    version: str | None = None
    inputs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Tool arguments: name -> JSON Schema property (`type`, `description`, `default`, ...).
    An input without `default` is required."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Shorthand for `inputs`: name -> default value (the type is taken from the default)."""
    state: Annotated[dict[str, Any], BeforeValidator(_state_names)] = Field(default_factory=dict)
    """State variables and their initial values."""
    steps: list[StepSpec] = Field(min_length=1)
    outputs: dict[str, Any] | None = None
    """Result of the pipeline: name -> expression. Without it, every top-level step's output."""
    model: str | None = None
    """Default model role or id for the model calls of its steps (a step's or a skill's own
    `model:` beats it)."""
    timeout: float | None = Field(default=None, gt=0, le=86_400)
    """Seconds one attempt of the run (a start or a resume) may take; lowers the server's
    `max_wall_time`, never raises it."""
    limits: RunLimits | None = None
    """Lower the server's run limits for this pipeline (`max_steps`, `max_loop_items`,
    `max_state_bytes`, `max_wall_time`, `max_artifact_bytes`, ...): a value above the server's is
    capped to it."""

    @field_validator("id")
    @classmethod
    def _pipeline_id(cls, value: str) -> str:
        if not PIPELINE_ID.match(value):
            raise ValueError(f"id '{value}' must be 1-64 letters, digits, '_' or '-' (it is the tool name)")
        return value

    @field_validator("inputs", mode="before")
    @classmethod
    def _inputs_shorthand(cls, value: Any) -> Any:
        if isinstance(value, dict):  # `name: string` is accepted for `name: {type: string}`
            given = cast("dict[Any, Any]", value)
            return {k: ({"type": v} if isinstance(v, str) else ({} if v is None else v)) for k, v in given.items()}
        return value

    def all_inputs(self) -> dict[str, dict[str, Any]]:
        """`inputs` and `parameters` merged into JSON Schema properties."""
        merged = {name: _property_of(default) for name, default in self.parameters.items()}
        merged.update(self.inputs)
        return merged

    def input_schema(self) -> dict[str, Any]:
        props = self.all_inputs()
        required = [n for n, p in props.items() if "default" not in p and p.get("required", True) is not False]
        clean = {n: _typed_input({k: v for k, v in p.items() if k != "required"}) for n, p in props.items()}
        schema: dict[str, Any] = {"type": "object", "properties": clean, "additionalProperties": False}
        if required:
            schema["required"] = required
        return schema

    def callees(self) -> set[str]:
        """Every name the pipeline calls: each step's `skill` and each agent's allow-list
        (patterns included), for knowing which upstream servers a run needs."""
        names: set[str] = set()
        for step in self.walk():
            if step.skill:
                names.add(step.skill)
            if step.agent is not None:
                names.update(step.agent.skills)
        return names

    def walk(self) -> Iterator[StepSpec]:
        """Every step, depth first, in file order."""
        stack = list(reversed(self.steps))
        while stack:
            step = stack.pop()
            yield step
            stack.extend(reversed(step.children()))


_TALLY: dict[str, Any] = {
    "input_tokens": {"type": "integer"},
    "output_tokens": {"type": "integer"},
    "total_tokens": {"type": "integer"},
    "cost_usd": {"type": "number"},
    "calls": {"type": "integer"},
}
USAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Tokens and cost of the run's model calls, in total and per step (only when a model was called).",
    "properties": {
        **_TALLY,
        "steps": {"type": "object", "additionalProperties": {"type": "object", "properties": _TALLY}},
    },
}


def _typed_input(prop: dict[str, Any]) -> dict[str, Any]:
    """An input property as published: one without any type accepts any JSON value, spelled
    with types (`ANY_JSON`) for clients that require a type on every property."""
    if typed(prop) or "anyOf" in prop or "oneOf" in prop or "$ref" in prop:
        return prop
    return {**prop, "anyOf": ANY_JSON["anyOf"]}


def _property_of(default: Any) -> dict[str, Any]:
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    prop: dict[str, Any] = {"default": default}
    if type(default) in kinds:
        prop["type"] = kinds[type(default)]
    return prop


ElifBranch.model_rebuild()
IfSpec.model_rebuild()
StepSpec.model_rebuild()
