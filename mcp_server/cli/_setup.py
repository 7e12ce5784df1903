"""`orchestrator install` and `orchestrator claude-config`: setting up the home and an MCP host
(Claude Desktop by default; Claude Code, Cursor and VS Code with `--client`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._allow import add_allow_dir, allowed_dirs
from ._common import EXIT_OK, PROG, Parents, UsageError, home, print_json


def add_install_parser(sub: Any, parents: Parents) -> None:
    install = sub.add_parser(
        "install",
        parents=[parents.common],
        help="create or update the home directory",
        description="Create the home directory and add missing defaults; files you edited are kept.",
    )
    install.set_defaults(handler=_cmd_install)


def add_claude_parser(sub: Any, parents: Parents) -> None:
    claude = sub.add_parser(
        "claude-config",
        parents=[parents.common],
        help="the config entry that starts this server, for Claude Desktop, Claude Code, Cursor or VS Code",
        description="Print (or --write) the entry an MCP host needs to start this server.",
    )
    claude.add_argument(
        "--client",
        choices=("claude-desktop", "claude-code", "cursor", "vscode"),
        default="claude-desktop",
        help="the host: claude-desktop (default; its claude_desktop_config.json), claude-code (.mcp.json of "
        "this project), cursor (~/.cursor/mcp.json), vscode (.vscode/mcp.json of this workspace)",
    )
    claude.add_argument(
        "--write",
        action="store_true",
        help="merge it into the host's config file (a .bak copy is kept)",
    )
    # Claude Desktop starts servers in `/`, where the default root (the working directory) is none.
    add_allow_dir(claude)
    claude.set_defaults(handler=_cmd_claude_config)


def _cmd_install(args: argparse.Namespace) -> int:
    the_home = home(args)
    report = the_home.install()
    print(f"{PROG} home: {the_home.root}")
    for label, items in (("created", report.created), ("updated", report.updated), ("kept", report.kept)):
        for rel in items:
            print(f"  {label:<8} {rel}")
    flag = f" --home {the_home.root}" if getattr(args, "home", None) else ""
    steps = [
        (f"{PROG} skills list{flag}", "the skills it publishes"),
        (f"{PROG} claude-config --write{flag}", "attach it to Claude Desktop (then restart Claude)"),
        (f"{PROG} serve{flag}", "or serve it yourself (--transport http for HTTP)"),
    ]
    inspector_file = Path(__file__).parent.parent / "server.py"
    if inspector_file.is_file():
        env = f"ORCHESTRATOR_HOME={the_home.root} " if flag else ""
        steps.append((f"{env}mcp dev {inspector_file}", "or open it in the MCP Inspector"))
    width = max(len(command) for command, _ in steps)
    print("\nNext steps:")
    for command, why in steps:
        print(f"  {command:<{width}}  # {why}")
    return EXIT_OK


def _cmd_claude_config(args: argparse.Namespace) -> int:
    from .._claude import HOSTS, SERVER_KEY, ConfigError, add_command, host_entry, merge_entry, server_entry

    name = args.client
    host = HOSTS[name]
    base = server_entry(getattr(args, "home", None), allow_dirs=allowed_dirs(args) or ())
    entry = host_entry(name, base)
    path = host.path(name)
    if not args.write:
        print_json({host.servers_key: {SERVER_KEY: entry}})
        flag = "" if name == "claude-desktop" else f" --client {name}"
        print(f"{PROG}: add this to {path}, or run `{PROG} claude-config{flag} --write`", file=sys.stderr)
        if name == "claude-code":
            print(f"{PROG}: or register it with: {add_command(base)}", file=sys.stderr)
        if name == "claude-desktop" and not args.allow_dirs:
            print(
                f"{PROG}: Claude Desktop starts it in /, so file skills may read only the folders its roots "
                "name; add `--allow-dir DIR` (repeatable) for the projects they should read",
                file=sys.stderr,
            )
        return EXIT_OK
    try:
        changed, backup = merge_entry(path, entry, servers_key=host.servers_key, label=host.label)
    except ConfigError as exc:
        raise UsageError(exc.message, exc.hint) from None
    if not changed:
        print(f"{path}: the '{SERVER_KEY}' entry is already up to date")
        return EXIT_OK
    print(f"{path}: wrote the '{SERVER_KEY}' entry" + (f" (previous file saved as {backup})" if backup else ""))
    print(host.after)
    return EXIT_OK
