"""The MCP request span: the MCP SDK's, with our error envelope's type on failed tool calls.

The SDK wraps every inbound request in a server span (named `{mcp.method.name} {target}`, parented
on the `traceparent` a client put in `_meta`), but it marks a failed tool call `tool_error` only.
Ours records the envelope's `type` (`invalid_arguments`, `skill_failed`, `timeout`, ...), which
is what a trace reader filters on. When traces are off (`skills.core.tracing.enabled()` false) the
SDK's middleware is taken out too: a request then costs no span at all, not even a no-op one.
"""

from __future__ import annotations

from typing import Any, cast

from mcp_types import CallToolResult

from skills import tracing

from ._results import envelope_of

__all__ = ["install_request_spans"]

_SDK_MIDDLEWARE = "OpenTelemetryMiddleware"


def install_request_spans(lowlevel: Any) -> None:
    """Replace the SDK's request-span middleware with ours, or drop it when traces are off."""
    lowlevel.middleware[:] = [m for m in lowlevel.middleware if type(m).__name__ != _SDK_MIDDLEWARE]
    if tracing.enabled():
        lowlevel.middleware.insert(0, _request_span)


async def _request_span(ctx: Any, call_next: Any) -> Any:
    from mcp.shared._otel import extract_trace_context  # pyright: ignore[reportPrivateUsage]  # the SDK's W3C reader of `_meta`, kept consistent with its client's writer
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, StatusCode

    name = ctx.params.get("name") if ctx.params else None
    target = name if isinstance(name, str) else None
    attributes: dict[str, Any] = {"mcp.method.name": ctx.method, "mcp.protocol.version": ctx.protocol_version}
    if ctx.request_id is not None:
        attributes["jsonrpc.request.id"] = str(ctx.request_id)
    if ctx.method == "tools/call":
        attributes["gen_ai.operation.name"] = "execute_tool"
        if target is not None:
            attributes["gen_ai.tool.name"] = target
    elif ctx.method == "prompts/get" and target is not None:
        attributes["gen_ai.prompt.name"] = target
    parent = extract_trace_context(ctx.meta)
    tracer = trace.get_tracer("mcp-orchestrator")
    with tracer.start_as_current_span(
        f"{ctx.method} {target}" if target else ctx.method,
        kind=SpanKind.SERVER,
        attributes=attributes,
        context=parent,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            result = await call_next(ctx)
        except BaseException as exc:
            code = getattr(getattr(exc, "error", None), "code", None)
            span.set_attribute("error.type", str(code) if code is not None else type(exc).__qualname__)
            span.set_status(StatusCode.ERROR)
            raise
        if ctx.method == "tools/call":
            kind = _envelope_type(result)
            if kind is not None:
                span.set_attribute("error.type", kind)
                span.set_status(StatusCode.ERROR)
        return result


def _envelope_type(result: Any) -> str | None:
    """The error envelope's type of a failed tool result (a model or its wire dict), else None."""
    if isinstance(result, dict):
        wire = cast("dict[str, Any]", result)
        if wire.get("isError") is not True:
            return None
        try:
            result = CallToolResult.model_validate(wire)
        except ValueError:
            return "skill_failed"
    if not isinstance(result, CallToolResult) or not result.is_error:
        return None
    body = envelope_of(result)
    return body["type"] if body is not None else "skill_failed"
