"""servers.json: the MCP servers whose tools are imported, in Claude Desktop's format.

The `mcpServers` block of a Claude Desktop config can be pasted as is; each entry may add
`namespace`, `include`, `exclude`, `timeout`, `instructions` and `enabled`. Loading is
lenient per entry: an entry that cannot be used (no command and no url, a value of the wrong
type) is reported as a `LoadProblem` and skipped while the others load; an unknown key loads
with a warning (other hosts add their own keys).

    {"mcpServers": {
      "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
      "remote": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer ..."}},
      "git": {"command": "uvx", "args": ["mcp-server-git"], "include": ["git_log", "git_st*"],
              "namespace": "git", "timeout": 30, "instructions": "Use git_log before git_show."}
    }}
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from skills import LoadProblem, Problem
from skills.core.jsontext import load_json
from skills.core.yamltext import read_bounded

from ._names import sanitize
from .errors import ServerConfigError

__all__ = ["DEFAULT_TIMEOUT", "ServerConfig", "TransportKind", "load_servers_config", "parse_servers_config"]

log = logging.getLogger("adapters.config")

DEFAULT_TIMEOUT = 60.0
"""Seconds a call to an imported tool may take when the entry sets no `timeout`."""

TransportKind = Literal["stdio", "http", "sse"]

_LABEL = "servers"
_TYPES: dict[str, TransportKind] = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamablehttp": "http",
    "sse": "sse",
}
_KNOWN = frozenset(
    {
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "type",
        "transport",
        "namespace",
        "include",
        "exclude",
        "timeout",
        "instructions",
        "enabled",
        "disabled",
    }
)


@dataclass(frozen=True)
class ServerConfig:
    """One entry of servers.json: how to reach an upstream MCP server and what to import from it."""

    name: str
    """The entry's key in `mcpServers`; names the server in logs, errors and `orchestrator servers`."""
    command: str | None = None
    """Program to start for a stdio server (looked up on PATH), e.g. `uvx` or `npx`."""
    args: tuple[str, ...] = ()
    """Arguments of `command`."""
    env: dict[str, str] = field(default_factory=dict[str, str])
    """Environment of a stdio server: exactly these variables on top of a minimal safe set
    (HOME, PATH, USER, ...); nothing else of the orchestrator's environment is passed on."""
    cwd: str | None = None
    """Working directory of a stdio server (default: the orchestrator's)."""
    url: str | None = None
    """Endpoint of a remote server (streamable HTTP, or SSE with `"type": "sse"`)."""
    headers: dict[str, str] = field(default_factory=dict[str, str])
    """HTTP headers sent to a remote server (e.g. Authorization)."""
    transport: TransportKind = "stdio"
    """`stdio` for `command`, `http` (streamable HTTP) or `sse` for `url`; from `type` when given."""
    namespace: str = ""
    """Prefix of the published tool names, `<namespace>_<tool>`; the key by default, "" for none."""
    include: tuple[str, ...] = ()
    """Glob patterns of upstream tool names to import (all when empty)."""
    exclude: tuple[str, ...] = ()
    """Glob patterns of upstream tool names to leave out (applied after `include`)."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds one call may take before it is cancelled upstream and reported as timed out.
    Time spent waiting for our client's model or user (sampling, elicitation) does not count."""
    instructions: str | None = None
    """Guidance for the imported tools (their skill body); the server's own instructions otherwise."""
    enabled: bool = True
    """`false` keeps the entry without starting the server (`"disabled": true` is read too)."""
    warnings: tuple[Problem, ...] = ()
    """What was accepted with a warning (unknown keys, a namespace that had to be cleaned)."""
    file: Path | None = None
    """The servers.json this entry came from."""

    def selects(self, tool: str) -> bool:
        """Whether the upstream tool `tool` is imported (include, then exclude; case-sensitive globs)."""
        if self.include and not any(fnmatch.fnmatchcase(tool, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(tool, p) for p in self.exclude)

    def target(self) -> str:
        """What is started or reached, for status lines (never the headers or env values)."""
        if self.url is not None:
            return self.url
        return " ".join([self.command or "", *self.args])


def load_servers_config(path: Path) -> tuple[list[ServerConfig], list[LoadProblem]]:
    """Read servers.json; a missing file means no servers. Bad entries are reported, the others kept."""
    try:
        text = read_bounded(path)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [_file_problem(path, f"cannot read {path}: {exc.strerror or exc}", "check the file's permissions")]
    except UnicodeDecodeError as exc:
        return [], [_file_problem(path, f"not UTF-8 text: {exc.reason}", "save servers.json as UTF-8")]
    if not text.strip():
        return [], []
    try:
        data = load_json(text)
    except json.JSONDecodeError as exc:
        return [], [
            _file_problem(
                path,
                f"line {exc.lineno}, column {exc.colno}: not valid JSON: {exc.msg}",
                'servers.json is JSON: {"mcpServers": {"name": {"command": ..., "args": [...]}}}',
            )
        ]
    return parse_servers_config(data, path)


def parse_servers_config(data: Any, path: Path | None = None) -> tuple[list[ServerConfig], list[LoadProblem]]:
    """The entries of an already-parsed servers.json (or an equivalent dict)."""
    where = path or Path("servers.json")
    if not isinstance(data, dict):
        return [], [_file_problem(where, "the top level must be an object with an `mcpServers` object", _SHAPE)]
    document = cast("dict[str, Any]", data)
    servers = document.get("mcpServers", document.get("servers"))
    if servers is None:
        if document:
            return [], [_file_problem(where, "no `mcpServers` object", _SHAPE)]
        return [], []
    if not isinstance(servers, dict):
        return [], [_file_problem(where, f"`mcpServers` must be an object, not {_kind(servers)}", _SHAPE)]
    configs: list[ServerConfig] = []
    problems: list[LoadProblem] = []
    for name, entry in cast("dict[str, Any]", servers).items():
        try:
            config = _entry(str(name), entry, path)
        except ServerConfigError as exc:
            log.error("server '%s' in %s not loaded: %s", name, where, exc)
            problems.append(LoadProblem(_LABEL, where, exc))
            continue
        for warning in config.warnings:
            log.warning("%s", warning)
        configs.append(config)
    return configs, problems


_SHAPE = 'write {"mcpServers": {"name": {"command": "...", "args": [...]}}} as in Claude Desktop\'s config'


def _file_problem(path: Path, message: str, hint: str) -> LoadProblem:
    return LoadProblem(_LABEL, path, ServerConfigError(path, [Problem(path, message, hint=hint)]))


_KINDS: dict[type[Any], str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


def _kind(value: Any) -> str:
    kind = cast("type[Any]", type(value))
    return _KINDS.get(kind, kind.__name__)


class _Checker:
    """Collects every problem of one entry, so the user fixes them all in one go."""

    def __init__(self, name: str, entry: dict[str, Any], path: Path | None) -> None:
        self.name = name
        self.entry = entry
        self.path = path or Path("servers.json")
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []

    def problem(self, key: str, message: str, hint: str = "", *, warning: bool = False) -> None:
        field_name = f"mcpServers.{self.name}" + (f".{key}" if key else "")
        item = Problem(
            self.path,
            f"server '{self.name}': {message}",
            hint=hint,
            field=field_name,
            severity="warning" if warning else "error",
        )
        (self.warnings if warning else self.errors).append(item)

    def string(self, key: str, *, empty: bool = False) -> str | None:
        value = self.entry.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or (not empty and not value.strip()):
            self.problem(key, f"`{key}` must be a non-empty string, not {_kind(value)}")
            return None
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.entry.get(key)
        if value is None:
            return ()
        if isinstance(value, str) and key in ("include", "exclude"):
            return (value,)
        items = cast("list[Any]", value) if isinstance(value, list) else None
        if items is None or not all(isinstance(v, str) for v in items):
            self.problem(key, f"`{key}` must be an array of strings", f'e.g. "{key}": ["..."]')
            return ()
        return tuple(items)

    def mapping(self, key: str) -> dict[str, str]:
        value = self.entry.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(key, f"`{key}` must be an object of strings, not {_kind(value)}")
            return {}
        pairs = cast("dict[str, Any]", value)
        bad = [k for k, v in pairs.items() if not isinstance(v, str)]
        if bad:
            self.problem(
                key,
                f"`{key}` values must be strings: {', '.join(repr(k) for k in bad)}",
                'quote the value, e.g. "PORT": "8080"',
            )
            return {}
        return {str(k): v for k, v in pairs.items()}

    def flag(self, key: str) -> bool | None:
        value = self.entry.get(key)
        if value is not None and not isinstance(value, bool):
            self.problem(key, f"`{key}` must be true or false, not {_kind(value)}")
            return None
        return value


def _entry(name: str, entry: Any, path: Path | None) -> ServerConfig:
    where = path or Path("servers.json")
    if not isinstance(entry, dict):
        problem = Problem(
            where,
            f"server '{name}': the entry must be an object, not {_kind(entry)}",
            hint='e.g. {"command": "uvx", "args": ["mcp-server-time"]}',
            field=f"mcpServers.{name}",
        )
        raise ServerConfigError(where, [problem], server=name)
    entry = cast("dict[str, Any]", entry)
    c = _Checker(name, entry, path)
    for key in sorted(set(entry) - _KNOWN):
        c.problem(key, f"unknown key `{key}` (ignored)", "known keys: " + ", ".join(sorted(_KNOWN)), warning=True)

    command, url = c.string("command"), c.string("url")
    args, env, headers = c.strings("args"), c.mapping("env"), c.mapping("headers")
    cwd, instructions = c.string("cwd"), c.string("instructions", empty=True)
    include, exclude = c.strings("include"), c.strings("exclude")
    kind_name = entry.get("type", entry.get("transport"))
    transport: TransportKind = "stdio" if command is not None else "http"
    if kind_name is not None:
        if not isinstance(kind_name, str) or kind_name.lower() not in _TYPES:
            c.problem("type", f"unknown transport type {kind_name!r}", "use stdio, http (streamable HTTP) or sse")
        else:
            transport = _TYPES[kind_name.lower()]
    if command is None and url is None and "command" not in entry and "url" not in entry:
        c.problem("", "neither `command` nor `url` is given", 'add "command" (a stdio server) or "url" (a remote one)')
    elif command is not None and url is not None:
        c.problem("url", "both `command` and `url` are given", "keep one: `command` for stdio, `url` for HTTP")
    elif command is not None and transport != "stdio":
        c.problem("type", f"`type` {kind_name!r} needs a `url`, but the entry has a `command`")
    elif url is not None:
        if transport == "stdio":
            c.problem("type", "`type` stdio needs a `command`, but the entry has a `url`")
        elif not url.startswith(("http://", "https://")):
            c.problem("url", f"`url` must start with http:// or https://: {url!r}")
    if command is None and (args or env or cwd is not None) and url is not None:
        c.problem("args", "`args`, `env` and `cwd` apply to a `command` only (ignored)", warning=True)

    timeout = DEFAULT_TIMEOUT
    raw_timeout = entry.get("timeout")
    if raw_timeout is not None:
        if isinstance(raw_timeout, bool) or not isinstance(raw_timeout, int | float) or not math.isfinite(raw_timeout):
            c.problem("timeout", f"`timeout` must be a number of seconds, not {_kind(raw_timeout)}")
        elif raw_timeout <= 0:
            c.problem("timeout", f"`timeout` must be positive, not {raw_timeout}")
        else:
            timeout = float(raw_timeout)

    enabled, disabled = c.flag("enabled"), c.flag("disabled")
    on = (enabled if enabled is not None else True) and not disabled

    namespace = name
    if "namespace" in entry:
        raw_ns = entry["namespace"]
        if not isinstance(raw_ns, str):
            c.problem("namespace", f"`namespace` must be a string, not {_kind(raw_ns)}")
        else:
            namespace = raw_ns
    clean = sanitize(namespace) if namespace else ""
    if clean != namespace:
        c.problem(
            "namespace",
            f"namespace {namespace!r} is not valid in a tool name; using {clean!r}",
            "tool names may contain only letters, digits, '_' and '-'",
            warning=True,
        )
    for key, patterns in (("include", include), ("exclude", exclude)):
        if any(not p for p in patterns):
            c.problem(key, f"`{key}` has an empty pattern (it matches nothing)", warning=True)

    if c.errors:
        raise ServerConfigError(where, c.errors + c.warnings, server=name)
    return ServerConfig(
        name=name,
        command=command,
        args=args,
        env=env,
        cwd=str(Path(cwd).expanduser()) if cwd is not None else None,
        url=url,
        headers=headers,
        transport=transport,
        namespace=clean,
        include=include,
        exclude=exclude,
        timeout=timeout,
        instructions=instructions,
        enabled=on,
        warnings=tuple(c.warnings),
        file=path,
    )
