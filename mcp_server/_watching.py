"""Live reload (private to mcp_server): watch the skill folders and the home's registry, and
refresh the Catalog (and re-verify the pipelines) when they change. `watchfiles` is imported only
when a server watches."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import anyio

    from pipelines.service import PipelineService
    from skills import Catalog, Home, SkillProvider

log = logging.getLogger("mcp_server")


async def watch_skills(
    catalog: Catalog, home: Home | None, pipelines: PipelineService | None, ready: anyio.Event, stop: anyio.Event
) -> None:
    """Refresh the providers whose folders changed until `stop` is set (`ready` once watching)."""
    from watchfiles import awatch  # pyright: ignore[reportUnknownVariableType]  # its stop_event names trio's Event (trio is not installed)

    by_path: dict[Path, SkillProvider] = {}
    for provider in catalog.providers:
        for path in provider.watch_paths():
            by_path[path.resolve()] = provider
    registry = home.registry_file.resolve() if home is not None else None
    if not by_path:
        ready.set()
        return
    watcher = awatch(*by_path, debounce=100, step=20, stop_event=stop)
    ready.set()
    async for changes in watcher:
        touched: list[SkillProvider] = []
        registry_changed = False
        for _, changed in changes:
            path = Path(changed)
            if registry is not None and path == registry:
                registry_changed = True
                continue
            for root, provider in by_path.items():
                relevant = getattr(provider, "relevant", None)
                if path.is_relative_to(root) and provider not in touched and (relevant is None or relevant(path)):
                    touched.append(provider)
        try:
            if registry_changed and home is not None:
                await catalog.set_enabled(home.enabled_overrides())
            if touched:
                if pipelines is not None:  # pipelines are re-verified against the skills they call
                    touched += [p for p in pipelines.sources if p not in touched]
                await catalog.refresh(touched)
                if home is not None:
                    home.record(catalog)
        except OSError as exc:  # a folder vanished mid-scan: the next event rescans
            log.warning("reload failed: %s", exc)
