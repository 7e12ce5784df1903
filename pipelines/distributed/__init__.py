"""The distributed mode: runs and loop items handed to workers through Docket on Redis.

`runqueue` puts runs and loop items on the queue and waits for them; `worker` is
`orchestrator worker`; `wire` keeps what crosses the queue JSON data, never code; `needs` is what
a run needs from the Catalog of the worker that takes it, by digest. The queue sits below
`PipelineService` (which hands runs to it); the worker sits above (it hosts a service of its own).
"""

from .._lazy import exports

__all__, __getattr__ = exports(
    __name__,
    {
        "runqueue": ("Queue",),
        "worker": ("WorkerHost",),
        "needs": ("needs_of",),
    },
)
