"""What every model provider takes and offers: one resolved request in, one `Completion` out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from skills.core.models import Completion

from .registry import ModelInfo

__all__ = ["ModelProvider", "ModelRequest"]


@dataclass(frozen=True)
class ModelRequest:
    """One model call, its model already resolved through the registry.

    Messages, blocks and tools are in the Anthropic Messages shapes (see `skills.core.models`).
    """

    messages: list[dict[str, Any]]
    model: ModelInfo
    max_tokens: int
    system: str | None = None
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = None
    thinking: int | None = None
    """Extended thinking's token budget (the API's `budget_tokens`), or None: no thinking. Only
    the Anthropic API takes it; MCP sampling has no such parameter (the client's model decides)."""


class ModelProvider(Protocol):
    """One way to reach a model (the Anthropic API, the client's sampling)."""

    name: str
    """anthropic | sampling (the `providers:` names of the registry)."""

    def unavailable(self, request: ModelRequest) -> str | None:
        """Why this provider cannot answer `request` (None: it can). Cheap, no I/O."""
        ...

    async def complete(self, request: ModelRequest) -> Completion:
        """Answer one request; raises `ModelProviderError` after the provider's own retries."""
        ...
