"""Model access as skills see it: one protocol, whatever answers (Anthropic API or the client).

A skill (or the pipeline runtime, or an agent) asks `ctx.extras["model"]`, a `ModelAccess`,
for a completion. The providers behind it live in `adapters/models/` (the Anthropic Messages
API when `ANTHROPIC_API_KEY` is set; the connected MCP client's own model through sampling
otherwise); the skills core only knows this protocol, the usage record and the errors.

Messages and content blocks use the Anthropic Messages shapes (the MCP sampling provider
converts): `{"role": "user"|"assistant", "content": str | [blocks]}`, blocks `{"type": "text",
"text": ...}`, `{"type": "tool_use", "id", "name", "input"}`, `{"type": "tool_result",
"tool_use_id", "content", "is_error"}`; tools `{"name", "description", "input_schema"}`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .errors import SkillRunError

__all__ = ["Completion", "ModelAccess", "NoModelProviderError", "UnknownModelError", "Usage", "model_access"]


@dataclass
class Usage:
    """Tokens and cost of model calls, summed (per call, step, agent or run)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    estimated: bool = False
    """Some of the tokens were estimated (a client's sampling reports none), not counted by a provider."""

    def add(self, other: Usage) -> Usage:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_usd += other.cost_usd
        self.calls += other.calls
        self.estimated = self.estimated or other.estimated
        return self

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "calls": self.calls,
        } | ({"estimated": True} if self.estimated else {})


@dataclass
class Completion:
    """One model answer."""

    text: str
    """The concatenated text blocks."""
    content: list[dict[str, Any]] = field(default_factory=lambda: [])
    """Every content block (text and tool_use), Anthropic shapes."""
    stop_reason: str = "end_turn"
    """end_turn | max_tokens | tool_use | stop_sequence."""
    model: str = ""
    provider: str = ""
    """anthropic | sampling."""
    usage: Usage = field(default_factory=Usage)

    def tool_calls(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b.get("type") == "tool_use"]


class NoModelProviderError(SkillRunError):
    """Neither the Anthropic API nor the client's sampling is available."""


class UnknownModelError(SkillRunError):
    """A model role or id that the model registry does not know."""


@runtime_checkable
class ModelAccess(Protocol):
    """What `ctx.extras["model"]` offers."""

    usage: Usage
    """Everything this access has spent so far (the caller's step, agent or run)."""

    def resolve(self, model: str | None) -> str:
        """The model id for a role (`orchestrator`, `review`, `validation`) or an id; `None` is the
        `orchestrator` role. Raises `UnknownModelError`."""
        ...

    def known(self) -> set[str]:
        """Every role and model id the registry knows (for the verifier)."""
        ...

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
        """One completion; adds its usage to `usage`. Raises `NoModelProviderError` when no
        provider can answer, `SkillRunError` for a provider failure after its retries.

        `max_tokens`: the longest answer; None takes the model's default from the registry.

        `thinking`: tokens of the answer the model may think with (extended thinking; the
        Anthropic API only, `max_tokens` must exceed it). A provider that cannot think answers
        without it."""
        ...

    def child(self) -> ModelAccess:
        """An access sharing the providers but with its own `usage` (also added to this one's)."""
        ...


def model_access(extras: dict[str, Any]) -> ModelAccess:
    """The context's model access, or a clear error that says how to get one."""
    access = extras.get("model")
    if access is None:
        raise NoModelProviderError(
            "this needs a model, and no model provider is available",
            hint="set ANTHROPIC_API_KEY, or call it from a client that supports sampling (e.g. Claude Desktop)",
        )
    return access
