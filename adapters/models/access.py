"""`ctx.extras["model"]`: the `skills.core.models.ModelAccess` a call gets, and the server's model service.

`ModelService` belongs to the server: it keeps the home's registry (re-read when the file
changes) and, for each tool call, builds a `ProviderAccess` over the providers in the
registry's order — the Anthropic API when ANTHROPIC_API_KEY is set, the calling client's
sampling when it declared it. The first provider that can answer a request answers it; when
none can, `NoModelProviderError` says why each could not and how to get one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from mcp_types.version import is_version_at_least

from skills import Home, SkillContext, SkillRunError, tracing
from skills.core.models import Completion, NoModelProviderError, Usage

from ..context import request_of
from ._provider import ModelProvider, ModelRequest
from ._rounds import INBOX_KEY, InputInbox
from .anthropic_api import AnthropicProvider
from .registry import ModelRegistry, load_registry
from .sampling import SamplingProvider, estimate_sent

__all__ = ["NO_PROVIDER_HINT", "ModelService", "ProviderAccess"]

log = logging.getLogger("adapters.models")

NO_PROVIDER_HINT = "set ANTHROPIC_API_KEY, or call it from a client that supports sampling (e.g. Claude Desktop)"


Built = tuple[ModelRegistry, tuple[ModelProvider, ...]]


class _Providers:
    """The registry and providers of one call, built when first asked for (most calls never
    ask: building them reads the registry and the environment and inspects the client)."""

    __slots__ = ("_build", "_value")

    def __init__(self, build: Callable[[], Built] | None, value: Built | None = None) -> None:
        self._build, self._value = build, value

    def get(self) -> Built:
        if self._value is None:
            assert self._build is not None
            self._value, self._build = self._build(), None
        return self._value


class ProviderAccess:
    """A `ModelAccess` over an ordered list of providers, summing what it spends."""

    def __init__(
        self,
        registry: ModelRegistry | None = None,
        providers: Sequence[ModelProvider] = (),
        *,
        parent: ProviderAccess | None = None,
        deferred: _Providers | None = None,
    ) -> None:
        if deferred is None:
            assert registry is not None, "a ProviderAccess needs a registry or a deferred source"
            deferred = _Providers(None, (registry, tuple(providers)))
        self._source = deferred
        self.usage = Usage()
        self._parent = parent

    @property
    def registry(self) -> ModelRegistry:
        return self._source.get()[0]

    @property
    def providers(self) -> tuple[ModelProvider, ...]:
        return self._source.get()[1]

    def __repr__(self) -> str:
        names = ", ".join(p.name for p in self.providers)
        return f"ProviderAccess(providers=[{names}], usage={self.usage.as_dict()})"

    def resolve(self, model: str | None) -> str:
        return self.registry.resolve(model)

    def known(self) -> set[str]:
        return self.registry.known()

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        system: str | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        temperature: float | None = None,
        thinking: int | None = None,
    ) -> Completion:
        """One completion; `max_tokens=None` takes the model's default from the registry;
        `thinking`: extended thinking's token budget (the Anthropic API; sampling answers without)."""
        if not messages:
            raise SkillRunError("a model call needs at least one message")
        info = self.registry.info(model)
        request = ModelRequest(
            messages=list(messages),
            model=info,
            max_tokens=max_tokens or info.max_tokens,
            system=system,
            tools=list(tools) if tools else None,
            temperature=temperature,
            thinking=thinking,
        )
        provider = self.provider_for(request)
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "anthropic" if provider.name == "anthropic" else "mcp.sampling",
            "gen_ai.request.model": info.id,
            "gen_ai.request.max_tokens": request.max_tokens,
        }
        with tracing.span(f"chat {info.id}", "client", attributes) as span:
            try:
                completion = await provider.complete(request)
            except anyio.get_cancelled_exc_class():  # cut off (a timeout, a cancel) before its answer:
                self._spend(estimate_sent(request))  # what was sent is spent; its answer reports nothing
                raise
            tracing.set_attributes(
                span,
                {
                    "gen_ai.response.model": completion.model or None,
                    "gen_ai.response.finish_reasons": [completion.stop_reason],
                    "gen_ai.usage.input_tokens": completion.usage.input_tokens,
                    "gen_ai.usage.output_tokens": completion.usage.output_tokens,
                },
            )
        self._spend(completion.usage)
        return completion

    def _spend(self, usage: Usage) -> None:
        """Add a call's usage here and to every access above."""
        access: ProviderAccess | None = self
        while access is not None:
            access.usage.add(usage)
            access = access._parent

    def provider_for(self, request: ModelRequest) -> ModelProvider:
        """The first provider that can answer, or `NoModelProviderError` with every reason."""
        reasons: list[str] = []
        for provider in self.providers:
            why = provider.unavailable(request)
            if why is None:
                return provider
            reasons.append(f"{provider.name}: {why}")
        detail = "; ".join(reasons) if reasons else "no providers are configured in models/registry.yaml"
        raise NoModelProviderError(f"no model provider can answer this call ({detail})", hint=NO_PROVIDER_HINT)

    def child(self) -> ProviderAccess:
        return ProviderAccess(parent=self, deferred=self._source)


class ModelService:
    """The models of one server: the home's registry and the providers of each call."""

    def __init__(self, home: Home | Path | str | None = None, *, environ: Mapping[str, str] | None = None) -> None:
        root = home.root if isinstance(home, Home) else home
        self.registry_file = Path(root) / "models" / "registry.yaml" if root is not None else None
        self._environ = environ
        self._registry: ModelRegistry | None = None
        self._stamp: tuple[int, int] | None = None

    @property
    def registry(self) -> ModelRegistry:
        """The registry, re-read when its file changed (one stat per call)."""
        stamp = _stamp(self.registry_file)
        if self._registry is None or stamp != self._stamp:
            home = self.registry_file.parent.parent if self.registry_file is not None else None
            self._registry = load_registry(home)
            self._stamp = stamp
        return self._registry

    def access(self, context: Any = None) -> ProviderAccess:
        """The access of one tool call (`context`: the MCP request's `Context`, None without a client)."""
        return self._build(context)[0]

    def relayed(self, ctx: SkillContext, relay: ModelProvider) -> ProviderAccess:
        """A worker's access (`orchestrator worker`: no client): the registry's providers in its
        order, the `sampling` one being `relay` (the client of the replica that started the run)."""
        environ = self._environ if self._environ is not None else os.environ

        def build() -> Built:
            registry = self.registry
            providers = [
                AnthropicProvider(environ.get("ANTHROPIC_API_KEY")) if name == "anthropic" else relay
                for name in registry.providers
            ]
            return registry, tuple(providers)

        access = ProviderAccess(deferred=_Providers(build))
        ctx.extras["model"] = access
        return access

    def api_access(self) -> ProviderAccess | None:
        """An access that needs no client (the Anthropic API, its key set and in the registry's
        providers), or None: background work never spends a connected client's sampling."""
        access = self._build(None)[0]
        if any(isinstance(p, AnthropicProvider) and p.configured for p in access.providers):
            return access
        return None

    def attach(self, ctx: SkillContext, context: Any = None, *, parked: bool = False) -> ProviderAccess:
        """Put the call's access in `ctx.extras["model"]`, and where the client's model answers
        through an inbox (2026-07-28, or `parked`: the call runs as a task), the inbox in
        `ctx.extras[INBOX_KEY]` for whoever carries its requests to the client.

        Only such a call needs its providers before it runs (its inbox must be there); any
        other call gets an access whose providers are built on its first model request, so a
        call that never asks a model pays nothing for them."""
        if parked or _answers_by_inbox(context):
            access, inbox = self._build(context, parked)
            if inbox is None and _elicits(context):  # the person can still be asked (`ask:` steps)
                inbox = InputInbox()
            if inbox is not None:
                ctx.extras[INBOX_KEY] = inbox
        else:
            access = ProviderAccess(deferred=_Providers(lambda: self._providers(context)[:2]))
        ctx.extras["model"] = access
        return access

    def _build(self, context: Any, parked: bool = False) -> tuple[ProviderAccess, InputInbox | None]:
        registry, providers, inbox = self._providers(context, parked)
        return ProviderAccess(registry, providers), inbox

    def _providers(
        self, context: Any, parked: bool = False
    ) -> tuple[ModelRegistry, tuple[ModelProvider, ...], InputInbox | None]:
        registry = self.registry
        environ = self._environ if self._environ is not None else os.environ
        providers: list[ModelProvider] = []
        inbox = None
        for name in registry.providers:
            if name == "anthropic":
                providers.append(AnthropicProvider(environ.get("ANTHROPIC_API_KEY")))
            else:
                answered = any(isinstance(p, AnthropicProvider) and p.configured for p in providers)
                sampling = _sampling_of(context, needed=not answered, parked=parked)
                inbox = sampling.inbox or inbox
                providers.append(sampling)
        return registry, tuple(providers), inbox


def _elicits(context: Any) -> bool:
    """Whether the call's client declared elicitation (it can be asked a pipeline's question)."""
    request = request_of(context)
    if request is None:
        return False
    return getattr(request.session.client_capabilities, "elicitation", None) is not None


def _answers_by_inbox(context: Any) -> bool:
    """Whether the call's client samples or elicits in the 2026-07-28 era, where its model (or
    its user) answers through an inbox (`_sampling_of`), not by a request of the server's."""
    request = request_of(context)
    if request is None:
        return False
    caps = request.session.client_capabilities
    if getattr(caps, "sampling", None) is None and getattr(caps, "elicitation", None) is None:
        return False
    version = request.protocol_version
    return version is not None and is_version_at_least(version, "2026-07-28")


def _sampling_of(context: Any, *, needed: bool, parked: bool = False) -> SamplingProvider:
    request = request_of(context)
    if request is None:
        return SamplingProvider.unavailable_because("no MCP client is connected to this call")
    session = request.session
    capability = getattr(session.client_capabilities, "sampling", None)
    if capability is None:
        return SamplingProvider.unavailable_because("the client did not declare the sampling capability")
    version = request.protocol_version
    if parked or (version is not None and is_version_at_least(version, "2026-07-28")):
        if not needed:  # the API answers first: no need to park the call for the client's model
            return SamplingProvider.unavailable_because("not used: the Anthropic API answers first")
        return SamplingProvider.parked(InputInbox(), capability)
    if not session.can_send_request:
        return SamplingProvider.unavailable_because("this connection cannot carry requests to the client")
    return SamplingProvider.direct(session, request.request_id, capability)


def _stamp(path: Path | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size
