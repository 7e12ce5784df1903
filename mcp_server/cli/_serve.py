"""`orchestrator serve`: the catalogue over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from ._allow import add_allow_dir
from ._common import EXIT_OK, PROG, Parents, UsageError, log, server

if TYPE_CHECKING:
    from ..app import OrchestratorServer

STDIO_STOP_GRACE = 2.0
"""Seconds a Ctrl-C gives running calls to stop before a stdio server exits regardless."""


def add_parsers(sub: Any, parents: Parents) -> None:
    serve = sub.add_parser(
        "serve",
        parents=[parents.common, parents.skills],
        help="serve every skill and pipeline as an MCP tool",
        description="Serve the catalogue over stdio (default) or streamable HTTP, with live "
        "reload of the skill and pipeline folders.",
    )
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="HTTP port; 0 picks a free one (default: 8000)")
    serve.add_argument("--stateless", action="store_true", help="HTTP without sessions (no list_changed)")
    serve.add_argument(
        "--servers",
        metavar="FILE",
        default=None,
        help="MCP servers to import, in Claude Desktop's mcpServers format (default: <home>/servers.json)",
    )
    serve.add_argument(
        "--auth-token",
        metavar="T",
        default=None,
        help="bearer token every HTTP request must carry (default: $ORCHESTRATOR_TOKEN)",
    )
    serve.add_argument(
        "--catalogue",
        choices=("auto", "on", "off"),
        default="auto",
        help="publish find_skills/read_skill/call_skill instead of one tool per skill: on, off, or auto "
        "(on above --catalogue-threshold skills; default)",
    )
    serve.add_argument(
        "--catalogue-threshold", metavar="N", type=_count, default=100, help="skills above which auto turns on (100)"
    )
    serve.add_argument(
        "--page-size", metavar="N", type=_count, default=500, help="items per page of the list methods (500)"
    )
    add_allow_dir(serve)
    serve.set_defaults(handler=_cmd_serve)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of at least 1")
    return int(text)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not in 0-65535")
    return port


def _cmd_serve(args: argparse.Namespace) -> int:
    token = args.auth_token or os.environ.get("ORCHESTRATOR_TOKEN") or None
    if args.transport == "stdio" and (args.stateless or args.auth_token):
        raise UsageError(
            "--stateless and --auth-token apply to --transport http only",
            "add --transport http, or drop them for stdio",
        )
    orchestrator = server(args, watch=True)
    import threading

    # Say how skills' subprocesses will be confined; the bwrap probe runs beside start-up.
    threading.Thread(target=orchestrator.access.report, name="isolation-probe", daemon=True).start()
    import anyio

    from ..transports import serve_http, serve_stdio

    if args.transport == "stdio":
        if sys.stdin.isatty():  # a person, not a client: say what this is waiting for
            print(_waiting_line(), file=sys.stderr, flush=True)
        anyio.run(_serve_stdio_until_interrupted, orchestrator, serve_stdio)
        return EXIT_OK
    _check_bindable(args.host, args.port)
    host = f"[{args.host}]" if ":" in args.host else args.host

    def ready(port: int) -> None:
        print(f"{PROG}: serving http://{host}:{port}/mcp", file=sys.stderr, flush=True)

    async def run() -> None:
        await serve_http(
            orchestrator, host=args.host, port=args.port, stateless=args.stateless, auth_token=token, ready=ready
        )

    try:
        anyio.run(run)
    except SystemExit as exc:  # uvicorn exits when it cannot bind (it logged why)
        if exc.code in (0, None):
            return EXIT_OK
        raise UsageError(
            f"could not serve on {args.host}:{args.port}",
            "is the port in use? try another --port, or --port 0 for a free one",
        ) from None
    return EXIT_OK


def _waiting_line() -> str:
    """What stdio `serve` prints when started in a terminal, where it looks like a hang."""
    import shlex
    import shutil

    command = shutil.which(sys.argv[0]) or sys.argv[0]
    command = os.path.abspath(command) if os.sep in command else command
    command = shlex.quote(command)
    return (
        f"{PROG}: serving MCP over stdio, waiting for a client on stdin (Ctrl-C stops). Attach one: "
        f"`{command} claude-config --write` (Claude Desktop) or "
        f"`npx -y @modelcontextprotocol/inspector {command} serve` (MCP Inspector)"
    )


def _check_bindable(host: str, port: int) -> None:
    """Fail with a clear message before uvicorn would (it logs a traceback and exits)."""
    import socket

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        socket.create_server((host, port), family=family).close()
    except OSError as exc:
        hint = "is the port in use? try another --port, or --port 0 for a free one"
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if isinstance(exc, socket.gaierror):
            hint, reason = "give an address of this machine, e.g. 127.0.0.1", exc.strerror or str(exc)
        raise UsageError(f"cannot serve on {host}:{port}: {reason}", hint) from None


async def _serve_stdio_until_interrupted(orchestrator: OrchestratorServer, serve: Any) -> None:
    """Serve stdio; Ctrl-C stops it even while stdin stays open.

    The SDK reads stdin in a worker thread that no cancellation can interrupt, so a Ctrl-C
    would otherwise wait for the next input line. Running calls are cancelled first; if the
    reader still holds the process after a short grace period, it exits without it.
    """
    import signal
    import threading

    import anyio

    async with anyio.create_task_group() as tg:

        async def stop_on_ctrl_c() -> None:
            with anyio.open_signal_receiver(signal.SIGINT) as signals:
                async for _ in signals:
                    log.info("interrupted: stopping")
                    timer = threading.Timer(STDIO_STOP_GRACE, _exit_now)
                    timer.daemon = True
                    timer.start()
                    tg.cancel_scope.cancel()
                    return

        if threading.current_thread() is threading.main_thread() and sys.platform != "win32":
            tg.start_soon(stop_on_ctrl_c)
        await serve(orchestrator)
        tg.cancel_scope.cancel()


def _exit_now() -> None:
    sys.stderr.flush()
    os._exit(EXIT_OK)
