"""`orchestrator runs list|show|resume`: the run history in state.sqlite, and resuming a run.

`list` and `show` read the history table directly (no server, no skill loading: they answer
at once); `resume` builds the server and continues the run under the same progress display
as `run`, re-running no step that finished.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._allow import add_allow_dir
from ._common import EXIT_OK, PROG, Parents, UsageError, home, positive_int, print_json, server

if TYPE_CHECKING:
    from pipelines.runs import RunRecord, RunStore
    from skills import SkillContext

MAX_FILES_SHOWN = 50
"""Artifact files `runs show` lists before it only counts the rest (--json lists them all)."""


def add_parsers(sub: Any, parents: Parents) -> None:
    common, json_opt = parents.common, parents.json
    runs = sub.add_parser("runs", parents=[common], help="run history: list, show or resume runs")
    actions = runs.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", parents=[common, json_opt], help="recent runs, newest first")
    listing.add_argument("--pipeline", metavar="ID", help="only the runs of this pipeline")
    listing.add_argument("--limit", metavar="N", type=positive_int, default=20, help="at most N runs (default: 20)")
    listing.set_defaults(handler=_list)
    show = actions.add_parser(
        "show", parents=[common, json_opt], help="one run: status, inputs, result or error, artifacts"
    )
    show.add_argument("run", metavar="RUN", help="a run id (or a unique prefix of one)")
    show.set_defaults(handler=_show)
    resume = actions.add_parser(
        "resume",
        parents=[common, parents.skills, json_opt, parents.servers],
        help="continue a failed, cancelled or interrupted run",
        description="Continue a run without re-running its finished steps, with the same progress display and "
        "exit status as `orchestrator run`.",
    )
    resume.add_argument("run", metavar="RUN", help="a run id (or a unique prefix of one)")
    add_allow_dir(resume)
    resume.set_defaults(handler=_resume)


def _store(args: argparse.Namespace) -> RunStore | None:
    """The run history of the home, or None when nothing ever ran there (nothing is created)."""
    from pipelines.runs import RunStore

    db = home(args).state_db
    return RunStore(db) if db.is_file() else None


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
    return None if record.ended is None else round(record.ended - record.started, 3)


def _record_json(record: RunRecord) -> dict[str, Any]:
    data = record.as_dict()
    data.update(started=_when(record.started), ended=_when(record.ended), duration=_duration(record))
    return data


def _artifact_files(record: RunRecord) -> list[str]:
    root = Path(record.artifacts) if record.artifacts else None
    if root is None or not root.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _resume_hint(record: RunRecord) -> str:
    return f"`{PROG} runs resume {record.run_id}` continues it (finished steps are kept)"


# -- list --------------------------------------------------------------------------------------
def _list(args: argparse.Namespace) -> int:
    store = _store(args)
    records = store.list(args.limit, args.pipeline) if store is not None else []
    if args.json:
        print_json({"runs": [_record_json(r) for r in records]})
        return EXIT_OK
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
    return EXIT_OK


# -- show --------------------------------------------------------------------------------------
def _show(args: argparse.Namespace) -> int:
    record = find_run(_store(args), args.run)
    files = _artifact_files(record)
    if args.json:
        print_json(_record_json(record) | {"artifact_files": files})
        return EXIT_OK
    took = _duration(record)
    rows: list[tuple[str, Any]] = [
        ("run", record.run_id),
        ("pipeline", record.pipeline),
        ("file", record.file),
        ("status", record.status),
        ("started", _when(record.started)),
        ("ended", f"{_when(record.ended)} ({took:.1f}s)" if took is not None else None),
        ("failed step", record.failed_step),
        ("error", record.error if record.status != "succeeded" else None),
    ]
    for label, value in rows:
        if value is not None:
            print(f"{label + ':':<13}{value}")
    for label, value in (("inputs", record.inputs), ("result", record.result)):
        if value is not None:
            text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
            print(f"\n{label}:\n  " + text.replace("\n", "\n  "))
    print(f"\nartifacts:   {record.artifacts or '-'}" + ("" if files else " (none)"))
    for name in files[:MAX_FILES_SHOWN]:
        print(f"  {name}")
    if len(files) > MAX_FILES_SHOWN:
        print(f"  ... and {len(files) - MAX_FILES_SHOWN} more")
    if record.status in ("failed", "cancelled"):
        print(f"{PROG}: run {record.run_id} {record.status}: {_resume_hint(record)}", file=sys.stderr)
    elif record.status == "running":
        print(f"{PROG}: run {record.run_id} is running; if its process died, {_resume_hint(record)}", file=sys.stderr)
    return EXIT_OK


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
    orchestrator = server(args)
    service = service_of(orchestrator)
    spec = service.specs().get(record.pipeline)
    needs = pipeline_needs(orchestrator, record.file or record.pipeline)  # the upstreams its steps call

    async def start(ctx: SkillContext) -> Any:
        orchestrator.access.apply(ctx)  # --allow-dir and the home's isolation settings
        async with required(orchestrator, needs, args.connect_timeout):
            return await service.resume(record.run_id, ctx)

    return drive(service, record.pipeline, spec, record.run_id, start, as_json=args.json)
