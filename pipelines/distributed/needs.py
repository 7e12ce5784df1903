"""What a run needs from the Catalog of the process that runs it: each skill and pipeline it calls, by digest.

A run handed to the workers (`--queue`) is started on one machine and run on another, whose
Catalog was loaded when that worker started. A skill folder added or changed since then is not
in it, so the run recorded "1 problem(s)" and nothing else. Now the starting side records the
digest of everything the pipeline calls (`needs_of`: its steps' skills, its agents' named
skills, and what the pipelines it calls call, however deep), and a worker compares its own
(`stale`) before it runs the run or one of its items: what it lacks, or has in another version,
makes it re-read its skill folders and pipelines once, and what still differs after that is the
run's failure, named (`describe`).

Why digests and a re-read, and not the definitions carried in the shared state: a skill is code
(a python module, a script). Whoever can write to the shared database or the queue must not be
able to make the workers run code of their choosing (README: the trust model); skills reach a
worker the way they reach a server, through its own folders. A pipeline's YAML is data, verified
and sandboxed: the run's own is carried in the shared state already (`PgRunStore.source`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from skills import Catalog, Skill

    from ..language.spec import PipelineSpec

__all__ = ["Mismatch", "as_json", "describe", "from_json", "needs_of", "skill_digest", "stale"]

_PATTERN = frozenset("*?[")


def skill_digest(skill: Skill) -> str:
    """The version of a skill as a process sees it: its files (a folder skill), its YAML (a
    pipeline), or what its callers rely on (an imported tool: its kind and schemas)."""
    own = getattr(skill, "digest", None)
    if callable(own):
        found = own()
        if isinstance(found, str) and found:
            return found
    described = json.dumps([skill.kind, skill.input_schema, skill.output_schema], sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(described.encode()).hexdigest()


def needs_of(spec: PipelineSpec, catalog: Catalog) -> dict[str, str]:
    """Name -> digest of every skill and pipeline `spec` calls, directly or through the pipelines it calls.

    Names the Catalog does not have are left out (verification has already refused them), and so
    are an agent's allow-list patterns (what matches them is decided when the agent starts).
    """
    needs: dict[str, str] = {}
    todo = sorted(spec.callees())
    while todo:
        name = todo.pop()
        if name in needs or _PATTERN & set(name):
            continue
        skill = catalog.find(name)
        if skill is None:
            continue
        needs[name] = skill_digest(skill)
        inner: PipelineSpec | None = getattr(skill, "spec", None)
        if inner is not None:
            todo.extend(sorted(inner.callees()))
    return needs


@dataclass(frozen=True)
class Mismatch:
    """A name a run needs that this process does not have (`have` None), or has in another version."""

    name: str
    wanted: str
    have: str | None


def stale(needs: dict[str, str], catalog: Catalog) -> list[Mismatch]:
    """What of `needs` this process's Catalog lacks or holds in another version (by name)."""
    out: list[Mismatch] = []
    for name, wanted in sorted(needs.items()):
        skill = catalog.find(name)
        have = None if skill is None else skill_digest(skill)
        if have != wanted:
            out.append(Mismatch(name, wanted, have))
    return out


def describe(mismatches: Iterable[Mismatch]) -> str:
    """One clause per mismatch, for the run's error and the worker's log."""
    parts: list[str] = []
    for m in mismatches:
        if m.have is None:
            parts.append(f"there is no skill or pipeline '{m.name}' here")
        else:
            parts.append(
                f"'{m.name}' here is not the one the run was started with "
                f"(its files differ: {_short(m.have)} here, {_short(m.wanted)} where it started)"
            )
    return "; ".join(parts)


def _short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]


def as_json(needs: dict[str, str]) -> str:
    return json.dumps(needs, sort_keys=True)


def from_json(text: str | None) -> dict[str, str]:
    """The needs a run recorded (none for a run recorded before runs had them, or unreadable)."""
    if not text:
        return {}
    try:
        data: Any = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    entries = cast("dict[Any, Any]", data)
    return {str(k): v for k, v in entries.items() if isinstance(v, str)}
