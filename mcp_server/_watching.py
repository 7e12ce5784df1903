"""Live reload (private to mcp_server): watch the skill folders and the home's registry, and
refresh the Catalog (and re-verify the pipelines) when they change. `watchfiles` is imported only
when a server watches."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.subscriptions import PromptsListChanged, ResourcesListChanged, ToolsListChanged

if TYPE_CHECKING:
    from pipelines.service import PipelineService
    from skills import Catalog, Home, SkillProvider

    from ._handles import RunHandles

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


async def broadcast_changes(subscriptions: Any, sessions: list[Any]) -> list[Any]:
    """Tell every client that tools, prompts and resources changed: 2026-07-28 clients through the
    SDK's subscriptions, handshake-era `sessions` directly; the sessions still alive are returned."""
    for event in (ToolsListChanged(), PromptsListChanged(), ResourcesListChanged()):
        await subscriptions.publish(event)
    alive: list[Any] = []
    for session in sessions:
        try:
            await session.send_tool_list_changed()
            await session.send_prompt_list_changed()
            await session.send_resource_list_changed()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            log.debug("dropping a closed session: %r", exc)
            continue
        except Exception as exc:  # a peer gone in a way the transport names differently
            log.debug("dropping a session that failed to take a notification: %r", exc)
            continue
        alive.append(session)
    return alive


async def cancels_from_replicas(pipelines: PipelineService, handles: Callable[[], RunHandles | None]) -> None:
    """`cancel_run` through another replica: stop the run if it runs here (PostgreSQL NOTIFY);
    `handles` gives the server's run handles, if it made them yet."""
    from ._runs import CANCEL_CHANNEL, cancel_locally

    pg: Any = getattr(pipelines.store, "pg", None)
    if pg is None:
        return

    async def heard(run_id: str | None) -> None:
        if run_id and cancel_locally(pipelines, handles(), run_id):
            log.info("run %s cancelled through another replica", run_id)

    await pg.listen(CANCEL_CHANNEL, heard)
