"""Bridges to the outside (SPEC 5): other MCP servers' tools as skills.

`ServerSource` is the Catalog provider for a servers.json: one `MCPSkillAdapter` per
upstream server (a persistent session, restarted with backoff when it dies), each upstream
tool a `RemoteSkill` named `<namespace>_<tool>`. The server needs no special case to serve
them, and pipelines call them like any other skill.
"""

from typing import TYPE_CHECKING, Any

_LAZY = {
    "ElicitationForward": "_forward",
    "input_round_of": "context",
    "request_of": "context",
    "SamplingForward": "_forward",
    "DEFAULT_TIMEOUT": "config",
    "ServerConfig": "config",
    "TransportKind": "config",
    "load_servers_config": "config",
    "parse_servers_config": "config",
    "ServerConfigError": "errors",
    "UpstreamCallError": "errors",
    "UpstreamError": "errors",
    "UpstreamTimeoutError": "errors",
    "UpstreamToolError": "errors",
    "UpstreamUnavailableError": "errors",
    "AdapterState": "mcp_adapter",
    "MCPSkillAdapter": "mcp_adapter",
    "RemoteSkill": "skill",
    "ServerSource": "source",
    "test_server": "source",
}
"""Public name -> private module: imported on first use, so that `import adapters.models` (every
server start) does not pay for the MCP adapter's modules when no upstream is configured."""

if TYPE_CHECKING:
    from ._forward import ElicitationForward, SamplingForward
    from .config import DEFAULT_TIMEOUT, ServerConfig, TransportKind, load_servers_config, parse_servers_config
    from .context import input_round_of, request_of
    from .errors import (
        ServerConfigError,
        UpstreamCallError,
        UpstreamError,
        UpstreamTimeoutError,
        UpstreamToolError,
        UpstreamUnavailableError,
    )
    from .mcp_adapter import AdapterState, MCPSkillAdapter
    from .skill import RemoteSkill
    from .source import ServerSource, test_server


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'adapters' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "DEFAULT_TIMEOUT",
    "AdapterState",
    "ElicitationForward",
    "MCPSkillAdapter",
    "RemoteSkill",
    "SamplingForward",
    "ServerConfig",
    "ServerConfigError",
    "ServerSource",
    "TransportKind",
    "UpstreamCallError",
    "UpstreamError",
    "UpstreamTimeoutError",
    "UpstreamToolError",
    "UpstreamUnavailableError",
    "input_round_of",
    "load_servers_config",
    "parse_servers_config",
    "request_of",
    "test_server",
]
