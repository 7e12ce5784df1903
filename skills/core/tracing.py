"""OpenTelemetry traces, on only when the standard `OTEL_*` variables ask for them.

Why a module of our own: every layer adds spans (the MCP face the request, pipelines a run and
its steps, executors agents and tool calls, model providers each model call), and a server that
exports nothing must pay nothing for that. So the SDK is imported only when
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set — and `OTEL_SDK_DISABLED` is not
`true`, `OTEL_TRACES_EXPORTER` not `none` — and otherwise `span()` hands back one shared do-nothing
context manager. Everything else (service name, headers, sampler, batch sizes) is the SDK's
reading of the same `OTEL_*` variables.

The spans follow the GenAI semantic conventions: `invoke_workflow <pipeline>` for a run,
`execute_tool <skill>` for a step, a loop item or an agent's tool call, `invoke_agent <role>`,
`chat <model>` with `gen_ai.usage.*`. The MCP request span is the MCP SDK's (it reads a client's
`traceparent` from `_meta`, and its client puts ours into the `_meta` of calls to imported
servers); `mcp_server` swaps in a variant that records our error envelope's type.

A trace crosses processes as a W3C `traceparent` (`carrier()` / `continued()`): a run handed to
a worker of the distributed mode keeps its trace.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Generator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Literal

__all__ = [
    "SpanKind",
    "carrier",
    "continued",
    "enabled",
    "fail",
    "flush",
    "set_attributes",
    "span",
]

SpanKind = Literal["internal", "client", "server"]

_NULL: AbstractContextManager[Any] = nullcontext()
_lock = threading.Lock()
_state: dict[str, Any] = {}
"""`on`: bool once decided; `tracer`, `provider` when on."""

SERVICE = "mcp-orchestrator"


def _wanted(environ: Mapping[str, str]) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def enabled() -> bool:
    """Whether traces are exported (decided once per process, from the environment)."""
    on = _state.get("on")
    if on is None:
        on = _start()
    return on


def _start() -> bool:
    with _lock:
        if "on" in _state:
            return _state["on"]
        on = _wanted(os.environ)
        if on:
            try:
                _install()
            except ImportError:
                import logging

                logging.getLogger("skills.core.tracing").warning(
                    "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: "
                    "no traces (install mcp-orchestrator[otel])"
                )
                on = False
        _state["on"] = on
        return on


def _install() -> None:
    """The SDK's provider with the OTLP/HTTP exporter, made global so that the MCP SDK's own
    spans (the request, the calls to imported servers) land in the same traces."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or SERVICE}).merge(
        OTELResourceDetector().detect()
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _state["provider"] = provider
    _state["tracer"] = provider.get_tracer("mcp-orchestrator")


def span(
    name: str, kind: SpanKind = "internal", attributes: Mapping[str, Any] | None = None
) -> AbstractContextManager[Any]:
    """A span around a piece of work (the current one's child); a shared no-op when traces are off.

    An exception leaving it marks the span failed with `error.type` = the error envelope's type.
    """
    if not _state.get("on") and not enabled():
        return _NULL
    return _span(name, kind, attributes)


@contextmanager
def _span(name: str, kind: SpanKind, attributes: Mapping[str, Any] | None) -> Generator[Any]:
    from opentelemetry.trace import SpanKind as Kind

    kinds = {"internal": Kind.INTERNAL, "client": Kind.CLIENT, "server": Kind.SERVER}
    tracer = _state["tracer"]
    with tracer.start_as_current_span(
        name,
        kind=kinds[kind],
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            fail(current, _type_of(exc), str(exc))
            raise


def _type_of(exc: BaseException) -> str:
    kind = getattr(exc, "error_type", None)
    if isinstance(kind, str):
        return kind
    import anyio

    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "cancelled"
    return "internal"


def fail(current: Any, error_type: str, message: str = "") -> None:
    """Mark a span (from `span()`; None or the no-op is fine) failed with an envelope type."""
    if current is None or not hasattr(current, "set_status"):
        return
    from opentelemetry.trace import StatusCode

    current.set_attribute("error.type", error_type)
    current.set_status(StatusCode.ERROR, message[:500])


def set_attributes(current: Any, attributes: Mapping[str, Any]) -> None:
    """Add attributes to a span from `span()` (nothing when traces are off)."""
    if current is None or not hasattr(current, "set_attributes"):
        return
    current.set_attributes({k: v for k, v in attributes.items() if v is not None})


def carrier() -> dict[str, str] | None:
    """The current trace as W3C headers (`traceparent`, `tracestate`), for work another process
    continues; None when traces are off or no span is current."""
    if not _state.get("on") and not enabled():
        return None
    from opentelemetry.propagate import inject

    headers: dict[str, str] = {}
    inject(headers)
    return headers or None


def continued(headers: Mapping[str, Any] | None) -> AbstractContextManager[Any]:
    """Continue the trace `headers` (from `carrier()`) name, in another process."""
    if not headers or not (_state.get("on") or enabled()):
        return _NULL
    return _attached(headers)


@contextmanager
def _attached(headers: Mapping[str, Any]) -> Generator[None]:
    from opentelemetry import context
    from opentelemetry.propagate import extract

    token = context.attach(extract({k: v for k, v in headers.items() if isinstance(v, str)}))
    try:
        yield
    finally:
        context.detach(token)


def flush() -> None:
    """Export what is buffered (a command exits, a server stops); traces stay on."""
    provider = _state.get("provider")
    if provider is not None:
        provider.force_flush()
