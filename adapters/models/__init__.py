"""Model providers (SPEC 6): the model registry, the Anthropic API, the client's sampling.

Skills see none of this: they ask `ctx.extras["model"]` (a `skills.models.ModelAccess`). The
server owns one `ModelService` (the home's `models/registry.yaml` over the shipped defaults)
and attaches a `ProviderAccess` to each call's context; `run_resumable` lets a call pause for
the client's model on 2026-07-28 connections (see `_rounds`).
"""

from ._provider import ModelProvider, ModelRequest
from ._rounds import ROUNDS_KEY, SamplingRounds, run_resumable
from .access import NO_PROVIDER_HINT, ModelService, ProviderAccess
from .anthropic_api import AnthropicProvider
from .errors import ModelProviderError, ModelRegistryError, NoModelProviderError, UnknownModelError
from .registry import DEFAULT_ROLE, ROLES, ModelInfo, ModelRegistry, load_registry, read_registry_file
from .sampling import SamplingProvider

__all__ = [
    "DEFAULT_ROLE",
    "NO_PROVIDER_HINT",
    "ROLES",
    "ROUNDS_KEY",
    "AnthropicProvider",
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
    "SamplingRounds",
    "UnknownModelError",
    "load_registry",
    "read_registry_file",
    "run_resumable",
]
