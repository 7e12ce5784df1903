"""A run handed to `orchestrator worker` processes stays in its caller's trace.

Real parts: a stdio server replica with `--state` (PostgreSQL) and `--queue` (Redis), two
worker subprocesses, all exporting to the OTLP/HTTP receiver of test_traces. The client's
`traceparent` (in `_meta`) must be the root of the worker's `invoke_workflow` span, of its step
spans, and of the loop items other workers ran.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests import _scale
from tests._scale import ORCHESTRATOR, Workers
from tests.helpers import write_skill

pytest.importorskip("opentelemetry.proto")
from pipelines.distributed.runqueue import SHAPES
from tests.mcp_server.test_traces import CLIENT_SPAN, CLIENT_TRACE, Receiver, receiver

postgres_server, pg_url, redis_url = _scale.postgres_server, _scale.pg_url, _scale.redis_url  # real servers
__all__ = ["receiver"]  # the fixture

PIPELINE = """
id: spread
steps:
  - id: first
    skill: echo
    parameters: {x: 0}
  - id: each
    for: {items: [1, 2, 3], variable: n, parallel: true}
    skill: echo
    parameters: {x: "{{ n }}"}
outputs: {seen: "{{ each | map(attribute='x') | list }}"}
"""


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    write_skill(
        root,
        "echo",
        contract={"inputs": {"type": "object"}, "run": {"python": "impl:echo"}},
        impl="def echo(x):\n    return {'x': x}\n",
    )
    return root


def _otel(receiver: Receiver, name: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_SERVICE_NAME": name,
    }


@pytest.fixture
def workers(tmp_path: Path, skills: Path, pg_url: str, redis_url: str, receiver: Receiver) -> Iterator[Workers]:
    group = Workers(tmp_path, skills, pg_url, redis_url)
    try:
        group.start("w1", env=_otel(receiver, "worker-1"))
        group.start("w2", env=_otel(receiver, "worker-2"))
        yield group
    finally:
        group.stop()


async def test_a_queued_runs_spans_on_the_workers_are_children_of_the_callers_trace(
    tmp_path: Path, workers: Workers, receiver: Receiver
) -> None:
    home = tmp_path / "replica"
    (home / "pipelines").mkdir(parents=True)
    (home / "pipelines" / "spread.yaml").write_text(PIPELINE)
    flags = ["--state", workers.state, "--queue", workers.queue, "--skills", str(workers.skills)]
    drop = ("ORCHESTRATOR_TOKEN", "ORCHESTRATOR_STATE", "ORCHESTRATOR_QUEUE", "OTEL_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env |= {"ORCHESTRATOR_HOME": str(home)} | _otel(receiver, "replica")
    params = StdioServerParameters(command=str(ORCHESTRATOR), args=["serve", *flags], env=env)
    with anyio.fail_after(180):
        async with Client(params) as client:
            result = await client.call_tool("spread", {}, meta={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    assert not result.is_error, result.content
    assert json.dumps(result.structured_content).count('"seen": [1, 2, 3]') == 1

    spans = receiver.wait_for("tools/call spread", "invoke_workflow spread", trace=CLIENT_TRACE)
    request, run = spans["tools/call spread"], spans["invoke_workflow spread"]
    assert request["parent"] == CLIENT_SPAN
    assert run["parent"] == request["id"]  # on a worker, under the replica's request span
    with anyio.fail_after(60):
        while len(steps := receiver.named("execute_tool echo", CLIENT_TRACE)) < 4:
            await anyio.sleep(0.05)
    assert len(steps) == 4  # the first step and the three items, whichever worker ran them
    assert all(s["parent"] == run["id"] for s in steps)
    assert not [s for s in receiver.named("invoke_workflow spread") if s["trace"] != CLIENT_TRACE]


TRACE = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}


@pytest.mark.parametrize(
    "trace",
    [
        {"traceparent": "00-not-a-trace"},
        {**TRACE, "baggage": "x"},
        {"traceparent": 1},
        {**TRACE, "tracestate": "\n" * 3},
        [TRACE],
    ],
)
def test_a_task_whose_trace_context_is_not_one_is_refused(trace: Any) -> None:
    run, item = SHAPES["orchestrator_run"], SHAPES["orchestrator_item"]
    assert run(("0123456789ab",), {}) is None and run(("0123456789ab", TRACE), {}) is None
    assert run(("0123456789ab", trace), {}) is not None
    assert run(("0123456789ab", TRACE, TRACE), {}) is not None
    payload = {"index": 0}
    assert item(("0123456789ab", "each", payload, TRACE), {}) is None
    assert item(("0123456789ab", "each", payload, trace), {}) is not None
