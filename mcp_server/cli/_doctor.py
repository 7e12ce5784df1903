"""`orchestrator doctor [--json]`: what this installation is and what it can do, checked for real.

Versions, the home, whether skills' subprocesses can be confined (a real bubblewrap run, and
why not when they cannot), what file skills may read by default, the state backend and which
model providers are configured. Never prints a secret: an API key is reported as set or not. A
queue off this machine without a password is reported as open to whoever reaches it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from importlib import metadata
from typing import Any, cast

from ._allow import add_allow_dir, allowed_dirs
from ._common import EXIT_OK, PROG, Parents, home, print_json

_PACKAGES = ("mcp-orchestrator", "mcp", "langgraph", "anthropic", "pydantic", "anyio")


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
    doctor.set_defaults(handler=_cmd_doctor)


def _cmd_doctor(args: argparse.Namespace) -> int:
    report = diagnose(args)
    if args.json:
        print_json(report)
        return EXIT_OK
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
        f"servers:    {report['servers']['count']} upstream MCP server(s) in {report['servers']['file']}",
        _skills_line(report["skills"]),
    ]
    skills = report["skills"]
    lines += [
        f"            clash '{o['name']}': {o['served']} is served, {o['not_served']} is not"
        for o in skills["overrides"]
    ]
    lines += [f"            {warning}" for warning in skills["warnings"]]
    if "queue" in report:
        state = next(i for i, line in enumerate(lines) if line.startswith("state:"))
        lines.insert(state + 1, _queue_line(report["queue"]))
    print("\n".join(lines))
    return EXIT_OK


def diagnose(args: argparse.Namespace) -> dict[str, Any]:
    from skills.core.roots import AllowedRoots
    from skills.executors.isolation import budget_support, load_settings, probe
    from skills.executors.seccomp import syscall_filter

    the_home = home(args)
    isolation = probe(load_settings(the_home.root))
    budgets = budget_support(prepare=False)  # looks only: this process is not the server
    roots = AllowedRoots.resolve(allowed_dirs(args), state=the_home.root)
    return {
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
        "servers": _servers(the_home.servers_file),
        "skills": _skills(args),
    } | _queue(args)


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
    from pipelines.state import check_queue

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
    from pipelines.state import check_state

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


def _skills(args: argparse.Namespace) -> dict[str, Any]:
    """What the skills roots give: published skills, name clashes (who wins), folders skipped."""
    from skills.core.sources import RootReport, report_roots

    from ._server import server

    # The skills as this machine has them (the shared state's pipelines are not read: a
    # database that does not answer is reported under `state`, not as a crash here).
    catalog = server(argparse.Namespace(**{**vars(args), "state": "", "queue": ""})).catalog
    problems = catalog.problems()
    return {
        "published": len(catalog),
        "roots": [r.line() for p in catalog.providers if isinstance(r := getattr(p, "report", None), RootReport)],
        "warnings": report_roots(catalog.providers),
        "overrides": [o.as_dict() for o in catalog.overrides()],
        "not_published": [{"path": str(p.path), "reason": p.problems[0].message} for p in problems if p.problems],
    }


def _skills_line(skills: dict[str, Any]) -> str:
    return (
        f"skills:     {skills['published']} published, {len(skills['overrides'])} name clash(es), "
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


def _servers(path: Any) -> dict[str, Any]:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        count = len(cast("dict[str, Any]", data).get("mcpServers") or {}) if isinstance(data, dict) else 0
    except (OSError, ValueError):
        count = 0
    return {"file": str(path), "count": count}
