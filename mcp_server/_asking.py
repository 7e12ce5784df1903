"""Pipelines asking the calling person (`ask:` steps), and the meta tool `answer_run`.

`attach_asker` gives a call's context the way its `ask:` steps reach the person
(`pipelines.asking.ASK_KEY`), when there is one:

- a handshake-era client (2025-11-25 and older) that declared elicitation, called directly: an
  `elicitation/create` request on the call's own stream;
- a 2026-07-28 client that declared elicitation, or any client that called as a task: the body
  is parked and the question waits in its `InputInbox`, carried as an input round
  (input-required result), the task's `inputRequests`, or a request on `tasks/result`.

With none of these the run waits (`waiting`) and `answer_run {run_id, answer}` (every client and
era; only the run's owner, `pipelines.storage.runs.may_see`) checks the answer against the question's
schema and resumes the run from its checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp_types import CallToolResult, ElicitRequestFormParams, ToolAnnotations
from mcp_types import Tool as MCPTool

from adapters.context import request_of
from pipelines.asking import ASK_KEY
from pipelines.storage.runs import LOCAL, STARTED_BY_KEY
from skills import SkillsError
from skills.core.schema import ANY_JSON

from ._meta import MetaTool, structured
from ._results import error_result

if TYPE_CHECKING:
    from pipelines.service import PipelineService
    from skills import SkillContext

__all__ = ["ANSWER_TOOLS", "attach_asker"]


def attach_asker(ctx: SkillContext, context: Any) -> None:
    """Put the call's way to the person in `ctx.extras[ASK_KEY]` (nothing when there is none)."""
    elicit = ctx.extras.get("elicitation")  # handshake era, called directly (`_calls.client_requests`)
    if elicit is None:
        if not _elicits(context):  # most calls: nothing more to look at
            return
        from adapters.models import INBOX_KEY, InputInbox

        inbox = ctx.extras.get(INBOX_KEY)
        if not isinstance(inbox, InputInbox):
            return
        elicit = inbox.elicit

    async def ask(question: str, schema: dict[str, Any]) -> dict[str, Any]:
        answer = await elicit(ElicitRequestFormParams(message=question, requested_schema=schema))
        return {"action": answer.action, "content": answer.content or {}}

    ctx.extras[ASK_KEY] = ask


def _elicits(context: Any) -> bool:
    request = request_of(context)  # not `context.request_context`: pydantic's slow attribute path, on every call
    if request is None:
        return False
    return getattr(request.session.client_capabilities, "elicitation", None) is not None


async def _answer(service: PipelineService, args: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    from pipelines.asking import AnswerError
    from pipelines.errors import PipelineError

    schema = ANSWER.tool.output_schema
    run_id = str(args.get("run_id") or "")
    viewer = str(ctx.extras.get(STARTED_BY_KEY) or LOCAL)  # only the caller's own runs
    try:
        result = await service.answer(run_id, args.get("answer"), ctx, viewer=viewer)
    except AnswerError as exc:  # the run keeps waiting
        return error_result(
            f"{exc.message}; run {run_id} still waits for an answer",
            exc.hint,
            error_type="invalid_arguments",
            where="answer",
            output_schema=schema,
        )
    except PipelineError as exc:
        return error_result(exc.message, exc.hint, error_type="invalid_arguments", where="run_id", output_schema=schema)
    except SkillsError as exc:  # the resumed run failed
        return error_result(exc, output_schema=schema)
    if result.get("status") == "waiting":
        return structured(result)
    return structured({"status": "succeeded", "run_id": run_id, "result": result})


def run_outcome_schema(statuses: list[str], **more: dict[str, Any]) -> dict[str, Any]:
    """The output schema of a tool that drives a run on (`answer_run`, `run_pipeline`): how it
    stands, its result once it succeeded, and the question it waits on, if it waits."""
    return {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": statuses},
            "run_id": {"type": "string"},
            "result": {**ANY_JSON, "description": "The pipeline's result (outputs, summary, usage)."},
            "step": {"type": "string", "description": "The step whose question the run waits on now."},
            "question": {"type": "string", "description": "What the waiting run asks (answer_run answers it)."},
            "schema": {"type": "object", "description": "The fields of the answer it waits for."},
            "hint": {"type": "string"},
            **more,
        },
        "required": ["status", "run_id"],
    }


ANSWER = MetaTool(
    MCPTool(
        name="answer_run",
        title="Answer a waiting run",
        description="Answer the question a `waiting` pipeline run asks (an `ask:` step that could reach nobody "
        "when it ran) and resume it from where it stopped; finished steps are not run again. `answer` is an "
        "object with the fields of the question's `schema` (list_runs status=waiting or get_run shows it). "
        "Returns {status: succeeded, run_id, result}, or {status: waiting, ...} with the run's next question.",
        input_schema={
            "type": "object",
            "properties": {
                "run_id": {"type": "string", "pattern": "^[0-9a-f]{12}$", "description": "The waiting run."},
                "answer": {"type": "object", "description": "The answer: the fields of the question's schema."},
            },
            "required": ["run_id", "answer"],
            "additionalProperties": False,
        },
        output_schema=run_outcome_schema(["succeeded", "waiting"]),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
    ),
    _answer,
    long_running=True,
)

ANSWER_TOOLS: dict[str, MetaTool] = {"answer_run": ANSWER}
