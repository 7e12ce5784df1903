"""ServerSource: every upstream of one servers.json, as one provider of the Catalog.

The server adds the source to its Catalog and runs `source.run(catalog)` as a background
task. Every upstream starts concurrently, and none delays our own `initialize`: the tools of
an upstream appear when it is ready, with `tools/list_changed` (the Catalog's listeners).
Many clients list the tools once and never again (one-shot clients, hosts that ignore
`list_changed`), so for `connect_grace` seconds after the start a listing may wait for the
upstreams' first connection (`wait_started`); a call of a tool whose upstream is not
connected says so (`not_connected`), never that the tool does not exist.
Names are assigned across all upstreams of the file, so two servers exporting the same
name get deterministic, distinct names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
from mcp_types import Implementation

from skills import Catalog, LoadProblem, Skill, SkillProvider

from ._names import could_publish
from ._outcomes import describe_error
from .config import ServerConfig, load_servers_config
from .errors import ServerConfigError, UpstreamUnavailableError
from .mcp_adapter import DEFAULT_BACKOFF, DEFAULT_CONNECT_TIMEOUT, MCPSkillAdapter
from .skill import RemoteSkill, build_skills

__all__ = ["DEFAULT_CONNECT_GRACE", "ServerSource", "test_server"]

log = logging.getLogger("adapters.source")

DEFAULT_CONNECT_GRACE = 3.0
"""Seconds after the start during which a tool listing waits for upstreams still connecting."""

GATE_LIMIT = 1.0
"""Seconds `run(gate=...)` waits for its gate at most before it starts the upstreams anyway."""


class ServerSource:
    """The upstream MCP servers of one servers.json; their tools are its skills."""

    def __init__(
        self,
        configs: Sequence[ServerConfig],
        problems: Sequence[LoadProblem] = (),
        *,
        label: str = "servers",
        backoff: tuple[float, float] = DEFAULT_BACKOFF,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        client_info: Implementation | None = None,
        connect_grace: float = DEFAULT_CONNECT_GRACE,
    ) -> None:
        self.label = label
        self.connect_grace = connect_grace
        """Seconds after `run()` starts during which `wait_started` waits for first connections."""
        self._problems = list(problems)
        self.adapters: dict[str, MCPSkillAdapter] = {}
        for config in configs:
            self.adapters[config.name] = MCPSkillAdapter(
                config,
                on_change=self._adapter_changed,
                backoff=backoff,
                connect_timeout=connect_timeout,
                client_info=client_info,
            )
        self._skills: list[RemoteSkill] = []
        self._key: tuple[tuple[str, int], ...] = ()
        self._collisions: set[str] = set()
        self._dirty: anyio.Event | None = None
        self._pending = False
        self._refreshing = False
        self._started: float | None = None
        self._news: anyio.Event | None = None

    @classmethod
    def from_file(cls, path: Path, **options: Any) -> ServerSource:
        """The servers of `path` (none when it does not exist); broken entries become `problems()`."""
        configs, problems = load_servers_config(path)
        options.setdefault("label", f"servers ({path})")
        return cls(configs, problems, **options)

    # -- SkillProvider -------------------------------------------------------------------------
    def skills(self) -> list[Skill]:
        return list(self._skills)

    def problems(self) -> list[LoadProblem]:
        return list(self._problems)

    def watch_paths(self) -> list[Path]:
        return []

    def refresh(self) -> bool:
        """Rebuild the skills from the upstreams' current tools; True if the published set changed."""
        key = tuple((a.name, a.tools_version) for a in self.adapters.values())
        if key == self._key:
            return False
        self._key = key
        before = [id(s) for s in self._skills]
        self._skills, collisions = build_skills(list(self.adapters.values()), self._skills)
        for text in collisions:
            if text not in self._collisions:
                log.warning("%s", text)
        self._collisions = set(collisions)
        return [id(s) for s in self._skills] != before

    # -- running -------------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        """True when the Catalog has every upstream's current tools (no refresh round is due)."""
        return not self._pending

    def adapters_for(self, names: Iterable[str]) -> list[MCPSkillAdapter]:
        """The enabled upstreams that could publish any of `names` (tool names or allow-list
        patterns), judged by namespace before they connect: what a command has to start."""
        wanted = list(names)
        return [
            adapter
            for adapter in self.adapters.values()
            if adapter.config.enabled and any(could_publish(adapter.config.namespace, n) for n in wanted)
        ]

    async def run(
        self,
        catalog: Catalog,
        *,
        dependents: Sequence[SkillProvider] = (),
        after_refresh: Callable[[], None] | None = None,
        gate: anyio.Event | None = None,
    ) -> None:
        """Start every upstream and keep `catalog` in step with their tools, until cancelled.

        `gate`: the upstreams start once it is set (at most `GATE_LIMIT` seconds later): over
        stdio, when our client's first request has been answered, so that spawning them and
        their start-up (a Python server's imports take a second of CPU) never slows our own.
        The connect grace counts from the call, and a listing meanwhile waits for them as ever.

        `dependents` are refreshed with this source (the pipeline sources: a pipeline that
        calls an imported tool is verified again when that tool appears or changes);
        `after_refresh` is called after each such round (the server reports pipelines that
        were waiting for an upstream). On cancellation every session is closed and every stdio
        child terminated.
        """
        self._dirty = anyio.Event()
        self._started = anyio.current_time()
        if self._pending:
            self._dirty.set()
        if gate is not None:
            with anyio.move_on_after(GATE_LIMIT):
                await gate.wait()
        async with anyio.create_task_group() as tg:
            for adapter in self.adapters.values():
                tg.start_soon(adapter.run, name=f"upstream {adapter.name}")
            while True:
                await self._dirty.wait()
                self._dirty, self._pending, self._refreshing = anyio.Event(), False, True
                try:
                    changed = await catalog.refresh([self])
                    if changed and dependents:  # verified against the Catalog as it is now, with the new tools
                        await catalog.refresh(list(dependents))
                finally:
                    self._refreshing = False
                    self._tell()
                if after_refresh is not None:
                    after_refresh()

    async def wait_started(self, names: Iterable[str] | None = None) -> None:
        """Within the connect grace: wait until the Catalog has the tools of every upstream that
        is still making its first connection (of those that could publish one of `names`, when
        given), or until the grace is over. Returns at once after the grace, or when not running.

        An upstream whose first attempt failed is not waited for: it is retried in the background.
        """
        if self._started is None:
            return
        remaining = self._started + self.connect_grace - anyio.current_time()
        if remaining <= 0:
            return
        wanted = None if names is None else list(names)
        with anyio.move_on_after(remaining):
            while self._waits_for(wanted):
                if self._news is None:
                    self._news = anyio.Event()
                await self._news.wait()

    def _waits_for(self, names: list[str] | None) -> bool:
        if self._pending or self._refreshing:
            return True
        adapters = self.adapters.values() if names is None else self.adapters_for(names)
        return any(a.first_connection for a in adapters)

    def _tell(self) -> None:
        news, self._news = self._news, None
        if news is not None:
            news.set()

    def not_connected(self, name: str) -> UpstreamUnavailableError | None:
        """Why `name` is not published when it is the tool of an upstream that is not connected:
        an enabled server whose namespace prefix the name has (None when there is none, or when
        every such server is connected, and so does not have the tool)."""
        for adapter in self.adapters.values():
            config = adapter.config
            if not (config.enabled and config.namespace and could_publish(config.namespace, name)):
                continue
            if adapter.state != "connected":
                return adapter.unavailable()
        return None

    def _adapter_changed(self, adapter: MCPSkillAdapter) -> None:
        key = tuple((a.name, a.tools_version) for a in self.adapters.values())
        if key == self._key:
            self._tell()  # a state change only (a first attempt failed): a listing may stop waiting
            return
        self._pending = True
        if self._dirty is not None:
            self._dirty.set()

    def status(self) -> list[dict[str, Any]]:
        """One row per configured server (`orchestrator servers list`), then one per broken entry."""
        published: dict[str, list[str]] = {}
        for skill in self._skills:
            published.setdefault(skill.server, []).append(skill.name)
        rows: list[dict[str, Any]] = []
        for adapter in self.adapters.values():
            row = adapter.status()
            row["published"] = published.get(adapter.name, [])
            rows.append(row)
        for problem in self._problems:
            name = problem.error.server if isinstance(problem.error, ServerConfigError) else None
            rows.append({"name": name, "state": "invalid", "tools": 0, "last_error": str(problem.error)})
        return rows


async def test_server(config: ServerConfig, timeout: float = DEFAULT_CONNECT_TIMEOUT) -> dict[str, Any]:
    """Connect to one server, list its tools and disconnect: what `orchestrator servers test NAME` reports.

    Never raises for the server's failures: `ok` says whether it worked, `error` why not.
    """
    adapter = MCPSkillAdapter(config, connect_timeout=timeout)
    began = anyio.current_time()
    error: str | None = None
    try:
        await adapter.probe()
    except TimeoutError:
        error = adapter.with_stderr(f"no answer to initialize and tools/list within {timeout:g}s")
    except Exception as exc:  # the report is the product: every failure becomes its `error`
        error = adapter.with_stderr(describe_error(exc))
    seconds = anyio.current_time() - began
    skills = {s.upstream_name: s.name for s in adapter.skills()}
    return {
        "name": config.name,
        "ok": error is None,
        "error": error,
        "seconds": round(seconds, 3),
        "transport": config.transport,
        "target": config.target(),
        "enabled": config.enabled,
        "protocol_version": adapter.protocol_version,
        "server": None
        if adapter.server_info is None
        else {"name": adapter.server_info.name, "version": adapter.server_info.version},
        "instructions": adapter.instructions,
        "tools": [
            {
                "name": skills[t.name],
                "upstream": t.name,
                "description": (t.description or "").strip().splitlines()[0] if t.description else "",
            }
            for t in adapter.tools
        ],
        "excluded": list(adapter.excluded),
        "warnings": [str(w) for w in config.warnings],
    }
