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

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from typing import Any, Protocol, runtime_checkable

from .errors import SkillRunError

__all__ = [
    "PICO_PER_USD",
    "Completion",
    "ModelAccess",
    "NoModelProviderError",
    "UnknownModelError",
    "Usage",
    "model_access",
    "pico_usd",
    "shown_usd",
]


PICO_PER_USD = 10**12
"""Money is counted in pico-dollars (10^-12 USD), as integers: a token's price ($0.80 per million
tokens is 800,000 pico-dollars) is a whole number of them, so sums are exact, whatever their order
and however many calls. Only what is shown is rounded (`cost_usd`, 6 places)."""
SHOWN_PLACES = 6
"""Decimal places of a shown `cost_usd` (a millionth of a dollar)."""


def pico_usd(usd: float | int | Decimal | str) -> int:
    """USD as whole pico-dollars. A float (a price times tokens) is taken as the decimal amount it
    stands for: its binary error is far below a pico-dollar and rounds away."""
    if not usd:  # the common case (a tally's start, a call of no cost): no decimal arithmetic
        return 0
    amount = Decimal(usd) if not isinstance(usd, float) else Decimal(repr(usd))
    return int((amount * PICO_PER_USD).to_integral_value(ROUND_HALF_EVEN))


def shown_usd(pico: int) -> float:
    """Pico-dollars as the dollars a result shows: rounded (half up) to `SHOWN_PLACES` places."""
    exact = Decimal(pico) / PICO_PER_USD
    return float(exact.quantize(Decimal(1).scaleb(-SHOWN_PLACES), rounding=ROUND_HALF_UP))


@dataclass(init=False)
class Usage:
    """Tokens and cost of model calls, summed (per call, step, agent or run).

    The cost is kept exact (`cost_pico`, integer pico-dollars) and summed exactly; `cost_usd`
    reads it in dollars, and `as_dict` shows it rounded to 6 places, at the edge only.
    """

    input_tokens: int
    output_tokens: int
    cost_pico: int
    """The cost in pico-dollars (10^-12 USD): exact, see `PICO_PER_USD`."""
    calls: int
    estimated: bool
    """Some of the tokens were estimated (a client's sampling reports none, a call cut off before its
    answer reports nothing), not counted by a provider."""

    def __init__(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float | Decimal = 0.0,
        calls: int = 0,
        estimated: bool = False,
        *,
        cost_pico: int | None = None,
    ) -> None:
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cost_pico = pico_usd(cost_usd) if cost_pico is None else int(cost_pico)
        self.calls = calls
        self.estimated = estimated

    @property
    def cost_usd(self) -> float:
        """The cost in dollars, unrounded (for limits; what is shown is `as_dict`'s)."""
        return self.cost_pico / PICO_PER_USD

    @property
    def cost(self) -> Decimal:
        """The exact cost in dollars."""
        return Decimal(self.cost_pico) / PICO_PER_USD

    def add(self, other: Usage) -> Usage:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_pico += other.cost_pico
        self.calls += other.calls
        self.estimated = self.estimated or other.estimated
        return self

    def minus(self, other: Usage) -> Usage:
        """What was spent since `other` (an earlier reading of this same tally)."""
        return Usage(
            self.input_tokens - other.input_tokens,
            self.output_tokens - other.output_tokens,
            calls=self.calls - other.calls,
            estimated=self.estimated,
            cost_pico=self.cost_pico - other.cost_pico,
        )

    def copy(self) -> Usage:
        return Usage().add(self)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def spent(self) -> bool:
        """Anything at all: a call, a token or a cost."""
        return bool(self.calls or self.total_tokens or self.cost_pico)

    def as_dict(self) -> dict[str, Any]:
        """As shown to a caller: tokens, the cost rounded to 6 places, calls, `estimated`."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": shown_usd(self.cost_pico),
            "calls": self.calls,
            "estimated": self.estimated,
        }

    def record(self) -> dict[str, Any]:
        """As kept (checkpoints, run history, the queue): exact, read back by `from_record`."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_pico": self.cost_pico,
            "calls": self.calls,
            "estimated": self.estimated,
        }

    @classmethod
    def from_record(cls, tally: Mapping[str, Any]) -> Usage:
        """A kept (`record`) or shown (`as_dict`) tally; a shown one's cost is as exact as it was
        shown (a tally summed from both, as a checkpoint of an older version holds, adds both)."""
        return cls(
            int(tally.get("input_tokens") or 0),
            int(tally.get("output_tokens") or 0),
            calls=int(tally.get("calls") or 0),
            estimated=bool(tally.get("estimated", False)),
            cost_pico=int(tally.get("cost_pico") or 0) + pico_usd(float(tally.get("cost_usd") or 0.0)),
        )


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
