"""The upstream MCP servers a command needs, connected for the command's duration.

`serve` connects every server of servers.json (or `--servers FILE`) in the background. Any
other command sees the same tools by connecting only the servers its target needs (which
ones: `mcp_server._upstreams.needed_servers`), waiting at most `--connect-timeout` seconds
for them, and stopping them and their child processes when it ends. A command that needs
none (a folder skill, a pipeline of folder skills) starts none and waits for nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

from ._common import PROG, sole_exception

if TYPE_CHECKING:
    from adapters import MCPSkillAdapter

    from ..app import OrchestratorServer

T = TypeVar("T")

DEFAULT_CONNECT_TIMEOUT = 60.0
"""Seconds a command waits for the upstream servers it needs (a first `uvx` run downloads)."""


def add_options(parser: argparse.ArgumentParser) -> None:
    """`--servers FILE` and `--connect-timeout SECONDS` (the `servers` option group)."""
    parser.add_argument(
        "--servers",
        metavar="FILE",
        default=None,
        help="MCP servers to import, in Claude Desktop's mcpServers format (default: <home>/servers.json); "
        "only the ones the command needs are started",
    )
    parser.add_argument(
        "--connect-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=DEFAULT_CONNECT_TIMEOUT,
        help=f"how long to wait for those servers to connect (default: {DEFAULT_CONNECT_TIMEOUT:g})",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{value:g} is not in (0, 3600]")
    return value


@asynccontextmanager
async def connected(
    server: OrchestratorServer, adapters: Sequence[MCPSkillAdapter], timeout: float
) -> AsyncGenerator[dict[str, str]]:
    """Keep `adapters` connected while inside; yields why each that did not connect did not.

    Waits (at most `timeout` seconds) until each one has connected or failed once: a server
    that fails is not retried here, the command reports it. The Catalog and the pipelines are
    brought up to date with the imported tools before the body runs.
    """
    if not adapters:
        yield {}
        return
    import anyio

    try:
        async with anyio.create_task_group() as tg:
            for adapter in adapters:
                tg.start_soon(adapter.run)
            with anyio.move_on_after(timeout):
                for adapter in adapters:
                    await adapter.wait_for("connected", "retrying", "disabled", "closed")
            failures = {a.name: _why(a, timeout) for a in adapters if a.state != "connected"}
            if server.servers is not None:
                await server.catalog.refresh([server.servers])
            if server.pipelines is not None:  # pipelines calling the imported tools verify now
                await server.catalog.refresh(list(server.pipelines.sources))
            try:
                yield failures
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # the body's own error (adapters never raise): as if no group were here
        raise sole_exception(group) from None


@asynccontextmanager
async def required(
    server: OrchestratorServer, adapters: Sequence[MCPSkillAdapter], timeout: float
) -> AsyncGenerator[None]:
    """`connected`, failing with `UpstreamUnavailableError` (the run fails, exit 1) if one did not connect."""
    async with connected(server, adapters, timeout) as failures:
        if failures:
            from adapters import UpstreamUnavailableError

            message, hint = describe(failures)
            raise UpstreamUnavailableError(next(iter(failures)), message, hint=hint)
        yield


def with_upstreams(
    server: OrchestratorServer,
    adapters: Sequence[MCPSkillAdapter],
    timeout: float,
    work: Callable[[dict[str, str]], T],
) -> T:
    """`work(failures)` while `adapters` are connected; without an event loop when none is needed."""
    if not adapters:
        return work({})
    import anyio

    async def main() -> T:
        async with connected(server, adapters, timeout) as failures:
            return work(failures)

    return anyio.run(main)


def describe(failures: dict[str, str]) -> tuple[str, str]:
    """The message and hint for upstream servers that did not connect."""
    parts = "; ".join(f"'{name}': {why}" for name, why in failures.items())
    first = next(iter(failures))
    return (
        f"upstream server{'s' if len(failures) > 1 else ''} did not connect: {parts}",
        f"`{PROG} servers test {first}` shows what it says; fix its entry in servers.json or raise --connect-timeout",
    )


def report(failures: dict[str, str]) -> None:
    """One stderr line per upstream server that did not connect (commands that go on without it)."""
    for name, why in failures.items():
        print(f"{PROG}: upstream server '{name}' did not connect: {why}", file=sys.stderr)


def _why(adapter: MCPSkillAdapter, timeout: float) -> str:
    if adapter.state == "starting":
        return f"no answer within {timeout:g}s" + (f" (last error: {adapter.last_error})" if adapter.last_error else "")
    if adapter.state == "disabled":
        return "disabled in servers.json"
    return adapter.last_error or f"not connected ({adapter.state})"
