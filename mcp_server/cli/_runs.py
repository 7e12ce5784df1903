"""`orchestrator runs list|show|resume|answer|prune`: the run history in state.sqlite, resuming,
answering a `waiting` run's question, pruning.

`list` also shows the MCP tasks on record (long calls of clients: status, client, started,
progress, the run a pipeline task drives).

`list`, `show` and `prune` read the history table directly (no server, no skill loading: they
answer at once); `resume` builds the server and continues the run under the same progress
display as `run`, re-running no step that finished. A run whose process died (killed,
crashed, machine rebooted) shows as `interrupted`, with the command that resumes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from ._allow import add_allow_dir
from ._common import EXIT_OK, PROG, Parents, UsageError, home, positive_int, print_json
from ._server import server

if TYPE_CHECKING:
    from mcp_server.tasks import TaskRecord
    from pipelines.engine.stepping import StepGate
    from pipelines.storage.runs import RunRecord, RunStore, StepRecord
    from skills import SkillContext

MAX_FILES_SHOWN = 50
"""Artifact files `runs show` lists before it only counts the rest (--json lists them all)."""


def add_parsers(sub: Any, parents: Parents) -> None:
    common, json_opt = parents.common, parents.json
    runs = sub.add_parser("runs", parents=[common], help="run history: list, show, resume, answer or prune runs")
    actions = runs.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    scale = parents.scale
    listing = actions.add_parser("list", parents=[common, json_opt, scale], help="recent runs, newest first")
    listing.add_argument("--pipeline", metavar="ID", help="only the runs of this pipeline")
    listing.add_argument("--limit", metavar="N", type=positive_int, default=20, help="at most N runs (default: 20)")
    listing.set_defaults(handler=_list)
    show = actions.add_parser(
        "show",
        parents=[common, json_opt, scale],
        help="one run: status, every step (status, duration, usage, error), result, artifacts",
    )
    show.add_argument("run", metavar="RUN", help="a run id (or a unique prefix of one)")
    show.set_defaults(handler=_show)
    resume = actions.add_parser(
        "resume",
        parents=[common, parents.skills, json_opt, parents.servers, scale],
        help="continue a failed, cancelled, interrupted or stopped run",
        description="Continue a run without re-running its finished steps, with the same progress display and "
        "exit status as `orchestrator run`.",
    )
    resume.add_argument("run", metavar="RUN", help="a run id (or a unique prefix of one)")
    resume.add_argument(
        "--step", action="store_true", help="pause after each step, as `run --step` does (continue, stop, re-run)"
    )
    add_allow_dir(resume)
    resume.set_defaults(handler=_resume)
    answer = actions.add_parser(
        "answer",
        parents=[common, parents.skills, json_opt, parents.servers, scale],
        help="answer the question a waiting run asks, and continue it",
        description="A run whose `ask:` step could reach nobody waits (status `waiting`). Give the answer's "
        "fields with --input (checked against the question's schema: a bad answer is an error and the run keeps "
        "waiting); the run then goes on from that step, with the same display and exit status as `run`.",
    )
    answer.add_argument("run", metavar="RUN", help="a run id (or a unique prefix of one)")
    answer.add_argument(
        "--input", metavar="KEY=VALUE", action="append", default=[], dest="inputs", help="one field of the answer"
    )
    add_allow_dir(answer)
    answer.set_defaults(handler=_answer)
    prune = actions.add_parser(
        "prune",
        parents=[common, json_opt, scale],
        help="free the space of checkpoints no resume needs; forget old runs",
        description="Delete the checkpoints that no resume needs (those of succeeded runs, and of runs no longer "
        "recorded) and compact state.sqlite. With --older-than, also forget every run that started longer ago "
        "and is not running: its history row, its checkpoints and its artifacts folder. Runs that failed, were "
        "cancelled or interrupted keep their checkpoints until then, so they can be resumed.",
    )
    prune.add_argument(
        "--older-than",
        metavar="D",
        type=_duration_arg,
        help="also forget runs that started more than D ago: 90s, 30m, 12h, 7d, 2w",
    )
    prune.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")
    prune.set_defaults(handler=_prune)


def _store(args: argparse.Namespace) -> RunStore | None:
    """The run history (the shared state's with --state), or None when nothing ever ran in the home."""
    from pipelines.storage.runs import RunStore

    from ._server import backends

    state = backends(args).state
    if state:
        from pipelines.storage.pg import postgres
        from pipelines.storage.pgruns import PgRunStore

        return PgRunStore(postgres(state))
    db = home(args).state_db
    return RunStore(db) if db.is_file() else None


def _tell(store: RunStore | None) -> None:
    """What the store had to say about the database itself (a damaged one was set aside)."""
    for notice in store.notices if store is not None else []:
        print(f"{PROG}: error: {notice}", file=sys.stderr)


def find_run(store: RunStore | None, text: str) -> RunRecord:
    """A run by id, or by a prefix that names exactly one."""
    record = store.get(text) if store is not None else None
    if record is not None:
        return record
    matches = [r for r in store.list(1_000_000) if r.run_id.startswith(text)] if store is not None and text else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        ids = ", ".join(r.run_id for r in matches[:5])
        raise UsageError(f"'{text}' names {len(matches)} runs: {ids}", "give more characters of the run id")
    raise UsageError(f"no run '{text}'", f"`{PROG} runs list` shows the runs")


def _when(stamp: float | None) -> str | None:
    from datetime import datetime

    return None if stamp is None else datetime.fromtimestamp(stamp).astimezone().isoformat(timespec="seconds")


def _duration(record: RunRecord) -> float | None:
    """Seconds the run ran: paused time (before a resume, at a step-through gate) left out."""
    took = record.duration
    return None if took is None else round(took, 3)


def _record_json(record: RunRecord) -> dict[str, Any]:
    data = record.as_dict()
    data.update(
        started=_when(record.started), ended=_when(record.ended), duration=_duration(record), usage=record.usage
    )
    return data


def _usage_line(usage: dict[str, Any] | None) -> str | None:
    if usage is None:
        return None
    estimated = " (estimated)" if usage.get("estimated") else ""
    return (
        f"{usage.get('calls', 0)} model call(s), {usage.get('input_tokens', 0):,} in + "
        f"{usage.get('output_tokens', 0):,} out tokens{estimated}, ${usage.get('cost_usd', 0):.6f}"
    )


def _artifact_files(record: RunRecord) -> list[str]:
    root = Path(record.artifacts) if record.artifacts else None
    if root is None or not root.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _tasks(args: argparse.Namespace) -> list[TaskRecord]:
    """The MCP tasks on record (clients' long calls), newest first; none when nothing ran here."""
    from mcp_server.tasks import SqliteTaskStore, TaskStore

    from ._server import backends

    if getattr(args, "pipeline", None):
        return []
    state, db = backends(args).state, home(args).state_db
    store: TaskStore
    if state:
        from pipelines.storage.pg import postgres

        from ..tasks.postgres import PostgresTaskStore

        store = PostgresTaskStore(postgres(state))
    elif db.is_file():
        store = SqliteTaskStore(db)
    else:
        return []
    orphans = {t.task_id for t in store.orphans()}
    found = store.list(args.limit)
    # A task whose server process is gone shows as interrupted (the server reports it failed when it next starts).
    return [t.with_(status="interrupted") if t.task_id in orphans else t for t in found]


def _task_json(task: TaskRecord) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "tool": task.tool,
        "status": task.status,
        "client": task.client or None,
        "started": _when(task.created),
        "updated": _when(task.updated),
        "progress": list(task.progress) if task.progress else None,
        "message": task.status_message,
        "run_id": task.run_id,
    }


def _print_tasks(tasks: list[TaskRecord]) -> None:
    """One line a task: id (first 12 of its secret id), tool, status, client, started, progress."""
    if not tasks:
        return
    print("tasks (long calls of MCP clients):")
    for t in tasks:
        started = (_when(t.created) or "")[:19].replace("T", " ")
        done, total = t.progress or (None, None)
        progress = f"{done:g}/{total:g}" if done is not None and total else (f"{done:g}" if done is not None else "-")
        run = f"  run {t.run_id}" if t.run_id else ""
        print(f"  {t.task_id[:12]}  {t.tool}  {t.status}  {t.client or '-'}  {started}  {progress}{run}")
    print()


def _resume_hint(record: RunRecord) -> str:
    return f"`{PROG} runs resume {record.run_id}` continues it (finished steps are kept)"


def _duration_arg(text: str) -> float:
    from pipelines.language.limits import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# -- list --------------------------------------------------------------------------------------
def _list(args: argparse.Namespace) -> int:
    store = _store(args)
    records = store.list(args.limit, args.pipeline) if store is not None else []
    _tell(store)
    tasks = _tasks(args)
    if args.json:
        print_json({"runs": [_record_json(r) for r in records], "tasks": [_task_json(t) for t in tasks]})
        return EXIT_OK
    _print_tasks(tasks)
    if not records:
        print("no runs yet" + (f" of {args.pipeline}" if args.pipeline else ""))
        return EXIT_OK
    w_id = max(len(r.run_id) for r in records)
    w_pipe = max(len(r.pipeline) for r in records)
    w_status = max(len(r.status) for r in records)
    for r in records:
        started = (_when(r.started) or "")[:19].replace("T", " ")
        took = _duration(r)
        took_text = f"{took:.1f}s" if took is not None else "-"
        extra = f"  at step {r.failed_step}" if r.failed_step else ""
        print(f"{r.run_id:<{w_id}}  {r.pipeline:<{w_pipe}}  {r.status:<{w_status}}  {started}  {took_text:>7}{extra}")
    lost = [r for r in records if r.status == "interrupted"]
    if lost:
        print(
            f"{PROG}: {len(lost)} run(s) interrupted: their process ended without recording an end; "
            f"`{PROG} runs resume RUN` continues one (e.g. `{PROG} runs resume {lost[0].run_id}`)",
            file=sys.stderr,
        )
    return EXIT_OK


# -- show --------------------------------------------------------------------------------------
@runtime_checkable
class _CountsWorkers(Protocol):
    """A run store that knows which worker ran how many items of a run (the distributed mode's)."""

    def workers(self, run_id: str) -> dict[str, int]: ...


def _show(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        record = find_run(store, args.run)
    finally:
        _tell(store)
    files = _artifact_files(record)
    workers = store.workers(record.run_id) if isinstance(store, _CountsWorkers) else {}  # the distributed mode
    steps = store.steps(record.run_id) if store is not None else []
    if args.json:
        data = _record_json(record) | {"steps": [s.as_dict() for s in steps], "artifact_files": files}
        print_json(data | ({"workers": workers} if workers else {}))
        return EXIT_OK
    took = _duration(record)
    rows: list[tuple[str, Any]] = [
        ("run", record.run_id),
        ("pipeline", record.pipeline),
        ("file", record.file),
        ("status", record.status),
        ("process", record.owner if record.status in ("running", "interrupted") else None),
        ("started", _when(record.started)),
        ("ended", f"{_when(record.ended)} ({took:.1f}s)" if took is not None else None),
        ("failed step", record.failed_step),
        ("workers", ", ".join(f"{name} ran {n} item(s)" for name, n in workers.items()) or None),
        ("error", record.error if record.status not in ("succeeded", "waiting") else None),
        ("question", record.asking.get("question") if record.asking else None),
        ("usage", _usage_line(record.usage)),
    ]
    for label, value in rows:
        if value is not None:
            print(f"{label + ':':<13}{value}")
    if steps:
        print("\nsteps:")
        for step in steps:
            print("  " + _step_line(step))
    for label, value in (("inputs", record.inputs), ("result", record.result)):
        if value is not None:
            text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
            print(f"\n{label}:\n  " + text.replace("\n", "\n  "))
    print(f"\nartifacts:   {record.artifacts or '-'}" + ("" if files else " (none)"))
    for name in files[:MAX_FILES_SHOWN]:
        print(f"  {name}")
    if len(files) > MAX_FILES_SHOWN:
        print(f"  ... and {len(files) - MAX_FILES_SHOWN} more")
    if record.status in ("failed", "cancelled", "interrupted", "stopped"):
        print(f"{PROG}: run {record.run_id} {record.status}: {_resume_hint(record)}", file=sys.stderr)
    elif record.status == "running":
        print(f"{PROG}: run {record.run_id} is running in process {record.owner}", file=sys.stderr)
    elif record.status == "waiting":
        fields = ", ".join((record.asking or {}).get("schema", {}).get("properties") or {})
        print(
            f"{PROG}: run {record.run_id} waits for an answer ({fields}): "
            f"`{PROG} runs answer {record.run_id} --input k=v`",
            file=sys.stderr,
        )
    return EXIT_OK


def _step_line(step: StepRecord) -> str:
    """One step of `runs show`: status, path (indented by nesting), duration, usage, error."""
    depth = step.path.count("/") + (1 if step.kind == "item" else 0)
    name = "  " * depth + step.path
    took = f"{step.duration:.2f}s" if step.duration is not None else "-"
    parts = [f"{step.status:<11}{name:<32} {took:>8}"]
    usage = step.usage or {}
    if usage.get("calls") or usage.get("total_tokens"):
        tokens = usage.get("total_tokens") or (usage.get("input_tokens", 0) + usage.get("output_tokens", 0))
        parts.append(f"{tokens:,} tokens ${float(usage.get('cost_usd') or 0):.4f}")
    error = (step.error or {}).get("error")
    if isinstance(error, dict):
        body = cast("dict[str, Any]", error)
        parts.append(f"{body.get('type')}: {body.get('message')}")
    return "  ".join(parts)


# -- resume ------------------------------------------------------------------------------------
def _target(args: argparse.Namespace, record: RunRecord) -> str:
    """What `orchestrator run` takes to run the same pipeline again: its id if published, else its file."""
    from pipelines.source import EXAMPLES_DIR

    if record.file is None or Path(record.file).parent in (home(args).pipelines_dir, EXAMPLES_DIR):
        return record.pipeline
    return record.file


def _resume(args: argparse.Namespace) -> int:
    from ._pipelines import pipeline_needs, service_of
    from ._run import drive
    from ._upstreams import required

    record = find_run(_store(args), args.run)
    if record.status == "succeeded":
        raise UsageError(
            f"run {record.run_id} already succeeded", f"start a new one: `{PROG} run {_target(args, record)}`"
        )
    if record.status == "running":
        raise UsageError(
            f"run {record.run_id} is still running in process {record.owner}",
            "wait for it or stop it there; a run whose process died shows as interrupted and can be resumed",
        )
    orchestrator = server(args)
    service = service_of(orchestrator)
    spec = service.specs().get(record.pipeline)
    needs = pipeline_needs(orchestrator, record.file or record.pipeline)  # the upstreams its steps call

    async def start(ctx: SkillContext, gate: StepGate | None) -> Any:
        orchestrator.access.apply(ctx)  # --allow-dir and the home's isolation settings
        async with required(orchestrator, needs, args.connect_timeout):
            return await service.resume(record.run_id, ctx, gate=gate)

    return drive(service, record.pipeline, spec, record.run_id, start, as_json=args.json, step=args.step)


# -- answer ------------------------------------------------------------------------------------
def _answer(args: argparse.Namespace) -> int:
    from pipelines.asking import AnswerError, check_answer, coerce_answer

    from ._common import parse_pairs
    from ._pipelines import pipeline_needs, service_of
    from ._run import drive
    from ._upstreams import required

    record = find_run(_store(args), args.run)
    if record.status != "waiting" or record.asking is None:
        raise UsageError(
            f"run {record.run_id} is not waiting for an answer (it is {record.status})",
            f"`{PROG} runs list` shows the runs; a waiting one says so in its status",
        )
    schema: dict[str, Any] = record.asking.get("schema") or {}
    given = coerce_answer(schema, parse_pairs(args.inputs, "--input"))
    try:
        check_answer(schema, given, where="--input")
    except AnswerError as exc:
        raise UsageError(f"{exc.message}; run {record.run_id} still waits", exc.hint) from None
    orchestrator = server(args)
    service = service_of(orchestrator)
    spec = service.specs().get(record.pipeline)
    needs = pipeline_needs(orchestrator, record.file or record.pipeline)

    async def start(ctx: SkillContext, gate: StepGate | None) -> Any:
        orchestrator.access.apply(ctx)
        async with required(orchestrator, needs, args.connect_timeout):
            return await service.answer(record.run_id, given, ctx)

    return drive(service, record.pipeline, spec, record.run_id, start, as_json=args.json)


# -- prune -------------------------------------------------------------------------------------
def _prune(args: argparse.Namespace) -> int:
    store = _store(args)
    if store is None:
        if args.json:
            print_json({"checkpoints_deleted_for": [], "forgotten": [], "bytes_before": 0, "bytes_after": 0})
        else:
            print("nothing to prune: no run ever ran in this home")
        return EXIT_OK
    report = store.prune(args.older_than, dry_run=args.dry_run)
    _tell(store)
    if args.json:
        print_json(
            {
                "dry_run": args.dry_run,
                "checkpoints_deleted_for": report.checkpoints_of,
                "forgotten": [r.run_id for r in report.forgotten],
                "bytes_before": report.bytes_before,
                "bytes_after": report.bytes_after,
            }
        )
        return EXIT_OK
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} the checkpoints of {len(report.checkpoints_of)} run(s) that no resume needs")
    if args.older_than is not None:
        verb = "would forget" if args.dry_run else "forgot"
        print(f"{verb} {len(report.forgotten)} run(s) started before the cut-off (history, checkpoints, artifacts)")
        for record in report.forgotten[:MAX_FILES_SHOWN]:
            print(f"  {record.run_id}  {record.pipeline}  {record.status}")
    mb = 1e6
    if not args.dry_run:
        print(f"{store.db}: {report.bytes_before / mb:.1f} MB -> {report.bytes_after / mb:.1f} MB")
    return EXIT_OK
