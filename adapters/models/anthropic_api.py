"""The Anthropic Messages API as a model provider (used when ANTHROPIC_API_KEY is set).

The real `anthropic.AsyncAnthropic`, imported on the first call (it costs ~1 s, and a server
that never calls a model must not pay it at start-up). `ANTHROPIC_BASE_URL` is honoured by the
SDK itself. Transient failures (429, 5xx such as 529 overloaded, connection errors, timeouts) are
retried by the SDK with backoff, honouring `retry-after`; what still fails becomes one
`ModelProviderError` that says what happened. The key goes to the SDK and nowhere else: it is
never logged, never part of an error, and scrubbed from the API's own messages.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from skills.models import Completion, Usage

from ._provider import ModelRequest
from .errors import ModelProviderError

if TYPE_CHECKING:
    from anthropic import APIStatusError
    from anthropic.types import MessageParam, ThinkingConfigParam, ToolUnionParam

__all__ = ["DEFAULT_MAX_RETRIES", "DEFAULT_TIMEOUT", "AnthropicProvider"]

log = logging.getLogger("adapters.models")

DEFAULT_MAX_RETRIES = 3
"""Retries after the first attempt, for transient failures only (the SDK's backoff: 0.5 s .. 8 s)."""
DEFAULT_TIMEOUT = 600.0
"""Seconds for one attempt (a long answer of a large model takes minutes)."""
_TRANSIENT = {408, 409, 429}


class AnthropicProvider:
    """Model calls through the Anthropic Messages API."""

    name = "anthropic"

    def __init__(
        self, api_key: str | None, *, max_retries: int = DEFAULT_MAX_RETRIES, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self._api_key = api_key or None
        self.max_retries = max_retries
        self.timeout = timeout

    def __repr__(self) -> str:  # the key stays out of reprs, tracebacks with locals, logs
        return f"AnthropicProvider(key={'set' if self._api_key else 'unset'}, max_retries={self.max_retries})"

    @property
    def configured(self) -> bool:
        """A key is set (the provider can answer any request)."""
        return self._api_key is not None

    def unavailable(self, request: ModelRequest) -> str | None:
        return None if self._api_key else "ANTHROPIC_API_KEY is not set"

    async def complete(self, request: ModelRequest) -> Completion:
        import anthropic

        max_tokens = request.max_tokens
        thinking: ThinkingConfigParam | anthropic.Omit = anthropic.omit
        if request.thinking:  # the API wants max_tokens above the thinking budget
            thinking = {"type": "enabled", "budget_tokens": request.thinking}
            max_tokens = max(request.max_tokens, request.thinking + 1)
        if request.temperature is not None:  # the Messages API of this SDK takes no sampling parameters
            log.debug("temperature %s not sent: the Anthropic Messages API takes none", request.temperature)
        # One client per call: no connection pool outlives the call or its event loop, and a
        # connection's set-up is small next to a model's answer.
        client = anthropic.AsyncAnthropic(api_key=self._api_key, max_retries=self.max_retries, timeout=self.timeout)
        try:
            async with client:
                # Messages and tools are already in the API's shapes (ModelRequest says so); the
                # SDK's TypedDicts only describe them, so the casts cost nothing.
                message = await client.messages.create(
                    model=request.model.id,
                    max_tokens=max_tokens,
                    messages=cast("list[MessageParam]", request.messages),
                    system=request.system or anthropic.omit,
                    tools=cast("list[ToolUnionParam]", request.tools) if request.tools else anthropic.omit,
                    thinking=thinking,
                )
        except anthropic.APIStatusError as exc:
            raise self._status_error(exc, request) from None
        except anthropic.APITimeoutError:
            raise ModelProviderError(
                self.name,
                f"the Anthropic API did not answer within {self.timeout:g} s ({self.max_retries} retries)",
                hint="a transient problem: try again later",
            ) from None
        except anthropic.APIConnectionError as exc:
            raise ModelProviderError(
                self.name,
                f"cannot reach the Anthropic API ({self.max_retries} retries): {self._scrub(str(exc))}",
                hint="check the network (and ANTHROPIC_BASE_URL when it is set)",
            ) from None
        except anthropic.APIError as exc:  # an answer the SDK could not read
            raise ModelProviderError(self.name, f"the Anthropic API failed: {self._scrub(str(exc))}") from None
        content: list[dict[str, Any]] = [block.model_dump(mode="json", exclude_none=True) for block in message.content]
        usage = message.usage
        cost = request.model.cost(usage.input_tokens, usage.output_tokens)
        return Completion(
            text="".join(b.get("text", "") for b in content if b.get("type") == "text"),
            content=content,
            stop_reason=str(message.stop_reason or "end_turn"),
            model=message.model or request.model.id,
            provider=self.name,
            usage=Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cost_usd=cost, calls=1),
        )

    def _status_error(self, exc: APIStatusError, request: ModelRequest) -> ModelProviderError:
        status = exc.status_code
        kind, detail = _error_of(exc.body)
        said = self._scrub(f"{kind}: {detail}" if kind and detail else detail or kind or exc.message)
        retried = f" after {self.max_retries} retries" if status in _TRANSIENT or status >= 500 else ""
        message = f"the Anthropic API answered {status}{retried} ({said})"
        if status == 401:
            hint = "ANTHROPIC_API_KEY was rejected: check the key"
        elif status == 403:
            hint = "the key may not use this model or feature"
        elif status == 404:
            hint = f"is '{request.model.id}' a model this API serves? Roles and ids are in models/registry.yaml"
        elif status == 400:
            hint = "the request was rejected as it is (too long? a parameter this model does not take?)"
        elif status in _TRANSIENT or status >= 500:
            hint = "a transient problem (rate limit or overload): try again later"
        else:
            hint = ""
        log.info("anthropic call failed: %s", message)
        return ModelProviderError(self.name, message, hint=hint, status=status)

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text


def _error_of(body: object) -> tuple[str, str]:
    """(type, message) of the API's error body `{"type": "error", "error": {"type", "message"}}`."""
    error: object = cast("dict[str, object]", body).get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        fields = cast("dict[str, object]", error)
        return str(fields.get("type") or ""), str(fields.get("message") or "")
    return "", ""
