"""The tool-call plumbing of `OrchestratorServer` (private to mcp_server): a skill as an MCP tool,
the client's logging and requests as a skill sees them, finishing a skill's work into a result,
and the tasks extension's handshake. Kept apart from the server class so app.py reads as the
server's handlers."""

from __future__ import annotations

import logging
import os
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    CallToolResult,
    LoggingLevel,
    ServerTasksCapability,
    ServerTasksRequestsCapability,
    TasksCallCapability,
    TasksCancelCapability,
    TasksListCapability,
    TasksToolsCapability,
    ToolAnnotations,
    ToolExecution,
)
from mcp_types import (
    Resource as MCPResource,
)
from mcp_types import (
    Tool as MCPTool,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from adapters.context import request_of
from pipelines.storage.runs import STARTED_BY_KEY
from skills import (
    FolderSkill,
    Skill,
    SkillCancelledError,
    SkillContext,
    SkillKind,
    SkillsError,
)
from skills.core.budget import AGENT_BUDGET_KEY, RunBudget
from skills.core.roles import ROLES_KEY
from skills.executors.runners import CLIENT_KEY

from ._app_ui import RUN_APP_MIME, RUN_APP_URI, ui_meta
from ._asking import attach_asker
from ._handles import HANDLES_KEY, handle_schema
from ._meta import MetaSkill
from ._results import cancel_pending, error_result, to_result, where_in
from .tasks import TASKS_EXTENSION, CallTarget, Identity, identity_of, share_of

if TYPE_CHECKING:
    from ._host import Host


log = logging.getLogger("mcp_server")


def unknown_prompt_hint(name: str, prompts: list[str]) -> str:
    """Where to look for a prompt: the close prompt names, else prompts/list (tools are no answer)."""
    import difflib

    close = difflib.get_close_matches(name, prompts, n=3, cutoff=0.6) if len(name) <= 64 else []
    if close:
        return f"did you mean {', '.join(repr(c) for c in close)}? prompts/list shows the prompts"
    return "prompts/list shows the prompts"


RUN_APP_RESOURCE = MCPResource(
    uri=RUN_APP_URI,
    name="run",
    title="A run, followed live (MCP App)",
    description="Shows the run a pipeline tool started, its steps and their status, as it goes.",
    mime_type=RUN_APP_MIME,
)


def internal_result(name: str, schema: dict[str, Any] | None) -> CallToolResult:
    """The envelope of an unexpected exception (a bug): logged with its traceback, never shown."""
    log.exception("tool %s raised an unexpected exception", name)
    return error_result(
        f"'{name}' failed with an internal error",
        "the server log has the details; call again, and report it if it persists",
        error_type="internal",
        output_schema=schema,
    )


def tool_of(skill: Skill, handles: bool = False) -> MCPTool:
    """The tool of a skill; `handles`: a long one's output schema admits its run handle too."""
    description = skill.description
    if skill.kind == "instructions":
        description = f"Instructions: {description}"
    annotations = skill.annotations
    return MCPTool(
        name=skill.name,
        title=skill.title,
        description=description,
        input_schema=skill.input_schema,
        output_schema=handle_schema(skill.output_schema) if handles and may_task(skill) else skill.output_schema,
        annotations=ToolAnnotations.model_validate(annotations) if annotations else None,
        execution=ToolExecution(task_support="optional") if may_task(skill) else None,
        _meta=ui_meta(skill.kind == "pipeline" or (isinstance(skill, MetaSkill) and skill.long_running)),
    )


def may_task(skill: Skill) -> bool:
    """Whether a call may run as a task: pipelines, agents and the long meta tools (create_skill,
    plan_and_run, orchestrate, spawn_agent, run_pipeline: `MetaTool.long_running`)."""
    return skill.kind in ("pipeline", "agent") or (isinstance(skill, MetaSkill) and skill.long_running)


LOG_ORDER: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""MCP log levels, least severe first (RFC 5424)."""


def caller_of(session: Any) -> Any:
    """The object that stands for one client connection (a session is made per request)."""
    return getattr(session, "_connection", session)


def client_logger(context: Context[Any, Any], skill: str, levels: weakref.WeakKeyDictionary[Any, int]):
    request = request_of(context) or context.request_context
    session, request_id = request.session, request.request_id
    caller = caller_of(session)

    async def send(level: LoggingLevel, message: str) -> None:
        message = without_prefix(message, skill)  # "agent: agent: starting" says its name once
        getattr(log, level)("%s: %s", skill, message)
        if LOG_ORDER.index(level) < levels.get(caller, 0):
            return  # below the level this client set with logging/setLevel
        # Logging is deprecated in 2026-07-28 but it is how handshake-era clients (Claude Desktop,
        # the Inspector) show a tool's activity; the SDK drops it where the client did not opt in.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            send_log = session.send_log_message  # pyright: ignore[reportDeprecated]  # on purpose: see above
            pending = send_log(level, message, logger=skill, related_request_id=request_id)
        await pending

    return send


def without_prefix(message: str, logger: str) -> str:
    """`message` without a leading `<logger>: `: the logger is shown beside it. (Only with the
    colon: "count 3 files" from a skill named `count` is a sentence, not a prefix.)"""
    if message.startswith(f"{logger}:"):
        rest = message[len(logger) + 1 :].lstrip()
        return rest or message
    return message


def client_requests(context: Context[Any, Any]) -> dict[str, Any]:
    """How a skill (an imported tool's upstream, later a model) may ask our client mid-call.

    Handshake-era sessions can carry server-to-client requests (sampling, elicitation) tied to
    the call; 2026-07-28 ones cannot during a call, so nothing is offered and the upstream gets a
    clean refusal. `caller` groups the calls of one client session.
    """
    request = request_of(context) or context.request_context
    session = request.session
    extras: dict[str, Any] = {"caller": getattr(session, "_connection", session)}
    if session.protocol_version in MODERN_PROTOCOL_VERSIONS or not session.can_send_request:
        return extras
    caps = session.client_capabilities
    related = ServerMessageMetadata(related_request_id=request.request_id)

    async def sampling(
        params: types.CreateMessageRequestParams,
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools:
        message = types.CreateMessageRequest(params=params)
        # A request with tools may be answered with tool_use content, which only the WithTools shape allows.
        shape = types.CreateMessageResultWithTools if params.tools or params.tool_choice else types.CreateMessageResult
        return await session.send_request(message, shape, metadata=related)

    async def elicitation(params: types.ElicitRequestParams) -> types.ElicitResult:
        message = types.ElicitRequest(params=params)
        return await session.send_request(message, types.ElicitResult, metadata=related)

    if caps is not None and caps.sampling is not None:
        extras["sampling"] = sampling
    if caps is not None and caps.elicitation is not None:
        extras["elicitation"] = elicitation
    return extras


async def finish_skill(skill: Skill, work: Any, ctx: SkillContext) -> CallToolResult:
    """A skill's work made its result: the value, or the envelope of what went wrong."""
    name, schema = skill.name, skill.output_schema
    try:
        value = await work()
    except SkillsError as exc:
        log.info("tool %s failed: %s", name, exc)
        return error_result(exc, where=where_in(skill.root, exc), output_schema=schema)
    except anyio.get_cancelled_exc_class():
        if cancel_pending():
            raise  # the client (or shutdown) cancelled the call: there is no one to answer
        log.info("tool %s: its work was cancelled from inside", name)
        return error_result(
            SkillCancelledError(f"'{name}' was cancelled before it finished", hint="call it again"),
            output_schema=schema,
        )
    except Exception:  # top-level handler of one call: a bug must cost this call only, never the server
        return internal_result(name, schema)
    notes: list[str] = []
    result = to_result(skill, value, notes)
    for note in notes:
        await ctx.warning(note)
    return result


def call_target(skill: Skill, made: dict[str, CallTarget]) -> CallTarget:
    """The tool of `skill` as the call path needs it, made once per skill object (a reloaded
    skill is a new object) and kept in `made`."""
    cached = made.get(skill.name)
    if cached is not None and cached.skill is skill:
        return cached
    if len(made) > 4096:
        made.clear()
    target = made[skill.name] = CallTarget(
        name=skill.name,
        skill=skill,
        output_schema=skill.output_schema,
        may_task=may_task(skill),
        run=skill.run,
        finish=lambda work, ctx: finish_skill(skill, work, ctx),
        is_pipeline=skill.kind == "pipeline",
    )
    return target


def declares_tasks(request: Any) -> bool:
    """Whether a 2026-07-28 request declares the tasks extension (then it may get a task)."""
    if request.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    caps = request.session.client_capabilities
    return bool(caps is not None and caps.extensions and TASKS_EXTENSION in caps.extensions)


def with_tasks(options: InitializationOptions, *, listed: bool = True) -> InitializationOptions:
    """Handshake-era capabilities say that tools may run as tasks (2025-11-25 core tasks);
    `listed`: `tasks/list` is offered (not over stateless HTTP, where it would always be empty)."""
    options.capabilities.tasks = ServerTasksCapability(
        list=TasksListCapability() if listed else None,
        cancel=TasksCancelCapability(),
        requests=ServerTasksRequestsCapability(tools=TasksToolsCapability(call=TasksCallCapability())),
    )
    return options


def wire_of(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


STARTS_AGENTS: frozenset[SkillKind] = frozenset({"agent", "pipeline", "meta"})
"""Calls that may start agents (agent skills, pipelines with agent steps, meta tools): they get the
home's agent roles and a run budget."""


def skill_context_of(
    server: Host,
    skill: Skill,
    context: Context[Any, Any] | None,
    log_levels: weakref.WeakKeyDictionary[Any, int],
    *,
    parked: bool = False,
    identity: Identity | None = None,
) -> SkillContext:
    """The `ctx` a skill gets: progress and logs go to the calling client, model calls to
    the Anthropic API or the client's sampling (`ctx.extras["model"]`).

    A skill whose code runs in a worker process (`FolderSkill.runs_apart`: a synchronous python
    skill) gets the plain data only: its worker receives nothing else (`skills.executors._python`),
    so the model access, sampling, asker and Catalog are not built for it. `identity`: the
    caller's, when the call path has it already (`identity_of` once a call)."""
    if skill.kind == "remote":
        return remote_context_of(skill, context, log_levels)
    run_id = os.urandom(6).hex()  # 12 random hex digits, as uuid4().hex[:12] gave, for less
    runs = server.runs_dir
    ctx = SkillContext(skill=skill.name, run_id=run_id, artifact_dir=runs / run_id if runs else None)
    if identity is None:
        identity = identity_of(context)
    ctx.extras[STARTED_BY_KEY] = identity.owner  # the pipeline runs it starts are the caller's
    if context is not None:  # `request_context` raises outside a request
        ctx.extras[CLIENT_KEY] = share_of(context, identity)  # the worker pool's fair shares
        ctx.progress_fn = context.report_progress
        ctx.log_fn = client_logger(context, skill.name, log_levels)
    if not parked and runs_apart(skill, ctx):  # nothing to ask through, so a 2026-07-28 call is not parked either
        return ctx
    if context is not None and not parked:  # a parked call outlives its request: the client is asked through the inbox
        ctx.extras.update(client_requests(context))
    server.models.attach(ctx, context, parked=parked)
    attach_asker(ctx, context)  # how its pipelines' `ask:` steps reach the person, if they can
    ctx.extras["catalog"] = server.catalog  # agents offer allow-listed Catalog skills as tools
    if skill.kind == "meta":  # the run meta tools wait for and cancel the runs handed over here
        ctx.extras[HANDLES_KEY] = server.handles
    if skill.kind in STARTS_AGENTS:  # two stats a call: not for the plain skills
        ctx.extras[ROLES_KEY] = server.roles.book()  # agents and spawn_agent name roles of the home
        if server.pipelines is not None:  # the agents of one call share one budget (the server's `runs:` limits)
            ctx.extras[AGENT_BUDGET_KEY] = RunBudget.of(server.pipelines.limits.current())
    return ctx


def remote_context_of(
    skill: Skill, context: Context[Any, Any] | None, log_levels: weakref.WeakKeyDictionary[Any, int]
) -> SkillContext:
    """The `ctx` of an imported tool's call: what its upstream can reach through `adapters`
    (progress, logs, our client's sampling and elicitation), nothing else.

    An upstream asks no model of ours, starts no runs and uses no worker pool, so none of that
    is made (it was a fifth of the server's own work per imported call); and `call_tool` never
    parks it for input rounds or a task it cannot have: it runs in the request's own task.
    """
    ctx = SkillContext(skill=skill.name, run_id=os.urandom(6).hex())
    if context is not None:  # `request_context` raises outside a request
        ctx.progress_fn = context.report_progress
        ctx.log_fn = client_logger(context, skill.name, log_levels)
        ctx.extras.update(client_requests(context))
    return ctx


def runs_apart(skill: Skill, ctx: SkillContext) -> bool:
    """Whether the call of `ctx` runs `skill`'s code in a worker process that receives only the
    plain data of `ctx` (`FolderSkill.runs_apart`)."""
    return skill.kind == "python" and isinstance(skill, FolderSkill) and skill.runs_apart(ctx)
