"""The steps that call no skill: `prompt:` asks a model, `ask:` asks the person.

A `prompt:` step goes through the same model access as prompt skills (the Anthropic API, or the
client's sampling in either era), so its usage is counted per step like every model call, and
with `output:` its answer is parsed and checked the way a prompt skill's `outputs` are
(`skills.executors.ask_json`), asked again once with what did not fit.

An `ask:` step puts its question to the run's `asking.Asker`, or, when nobody can be asked,
raises `asking.RunWaiting` (the run waits for `answer_run`); an answer given earlier to the
same asking (a resumed run) is taken as it is.
"""

from __future__ import annotations

from typing import Any

from skills import SkillContext, SkillRunError
from skills.core.models import model_access
from skills.executors.prompt import ask_json, choose_model, schema_note  # as the runtime does for instructions skills

from ..asking import ASKING_KEY, DEFAULT_ASK_SCHEMA, AnswerError, Asking, RunWaiting, check_answer
from ..language.spec import StepSpec

__all__ = ["ask_step", "prompt_step"]

OUTPUT_REASKS = 1
"""A `prompt:` step's answer that does not fit `output:` is sent back once, then the step fails."""


async def prompt_step(step: StepSpec, arguments: dict[str, Any], ctx: SkillContext) -> Any:
    """The model's answer to the step's rendered prompt: its text, or the JSON value that fits `output:`."""
    access = model_access(ctx.extras)
    prompt = _text(arguments.get("prompt"))
    system = _text(arguments.get("system")) if arguments.get("system") is not None else None
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    model = choose_model(ctx, None)
    if step.output is None:
        completion = await access.complete(messages, system=system, model=model, max_tokens=step.max_tokens)
        return completion.text
    return await ask_json(
        access,
        skill=step.id,
        messages=messages,
        system=(system or "").rstrip() + schema_note(step.output),
        model=model,
        max_tokens=step.max_tokens,
        schema=step.output,
        ctx=ctx,
        reasks=OUTPUT_REASKS,
        schema_name="the step's `output:` schema",
        label=f"step '{step.id}'",
        hint="make the prompt say what to return, loosen `output:`, or choose a stronger `model:`",
    )


async def ask_step(step: StepSpec, arguments: dict[str, Any], ctx: SkillContext) -> dict[str, Any]:
    """The person's answer to the step's question (an object that fits its `schema:`)."""
    asking = ctx.extras.get(ASKING_KEY)
    if not isinstance(asking, Asking):
        asking = Asking.of(ctx.extras)
    question = _text(arguments.get("ask"))
    schema = step.ask_schema or DEFAULT_ASK_SCHEMA
    key = asking.key(step.id, question, schema)
    if key in asking.answers:
        return asking.answers[key]
    if asking.asker is None:
        raise RunWaiting(step_id=step.id, key=key, question=question, schema=schema)
    reply = await asking.asker(question, schema)
    action = reply.get("action")
    if action != "accept":
        what = "cancelled the question" if action == "cancel" else "declined to answer"
        raise SkillRunError(
            f"step '{step.id}': the person {what}",
            hint="add `on_error: continue` to the step to go on without an answer",
        )
    try:
        answer = check_answer(schema, reply.get("content") or {})
    except AnswerError as exc:
        raise SkillRunError(f"step '{step.id}': {exc.message}", hint=exc.hint) from None
    asking.answers[key] = answer
    return answer


def _text(value: Any) -> str:
    """A rendered template as text (an expression alone may render to a list or a number)."""
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value, ensure_ascii=False, default=str)
