"""Static checks of a pipeline: every problem at once, each with its line, column and a hint.

`load_spec` finds what YAML and the schema can see; `verify` finds what needs the whole file:
names an expression reads that are not in scope, duplicate ids, skills and models that do not
exist, pipelines that call themselves, arguments that cannot fit a skill's input schema. It
never stops at the first problem, and it never runs anything.

Scope (binding: the runtime resolves names the same way). At a step these names exist:

- every input by name, and the mapping `inputs`;
- every state variable: declared in the top-level `state:` or assigned by any step's `state:`
  anywhere (null until assigned);
- the ids of the steps before it in its own list, and of the steps before each enclosing step
  in theirs, up to the top level. Not the steps nested in an earlier step's block (read them
  through that step's output: `route.big`, `analyses[0].sub`), not later steps, not the
  enclosing steps themselves;
- inside a `for` body (its `skill` parameters or its nested `steps`): the loop variable and
  `loop`; inside a `while` body, and in `while.condition`: `loop`;
- the helpers (`expressions.HELPERS`: list_files, range, dict, ...); Jinja's `true`, `false`,
  `none` are literals, and names bound inside a template (`{% for %}`, `{% set %}`) are local.

A step's `condition`, `for.items`, `if` / `elif` conditions and `parameters` do not see its own
id; its `state:` assignments do (they run after it, outside its loop). The pipeline `outputs`
see the inputs, the state and every top-level step. The top-level `state:` initial values see
the inputs only.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

from ..errors import Issue, VerificationError
from . import expressions
from ._verify_inline import check_inline
from ._verify_parts import (
    bare_expression,
    check_shadowing,
    close_name,
    cycle_from,
    declared_types,
    has_template,
    json_types,
    kinds_named,
    path_between,
    short_text,
    strings_in,
    type_hint,
    type_name,
)
from .loader import load_spec
from .spec import DEFAULT_MAX_ITERATIONS, PipelineSpec, StepSpec
from .yamlmap import Path_, SourceMap

if TYPE_CHECKING:
    from skills import Catalog
    from skills.core.roles import RoleBook

__all__ = ["all_issues", "check_text", "verify"]

_BRACES = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_REMOVED_GLOBALS = frozenset({"lipsum", "cycler", "joiner", "namespace"})


def check_text(
    text: str,
    file: str = "<pipeline>",
    *,
    catalog: Catalog | None = None,
    pipelines: Mapping[str, PipelineSpec] | None = None,
    models: Collection[str] | None = None,
    roles: RoleBook | None = None,
) -> tuple[PipelineSpec | None, list[Issue]]:
    """Load and verify pipeline text; the spec (None when it does not load) and every issue."""
    try:
        spec, smap = load_spec(text, file)
    except VerificationError as exc:
        return None, all_issues(exc, catalog=catalog, pipelines=pipelines, models=models, roles=roles)
    return spec, verify(spec, smap, catalog=catalog, pipelines=pipelines, models=models, roles=roles)


def all_issues(
    exc: VerificationError,
    *,
    catalog: Catalog | None = None,
    pipelines: Mapping[str, PipelineSpec] | None = None,
    models: Collection[str] | None = None,
    roles: RoleBook | None = None,
) -> list[Issue]:
    """A load's issues plus what verification finds in the rest of the pipeline (`exc.partial`),
    sorted by position: the schema's mistakes do not hide the others."""
    issues = list(exc.issues)
    if exc.partial is not None:
        spec, smap = exc.partial
        seen = {(i.line, i.col) for i in issues}
        more = verify(
            spec, smap, catalog=catalog, pipelines={**(pipelines or {}), spec.id: spec}, models=models, roles=roles
        )
        issues += [i for i in more if (i.line, i.col) not in seen]
    return sorted(issues, key=lambda i: (i.line, i.col))


def verify(
    spec: PipelineSpec,
    smap: SourceMap,
    *,
    catalog: Catalog | None = None,
    pipelines: Mapping[str, PipelineSpec] | None = None,
    models: Collection[str] | None = None,
    roles: RoleBook | None = None,
) -> list[Issue]:
    """Every problem of a loaded pipeline, sorted by position (warnings included).

    `catalog` enables the skill and argument checks, `pipelines` (id -> spec, the other
    pipelines a step may call) the cycle check and argument checks of pipeline calls, `models`
    the model check, `roles` the agent-role check. Whatever is not given is not checked.
    """
    checker = _Verifier(spec, smap, catalog, dict(pipelines or {}), models)
    checker.roles = roles
    checker.run()
    return sorted(checker.issues, key=lambda i: (i.line, i.col))


class _Verifier:
    def __init__(
        self,
        spec: PipelineSpec,
        smap: SourceMap,
        catalog: Catalog | None,
        pipelines: dict[str, PipelineSpec],
        models: Collection[str] | None,
    ) -> None:
        self.spec, self.smap, self.catalog, self.models = spec, smap, catalog, models
        self.pipelines = {**pipelines, spec.id: spec}  # the file being checked beats its older copy
        self.issues: list[Issue] = []
        self.roles: RoleBook | None = None
        self.inputs = set(spec.all_inputs())
        self.state_vars = set(spec.state) | {name for step in spec.walk() for name in step.state}
        self.helpers = frozenset(expressions.HELPERS)
        self.base = frozenset(self.inputs | {"inputs"} | self.state_vars | self.helpers)
        # Index of the steps: first step of each id, enclosing step, document order, loop variables.
        self.first: dict[str, StepSpec] = {}
        self.parent: dict[int, StepSpec | None] = {}
        self.order: dict[int, int] = {}
        self.loop_vars: dict[str, StepSpec] = {}
        self._index(spec.steps, None)

    def add(self, path: Path_, message: str, hint: str, code: str, *, key: bool = False, warning: bool = False) -> None:
        severity: Literal["error", "warning"] = "warning" if warning else "error"
        self.issues.append(self.smap.issue(path, message, hint, key=key, severity=severity, code=code))

    def _index(self, steps: list[StepSpec], parent: StepSpec | None) -> None:
        for step in steps:
            self.order[id(step)] = len(self.order)
            self.parent[id(step)] = parent
            first = self.first.get(step.id)
            if first is None:
                self.first[step.id] = step
            else:
                line = self.smap.at((*first.path, "id"))[0]
                self.add(
                    (*step.path, "id"),
                    f"duplicate step id '{step.id}'",
                    f"the first '{step.id}' is on line {line}; step ids are unique in the whole pipeline",
                    "duplicate-id",
                )
            if step.for_ is not None:
                self.loop_vars.setdefault(step.for_.variable, step)
            self._index(step.children(), step)

    # -- the walk ---------------------------------------------------------------------------
    def run(self) -> None:
        spec = self.spec
        for path, text in strings_in(spec.state, ("state",)):
            self.expression(path, text, frozenset(self.inputs | {"inputs"} | self.helpers), None)
        self.block(spec.steps, set(self.base))
        if spec.outputs is not None:
            scope = set(self.base) | {s.id for s in spec.steps}
            for path, text in strings_in(spec.outputs, ("outputs",)):
                self.expression(path, text, scope, None)
            for reserved, why in (
                ("run_id", "the run's own run_id"),
                ("usage", "the tokens and cost of its model calls"),
            ):
                if reserved in spec.outputs:
                    self.add(
                        ("outputs", reserved),
                        f"output '{reserved}' is reserved",
                        f"every result carries {why} under that name; rename this output",
                        "reserved-output",
                        key=True,
                    )
        self.model(("model",), spec.model)
        check_shadowing(self.add, self.spec, self.inputs, self.helpers, self.state_vars, self.first)
        self.cycles()

    def block(self, steps: list[StepSpec], outer: set[str] | frozenset[str]) -> None:
        scope = set(outer)
        for step in steps:
            self.step(step, scope)
            scope.add(step.id)

    def step(self, step: StepSpec, scope: set[str]) -> None:
        path = step.path
        if step.condition is not None:
            self.condition((*path, "condition"), step.condition, scope, step)
        body = scope
        if step.for_ is not None:
            loop = step.for_
            self.expression((*path, "for", "items"), loop.items, scope, step)
            self.for_items(step)
            if loop.max_parallel is not None and not loop.parallel:
                self.add(
                    (*path, "for", "max_parallel"),
                    "max_parallel has no effect without `parallel: true`",
                    "add `parallel: true` to the for, or remove max_parallel",
                    "max-parallel",
                    key=True,
                    warning=True,
                )
            if loop.parallel:
                self.parallel_state(step)
            body = scope | {loop.variable, "loop"}
        elif step.while_ is not None:
            body = scope | {"loop"}
            self.condition((*path, "while", "condition"), step.while_.condition, body, step)
            if step.while_.max_iterations is None:
                self.add(
                    (*path, "while"),
                    f"`while` without max_iterations stops after {DEFAULT_MAX_ITERATIONS} iterations",
                    "add `max_iterations: N` to the while to choose the limit",
                    "max-iterations",
                    key=True,
                    warning=True,
                )
        if step.if_ is not None:
            self.branches(step, scope)
        elif step.steps:
            self.block(step.steps, body)
        if step.skill:
            self.expression((*path, "parameters"), step.parameters, body, step)
            self.skill(step, body)
        elif step.agent is not None:
            self.expression((*path, "parameters"), step.parameters, body, step)
            self.agent(step, body)
        elif step.prompt is not None or step.ask is not None:
            check_inline(self, step, body)
        elif step.parameters:
            self.add(
                (*path, "parameters"),
                f"step '{step.id}' has parameters but no skill to pass them to",
                "parameters belong on the steps that call a skill; move them there",
                "unused-parameters",
                key=True,
                warning=True,
            )
        if step.state:
            self.expression((*path, "state"), step.state, scope | {step.id}, step)
        self.model((*path, "model"), step.model)

    def branches(self, step: StepSpec, scope: set[str]) -> None:
        for label, condition, steps in step.branches():
            if label == "then":
                where: Path_ = (*step.path, "if")
            elif label == "else":
                where = (*step.path, "else")
            else:
                where = (*step.path, "elif", int(label[4:]) - 1)
            if condition is not None:
                self.condition((*where, "condition"), condition, scope, step)
            if not steps:
                self.add(
                    where if label == "else" else (*where, "condition"),
                    f"the `{label}` branch of '{step.id}' has no steps",
                    "add steps to the branch, or remove it",
                    "empty-branch",
                    key=label == "else",
                    warning=True,
                )
            self.block(steps, scope)

    # -- expressions --------------------------------------------------------------------------
    def condition(self, path: Path_, text: str, scope: Collection[str], step: StepSpec) -> None:
        """Conditions take `"{{ x > 1 }}"` or the bare `"x > 1"`."""
        self.expression(path, text, scope, step, bare=True)
        inner = bare_expression(text)
        if expressions.is_template(inner) and "{%" not in inner:  # text around `{{ }}`: renders as a string
            whole = _BRACES.sub(r"\1", text).strip()
            self.add(
                path,
                "condition mixes text and {{ }}: it renders as text, which is true unless it is empty or a false word",
                f'put the whole condition inside the braces: "{{{{ {whole} }}}}"',
                "text-condition",
                warning=True,
            )
        constant = inner
        if constant.lower() in ("true", "false"):
            self.add(
                path,
                f"condition is always {constant.lower()}",
                "remove the condition" if constant.lower() == "true" else "remove the step, or give a real condition",
                "constant-condition",
                warning=True,
            )

    def expression(
        self, path: Path_, value: Any, scope: Collection[str], step: StepSpec | None, *, bare: bool = False
    ) -> None:
        """Syntax and names of every template in `value` (of every string when `bare`)."""
        for where, text in strings_in(value, path):
            if not (expressions.is_template(text) or (bare and text.strip())):
                continue
            error = expressions.syntax_error(text, expression=bare)
            if error is not None:
                self.add(where, error.message, error.hint, "expression-syntax")
                continue
            names = expressions.referenced_names(text, expression=bare)
            for name in sorted(names.difference(scope)):
                self.add(where, f"'{name}' is not defined here", self.undefined_hint(name, scope, step), "undefined")

    def undefined_hint(self, name: str, scope: Collection[str], step: StepSpec | None) -> str:
        target = self.first.get(name)
        if target is not None:
            line = self.smap.at((*target.path, "id"))[0]
            if target is step:
                return f"a step cannot read its own output here; only its `state:` runs after it (line {line})"
            if step is not None and self._encloses(target, step):
                return (
                    f"'{name}' (line {line}) encloses this step; its output exists only once it has finished "
                    "(carry values between iterations with `state:`)"
                )
            if step is not None and self.order[id(target)] > self.order[id(step)]:
                return f"'{name}' is defined later (line {line}); a step sees only the steps before it"
            return self._nested_hint(target, scope, line)
        owner = self.loop_vars.get(name)
        if owner is not None:
            line = self.smap.at((*owner.path, "for"), key=True)[0]
            return f"'{name}' is the loop variable of '{owner.id}' (line {line}) and exists only inside that loop"
        if name == "loop":
            return "`loop` exists only inside the body of a `for` or `while`"
        if name in _REMOVED_GLOBALS:
            return f"'{name}' is a Jinja global that pipeline expressions do not provide"
        visible = sorted(n for n in scope if n not in self.helpers)
        close = close_name(name, visible) or close_name(name, self.helpers)
        if close is not None:
            return f"did you mean '{close}'?"
        shown = ", ".join(visible[:12]) + (", ..." if len(visible) > 12 else "")
        return f"names in scope here: {shown}" if visible else "nothing is in scope here but the helpers"

    def _encloses(self, outer: StepSpec, inner: StepSpec) -> bool:
        probe = self.parent.get(id(inner))
        while probe is not None:
            if probe is outer:
                return True
            probe = self.parent.get(id(probe))
        return False

    def _nested_hint(self, target: StepSpec, scope: Collection[str], line: int) -> str:
        chain = [target]
        probe = self.parent.get(id(target))
        while probe is not None:
            chain.append(probe)
            if probe.id in scope:
                break
            probe = self.parent.get(id(probe))
        top = chain[-1]
        if top is target:
            return f"'{target.id}' (line {line}) is a step, and no step output exists here yet"
        if top.id not in scope:
            return f"'{target.id}' (line {line}) is nested in '{top.id}', which is not in scope here"
        expr = top.id
        for container, child in zip(reversed(chain), list(reversed(chain))[1:], strict=False):
            expr += ("[0]" if container.kind == "for" else "") + f".{child.id}"
        return (
            f"'{target.id}' (line {line}) is nested in '{top.id}'; outside that block read it through "
            f"its output: {{{{ {expr} }}}}"
        )

    def for_items(self, step: StepSpec) -> None:
        items = step.for_.items if step.for_ is not None else None
        if isinstance(items, list | dict) or has_template(items):
            return  # a mapping loops over its {key, value} pairs
        hint = "give a list (or a mapping), or an expression that yields one"
        if isinstance(items, str) and items.strip():
            hint = f'did you mean "{{{{ {items.strip()} }}}}"?'
        shown = "null" if items is None else repr(items)
        self.add(
            (*step.path, "for", "items"),
            f"for.items is {shown}, not a list",
            hint,
            "for-items",
        )

    def parallel_state(self, step: StepSpec) -> None:
        stack = list(step.children())
        while stack:
            inner = stack.pop()
            if inner.state:
                self.add(
                    (*inner.path, "state"),
                    f"'{inner.id}' assigns state inside the parallel loop '{step.id}'",
                    "items run at the same time, so the order of the assignments is not defined; "
                    "drop `parallel: true` or collect results from the loop's output",
                    "parallel-state",
                    key=True,
                    warning=True,
                )
            stack.extend(inner.children())

    # -- skills, arguments, models, cycles -----------------------------------------------------
    def skill(self, step: StepSpec, scope: Collection[str]) -> None:
        name = step.skill or ""
        schema: dict[str, Any] | None = None
        if name in self.pipelines:
            schema = self.pipelines[name].input_schema()
        elif self.catalog is not None:
            found = self.catalog.find(name)
            if found is None:
                self.unknown_skill(step, name)
                return
            self.skill_model(step, found)
            if found.kind == "instructions":
                return  # carried out by the model: any parameters are its task
            schema = found.input_schema
        if schema is not None and isinstance(schema.get("properties"), dict):
            self.arguments(step, name, schema, scope)

    def skill_model(self, step: StepSpec, skill: Any) -> None:
        """The model a skill's skill.yaml names, when the step does not choose its own."""
        contract = getattr(skill, "contract", None)
        wanted = getattr(contract, "model", None)
        if step.model is not None or self.models is None or not isinstance(wanted, str) or wanted in self.models:
            return
        close = close_name(wanted, self.models)
        where = f"{skill.root}/skill.yaml" if getattr(skill, "root", None) else "its skill.yaml"
        hint = (f"did you mean '{close}'? " if close else "") + f"fix `model:` in {where}, or give this step a `model:`"
        message = f"skill '{skill.name}' asks for the unknown model '{wanted}'"
        self.add((*step.path, "skill"), message, hint, "unknown-model")

    def agent(self, step: StepSpec, scope: Collection[str]) -> None:
        """An `agent:` step: its task parameters, its model, and the skills it may call."""
        from skills.core.contract import AGENT_INPUTS

        assert step.agent is not None
        self.arguments(step, "agent", AGENT_INPUTS, scope, anchor="agent")
        self.model((*step.path, "agent", "model"), step.agent.model)
        self.role(step)
        if self.catalog is None:
            return
        for index, name in enumerate(step.agent.skills):
            where = (*step.path, "agent", "skills", index)
            if any(c in name for c in "*?["):
                continue  # a pattern: whatever matches when the agent starts
            found = self.catalog.find(name)
            if found is None and name not in self.pipelines:
                close = close_name(name, [*self.catalog.names(), *self.pipelines])
                hint = f"did you mean '{close}'?" if close else "`orchestrator skills list` shows the skills that exist"
                self.add(where, f"unknown skill '{name}' in the agent's allow-list", hint, "unknown-skill")
            elif found is not None and found.kind == "agent":
                self.add(
                    where,
                    f"'{name}' is an agent, and agents cannot call agents",
                    "give this agent the skills that agent uses instead",
                    "nested-agent",
                )

    def role(self, step: StepSpec) -> None:
        """An agent step's `role:`: known, and the settings given only narrow it."""
        from skills import SkillsError
        from skills.core.roles import apply_role

        assert step.agent is not None
        if step.agent.role is None or self.roles is None:
            return
        try:
            apply_role(step.agent, self.roles)
        except SkillsError as exc:
            key = "skills" if exc.where.endswith("skills") else "role"
            self.add((*step.path, "agent", key), exc.message, exc.hint, f"agent-{key}")

    def unknown_skill(self, step: StepSpec, name: str) -> None:
        assert self.catalog is not None
        if any(s.name == name for s in self.catalog.disabled()):
            hint = f"'{name}' is disabled; enable it in skills/registry.yaml (enabled: true)"
        else:
            close = close_name(name, [*self.catalog.names(), *self.pipelines])
            hint = f"did you mean '{close}'?" if close else "`orchestrator skills list` shows the skills that exist"
        self.add((*step.path, "skill"), f"unknown skill '{name}'", hint, "unknown-skill")

    def arguments(
        self, step: StepSpec, skill: str, schema: dict[str, Any], scope: Collection[str], anchor: str = "skill"
    ) -> None:
        props: dict[str, Any] = schema["properties"]
        params = step.parameters
        where = (*step.path, "parameters")
        has_params = where in self.smap.keys
        required_names: list[Any] = schema.get("required") or []
        for required in required_names:
            if required in params:
                continue
            prop: dict[str, Any] = props.get(required) or {}
            about = f" ({prop['type']})" if isinstance(prop.get("type"), str) else ""
            about += f": {prop['description']}" if isinstance(prop.get("description"), str) else ""
            self.add(
                where if has_params else (*step.path, anchor),
                f"'{skill}' needs the argument '{required}'",
                f"add `{required}` to parameters{about}",
                "missing-argument",
                key=has_params,
            )
        closed = schema.get("additionalProperties") is False
        for name, value in params.items():
            declared = props.get(name)
            if declared is None:
                if closed:
                    close = close_name(str(name), props)
                    hint = f"did you mean '{close}'?" if close else f"'{skill}' takes: {', '.join(props) or 'nothing'}"
                    self.add((*where, name), f"'{skill}' has no argument '{name}'", hint, "unknown-argument", key=True)
                continue
            if isinstance(declared, dict):
                self.argument_value(step, skill, str(name), value, cast("dict[str, Any]", declared), scope)

    def argument_value(
        self, step: StepSpec, skill: str, name: str, value: Any, prop: dict[str, Any], scope: Collection[str]
    ) -> None:
        if isinstance(value, str) and expressions.is_template(value):
            return  # its type is only known when it runs
        path = (*step.path, "parameters", name)
        wanted = declared_types(prop)
        kinds = json_types(value)
        if wanted and kinds is not None and not kinds.intersection(wanted):
            self.add(
                path,
                f"'{name}' of '{skill}' must be {kinds_named(wanted)}, not the {type_name(value)} {short_text(value)}",
                type_hint(value, wanted, scope),
                "argument-type",
            )
            return
        enum = prop.get("enum")
        if isinstance(enum, list) and not has_template(value) and value not in enum:
            enum = cast("list[Any]", enum)
            close = close_name(value, [e for e in enum if isinstance(e, str)]) if isinstance(value, str) else None
            choices = ", ".join(repr(e) for e in enum)
            hint = f"did you mean {close!r}? " if close else ""
            self.add(
                path,
                f"'{name}' of '{skill}' cannot be {short_text(value)}",
                f"{hint}one of: {choices}",
                "argument-value",
            )

    def model(self, path: Path_, model: str | None) -> None:
        if model is None or self.models is None or model in self.models or expressions.is_template(model):
            return
        close = close_name(model, self.models)
        known = ", ".join(sorted(self.models)[:10]) or "none are configured"
        hint = f"did you mean '{close}'?" if close else f"known models: {known}"
        self.add(path, f"unknown model '{model}'", hint, "unknown-model")

    def cycles(self) -> None:
        calls = {
            pid: [s.skill for s in spec.walk() if s.skill is not None and s.skill in self.pipelines]
            for pid, spec in self.pipelines.items()
        }
        me = self.spec.id
        reported: set[str] = set()
        for step in self.spec.walk():
            callee = step.skill
            if callee is None or callee not in self.pipelines or callee in reported:
                continue
            back = [me] if callee == me else path_between(calls, callee, me)
            if back is not None:
                chain = " -> ".join([me, *back])
                hint = "a pipeline cannot call itself, directly or through other pipelines"
            else:
                loop = cycle_from(calls, callee)
                if loop is None:
                    continue
                chain = f"{me} -> {callee} leads into {' -> '.join(loop)}"
                hint = f"pipeline '{loop[0]}' calls itself through {' -> '.join(loop)}; fix that pipeline"
            reported.add(callee)
            self.add((*step.path, "skill"), f"pipeline cycle: {chain}", hint, "cycle")
