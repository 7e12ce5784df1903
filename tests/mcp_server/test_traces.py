"""OpenTelemetry traces: a real OTLP/HTTP receiver finds the spans of a call and how they nest.

The server runs as a real subprocess (`orchestrator serve` over stdio, `orchestrator run`) with
only the standard `OTEL_*` variables set; the receiver is a small local HTTP server that decodes
what the exporter posts with `opentelemetry-proto`. The model is the Anthropic API stand-in, the
imported tool our fixture upstream server (it tells which `traceparent` its call carried).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.fixtures.adapter_support import fixture_stdio
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.helpers import ORCHESTRATOR, write_skill

pytest.importorskip("opentelemetry.proto")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


class Receiver:
    """An OTLP/HTTP trace receiver on a loopback port: every span it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                request = ExportTraceServiceRequest.FromString(body)
                found = [
                    {
                        "name": span.name,
                        "trace": span.trace_id.hex(),
                        "id": span.span_id.hex(),
                        "parent": span.parent_span_id.hex(),
                        "kind": span.kind,
                        "error": span.status.code == 2,
                        "attrs": {a.key: _value(a.value) for a in span.attributes},
                    }
                    for resource in request.resource_spans
                    for scope in resource.scope_spans
                    for span in scope.spans
                ]
                with receiver.changed:
                    receiver.spans += found
                    receiver.changed.notify_all()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(b"")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, *names: str, trace: str | None = None, timeout: float = 60) -> dict[str, dict[str, Any]]:
        """The first span of each name (in `trace`, if given), once all have arrived."""
        with self.changed:
            ok = self.changed.wait_for(lambda: all(self.named(n, trace) for n in names), timeout)
            got = [s["name"] for s in self.spans]
        assert ok, f"never received {[n for n in names if not self.named(n, trace)]}; got {got}"
        return {n: self.named(n, trace)[0] for n in names}

    def named(self, name: str, trace: str | None = None) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == name and trace in (None, s["trace"])]


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()
    found.server.server_close()


class OverviewsApart(AnthropicStub):
    """The stand-in, answering the server's background requests for pipeline help overviews
    itself, so that the scripted replies go to the run's agent only."""

    def _answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
        if b"You write the overview" not in raw:
            return super()._answer(path, headers, raw)
        text = [{"type": "text", "text": "An overview."}]
        usage = {"input_tokens": 1, "output_tokens": 1}
        message = {"type": "message", "role": "assistant", "content": text, "model": "stub", "usage": usage}
        return 200, {}, {**message, "id": "msg_overview", "stop_reason": "end_turn", "stop_sequence": None}


@pytest.fixture
def stub() -> Iterator[AnthropicStub]:
    with OverviewsApart() as server:
        yield server


def _env(receiver: Receiver, home: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return keep | {
        "ORCHESTRATOR_HOME": str(home),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # export soon after each span, not every 5 s
        "OTEL_SERVICE_NAME": "orchestrator-under-test",
        **extra,
    }


def _child(spans: dict[str, dict[str, Any]], child: str, parent: str) -> None:
    assert spans[child]["parent"] == spans[parent]["id"], f"{child} is not a child of {parent}"
    assert spans[child]["trace"] == spans[parent]["trace"]


async def test_a_pipeline_call_is_one_trace_under_the_clients_traceparent_down_to_model_and_imported_tools(
    tmp_path: Path, home: Path, stub: AnthropicStub, receiver: Receiver
) -> None:
    (home / "pipelines").mkdir(parents=True)
    (home / "pipelines" / "traced.yaml").write_text(
        textwrap.dedent(
            """
            id: traced
            description: An agent, then an imported tool.
            steps:
              - id: think
                agent: {skills: [fixture_echo], max_iterations: 3}
                parameters: {task: "echo hello"}
              - id: remote
                skill: fixture_traceparent
                parameters: {}
            outputs: {parent: "{{ remote }}", said: "{{ think.output }}"}
            """
        )
    )
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"fixture": fixture_stdio()}}))
    stub.reply(tool_uses=[{"name": "fixture_echo", "input": {"text": "hello"}}], input_tokens=21, output_tokens=8)
    stub.reply('{"output": "hello", "summary": "echoed", "confidence": 0.9}', input_tokens=34, output_tokens=13)
    env = _env(receiver, home, ANTHROPIC_BASE_URL=stub.url, ANTHROPIC_API_KEY="sk-ant-test-key")
    params = StdioServerParameters(command=str(ORCHESTRATOR), args=["serve", "--servers", str(servers)], env=env)
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    with anyio.fail_after(120):
        async with Client(params) as client:
            while "traced" not in {t.name for t in (await client.list_tools()).tools}:
                await anyio.sleep(0.05)  # published once the upstream is connected
            result = await client.call_tool("traced", {}, meta={"traceparent": traceparent})
            missing = await client.call_tool("no_such_tool", {}, meta={"traceparent": traceparent})
    assert not result.is_error, result.content
    assert missing.is_error
    model = next(r["body"]["model"] for r in stub.requests if "fixture_echo" in json.dumps(r["body"]))
    spans = receiver.wait_for(
        "tools/call traced",
        "invoke_workflow traced",
        "execute_tool think",
        "invoke_agent think",
        f"chat {model}",
        "execute_tool fixture_echo",
        "execute_tool fixture_traceparent",
        "tools/call no_such_tool",
        trace=CLIENT_TRACE,
    )
    request = spans["tools/call traced"]
    assert (request["trace"], request["parent"]) == (CLIENT_TRACE, CLIENT_SPAN)  # the client's span is the parent
    assert request["attrs"]["mcp.method.name"] == "tools/call"
    assert request["attrs"]["gen_ai.tool.name"] == "traced"
    _child(spans, "invoke_workflow traced", "tools/call traced")
    assert spans["invoke_workflow traced"]["attrs"]["gen_ai.operation.name"] == "invoke_workflow"
    _child(spans, "execute_tool think", "invoke_workflow traced")
    _child(spans, "invoke_agent think", "execute_tool think")
    _child(spans, f"chat {model}", "invoke_agent think")
    _child(spans, "execute_tool fixture_echo", "invoke_agent think")
    _child(spans, "execute_tool fixture_traceparent", "invoke_workflow traced")
    chats = receiver.named(f"chat {model}", CLIENT_TRACE)
    assert sorted(c["attrs"]["gen_ai.usage.input_tokens"] for c in chats) == [21, 34]
    assert sorted(c["attrs"]["gen_ai.usage.output_tokens"] for c in chats) == [8, 13]
    assert all(c["attrs"]["gen_ai.request.model"] == model for c in chats)
    # the imported server was handed the trace in `_meta`: its traceparent names our trace
    carried = json.dumps(result.structured_content)
    assert f"00-{CLIENT_TRACE}-" in carried
    # a failed call is an error span with the envelope's type
    assert spans["tools/call no_such_tool"]["error"]
    assert spans["tools/call no_such_tool"]["attrs"]["error.type"] == "unknown_tool"
    assert not request["error"]


def test_orchestrator_run_exports_its_trace_before_it_exits(tmp_path: Path, home: Path, receiver: Receiver) -> None:
    write_skill(
        home / "skills",
        "boom",
        contract={"run": {"python": "impl:boom"}},
        impl="def boom():\n    raise ValueError('no luck')\n",
    )
    pipeline = tmp_path / "fails.yaml"
    pipeline.write_text("id: fails\nsteps:\n  - id: first\n    skill: boom\n")
    env = _env(receiver, home, OTEL_BSP_SCHEDULE_DELAY="60000")  # only the flush at exit can send it
    done = subprocess.run(
        [str(ORCHESTRATOR), "run", str(pipeline)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    spans = receiver.wait_for("invoke_workflow fails", "execute_tool boom", timeout=10)
    _child(spans, "execute_tool boom", "invoke_workflow fails")
    assert spans["execute_tool boom"]["error"]
    assert spans["execute_tool boom"]["attrs"]["error.type"] == "skill_failed"
    assert spans["invoke_workflow fails"]["error"]


def test_without_an_otlp_endpoint_the_sdk_is_never_imported(tmp_path: Path, home: Path) -> None:
    probe = textwrap.dedent(
        """
        import sys, anyio
        from mcp import Client
        from mcp_server.app import create_server
        async def main():
            async with Client(create_server()) as client:
                await client.call_tool("run_pipeline", {"pipeline": "nope"})
        anyio.run(main)
        print("opentelemetry.sdk" in sys.modules, any(type(m).__name__ == "OpenTelemetryMiddleware"
              for m in create_server().lowlevel.middleware))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"ORCHESTRATOR_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
