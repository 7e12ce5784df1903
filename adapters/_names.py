"""Published names of imported tools: `<namespace>_<tool>`, valid for Claude Desktop, unique.

Claude Desktop rejects a tool whose name does not match `^[a-zA-Z0-9_-]{1,64}$`, so other
characters become `_` and a long name is cut, with a short hash of the full name appended so
that two long names sharing a prefix stay apart. Names that still collide get `_2`, `_3`, ...
in a fixed order (names that needed no change first, then by namespace and tool name), so the
same servers always give the same names whatever order they connect in.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from skills import RESERVED_NAMES

__all__ = ["MAX_NAME", "assign_names", "could_publish", "published_name", "sanitize"]

MAX_NAME = 64
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def sanitize(text: str) -> str:
    """`text` with every character Claude Desktop does not accept in a tool name replaced by `_`."""
    return _INVALID.sub("_", text) or "_"


def could_publish(namespace: str, name: str) -> bool:
    """Whether a server of this (clean) namespace could publish `name` before it has connected.

    Used to start only the upstreams a command needs. `name` may be a shell-style pattern (an
    agent's allow-list): then its literal start and the namespace prefix must agree. Without a
    namespace every name is possible. A collision suffix (`_2`) keeps the prefix, so it is covered.
    """
    if not namespace:
        return True
    prefix = f"{namespace}_"
    literal = name[: min((i for i, c in enumerate(name) if c in "*?["), default=len(name))]
    if len(literal) < len(name):  # a pattern
        return prefix.startswith(literal) or literal.startswith(prefix)
    return name.startswith(prefix)


def _clip(name: str, limit: int = MAX_NAME) -> str:
    if len(name) <= limit:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{name[: limit - len(digest) - 1]}_{digest}"


def published_name(namespace: str, tool: str) -> str:
    """The name a tool is published under before collisions are resolved."""
    raw = f"{namespace}_{tool}" if namespace else tool
    return _clip(sanitize(raw))


def assign_names(tools: Iterable[tuple[str, str, str]]) -> tuple[dict[tuple[str, str], str], list[str]]:
    """Unique published names for `(server, namespace, tool)` triples, keyed by `(server, tool)`.

    A collision (two tools cleaned to one name, or a meta tool's name) is resolved by a suffix;
    the second value describes each one, for the caller to log.
    """
    entries: list[tuple[bool, str, str, str, str]] = []
    for server, namespace, tool in tools:
        base = published_name(namespace, tool)
        raw = f"{namespace}_{tool}" if namespace else tool
        entries.append((base != raw, namespace, tool, server, base))
    entries.sort()
    taken: set[str] = set(RESERVED_NAMES)
    out: dict[tuple[str, str], str] = {}
    first_owner: dict[str, tuple[str, str]] = {}
    collisions: list[str] = []
    for _, _, tool, server, base in entries:
        name = base
        n = 1
        while name in taken:
            n += 1
            suffix = f"_{n}"
            name = base[: MAX_NAME - len(suffix)] + suffix
        if name != base:
            owner = first_owner.get(base)
            was = f"tool '{owner[1]}' of server '{owner[0]}'" if owner else "a meta tool of the orchestrator"
            collisions.append(
                f"tool '{tool}' of server '{server}' would be published as '{base}', "
                f"already taken by {was}; published as '{name}'"
            )
        first_owner.setdefault(base, (server, tool))
        taken.add(name)
        out[(server, tool)] = name
    return out, collisions
