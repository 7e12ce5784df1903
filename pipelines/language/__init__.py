"""The pipeline language: the YAML file format, its `{{ }}` expressions and their sandbox, and the
checks that run before anything does.

A pipeline file becomes a `PipelineSpec` (`loader`, with every value's line and column kept by
`yamlmap`), is checked as a whole (`verify`: names, expressions, skills, types; every problem at
once) and documents itself (`describe`, `outschema`, `summary`). `limits` holds what a run may
take, as declared in a file and as the server caps it. Nothing here runs a step: the engine does.
"""

from .._lazy import exports

__all__, __getattr__ = exports(
    __name__,
    {
        "spec": ("DEFAULT_MAX_ITERATIONS", "PipelineSpec", "StepSpec"),
        "loader": ("load_spec", "load_spec_file"),
        "verify": ("all_issues", "check_text", "verify"),
        "expressions": (
            "evaluate",
            "is_template",
            "render",
            "render_template",
            "render_text",
            "syntax_error",
            "truthy",
        ),
        "sandbox": ("TemplateEnvironment", "check_size", "to_json"),
        "limits": ("Budget", "DEFAULT_LIMITS", "RunLimits", "ServerLimits", "parse_duration"),
        "describe": ("example_arguments", "graph", "help_text", "mermaid"),
        "outschema": ("declared_output_schema", "infer_output_schema"),
        "summary": ("run_summary_in", "summary_key", "summary_of"),
        "yamlmap": ("SourceMap",),
        "help_cache": ("cached_overview", "text_hash", "with_overview"),
    },
)
