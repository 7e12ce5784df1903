"""Agent roles (seed 002): named, ready-made sub-agents configured in the home.

A role is an agent's settings under a name — its model, the skills it may call, its limits,
extended thinking on or off and its instructions — so that a client (`spawn_agent {role,
task}`), a pipeline step (`agent: {role: researcher}`) or an agent skill (`run: {agent: {role:
...}}`) asks for "a researcher" instead of spelling an agent out. The shipped defaults
(`skills/defaults/roles.yaml`: code-reviewer, researcher, data-extractor) are always the base;
the home's `agents/roles.yaml` (installed from them) is layered over them, a role of the same
name replacing the shipped one whole. A role the file cannot define is reported and left out
(the others load); the file is re-read when it changes.

A role's limits are upper bounds: whoever names the role may lower its limits and narrow its
allow-list, never raise or widen them (`narrowed`). That holds for a client's `spawn_agent`
arguments as for a pipeline a client registered.
"""

from __future__ import annotations

import difflib
import logging
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from .contract import LIMIT_FIELDS, NAME_PATTERN, AgentSpec
from .errors import ArgumentsError, ErrorType, FieldError, SkillsError
from .home import DEFAULT_ROLES_FILE
from .yamltext import YAMLError, load_yaml

__all__ = [
    "DEFAULT_ROLES_FILE",
    "ROLES_KEY",
    "AgentRole",
    "RoleBook",
    "Roles",
    "UnknownRoleError",
    "apply_role",
    "load_roles",
]

log = logging.getLogger("skills.roles")

ROLES_KEY = "agent_roles"
"""Where a call finds the server's `RoleBook` in `ctx.extras` (the shipped roles when absent)."""


class AgentRole(AgentSpec):
    """One role of `agents/roles.yaml`: an agent's settings (see `AgentSpec`) and what it is for."""

    description: str = Field(default="", max_length=1024)
    """What the role is good at: shown to clients (spawn_agent) and to the router's model."""

    @model_validator(mode="after")
    def _no_role(self) -> AgentRole:
        if self.role is not None:
            raise ValueError("a role cannot name another role (`role:` is for steps and skills)")
        return self

    def narrowed(self, name: str, given: dict[str, Any], *, where: str = "") -> AgentSpec:
        """The agent this role makes, with `given` settings applied: limits only lowered, the
        allow-list only narrowed, model, thinking and extra instructions as given.

        Raises:
            ArgumentsError: `given` asks for a skill the role does not allow.
        """
        base = self.model_dump(exclude={"description", "role"})
        for key in LIMIT_FIELDS:
            if given.get(key) is not None:
                base[key] = min(base[key], given[key])
        if given.get("skills") is not None:
            outside = [s for s in given["skills"] if not _allowed(s, self.skills)]
            if outside:
                raise ArgumentsError(
                    name,
                    [FieldError(f"{where}skills", f"'{s}' is not in the role's allow-list") for s in outside],
                    hint=f"a role's allow-list can only be narrowed; {name} allows {', '.join(self.skills) or 'none'}",
                )
            base["skills"] = list(given["skills"])
        if given.get("model") is not None:
            base["model"] = given["model"]
        if given.get("thinking") is not None:
            base["thinking"] = bool(given["thinking"])
        if given.get("instructions"):
            base["instructions"] = "\n\n".join(p for p in (self.instructions, given["instructions"]) if p)
        return AgentSpec(**base)  # resolved: it names no role any more


def _allowed(entry: str, allow: list[str]) -> bool:
    return entry in allow or any(fnmatchcase(entry, pattern) for pattern in allow)


class UnknownRoleError(SkillsError):
    """An agent role that neither the home nor the shipped defaults define."""

    error_type: ErrorType = "invalid_arguments"


class RoleBook:
    """The roles of one home (its file over the shipped defaults) and why any were left out."""

    def __init__(self, roles: dict[str, AgentRole], problems: list[str] | None = None) -> None:
        self.roles = roles
        self.problems = problems or []

    def names(self) -> list[str]:
        return sorted(self.roles)

    def get(self, name: str, *, where: str = "role") -> AgentRole:
        role = self.roles.get(name)
        if role is None:
            close = difflib.get_close_matches(name, self.names(), n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise UnknownRoleError(
                f"unknown agent role '{name}'",
                hint=f"{hint}roles: {', '.join(self.names()) or 'none'} (agents/roles.yaml in the orchestrator home)",
                where=where,
            )
        return role

    def describe(self) -> list[dict[str, Any]]:
        """Name, description, model and skills of each role (for clients and the router)."""
        return [
            {"role": n, "description": r.description, "model": r.model, "skills": list(r.skills)}
            for n, r in sorted(self.roles.items())
        ]


def apply_role(spec: AgentSpec, book: RoleBook | None, *, where: str = "") -> AgentSpec:
    """`spec` itself, or, when it names a role, the role's agent narrowed by what `spec` sets."""
    if spec.role is None:
        return spec
    role = (book or load_roles(None)).get(spec.role, where=f"{where}role")
    given = {k: getattr(spec, k) for k in spec.model_fields_set if k != "role"}
    return role.narrowed(spec.role, given, where=where)


def load_roles(home: Path | None) -> RoleBook:
    """The roles of the home at `home` (its root folder) over the shipped ones; `None`: shipped only.

    Never raises for the user's file: a problem is logged, kept in `problems`, and what can be
    used is used.
    """
    roles, problems = _read(DEFAULT_ROLES_FILE)
    if problems:  # a broken package, not the user's doing
        log.error("the shipped agent roles have problems: %s", "; ".join(problems))
    path = home / "agents" / "roles.yaml" if home is not None else None
    if path is not None and path.is_file():
        mine, problems = _read(path)
        for problem in problems:
            log.error("%s", problem)
        roles.update(mine)
    return RoleBook(roles, problems if path is not None else [])


def _read(path: Path) -> tuple[dict[str, AgentRole], list[str]]:
    try:
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, YAMLError) as exc:
        return {}, [f"{path}: cannot be read as YAML ({exc}); its roles are left out"]
    section = data.get("roles") if isinstance(data, dict) else None
    if not isinstance(section, dict):
        return {}, [f"{path}: needs a `roles:` mapping of role name -> settings; its roles are left out"]
    roles: dict[str, AgentRole] = {}
    problems: list[str] = []
    for name, settings in section.items():
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            problems.append(f"{path}: role '{name}': a role name is lowercase letters, digits and single hyphens")
            continue
        try:
            roles[name] = AgentRole.model_validate(settings or {})
        except ValidationError as exc:
            detail = "; ".join(_field_problem(e) for e in exc.errors())
            problems.append(f"{path}: role '{name}' left out: {detail}")
    return roles, problems


def _field_problem(error: Any) -> str:
    where = ".".join(str(p) for p in error["loc"]) or "(role)"
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(error["loc"][-1]), list(AgentRole.model_fields), n=1, cutoff=0.6)
        return f"unknown key '{where}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    return f"{where}: {error['msg']}"


class Roles:
    """The home's roles, re-read when `agents/roles.yaml` changes (one stat per look)."""

    def __init__(self, home: Path | None) -> None:
        self.home = home
        self.file = home / "agents" / "roles.yaml" if home is not None else None
        self._stamp: tuple[int, int] | None = None
        self._book: RoleBook | None = None

    def book(self) -> RoleBook:
        stamp = None
        if self.file is not None:
            try:
                stat = self.file.stat()
                stamp = (stat.st_mtime_ns, stat.st_size)
            except OSError:
                stamp = None
        if self._book is None or stamp != self._stamp:
            self._book, self._stamp = load_roles(self.home), stamp
        return self._book
