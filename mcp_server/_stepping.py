"""The meta tool `run_pipeline`: run or resume a pipeline, optionally step by step over elicitation.

A pipeline is a tool of its own; `run_pipeline {pipeline, inputs}` runs one by id too, and it is
the way to the two things a pipeline's own tool cannot offer: `step: true` (seed 004's step-
through: after each top-level step the client's user is asked, through MCP elicitation, to
continue, stop or re-run the step) and `resume: RUN_ID` (continue a run that failed, was
cancelled or was stopped, from the step after the last finished one).

Elicitation is a request from the server to the client during the call, which only
handshake-era sessions (2025-11-25 and older) can carry, and only when the client declared the
`elicitation` capability; asked for step mode without it, the call fails with
`invalid_arguments` saying so. Declining or dismissing the question stops the run (it can be
resumed).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from mcp_types import CallToolResult, ElicitRequestFormParams, ToolAnnotations
from mcp_types import Tool as MCPTool

from pipelines.storage.runs import LOCAL, STARTED_BY_KEY
from skills import ArgumentsError, SkillsError
from skills.core.errors import FieldError, clip

from ._asking import run_outcome_schema
from ._meta import MetaTool, structured
from ._results import error_result

if TYPE_CHECKING:
    from pipelines.engine.stepping import Decision, StepView
    from pipelines.service import PipelineService
    from skills import SkillContext

__all__ = ["RUN_TOOLS", "ElicitGate"]

SHOWN_CHARS = 2000
"""Characters of a step's output shown in the question (a form is no place for megabytes)."""
_ASK = {
    "type": "object",
    "properties": {
        "action": {
            "type": "string",
            "title": "Next",
            "description": "continue with the next step, stop here (resume later), or re-run this step",
            "enum": ["continue", "stop", "rerun"],
            "default": "continue",
        }
    },
    "required": ["action"],
}


class ElicitGate:
    """Step-through over MCP: each step's question is an elicitation to the calling client."""

    def __init__(self, elicit: Any) -> None:
        self.elicit = elicit

    async def __call__(self, view: StepView) -> Decision:
        shown = json.dumps(view.output, indent=1, ensure_ascii=False, default=str)
        then = "Continue to finish the run, or re-run this step?" if view.last else "Continue, stop, or re-run it?"
        head = f"Step {view.place}/{view.total} '{view.step_id}' finished. Its output:"
        message = f"{head}\n{clip(shown, SHOWN_CHARS)}\n\n{then}"
        answer = await self.elicit(ElicitRequestFormParams(message=message, requested_schema=_ASK))
        action = answer.content.get("action") if answer.action == "accept" and answer.content else None
        if action in ("continue", "stop", "rerun"):
            return action
        return "stop"  # declined, dismissed or unreadable: stop where it is (it can be resumed)


async def _run(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pipelines.errors import PipelineError, RunStopped
    from pipelines.source import new_run_id
    from skills.core.schema import check_arguments

    schema = RUN.tool.output_schema
    if bool(args.get("pipeline")) == bool(args.get("resume")):
        return error_result(
            ArgumentsError("run_pipeline", [FieldError("pipeline", "give either `pipeline` or `resume`, not both")]),
            hint="`pipeline: ID` starts a run; `resume: RUN_ID` continues one",
            output_schema=schema,
        )
    gate = None
    if args.get("step"):
        elicit = ctx.extras.get("elicitation")
        if elicit is None:
            return error_result(
                "step-through needs to ask you after each step, and this call cannot ask: the client must support "
                "MCP elicitation over a handshake-era session (protocol 2025-11-25 or older) and call it directly, "
                "not as a task",
                "run it without `step`, or step through it on the command line: `orchestrator run ID --step`",
                error_type="invalid_arguments",
                where="step",
                output_schema=schema,
            )
        gate = ElicitGate(elicit)
    run_id = args.get("resume") or new_run_id()
    try:
        if args.get("resume"):  # only the caller's own runs: another's is "no run", as an unknown id
            viewer = str(ctx.extras.get(STARTED_BY_KEY) or LOCAL)
            result = await service.resume(run_id, ctx, gate=gate, viewer=viewer)
        else:
            try:
                skill = service.pipeline(args.get("pipeline") or "")
            except PipelineError as exc:
                raise ArgumentsError("run_pipeline", [FieldError("pipeline", exc.message)], hint=exc.hint) from None
            inputs = skill.defaults(args.get("inputs") or {})
            check_arguments(skill.name, skill.input_schema, inputs)
            result = await service.run(skill, inputs, ctx, run_id=run_id, gate=gate)
    except RunStopped as exc:
        hint = f"call run_pipeline with resume: {run_id} (and step: true to keep stepping) to continue"
        return structured({"status": "stopped", "run_id": run_id, "stopped_after": exc.step_id, "hint": hint})
    except PipelineError as exc:  # a resume that cannot be: no such run, already succeeded, still running
        return error_result(exc.message, exc.hint, error_type="invalid_arguments", where="resume", output_schema=schema)
    except SkillsError as exc:
        return error_result(exc, output_schema=schema)
    if result.get("status") == "waiting" and "question" in result:  # an `ask:` step waits for answer_run
        return structured(result)
    return structured({"status": "succeeded", "run_id": run_id, "result": result})


RUN = MetaTool(
    MCPTool(
        name="run_pipeline",
        title="Run a pipeline (step by step)",
        description="Run a published pipeline by id, or resume a run that failed, was cancelled or was stopped "
        "(`resume: RUN_ID`: finished steps are not run again). With `step: true` the run pauses after each "
        "top-level step and asks you (MCP elicitation; handshake-era clients that support it) to continue, stop "
        "(resume it later) or re-run the step. Returns {status: succeeded, run_id, result} or {status: stopped, "
        "run_id, stopped_after}.",
        input_schema={
            "type": "object",
            "properties": {
                "pipeline": {"type": "string", "maxLength": 64, "description": "The pipeline's id."},
                "inputs": {"type": "object", "description": "Its inputs (defaults fill the rest)."},
                "resume": {
                    "type": "string",
                    "pattern": "^[0-9a-f]{12}$",
                    "description": "Continue this run instead of starting one.",
                },
                "step": {"type": "boolean", "default": False, "description": "Pause after each step and ask."},
            },
            "additionalProperties": False,
        },
        output_schema=run_outcome_schema(
            ["succeeded", "stopped", "waiting"],
            stopped_after={"type": "string", "description": "The step after which you stopped it."},
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
    ),
    _run,
    long_running=True,
)

RUN_TOOLS: dict[str, MetaTool] = {"run_pipeline": RUN}
