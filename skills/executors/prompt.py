"""Skills whose work is one model answer: prompt skills, and instructions skills inside pipelines.

A prompt skill renders its Jinja template (sandboxed, undefined names are errors) with the
arguments and sends it with the SKILL.md body as the system instructions. With `outputs`, the
answer must be a JSON object that fits them: a ```json fence or prose around the object is
tolerated, and an answer that does not fit is sent back with the reason (at most `REASKS`
times) before the call fails with `OutputError`. Without `outputs` the result is the answer's
text, so the tool result is that text.

Usage is never part of a result's shape for prompt skills: every call adds its tokens and cost
to the context's `ModelAccess.usage`, where the pipeline runtime (or an agent) reads them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ..core.errors import OutputError, SkillRunError, SkillTimeoutError
from ..core.jsontext import JSON, load_json
from ..core.models import ModelAccess, model_access
from ..core.schema import check_output

if TYPE_CHECKING:
    from jinja2 import Template

    from ..core.base import Skill, SkillContext
    from ..core.contract import SkillContract

__all__ = ["REASKS", "ask_json", "carry_out", "choose_model", "parse_json", "run_prompt", "schema_note"]

REASKS = 2
"""How many times an answer that does not fit `outputs` is sent back before the call fails."""

INSTRUCTIONS_MAX_TOKENS = 4096
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\r?\n(.*?)\r?\n?```", re.DOTALL)
_templates: dict[Path, tuple[tuple[int, int], Template]] = {}


def choose_model(ctx: SkillContext, own: str | None) -> str | None:
    """The model a call uses: the pipeline step's `model:`, else the skill's own, else the
    pipeline's default, else None (the `orchestrator` role)."""
    extras = ctx.extras
    return extras.get("step_model") or own or extras.get("pipeline_model")


def parse_json(text: str, *, strict: bool = False) -> JSON:
    """The JSON value of a model answer; raise `ValueError` saying why there is none.

    Lenient (the default): the whole answer, a fenced block in it, or the span from its first
    `{` to its last `}`. Strict: only the whole answer, or the whole answer as one fenced block.
    """
    stripped = text.strip()
    candidates = [stripped]
    fence = _FENCE.search(stripped)
    if fence and (not strict or fence.group(0) == stripped):
        candidates.insert(0, fence.group(1))
    if not strict:
        first, last = stripped.find("{"), stripped.rfind("}")
        if 0 <= first < last:
            candidates.append(stripped[first : last + 1])
    problems: list[str] = []
    for candidate in candidates:
        if not candidate.strip():
            continue
        try:
            return load_json(candidate)  # our bounds first: a model's `[[[[...` is a JSON error, not a RecursionError
        except json.JSONDecodeError as exc:
            problems.append(f"{exc.msg} at line {exc.lineno}, column {exc.colno}")
    raise ValueError(problems[0] if problems else "the answer is empty")


async def ask_json(
    access: ModelAccess,
    *,
    skill: str,
    messages: list[dict[str, Any]],
    system: str | None,
    model: str | None,
    max_tokens: int | None,
    schema: dict[str, Any],
    ctx: SkillContext,
    reasks: int = REASKS,
    schema_name: str = "the outputs schema",
    label: str | None = None,
    hint: str = "make the prompt say what to return, loosen `outputs`, or choose a stronger `model:`",
) -> Any:
    """A JSON answer that fits `schema`, re-asking with the reason at most `reasks` times
    (`label`, `schema_name` and `hint` name the asker, the schema and the fix in the final failure)."""
    messages = list(messages)
    problem = ""
    for attempt in range(reasks + 1):
        completion = await access.complete(messages, system=system, model=model, max_tokens=max_tokens)
        try:
            value = parse_json(completion.text)
        except ValueError as exc:
            problem = f"it is not valid JSON ({exc})"
        else:
            try:
                check_output(skill, schema, value)
                return value
            except OutputError as exc:
                problem = exc.message.replace(f"'{skill}' returned a result that does", "it does")
        if completion.stop_reason == "max_tokens":
            problem += "; the answer was cut off at its token limit, so keep it shorter"
        if attempt < reasks:
            await ctx.log("warning", f"{skill}: the model's answer cannot be used ({problem}); asking again")
            messages += [
                {"role": "assistant", "content": completion.text or "(empty answer)"},
                {
                    "role": "user",
                    "content": f"That answer cannot be used: {problem}. Answer again with only the JSON "
                    "object, no other text.",
                },
            ]
    raise OutputError(
        f"{label or repr(skill)}: the model's answer did not fit {schema_name} after {reasks + 1} attempts: {problem}",
        hint=hint,
    )


def schema_note(schema: dict[str, Any]) -> str:
    return (
        "\n\nAnswer with only a JSON object (no other text) that fits this JSON Schema:\n```json\n"
        + json.dumps(schema, indent=2, ensure_ascii=False)
        + "\n```"
    )


def _json_filter(value: Any, indent: int | str | None = 2) -> str:
    """`{{ value | json }}` in a prompt template: the value as JSON text (anything else as its str)."""
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str)


def _template(path: Path) -> Template:
    """The compiled template at `path` (recompiled when the file changes)."""
    stat = path.stat()
    stamp = (stat.st_mtime_ns, stat.st_size)
    hit = _templates.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    from jinja2 import StrictUndefined, TemplateSyntaxError
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["json"] = _json_filter
    try:
        template = env.from_string(path.read_text(encoding="utf-8"))
    except TemplateSyntaxError as exc:
        raise SkillRunError(
            f"{path.name} is not a valid template: {exc.message} (line {exc.lineno})",
            hint="fix the Jinja syntax of the prompt template",
        ) from None
    _templates[path] = (stamp, template)
    return template


def render_prompt(path: Path, schema: dict[str, JSON], arguments: dict[str, Any], skill: str) -> str:
    """The template rendered with the arguments; absent declared arguments are their default or None."""
    from jinja2 import TemplateError, UndefinedError

    values: dict[str, Any] = {}
    properties = schema.get("properties")
    for name, prop in properties.items() if isinstance(properties, dict) else ():
        values[name] = prop.get("default") if isinstance(prop, dict) else None
    values.update(arguments)
    values.setdefault("arguments", dict(arguments))
    try:
        return _template(path).render(values)
    except UndefinedError as exc:
        raise SkillRunError(
            f"'{skill}': {path.name} uses a name that is not an argument: {exc.message}",
            hint="declare it under `inputs.properties` in skill.yaml, or fix the template",
        ) from None
    except TemplateError as exc:  # the sandbox refusing an attribute, a filter error, ...
        raise SkillRunError(f"'{skill}': {path.name} could not be rendered: {exc}") from None


async def run_prompt(
    skill: Skill, contract: SkillContract, template: Path, arguments: dict[str, Any], ctx: SkillContext
) -> Any:
    """Run a prompt skill: the rendered template answered by the model (checked against `outputs`)."""
    access = model_access(ctx.extras)
    text = render_prompt(template, contract.inputs, arguments, skill.name)
    system = skill.body().strip() or None
    model = choose_model(ctx, contract.model)
    messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
    try:
        with anyio.fail_after(contract.timeout):
            if contract.outputs is None:
                completion = await access.complete(
                    messages, system=system, model=model, max_tokens=contract.max_output_tokens
                )
                return completion.text
            return await ask_json(
                access,
                skill=skill.name,
                messages=messages,
                system=(system or "") + schema_note(contract.outputs),
                model=model,
                max_tokens=contract.max_output_tokens,
                schema=contract.outputs,
                ctx=ctx,
            )
    except TimeoutError:
        raise SkillTimeoutError(
            f"'{skill.name}': the model did not answer within {contract.timeout:g}s",
            hint="raise `timeout:` in skill.yaml",
        ) from None


async def carry_out(skill: Skill, arguments: dict[str, Any], ctx: SkillContext) -> Any:
    """An instructions skill carried out by the model (inside a pipeline).

    The SKILL.md body (and the list of its bundled files) is the system prompt; the step's
    parameters are the task: a lone `task` string as it is, anything else as JSON. An answer
    that is a JSON object is the result; any other answer is `{"text": ..., "usage": ...}`.
    """
    access = model_access(ctx.extras)
    system = skill.body().strip()
    files = [f for f in skill.files() if f != "SKILL.md"]
    if files:
        system += "\n\nFiles bundled with these instructions: " + ", ".join(files)
    task = arguments.get("task")
    if not (set(arguments) == {"task"} and isinstance(task, str)):
        task = (
            "Carry out this task; its parameters:\n```json\n" + json.dumps(arguments, indent=2, default=str) + "\n```"
        )
    task += (
        "\n\nFollow the instructions above. Answer with the result only; when the result is "
        "structured data, answer with a single JSON object."
    )
    completion = await access.complete(
        [{"role": "user", "content": task}],
        system=system,
        model=choose_model(ctx, None),
        max_tokens=INSTRUCTIONS_MAX_TOKENS,
    )
    try:
        value = parse_json(completion.text, strict=True)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    return {"text": completion.text, "usage": completion.usage.as_dict()}
