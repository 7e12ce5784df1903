"""The `orchestrator` command line (SPEC 8).

argparse, not a framework: `orchestrator serve` over stdio is benchmarked against a bare
`MCPServer`, so each command imports only what it needs, when it runs; the modules of this
package import nothing but the standard library at load time. Exit status: 0 success, 1 the
tool or pipeline failed, 2 bad usage or invalid input, 130 interrupted. Errors go to stderr as
`orchestrator: error: ... (hint: ...)`, never as a traceback.

One private module per command group, each adding its subparsers with `add_parsers` and
naming its handler with `set_defaults(handler=...)`:

    _serve      serve
    _setup      install, claude-config
    _skills     skills list|show|validate
    _call       call
    _pipelines  pipelines list|show|validate|graph
    _run        run (and the run driver `runs resume` shares)
    _runs       runs list|show|resume
    _doctor     doctor
    _progress   the live progress display of a run
    _upstreams  the upstream MCP servers a command needs (--servers, --connect-timeout)
    _docs       docs: the user reference of docs/, from the checkout or the installed copy
    _scale      --state/--queue/--artifacts (the distributed mode) and worker
    _ui         ui: the run viewer for stdio users
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import _call, _docs, _doctor, _pipelines, _run, _runs, _scale, _serve, _servers, _setup, _skills, _ui, _upstreams
from ._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    Parents,
    UsageError,
    error,
    log,
    sole_exception,
)

__all__ = ["main"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


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
    # One folder per flag: `nargs="+"` would swallow the positional after it (`call --skills D tool`).
    skills_opt.add_argument(
        "--skills",
        metavar="DIR",
        action="append",
        default=[],
        help="an extra skill folder (repeat for more); later ones override earlier ones and the home",
    )
    json_opt = argparse.ArgumentParser(add_help=False)
    json_opt.add_argument("--json", action="store_true", help="print JSON")
    servers_opt = argparse.ArgumentParser(add_help=False)
    _upstreams.add_options(servers_opt)
    scale_opt = argparse.ArgumentParser(add_help=False)
    _scale.add_options(scale_opt)
    parents = Parents(common=common, skills=skills_opt, json=json_opt, servers=servers_opt, scale=scale_opt)

    parser = argparse.ArgumentParser(
        prog=PROG,
        parents=[common],
        description="Publish Agent Skills folders, YAML pipelines and other MCP servers' tools as MCP tools.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_parsers in (
        _serve.add_parsers,
        _setup.add_install_parser,
        _skills.add_parsers,
        _pipelines.add_parsers,
        _run.add_parsers,
        _runs.add_parsers,
        _servers.add_parsers,
        _call.add_parsers,
        _setup.add_claude_parser,
        _doctor.add_parsers,
        _docs.add_parsers,
        _scale.add_parsers,
        _ui.add_parsers,
    ):
        add_parsers(sub, parents)
    return parser


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the command line; always ends with `SystemExit` carrying the exit status."""
    args = _parser().parse_args(argv)
    serving = args.command == "serve"
    # Other commands report problems themselves; their log lines would only repeat them. A worker
    # has no one else to tell (a message it refused, a run that failed): it logs like a server.
    service = serving or args.command == "worker"
    _setup_logging(getattr(args, "log_level", None) or ("WARNING" if service else "CRITICAL"))
    try:
        try:
            code = args.handler(args)
        except BaseExceptionGroup as group:  # one failure inside a task group: report that one
            raise sole_exception(group) from None
    except UsageError as exc:
        error(exc.message, exc.hint)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        code = EXIT_OK if serving else EXIT_INTERRUPTED
    except BrokenPipeError:  # `orchestrator skills list | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    except Exception as exc:  # the top-level handler: a clean line, the traceback only in the log
        code = _report(exc)
    tracing = sys.modules.get("skills.core.tracing")  # loaded by whatever ran: export its spans before exiting
    if tracing is not None:
        tracing.flush()
    raise SystemExit(code)


def _report(exc: Exception) -> int:
    """Report an exception no command handled; return the exit status."""
    from pipelines.errors import PipelineError, VerificationError
    from skills import SkillsError

    if isinstance(exc, VerificationError):  # a pipeline file with problems: every one, then the verdict
        for issue in exc.issues:
            print(issue, file=sys.stderr)
    if isinstance(exc, (SkillsError, PipelineError)):  # the user's mistake, told with its hint
        error(exc.message, exc.hint)
        return EXIT_USAGE
    if isinstance(exc, OSError):
        error(str(exc), "check the path and its permissions")
        return EXIT_FAILED
    log.debug("unexpected error", exc_info=exc)
    error(f"internal error: {type(exc).__name__}: {exc}", "run with --log-level DEBUG for the traceback")
    return EXIT_FAILED
