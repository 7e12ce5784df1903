"""The engine: a verified pipeline compiled to a LangGraph graph, and running it.

`compiler` turns a `PipelineSpec` into a `StateGraph` (no model asked); `runtime` runs it with
skill calls, retries, timeouts, progress and checkpoints (`RunContext`); `loops` holds the nodes
of `while` and `for` (a parallel `for` is a `Send` fan-out); `stepping` pauses after each step;
`outcomes` and `steplog` are what a run hands back and leaves behind. LangGraph is imported here
and nowhere before a pipeline is compiled.
"""

from .._lazy import exports

__all__, __getattr__ = exports(
    __name__,
    {
        "compiler": ("CompiledPipeline", "compile_pipeline"),
        "runtime": ("RunContext", "run_pipeline"),
        "loops": ("run_item",),
        "stepping": ("Decision", "StepGate", "StepView"),
        "outcomes": ("RunUsage", "plain_result"),
        "steplog": ("StepLog",),
    },
)
