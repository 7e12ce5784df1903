"""The MCP face of the Catalog: every skill a tool, its files resources, instructions prompts.

`OrchestratorServer` is an `MCPServer` (so `mcp dev` / `mcp run` accept it) whose tools,
resources and prompts are not registered one by one but read from the Catalog on each list
request, with the explicit JSON Schemas of skill.yaml instead of inferred ones.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncGenerator, Iterable, Sequence
from contextlib import asynccontextmanager
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.apps import Apps
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.models import InitializationOptions
from mcp_types import (
    CallToolResult,
    CompleteRequestParams,
    CompleteResult,
    EmptyResult,
    GetPromptResult,
    InputRequiredResult,
    ListPromptsResult,
    ListResourcesResult,
    ListToolsResult,
    NotificationParams,
    PaginatedRequestParams,
    SetLevelRequestParams,
)
from mcp_types import Prompt as MCPPrompt
from mcp_types import (
    Resource as MCPResource,
)
from mcp_types import (
    ResourceTemplate as MCPResourceTemplate,
)
from mcp_types import (
    Tool as MCPTool,
)

from adapters.context import request_of
from skills import (
    Catalog,
    Home,
    Skill,
    SkillContext,
    SkillsError,
    UnknownSkillError,
)
from skills.core.errors import clip
from skills.core.roles import Roles
from skills.core.schema import check_arguments

from ._access import Access
from ._building import pipeline_service, skill_catalog, upstream_source
from ._calls import LOG_ORDER as LOG_ORDER
from ._calls import (
    call_target,
    caller_of,
    declares_tasks,
    skill_context_of,
    tool_of,
    with_tasks,
)
from ._catalogue import DEFAULT_THRESHOLD, CatalogueMode, CatalogueSource
from ._completion import complete
from ._listing import prompt_of, prompts_of, read_resource_text, resource_templates, resources_of
from ._meta import MetaSkill, MetaSource
from ._paging import DEFAULT_PAGE_SIZE, Pager
from ._pipelines import META_TOOLS
from ._resources import resource_error
from ._results import error_result, where_in
from ._skills_ext import SkillsExtension
from ._taskcalls import core_task_call, task_service
from ._tracing import install_request_spans
from ._upstreams import PendingPipelines, upstream_target
from ._version import __version__
from ._watching import broadcast_changes, cancels_from_replicas, watch_skills
from .tasks import CallTarget, Identity, continue_in_rounds, identity_of, install, task_wire

if TYPE_CHECKING:
    from adapters import ServerSource
    from adapters.models import ModelService
    from pipelines.planning.help_ai import HelpWriter
    from pipelines.service import PipelineService
    from pipelines.storage.state import Backends

    from ._handles import RunHandles
    from .tasks import TaskService


__all__ = ["OrchestratorServer", "create_server"]

log = logging.getLogger("mcp_server")

_LISTINGS = frozenset({"tools/list", "prompts/list", "resources/list", "resources/templates/list"})

INSTRUCTIONS = (
    "Every tool of this server is a skill (an Agent Skills folder), a pipeline, or a tool imported "
    "from another MCP server. Tools whose description starts with 'Instructions:' return guidance to "
    "follow, with bundled reference files readable as resources skill://<name>/<path>."
)


class OrchestratorServer(MCPServer):
    """An MCP server that publishes a Catalog."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        home: Home | None = None,
        watch: bool = False,
        pipelines: PipelineService | None = None,
        servers: ServerSource | None = None,
        catalogue: CatalogueMode = "auto",
        catalogue_threshold: int = DEFAULT_THRESHOLD,
        page_size: int = DEFAULT_PAGE_SIZE,
        access: Access | None = None,
        handle_after: float | None = None,
    ) -> None:
        pager = Pager(page_size)
        super().__init__(
            name="orchestrator",
            version=__version__,
            instructions=INSTRUCTIONS,
            log_level="WARNING",
            lifespan=lambda _: self._lifespan(),
            extensions=[SkillsExtension(lambda: self.catalog, pager), Apps()],  # Apps: the run app (`_app_ui`)
        )
        self.pager = pager
        self.catalog = catalog
        self.home = home
        self.pipelines = pipelines
        self.servers = servers
        self.watch = watch
        self.access = access or Access(home)
        """Allowed roots (the client's too) and isolation settings given to each call."""
        self.handle_after = handle_after
        """Seconds before a long call answers with a run handle (`_handles`; None: config.yaml's)."""
        self.catalogue = CatalogueSource(catalog, servers, catalogue, catalogue_threshold)
        """Catalogue mode and its tools (kind "meta"): a Catalog source, before the meta tools."""
        self.catalogue.follow(len(catalog))
        self.meta = MetaSource(META_TOOLS, pipelines) if pipelines is not None else None
        """The server's own tools (kind "meta"): a Catalog source of their own, registered last."""
        catalog.add_providers([self.catalogue, *([self.meta] if self.meta is not None else [])])
        self.pending: PendingPipelines | None = None
        """Pipelines that wait for an upstream server (set by `create_server`)."""
        self._tool_cache: tuple[int, list[MCPTool]] | None = None
        self._targets: dict[str, CallTarget] = {}
        """`target` of each tool called, while its Catalog entry is the same object."""
        self._legacy_sessions: list[Any] = []
        catalog.subscribe(self._on_catalog_change)
        self.list_changed_to_handshake_clients = True
        """False over stateless HTTP: no stream outlives a request there, so a handshake-era client
        can never be sent list_changed and initialize must not promise it. (2026-07-28 clients
        are told through `subscriptions/listen`, which the SDK advertises by itself.)"""
        self.tasks_listed_to_handshake_clients = True
        """False over stateless HTTP: a 2025-11-25 `tasks/list` shows the tasks of the caller's own
        connection (no identity says more), which there is one request, so it would always be empty."""
        low = self._lowlevel_server
        # Handshake-era clients only learn that tools/list can change when initialize says so;
        # the HTTP session manager asks `create_initialization_options()` with no arguments.
        create = low.create_initialization_options
        changes = NotificationOptions(tools_changed=True, prompts_changed=True, resources_changed=True)

        def initialization_options(
            notification_options: NotificationOptions | None = None,
            experimental_capabilities: dict[str, dict[str, Any]] | None = None,
            extensions: dict[str, dict[str, Any]] | None = None,
        ) -> InitializationOptions:
            notify = notification_options or (changes if self.list_changed_to_handshake_clients else None)
            options = create(notify, experimental_capabilities, extensions)
            return with_tasks(options, listed=self.tasks_listed_to_handshake_clients)

        low.create_initialization_options = initialization_options
        low.add_notification_handler("notifications/initialized", NotificationParams, self._on_initialized)
        self.access.install(low)
        # Logging (handshake era: `logging/setLevel` per session) and completion are declared
        # because they are served: the SDK derives both capabilities from these handlers.
        self._log_levels: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        low.add_request_handler("logging/setLevel", SetLevelRequestParams, self._set_log_level)
        low.add_request_handler("completion/complete", CompleteRequestParams, self._complete)
        self._wire_cache: dict[tuple[str, str, int, str], Any] = {}
        low.middleware.append(self._cached_listings)
        install_request_spans(low)
        self._lifespans = 0
        if home is not None:  # tasks need a home (their records live in its state.sqlite)
            install(low, lambda: self.tasks)
            low.middleware.append(self._core_task_calls)

    @property
    def lowlevel(self) -> Server[Any]:
        """The SDK's low-level server under this one (the HTTP transport runs it)."""
        return self._lowlevel_server

    async def _cached_listings(self, ctx: Any, call_next: Any) -> Any:
        """Serve repeated list requests from their wire form.

        The SDK re-dumps and re-validates every Tool model on each tools/list (~15 ms for 1,000
        tools); the listing only changes with the Catalog, so its wire dict is kept per
        (method, protocol version, catalog version) and reused until the Catalog changes.
        """
        if ctx.method not in _LISTINGS:
            return await call_next(ctx)
        if ctx.method == "tools/list" and self.servers is not None:  # a first listing holds quick upstreams
            await self.servers.wait_started()
        params: dict[str, Any] = ctx.params or {}
        cursor = params.get("cursor")
        key = (ctx.method, ctx.protocol_version or "", self.catalog.version, cursor if isinstance(cursor, str) else "")
        hit = self._wire_cache.get(key)
        if hit is None:
            hit = await call_next(ctx)
            if len(self._wire_cache) > 32:
                self._wire_cache.clear()
            self._wire_cache[key] = hit
        return hit

    # -- tools -----------------------------------------------------------------------------
    async def list_tools(self) -> list[MCPTool]:
        """One tool per skill of the Catalog; in catalogue mode (`_catalogue`) the server's own tools
        only: the catalogue tools instead of the skills, and the meta tools."""
        cached = self._tool_cache
        if cached is not None and cached[0] == self.catalog.version:
            return cached[1]
        handles = self.home is not None and self.handles.after > 0
        own = self.catalogue.active
        tools = [tool_of(skill, handles) for skill in self.catalog.tools() if not own or skill.kind == "meta"]
        self._tool_cache = (self.catalog.version, tools)
        return tools

    async def _handle_list_tools(self, ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        tools, cursor = self.pager.page("tools/list", await self.list_tools(), params.cursor if params else None)
        return ListToolsResult(tools=tools, next_cursor=cursor)

    async def call_tool(  # pyright: ignore[reportIncompatibleMethodOverride]  # the SDK's type omits the tasks extension's result (a dict), which its handler passes on as it is
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult | dict[str, Any]:
        """Run one tool call; every failure is the error envelope of SPEC 7 (see `_results`).

        The call runs at once, or parked across 2026-07-28 input rounds, or as a task when the
        client asked for one (see `tasks`).
        """
        target = self.target(name)
        if isinstance(target, CallToolResult) and await self._caught_up():
            target = self.target(name)  # registered through another replica a moment ago
        if isinstance(target, CallToolResult):  # an upstream's tool before it connected: not_connected
            target = await upstream_target(self, name, target)
        if isinstance(target, CallToolResult):
            return target
        try:
            check_arguments(name, target.skill.input_schema, arguments)
        except SkillsError as exc:
            return error_result(exc, where=where_in(target.skill.root, exc), output_schema=target.output_schema)
        if isinstance(target.skill, MetaSkill) and target.skill.relay is not None:  # `call_skill`: another call
            return await target.skill.relay(arguments, lambda tool, args: self.call_tool(tool, args, context))
        if context is not None and self.home is not None and target.skill.kind != "remote":  # `remote_context_of`
            request = request_of(context) or context.request_context
            if target.may_task and declares_tasks(request):
                return await self.start_task(target, arguments, context, era="extension", ttl_ms=None)
            return await continue_in_rounds(
                self.tasks,
                target,
                arguments,
                context,
                lambda identity: self.skill_context(target.skill, context, identity=identity),
                lambda ctx: self.access.bound(ctx, context),
            )
        ctx = self.skill_context(target.skill, context)
        async with self.access.bound(ctx, context):
            return await target.body(arguments, ctx)()

    def target(self, name: str) -> CallTarget | CallToolResult:
        """The tool called `name` as the call path needs it (an unknown-tool envelope if none)."""
        skill = self.catalog.tool(name)
        if skill is None:
            return error_result(self._unknown(name), where="name")
        return call_target(skill, self._targets)

    async def start_task(
        self, target: CallTarget, arguments: dict[str, Any], context: Context[Any, Any], *, era: str, ttl_ms: int | None
    ) -> CallToolResult | dict[str, Any]:
        ctx = self.skill_context(target.skill, context, parked=True)
        record = await self.tasks.create(
            target, arguments, context, ctx, era=era, ttl_ms=ttl_ms, bound=lambda: self.access.bound(ctx, context)
        )
        if isinstance(record, CallToolResult):
            return record
        if era == "extension":
            return {"resultType": "task", **task_wire(record, self.tasks, modern=True)}
        return {"task": task_wire(record, self.tasks, modern=False)}

    async def _core_task_calls(self, ctx: Any, call_next: Any) -> Any:
        """2025-11-25 `tools/call` with `task` (`_taskcalls.core_task_call`)."""
        return await core_task_call(self, ctx, call_next)

    @cached_property
    def tasks(self) -> TaskService:
        """The server's tasks and parked calls (made on first use)."""
        return task_service(self, self._log_levels)

    @cached_property
    def handles(self) -> RunHandles:
        """Long calls that answer with a run handle after `handle_after` seconds (`_handles`)."""
        from ._handles import RunHandles
        from .tasks import load_task_limits

        after = self.handle_after
        if after is None:
            after = load_task_limits(self.home.root / "config.yaml").handle_after_s if self.home is not None else 0
        return RunHandles(after, self.pipelines.store if self.pipelines is not None else None)

    def _unknown(self, name: str) -> SkillsError:
        """The unknown-tool error; a name no tool could have gets no (costly) suggestions."""
        if len(name) > 64:
            return UnknownSkillError(
                f"no skill or tool named '{clip(name, 64)}'", hint="list the tools to see what exists"
            )
        return self.catalog.unknown(name)

    @cached_property
    def models(self) -> ModelService:
        """The home's model registry (re-read when it changes) and the providers of each call."""
        from adapters.models import ModelService

        return ModelService(self.home)

    def skill_context(
        self,
        skill: Skill,
        context: Context[Any, Any] | None,
        *,
        parked: bool = False,
        identity: Identity | None = None,
    ) -> SkillContext:
        """The `ctx` a skill gets: progress and logs go to the calling client, model calls to
        the Anthropic API or the client's sampling (`_calls.skill_context_of`)."""
        return skill_context_of(self, skill, context, self._log_levels, parked=parked, identity=identity)

    @cached_property
    def runs_dir(self) -> Path | None:
        """Where a call's artifacts go (the home's runs/; None without a home)."""
        return self.home.runs_dir if self.home is not None else None

    @cached_property
    def help_writer(self) -> HelpWriter:
        """Writes the model's overview of every published pipeline in the background (`running`)."""
        from pipelines.planning.help_ai import HelpWriter

        assert self.pipelines is not None
        return HelpWriter(self.pipelines, self.models.api_access)

    @cached_property
    def roles(self) -> Roles:
        """The home's agent roles (`agents/roles.yaml` over the shipped ones), re-read when it changes."""
        return Roles(self.home.root if self.home is not None else None)

    # -- resources ---------------------------------------------------------------------------
    async def _handle_list_resources(self, ctx: Any, params: PaginatedRequestParams | None) -> ListResourcesResult:
        items, cursor = self.pager.page(
            "resources/list", await self.list_resources(), params.cursor if params else None
        )
        return ListResourcesResult(resources=items, next_cursor=cursor)

    async def list_resources(self) -> list[MCPResource]:
        return resources_of(self.catalog, self.pipelines)

    async def list_resource_templates(self) -> list[MCPResourceTemplate]:
        return resource_templates()

    async def read_resource(self, uri: Any, context: Context[Any, Any] | None = None) -> Iterable[ReadResourceContents]:
        """One resource; a refused path is -32602, an unknown resource the code of the client's era
        (`resource_error`), both with the message."""
        try:
            return self._read_resource(str(uri), identity_of(context).owner)
        except (ResourceError, OSError) as exc:
            era = context.request_context.session.protocol_version if context and context.request_context else None
            raise resource_error(exc, str(uri), era) from None

    def _read_resource(self, text: str, viewer: str) -> list[ReadResourceContents]:
        return read_resource_text(self.catalog, self.pipelines, text, viewer)

    # -- prompts -----------------------------------------------------------------------------
    async def _handle_list_prompts(self, ctx: Any, params: PaginatedRequestParams | None) -> ListPromptsResult:
        items, cursor = self.pager.page("prompts/list", await self.list_prompts(), params.cursor if params else None)
        return ListPromptsResult(prompts=items, next_cursor=cursor)

    async def list_prompts(self) -> list[MCPPrompt]:
        return prompts_of(self.catalog)

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult:
        return prompt_of(self.catalog, name, arguments)

    # -- logging and completion --------------------------------------------------------------
    async def _set_log_level(self, ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        """`logging/setLevel` (handshake era): this session gets log messages at that level and above."""
        self._log_levels[caller_of(ctx.session)] = LOG_ORDER.index(params.level)
        return EmptyResult()

    async def _complete(self, ctx: Any, params: CompleteRequestParams) -> CompleteResult:
        viewer = identity_of(SimpleNamespace(request_context=ctx)).owner  # it is offered its own runs only
        return await complete(self.catalog, self.pipelines, params, viewer)

    # -- change notifications ----------------------------------------------------------------
    async def _on_initialized(self, ctx: Any, params: Any) -> None:
        session = ctx.session
        self._legacy_sessions.append(session)

        def forget() -> None:
            if session in self._legacy_sessions:
                self._legacy_sessions.remove(session)

        # Forget the session when its connection ends (client gone, HTTP session reaped or
        # evicted, each stateless request): kept here, it would hold the connection's memory.
        connection = getattr(session, "_connection", None)  # the SDK offers no public accessor
        if connection is not None:
            connection.exit_stack.callback(forget)

    async def _on_catalog_change(self, catalog: Catalog) -> None:
        if self.catalogue.follow(len(catalog)):  # catalogue mode switched with the number of skills
            catalog.rebuild([])
        self._tool_cache = None
        await self.broadcast_list_changed()

    async def broadcast_list_changed(self) -> None:
        """Tell every connected client that tools, prompts and resources changed (both eras)."""
        self._legacy_sessions = await broadcast_changes(self._subscriptions, self._legacy_sessions)

    # -- live reload ---------------------------------------------------------------------------
    async def reload(self) -> bool:
        """Re-read every source now; True if the published set changed."""
        if self.home is not None:
            await self.catalog.set_enabled(self.home.enabled_overrides())
        return await self.catalog.refresh()

    @asynccontextmanager
    async def running(self, *, overviews: bool = True, gate: anyio.Event | None = None) -> AsyncGenerator[None]:
        """The server's background work while inside: live reload and the upstream MCP servers.

        Upstreams connect in the background (once `gate` is set, if given: see `ServerSource.run`)
        and never delay a client's initialize; their tools appear (with tools/list_changed) when ready.
        Leaving stops everything and leaves no child process behind. `overviews`: write the pipelines'
        missing help overviews (not in a worker: it publishes no tools, nobody would read them).
        """
        async with anyio.create_task_group() as tg, self.watching():
            shared = self.pipelines.shared if self.pipelines is not None else None
            if shared is not None:  # pipelines registered through another replica appear here too
                tg.start_soon(shared.listen, self._shared_changed)
                tg.start_soon(self._cancels_from_replicas)
            if self.pipelines is not None and overviews:  # overviews of the pipelines' help, with the API only
                tg.start_soon(self.help_writer.run)
            servers = self.servers
            if servers is not None:
                dependents = list(self.pipelines.sources) if self.pipelines is not None else []
                after = self.pending.check if self.pending is not None else None
                tg.start_soon(lambda: servers.run(self.catalog, dependents=dependents, after_refresh=after, gate=gate))
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                if self.pipelines is not None:
                    await self.pipelines.aclose()

    async def _cancels_from_replicas(self) -> None:
        """`cancel_run` through another replica: stop the run if it runs here (PostgreSQL NOTIFY)."""
        assert self.pipelines is not None
        await cancels_from_replicas(self.pipelines, lambda: self.__dict__.get("handles"))

    async def _caught_up(self) -> bool:
        """Re-read the shared state's pipelines for a call of an unknown name (at most once a second):
        True when something changed. The notification of a registration may still be on its way."""
        import time

        if self.pipelines is None or self.pipelines.shared is None or time.monotonic() - self._shared_read < 1.0:
            return False
        self._shared_read = time.monotonic()
        return await self.catalog.refresh([self.pipelines.shared])

    _shared_read = 0.0

    async def _shared_changed(self) -> None:
        """The shared state's registered pipelines changed: re-read them (clients hear list_changed)."""
        assert self.pipelines is not None
        await self.catalog.refresh(list(self.pipelines.sources))

    @asynccontextmanager
    async def watching(self) -> AsyncGenerator[None]:
        """Watch the skill folders while inside; changes update the Catalog and notify clients."""
        if not self.watch:
            yield
            return
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            ready = anyio.Event()
            tg.start_soon(watch_skills, self.catalog, self.home, self.pipelines, ready, stop)
            await ready.wait()
            try:
                yield
            finally:
                # Setting the event (not cancelling) lets the watcher thread return within one
                # `step`; a cancel would wait for the thread's own timeout.
                stop.set()

    # -- running -------------------------------------------------------------------------------
    @asynccontextmanager
    async def _lifespan(self) -> AsyncGenerator[dict[str, Any]]:
        """Count the server's open lifespans; when the last ends, stop what still runs (its runs
        are recorded as cancelled, resumable) so that nothing outlives the server."""
        self._lifespans += 1
        try:
            yield {}
        finally:
            self._lifespans -= 1
            if self._lifespans == 0 and "handles" in self.__dict__:
                with anyio.CancelScope(shield=True):
                    await self.handles.aclose()
            if self._lifespans == 0 and "tasks" in self.__dict__:
                with anyio.CancelScope(shield=True):
                    await self.tasks.aclose()

    async def run_stdio_async(self) -> None:
        """Serve over stdio (also what `mcp run` / `mcp dev` call), with live reload."""
        from mcp.server.stdio import stdio_server

        from ._stdio import AnsweringReader

        async with self.running(gate=(answered := anyio.Event())), stdio_server() as (read_stream, write_stream):
            low = self._lowlevel_server
            reader = AnsweringReader(read_stream, write_stream, answered)  # answers lines its parser refused
            await low.run(reader, write_stream, low.create_initialization_options())


def create_server(
    *,
    home: str | Path | Home | None = None,
    skill_dirs: Sequence[str | Path] = (),
    watch: bool = False,
    builtin: bool = True,
    pipelines: bool = True,
    servers: str | Path | None = None,
    catalogue: CatalogueMode = "auto",
    catalogue_threshold: int = DEFAULT_THRESHOLD,
    page_size: int = DEFAULT_PAGE_SIZE,
    allow_dirs: Sequence[str | Path] | None = None,
    backends: Backends | None = None,
    handle_after: float | None = None,
    connect_grace: float | None = None,
) -> OrchestratorServer:
    """Build the server: built-in skills < home skills < each of `skill_dirs` (later wins).

    `catalogue`, `catalogue_threshold`: catalogue mode (see `_catalogue`); `page_size`: items per
    page of tools/list, resources/list, prompts/list and skills/list. `allow_dirs`: the folders
    file built-ins may read (default: `$ORCHESTRATOR_ALLOW_DIRS`, else the working directory; a
    client's MCP roots narrow them). `backends`: the shared state and queue of the distributed
    mode (default: the home's state.sqlite, runs in this process). `connect_grace`: seconds after
    the start a tool listing waits for upstreams still connecting (default 3; `ServerSource`).
    `handle_after`: seconds before a long call answers with a run handle (default: `tasks:
    handle_after_s` of config.yaml, 45; 0 never).
    """
    home = home if isinstance(home, Home) else Home.resolve(home)
    home.ensure()
    catalog = skill_catalog(home, skill_dirs, builtin=builtin)
    upstreams = upstream_source(catalog, home, servers, connect_grace)
    service, cached = pipeline_service(home, catalog, builtin=builtin, backends=backends) if pipelines else (None, {})
    home.record(catalog)
    access = Access(home, allow_dirs)
    server = OrchestratorServer(
        catalog,
        home=home,
        watch=watch,
        pipelines=service,
        servers=upstreams,
        access=access,
        catalogue=catalogue,
        catalogue_threshold=catalogue_threshold,
        page_size=page_size,
        handle_after=handle_after,
    )
    server.pending = PendingPipelines(server)  # a pipeline waiting for an upstream is pending, not broken
    for problem in server.pending.sort_out(catalog.problems()):
        skipped = all(p.severity == "warning" for p in problem.problems)
        log.log(logging.WARNING if skipped else logging.ERROR, "not published: %s", problem.error)
    server.__dict__.update(cached)
    return server
