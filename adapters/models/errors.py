"""Errors of the model layer: a registry the user broke, and model calls that fail.

The user's mistake (a `models/registry.yaml` that cannot be used) is a `DefinitionError` with
file, line, field and hint; the server then runs on the shipped defaults. Runtime failures are
`SkillRunError`s whose message is safe to show a client (never a key, never a traceback).

    SkillsError                                (skills.core.errors)
    ├── DefinitionError
    │   └── ModelRegistryError                 registry.yaml cannot be used (every problem listed)
    └── SkillRunError
        ├── NoModelProviderError               neither the API nor the client's sampling can answer (skills.core.models)
        ├── UnknownModelError                  a role or id the registry does not know (skills.core.models)
        └── ModelProviderError                 a provider failed after its retries
"""

from __future__ import annotations

from skills import DefinitionError, SkillRunError
from skills.core.models import NoModelProviderError, UnknownModelError

__all__ = ["ModelProviderError", "ModelRegistryError", "NoModelProviderError", "UnknownModelError"]


class ModelRegistryError(DefinitionError):
    """`models/registry.yaml` cannot be used; `problems` names the line and field of each mistake."""


class ModelProviderError(SkillRunError):
    """A model call failed after the provider's retries (HTTP status, refusal, bad answer)."""

    def __init__(self, provider: str, message: str, *, hint: str = "", status: int | None = None) -> None:
        super().__init__(message, hint=hint)
        self.provider = provider
        """anthropic | sampling."""
        self.status = status
        """The HTTP status of the last attempt, when there was one."""
