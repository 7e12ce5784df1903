"""Model providers (SPEC 6): the model registry, the Anthropic API, the client's sampling.

Skills see none of this: they ask `ctx.extras["model"]` (a `skills.core.models.ModelAccess`). The
server owns one `ModelService` (the home's `models/registry.yaml` over the shipped defaults)
and attaches a `ProviderAccess` to each call's context; a call whose model calls go to a client
that cannot be asked mid-call (2026-07-28, or a call run as a task) gets an `InputInbox` where
they wait for the client's answers (see `_rounds`).
"""

from ._provider import ModelProvider, ModelRequest
from ._rounds import INBOX_KEY, InputInbox
from .access import NO_PROVIDER_HINT, ModelService, ProviderAccess
from .anthropic_api import AnthropicProvider
from .errors import ModelProviderError, ModelRegistryError, NoModelProviderError, UnknownModelError
from .registry import DEFAULT_ROLE, ROLES, ModelInfo, ModelRegistry, load_registry, read_registry_file
from .sampling import SamplingProvider

__all__ = [
    "DEFAULT_ROLE",
    "INBOX_KEY",
    "NO_PROVIDER_HINT",
    "ROLES",
    "AnthropicProvider",
    "InputInbox",
    "ModelInfo",
    "ModelProvider",
    "ModelProviderError",
    "ModelRegistry",
    "ModelRegistryError",
    "ModelRequest",
    "ModelService",
    "NoModelProviderError",
    "ProviderAccess",
    "SamplingProvider",
    "UnknownModelError",
    "load_registry",
    "read_registry_file",
]
