"""`orchestrator servers list|test NAME`: the upstream MCP servers of servers.json (SPEC 5).

`list` connects to every configured server (concurrently, each bounded by --timeout) and
reports its status, tool count and last error; `test NAME` connects to one, lists its tools
and reports. Neither starts our own server.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._common import EXIT_FAILED, EXIT_OK, Parents, UsageError, home, print_json

DEFAULT_TIMEOUT = 60.0


def add_parsers(sub: Any, parents: Parents) -> None:
    servers = sub.add_parser("servers", parents=[parents.common], help="upstream MCP servers: list or test")
    actions = servers.add_subparsers(dest="servers_command", metavar="ACTION", required=True)
    for name, handler, text in (
        ("list", _list, "every configured server: status, tool count, last error"),
        ("test", _test, "connect to one server, list its tools, report"),
    ):
        action = actions.add_parser(name, parents=[parents.common, parents.json], help=text)
        if name == "test":
            action.add_argument("name", metavar="NAME", help="the server's key in servers.json")
        action.add_argument("--servers", metavar="FILE", help="servers file (default: <home>/servers.json)")
        action.add_argument(
            "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to wait for each server to connect"
        )
        action.set_defaults(handler=handler)


def _configs(args: argparse.Namespace) -> tuple[list[Any], list[Any], Path]:
    from adapters import load_servers_config

    path = Path(args.servers).expanduser() if args.servers else home(args).servers_file
    if args.servers and not path.is_file():
        raise UsageError(f"--servers {args.servers}: no such file", "give a JSON file with an mcpServers object")
    configs, problems = load_servers_config(path)
    return configs, problems, path


def _list(args: argparse.Namespace) -> int:
    import anyio

    from adapters import test_server

    configs, problems, path = _configs(args)
    reports: dict[str, dict[str, Any]] = {}

    async def probe(config: Any) -> None:
        reports[config.name] = await test_server(config, timeout=args.timeout)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for config in configs:
                if config.enabled:
                    tg.start_soon(probe, config)

    anyio.run(main)
    rows: list[dict[str, Any]] = []
    for config in configs:
        report = reports.get(config.name)
        if report is None:
            rows.append({"name": config.name, "status": "disabled", "tools": 0, "last_error": None})
        else:
            status = "ok" if report.get("ok") else "failed"
            rows.append(
                {
                    "name": config.name,
                    "status": status,
                    "tools": len(report.get("tools") or []),
                    "target": report.get("target"),
                    "last_error": report.get("error"),
                }
            )
    if args.json:
        print_json({"file": str(path), "servers": rows, "problems": [str(p.error) for p in problems]})
    else:
        if not rows:
            print(f"no servers configured in {path}", file=sys.stderr)
        for row in rows:
            error = f"  last error: {row['last_error']}" if row.get("last_error") else ""
            print(f"{row['name']:<20} {row['status']:<9} {row['tools']:>3} tools{error}")
        for problem in problems:
            print(f"{problem.error}", file=sys.stderr)
    return EXIT_OK


def _test(args: argparse.Namespace) -> int:
    import anyio

    from adapters import test_server

    configs, problems, path = _configs(args)
    config = next((c for c in configs if c.name == args.name), None)
    if config is None:
        broken = [str(p.error) for p in problems if getattr(p.error, "server", None) == args.name]
        if broken:
            raise UsageError(f"server '{args.name}' is misconfigured: {'; '.join(broken)}", f"fix it in {path}")
        names = ", ".join(c.name for c in configs) or "(none)"
        raise UsageError(f"no server '{args.name}' in {path}", f"configured: {names}")
    report = anyio.run(lambda: test_server(config, timeout=args.timeout))
    if args.json:
        print_json(report)
    else:
        state = "ok" if report.get("ok") else "FAILED"
        print(f"{config.name}: {state} ({report.get('target')}, {report.get('seconds', 0):.2f}s)")
        if report.get("error"):
            print(f"  error: {report['error']}")
        tools: list[dict[str, Any]] = report.get("tools") or []
        for tool in tools:
            first_line = (tool.get("description") or "").strip().splitlines()[:1]
            print(f"  {tool['name']:<40} {first_line[0][:70] if first_line else ''}")
        excluded: list[str] = report.get("excluded") or []
        for name in excluded:
            print(f"  (excluded) {name}")
    return EXIT_OK if report.get("ok") else EXIT_FAILED
