"""Errors of the adapters: a broken servers.json entry, and calls to imported tools that fail.

The user's mistakes (a servers.json entry that cannot be used) are `DefinitionError`s with a
location and a hint, reported as `LoadProblem`s; runtime failures of an upstream are
`SkillRunError`s whose message is safe to show a client and says what happens next.

    SkillsError                        (skills.core.errors)
    ├── DefinitionError
    │   └── ServerConfigError          servers.json or one of its entries cannot be used
    └── SkillRunError
        └── UpstreamError              a call to an imported tool failed
            ├── UpstreamUnavailableError   the upstream is not connected (fails at once; says when it retries;
            │                              also a NotConnectedError: envelope type `not_connected`)
            ├── UpstreamTimeoutError       no answer within the server's `timeout` (also a SkillTimeoutError:
            │                              envelope type `timeout`)
            ├── UpstreamCallError          the upstream refused the call (unknown tool, bad params, bad result)
            └── UpstreamToolError          the upstream's tool ran and reported a failure (`isError`): its own
                                           text is the message, its other content follows the envelope
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skills import DefinitionError, NotConnectedError, Problem, SkillRunError, SkillTimeoutError

__all__ = [
    "ServerConfigError",
    "UpstreamCallError",
    "UpstreamError",
    "UpstreamTimeoutError",
    "UpstreamToolError",
    "UpstreamUnavailableError",
]


class ServerConfigError(DefinitionError):
    """servers.json, or one entry of it, cannot be used; `problems` lists every reason."""

    def __init__(self, path: Path, problems: list[Problem], *, server: str | None = None) -> None:
        super().__init__(path, problems)
        self.server = server
        """The entry's key in `mcpServers` (None when the whole file is unusable)."""


class UpstreamError(SkillRunError):
    """A call to a tool imported from an upstream MCP server failed."""

    def __init__(self, server: str, message: str, *, hint: str = "") -> None:
        super().__init__(message, hint=hint, where=f"upstream server '{server}'")
        self.server = server


class UpstreamUnavailableError(UpstreamError, NotConnectedError):
    """The upstream is not connected (starting, died, restarting): the call fails at once."""


class UpstreamTimeoutError(UpstreamError, SkillTimeoutError):
    """The upstream did not answer within the server's `timeout`; the call was cancelled upstream."""


class UpstreamCallError(UpstreamError):
    """The upstream answered the call with a protocol error, or with a result that breaks its own schema."""


class UpstreamToolError(UpstreamError):
    """The upstream's tool ran and said it failed (`isError`): an envelope of type `skill_failed`
    whose message is the upstream's own text (made plain), `where` the server (and the place a
    traceback named), and whose `content` is the rest of what the upstream sent."""

    def __init__(
        self, server: str, message: str, *, where: str = "", content: Sequence[Any] = (), hint: str = ""
    ) -> None:
        super().__init__(server, message, hint=hint)
        if where:
            self.where = f"{self.where}: {where}"
        self.content = tuple(content)
