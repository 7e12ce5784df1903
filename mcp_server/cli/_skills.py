"""`orchestrator skills list|show|validate`: the skills the server publishes, and strict checks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import (
    EXIT_OK,
    EXIT_USAGE,
    Parents,
    UsageError,
    home,
    not_found,
    print_json,
    report_load_problems,
    server,
)

if TYPE_CHECKING:
    from skills import LoadProblem, Problem, Skill

    from ..app import OrchestratorServer


def add_parsers(sub: Any, parents: Parents) -> None:
    common, skills_opt, json_opt, servers_opt = parents.common, parents.skills, parents.json, parents.servers
    skills = sub.add_parser("skills", parents=[common], help="list, show or validate skills")
    skills_sub = skills.add_subparsers(dest="skills_command", metavar="ACTION", required=True)
    listing = skills_sub.add_parser(
        "list",
        parents=[common, skills_opt, json_opt, servers_opt],
        help="every skill and its source, imported tools included (their servers are started)",
    )
    listing.set_defaults(handler=_skills_list)
    show = skills_sub.add_parser("show", parents=[common, skills_opt, json_opt, servers_opt], help="one skill in full")
    show.add_argument("name", metavar="NAME")
    show.set_defaults(handler=_skills_show)
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
    validate.set_defaults(handler=_skills_validate)


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
    return {
        "path": str(p.path),
        "line": p.line,
        "col": p.col,
        "field": p.field,
        "severity": p.severity,
        "message": p.message,
        "hint": p.hint,
    }


def _problem_json(problem: LoadProblem) -> dict[str, Any]:
    return {
        "source": problem.source,
        "path": str(problem.path),
        "problems": [_problem_dict(p) for p in problem.problems],
    }


def _skills_list(args: argparse.Namespace) -> int:
    from ._upstreams import with_upstreams

    orchestrator = server(args)
    upstreams = orchestrator.servers
    needs = [a for a in upstreams.adapters.values() if a.config.enabled] if upstreams is not None else []
    return with_upstreams(orchestrator, needs, args.connect_timeout, lambda down: _list_now(args, orchestrator, down))


def _list_now(args: argparse.Namespace, orchestrator: OrchestratorServer, down: dict[str, str]) -> int:
    from ._upstreams import report

    report(down)
    catalog = orchestrator.catalog
    rows = [(s, True) for s in catalog] + [(s, False) for s in catalog.disabled()]
    rows.sort(key=lambda row: row[0].name)
    problems = catalog.problems()
    overrides = catalog.overrides()
    if args.json:
        print_json(
            {
                "skills": [_summary(s, on) for s, on in rows],
                "problems": [_problem_json(p) for p in problems],
                "overrides": [o.as_dict() for o in overrides],
            }
        )
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
    from skills.sources import report_roots

    for warning in [*map(str, overrides), *report_roots(catalog.providers)]:
        print(f"warning: {warning}", file=sys.stderr)
    report_load_problems(problems)
    return EXIT_OK


def _skills_show(args: argparse.Namespace) -> int:
    from .._upstreams import needed_servers
    from ._upstreams import with_upstreams

    orchestrator = server(args)
    needs = needed_servers(orchestrator, [args.name])
    return with_upstreams(orchestrator, needs, args.connect_timeout, lambda down: _show_now(args, orchestrator, down))


def _show_now(args: argparse.Namespace, orchestrator: OrchestratorServer, down: dict[str, str]) -> int:
    from ._upstreams import report

    report(down)
    catalog = orchestrator.catalog
    skill = catalog.find(args.name)
    enabled = skill is not None
    if skill is None:
        skill = next((s for s in catalog.disabled() if s.name == args.name), None)
    if skill is None:
        not_found(orchestrator, args.name)
    from skills.isolation import confinement_of, probe

    info: dict[str, Any] = _summary(skill, enabled) | {
        "confinement": confinement_of(skill, probe(orchestrator.access.settings)),
        "annotations": skill.annotations,
        "timeout": getattr(skill, "timeout", None),
        "input_schema": skill.input_schema,
        "output_schema": skill.output_schema,
        "files": skill.files(),
        "warnings": [str(w) for w in getattr(skill, "warnings", [])],
        "body": skill.body(),
    }
    if args.json:
        print_json(info)
        return EXIT_OK
    for key in ("name", "title", "kind", "source", "path", "enabled", "timeout", "confinement", "description"):
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


def _skill_folders(root: Path) -> tuple[list[Path], list[Problem]]:
    """The skill folders under `root` (searched as the server searches a root, archives aside),
    and what was skipped there, as problems."""
    from skills import Problem
    from skills.discovery import discover

    found = discover(root)
    skipped = [Problem(s.path, s.reason, hint=s.hint, severity=s.severity) for s in found.skipped]
    skipped += [
        Problem(a, "a skill archive: not checked", hint="unpack it to validate its skills", severity="warning")
        for a in found.archives
    ]
    return found.folders, skipped


def _skills_validate(args: argparse.Namespace) -> int:
    from skills import RESERVED_NAMES, Problem, check_folder

    explicit = args.dir is not None
    root = Path(args.dir).expanduser() if explicit else home(args).skills_dir
    skipped: list[Problem] = []
    if not root.is_dir():
        if explicit:
            raise UsageError(f"{root} is not a directory", "give a skill folder or a folder of skill folders")
        folders: list[Path] = []
    else:
        folders, skipped = _skill_folders(root)
    if explicit and not folders and not skipped:
        raise UsageError(f"no skill folder in {root}", "a skill folder holds a SKILL.md")
    from adapters.models import ModelService

    models = ModelService(home(args)).registry.known()
    results: list[tuple[Path, str, list[Problem]]] = []
    for folder in folders:
        front, _, problems = check_folder(folder, strict=True, models=models)
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
    results += [(p.path, p.path.name, [p]) for p in skipped]
    errors = sum(p.severity == "error" for _, _, ps in results for p in ps)
    warnings = sum(p.severity != "error" for _, _, ps in results for p in ps)
    if args.json:
        print_json(
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
