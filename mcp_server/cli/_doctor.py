"""`orchestrator doctor [--json]`: what this installation is and what it can do, checked for real.

Versions, the home, whether skills' subprocesses can be confined (a real bubblewrap run, and
why not when they cannot), what file skills may read by default, the state backend and which
model providers are configured. Never prints a secret: an API key is reported as set or not. A
queue off this machine without a password is reported as open to whoever reaches it.

The upstream MCP servers of servers.json are started (each given `--connect-timeout` seconds,
5 by default) before the pipelines are judged: a pipeline calling an imported tool is published
once its server connects, and is *pending* (not broken) while that server is still connecting.
Exit status 1 when a check fails (the state or the queue unreachable, an upstream server that
failed, a skill folder or pipeline not published for an error), else 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._allow import add_allow_dir, allowed_dirs
from ._common import EXIT_FAILED, EXIT_OK, PROG, Parents, home, print_json

if TYPE_CHECKING:
    from ..app import OrchestratorServer

_PACKAGES = ("mcp-orchestrator", "mcp", "langgraph", "anthropic", "pydantic", "anyio")
CONNECT_TIMEOUT = 5.0
"""Seconds doctor gives the upstream servers to connect (a server still starting then is pending)."""


def add_parsers(sub: Any, parents: Parents) -> None:
    doctor = sub.add_parser(
        "doctor",
        parents=[parents.common, parents.json, parents.skills, parents.scale],
        help="versions, home, isolation, state, providers, skills (name clashes, skipped folders)",
        description="Check this installation: versions, the home directory, whether skills' subprocesses "
        "can be confined (bubblewrap) and why not, what file skills may read, the state backend and the "
        "model providers configured.",
    )
    add_allow_dir(doctor)
    from ._upstreams import _seconds  # pyright: ignore[reportPrivateUsage]  # the same check as every command's

    doctor.add_argument(
        "--servers",
        metavar="FILE",
        default=None,
        help="MCP servers to import, in Claude Desktop's mcpServers format (default: <home>/servers.json); "
        "each is started to see whether it connects",
    )
    doctor.add_argument(
        "--connect-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=CONNECT_TIMEOUT,
        help=f"how long each upstream server may take to connect (default: {CONNECT_TIMEOUT:g}); one still "
        "connecting then is reported as pending, with the pipelines that wait for it",
    )
    doctor.set_defaults(handler=_cmd_doctor)


def _cmd_doctor(args: argparse.Namespace) -> int:
    report = diagnose(args)
    status = EXIT_FAILED if report["failed"] else EXIT_OK
    if args.json:
        print_json(report)
        return status
    iso, files = report["isolation"], report["files"]
    lines = [
        f"{PROG} {report['versions']['mcp-orchestrator']} (python {report['python']['version']}, "
        f"{report['python']['platform']})",
        "versions:   " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if k != "mcp-orchestrator"),
        f"home:       {report['home']['path']}" + ("" if report["home"]["exists"] else " (not created yet)"),
        "isolation:  " + (f"confined: {iso['summary']}" if iso["available"] else f"UNAVAILABLE: {iso['reason']}"),
    ]
    if iso["available"]:
        syscalls = iso["syscall_filter"]
        lines.append(
            f"            disk: {iso['disk_mb']} MiB per call's work directory; system calls: "
            + ("namespaces, mounts and other kernel surface refused (seccomp)" if syscalls["available"] else "")
            + ("" if syscalls["available"] else f"NO FILTER: {syscalls['reason']}")
        )
    else:
        lines.append(
            "            script skills, run-tests and shell-command run unconfined; create_skill "
            + ("tests and publishes anyway (allow_unconfined)" if iso["allow_unconfined"] else "will not publish")
        )
    lines.append(_budgets_line(iso))
    lines += [
        f"files:      file skills may read {files['shown']} ({files['origin']})",
        _state_line(report["state"]),
        "providers:  " + "; ".join(f"{p['name']}: {p['status']}" for p in report["providers"]),
        *_servers_lines(report["servers"]),
        _skills_line(report["skills"]),
    ]
    skills = report["skills"]
    lines += [
        f"            clash '{o['name']}': {o['served']} is served, {o['not_served']} is not"
        for o in skills["overrides"]
    ]
    lines += [f"            {warning}" for warning in skills["warnings"]]
    lines += [
        f"            pending: pipeline '{p['pipeline']}' waits for upstream "
        + ", ".join(f"'{s}'" for s in p["servers"])
        + " (still connecting)"
        for p in skills["pending"]
    ]
    lines += [f"            not published: {p['path']}: {p['reason']}" for p in skills["not_published"]]
    if "queue" in report:
        state = next(i for i, line in enumerate(lines) if line.startswith("state:"))
        lines.insert(state + 1, _queue_line(report["queue"]))
    failed = report["failed"]
    lines.append(f"FAILED:     {', '.join(failed)}" if failed else "all checks passed")
    print("\n".join(lines))
    return status


def diagnose(args: argparse.Namespace) -> dict[str, Any]:
    from skills.core.roots import AllowedRoots
    from skills.executors.isolation import budget_support, load_settings, probe
    from skills.executors.seccomp import syscall_filter

    the_home = home(args)
    isolation = probe(load_settings(the_home.root))
    budgets = budget_support(prepare=False)  # looks only: this process is not the server
    roots = AllowedRoots.resolve(allowed_dirs(args), state=the_home.root)
    skills, servers = _catalog(args)
    report = {
        "versions": {name: _version(name) for name in _PACKAGES},
        "python": {"version": platform.python_version(), "executable": sys.executable, "platform": sys.platform},
        "home": {"path": str(the_home.root), "exists": the_home.root.is_dir()},
        "isolation": {
            **isolation.as_dict(),
            "summary": isolation.summary(),
            "syscall_filter": syscall_filter().as_dict(),
            "budgets": {"mechanism": budgets.mechanism, "enforced": budgets.enforced, "detail": budgets.detail},
        },
        "files": {**roots.as_dict(), "shown": roots.shown()},
        "state": _state(args, the_home.state_db),
        "providers": _providers(),
        "servers": servers,
        "skills": skills,
    } | _queue(args)
    return report | {"failed": _failed(report)}


def _failed(report: dict[str, Any]) -> list[str]:
    """The checks that failed (what makes the exit status 1), in the order they are printed."""
    failed: list[str] = []
    state = report["state"]
    if state["backend"] != "sqlite" and not state["ok"]:
        failed.append("state unreachable")
    if "queue" in report and not report["queue"]["ok"]:
        failed.append("queue unreachable")
    failed += [f"upstream '{s['name']}' failed" for s in report["servers"]["servers"] if s["status"] == "failed"]
    broken = [p for p in report["skills"]["not_published"] if p["error"]]
    if broken:
        failed.append(f"{len(broken)} skill folder(s) or pipeline(s) not published")
    return failed


def _budgets_line(iso: dict[str, Any]) -> str:
    """How one call's memory and processes are bounded in total (a cgroup per call, or not at all)."""
    budgets, total = iso["budgets"], f"{iso['total_memory_mb']} MiB and {iso['max_processes']} processes"
    if budgets["enforced"]:
        version = "v2" if budgets["mechanism"] == "cgroup2" else "v1"
        return f"budgets:    per call at most {total} in total, a cgroup {version} each ({budgets['detail']})"
    return (
        f"budgets:    NOT ENFORCED per call ({total} configured): {budgets['detail']}; "
        "only each process's rlimits apply (memory_mb, processes per sandbox)"
    )


def _queue(args: argparse.Namespace) -> dict[str, Any]:
    """The queue of the distributed mode, checked for real (nothing when there is none)."""
    from ._server import backends

    url = backends(args).queue
    if not url:
        return {}
    from pipelines.storage.state import check_queue

    found = check_queue(url)
    warning = _exposed(url)
    return {"queue": found | ({"warning": warning} if warning else {})}


def _exposed(url: str) -> str | None:
    """Why a queue URL looks open to others (no password, not on this machine), or None.

    Whoever can write to the queue can make runs do what a pipeline can do (docs/distributed.md: the trust
    model); a Redis off this machine must ask for a password.
    """
    from urllib.parse import parse_qs, urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return None
    loopback = host in ("", "localhost", "::1") or host.startswith("127.")
    if loopback or parts.password or parse_qs(parts.query).get("password"):
        return None
    clear = "" if parts.scheme == "rediss" else ", and its traffic is not encrypted (use rediss://)"
    return (
        f"the queue on {host} asks for no password{clear}: anyone who reaches it can make runs do what a "
        "pipeline can do; give Redis a password (--requirepass) and the URL redis://:PASSWORD@HOST:6379/0"
    )


def _state(args: argparse.Namespace, db: Any) -> dict[str, Any]:
    """The state backend: the home's state.sqlite, or the PostgreSQL database checked for real."""
    from ._server import backends

    chosen = backends(args)
    if not chosen.state:
        return {"backend": "sqlite", "path": str(db), "exists": db.is_file()}
    from pipelines.storage.state import check_state

    return {"backend": "postgresql", **check_state(chosen.state)}


def _state_line(state: dict[str, Any]) -> str:
    if state["backend"] == "sqlite":
        return f"state:      sqlite {state['path']}" + ("" if state["exists"] else " (no runs yet)")
    return "state:      postgresql " + _checked(state)


def _queue_line(queue: dict[str, Any]) -> str:
    warning = f"\n            WARNING: {queue['warning']}" if queue.get("warning") else ""
    return "queue:      redis " + _checked(queue) + warning


def _checked(found: dict[str, Any]) -> str:
    if found["ok"]:
        return f"{found['url']} ({found['server']}" + (f", schema {found['schema']})" if "schema" in found else ")")
    hint = f" (hint: {found['hint']})" if found.get("hint") else ""
    return f"{found['url']} UNREACHABLE: {found['error']}{hint}"


def _catalog(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The skills and pipelines as this machine has them, judged once the upstream servers of
    servers.json have connected (or `--connect-timeout` passed): (skills report, servers report)."""
    from ._server import server
    from ._upstreams import with_upstreams

    # The skills as this machine has them (the shared state's pipelines are not read: a
    # database that does not answer is reported under `state`, not as a crash here).
    orchestrator = server(argparse.Namespace(**{**vars(args), "state": "", "queue": ""}))
    upstreams = orchestrator.servers
    adapters = [a for a in upstreams.adapters.values() if a.config.enabled] if upstreams is not None else []

    def judged(failures: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
        file = str(Path(args.servers).expanduser() if args.servers else home(args).servers_file)
        servers = _servers(orchestrator, file, failures, args.connect_timeout)
        connecting = {s["name"] for s in servers["servers"] if s["status"] == "pending"}
        return _skills(orchestrator, connecting, failures), servers

    return with_upstreams(orchestrator, adapters, args.connect_timeout, judged)


def _skills(orchestrator: OrchestratorServer, connecting: set[str], failures: dict[str, str]) -> dict[str, Any]:
    """What the skills roots and pipeline folders give: published skills, name clashes (who wins),
    what is not published and why (every error), and the pipelines that wait for an upstream
    server still connecting (pending, not broken)."""
    from skills.core.sources import RootReport, report_roots

    from .._upstreams import PendingPipelines

    catalog = orchestrator.catalog
    waiting = PendingPipelines(orchestrator)
    problems = catalog.problems()
    waiting.sort_out(problems)  # the pipelines whose only errors are tools an upstream may bring
    pending: list[dict[str, Any]] = []
    not_published: list[dict[str, Any]] = []
    for problem in problems:
        if not problem.problems:
            continue
        waits = waiting.waiting.get(problem.path)
        if waits is not None and connecting & set(waits[1]):
            pending.append(
                {"path": str(problem.path), "pipeline": waits[0], "servers": sorted(connecting & set(waits[1]))}
            )
            continue
        down = [name for name in (waits[1] if waits is not None else []) if name in failures]
        errors = [p for p in problem.problems if p.severity == "error"]
        if down:
            reason = "; ".join(f"upstream '{name}' did not connect: {failures[name]}" for name in down)
        else:
            reason = "; ".join(p.message for p in errors or problem.problems)
        not_published.append({"path": str(problem.path), "reason": reason, "error": bool(errors)})
    return {
        "published": len(catalog),
        "roots": [r.line() for p in catalog.providers if isinstance(r := getattr(p, "report", None), RootReport)],
        "warnings": report_roots(catalog.providers),
        "overrides": [o.as_dict() for o in catalog.overrides()],
        "not_published": not_published,
        "pending": pending,
    }


def _skills_line(skills: dict[str, Any]) -> str:
    pending = f", {len(skills['pending'])} pending" if skills["pending"] else ""
    return (
        f"skills:     {skills['published']} published{pending}, {len(skills['overrides'])} name clash(es), "
        f"{len(skills['not_published'])} folder(s) not published (`orchestrator skills list` says why)"
    )


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _providers() -> list[dict[str, Any]]:
    key = "set" if os.environ.get("ANTHROPIC_API_KEY") else "not set"
    base = os.environ.get("ANTHROPIC_BASE_URL")
    anthropic = f"ANTHROPIC_API_KEY {key}" + (f", ANTHROPIC_BASE_URL={base}" if base else "")
    return [
        {"name": "anthropic", "status": anthropic, "configured": key == "set"},
        {"name": "sampling", "status": "the connected MCP client, when it supports sampling", "configured": True},
    ]


def _servers(orchestrator: OrchestratorServer, file: str, failures: dict[str, str], timeout: float) -> dict[str, Any]:
    """Each upstream server of servers.json as it stands after the wait: connected (with its tool
    count), pending (still connecting), failed (why) or disabled."""
    upstreams = orchestrator.servers
    found: list[dict[str, Any]] = []
    for name, adapter in upstreams.adapters.items() if upstreams is not None else ():
        if not adapter.config.enabled:
            found.append({"name": name, "status": "disabled"})
        elif adapter.state == "connected":
            found.append({"name": name, "status": "connected", "tools": adapter.tool_count})
        elif adapter.state == "starting" and not adapter.last_error:
            found.append({"name": name, "status": "pending", "why": f"still connecting after {timeout:g}s"})
        else:
            found.append({"name": name, "status": "failed", "why": failures.get(name) or adapter.last_error or ""})
    return {"file": file, "count": len(found), "servers": found}


def _servers_lines(servers: dict[str, Any]) -> list[str]:
    lines = [f"servers:    {servers['count']} upstream MCP server(s) in {servers['file']}"]
    for entry in servers["servers"]:
        status = entry["status"]
        if status == "connected":
            lines.append(f"            '{entry['name']}' connected ({entry['tools']} tool(s))")
        elif status == "pending":
            lines.append(f"            '{entry['name']}' pending: {entry['why']}")
        elif status == "failed":
            lines.append(f"            '{entry['name']}' FAILED: {entry['why']}")
        else:
            lines.append(f"            '{entry['name']}' disabled")
    return lines
