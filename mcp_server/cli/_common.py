"""What every command shares: exit codes, the one-line error format, JSON output, the home.

Nothing here imports more than the standard library at module level: `orchestrator serve`
over stdio is benchmarked, so each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, cast

if TYPE_CHECKING:
    from skills import Home, LoadProblem

    from ..app import OrchestratorServer


log = logging.getLogger("mcp_server.cli")

PROG = "orchestrator"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130
"""128 + SIGINT, as shells report a command stopped by Ctrl-C."""


class UsageError(Exception):
    """Bad usage or invalid input: reported on one line, exit status 2."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class Parents(NamedTuple):
    """Option groups shared by several subcommands (argparse parents)."""

    common: argparse.ArgumentParser
    """--home and --log-level, accepted before and after the subcommand."""
    skills: argparse.ArgumentParser
    """--skills DIR ...: extra skill folders."""
    json: argparse.ArgumentParser
    """--json."""
    servers: argparse.ArgumentParser
    """--servers FILE and --connect-timeout: the upstream MCP servers a command may need."""
    scale: argparse.ArgumentParser
    """--state URL, --queue URL, --artifacts DIR: the distributed mode (`_scale`)."""


def error(message: str, hint: str = "") -> None:
    """Report a failure as `orchestrator: error: ... (hint: ...)` on stderr."""
    print(f"{PROG}: error: {message}" + (f" (hint: {hint})" if hint else ""), file=sys.stderr)


def sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one failure inside (nested) task groups, to report it as if no group were there."""
    inner = group.exceptions
    if len(inner) != 1:
        return group
    only = inner[0]
    if isinstance(only, BaseExceptionGroup):
        return sole_exception(cast("BaseExceptionGroup[BaseException]", only))
    return only


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value


def home(args: argparse.Namespace) -> Home:
    from skills import Home

    return Home.resolve(getattr(args, "home", None))


def parse_pairs(pairs: Sequence[str], flag: str) -> dict[str, Any]:
    """`KEY=VALUE` options as arguments: values are JSON when they parse, else strings (SPEC 8)."""
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(
                f"bad {flag} '{pair}': expected KEY=VALUE",
                f"e.g. {flag} path=src {flag} limit=5 {flag} 'tags=[\"a\"]'",
            )
        if key in arguments:
            raise UsageError(f"{flag} {key} is given twice", "give each argument once")
        from skills.core.jsontext import load_json  # not at module level: the CLI starts without the skills package

        try:
            arguments[key] = load_json(raw)  # bounded: a deeply nested value stays text
        except ValueError:
            arguments[key] = raw
    return arguments


def report_load_problems(problems: Sequence[LoadProblem]) -> None:
    if not problems:
        return
    print(f"{PROG}: {len(problems)} skill folder(s) not published:", file=sys.stderr)
    for problem in problems:
        for p in problem.problems:
            print(f"  {p}", file=sys.stderr)


def not_found(server: OrchestratorServer, name: str) -> NoReturn:
    """Raise the clearest error for a name the catalogue does not publish."""
    broken = [p for p in server.catalog.problems() if p.path.name == name]
    if broken:
        report_load_problems(broken)
        raise UsageError(f"skill '{name}' could not be loaded", "fix the problems listed above")
    err = server.catalog.unknown(name)
    raise UsageError(err.message, err.hint)
