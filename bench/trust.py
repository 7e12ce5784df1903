"""What reading data, not code, costs: the queue's JSON codec and the checkpoint check.

- The queue: one loop item's task arguments (run id, step id, and an item carrying a ~1 KB scope)
  written and read back by `pipelines.distributed.wire` (JSON behind a marker, plus the check of the task's
  shape a worker makes before Docket builds the task) vs cloudpickle (what pydocket used).
- Checkpoints: reading back a 1,000-item parallel loop's pending `Send`s and a state of 1,000
  results with the orchestrator's serializer (`pipelines.storage.checkpoints.serializer`: every msgpack
  extension walked before LangGraph builds anything) vs LangGraph's default `JsonPlusSerializer`.

Interleaved, best of `--reps` rounds; no budget (informational ratios).

    .venv/bin/python bench/trust.py [--reps 7]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def best(fn: Callable[[], Any], reps: int) -> float:
    times: list[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()

    import cloudpickle  # pyright: ignore[reportMissingTypeStubs]
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph.types import Send

    from pipelines.distributed import runqueue
    from pipelines.distributed import wire as _wire
    from pipelines.storage import checkpoints as _checkpoints

    runqueue.secure()
    scope = {f"var{i}": {"text": "x" * 40, "n": i, "tags": ["a", "b"]} for i in range(16)}
    payload = {"scope": scope, "item": {"n": 5}, "index": 5, "n": 1000, "round": 0}
    task = ("0123456789ab", "each", payload)
    n = 5_000

    def ours() -> None:
        for _ in range(n):
            args = _wire.loads(_wire.dumps(task))
            runqueue.SHAPES["orchestrator_item"](args, _wire.loads(_wire.dumps({})))

    def pickled() -> None:
        for _ in range(n):
            cloudpickle.loads(cloudpickle.dumps(task))
            cloudpickle.loads(cloudpickle.dumps({}))

    queue_ours = queue_ref = float("inf")
    for _ in range(args.reps):
        queue_ours, queue_ref = min(queue_ours, best(ours, 1)), min(queue_ref, best(pickled, 1))

    default, strict = JsonPlusSerializer(), _checkpoints.serializer()
    sends = [Send("each:item", {"scope": scope, "item": i, "index": i, "n": 1000, "round": 0}) for i in range(1000)]
    state = {"fanin": {"each": {str(i): {"n": i} for i in range(1000)}}, "scope": scope}
    blobs = [default.dumps_typed(sends), default.dumps_typed(state)]
    assert strict.loads_typed(blobs[0])[0] == sends[0]  # what passes is what LangGraph built

    ck_ours = ck_ref = float("inf")
    for _ in range(args.reps):
        ck_ours = min(ck_ours, best(lambda: [strict.loads_typed(b) for b in blobs], 1))
        ck_ref = min(ck_ref, best(lambda: [default.loads_typed(b) for b in blobs], 1))

    print(f"{'what':<46} {'ours':>10} {'reference':>10}")
    per_ours, per_ref = queue_ours / n * 1e6, queue_ref / n * 1e6
    print(f"{'queue: one item task, write + read (+ check)':<46} {per_ours:>8.1f}us {per_ref:>8.1f}us")
    print(f"{'checkpoint: 1,000 Sends + 1,000 results read':<46} {ck_ours * 1e3:>8.2f}ms {ck_ref * 1e3:>8.2f}ms")
    print(f"ABS queue_item_us {per_ours:.1f}")
    print(f"ABS checkpoint_read_ms {ck_ours * 1e3:.2f}")
    print(f"RATIO queue_codec_vs_cloudpickle {queue_ours / queue_ref:.2f} (informational)")
    print(f"RATIO checkpoint_read_vs_langgraph_default {ck_ours / ck_ref:.2f} (informational)")


if __name__ == "__main__":
    main()
