"""`orchestrator serve`: the catalogue over stdio (default) or streamable HTTP."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..transports import EdgeLimits, SessionLimits
from ._allow import add_allow_dir
from ._common import EXIT_OK, PROG, Parents, UsageError, log, positive_int
from ._server import server

if TYPE_CHECKING:
    from ..app import OrchestratorServer

_N = TypeVar("_N", int, float)
_LIMITS = SessionLimits()
_EDGE = EdgeLimits()
_HTTP_ONLY: dict[str, Any] = {
    "--stateless": False,
    "--auth-token": None,
    "--allowed-host": [],
    "--session-idle-timeout": _LIMITS.idle_timeout,
    "--max-sessions": _LIMITS.max_sessions,
    "--max-sessions-per-client": _LIMITS.per_client,
    "--header-timeout": _EDGE.header_timeout,
    "--body-timeout": _EDGE.body_timeout,
    "--max-connections": None,
    "--max-connections-per-client": None,
    "--forwarded-allow-ips": [],
}
"""The HTTP flags and their defaults: given with stdio they would silently do nothing."""
_SESSION_LIMITS = ("--session-idle-timeout", "--max-sessions", "--max-sessions-per-client")

STDIO_STOP_GRACE = 2.0
"""Seconds a Ctrl-C gives running calls to stop before a stdio server exits regardless."""


def add_parsers(sub: Any, parents: Parents) -> None:
    serve = sub.add_parser(
        "serve",
        parents=[parents.common, parents.skills, parents.scale],
        help="serve every skill and pipeline as an MCP tool",
        description="Serve the catalogue over stdio (default) or streamable HTTP, with live "
        "reload of the skill and pipeline folders.",
    )
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="HTTP port; 0 picks a free one (default: 8000)")
    serve.add_argument("--stateless", action="store_true", help="HTTP without sessions (no list_changed)")
    _add_http_limits(serve)
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
        "--catalogue-threshold",
        metavar="N",
        type=positive_int,
        default=100,
        help="skills above which auto turns on (100)",
    )
    serve.add_argument(
        "--page-size", metavar="N", type=positive_int, default=500, help="items per page of the list methods (500)"
    )
    serve.add_argument(
        "--handle-after",
        metavar="SECONDS",
        type=_handle_after,
        default=None,
        help="a long call (pipeline, agent, create_skill, ...) from a client that did not ask for a task "
        "answers with a run handle once it has run this long, and goes on (get_run follows it); 0 never "
        "(default: tasks: handle_after_s in config.yaml, else 45)",
    )
    add_allow_dir(serve)
    serve.set_defaults(handler=_cmd_serve)


def _add_http_limits(serve: argparse.ArgumentParser) -> None:
    """Flags that keep HTTP safe beyond loopback and sessions within bounds (SPEC 7)."""
    http = serve.add_argument_group("HTTP safety and limits")
    http.add_argument(
        "--allowed-host",
        metavar="H",
        type=_allowed_host,
        action="append",
        default=[],
        help="a Host name clients use to reach this server (repeatable; also allows its http(s) Origins); "
        "loopback names are always allowed, any other Host gets 421",
    )
    http.add_argument(
        "--session-idle-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=_LIMITS.idle_timeout,
        help=f"close a session with no request in flight for this long (default: {_LIMITS.idle_timeout:g})",
    )
    http.add_argument(
        "--max-sessions",
        metavar="N",
        type=positive_int,
        default=_LIMITS.max_sessions,
        help=f"open sessions in all; when full, the heaviest client's oldest idle one makes room "
        f"(default: {_LIMITS.max_sessions})",
    )
    http.add_argument(
        "--max-sessions-per-client",
        metavar="N",
        type=positive_int,
        default=_LIMITS.per_client,
        help=f"open sessions of one client address; its oldest idle one makes room (default: {_LIMITS.per_client})",
    )
    _add_edge_limits(http)


def _add_edge_limits(http: argparse._ArgumentGroup) -> None:  # pyright: ignore[reportPrivateUsage]  # argparse's own name for a group
    """Flags that bound what a connection may cost before it is a request (slowloris, fd exhaustion)."""
    http.add_argument(
        "--header-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=_EDGE.header_timeout,
        help=f"close a connection whose request headers are not complete this long after it opened (or after "
        f"the first byte of its next request) (default: {_EDGE.header_timeout:g})",
    )
    http.add_argument(
        "--body-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=_EDGE.body_timeout,
        help=f"close a connection whose request body is not complete this long after its headers "
        f"(default: {_EDGE.body_timeout:g})",
    )
    http.add_argument(
        "--max-connections",
        metavar="N",
        type=positive_int,
        default=None,
        help="open connections in all; past it the oldest one that sent no request yet is closed, "
        "else 503 (default: sized from the file-descriptor limit, printed at start)",
    )
    http.add_argument(
        "--max-connections-per-client",
        metavar="N",
        type=positive_int,
        default=None,
        help="open connections of one client address, the same way (default: a quarter of --max-connections)",
    )
    http.add_argument(
        "--forwarded-allow-ips",
        metavar="IPS",
        type=_proxies,
        action="extend",
        default=[],
        help="proxies whose X-Forwarded-For names the client: addresses or networks, comma-separated "
        "(repeatable), or * for any (default: none, so X-Forwarded-For is ignored)",
    )


def _allowed_host(text: str) -> str:
    """A Host name as the client sends it: `name`, `name:port`, an IPv4 or a (bracketed) IPv6 address."""
    import ipaddress
    import re

    name = text.strip().lower()
    if "://" in name:
        raise argparse.ArgumentTypeError(f"'{text}' is a URL; give the host name alone, e.g. mcp.example.com")
    try:
        return f"[{ipaddress.IPv6Address(name)}]"  # a bare IPv6 address: Host headers bracket it
    except ValueError:
        pass
    if not re.fullmatch(r"(\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9.-]*[a-z0-9])?)(:(\d{1,5}|\*))?", name):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a host name; give a name or address clients connect to, e.g. mcp.example.com "
            "or mcp.example.com:8443 (one per --allowed-host; no wildcards)"
        )
    return name


def _proxies(text: str) -> list[str]:
    """Comma-separated addresses or networks of trusted proxies, or `*`."""
    import ipaddress

    items = [item.strip() for item in text.split(",") if item.strip()]
    for item in items:
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item.strip("[]"), strict=False)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"'{item}' is not an IP address or network; give the proxy's address, e.g. 127.0.0.1 or 10.0.0.0/8"
            ) from None
    if not items:
        raise argparse.ArgumentTypeError("give at least one address, e.g. --forwarded-allow-ips 127.0.0.1")
    return [item if item == "*" else item.strip("[]") for item in items]


def _seconds(text: str) -> float:
    value = _number(text, float, "a number of seconds")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _handle_after(text: str) -> float:
    value = _number(text, float, "a number of seconds")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds >= 0 (0: never answer with a handle)")
    return value


def _port(text: str) -> int:
    port = _number(text, int, "a port number")
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not in 0-65535")
    return port


def _number(text: str, convert: Callable[[str], _N], noun: str) -> _N:
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not {noun}") from None


def _cmd_serve(args: argparse.Namespace) -> int:
    token = args.auth_token or os.environ.get("ORCHESTRATOR_TOKEN") or None
    if args.transport == "stdio":
        given = [flag for flag in _HTTP_ONLY if _given(args, flag)]
        if given:
            raise UsageError(f"{', '.join(given)} apply to --transport http only", "add --transport http, or drop them")
    if args.stateless:
        given = [flag for flag in _SESSION_LIMITS if _given(args, flag)]
        if given:
            raise UsageError(
                f"{', '.join(given)} limit sessions, which --stateless does not keep", "drop one or the other"
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

    def ready(port: int, edge_limits: str) -> None:
        print(f"{PROG}: serving http://{host}:{port}/mcp", file=sys.stderr, flush=True)
        print(f"{PROG}: {edge_limits}", file=sys.stderr, flush=True)

    limits = SessionLimits(
        idle_timeout=args.session_idle_timeout,
        max_sessions=args.max_sessions,
        per_client=args.max_sessions_per_client,
    )
    edge = EdgeLimits(
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client,
        forwarded_allow_ips=tuple(args.forwarded_allow_ips),
    )

    async def run() -> None:
        await serve_http(
            orchestrator,
            host=args.host,
            port=args.port,
            stateless=args.stateless,
            auth_token=token,
            allowed_hosts=args.allowed_host,
            limits=limits,
            edge=edge,
            ready=ready,
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


def _given(args: argparse.Namespace, flag: str) -> bool:
    return getattr(args, flag.lstrip("-").replace("-", "_")) != _HTTP_ONLY[flag]


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
