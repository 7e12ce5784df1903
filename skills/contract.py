"""The two files that define a skill: SKILL.md front matter and the optional skill.yaml.

The field docstrings are the user's documentation of the formats (SPEC 3).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "KNOWN_FRONT_MATTER_KEYS",
    "NAME_PATTERN",
    "FrontMatter",
    "RunSpec",
    "SkillContract",
]

NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
"""Agent Skills names: lowercase letters, digits and single hyphens, no hyphen at either end."""

KNOWN_FRONT_MATTER_KEYS = frozenset({"name", "description", "license", "compatibility", "metadata", "allowed-tools"})


class FrontMatter(BaseModel):
    """The YAML front matter of SKILL.md (Agent Skills specification)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(min_length=1, max_length=64)
    """1-64 chars: lowercase letters, digits, single hyphens; equal to the folder name."""
    description: str = Field(min_length=1, max_length=1024)
    """What the skill does and when to use it (1-1024 chars). Becomes the tool description."""
    license: str | None = None
    """License name or the name of a bundled license file."""
    compatibility: str | None = Field(default=None, max_length=500)
    """Environment requirements (<= 500 chars)."""
    metadata: dict[str, str] | None = None
    """Free string -> string map for the host; `title` here becomes the tool title."""
    allowed_tools: str | list[str] | None = Field(default=None, alias="allowed-tools")
    """Tools the skill may use (informational for this server)."""


class RunSpec(BaseModel):
    """How the skill runs: exactly one of `python`, `script`, `prompt`."""

    model_config = ConfigDict(extra="forbid")

    python: str | None = None
    """`module:function` inside the skill folder; sync or async; gets arguments as keywords and,
    when it declares one, a `ctx` parameter."""
    script: str | None = None
    """Path of a program inside the skill folder: JSON arguments on stdin, JSON result on stdout."""
    prompt: str | None = None
    """Jinja template of the arguments, answered by a model (needs a model provider)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> RunSpec:
        chosen = [k for k in ("python", "script", "prompt") if getattr(self, k)]
        if len(chosen) != 1:
            raise ValueError(
                "run: needs exactly one of python, script, prompt" + (f" (got {', '.join(chosen)})" if chosen else "")
            )
        return self

    @property
    def kind(self) -> Literal["python", "script", "prompt"]:
        if self.python:
            return "python"
        if self.script:
            return "script"
        return "prompt"


class SkillContract(BaseModel):
    """skill.yaml: the execution contract that turns a skill into a callable tool."""

    model_config = ConfigDict(extra="forbid")

    inputs: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema (type: object) of the tool's arguments; published as the tool's inputSchema."""
    outputs: dict[str, Any] | None = None
    """Optional JSON Schema (type: object) of the structured result; the tool's outputSchema."""
    run: RunSpec
    """How the skill runs."""
    model: str | None = None
    """Model role or id for prompt skills (needs a model provider)."""
    timeout: float = Field(default=60, gt=0, le=3600)
    """Seconds before the call is stopped."""
    memory_mb: int = Field(default=512, ge=16, le=16384)
    """Address-space limit of a script skill's process, in MiB."""
    max_output_bytes: int = Field(default=1_000_000, ge=1024, le=64_000_000)
    """Cap on what a script skill may print; the call fails past it."""
    env: list[str] = Field(default_factory=list)
    """Names of environment variables a script skill may see (all others are scrubbed)."""
    annotations: dict[str, Any] | None = None
    """MCP tool annotations: readOnlyHint, destructiveHint, idempotentHint, openWorldHint, title."""
    enabled: bool = True
    """False keeps the skill loaded but unpublished (e.g. a risky skill that is off by default)."""
