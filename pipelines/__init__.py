"""YAML pipelines (SPEC 4): spec models, sandboxed expressions, verifier, LangGraph compiler.

Arrives with the pipelines issue. A compiled pipeline will be a `skills.Skill` published by a
`skills.SkillProvider` added to the Catalog, so the server needs no change to serve it.
"""

__all__: list[str] = []
