"""YAML pipelines (SPEC 4): workflows published as MCP tools, verified before they run, compiled
to LangGraph graphs, durable and resumable.

The package by concern (docs/development.md has the whole map):

- `language`: the file format (`PipelineSpec`), `{{ }}` expressions in their sandbox, the
  verifier, generated help and run limits;
- `engine`: compiling to LangGraph and running (skill calls, loops, retries, checkpoints, step
  records, step-through);
- `storage`: the run history and checkpoints, in SQLite or PostgreSQL, and run owners;
- `distributed`: the Redis queue (Docket) and `orchestrator worker`;
- `planning`: model-driven work (plan-and-run, the router, help a model improves, skills created
  where a pipeline needs them).

At the top: `PipelineService` (`service`: a home's pipelines, runs and history) and
`PipelineSource` (`source`: each pipeline file a Skill in the Catalog; `shared`: the pipelines
registered in the shared state of the distributed mode; `checks`: verification outcomes remembered
across restarts), the `errors` all of them
raise, and `asking` (runs that wait for a person's answer). Names resolve on first use, so
importing `pipelines` imports neither LangGraph nor Jinja2.
"""

from ._lazy import exports

__all__, __getattr__ = exports(
    __name__,
    {
        "service": ("PipelineService",),
        "source": ("PipelineSkill", "PipelineSource"),
        "checks": ("PipelineChecks",),
        "shared": ("SharedPipelineSource",),
        "errors": ("PipelineError", "VerificationError", "Issue", "StepFailed", "RunCancelled", "RunPartial"),
        "asking": ("RunWaiting", "waiting_result"),
    },
)
