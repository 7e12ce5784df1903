"""Where runs are kept: the run history, LangGraph's checkpoints and who runs what.

Embedded (the default) all of it lives in the home's `state.sqlite` (`runs`, `checkpoints`,
`statedb` for a database that is not one); with `--state postgresql://...` in PostgreSQL (`pg`,
`pgruns`). `state` picks the backends from the command line; `owner` records which process runs
a run and whether it still lives, so an orphaned run is taken over instead of lost.
"""

from .._lazy import exports

__all__, __getattr__ = exports(
    __name__,
    {
        "runs": ("RunRecord", "RunStatus", "RunStore", "StepRecord"),
        "pgruns": ("PgRunStore",),
        "pg": ("Postgres", "postgres"),
        "checkpoints": ("SharedSaver", "saver"),
        "state": ("Backends", "check_queue", "check_state"),
        "statedb": ("is_corrupt", "set_aside"),
        "owner": ("Heartbeat", "Owner", "owner_alive"),
    },
)
