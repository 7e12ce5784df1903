"""`orchestrator ui [--port P]`: the run viewer in a browser, for users of the stdio transport.

The same page the HTTP transport serves at `/runs`, from the same state (the home's state.sqlite,
or `--state postgresql://...`), on 127.0.0.1 only: a stdio server and this command, started
side by side, show each run as it goes. Cancel and answer work as in `/runs` (through the
`cancel_run` / `answer_run` tools, when this version has them).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._common import EXIT_OK, PROG, Parents, UsageError

DEFAULT_PORT = 8001


def add_parsers(sub: Any, parents: Parents) -> None:
    ui = sub.add_parser(
        "ui",
        parents=[parents.common, parents.skills, parents.scale],
        help="the run viewer in a browser (http://127.0.0.1:8001/runs/)",
        description="Serve the run viewer on 127.0.0.1: every run of the home (or of --state), its graph, steps, "
        "errors, usage and artifacts, updated live. The HTTP transport (`serve --transport http`) serves the same "
        "page at /runs.",
    )
    ui.add_argument("--port", metavar="P", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})")
    ui.set_defaults(handler=_ui)


def _ui(args: argparse.Namespace) -> int:
    import socket

    import anyio

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: not a port", "give a number from 1 to 65535 (0: any free port)")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", args.port))
        listener.listen(128)  # a browser opening the printed address at once is queued, not refused
    except OSError as exc:
        listener.close()
        raise UsageError(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}", "pick another --port") from None
    anyio.run(_serve, args, listener)
    return EXIT_OK


async def _serve(args: argparse.Namespace, listener: Any) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import RedirectResponse
    from starlette.routing import Mount, Route

    from .._viewer import viewer_for
    from ..transports import transport_security
    from ._server import server

    orchestrator = server(args)
    security = transport_security("127.0.0.1")
    viewer = viewer_for(orchestrator, token=None, hosts=security.allowed_hosts, origins=security.allowed_origins)
    assert viewer is not None  # the server is built with pipelines

    async def home(_: Request) -> RedirectResponse:
        return RedirectResponse("/runs/")

    app = Starlette(routes=[Route("/", home), Mount("/runs", app=viewer)])
    config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="none", timeout_graceful_shutdown=3)
    port = listener.getsockname()[1]
    print(f"{PROG}: run viewer at http://127.0.0.1:{port}/runs/ (Ctrl-C stops it)", file=sys.stderr, flush=True)
    await uvicorn.Server(config).serve(sockets=[listener])
