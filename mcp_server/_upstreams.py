"""Which upstream MCP servers a command or a pipeline needs, and pipelines that wait for one.

The tools imported from servers.json exist only once their upstream server has connected. So
a pipeline that calls one fails verification until then: `serve` connects every upstream in
the background, and such a pipeline is *pending* meanwhile, not broken. `PendingPipelines`
says so in one INFO line at start-up and says when the pipeline is published (or, if its
upstream connected without the tool, gives the real error then).

A command of the CLI starts only the upstreams it needs (`needed_servers`): none for a folder
skill or a pipeline of folder skills, the `time` server for `time_get_current_time` or for a
pipeline calling it, directly or through another pipeline that is unpublished for that reason.

A call of an unknown name that an upstream could publish (its namespace prefix) waits, within
the connect grace, for that upstream's first connection; if it is still not connected, the
call is `not_connected` naming the server (`upstream_target`), never `unknown_tool`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_types import CallToolResult

    from adapters import MCPSkillAdapter
    from pipelines.language.spec import PipelineSpec
    from skills import LoadProblem

    from ._host import Host
    from .tasks import CallTarget

__all__ = ["PendingPipelines", "missing_names", "needed_servers", "unpublished_pipelines", "upstream_target"]

log = logging.getLogger("mcp_server")

_WILDCARDS = frozenset("*?[")


def unpublished_pipelines(server: Host) -> dict[str, tuple[Path, PipelineSpec]]:
    """Pipeline files of the published folders that parse but did not verify, by pipeline id."""
    from pipelines.errors import VerificationError
    from pipelines.language.loader import load_spec_file

    found: dict[str, tuple[Path, PipelineSpec]] = {}
    for source in server.pipelines.sources if server.pipelines is not None else []:
        for problem in source.problems():
            try:
                spec, _ = load_spec_file(problem.path)
            except VerificationError:  # does not even parse: it waits for nothing
                continue
            found[spec.id] = (problem.path, spec)  # later sources win, as in the Catalog
    return found


def missing_names(server: Host, names: Iterable[str] = (), specs: Iterable[PipelineSpec] = ()) -> set[str]:
    """What `names` and the pipelines `specs` call that the Catalog does not have now.

    Pipelines are followed to what they call: a published one for its agents' allow-list
    patterns (never checked statically), an unpublished one for everything. Patterns are
    always kept: whatever matches them when an agent starts should be there.
    """
    catalog = server.catalog
    todo = [*names, *(name for spec in specs for name in spec.callees())]
    unpublished: dict[str, tuple[Path, PipelineSpec]] | None = None
    seen: set[str] = set()
    missing: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if _WILDCARDS & set(name):
            missing.add(name)
            continue
        found = catalog.find(name)
        if found is not None:
            spec = getattr(found, "spec", None)  # a published pipeline
            todo.extend(spec.callees() if spec is not None else ())
            continue
        if unpublished is None:
            unpublished = unpublished_pipelines(server)
        if name in unpublished:
            todo.extend(unpublished[name][1].callees())
        else:
            missing.add(name)
    return missing


def needed_servers(
    server: Host, names: Iterable[str] = (), specs: Iterable[PipelineSpec] = ()
) -> list[MCPSkillAdapter]:
    """The upstream servers that could publish what `names` and `specs` need and the Catalog lacks."""
    if server.servers is None:
        return []
    missing = missing_names(server, names, specs)
    return server.servers.adapters_for(missing) if missing else []


async def upstream_target(server: Host, name: str, unknown: CallToolResult) -> CallTarget | CallToolResult:
    """The target of a call of `name`, which the Catalog does not have (`unknown` is its error):
    after waiting within the connect grace for an upstream that could publish it, that tool;
    else `not_connected` when such an upstream is not connected; else `unknown`."""
    from mcp_types import CallToolResult

    from ._results import error_result

    upstreams = server.servers
    if upstreams is None:
        return unknown
    await upstreams.wait_started([name])
    target = server.target(name)
    if not isinstance(target, CallToolResult):
        return target
    error = upstreams.not_connected(name)
    return unknown if error is None else error_result(error)


class PendingPipelines:
    """Pipelines of a starting server that only wait for upstream servers to connect."""

    def __init__(self, server: Host) -> None:
        self.server = server
        self.waiting: dict[Path, tuple[str, list[str]]] = {}
        """Pipeline file -> (pipeline id, the upstream servers it waits for)."""

    def sort_out(self, problems: Iterable[LoadProblem]) -> list[LoadProblem]:
        """Log the pipelines that wait for an upstream as pending; return the other problems."""
        others: list[LoadProblem] = []
        for problem in problems:
            waits = self._waits_for(problem.path)
            if waits is None:
                others.append(problem)
                continue
            pipeline_id, servers = waits
            self.waiting[problem.path] = waits
            log.info(
                "pipeline '%s' is pending: it calls tools of upstream server(s) %s, not connected yet; "
                "it is published when they connect",
                pipeline_id,
                ", ".join(f"'{s}'" for s in servers),
            )
        return others

    def _waits_for(self, path: Path) -> tuple[str, list[str]] | None:
        """(id, servers) when every error of the pipeline file is a tool an upstream may bring."""
        service, upstreams = self.server.pipelines, self.server.servers
        if service is None or upstreams is None or path.suffix not in (".yaml", ".yml"):
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        spec, issues = service.check(text, str(path))
        errors = [i for i in issues if i.severity == "error"]
        if spec is None or not errors or any(i.code != "unknown-skill" for i in errors):
            return None
        missing = missing_names(self.server, specs=[spec])
        providers = [upstreams.adapters_for([name]) for name in missing]
        if not missing or not all(providers):
            return None
        return spec.id, sorted({adapter.name for found in providers for adapter in found})

    def check(self) -> None:
        """After the upstreams changed and pipelines were verified again: report what became of each."""
        from pipelines.source import PipelineSkill

        upstreams = self.server.servers
        if upstreams is None or not upstreams.settled:  # another round is coming; judge after it
            return
        catalog = self.server.catalog
        for path, (pipeline_id, servers) in list(self.waiting.items()):
            skill = catalog.find(pipeline_id)
            if isinstance(skill, PipelineSkill) and skill.file == path:
                names = ", ".join(f"'{s}'" for s in servers)
                log.info("pipeline '%s' published: upstream server(s) %s connected", pipeline_id, names)
            elif all(upstreams.adapters[name].state == "connected" for name in servers):
                for problem in catalog.problems():
                    if problem.path == path:
                        log.error("not published: %s", problem.error)
            else:
                continue
            del self.waiting[path]
