"""The two files that define a skill: SKILL.md front matter and the optional skill.yaml.

The field docstrings are the user's documentation of the formats (SPEC 3).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "AGENT_INPUTS",
    "DESCRIPTION_MAX",
    "KNOWN_FRONT_MATTER_KEYS",
    "LIMIT_FIELDS",
    "NAME_PATTERN",
    "AgentSpec",
    "FrontMatter",
    "RunKind",
    "RunSpec",
    "SkillContract",
]

RunKind = Literal["python", "script", "prompt", "agent"]

AGENT_INPUTS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What the agent should accomplish."},
        "context": {"type": "string", "description": "Background the agent should know (optional)."},
    },
    "required": ["task"],
}
"""The inputs of an agent skill whose skill.yaml declares none."""

NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
"""Agent Skills names: lowercase letters, digits and single hyphens, no hyphen at either end."""

DESCRIPTION_MAX = 1024
"""Longest description the Agent Skills spec allows (a longer one is served cut, with a warning)."""

KNOWN_FRONT_MATTER_KEYS = frozenset({"name", "description", "license", "compatibility", "metadata", "allowed-tools"})


class FrontMatter(BaseModel):
    """The YAML front matter of SKILL.md (Agent Skills specification)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(min_length=1, max_length=64)
    """1-64 chars: lowercase letters, digits, single hyphens; equal to the folder name."""
    description: str = Field(min_length=1, max_length=DESCRIPTION_MAX)
    """What the skill does and when to use it (1-1024 chars). Becomes the tool description."""
    license: str | None = None
    """License name or the name of a bundled license file."""
    compatibility: str | None = Field(default=None, max_length=500)
    """Environment requirements (<= 500 chars)."""
    metadata: dict[str, str] | None = None
    """Free string -> string map for the host; `title` here becomes the tool title."""
    allowed_tools: str | list[str] | None = Field(default=None, alias="allowed-tools")
    """Tools the skill may use (informational for this server)."""


class AgentSpec(BaseModel):
    """`run: {agent: ...}`: a model working in a tool-use loop over an allow-list of skills.

    Every limit is hard: the loop stops as soon as one is reached and the result says which
    (`status`). An agent never gets another agent as a tool, and cannot start one. With `role`,
    the named agent role of the home's `agents/roles.yaml` is the base: the keys given here
    narrow its limits and allow-list (never widen them) and replace its model.
    """

    model_config = ConfigDict(extra="forbid")

    role: str | None = None
    """An agent role (`code-reviewer`, `researcher`, `data-extractor`, or one of the home's
    `agents/roles.yaml`): its model, allow-list, limits, thinking and instructions apply."""
    skills: list[str] = Field(default_factory=list)
    """Names of the Catalog skills (and imported tools, and pipelines) the agent may call;
    shell-style patterns (`git_*`) are allowed. Agent skills are never offered."""
    max_iterations: int = Field(default=20, ge=1, le=1000)
    """Most model turns (one model answer and the tool calls it asks for)."""
    max_tokens: int = Field(default=100_000, ge=100, le=100_000_000)
    """Most tokens (input + output, every turn, and model calls of the tools) the agent may spend."""
    max_cost_usd: float = Field(default=0.50, gt=0, le=10_000)
    """Most US dollars the agent may spend (prices from the model registry)."""
    timeout: float = Field(default=600, gt=0, le=86_400)
    """Wall-clock seconds; the skill's own `timeout:` does not apply to agents."""
    model: str | None = None
    """Model role or id (default: the skill's `model:`, else the `orchestrator` role)."""
    instructions: str | None = None
    """Extra instructions appended to the SKILL.md body in the agent's system prompt."""
    max_output_tokens: int = Field(default=4096, ge=16, le=128_000)
    """Most tokens one model answer may take."""
    thinking: bool = False
    """Extended thinking: the Anthropic API's `thinking` parameter, with `thinking_budget`
    tokens of each answer for it. Through a client's sampling it cannot be asked for (the
    client's model answers as it is set up) and the agent says so in its log."""
    thinking_budget: int = Field(default=4096, ge=1024, le=64_000)
    """Tokens of each answer the model may think with (the API's `budget_tokens`, at least 1024);
    they count against `max_tokens` like any other."""


LIMIT_FIELDS = ("max_iterations", "max_tokens", "max_cost_usd", "timeout", "max_output_tokens", "thinking_budget")
"""The numeric limits of an agent: a role's are upper bounds that a step, a skill or a client may only lower."""


class RunSpec(BaseModel):
    """How the skill runs: exactly one of `python`, `script`, `prompt`, `agent`."""

    model_config = ConfigDict(extra="forbid")

    python: str | None = None
    """`module:function` inside the skill folder; sync or async; gets arguments as keywords and,
    when it declares one, a `ctx` parameter."""
    script: str | None = None
    """Path of a program inside the skill folder: JSON arguments on stdin, JSON result on stdout."""
    prompt: str | None = None
    """Path of a Jinja template inside the skill folder (e.g. `prompt.md`): rendered with the
    arguments and answered by a model, with the SKILL.md body as the system instructions."""
    agent: AgentSpec | None = None
    """A tool-use loop over an allow-list of skills, with hard limits (see `AgentSpec`)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> RunSpec:
        chosen = [k for k in ("python", "script", "prompt", "agent") if getattr(self, k)]
        if len(chosen) != 1:
            raise ValueError(
                "run: needs exactly one of python, script, prompt, agent"
                + (f" (got {', '.join(chosen)})" if chosen else "")
            )
        return self

    @property
    def kind(self) -> RunKind:
        if self.python:
            return "python"
        if self.script:
            return "script"
        if self.agent is not None:
            return "agent"
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
    """Model role (`orchestrator`, `review`, `validation`) or model id for prompt and agent skills;
    default `orchestrator`. A pipeline step's `model:` overrides it."""
    max_output_tokens: int = Field(default=4096, ge=16, le=128_000)
    """Most tokens one model answer of a prompt skill may take."""
    timeout: float = Field(default=60, gt=0, le=3600)
    """Seconds before the call is stopped (agents use `run.agent.timeout`)."""
    memory_mb: int = Field(default=512, ge=16, le=16384)
    """Address-space limit of each process of a script skill, in MiB."""
    disk_mb: int | None = Field(default=None, ge=1, le=16384)
    """MiB a confined script skill may write into its work directory (a tmpfs the size of it):
    past it its writes fail (ENOSPC) and the call fails keeping none of them. Default: the home's
    `isolation: {disk_mb: ...}` (1024)."""
    total_memory_mb: int | None = Field(default=None, ge=16, le=1_048_576)
    """Memory of one call of a script skill, all its processes together, in MiB (a cgroup: the
    kernel stops the call past it, and it fails with `limit_exceeded`). Default and upper bound:
    the server's `isolation: total_memory_mb:` (1024); a skill may ask for less, never more.
    Enforced where the host gives per-call cgroups (`orchestrator doctor` says whether)."""
    max_processes: int | None = Field(default=None, ge=4, le=65_536)
    """Processes (and threads) one call of a script skill may run at once, all of them counted;
    past it `fork()` fails and the call fails with `limit_exceeded`. Default and upper bound:
    the server's `isolation: max_processes:` (64); a skill may ask for fewer, never more."""
    max_output_bytes: int = Field(default=1_000_000, ge=1024, le=64_000_000)
    """Cap on what a script skill may print; the call fails past it."""
    env: list[str] = Field(default_factory=list)
    """Names of environment variables a script skill may see (all others are scrubbed)."""
    network: bool = False
    """Script skills (and the `run-tests` / `shell-command` built-ins): reach the network. Off by
    default: a confined process gets a network namespace of its own with nothing but a loopback
    device, so it can connect to nothing outside itself (not even the host's 127.0.0.1). `true`
    shares the host's network: every address the server's machine can reach, including services
    listening on its loopback. Has no effect where confinement is unavailable (nothing is
    blocked there) and on python skills (they run in the server's process)."""
    annotations: dict[str, Any] | None = None
    """MCP tool annotations: readOnlyHint, destructiveHint, idempotentHint, openWorldHint, title."""
    enabled: bool = True
    """False keeps the skill loaded but unpublished (e.g. a risky skill that is off by default)."""

    @model_validator(mode="after")
    def _agent_inputs(self) -> SkillContract:
        if self.run.agent is not None and "inputs" not in self.model_fields_set:
            self.inputs = dict(AGENT_INPUTS)
        return self
