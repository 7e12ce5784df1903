"""Pipeline checks remembered across restarts, so that a start-up re-checks only what changed.

Verifying a pipeline (`pipelines.language.verify`) parses every expression with Jinja, and the first tool
listing infers each pipeline's output schema the same way (`pipelines.language.outschema`): with Jinja's
import, ~50 ms of a ~0.8 s spawn of `orchestrator serve`. Both outcomes are functions of the file,
of the code, and of a few facts about the rest of the server, so they are kept in
`<home>/cache/pipeline-checks.json` under a key made of all of those; a start whose keys all
match imports no Jinja.

What a key covers (keep in step with `pipelines.language.verify` and `pipelines.language.outschema`):

- the code: the version and the stamp (mtime, size) of every module of `pipelines` and `skills.core`,
  and of Jinja's;
- the file's bytes (its positions are in the issues);
- verification: every known pipeline's id, input schema and callees; for each skill the file
  names (steps, agents' allow-lists), its kind, input schema, `model:` and folder; the known models;
  the home's agent roles;
- the output schema: the output schema of each skill a top-level step calls.

Only an outcome without errors is kept: a broken pipeline is verified (and reported) at every
start, and so is one naming a skill that does not exist (its message lists the skills that do,
which no key covers).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from collections.abc import Callable, Collection, Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from skills import Catalog
    from skills.core.roles import RoleBook

    from .errors import Issue
    from .language.spec import PipelineSpec
    from .source import PipelineSkill

__all__ = ["PipelineChecks"]

log = logging.getLogger("mcp_server")

_VERSION = 1
_KEEP = 512
"""Outcomes kept per kind; the oldest go first (each edit of a pipeline makes a new key)."""
_PATTERN = frozenset("*?[")


class PipelineChecks:
    """The remembered outcomes of one home (the `checks` of its `PipelineSource`s)."""

    def __init__(self, cache_dir: Path, version: str = "") -> None:
        """`version`: the product's version, part of every key (a new release checks afresh)."""
        self.file = cache_dir / "pipeline-checks.json"
        self.version = version
        self._data: dict[str, dict[str, Any]] | None = None
        self._known: tuple[Mapping[str, PipelineSpec], dict[str, Any]] | None = None

    def verified(
        self,
        file: Path,
        spec: PipelineSpec,
        known: Mapping[str, PipelineSpec],
        catalog: Catalog | None,
        models: Collection[str] | None,
        roles: RoleBook | None,
        verify: Callable[[], list[Issue]],
    ) -> list[Issue]:
        """The issues of `file` (as `verify()` finds them), from the cache when its key matches."""
        if self._known is None or self._known[0] is not known:  # one refresh verifies its files against one `known`
            self._known = (known, _pipelines(known))
        key = _verify_key(self.version, file, spec, self._known[1], catalog, models, roles)
        if key is None:
            return verify()
        from .errors import Issue

        cached = self._entries("verified").get(key)
        if isinstance(cached, list):
            try:
                return [Issue(*row) for row in cast("list[list[Any]]", cached)]
            except TypeError:  # an entry not of this code's making (edited by hand): check again
                pass
        issues = verify()
        if all(i.severity != "error" for i in issues):
            rows = [[i.file, i.line, i.col, i.message, i.hint, i.severity, i.code] for i in issues]
            self._store("verified", key, rows)
        return issues

    def output_schema(
        self, skill: PipelineSkill, catalog: Catalog | None, infer: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """The inferred output schema of a published pipeline, from the cache when its key matches."""
        try:
            data = skill.file.read_bytes()
        except OSError:
            return infer()
        callees: dict[str, Any] = {}
        for step in skill.spec.steps:
            if step.skill and catalog is not None:
                callee = catalog.find(step.skill)
                callees[step.skill] = None if callee is None else callee.output_schema
        key = _digest(_code_stamp(self.version), hashlib.sha256(data).hexdigest(), catalog is not None, callees)
        cached = self._entries("schemas").get(key)
        if isinstance(cached, dict) and "properties" in cached:
            return cast("dict[str, Any]", cached)
        schema = infer()
        self._store("schemas", key, schema)
        return schema

    # -- the file ---------------------------------------------------------------------------
    def _entries(self, kind: str) -> dict[str, Any]:
        if self._data is None:
            data: dict[str, Any] = {}
            try:
                loaded = json.loads(self.file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                loaded = None
            if isinstance(loaded, dict) and cast("dict[str, Any]", loaded).get("version") == _VERSION:
                data = cast("dict[str, Any]", loaded)
            self._data = {k: v if isinstance(v := data.get(k), dict) else {} for k in ("verified", "schemas")}
        return self._data[kind]

    def _store(self, kind: str, key: str, value: Any) -> None:
        entries = self._entries(kind)
        entries[key] = value
        while len(entries) > _KEEP:
            del entries[next(iter(entries))]
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.file.with_name(f"{self.file.name}.{os.getpid()}.tmp")  # two servers on one home
            tmp.write_text(json.dumps({"version": _VERSION, **(self._data or {})}), encoding="utf-8")
            tmp.replace(self.file)
        except OSError as exc:  # a read-only home still serves; it checks at every start
            log.debug("pipeline checks not cached: %s", exc)


def _pipelines(known: Mapping[str, PipelineSpec]) -> dict[str, Any]:
    """What verification reads of the known pipelines: their inputs and whom they call."""
    return {pid: [p.input_schema(), sorted(s.skill for s in p.walk() if s.skill)] for pid, p in known.items()}


def _verify_key(
    version: str,
    file: Path,
    spec: PipelineSpec,
    known: dict[str, Any],
    catalog: Catalog | None,
    models: Collection[str] | None,
    roles: RoleBook | None,
) -> str | None:
    """The key of a verification, or None when the outcome may not be cached."""
    try:
        data = file.read_bytes()
    except OSError:
        return None
    names: set[str] = set()
    for step in spec.walk():
        if step.skill:
            names.add(step.skill)
        if step.agent is not None:
            names.update(n for n in step.agent.skills if not _PATTERN.intersection(n))
    skills: dict[str, Any] = {}
    for name in sorted(names):
        if name in known or name == spec.id:
            continue  # covered by `pipelines` below
        if catalog is None:
            break
        found = catalog.find(name)
        if found is None:
            return None  # an error that lists what exists: never cached
        model = getattr(getattr(found, "contract", None), "model", None)
        skills[name] = [found.kind, found.input_schema, model, str(getattr(found, "root", None))]
    book = None if roles is None else [repr(sorted(roles.roles.items())), roles.problems]
    return _digest(
        _code_stamp(version),
        hashlib.sha256(data).hexdigest(),
        str(file),
        catalog is not None,
        skills,
        known,
        None if models is None else sorted(models),
        book,
    )


def _digest(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@lru_cache(maxsize=1)
def _code_stamp(version: str) -> str:
    """The version and the stamp of every module that checks a pipeline (an edited checkout
    must not be answered from the cache of the code before the edit)."""
    import pipelines
    import skills.core

    stamps: list[str] = [version]
    jinja = importlib.util.find_spec("jinja2")  # its version decides what parses: stamped, not imported
    if jinja is not None and jinja.origin:
        stat = os.stat(jinja.origin)
        stamps.append(f"{jinja.origin}:{stat.st_mtime_ns}:{stat.st_size}")
    folders = [os.path.dirname(p.__file__ or "") for p in (pipelines, skills.core)]
    while folders:  # os.scandir, not Path.rglob: ~0.5 ms instead of ~3 ms on every start
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir() and entry.name != "__pycache__":
                    folders.append(entry.path)
                elif entry.name.endswith(".py"):
                    stat = entry.stat()
                    stamps.append(f"{entry.path}:{stat.st_mtime_ns}:{stat.st_size}")
    return hashlib.sha256("\n".join(sorted(stamps)).encode("utf-8")).hexdigest()
