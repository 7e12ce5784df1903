"""Work a model drives: plan-and-run, the `orchestrate` router, help text a model improves, and
skills created where a pipeline needs them.

Every model call goes through the skills' model access (the Anthropic API or the client's model
through MCP sampling) with hard limits; every pipeline a model writes goes through the verifier.
"""

from .._lazy import exports

__all__, __getattr__ = exports(
    __name__,
    {
        "planner": ("incomplete", "plan_and_run"),
        "router": ("orchestrate", "orchestrate_failure"),
        "help_ai": ("HelpWriter", "improved_help"),
        "missing": ("check_creating", "creation_summary"),
    },
)
