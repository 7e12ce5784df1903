"""`orchestrator pipelines list|show|validate|graph`: the pipelines the server publishes, and checks.

A pipeline is named by its id (a published pipeline: the built-in examples and the home's
`pipelines/`) or by the path of a YAML file, which is verified first: every issue is printed
as `file:line:col: severity: message (hint: ...)` and the command exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ._common import EXIT_OK, EXIT_USAGE, PROG, Parents, UsageError, print_json
from ._server import server

if TYPE_CHECKING:
    from adapters import MCPSkillAdapter
    from pipelines.errors import Issue
    from pipelines.language.spec import PipelineSpec
    from pipelines.service import PipelineService
    from pipelines.source import PipelineSkill
    from skills import LoadProblem

    from ..app import OrchestratorServer

T = TypeVar("T")


def add_parsers(sub: Any, parents: Parents) -> None:
    common, skills_opt, json_opt, servers_opt = parents.common, parents.skills, parents.json, parents.servers
    pipelines = sub.add_parser("pipelines", parents=[common], help="list, show, validate or graph pipelines")
    actions = pipelines.add_subparsers(dest="pipelines_command", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        parents=[common, skills_opt, json_opt, servers_opt],
        help="every published pipeline; broken files on stderr",
    )
    listing.set_defaults(handler=_list)
    show = actions.add_parser(
        "show", parents=[common, skills_opt, json_opt, servers_opt], help="a pipeline's help text"
    )
    show.add_argument("target", metavar="ID_OR_FILE")
    show.set_defaults(handler=_show)
    validate = actions.add_parser(
        "validate",
        parents=[common, skills_opt, json_opt, servers_opt],
        help="check a pipeline file; exit 2 on any error",
        description="Verify a pipeline file against the skills and pipelines of this home and report every "
        "issue as FILE:LINE:COL: SEVERITY: MESSAGE (hint: ...). Exit 2 on errors, 0 with warnings only.",
    )
    validate.add_argument("file", metavar="FILE")
    validate.set_defaults(handler=_validate)
    graph = actions.add_parser(
        "graph", parents=[common, skills_opt, servers_opt], help="a pipeline as a Mermaid flowchart, on stdout"
    )
    graph.add_argument("target", metavar="ID_OR_FILE")
    graph.set_defaults(handler=_graph)


# -- shared with `run` and `runs` -------------------------------------------------------------
def service_of(orchestrator: OrchestratorServer) -> PipelineService:
    if orchestrator.pipelines is None:  # create_server(pipelines=False) only; the CLI never asks for that
        raise UsageError("this server has no pipelines")
    return orchestrator.pipelines


def _looks_like_file(target: str) -> bool:
    return target.endswith((".yaml", ".yml")) or "/" in target or os.sep in target or Path(target).is_file()


def resolve_pipeline(orchestrator: OrchestratorServer, target: str) -> PipelineSkill:
    """A published pipeline by id, or a pipeline file verified (VerificationError lists its issues)."""
    from pipelines.errors import VerificationError
    from pipelines.source import PipelineSkill

    service = service_of(orchestrator)
    if _looks_like_file(target):
        path = Path(target).expanduser()
        if not path.is_file():
            raise UsageError(
                f"no pipeline file {target}", f"give a YAML file, or a pipeline id (`{PROG} pipelines list`)"
            )
        try:
            return service.load_file(path)
        except VerificationError as exc:
            hint = f"fix the issues above; `{PROG} pipelines validate FILE` checks it"
            if any(i.code == "unknown-skill" for i in exc.issues):
                hint += "; `--create-missing` has a model write the missing skills"
            raise VerificationError(exc.message, hint=hint, issues=exc.issues) from None
    catalog = orchestrator.catalog
    found = catalog.find(target)
    if isinstance(found, PipelineSkill):
        return found
    if found is not None:
        raise UsageError(f"'{target}' is a {found.kind} skill, not a pipeline", f"call it: `{PROG} call {target}`")
    if any(s.name == target for s in catalog.disabled()):
        raise UsageError(f"'{target}' is disabled", "enable it in the home's skills/registry.yaml")
    broken = [p for p in load_problems(service) if p.path.stem == target]
    if broken:
        report_broken(service, broken)
        raise UsageError(f"pipeline '{target}' could not be loaded", "fix the issues above")
    import difflib

    close = difflib.get_close_matches(target, sorted(service.specs()), n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"`{PROG} pipelines list` shows them"
    raise UsageError(f"no pipeline named '{target}'", hint)


def pipeline_file(orchestrator: OrchestratorServer, target: str) -> Path:
    """The file of the pipeline `target` names: the path given, a published pipeline's file, or the
    file of a home pipeline that did not verify (`run --create-missing` creates what it lacks)."""
    from pipelines.source import PipelineSkill

    if _looks_like_file(target):
        path = Path(target).expanduser()
        if not path.is_file():
            raise UsageError(f"no pipeline file {target}", "give a YAML file, or a pipeline id")
        return path
    found = orchestrator.catalog.find(target)
    if isinstance(found, PipelineSkill):
        return found.file
    broken = [p.path for p in load_problems(service_of(orchestrator)) if p.path.stem == target]
    if broken:
        return broken[0]
    return resolve_pipeline(orchestrator, target).file  # raises the clearest error for the name


def target_spec(orchestrator: OrchestratorServer, target: str) -> PipelineSpec | None:
    """The parsed (not necessarily verified) pipeline `target` names, to know what it needs."""
    from pipelines.errors import VerificationError
    from pipelines.language.loader import load_spec_file
    from pipelines.source import PipelineSkill

    from .._upstreams import unpublished_pipelines

    if _looks_like_file(target):
        try:
            return load_spec_file(Path(target).expanduser())[0]
        except VerificationError:  # unreadable or broken: resolve_pipeline reports it
            return None
    found = orchestrator.catalog.find(target)
    if isinstance(found, PipelineSkill):
        return found.spec
    unpublished = unpublished_pipelines(orchestrator).get(target)
    return unpublished[1] if unpublished is not None else None


def pipeline_needs(orchestrator: OrchestratorServer, target: str) -> list[MCPSkillAdapter]:
    """The upstream servers that running (or verifying) the pipeline `target` needs."""
    from .._upstreams import needed_servers

    spec = target_spec(orchestrator, target)
    return needed_servers(orchestrator, specs=[spec]) if spec is not None else []


def resolve_connected(args: argparse.Namespace, work: Callable[[OrchestratorServer, PipelineSkill], T]) -> T:
    """`work(server, pipeline)` for the pipeline `args.target`, with the upstreams it needs connected."""
    from ._upstreams import describe, with_upstreams

    orchestrator = server(args)
    needs = pipeline_needs(orchestrator, args.target)

    def resolved(failures: dict[str, str]) -> T:
        if failures and orchestrator.catalog.find(args.target) is None:
            raise UsageError(*describe(failures))
        return work(orchestrator, resolve_pipeline(orchestrator, args.target))

    return with_upstreams(orchestrator, needs, args.connect_timeout, resolved)


def show_warnings(skill: PipelineSkill) -> None:
    for issue in skill.warnings:
        print(issue, file=sys.stderr)


def load_problems(service: PipelineService) -> list[LoadProblem]:
    """Pipeline files of the published folders that did not load or verify."""
    return [problem for source in service.sources for problem in source.problems()]


def file_issues(service: PipelineService, path: Path) -> list[Issue]:
    """Every issue of a pipeline file, as `pipelines validate` reports them."""
    from pipelines.errors import Issue

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [Issue(str(path), 1, 1, f"cannot read the pipeline file: {exc}", "check the path and that it is UTF-8")]
    return service.check(text, str(path))[1]


def report_broken(service: PipelineService, problems: list[LoadProblem]) -> list[tuple[LoadProblem, list[Issue]]]:
    """Print every issue of each broken pipeline file on stderr (re-checked, in the `file:line:col` form)."""
    checked = [(p, file_issues(service, p.path)) for p in problems]
    if checked:
        print(f"{PROG}: {len(checked)} pipeline file(s) not published:", file=sys.stderr)
    for problem, issues in checked:
        for line in [str(i) for i in issues] or [str(p) for p in problem.problems]:
            print(f"  {line}", file=sys.stderr)
    return checked


def issue_dict(issue: Issue) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(issue)


# -- list --------------------------------------------------------------------------------------
def _list(args: argparse.Namespace) -> int:
    from .._upstreams import needed_servers, unpublished_pipelines
    from ._upstreams import with_upstreams

    orchestrator = server(args)
    needs: list[MCPSkillAdapter] = []
    if orchestrator.servers is not None:  # what the pipelines waiting for upstreams call
        needs = needed_servers(orchestrator, specs=[spec for _, spec in unpublished_pipelines(orchestrator).values()])
    return with_upstreams(orchestrator, needs, args.connect_timeout, lambda down: _list_now(args, orchestrator, down))


def _list_now(args: argparse.Namespace, orchestrator: OrchestratorServer, down: dict[str, str]) -> int:
    from pipelines.source import PipelineSkill

    from ._upstreams import report

    service = service_of(orchestrator)
    catalog = orchestrator.catalog
    rows: list[tuple[PipelineSkill, bool]] = [(s, True) for s in catalog if isinstance(s, PipelineSkill)]
    rows += [(s, False) for s in catalog.disabled() if isinstance(s, PipelineSkill)]
    rows.sort(key=lambda row: row[0].name)
    report(down)
    problems = report_broken(service, load_problems(service))
    if args.json:
        print_json(
            {
                "pipelines": [_summary(skill, enabled) for skill, enabled in rows],
                "problems": [
                    {"file": str(p.path), "source": p.source, "issues": [issue_dict(i) for i in issues]}
                    for p, issues in problems
                ],
            }
        )
    else:
        _print_table(rows)
    return EXIT_OK


def _summary(skill: PipelineSkill, enabled: bool) -> dict[str, Any]:
    spec = skill.spec
    return {
        "id": spec.id,
        "name": spec.name,
        "source": skill.source,
        "enabled": enabled,
        "steps": len(spec.steps),
        "description": spec.description.strip(),
        "file": str(skill.file),
    }


def _print_table(rows: list[tuple[PipelineSkill, bool]]) -> None:
    import shutil

    if not rows:
        print("no pipelines found")
        return
    width = shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else 0
    w_id = max(len(s.name) for s, _ in rows)
    w_src = max(len(s.source) for s, _ in rows)
    for skill, enabled in rows:
        count = len(skill.spec.steps)
        steps = f"{count} step{'' if count == 1 else 's'}"
        line = (skill.spec.description.strip().splitlines() or [skill.spec.name or ""])[0]
        if not enabled:
            line = f"[disabled] {line}"
        text = f"{skill.name:<{w_id}}  {skill.source:<{w_src}}  {steps:>8}  {line}"
        if width and len(text) > width:
            text = text[: max(width - 1, 20)] + "…"
        print(text)


# -- show, graph -------------------------------------------------------------------------------
def _show(args: argparse.Namespace) -> int:
    return resolve_connected(args, lambda _, skill: _show_now(args, skill))


def _show_now(args: argparse.Namespace, skill: PipelineSkill) -> int:
    from pipelines.language.describe import example_arguments
    from pipelines.planning.help_ai import with_overview

    spec = skill.spec
    overview = skill.overview()  # the model's, when one was written for this file (`serve` writes them)
    if args.json:
        print_json(
            _summary(skill, True)
            | {
                "input_schema": skill.input_schema,
                "output_schema": skill.output_schema,
                "example_arguments": example_arguments(spec),
                "warnings": [issue_dict(i) for i in skill.warnings],
                "help": with_overview(spec, overview),
                "overview": overview,
            }
        )
        return EXIT_OK
    show_warnings(skill)
    target = skill.name if not _looks_like_file(args.target) else args.target
    print(with_overview(spec, overview))
    print(f"\n## Command line\n{_command(target, example_arguments(spec))}")
    print(f"\nFile: {skill.file} ({skill.source})")
    return EXIT_OK


def _command(target: str, arguments: dict[str, Any]) -> str:
    import json
    import shlex

    words = [PROG, "run", target]
    for key, value in arguments.items():
        text = value if isinstance(value, str) and _stays_a_string(value) else json.dumps(value, ensure_ascii=False)
        words += ["--input", f"{key}={text}"]
    return shlex.join(words)


def _stays_a_string(text: str) -> bool:
    """True when `--input k=TEXT` gives back the string (it does not parse as JSON)."""
    from skills.core.jsontext import load_json

    try:
        load_json(text)
    except ValueError:
        return True
    return False


def _graph(args: argparse.Namespace) -> int:
    from pipelines.language.describe import mermaid

    print(resolve_connected(args, lambda _, skill: mermaid(skill.spec)))
    return EXIT_OK


# -- validate ----------------------------------------------------------------------------------
def _validate(args: argparse.Namespace) -> int:
    path = Path(args.file).expanduser()
    if not path.is_file():
        raise UsageError(f"{args.file}: no such file", "give the path of a pipeline YAML file")
    from ._upstreams import report, with_upstreams

    orchestrator = server(args)
    service = service_of(orchestrator)

    def check(down: dict[str, str]) -> list[Issue]:
        report(down)  # its tools stay unknown: the issues say so
        return file_issues(service, path)

    issues = with_upstreams(orchestrator, pipeline_needs(orchestrator, str(path)), args.connect_timeout, check)
    errors = sum(i.severity == "error" for i in issues)
    warnings = len(issues) - errors
    if args.json:
        print_json(
            {
                "file": str(path),
                "valid": errors == 0,
                "errors": errors,
                "warnings": warnings,
                "issues": [issue_dict(i) for i in issues],
            }
        )
    else:
        for issue in issues:
            print(issue)
        if not issues:
            print(f"ok: {path}")
        print(f"{path}: {errors} error(s), {warnings} warning(s)", file=sys.stderr)
    return EXIT_USAGE if errors else EXIT_OK
