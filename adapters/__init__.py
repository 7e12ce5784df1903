"""Bridges to the outside (SPEC 5, 6): MCPSkillAdapter and the model providers.

Arrives with the adapter issue. Each upstream server becomes a `skills.SkillProvider` whose
skills forward calls over one persistent MCP session; the server needs no change to serve them.
"""

__all__: list[str] = []
