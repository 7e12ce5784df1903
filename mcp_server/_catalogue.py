"""Catalogue mode: a few tools to find, read and call skills instead of one tool per skill.

Publishing 1,200 skills as 1,200 tools puts ~1 MB of tool definitions (hundreds of thousands
of tokens) in front of a model before it does anything. In catalogue mode `tools/list` holds
the meta tools and three more: `find_skills` (by words), `read_skill` (one skill's description,
schemas and instructions) and `call_skill` (by name, its arguments validated against the skill's
input schema exactly as a direct call's are). The skills stay reachable as resources, prompts
and through the Skills extension; a direct `tools/call` of a skill by name still works.

Mode: `on`, `off`, or `auto` (the default): on when the Catalog holds more skills than the
threshold (`--catalogue-threshold`, default 100).

`CatalogueSource` publishes the three in the Catalog as the meta tools are published (Skills of
kind "meta", `_meta.MetaSkill`) while the mode is on, and none while it is off: the server lists
and calls them through the path every tool takes. `call_skill` is a relay: its call is the call
of the skill it names, through that same path (an input round or a task included).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from mcp_types import CallToolResult, ToolAnnotations
from mcp_types import Tool as MCPTool

from skills import Catalog, Skill, SkillContext, SkillsError, UnknownSkillError
from skills.core.errors import clip

from ._meta import Caller, CallOutcome, MetaSkill, OwnTools, structured
from ._results import error_result, unbound

if TYPE_CHECKING:
    from adapters import ServerSource

__all__ = ["CATALOGUE_TOOLS", "DEFAULT_THRESHOLD", "CatalogueMode", "CatalogueSource"]

CatalogueMode = Literal["auto", "on", "off"]
DEFAULT_THRESHOLD = 100
"""Skills above which `auto` switches catalogue mode on (100 tools is ~90 KB of definitions)."""
_WORD = re.compile(r"[a-z0-9]+")
_READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
_SUMMARY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The skill's name: give it to read_skill or call_skill."},
        "title": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "kind": {"type": "string", "description": "instructions, python, script, prompt, agent, pipeline, remote"},
        "description": {"type": "string"},
    },
    "required": ["name", "kind", "description"],
}

_TOOLS = [
    MCPTool(
        name="find_skills",
        title="Find skills",
        description="Search this server's skills by words (name, title, description); best matches first. "
        "Then read one with read_skill and run it with call_skill.",
        input_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 500, "description": "Words describing the task."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "skills": {"type": "array", "items": _SUMMARY},
                "total": {"type": "integer", "description": "How many skills the catalogue holds."},
            },
            "required": ["skills", "total"],
        },
        annotations=_READ_ONLY,
    ),
    MCPTool(
        name="read_skill",
        title="Read a skill",
        description="One skill in full: what it does, the arguments call_skill takes for it (input_schema), "
        "what it returns, its instructions (SKILL.md body) and its bundled files (skill://<name>/<path>).",
        input_schema={
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 64, "description": "The skill's name."}},
            "required": ["name"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                **_SUMMARY["properties"],
                "input_schema": {"type": "object"},
                "output_schema": {"anyOf": [{"type": "object"}, {"type": "null"}]},
                "instructions": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "files": {"type": "array", "items": {"type": "string"}},
            },
            "required": [*_SUMMARY["required"], "input_schema", "files"],
        },
        annotations=_READ_ONLY,
    ),
    MCPTool(
        name="call_skill",
        title="Call a skill",
        description="Run one skill by name with its arguments (read_skill gives its input_schema); the result "
        "is the skill's own result, a failure the usual error envelope.",
        input_schema={
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 64, "description": "The skill's name."},
                "arguments": {"type": "object", "description": "The skill's arguments.", "default": {}},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        annotations=ToolAnnotations(open_world_hint=True),
    ),
]
CATALOGUE_TOOLS: dict[str, MCPTool] = {t.name: t for t in _TOOLS}


def _summary(skill: Skill) -> dict[str, Any]:
    return {"name": skill.name, "title": skill.title, "kind": skill.kind, "description": skill.description}


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def find(skills: list[Skill], query: str, limit: int) -> list[Skill]:
    """Skills ranked by how many query words they hold (name 3, title 2, description 1; a word
    that starts a longer one counts half), ties by name. No word in common, no result."""
    wanted = _words(query)
    scored: list[tuple[float, str, Skill]] = []
    for skill in skills:
        fields = ((_words(skill.name.replace("-", " ")), 3.0), (_words(skill.title or ""), 2.0))
        fields += ((_words(skill.description), 1.0),)
        score = 0.0
        for word in wanted:
            for have, weight in fields:
                if word in have:
                    score += weight
                elif len(word) >= 3 and any(h.startswith(word) for h in have):
                    score += weight / 2
        if score:
            scored.append((-score, skill.name, skill))
    scored.sort(key=lambda row: row[:2])
    return [row[2] for row in scored[:limit]]


class CatalogueSource(OwnTools):
    """The Catalog provider of the catalogue tools: published while catalogue mode is on.

    Registered after every source of skills and before the meta tools, so in catalogue mode
    tools/list (the tools of kind "meta") opens with the three. In `auto` the mode follows the
    number of skills: the server calls `follow` after each change of the Catalog, and merges
    the Catalog again when it switched."""

    label = "catalogue mode"

    def __init__(self, catalog: Catalog, upstreams: ServerSource | None, mode: CatalogueMode, threshold: int) -> None:
        self._catalog = catalog
        self._upstreams = upstreams
        self.mode: CatalogueMode = mode
        self.threshold = threshold
        self.active = False
        """Whether catalogue mode is on now (tools/list shows the server's own tools only)."""
        find_tool, read_tool, call_tool = _TOOLS
        super().__init__(
            [
                MetaSkill(find_tool, self._find_skills),
                MetaSkill(read_tool, self._read_skill),
                MetaSkill(call_tool, self._not_relayed, relay=self._call_skill),
            ]
        )

    def follow(self, skills: int) -> bool:
        """Switch the mode for a Catalog of `skills` skills; True when it switched (the Catalog
        must merge again to publish or withdraw the three)."""
        active = self.mode == "on" or (self.mode == "auto" and skills > self.threshold)
        switched, self.active = active != self.active, active
        return switched

    def skills(self) -> list[Skill]:
        return super().skills() if self.active else []

    async def _find_skills(self, arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult:
        skills = list(self._catalog)
        found = find(skills, arguments["query"], arguments.get("limit", 10))
        return structured({"skills": [_summary(s) for s in found], "total": len(skills)})

    async def _read_skill(self, arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult:
        skill = await self._named(arguments["name"], CATALOGUE_TOOLS["read_skill"])
        if isinstance(skill, CallToolResult):
            return skill
        return structured(
            _summary(skill)
            | {
                "input_schema": skill.input_schema,
                "output_schema": skill.output_schema,
                "instructions": skill.body() if skill.root is not None else None,
                "files": [f"skill://{skill.name}/{f}" for f in skill.files()],
            }
        )

    async def _call_skill(self, arguments: dict[str, Any], call: Caller) -> CallOutcome:
        skill = await self._named(arguments["name"], CATALOGUE_TOOLS["call_skill"])
        if isinstance(skill, CallToolResult):
            return skill
        called = await call(skill.name, arguments.get("arguments") or {})
        # call_skill declares no outputSchema: a failure's envelope is its structured content
        # too, which the called skill's own outputSchema kept out.
        return unbound(called) if isinstance(called, CallToolResult) else called

    async def _not_relayed(self, arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult:
        """`call_skill` run as a skill, not relayed by the call path: there is no call to relay into."""
        return error_result(
            "'call_skill' relays a tools/call and has no work of its own",
            "call the skill by its own name",
        )

    async def _named(self, name: str, tool: MCPTool) -> Skill | CallToolResult:
        """The skill `name` (an upstream's once it has connected, within the connect grace), or
        the error envelope of `tool` saying why there is none."""
        try:
            skill = self._catalog.find(name)
            if skill is None and self._upstreams is not None and self._upstreams.adapters_for([name]):
                skill = await self._upstream_skill(name)  # connecting: waited for, or not_connected
            if skill is None:
                raise self._catalog.unknown(clip(name, 64))
        except SkillsError as exc:
            where = "name" if isinstance(exc, UnknownSkillError) else exc.where
            return error_result(exc, where=where, output_schema=tool.output_schema)
        return skill

    async def _upstream_skill(self, name: str) -> Skill | None:
        """The skill `name` once the upstream that could publish it has connected (within the
        connect grace); raises its `not_connected` error while that upstream is not connected."""
        upstreams = self._upstreams
        assert upstreams is not None
        await upstreams.wait_started([name])
        skill = self._catalog.find(name)
        if skill is None and (error := upstreams.not_connected(name)) is not None:
            raise error
        return skill
