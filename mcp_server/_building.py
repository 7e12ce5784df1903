"""The parts `create_server` builds a server from (private to mcp_server): the Catalog of skill
folders, the imported servers of servers.json, the pipeline service with its models and roles. Each
heavy part (the adapter, LangGraph behind the pipelines) is imported only when it is used."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from skills import BUILTIN_SKILLS_DIR, Catalog, FolderSource, Home, SkillProvider
from skills.core.checks import unknown_models
from skills.core.discovery import ARCHIVE_SUFFIXES
from skills.core.roles import Roles
from skills.core.sources import report_roots

from ._version import __version__

if TYPE_CHECKING:
    from adapters import ServerSource
    from pipelines.service import PipelineService
    from pipelines.storage.state import Backends

log = logging.getLogger("mcp_server")


def skill_catalog(home: Home, skill_dirs: Sequence[str | Path], *, builtin: bool) -> Catalog:
    """Built-in skills < home skills < each of `skill_dirs` (later wins); a bad `--skills` is skipped."""
    providers: list[SkillProvider] = []
    if builtin:
        providers.append(FolderSource(BUILTIN_SKILLS_DIR, "builtin", cache_dir=home.cache_dir))
    providers.append(FolderSource(home.skills_dir, "home", label=f"home ({home.skills_dir})", cache_dir=home.cache_dir))
    for extra in skill_dirs:
        path = Path(extra).expanduser().resolve()
        if not path.is_dir() and not (path.is_file() and path.suffix.lower() in ARCHIVE_SUFFIXES):
            log.error("--skills %s is not a directory or a skill archive (.zip, .skill); skipped", path)
            continue
        providers.append(FolderSource(path, "user", label=str(path), cache_dir=home.cache_dir))
    catalog = Catalog(providers, enabled=home.enabled_overrides())
    report_roots(providers)
    return catalog


def upstream_source(
    catalog: Catalog, home: Home, servers: str | Path | None, connect_grace: float | None
) -> ServerSource | None:
    """The imported servers of the servers file, added to `catalog` (None: the file names none)."""
    upstreams = None
    servers_file = Path(servers).expanduser() if servers else home.servers_file
    if servers_file.is_file() and lists_servers(servers_file):
        from mcp_types import Implementation

        from adapters import ServerSource

        grace = {} if connect_grace is None else {"connect_grace": connect_grace}
        upstreams = ServerSource.from_file(
            servers_file, client_info=Implementation(name="orchestrator", version=__version__), **grace
        )
        if upstreams.adapters or upstreams.problems():
            catalog.add_provider(upstreams)
        else:
            upstreams = None
    elif servers:
        log.error("--servers %s does not exist; no upstream servers imported", servers_file)
    return upstreams


def pipeline_service(
    home: Home, catalog: Catalog, *, builtin: bool, backends: Backends | None
) -> tuple[PipelineService, dict[str, Any]]:
    """The pipeline service, and the server's cached `models` and `roles`, made here already (one
    registry and one book of roles for the server)."""
    from adapters.models import ModelService
    from pipelines.checks import PipelineChecks
    from pipelines.service import PipelineService

    model_service = ModelService(home)
    roles = Roles(home.root)
    service = PipelineService(
        home,
        catalog,
        examples=builtin,
        models=lambda: model_service.registry.known(),
        roles=roles.book,
        backends=backends,
        checks=PipelineChecks(home.cache_dir, __version__),
    )
    for warning in unknown_models(catalog, model_service.registry.known()):
        log.warning("%s", warning)
    return service, {"models": model_service, "roles": roles}


def lists_servers(path: Path) -> bool:
    """Whether a servers file names any server (the default `{"mcpServers": {}}` does not), so
    that a home without upstreams never imports the adapter at start-up. A file that is not
    valid JSON counts: the adapter reports it."""
    from skills.core.jsontext import load_json
    from skills.core.yamltext import read_bounded

    try:
        data = load_json(read_bounded(path))
    except (OSError, ValueError):  # JSONDecodeError (also for too deep / too long), UnicodeDecodeError
        return True
    if not isinstance(data, dict):
        return True
    config = cast("dict[str, Any]", data)
    return not (config.get("mcpServers") == {} and len(config) == 1)
