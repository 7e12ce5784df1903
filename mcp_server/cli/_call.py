"""`orchestrator call TOOL --arg k=v`: call any published tool through an in-memory MCP client."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._results import envelope_of
from ._allow import add_allow_dir
from ._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, PROG, Parents, error, not_found, parse_pairs, print_json
from ._server import server

if TYPE_CHECKING:
    from mcp_types import CallToolResult

    from adapters import MCPSkillAdapter

    from ..app import OrchestratorServer


def add_parsers(sub: Any, parents: Parents) -> None:
    call = sub.add_parser(
        "call",
        parents=[parents.common, parents.skills, parents.json, parents.servers],
        help="call a published tool locally",
        description="Call any tool the server publishes (a skill, a pipeline, an imported tool, a meta tool) "
        "through an in-memory MCP client; an imported tool's upstream server is started for the call. "
        "VALUEs are parsed as JSON when they parse, else taken as strings.",
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
    add_allow_dir(call)
    call.set_defaults(handler=_cmd_call)


def _cmd_call(args: argparse.Namespace) -> int:
    arguments = parse_pairs(args.args, "--arg")
    orchestrator = server(args)
    orchestrator.handle_after = 0  # the command waits for the call itself: no run handle
    import anyio

    from .._upstreams import needed_servers

    needs = needed_servers(orchestrator, [args.tool])  # none for a folder skill: it never waits
    return anyio.run(_call_with, orchestrator, args.tool, arguments, args.json, needs, args.connect_timeout)


async def _call_with(
    orchestrator: OrchestratorServer,
    name: str,
    arguments: dict[str, Any],
    as_json: bool,
    needs: list[MCPSkillAdapter],
    timeout: float,
) -> int:
    from ._upstreams import connected, describe

    async with connected(orchestrator, needs, timeout) as failures:
        if failures and orchestrator.catalog.find(name) is None:
            error(*describe(failures))
            return EXIT_FAILED
        return await _call(orchestrator, name, arguments, as_json)


async def _call(orchestrator: OrchestratorServer, name: str, arguments: dict[str, Any], as_json: bool) -> int:
    from mcp import Client
    from mcp_types import LoggingMessageNotificationParams

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        data = params.data if isinstance(params.data, str) else json.dumps(params.data, default=str)
        print(f"{PROG}: {params.level}: {params.logger + ': ' if params.logger else ''}{data}", file=sys.stderr)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        done = f"{progress:g}/{total:g}" if total else f"{progress:g}"
        print(f"{PROG}: [{done}] {message or ''}".rstrip(), file=sys.stderr)

    async with Client(orchestrator, logging_callback=on_log, log_level="info") as client:
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
        not_found(orchestrator, name)
    skill = orchestrator.catalog.find(name)
    return _print_result(result, as_json, skill.root if skill is not None else None)


def _print_result(result: CallToolResult, as_json: bool, root: Path | None = None) -> int:
    from mcp_types import AudioContent, ImageContent, ResourceLink, TextContent

    texts: list[str] = []
    for item in result.content:
        if isinstance(item, TextContent):
            texts.append(item.text)
        elif isinstance(item, ImageContent | AudioContent):
            texts.append(f"[{item.type} {item.mime_type}, {len(item.data)} base64 chars]")
        elif isinstance(item, ResourceLink):
            texts.append(f"[resource {item.uri}]")
        else:  # an EmbeddedResource
            inner = item.resource
            texts.append(getattr(inner, "text", None) or f"[resource {inner.uri}]")
    text = "\n".join(texts)
    code = EXIT_OK
    failure = envelope_of(result)
    if result.is_error:
        usage = failure is not None and failure["type"] in ("invalid_arguments", "limit_exceeded", "unknown_tool")
        code = EXIT_USAGE if usage else EXIT_FAILED
    if as_json:
        print_json(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    elif failure is not None:
        where, hint = failure["where"], failure["hint"]
        place = root / where.rpartition(":")[0] if root is not None and where else None
        if (
            root is not None and place is not None and place.is_file()
        ):  # a line of the skill's own code: name the file in full
            where = f"at {root / where}"
            hint = "run again with --log-level DEBUG for the full traceback"
        error(f"{failure['message']}" + (f" ({where})" if where else ""), hint)
    elif result.is_error:  # an imported tool's own error passes through as it came
        error(text.strip() or "the tool failed without a message", "")
    elif result.structured_content is not None:
        print_json(result.structured_content)
    else:
        print(text)
    return code
