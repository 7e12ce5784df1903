"""The connected MCP client's own model as a provider (`sampling/createMessage`), both eras.

- Handshake era (2025-11-25 and older: Claude Desktop, the Inspector): a sampling request is
  sent to the client mid-call on the call's own request stream.
- 2026-07-28, and calls run as tasks (either era): the tool body is parked and its requests
  wait in the call's `_rounds.InputInbox` until the client answers them (through the call's
  retry, `tasks/update` or `tasks/result`; see `_rounds`).

Sampling results carry no token counts, so they are estimated (`estimate_usage`: about four
characters a token, the common rule for English text and code with Claude's tokenizer, plus a
fixed cost per image and per message) and marked `estimated`, so that token and cost limits and
usage totals still mean something.

Messages go over in the Anthropic shapes of `skills.core.models` and are converted here both ways:
text, tool_use, tool_result and base64 images; thinking blocks stay out (the client's model
has its own). The model id becomes a model-preference hint; the client picks its model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    ContentBlock,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ImageContent,
    ModelHint,
    ModelPreferences,
    SamplingCapability,
    SamplingMessage,
    SamplingMessageContentBlock,
    TextContent,
    Tool,
    ToolResultContent,
    ToolUseContent,
)
from pydantic import ValidationError

from skills import SkillRunError
from skills.core.models import Completion, Usage

from ._provider import ModelRequest
from ._rounds import InputInbox
from .errors import ModelProviderError

__all__ = ["SamplingProvider", "estimate_usage", "from_sampling_result", "to_sampling_params"]

log = logging.getLogger("adapters.models")

R = TypeVar("R", CreateMessageResult, CreateMessageResultWithTools)
Ask = Callable[[CreateMessageRequestParams, type[R]], Awaitable[R]]

_STOP_REASONS = {
    "endTurn": "end_turn",
    "maxTokens": "max_tokens",
    "toolUse": "tool_use",
    "stopSequence": "stop_sequence",
}
# What a family is good at, as the advisory priorities a client may weigh when no hint matches.
_PRIORITIES = {"haiku": (0.9, 0.9, 0.3), "sonnet": (0.5, 0.5, 0.7), "opus": (0.2, 0.2, 0.9)}


class SamplingProvider:
    """Model calls answered by the calling client's model."""

    name = "sampling"

    def __init__(
        self,
        *,
        capability: SamplingCapability | None = None,
        ask: Ask[Any] | None = None,
        inbox: InputInbox | None = None,
        reason: str | None = None,
    ) -> None:
        self._capability = capability
        self._ask = ask
        self.inbox = inbox
        """Where requests wait when the call is parked (2026-07-28, or run as a task)."""
        self._reason = reason

    @classmethod
    def unavailable_because(cls, reason: str) -> SamplingProvider:
        return cls(reason=reason)

    @classmethod
    def direct(cls, session: Any, request_id: Any, capability: SamplingCapability | None) -> SamplingProvider:
        """Handshake era: requests go to the client mid-call, tied to the call's request."""
        related = ServerMessageMetadata(related_request_id=request_id)

        async def ask(params: CreateMessageRequestParams, result_type: type[R]) -> R:
            request = CreateMessageRequest(params=params)
            result: R = await session.send_request(request, result_type, metadata=related)
            return result

        return cls(capability=capability, ask=ask)

    @classmethod
    def parked(cls, inbox: InputInbox, capability: SamplingCapability | None) -> SamplingProvider:
        """The body is parked: requests wait in `inbox` until the client answers them."""
        return cls(capability=capability, ask=inbox.ask, inbox=inbox)

    def unavailable(self, request: ModelRequest) -> str | None:
        if self._reason is not None:
            return self._reason
        if self._capability is None or self._ask is None:
            return "the client did not declare the sampling capability"
        if request.tools and self._capability.tools is None:
            return "the client's sampling does not take tools (no sampling.tools capability)"
        return None

    async def complete(self, request: ModelRequest) -> Completion:
        assert self._ask is not None, "complete() after unavailable() said no"
        params = to_sampling_params(request)
        result_type = CreateMessageResultWithTools if request.tools else CreateMessageResult
        try:
            result = await self._ask(params, result_type)
        except MCPError as exc:
            raise ModelProviderError(
                self.name,
                f"the client refused the sampling request: {exc.error.message}",
                hint="the client (or its user) declined; try again, or set ANTHROPIC_API_KEY to use the API",
            ) from None
        except ValidationError:
            raise ModelProviderError(
                self.name, "the client answered the sampling request with a malformed result"
            ) from None
        return from_sampling_result(result, request)


# -- conversions ------------------------------------------------------------------------------
def to_sampling_params(request: ModelRequest) -> CreateMessageRequestParams:
    """Our (Anthropic-shaped) request as MCP sampling parameters."""
    messages: list[SamplingMessage] = []
    for message in request.messages:
        messages.extend(_to_sampling_messages(message))
    tools = [
        Tool(name=t["name"], description=t.get("description"), input_schema=t.get("input_schema") or {"type": "object"})
        for t in request.tools or []
    ]
    return CreateMessageRequestParams(
        messages=messages,
        system_prompt=request.system or None,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        model_preferences=_preferences(request),
        tools=tools or None,
    )


def from_sampling_result(
    result: CreateMessageResult | CreateMessageResultWithTools, request: ModelRequest
) -> Completion:
    """The client's answer as a `Completion`, its usage estimated (sampling reports no token counts)."""
    blocks = result.content if isinstance(result.content, list) else [result.content]
    content: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextContent):
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolUseContent):
            content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
        else:
            log.debug("sampling answer block of type %s left out", getattr(block, "type", "?"))
    stop = result.stop_reason
    if stop is None:
        stop = "toolUse" if any(b["type"] == "tool_use" for b in content) else "endTurn"
    return Completion(
        text="".join(b["text"] for b in content if b["type"] == "text"),
        content=content,
        stop_reason=_STOP_REASONS.get(stop, stop),
        model=result.model or request.model.id,
        provider="sampling",
        usage=estimate_usage(request, content),
    )


CHARS_PER_TOKEN = 4
"""The usual rule of thumb for English text and code (Claude's tokenizer averages 3.5-4)."""
IMAGE_TOKENS = 1600
"""An image of about 1.2 megapixels (Anthropic: width x height / 750), the size clients send most."""
MESSAGE_TOKENS = 4
"""Role and framing of one message."""


def estimate_usage(request: ModelRequest, output: list[dict[str, Any]]) -> Usage:
    """Tokens and cost of one sampling call, estimated from what was sent and answered.

    Input: the system prompt, every message block and the tools offered (as JSON); output: the
    answer's text and tool calls. Priced with the request's model (the client may have used
    another; the registry's price of the asked-for model is the best we know).
    """
    input_tokens = estimate_input_tokens(request)
    output_tokens = max(1, _tokens(sum(_chars(block) for block in output)))
    cost = request.model.cost(input_tokens, output_tokens)
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost, calls=1, estimated=True)


def estimate_sent(request: ModelRequest) -> Usage:
    """A call cut off before its answer (a timeout, a cancel): what was sent, estimated and priced.

    The provider had the request (and bills its input) but reported nothing back, so its input
    tokens are estimated as for sampling, no output is counted, and the usage is `estimated`."""
    input_tokens = estimate_input_tokens(request)
    cost = request.model.cost(input_tokens, 0)
    return Usage(input_tokens=input_tokens, output_tokens=0, cost_usd=cost, calls=1, estimated=True)


def estimate_input_tokens(request: ModelRequest) -> int:
    """The input tokens of a request, estimated: system prompt, message blocks, tools (as JSON)."""
    images = 0
    chars = len(request.system or "")
    for message in request.messages:
        raw = message.get("content", "")
        blocks: list[dict[str, Any]] = [{"type": "text", "text": raw}] if isinstance(raw, str) else raw
        for block in blocks:
            if block.get("type") == "image":
                images += 1
            else:
                chars += _chars(block)
    if request.tools:
        chars += len(json.dumps(request.tools, ensure_ascii=False, default=str))
    return _tokens(chars) + images * IMAGE_TOKENS + MESSAGE_TOKENS * len(request.messages)


def _chars(block: dict[str, Any]) -> int:
    kind = block.get("type")
    if kind == "text":
        return len(str(block.get("text", "")))
    if kind == "tool_use":
        arguments = json.dumps(block.get("input") or {}, ensure_ascii=False, default=str)
        return len(str(block.get("name", ""))) + len(arguments)
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            return len(content)
        blocks: list[Any] = content or []
        return sum(_chars(cast("dict[str, Any]", b)) for b in blocks if isinstance(b, dict))
    return 0


def _tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def _to_sampling_messages(message: dict[str, Any]) -> list[SamplingMessage]:
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise SkillRunError(f"a model message has the role {role!r}; use 'user' or 'assistant' (system goes apart)")
    raw = message.get("content", "")
    blocks: list[dict[str, Any]] = [{"type": "text", "text": raw}] if isinstance(raw, str) else list(raw)
    results: list[SamplingMessageContentBlock] = []
    others: list[SamplingMessageContentBlock] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            others.append(TextContent(type="text", text=str(block.get("text", ""))))
        elif kind == "tool_use":
            others.append(
                ToolUseContent(type="tool_use", id=block["id"], name=block["name"], input=block.get("input") or {})
            )
        elif kind == "tool_result":
            results.append(
                ToolResultContent(
                    type="tool_result",
                    tool_use_id=block["tool_use_id"],
                    content=_result_content(block.get("content")),
                    is_error=block.get("is_error") or None,
                )
            )
        elif kind == "image" and (source := _base64_source(block)) is not None:
            others.append(ImageContent(type="image", data=source["data"], mime_type=source["media_type"]))
        elif kind in ("thinking", "redacted_thinking"):
            continue  # the client's model thinks for itself
        else:
            raise SkillRunError(f"a '{kind}' block cannot be sent to the client's model through sampling")
    # MCP wants tool results alone in their message; Anthropic allows text after them.
    out: list[SamplingMessage] = []
    if results:
        out.append(SamplingMessage(role=role, content=results))
    if others or not results:
        out.append(SamplingMessage(role=role, content=others[0] if len(others) == 1 else others or _EMPTY))
    return out


_EMPTY = TextContent(type="text", text="")


def _result_content(content: Any) -> list[ContentBlock]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextContent(type="text", text=content)]
    out: list[ContentBlock] = []
    for block in content:
        if block.get("type") == "text":
            out.append(TextContent(type="text", text=str(block.get("text", ""))))
        elif block.get("type") == "image" and (source := _base64_source(block)) is not None:
            out.append(ImageContent(type="image", data=source["data"], mime_type=source["media_type"]))
    return out


def _base64_source(block: dict[str, Any]) -> dict[str, Any] | None:
    """The `source` of an image block when it carries the image itself (base64); None for a URL or file."""
    source: dict[str, Any] = block.get("source") or {}
    return source if source.get("type") == "base64" else None


def _preferences(request: ModelRequest) -> ModelPreferences:
    """The model id first, then its family (a client matches hints as substrings)."""
    hints = [ModelHint(name=request.model.id)]
    family = request.model.family
    if family:
        hints.append(ModelHint(name=family))
    priorities = _PRIORITIES.get(family or "")
    if priorities is None:
        return ModelPreferences(hints=hints)
    cost, speed, intelligence = priorities
    return ModelPreferences(hints=hints, cost_priority=cost, speed_priority=speed, intelligence_priority=intelligence)
