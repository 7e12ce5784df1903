"""The `orchestrator` command line (SPEC 8).

argparse, not a framework: `orchestrator serve` over stdio is benchmarked against a bare
`MCPServer`, so each command imports only what it needs, when it runs. Exit status: 0 success,
1 the tool failed, 2 bad usage or invalid input. Errors go to stderr as
`orchestrator: error: ... (hint: ...)`, never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from mcp_types import CallToolResult

    from skills import Home, LoadProblem, Problem, Skill

    from .app import OrchestratorServer

__all__ = ["main"]

log = logging.getLogger("mcp_server.cli")

PROG = "orchestrator"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
STDIO_STOP_GRACE = 2.0
"""Seconds a Ctrl-C gives running calls to stop before a stdio server exits regardless."""
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class UsageError(Exception):
    """Bad usage or invalid input: reported on one line, exit status 2."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def _error(message: str, hint: str = "") -> None:
    print(f"{PROG}: error: {message}" + (f" (hint: {hint})" if hint else ""), file=sys.stderr)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


# -- parser ------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    # --home and --log-level are accepted before and after the subcommand; SUPPRESS keeps a
    # subcommand that did not see them from resetting what was given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--home",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="home directory (default: $ORCHESTRATOR_HOME or ~/.orchestrator)",
    )
    common.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=argparse.SUPPRESS,
        help="log to stderr from this level (serve: WARNING; other commands: quiet)",
    )
    skills_opt = argparse.ArgumentParser(add_help=False)
    skills_opt.add_argument(
        "--skills",
        metavar="DIR",
        nargs="+",
        action="extend",
        default=[],
        help="extra skill folders; later ones override earlier ones and the home",
    )
    json_opt = argparse.ArgumentParser(add_help=False)
    json_opt.add_argument("--json", action="store_true", help="print JSON")

    parser = argparse.ArgumentParser(
        prog=PROG,
        parents=[common],
        description="Publish Agent Skills folders (and, soon, pipelines and other MCP servers' tools) as MCP tools.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser(
        "serve",
        parents=[common, skills_opt],
        help="serve every skill as an MCP tool",
        description="Serve the catalogue over stdio (default) or streamable HTTP, with live "
        "reload of the skill folders.",
    )
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="HTTP port; 0 picks a free one (default: 8000)")
    serve.add_argument("--stateless", action="store_true", help="HTTP without sessions (no list_changed)")
    serve.add_argument(
        "--auth-token",
        metavar="T",
        default=None,
        help="bearer token every HTTP request must carry (default: $ORCHESTRATOR_TOKEN)",
    )

    sub.add_parser(
        "install",
        parents=[common],
        help="create or update the home directory",
        description="Create the home directory and add missing defaults; files you edited are kept.",
    )

    skills = sub.add_parser("skills", parents=[common], help="list, show or validate skills")
    skills_sub = skills.add_subparsers(dest="skills_command", metavar="ACTION", required=True)
    skills_sub.add_parser("list", parents=[common, skills_opt, json_opt], help="every skill and its source")
    show = skills_sub.add_parser("show", parents=[common, skills_opt, json_opt], help="one skill in full")
    show.add_argument("name", metavar="NAME")
    validate = skills_sub.add_parser(
        "validate",
        parents=[common, json_opt],
        help="check skill folders strictly; exit 2 on any error",
        description="Check one skill folder, or every skill folder in DIR, "
        "against the Agent Skills spec and skill.yaml; report every violation.",
    )
    validate.add_argument(
        "dir",
        metavar="DIR",
        nargs="?",
        help="a skill folder or a folder of them (default: the home's skills folder)",
    )

    call = sub.add_parser(
        "call",
        parents=[common, skills_opt, json_opt],
        help="call a published tool locally",
        description="Call a tool through an in-memory MCP client. VALUEs are parsed as JSON "
        "when they parse, else taken as strings.",
    )
    call.add_argument("tool", metavar="TOOL")
    call.add_argument(
        "--arg",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        dest="args",
        help="one argument (repeat for more)",
    )

    claude = sub.add_parser(
        "claude-config", parents=[common], help="the Claude Desktop config entry that starts this server"
    )
    claude.add_argument(
        "--write",
        action="store_true",
        help="merge it into Claude Desktop's config file (a .bak copy is kept)",
    )
    return parser


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not in 0-65535")
    return port


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


# -- entry point -------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the command line; always ends with `SystemExit` carrying the exit status."""
    args = _parser().parse_args(argv)
    serving = args.command == "serve"
    # Other commands report problems themselves; their log lines would only repeat them.
    _setup_logging(getattr(args, "log_level", None) or ("WARNING" if serving else "CRITICAL"))
    try:
        try:
            code = _COMMANDS[args.command](args)
        except BaseExceptionGroup as group:  # one failure inside a task group: report that one
            raise _sole(group) from None
    except UsageError as exc:
        _error(exc.message, exc.hint)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        code = EXIT_OK if serving else 130
    except BrokenPipeError:  # `orchestrator skills list | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    except Exception as exc:  # the top-level handler: a clean line, the traceback only in the log
        from skills import SkillsError

        if isinstance(exc, SkillsError):
            _error(exc.message, exc.hint)
            code = EXIT_USAGE
        elif isinstance(exc, OSError):
            _error(str(exc), "check the path and its permissions")
            code = EXIT_FAILED
        else:
            log.debug("unexpected error", exc_info=True)
            _error(f"internal error: {type(exc).__name__}: {exc}", "run with --log-level DEBUG for the traceback")
            code = EXIT_FAILED
    raise SystemExit(code)


def _sole(group: BaseExceptionGroup) -> BaseException:
    while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
        group = group.exceptions[0]
    return group


def _home(args: argparse.Namespace) -> Home:
    from skills import Home

    return Home.resolve(getattr(args, "home", None))


def _server(args: argparse.Namespace, *, watch: bool = False) -> OrchestratorServer:
    from .app import create_server

    for extra in getattr(args, "skills", []):
        if not Path(extra).expanduser().is_dir():
            raise UsageError(f"--skills {extra}: not a directory", "give a folder that holds skill folders")
    return create_server(home=_home(args), skill_dirs=getattr(args, "skills", []), watch=watch)


# -- serve -------------------------------------------------------------------------------------
def _cmd_serve(args: argparse.Namespace) -> int:
    token = args.auth_token or os.environ.get("ORCHESTRATOR_TOKEN") or None
    if args.transport == "stdio" and (args.stateless or args.auth_token):
        raise UsageError(
            "--stateless and --auth-token apply to --transport http only",
            "add --transport http, or drop them for stdio",
        )
    server = _server(args, watch=True)
    import anyio

    from .transports import serve_http, serve_stdio

    if args.transport == "stdio":
        anyio.run(_serve_stdio_until_interrupted, server, serve_stdio)
        return EXIT_OK
    _check_bindable(args.host, args.port)
    host = f"[{args.host}]" if ":" in args.host else args.host

    def ready(port: int) -> None:
        print(f"{PROG}: serving http://{host}:{port}/mcp", file=sys.stderr, flush=True)

    async def run() -> None:
        await serve_http(
            server, host=args.host, port=args.port, stateless=args.stateless, auth_token=token, ready=ready
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


async def _serve_stdio_until_interrupted(server: OrchestratorServer, serve: Any) -> None:
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
        await serve(server)
        tg.cancel_scope.cancel()


def _exit_now() -> None:
    sys.stderr.flush()
    os._exit(EXIT_OK)


# -- install -----------------------------------------------------------------------------------
def _cmd_install(args: argparse.Namespace) -> int:
    home = _home(args)
    report = home.install()
    print(f"{PROG} home: {home.root}")
    for label, items in (("created", report.created), ("updated", report.updated), ("kept", report.kept)):
        for rel in items:
            print(f"  {label:<8} {rel}")
    flag = f" --home {home.root}" if getattr(args, "home", None) else ""
    steps = [
        (f"{PROG} skills list{flag}", "the skills it publishes"),
        (f"{PROG} claude-config --write{flag}", "attach it to Claude Desktop (then restart Claude)"),
        (f"{PROG} serve{flag}", "or serve it yourself (--transport http for HTTP)"),
    ]
    inspector_file = Path(__file__).with_name("server.py")
    if inspector_file.is_file():
        env = f"ORCHESTRATOR_HOME={home.root} " if flag else ""
        steps.append((f"{env}mcp dev {inspector_file}", "or open it in the MCP Inspector"))
    width = max(len(command) for command, _ in steps)
    print("\nNext steps:")
    for command, why in steps:
        print(f"  {command:<{width}}  # {why}")
    return EXIT_OK


# -- skills ------------------------------------------------------------------------------------
def _cmd_skills(args: argparse.Namespace) -> int:
    actions = {"list": _skills_list, "show": _skills_show, "validate": _skills_validate}
    return actions[args.skills_command](args)


def _summary(skill: Skill, enabled: bool) -> dict[str, Any]:
    return {
        "name": skill.name,
        "title": skill.title,
        "kind": skill.kind,
        "source": skill.source,
        "enabled": enabled,
        "description": skill.description,
        "path": str(skill.root) if skill.root is not None else None,
    }


def _problem_dict(p: Problem) -> dict[str, Any]:
    return {"path": str(p.path), "field": p.field, "severity": p.severity, "message": p.message, "hint": p.hint}


def _problem_json(problem: LoadProblem) -> dict[str, Any]:
    return {
        "source": problem.source,
        "path": str(problem.path),
        "problems": [_problem_dict(p) for p in problem.problems],
    }


def _report_load_problems(problems: Sequence[LoadProblem]) -> None:
    if not problems:
        return
    print(f"{PROG}: {len(problems)} skill folder(s) not published:", file=sys.stderr)
    for problem in problems:
        for p in problem.problems:
            print(f"  {p}", file=sys.stderr)


def _skills_list(args: argparse.Namespace) -> int:
    server = _server(args)
    catalog = server.catalog
    rows = [(s, True) for s in catalog] + [(s, False) for s in catalog.disabled()]
    rows.sort(key=lambda row: row[0].name)
    problems = catalog.problems()
    if args.json:
        _print_json({"skills": [_summary(s, on) for s, on in rows], "problems": [_problem_json(p) for p in problems]})
    else:
        import shutil

        width = shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else 0
        w_name = max((len(s.name) for s, _ in rows), default=4)
        w_kind = max((len(s.kind) for s, _ in rows), default=4)
        w_src = max((len(s.source) for s, _ in rows), default=6)
        for skill, enabled in rows:
            line = (skill.description.strip().splitlines() or [""])[0]
            if not enabled:
                line = f"[disabled] {line}"
            text = f"{skill.name:<{w_name}}  {skill.kind:<{w_kind}}  {skill.source:<{w_src}}  {line}"
            if width and len(text) > width:
                text = text[: max(width - 1, 20)] + "…"
            print(text)
        if not rows:
            print("no skills found")
    _report_load_problems(problems)
    return EXIT_OK


def _skills_show(args: argparse.Namespace) -> int:
    server = _server(args)
    catalog = server.catalog
    skill = catalog.find(args.name)
    enabled = skill is not None
    if skill is None:
        skill = next((s for s in catalog.disabled() if s.name == args.name), None)
    if skill is None:
        _not_found(server, args.name)
    info = _summary(skill, enabled) | {
        "annotations": skill.annotations,
        "timeout": getattr(skill, "timeout", None),
        "input_schema": skill.input_schema,
        "output_schema": skill.output_schema,
        "files": skill.files(),
        "warnings": [str(w) for w in getattr(skill, "warnings", [])],
        "body": skill.body(),
    }
    if args.json:
        _print_json(info)
        return EXIT_OK
    for key in ("name", "title", "kind", "source", "path", "enabled", "timeout", "description"):
        value = info[key]
        if value is not None:
            print(f"{key + ':':<13}{'yes' if value is True else 'no' if value is False else value}")
    if info["annotations"]:
        print(f"{'annotations:':<13}{json.dumps(info['annotations'])}")
    for key, label in (("input_schema", "input schema"), ("output_schema", "output schema")):
        if info[key] is not None:
            print(f"\n{label}:")
            print("  " + json.dumps(info[key], indent=2, ensure_ascii=False).replace("\n", "\n  "))
    print("\nfiles:" + "".join(f"\n  {f}" for f in info["files"]))
    for warning in info["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    print("\n--- SKILL.md body ---\n" + info["body"].rstrip())
    return EXIT_OK


def _not_found(server: OrchestratorServer, name: str) -> NoReturn:
    """Raise the clearest error for a name the catalogue does not publish."""
    broken = [p for p in server.catalog.problems() if p.path.name == name]
    if broken:
        _report_load_problems(broken)
        raise UsageError(f"skill '{name}' could not be loaded", "fix the problems listed above")
    err = server.catalog.unknown(name)
    raise UsageError(err.message, err.hint)


def _skill_folders(root: Path) -> list[Path]:
    if (root / "SKILL.md").is_file() or (root / "skill.yaml").is_file():
        return [root]
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir()
        and not p.name.startswith((".", "_"))
        and any((p / f).is_file() for f in ("SKILL.md", "skill.yaml"))
    )


def _skills_validate(args: argparse.Namespace) -> int:
    from skills import RESERVED_NAMES, Problem, check_folder

    explicit = args.dir is not None
    root = Path(args.dir).expanduser() if explicit else _home(args).skills_dir
    if not root.is_dir():
        if explicit:
            raise UsageError(f"{root} is not a directory", "give a skill folder or a folder of skill folders")
        folders: list[Path] = []
    else:
        folders = _skill_folders(root)
    if explicit and not folders:
        raise UsageError(f"no skill folder in {root}", "a skill folder holds a SKILL.md")
    results = []
    for folder in folders:
        front, _, problems = check_folder(folder, strict=True)
        if front is not None and front.name in RESERVED_NAMES:
            problems.append(
                Problem(
                    folder / "SKILL.md",
                    f"'{front.name}' is the name of a meta tool of the server",
                    field="name",
                    hint="rename the skill",
                )
            )
        results.append((folder, front.name if front is not None else folder.name, problems))
    errors = sum(p.severity == "error" for _, _, ps in results for p in ps)
    warnings = sum(p.severity != "error" for _, _, ps in results for p in ps)
    if args.json:
        _print_json(
            {
                "ok": errors == 0,
                "errors": errors,
                "warnings": warnings,
                "folders": [
                    {
                        "path": str(folder),
                        "name": name,
                        "ok": not any(p.severity == "error" for p in ps),
                        "problems": [_problem_dict(p) for p in ps],
                    }
                    for folder, name, ps in results
                ],
            }
        )
    else:
        for folder, _, problems in results:
            if not problems:
                print(f"ok: {folder}")
            for problem in problems:
                print(problem)
        if not folders:
            print(f"no skill folders in {root}")
        bad = sum(any(p.severity == "error" for p in ps) for _, _, ps in results)
        print(
            f"{len(folders)} skill folder(s) checked: {bad} invalid, {errors} error(s), {warnings} warning(s)",
            file=sys.stderr,
        )
    return EXIT_USAGE if errors else EXIT_OK


# -- call --------------------------------------------------------------------------------------
def _parse_args(pairs: Sequence[str]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(
                f"bad --arg '{pair}': expected KEY=VALUE",
                "e.g. --arg path=src --arg limit=5 --arg 'tags=[\"a\"]'",
            )
        if key in arguments:
            raise UsageError(f"--arg {key} is given twice", "give each argument once")
        try:
            arguments[key] = json.loads(raw)
        except ValueError:
            arguments[key] = raw
    return arguments


def _cmd_call(args: argparse.Namespace) -> int:
    arguments = _parse_args(args.args)
    server = _server(args)
    import anyio

    return anyio.run(_call, server, args.tool, arguments, args.json)


async def _call(server: OrchestratorServer, name: str, arguments: dict[str, Any], as_json: bool) -> int:
    from mcp import Client
    from mcp_types import LoggingMessageNotificationParams

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        data = params.data if isinstance(params.data, str) else json.dumps(params.data, default=str)
        print(f"{PROG}: {params.level}: {params.logger + ': ' if params.logger else ''}{data}", file=sys.stderr)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        done = f"{progress:g}/{total:g}" if total else f"{progress:g}"
        print(f"{PROG}: [{done}] {message or ''}".rstrip(), file=sys.stderr)

    async with Client(server, logging_callback=on_log, log_level="info") as client:
        names: set[str] = set()
        cursor = None
        while True:
            listed = await client.list_tools(cursor=cursor)
            names.update(tool.name for tool in listed.tools)
            cursor = listed.next_cursor
            if not cursor:
                break
        result = None
        if name in names:
            result = await client.call_tool(name, arguments, progress_callback=on_progress)
    if result is None:  # raised out here, not inside the client's task group
        _not_found(server, name)
    return _print_result(result, as_json)


def _print_result(result: CallToolResult, as_json: bool) -> int:
    texts = []
    for item in result.content:
        kind = getattr(item, "type", "")
        if kind == "text":
            texts.append(item.text)  # type: ignore[union-attr]
        elif kind in ("image", "audio"):
            texts.append(f"[{kind} {item.mime_type}, {len(item.data)} base64 chars]")  # type: ignore[union-attr]
        elif kind == "resource_link":
            texts.append(f"[resource {item.uri}]")  # type: ignore[union-attr]
        elif kind == "resource":
            inner = item.resource  # type: ignore[union-attr]
            texts.append(getattr(inner, "text", None) or f"[resource {inner.uri}]")
    text = "\n".join(texts)
    code = EXIT_OK
    if result.is_error:
        code = EXIT_USAGE if text.startswith("invalid arguments for") else EXIT_FAILED
    if as_json:
        _print_json(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    elif result.is_error:
        message, _, hint = text.partition("\nHint: ")
        _error(message.strip() or "the tool failed without a message", hint.strip())
    elif result.structured_content is not None:
        _print_json(result.structured_content)
    else:
        print(text)
    return code


# -- claude-config -----------------------------------------------------------------------------
def _cmd_claude_config(args: argparse.Namespace) -> int:
    from ._claude import SERVER_KEY, ConfigError, config_path, merge_entry, server_entry

    entry = server_entry(getattr(args, "home", None))
    if not args.write:
        _print_json({"mcpServers": {SERVER_KEY: entry}})
        print(f"{PROG}: add this to {config_path()}, or run `{PROG} claude-config --write`", file=sys.stderr)
        return EXIT_OK
    path = config_path()
    try:
        changed, backup = merge_entry(path, entry)
    except ConfigError as exc:
        raise UsageError(exc.message, exc.hint) from None
    if not changed:
        print(f"{path}: the '{SERVER_KEY}' entry is already up to date")
        return EXIT_OK
    print(f"{path}: wrote the '{SERVER_KEY}' entry" + (f" (previous file saved as {backup})" if backup else ""))
    print("Restart Claude Desktop to load it.")
    return EXIT_OK


_COMMANDS = {
    "serve": _cmd_serve,
    "install": _cmd_install,
    "skills": _cmd_skills,
    "call": _cmd_call,
    "claude-config": _cmd_claude_config,
}
