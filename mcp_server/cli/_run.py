"""`orchestrator run PIPELINE_OR_FILE --input k=v`: run a pipeline here, with a live progress display.

The run goes through the same `PipelineService` as a tool call from a client (run id,
checkpoints in state.sqlite, artifacts, run history), so a run started here can be resumed
by `orchestrator runs resume` or seen by a server. Ctrl-C cancels it cleanly: the run is
recorded as cancelled, its finished steps stay checkpointed, and the message says how to
resume it.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._allow import add_allow_dir
from ._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    PROG,
    Parents,
    UsageError,
    error,
    parse_pairs,
    print_json,
)
from ._server import server

if TYPE_CHECKING:
    from pipelines.engine.stepping import StepGate
    from pipelines.errors import RunStopped
    from pipelines.language.spec import PipelineSpec
    from pipelines.service import PipelineService
    from pipelines.source import PipelineSkill
    from skills import SkillContext, SkillRunError

    from ..app import OrchestratorServer

Start = Callable[["SkillContext", "StepGate | None"], Awaitable[dict[str, Any]]]
"""Starts (or resumes) the run with the context that carries progress and logs to the display, and
the step-through gate (`--step`) or None."""


def add_parsers(sub: Any, parents: Parents) -> None:
    run = sub.add_parser(
        "run",
        parents=[parents.common, parents.skills, parents.json, parents.servers, parents.scale],
        help="run a pipeline, with a live progress display",
        description="Run a published pipeline (by id) or a pipeline YAML file (verified first). VALUEs are "
        "parsed as JSON when they parse, else taken as strings. Exit status: 0 success (every step succeeded), 1 the "
        "pipeline failed or was PARTIAL (a step failed under on_error: continue, or an agent step stopped at a limit; "
        "resume a failed run with `orchestrator runs resume RUN`), 2 bad usage or invalid input, 130 Ctrl-C.",
    )
    run.add_argument("pipeline", metavar="PIPELINE_OR_FILE", help="a pipeline id or the path of a pipeline file")
    run.add_argument(
        "--input",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        dest="inputs",
        help="one input (repeat for more)",
    )
    run.add_argument(
        "--step",
        action="store_true",
        help="pause after each step: show its output, then continue, stop (resume later with `runs resume`) "
        "or re-run the step",
    )
    run.add_argument(
        "--create-missing",
        action="store_true",
        help="first create the skills the pipeline calls that do not exist (a model writes each, a reviewer and "
        "its own tests check it, confined), then verify again; needs ANTHROPIC_API_KEY",
    )
    add_allow_dir(run)
    run.set_defaults(handler=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from pipelines.source import new_run_id

    from ._pipelines import pipeline_needs, service_of, target_spec

    inputs = parse_pairs(args.inputs, "--input")
    orchestrator = server(args)
    service = service_of(orchestrator)
    run_id = new_run_id()
    needs = pipeline_needs(orchestrator, args.pipeline)
    if args.create_missing:
        return _run_creating(args, orchestrator, inputs, run_id, needs)
    spec = target_spec(orchestrator, args.pipeline) if needs else None
    if spec is None:  # nothing to connect first: mistakes are reported before the display opens
        skill = _resolved(orchestrator, args.pipeline, inputs)

        def start(ctx: SkillContext, gate: StepGate | None) -> Awaitable[dict[str, Any]]:
            orchestrator.access.apply(ctx)  # --allow-dir and the home's isolation settings
            return service.run(skill, skill.defaults(inputs), ctx, run_id=run_id, gate=gate)

        return drive(service, skill.name, skill.spec, run_id, start, as_json=args.json, step=args.step)

    async def start_connected(ctx: SkillContext, gate: StepGate | None) -> dict[str, Any]:
        from ._upstreams import required

        orchestrator.access.apply(ctx)  # --allow-dir and the home's isolation settings
        async with required(orchestrator, needs, args.connect_timeout):  # verified once its tools are there
            skill = _resolved(orchestrator, args.pipeline, inputs)
            return await service.run(skill, skill.defaults(inputs), ctx, run_id=run_id, gate=gate)

    return drive(service, spec.id, spec, run_id, start_connected, as_json=args.json, step=args.step)


def _run_creating(
    args: argparse.Namespace,
    orchestrator: OrchestratorServer,
    inputs: dict[str, Any],
    run_id: str,
    needs: list[Any],
) -> int:
    """`run --create-missing`: create the skills the pipeline lacks (a model, from within the run's
    display), verify it again, then run it."""
    from pipelines.language.loader import load_spec_file

    from ._pipelines import pipeline_file, service_of

    service = service_of(orchestrator)
    path = pipeline_file(orchestrator, args.pipeline)
    spec = load_spec_file(path)[0]

    async def start(ctx: SkillContext, gate: StepGate | None) -> dict[str, Any]:
        from pipelines.planning.missing import check_creating

        from ._upstreams import required

        orchestrator.access.apply(ctx)
        async with required(orchestrator, needs, args.connect_timeout):
            text = path.read_text(encoding="utf-8")
            _, _, created = await check_creating(service, text, str(path), ctx)
            for creation in created:
                if creation.created:
                    await ctx.info(f"created the skill '{creation.name}' ({creation.path})")
            skill = _resolved(orchestrator, args.pipeline, inputs)
            return await service.run(skill, skill.defaults(inputs), ctx, run_id=run_id, gate=gate)

    return drive(service, spec.id, spec, run_id, start, as_json=args.json, step=args.step)


def _resolved(orchestrator: OrchestratorServer, target: str, inputs: dict[str, Any]) -> PipelineSkill:
    """The pipeline to run, its inputs checked and its warnings shown."""
    from ._pipelines import resolve_pipeline, show_warnings

    skill = resolve_pipeline(orchestrator, target)
    _check_inputs(skill.name, target, skill.input_schema, inputs)
    show_warnings(skill)
    return skill


def _check_inputs(pipeline: str, target: str, schema: dict[str, Any], inputs: dict[str, Any]) -> None:
    from skills import ArgumentsError
    from skills.core.schema import check_arguments

    try:
        check_arguments(pipeline, schema, inputs)
    except ArgumentsError as exc:
        detail = "; ".join(f"{e.field or '(inputs)'}: {e.message}" for e in exc.errors)
        names = ", ".join(sorted(schema.get("properties") or {})) or "(none)"
        raise UsageError(
            f"invalid --input for '{pipeline}': {detail}",
            f"its inputs: {names}; `{PROG} pipelines show {target}` describes them",
        ) from None


def drive(
    service: PipelineService,
    title: str,
    spec: PipelineSpec | None,
    run_id: str,
    start: Start,
    *,
    as_json: bool,
    step: bool = False,
) -> int:
    """Run `start` under the progress display, Ctrl-C cancelling it; report the outcome, return the exit status.

    `step`: pause after each step for the terminal's answer (`_step.TerminalGate`)."""
    import anyio

    from pipelines.errors import RunPartial, RunStopped
    from pipelines.language.summary import summary_key
    from skills import SkillContext
    from skills.core.roles import ROLES_KEY

    from ._progress import open_display

    display = open_display(title, spec, as_json=as_json)
    ctx = SkillContext(skill=title, run_id=run_id, progress_fn=display.progress, log_fn=display.log)
    from adapters.models import ModelService

    ModelService(service.home).attach(ctx)  # no client here: the Anthropic API when a key is set
    ctx.extras["catalog"] = service.catalog
    if service.roles is not None:
        ctx.extras[ROLES_KEY] = service.roles()
    gate = None
    if step:
        from ._step import TerminalGate

        gate = TerminalGate(display)
    if sys.stdin.isatty():  # `ask:` steps are asked here; without a terminal the run waits for `runs answer`
        from pipelines.asking import ASK_KEY

        from ._step import TerminalAsker

        ctx.extras[ASK_KEY] = TerminalAsker(display)

    async def start_and_close(ctx: SkillContext, gate: StepGate | None) -> dict[str, Any]:
        try:
            return await start(ctx, gate)
        finally:
            await service.aclose()  # the queue's connections (distributed mode), in this event loop

    with display:
        result, failure, signum = anyio.run(_supervise, start_and_close, ctx, gate)
        if result is not None:
            display.succeeded()
    # The run's objects die with the process: without this, the interpreter's last collection of
    # them (~200,000 after a 20,000-item loop) held the exit back by a second after Ctrl-C.
    gc.freeze()
    if isinstance(failure, RunStopped):
        resume = f"`{PROG} runs resume {run_id}` continues with the next step (add --step to keep stepping)"
        if as_json:
            print_json({"run_id": run_id, "status": "stopped", "stopped_after": failure.step_id, "hint": resume})
        print(f"{PROG}: run {run_id} {failure.message}; {resume}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if failure is not None:  # failed, or PARTIAL (went to its end with failed steps): exit status 1 either way
        record = service.store.get(run_id)
        kept: dict[str, Any] = dict(failure.attached or {})
        if as_json:
            print_json(kept | _outcome(run_id, "failed", failure.message, failure.hint, record))
        else:
            _report(kept, summary_key(spec) if spec is not None else "summary", outputs=isinstance(failure, RunPartial))
            # ^ what a PARTIAL run computed, and what any run spent; its summary line is the error's message
        error(failure.message, failure.hint)
        return EXIT_FAILED
    if result is None:
        resume = f"resume it with `{PROG} runs resume {run_id}` (finished steps are kept)"
        if as_json:
            print_json(_outcome(run_id, "cancelled", "cancelled", resume, None))
        error(f"run {run_id} cancelled", resume)
        return 128 + signum if signum else EXIT_INTERRUPTED
    if result.get("status") == "waiting" and "question" in result:  # an `ask:` step could ask nobody here
        print_json(result)
        answer = f"`{PROG} runs answer {run_id} --input k=v` answers it and goes on"
        print(f"{PROG}: run {run_id} waits for an answer to: {result['question']}; {answer}", file=sys.stderr)
        return EXIT_OK
    if as_json:
        print_json(result)
        return EXIT_OK
    _report(result, summary_key(spec) if spec is not None else "summary", outputs=True)
    artifacts = service.artifact_dir(title, run_id)
    where = f"; artifacts in {artifacts}" if artifacts.is_dir() else " (no artifacts)"
    print(f"{PROG}: run {run_id} of {title} succeeded{where}", file=sys.stderr)
    return EXIT_OK


def _report(result: dict[str, Any], key: str, *, outputs: bool) -> None:
    """The outputs on stdout (without run_id, summary and usage); the summary and usage lines on stderr."""
    summary = result.get(key) if isinstance(result.get(key), dict) else None
    usage = result.get("usage") if isinstance(result.get("usage"), dict) else None
    if outputs:
        shown = {k: v for k, v in result.items() if k != "run_id" and not (k == key and summary is not None)}
        print_json({k: v for k, v in shown.items() if not (k == "usage" and usage is not None)})
    if summary is not None and str(summary.get("line", "")).startswith("SUCCESS"):
        print(f"{PROG}: {summary.get('line', '')}", file=sys.stderr)
    if usage is not None and usage.get("calls"):
        estimated = " (estimated)" if usage.get("estimated") else ""
        print(
            f"{PROG}: usage: {usage['calls']} model call(s), {usage.get('total_tokens', 0):,} tokens{estimated}, "
            f"${usage.get('cost_usd', 0):.6f}",
            file=sys.stderr,
        )


def _outcome(run_id: str, status: str, message: str, hint: str, record: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "status": status,
        "error": message,
        "failed_step": getattr(record, "failed_step", None),
        "hint": hint,
    }


async def _supervise(
    start: Start, ctx: SkillContext, gate: StepGate | None
) -> tuple[dict[str, Any] | None, SkillRunError | RunStopped | None, int]:
    """The run's result; or its failure, or its stop (step-through); or the signal (Ctrl-C,
    SIGTERM) that cancelled it."""
    import threading

    import anyio

    from pipelines.errors import RunStopped
    from skills import SkillRunError

    caught: list[int] = []
    result: dict[str, Any] | None = None
    failure: SkillRunError | RunStopped | None = None
    async with anyio.create_task_group() as tg:
        if threading.current_thread() is threading.main_thread() and sys.platform != "win32":
            await tg.start(_cancel_on_signal, tg.cancel_scope, caught)
        try:
            result = await start(ctx, gate)
        except (SkillRunError, RunStopped) as exc:  # the run failed or was stopped; the service recorded it
            failure = exc
        tg.cancel_scope.cancel()
    return result, failure, (caught[0] if caught and result is None and failure is None else 0)


async def _cancel_on_signal(scope: Any, caught: list[int], *, task_status: Any) -> None:
    import signal

    import anyio

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            caught.append(int(signum))
            scope.cancel()
            return
