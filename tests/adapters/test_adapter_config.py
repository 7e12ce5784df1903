"""servers.json and the names imported tools are published under (no server is started here)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from adapters import DEFAULT_TIMEOUT, ServerSource, load_servers_config, parse_servers_config
from adapters._names import assign_names, published_name
from skills import RESERVED_NAMES, TOOL_NAME

CLAUDE_DESKTOP = {
    "mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone", "UTC"], "env": {}},
        "remote": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer t"}},
        "git": {
            "command": "uvx",
            "args": ["mcp-server-git", "--repository", "."],
            "include": ["git_log", "git_status"],
            "exclude": [],
            "namespace": "git",
            "timeout": 30,
            "instructions": "Use git_log before git_show.",
            "enabled": True,
        },
    }
}


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


def test_a_claude_desktop_config_loads_as_pasted(tmp_path: Path) -> None:
    configs, problems = load_servers_config(write(tmp_path, CLAUDE_DESKTOP))
    assert problems == []
    by_name = {c.name: c for c in configs}
    assert list(by_name) == ["time", "remote", "git"]
    time, remote, git = by_name["time"], by_name["remote"], by_name["git"]
    assert (time.transport, time.command, time.args, time.env) == (
        "stdio",
        "uvx",
        ("mcp-server-time", "--local-timezone", "UTC"),
        {},
    )
    assert time.namespace == "time" and time.timeout == DEFAULT_TIMEOUT and time.enabled
    assert (remote.transport, remote.url, remote.headers) == (
        "http",
        "http://127.0.0.1:9000/mcp",
        {"Authorization": "Bearer t"},
    )
    assert git.timeout == 30 and git.instructions == "Use git_log before git_show."
    assert git.selects("git_log") and not git.selects("git_show")
    assert all(c.warnings == () for c in configs)
    assert "Bearer" not in remote.target()


def test_a_broken_entry_is_reported_with_every_reason_and_the_others_still_load(tmp_path: Path) -> None:
    data = {
        "mcpServers": {
            "good": {"command": "uvx", "args": ["mcp-server-time"]},
            "nothing": {"args": ["x"]},
            "typed": {"command": "uvx", "args": "mcp-server-time", "env": {"PORT": 8080}, "timeout": "soon"},
            "both": {"command": "uvx", "url": "http://127.0.0.1:1/mcp"},
            "scheme": {"url": "ftp://example.org/mcp"},
            "list": ["uvx"],
        }
    }
    configs, problems = load_servers_config(write(tmp_path, data))
    assert [c.name for c in configs] == ["good"]
    fields = {p.field: p.message for lp in problems for p in lp.problems}
    assert "neither `command` nor `url`" in fields["mcpServers.nothing"]
    assert "`args` must be an array of strings" in fields["mcpServers.typed.args"]
    assert "'PORT'" in fields["mcpServers.typed.env"]
    assert "number of seconds" in fields["mcpServers.typed.timeout"]
    assert "both `command` and `url`" in fields["mcpServers.both.url"]
    assert "http:// or https://" in fields["mcpServers.scheme.url"]
    assert "must be an object" in fields["mcpServers.list"]
    assert all(lp.path == tmp_path / "servers.json" and lp.source == "servers" for lp in problems)
    typed = next(lp for lp in problems if lp.problems[0].field.startswith("mcpServers.typed"))
    assert len(typed.problems) == 3  # every mistake of the entry at once, not the first only


def test_unknown_keys_load_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = {"mcpServers": {"t": {"command": "uvx", "autoApprove": ["x"], "alwaysAllow": []}}}
    with caplog.at_level(logging.WARNING, "adapters.config"):
        configs, problems = load_servers_config(write(tmp_path, data))
    assert problems == []
    assert [w.field for w in configs[0].warnings] == ["mcpServers.t.alwaysAllow", "mcpServers.t.autoApprove"]
    assert all(w.severity == "warning" for w in configs[0].warnings)
    assert "unknown key `autoApprove`" in caplog.text


def test_other_hosts_spellings_are_understood() -> None:
    configs, problems = parse_servers_config(
        {
            "mcpServers": {
                "off": {"command": "x", "disabled": True},
                "sse": {"type": "sse", "url": "https://example.org/sse"},
                "http": {"type": "streamable-http", "url": "https://example.org/mcp"},
                "bare": {"url": "https://example.org/mcp"},
            }
        }
    )
    assert problems == []
    by = {c.name: c for c in configs}
    assert not by["off"].enabled
    assert (by["sse"].transport, by["http"].transport, by["bare"].transport) == ("sse", "http", "http")


def test_namespaces_are_made_valid_and_may_be_empty() -> None:
    configs, _ = parse_servers_config(
        {"mcpServers": {"my server": {"command": "x"}, "plain": {"command": "x", "namespace": ""}}}
    )
    spaced, plain = configs
    assert spaced.namespace == "my_server" and spaced.warnings[0].field == "mcpServers.my server.namespace"
    assert plain.namespace == "" and published_name(plain.namespace, "tool") == "tool"


def test_include_and_exclude_are_globs_on_the_upstream_tool_name() -> None:
    (config,), _ = parse_servers_config(
        {"mcpServers": {"g": {"command": "x", "include": ["git_*"], "exclude": ["git_reset*", "git_commit"]}}}
    )
    assert [t for t in ["git_log", "git_reset", "git_reset_hard", "git_commit", "status"] if config.selects(t)] == [
        "git_log"
    ]


def test_a_missing_empty_or_unparsable_file(tmp_path: Path) -> None:
    assert load_servers_config(tmp_path / "absent.json") == ([], [])
    assert load_servers_config(write(tmp_path, "  \n")) == ([], [])
    configs, (problem,) = load_servers_config(write(tmp_path, '{"mcpServers": {"a": {"command": "x",}}}'))
    assert configs == []
    assert problem.problems[0].message.startswith("line 1, column 38: not valid JSON")
    _, (shape,) = load_servers_config(write(tmp_path, '{"servers_typo": {}}'))
    assert "no `mcpServers` object" in shape.problems[0].message


def test_a_source_from_a_file_carries_the_problems_into_the_catalog(tmp_path: Path) -> None:
    path = write(tmp_path, {"mcpServers": {"ok": {"command": "x"}, "bad": {}}})
    source = ServerSource.from_file(path)
    assert list(source.adapters) == ["ok"]
    assert [p.path for p in source.problems()] == [path]
    assert source.label == f"servers ({path})"
    assert source.skills() == []  # nothing is published before an upstream has connected


def test_published_names_are_valid_for_claude_desktop() -> None:
    assert published_name("git", "git_log") == "git_git_log"
    assert published_name("my ns", "do.thing/v2") == "my_ns_do_thing_v2"
    long_a = published_name("server", "x" * 80 + "a")
    long_b = published_name("server", "x" * 80 + "b")
    assert len(long_a) == len(long_b) == 64 and long_a != long_b
    assert published_name("server", "x" * 80 + "a") == long_a  # stable
    assert all(TOOL_NAME.match(n) for n in (long_a, published_name("é", "ü")))


def test_collisions_are_resolved_deterministically_whatever_the_order() -> None:
    tools = [("a", "a", "b_c"), ("a_b", "a_b", "c"), ("s", "s", "x.y"), ("s", "s", "x_y"), ("meta", "", "create_skill")]
    names, collisions = assign_names(tools)
    again, _ = assign_names(list(reversed(tools)))
    assert names == again
    assert names[("a", "b_c")] == "a_b_c" and names[("a_b", "c")] == "a_b_c_2"
    # a name that needed no cleaning keeps it; the cleaned one gets the suffix
    assert names[("s", "x_y")] == "s_x_y" and names[("s", "x.y")] == "s_x_y_2"
    assert names[("meta", "create_skill")] == "create_skill_2" and "create_skill" in RESERVED_NAMES
    assert len(collisions) == 3 and any("already taken by tool 'b_c' of server 'a'" in c for c in collisions)
