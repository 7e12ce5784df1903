"""The distributed mode on the command line: `--state`, `--queue`, `--artifacts`, and `orchestrator worker`.

`serve`, `run`, `runs` and `doctor` take the same three options (or `$ORCHESTRATOR_STATE`,
`$ORCHESTRATOR_QUEUE`, `$ORCHESTRATOR_ARTIFACTS`); without them everything stays embedded (the
home's state.sqlite, runs in the process that starts them). `orchestrator worker --state URL
--queue URL` takes runs and loop items from the queue until stopped (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._allow import add_allow_dir
from ._common import EXIT_OK, PROG, Parents, UsageError, positive_int
from ._server import backends, server


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("distributed mode (see docs/distributed.md)")
    group.add_argument(
        "--state",
        metavar="URL",
        default=None,
        help="keep runs, tasks, checkpoints and registered pipelines in PostgreSQL "
        "(postgresql://USER:PASSWORD@HOST:5432/DB; default: $ORCHESTRATOR_STATE, else the home's state.sqlite)",
    )
    group.add_argument(
        "--queue",
        metavar="URL",
        default=None,
        help="hand runs and parallel loop items to `orchestrator worker` processes through Redis "
        "(redis://:PASSWORD@HOST:6379/0, rediss:// for TLS; default: $ORCHESTRATOR_QUEUE, else runs run in "
        "this process); needs --state",
    )
    group.add_argument(
        "--artifacts",
        metavar="DIR",
        default=None,
        help="where run artifacts go: DIR/<pipeline>/runs/<run>/ (default: $ORCHESTRATOR_ARTIFACTS, else the "
        "home's pipelines/); with workers, a folder every machine mounts",
    )


def add_parsers(sub: Any, parents: Parents) -> None:
    worker = sub.add_parser(
        "worker",
        parents=[parents.common, parents.skills, parents.scale],
        help="take runs and loop items from the queue (the distributed mode)",
        description="Run pipeline runs and the items of their parallel loops handed out through the queue by any "
        "server replica (`serve --state URL --queue URL`). Start as many as you like, on any machine with the same "
        "skills; a run whose worker dies is resumed by another from its checkpoint.",
    )
    worker.add_argument(
        "--concurrency", metavar="N", type=positive_int, default=8, help="loop items this worker runs at once (8)"
    )
    worker.add_argument(
        "--redelivery-timeout",
        metavar="SECONDS",
        type=float,
        default=30.0,
        help="a task whose worker stopped renewing it this long ago goes to another worker (30)",
    )
    worker.add_argument("--name", default=None, help="this worker's name in the run records (default: host:pid)")
    add_allow_dir(worker)
    worker.set_defaults(handler=_cmd_worker)


def _cmd_worker(args: argparse.Namespace) -> int:
    chosen = backends(args)
    if not (chosen.state and chosen.queue):
        raise UsageError(
            "a worker needs --state and --queue",
            "e.g. orchestrator worker --state postgresql://USER:PASSWORD@HOST:5432/DB "
            "--queue redis://:PASSWORD@HOST:6379/0",
        )
    orchestrator = server(args)
    import anyio

    from pipelines.distributed.worker import WorkerHost
    from skills import SkillContext

    from ._pipelines import service_of

    service = service_of(orchestrator)

    def make_ctx(pipeline: str, run_id: str) -> SkillContext:
        ctx = SkillContext(skill=pipeline, run_id=run_id)
        assert service.queue is not None  # (a worker has --queue)
        # No client here: the Anthropic API when a key is set, else the client of the replica that
        # started the run, asked through the queue.
        orchestrator.models.relayed(ctx, service.queue.relay(run_id))
        orchestrator.access.apply(ctx)  # --allow-dir and the home's isolation settings
        ctx.extras["catalog"] = orchestrator.catalog
        if service.roles is not None:  # agents' roles of this worker's home
            from skills.core.roles import ROLES_KEY

            ctx.extras[ROLES_KEY] = service.roles()
        return ctx

    host = WorkerHost(
        service,
        make_ctx,
        name=args.name,
        concurrency=args.concurrency,
        redelivery_timeout=args.redelivery_timeout,
        reload=orchestrator.reload,  # a run that needs a skill added or changed since this worker started
    )

    def ready() -> None:
        print(
            f"{PROG}: worker {host.name} takes runs and items from {chosen.describe()} "
            f"({args.concurrency} items at once)",
            file=sys.stderr,
            flush=True,
        )

    async def main() -> None:
        import signal

        async with anyio.create_task_group() as tg, orchestrator.running(overviews=False):

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(stop_on_signal)
            await host.serve(ready)

    anyio.run(main)
    return EXIT_OK
