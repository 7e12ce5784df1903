"""Bridges to the outside (SPEC 5): other MCP servers' tools as skills.

`ServerSource` is the Catalog provider for a servers.json: one `MCPSkillAdapter` per
upstream server (a persistent session, restarted with backoff when it dies), each upstream
tool a `RemoteSkill` named `<namespace>_<tool>`. The server needs no special case to serve
them, and pipelines call them like any other skill.
"""

from ._forward import ElicitationForward, SamplingForward
from .config import DEFAULT_TIMEOUT, ServerConfig, TransportKind, load_servers_config, parse_servers_config
from .errors import (
    ServerConfigError,
    UpstreamCallError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
)
from .mcp_adapter import AdapterState, MCPSkillAdapter
from .skill import RemoteSkill
from .source import ServerSource, test_server

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
    "UpstreamUnavailableError",
    "load_servers_config",
    "parse_servers_config",
    "test_server",
]
