"""`orchestrator claude-config`: the entry that starts this server, for each MCP host.

Hosts start MCP servers with a bare environment (a minimal PATH on macOS), so the entry names
the `orchestrator` program of *this* Python environment by absolute path rather than relying
on PATH. `--write` merges the entry into the host's config file and keeps every other key and
server the user has there. The hosts differ in where the file is and in its shape (`HOSTS`):
Claude Desktop, Claude Code (`.mcp.json`) and Cursor keep servers under `mcpServers`; VS Code
(`.vscode/mcp.json`) under `servers`, each with a `type`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

__all__ = [
    "HOSTS",
    "SERVER_KEY",
    "ConfigError",
    "Host",
    "HostName",
    "add_command",
    "config_path",
    "host_entry",
    "merge_entry",
    "server_entry",
]

SERVER_KEY = "orchestrator"
"""Name of our entry under `mcpServers`."""


class ConfigError(Exception):
    """The Claude Desktop config file exists but cannot be merged into (a user's mistake)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def config_path() -> Path:
    """The Claude Desktop config file of this OS (`$CLAUDE_CONFIG_PATH` overrides it)."""
    override = os.environ.get("CLAUDE_CONFIG_PATH")
    if override:
        return Path(override).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
    if sys.platform == "win32":
        appdata = os.environ.get("APPDATA")
        base = Path(appdata) if appdata else Path.home() / "AppData" / "Roaming"
        return base / "Claude" / "claude_desktop_config.json"
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path.home() / ".config"
    return base / "Claude" / "claude_desktop_config.json"


HostName = Literal["claude-desktop", "claude-code", "cursor", "vscode"]


@dataclass(frozen=True)
class Host:
    """An MCP host: where its config file is and how it holds servers."""

    label: str
    """The host's name in messages."""
    servers_key: str
    """The top-level key that maps server names to entries."""
    typed: bool
    """Whether each entry says `"type": "stdio"` (VS Code requires it; Claude Code writes it)."""
    where: str
    """Where the file is, for people (`~/.cursor/mcp.json`)."""
    after: str
    """What to do once it is written."""

    def path(self, name: HostName) -> Path:
        """The config file `--write` merges into."""
        if name == "claude-desktop":
            return config_path()
        if name == "cursor":
            return Path.home() / ".cursor" / "mcp.json"
        if name == "claude-code":
            return Path.cwd() / ".mcp.json"
        return Path.cwd() / ".vscode" / "mcp.json"


HOSTS: dict[HostName, Host] = {
    "claude-desktop": Host(
        "Claude Desktop", "mcpServers", False, "claude_desktop_config.json", "Restart Claude Desktop to load it."
    ),
    "claude-code": Host(
        "Claude Code",
        "mcpServers",
        True,
        ".mcp.json of this project (project scope)",
        "Start `claude` in this folder; it asks once whether to use the project's servers.",
    ),
    "cursor": Host(
        "Cursor",
        "mcpServers",
        False,
        "~/.cursor/mcp.json (every project; .cursor/mcp.json for one)",
        "Restart Cursor, then switch the server on in its MCP settings.",
    ),
    "vscode": Host(
        "VS Code",
        "servers",
        True,
        ".vscode/mcp.json of this workspace",
        "Open the workspace in VS Code and start the server from mcp.json (or the MCP: List Servers command).",
    ),
}


def host_entry(name: HostName, entry: dict[str, Any]) -> dict[str, Any]:
    """`entry` (from `server_entry`) in the shape the host's file holds."""
    return {"type": "stdio", **entry} if HOSTS[name].typed else dict(entry)


def add_command(entry: dict[str, Any], key: str = SERVER_KEY) -> str:
    """The `claude mcp add` command line that registers `entry` with Claude Code (project scope)."""
    import shlex

    words = ["claude", "mcp", "add", "--transport", "stdio", "--scope", "project"]
    for name, value in cast("dict[str, str]", entry.get("env") or {}).items():
        words += ["--env", f"{name}={value}"]
    words += [key, "--", entry["command"], *entry["args"]]
    return shlex.join(words)


def _program() -> tuple[str, list[str]]:
    """Command and leading args that start this environment's `orchestrator`."""
    names = ("orchestrator.exe", "orchestrator") if sys.platform == "win32" else ("orchestrator",)
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name in names and argv0.is_file():
        return str(argv0.absolute()), []
    scripts = Path(sys.executable).parent
    for name in names:
        candidate = scripts / name
        if candidate.is_file():
            return str(candidate), []
    # Not installed as a console script (e.g. run from a source tree): the interpreter of this
    # environment can always start the CLI, whatever Claude Desktop's PATH holds.
    found = shutil.which("orchestrator")
    if found and Path(found).resolve().parent == scripts.resolve():
        return found, []
    return sys.executable, ["-m", "mcp_server"]


def server_entry(home: str | Path | None = None, allow_dirs: Sequence[Path] = ()) -> dict[str, Any]:
    """The `mcpServers` entry: absolute command, `serve`, the home when it is not the default, and
    the folders file skills may read (absolute: Claude Desktop starts the server in `/`)."""
    command, args = _program()
    args = [*args, "serve"]
    if home:
        args += ["--home", str(Path(home).expanduser().resolve())]
    for folder in allow_dirs:
        args += ["--allow-dir", str(Path(folder).expanduser().resolve())]
    entry: dict[str, Any] = {"command": command, "args": args}
    env_home = os.environ.get("ORCHESTRATOR_HOME")
    if env_home:
        entry["env"] = {"ORCHESTRATOR_HOME": str(Path(env_home).expanduser().resolve())}
    return entry


def merge_entry(
    path: Path, entry: dict[str, Any], key: str = SERVER_KEY, *, servers_key: str = "mcpServers", label: str = ""
) -> tuple[bool, Path | None]:
    """Merge `entry` as `<servers_key>[key]` into the config at `path`, keeping everything else.

    Returns (changed, backup): the file is written only when the entry differs, after copying
    the previous file to `<name>.bak`. A missing file (and its folder) is created.

    Raises:
        ConfigError: the file is not valid JSON, or not shaped like the host's config (`label`).
    """
    label = label or "Claude Desktop"
    config: dict[str, Any] = {}
    existed = path.exists()
    if existed:
        from skills.core.jsontext import load_json  # bounded: a deeply nested file is reported, not a crash

        text = path.read_text(encoding="utf-8")
        try:
            loaded: Any = load_json(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); left unchanged",
                "fix the file by hand, or move it away and run again",
            ) from None
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"{path} holds a JSON {type(loaded).__name__}, not an object; left unchanged",
                f"a {label} config is a JSON object with a {servers_key} key",
            )
        config = cast("dict[str, Any]", loaded)
    servers = config.setdefault(servers_key, {})
    if not isinstance(servers, dict):
        raise ConfigError(
            f"'{servers_key}' in {path} is not an object; left unchanged",
            f'it should look like {{"{servers_key}": {{"name": {{"command": ...}}}}}}',
        )
    servers = cast("dict[str, Any]", servers)
    if servers.get(key) == entry:
        return False, None
    servers[key] = entry
    backup = None
    if existed:
        backup = path.with_name(path.name + ".bak")
        shutil.copy2(path, backup)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return True, backup
