"""The `orchestrator` command line, run as the installed console script in a subprocess.

Every run gets a throw-away home, HOME and Claude Desktop config path: nothing here can touch
the real ones.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.helpers import Run, run_cli, write_skill

ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
ECHO_CONTRACT = {
    "inputs": {
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
        "required": ["text"],
        "additionalProperties": False,
    },
    "outputs": {"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]},
    "run": {"python": "impl:echo"},
}
ECHO_IMPL = "def echo(text, times=1):\n    return {'echo': ' '.join([text] * times)}\n"


@pytest.fixture
def env(tmp_path: Path, home: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("ORCHESTRATOR_TOKEN", "XDG_CONFIG_HOME")}
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    return environ | {
        "ORCHESTRATOR_HOME": str(home),
        "HOME": str(user_home),
        "CLAUDE_CONFIG_PATH": str(tmp_path / "claude" / "claude_desktop_config.json"),
    }


@pytest.fixture
def orchestrator(env: dict[str, str], tmp_path: Path):
    def run(*args: str, extra_env: dict[str, str] | None = None) -> Run:
        return run_cli(*args, env=env | (extra_env or {}), cwd=tmp_path, timeout=120)

    return run


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "skills"
    write_skill(folder, "echo-text", contract=ECHO_CONTRACT, impl=ECHO_IMPL, files={"references/notes.md": "n"})
    write_skill(
        folder,
        "boom",
        contract={"inputs": {"type": "object"}, "run": {"python": "impl:boom"}},
        impl="def boom():\n    raise RuntimeError('kaput')\n",
    )
    write_skill(
        folder,
        "sleeper",
        contract={"run": {"python": "impl:main"}, "enabled": False},
        impl="def main():\n    return {}\n",
    )
    return folder


def broken_skill(parent: Path) -> Path:
    """A folder with five independent violations, each one line of the strict report."""
    folder = parent / "broken-skill"
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: Broken_Skill\ndescription: Breaks every rule it can.\nfavourite-colour: blue\n---\nBody.\n"
    )
    (folder / "skill.yaml").write_text("inputs: {type: array}\nrun: {script: scripts/missing.py}\n")
    return folder


# -- install -----------------------------------------------------------------------------------
def test_install_creates_the_home_and_tells_the_next_steps(orchestrator, home: Path) -> None:
    run = orchestrator("install")
    assert run.code == 0, run.err
    assert (home / "skills" / "registry.yaml").is_file()
    assert (home / "servers.json").is_file()
    assert "created  skills/registry.yaml" in run.out
    assert "claude-config --write" in run.out


def test_install_again_keeps_everything_and_never_overwrites_an_edited_registry(orchestrator, home: Path) -> None:
    assert orchestrator("install").code == 0
    again = orchestrator("install")
    assert again.code == 0
    assert "kept     skills/registry.yaml" in again.out
    assert "created" not in again.out

    registry = home / "skills" / "registry.yaml"
    edited = registry.read_text().replace('"enabled": true', '"enabled": false', 1) + "# my note\n"
    registry.write_text(edited)
    third = orchestrator("install")
    assert third.code == 0
    assert "kept     skills/registry.yaml" in third.out
    assert registry.read_text().startswith(edited)


def test_home_is_accepted_before_and_after_the_command(orchestrator, tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    assert orchestrator("--home", str(before), "install").code == 0
    assert orchestrator("install", "--home", str(after)).code == 0
    assert (before / "skills" / "registry.yaml").is_file()
    assert (after / "skills" / "registry.yaml").is_file()


# -- skills list / show ------------------------------------------------------------------------
def test_skills_list_shows_every_skill_with_kind_source_and_disabled_ones_marked(
    orchestrator, skills_dir: Path
) -> None:
    run = orchestrator("skills", "list", "--skills", str(skills_dir))
    assert run.code == 0, run.err
    lines = {line.split()[0]: line for line in run.out.splitlines()}
    assert lines["echo-text"].split()[1:3] == ["python", "user"]
    assert lines["list-files"].split()[1:3] == ["python", "builtin"]
    assert "[disabled]" in lines["sleeper"]
    assert "[disabled]" not in lines["echo-text"]

    data = orchestrator("skills", "list", "--json", "--skills", str(skills_dir)).json()
    by_name = {s["name"]: s for s in data["skills"]}
    assert by_name["echo-text"]["source"] == "user" and by_name["echo-text"]["enabled"] is True
    assert by_name["sleeper"]["enabled"] is False
    assert data["problems"] == []


def test_skills_list_serves_the_good_skills_and_reports_a_broken_folder_on_stderr(
    orchestrator, skills_dir: Path
) -> None:
    broken_skill(skills_dir)
    run = orchestrator("skills", "list", "--skills", str(skills_dir))
    assert run.code == 0
    assert "echo-text" in run.out
    assert "broken-skill" not in run.out
    assert "not published" in run.err and "broken-skill" in run.err

    data = orchestrator("skills", "list", "--json", "--skills", str(skills_dir)).json()
    assert [Path(p["path"]).name for p in data["problems"]] == ["broken-skill"]


def test_skills_show_prints_metadata_schemas_files_and_body(orchestrator, skills_dir: Path) -> None:
    run = orchestrator("skills", "show", "echo-text", "--skills", str(skills_dir))
    assert run.code == 0, run.err
    assert "kind:        python" in run.out
    assert "input schema:" in run.out and '"additionalProperties": false' in run.out
    assert "references/notes.md" in run.out
    assert run.out.rstrip().endswith("Use this skill.")

    data = orchestrator("skills", "show", "echo-text", "--json", "--skills", str(skills_dir)).json()
    assert data["input_schema"] == ECHO_CONTRACT["inputs"]
    assert data["output_schema"] == ECHO_CONTRACT["outputs"]
    assert data["files"][0] == "SKILL.md" and "references/notes.md" in data["files"]
    assert data["body"].strip() == "Use this skill."


def test_skills_show_of_an_unknown_name_exits_2_with_a_suggestion(orchestrator) -> None:
    run = orchestrator("skills", "show", "list-filez")
    assert run.code == 2
    assert run.err.startswith("orchestrator: error: no skill or tool named 'list-filez'")
    assert "list-files" in run.err


# -- skills validate ---------------------------------------------------------------------------
def test_validate_reports_every_violation_of_a_broken_folder_and_exits_2(orchestrator, tmp_path: Path) -> None:
    folder = broken_skill(tmp_path)
    run = orchestrator("skills", "validate", str(folder))
    assert run.code == 2
    errors = [line for line in run.out.splitlines() if ": error: " in line]
    skill_md, skill_yaml = folder / "SKILL.md", folder / "skill.yaml"
    expected = [  # each at file:line:col (tests/test_messages.py checks the positions)
        (f"{skill_md}:", "[favourite-colour]: error:", "unknown front-matter key"),
        (f"{skill_md}:", "[name]: error:", "lowercase"),
        (f"{skill_md}:", "[name]: error:", "differs from the folder name"),
        (f"{skill_yaml}:", "[inputs]: error:", "type: object"),
        (f"{skill_yaml}:", "[run]: error:", "scripts/missing.py"),
    ]
    for start, field, words in expected:
        assert any(line.startswith(start) and field in line and words in line for line in errors), (field, run.out)
    assert len(errors) == len(expected), run.out
    assert all(" (hint: " in line for line in errors), run.out


def test_validate_reports_field_errors_of_both_files_together(orchestrator, tmp_path: Path) -> None:
    folder = write_skill(
        tmp_path,
        "out-of-range",
        front={"description": ""},
        contract={"run": {"python": "impl:main"}, "timeout": 99999},
        impl="def main(): ...\n",
    )
    run = orchestrator("skills", "validate", str(folder))
    assert run.code == 2
    assert f"{folder / 'SKILL.md'}:3:14 [description]: error:" in run.out
    assert f"{folder / 'skill.yaml'}:3:10 [timeout]: error:" in run.out


def test_validate_of_a_good_folder_exits_0(orchestrator, skills_dir: Path) -> None:
    run = orchestrator("skills", "validate", str(skills_dir / "echo-text"))
    assert run.code == 0, run.out
    assert run.out.strip() == f"ok: {skills_dir / 'echo-text'}"


def test_validate_of_a_folder_of_skills_checks_each_and_reports_only_the_bad_one(
    orchestrator, skills_dir: Path
) -> None:
    broken_skill(skills_dir)
    run = orchestrator("skills", "validate", str(skills_dir))
    assert run.code == 2
    assert f"ok: {skills_dir / 'echo-text'}" in run.out
    assert "broken-skill" in run.out
    assert "4 skill folder(s) checked: 1 invalid" in run.err

    data = orchestrator("skills", "validate", "--json", str(skills_dir)).json()
    assert data["ok"] is False and data["errors"] == 5
    verdicts = {Path(f["path"]).name: f["ok"] for f in data["folders"]}
    assert verdicts == {"boom": True, "broken-skill": False, "echo-text": True, "sleeper": True}


def test_validate_without_a_folder_checks_the_home_skills(orchestrator, home: Path) -> None:
    assert orchestrator("install").code == 0
    write_skill(home / "skills", "mine")
    run = orchestrator("skills", "validate")
    assert run.code == 0, run.out
    assert f"ok: {home / 'skills' / 'mine'}" in run.out


def test_validate_of_a_missing_folder_exits_2(orchestrator, tmp_path: Path) -> None:
    run = orchestrator("skills", "validate", str(tmp_path / "nowhere"))
    assert run.code == 2
    assert run.err.startswith("orchestrator: error:") and "(hint: " in run.err


# -- call --------------------------------------------------------------------------------------
def test_call_prints_the_structured_result_and_parses_values_as_json(orchestrator, skills_dir: Path) -> None:
    run = orchestrator("call", "echo-text", "--arg", "text=hi", "--arg", "times=2", "--skills", str(skills_dir))
    assert run.code == 0, run.err
    assert json.loads(run.out) == {"echo": "hi hi"}


def test_call_with_json_prints_the_whole_result(orchestrator, skills_dir: Path) -> None:
    run = orchestrator("call", "echo-text", "--arg", "text=[1]", "--json", "--skills", str(skills_dir))
    assert run.code == 2  # [1] parses as JSON, so text is a list: rejected by the schema
    assert run.json()["isError"] is True

    run = orchestrator("call", "echo-text", "--arg", "text=hello world", "--json", "--skills", str(skills_dir))
    assert run.code == 0
    result = run.json()
    assert result["structuredContent"] == {"echo": "hello world"}
    assert result["content"][0]["type"] == "text"


def test_call_of_a_builtin_skill_works_without_extra_folders(orchestrator, tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    run = orchestrator("call", "list-files", "--arg", f"directory={tmp_path}", "--arg", "pattern=*.py")
    assert run.code == 0, run.err
    assert json.loads(run.out)["relative"] == ["a.py"]


def test_call_sends_progress_and_log_messages_to_stderr_and_plain_results_as_text(orchestrator, tmp_path: Path) -> None:
    impl = (
        "async def main(ctx):\n"
        "    await ctx.progress(1, 2, 'half way')\n"
        "    await ctx.info('a log line')\n"
        "    return 'plain text'\n"
    )
    write_skill(tmp_path / "more", "chatty", contract={"run": {"python": "impl:main"}}, impl=impl)
    run = orchestrator("call", "chatty", "--skills", str(tmp_path / "more"))
    assert run.code == 0, run.err
    assert run.out == "plain text\n"
    assert "orchestrator: [1/2] half way" in run.err.splitlines()
    assert "a log line" in run.err


def test_call_exits_1_when_the_tool_fails(orchestrator, skills_dir: Path) -> None:
    run = orchestrator("call", "boom", "--skills", str(skills_dir))
    assert run.code == 1
    assert run.err.startswith("orchestrator: error: ") and "kaput" in run.err
    assert run.out == ""


def test_call_exits_2_when_the_schema_rejects_the_arguments(orchestrator, skills_dir: Path) -> None:
    run = orchestrator("call", "echo-text", "--arg", "times=0", "--skills", str(skills_dir))
    assert run.code == 2
    assert run.err.startswith("orchestrator: error: invalid arguments for 'echo-text'")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["call", "echo-txt"], "no skill or tool named 'echo-txt'"),
        (["call", "echo-text", "--arg", "text"], "bad --arg 'text': expected KEY=VALUE"),
        (["call", "echo-text", "--arg", "text=a", "--arg", "text=b"], "--arg text is given twice"),
        (["call", "sleeper"], "'sleeper' is disabled"),
    ],
)
def test_call_exits_2_on_bad_usage(orchestrator, skills_dir: Path, args: list[str], message: str) -> None:
    run = orchestrator(*args, "--skills", str(skills_dir))
    assert run.code == 2
    assert message in run.err
    assert run.err.startswith("orchestrator: error: ")


def test_call_of_a_folder_that_failed_to_load_shows_why(orchestrator, skills_dir: Path) -> None:
    broken_skill(skills_dir)
    run = orchestrator("call", "broken-skill", "--skills", str(skills_dir))
    assert run.code == 2
    assert "[run]: error:" in run.err and "scripts/missing.py" in run.err
    assert "skill 'broken-skill' could not be loaded" in run.err


def test_serve_on_a_port_in_use_exits_2_with_a_hint(orchestrator) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        run = orchestrator("serve", "--transport", "http", "--port", str(port))
    assert run.code == 2
    assert run.err.splitlines()[-1].startswith(f"orchestrator: error: cannot serve on 127.0.0.1:{port}")
    assert "--port 0" in run.err


def test_serve_refuses_http_options_over_stdio(orchestrator) -> None:
    run = orchestrator("serve", "--auth-token", "secret")
    assert run.code == 2
    assert "--transport http" in run.err


def test_unknown_command_is_a_usage_error(orchestrator) -> None:
    run = orchestrator("frobnicate")
    assert run.code == 2 and run.out == ""
    assert "frobnicate" in run.err  # argparse's refusal, in its own words, names the word it did not know


# -- claude-config -----------------------------------------------------------------------------
def test_claude_config_prints_an_entry_that_starts_this_environments_program(
    orchestrator, env: dict[str, str], home: Path
) -> None:
    run = orchestrator("claude-config")
    assert run.code == 0, run.err
    entry = run.json()["mcpServers"]["orchestrator"]
    assert entry["command"] == str(ORCHESTRATOR)
    assert entry["args"] == ["serve"]
    assert entry["env"] == {"ORCHESTRATOR_HOME": str(home.resolve())}
    started = subprocess.run(
        [entry["command"], *entry["args"], "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert started.returncode == 0 and "--transport" in started.stdout


def test_claude_config_names_an_explicit_home(orchestrator, tmp_path: Path) -> None:
    run = orchestrator("claude-config", "--home", str(tmp_path / "elsewhere"))
    entry = run.json()["mcpServers"]["orchestrator"]
    assert entry["args"] == ["serve", "--home", str((tmp_path / "elsewhere").resolve())]


async def test_claude_config_allow_dir_lets_the_desktop_started_server_read_that_project(
    orchestrator, env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("from the project\n")
    plain = orchestrator("claude-config")
    assert "--allow-dir" in plain.err  # it says why the entry may need one
    run = orchestrator("claude-config", "--allow-dir", str(project))
    assert run.code == 0, run.err
    entry = run.json()["mcpServers"]["orchestrator"]
    assert entry["args"] == ["serve", "--allow-dir", str(project.resolve())]
    # Start it as Claude Desktop does (in /, over stdio) and read a file of the project through a real client.
    notes = str(project / "notes.txt")
    desktop = {k: v for k, v in env.items() if k != "ORCHESTRATOR_ALLOW_DIRS"}  # only what the entry says
    for args, allowed in ((entry["args"], True), (["serve"], False)):
        params = StdioServerParameters(command=entry["command"], args=args, env=desktop, cwd="/")
        async with Client(params) as client:
            result = await client.call_tool("read-file", {"path": notes})
        text = " ".join(getattr(c, "text", "") for c in result.content)
        assert result.is_error is not allowed, text
        assert ("from the project" in text) if allowed else ("outside the allowed roots" in text)
    missing = orchestrator("claude-config", "--allow-dir", str(tmp_path / "nowhere"))
    assert missing.code == 2 and "not a directory" in missing.err


def test_claude_config_write_merges_keeping_other_servers_and_makes_a_backup(orchestrator, env: dict[str, str]) -> None:
    path = Path(env["CLAUDE_CONFIG_PATH"])
    path.parent.mkdir(parents=True)
    original = {
        "globalShortcut": "Ctrl+Space",
        "mcpServers": {"time": {"command": "mcp-server-time", "args": []}},
    }
    path.write_text(json.dumps(original))

    run = orchestrator("claude-config", "--write")
    assert run.code == 0, run.err
    written = json.loads(path.read_text())
    assert written["globalShortcut"] == "Ctrl+Space"
    assert written["mcpServers"]["time"] == original["mcpServers"]["time"]
    assert written["mcpServers"]["orchestrator"]["command"] == str(ORCHESTRATOR)
    backup = path.with_name(path.name + ".bak")
    assert json.loads(backup.read_text()) == original

    again = orchestrator("claude-config", "--write")
    assert again.code == 0 and "already up to date" in again.out
    assert json.loads(path.read_text()) == written


def test_claude_config_write_creates_a_missing_file(orchestrator, env: dict[str, str]) -> None:
    path = Path(env["CLAUDE_CONFIG_PATH"])
    run = orchestrator("claude-config", "--write")
    assert run.code == 0, run.err
    assert set(json.loads(path.read_text())["mcpServers"]) == {"orchestrator"}
    assert not path.with_name(path.name + ".bak").exists()


@pytest.mark.parametrize(
    ("client", "servers_key", "typed"),
    [
        ("claude-desktop", "mcpServers", False),
        ("claude-code", "mcpServers", True),
        ("cursor", "mcpServers", False),
        ("vscode", "servers", True),
    ],
)
def test_claude_config_prints_the_shape_each_host_reads(
    orchestrator, home: Path, client: str, servers_key: str, typed: bool
) -> None:
    run = orchestrator("claude-config", "--client", client)
    assert run.code == 0, run.err
    printed = run.json()
    assert list(printed) == [servers_key]
    entry = printed[servers_key]["orchestrator"]
    assert entry.pop("type", None) == ("stdio" if typed else None)
    assert entry == {
        "command": str(ORCHESTRATOR),
        "args": ["serve"],
        "env": {"ORCHESTRATOR_HOME": str(home.resolve())},
    }


def test_claude_config_for_claude_code_also_gives_the_claude_mcp_add_command(orchestrator, home: Path) -> None:
    run = orchestrator("claude-config", "--client", "claude-code")
    line = next(line for line in run.err.splitlines() if "claude mcp add" in line)
    words = shlex.split(line[line.index("claude mcp add") :])
    assert words[:3] == ["claude", "mcp", "add"]
    assert words[words.index("--scope") + 1] == "project"
    assert words[words.index("--env") + 1] == f"ORCHESTRATOR_HOME={home.resolve()}"
    dash = words.index("--")
    assert words[dash - 1] == "orchestrator"  # the server's name, before the command
    assert words[dash + 1 :] == [str(ORCHESTRATOR), "serve"]


def test_claude_config_write_puts_each_host_entry_in_its_own_file_keeping_the_rest(
    orchestrator, env: dict[str, str], tmp_path: Path
) -> None:
    vscode = tmp_path / ".vscode" / "mcp.json"  # the workspace is the working directory
    vscode.parent.mkdir()
    theirs = {"inputs": [{"id": "token", "type": "promptString"}], "servers": {"github": {"type": "http", "url": "u"}}}
    vscode.write_text(json.dumps(theirs))
    written = {
        "vscode": vscode,
        "claude-code": tmp_path / ".mcp.json",
        "cursor": Path(env["HOME"]) / ".cursor" / "mcp.json",
    }
    for client, path in written.items():
        run = orchestrator("claude-config", "--client", client, "--write")
        assert run.code == 0, run.err
        assert str(path) in run.out
    code = json.loads(written["claude-code"].read_text())["mcpServers"]["orchestrator"]
    assert code["type"] == "stdio" and code["command"] == str(ORCHESTRATOR)
    cursor = json.loads(written["cursor"].read_text())["mcpServers"]["orchestrator"]
    assert "type" not in cursor and cursor["args"] == ["serve"]
    merged = json.loads(vscode.read_text())
    assert merged["inputs"] == theirs["inputs"] and merged["servers"]["github"] == theirs["servers"]["github"]
    assert merged["servers"]["orchestrator"]["type"] == "stdio"
    assert json.loads(vscode.with_name("mcp.json.bak").read_text()) == theirs
    assert not Path(env["CLAUDE_CONFIG_PATH"]).exists()  # Claude Desktop's file is left alone


def test_claude_config_write_refuses_a_vscode_file_whose_servers_is_not_an_object(orchestrator, tmp_path: Path) -> None:
    vscode = tmp_path / ".vscode" / "mcp.json"
    vscode.parent.mkdir()
    vscode.write_text('{"servers": []}')
    run = orchestrator("claude-config", "--client", "vscode", "--write")
    assert run.code == 2
    assert "'servers'" in run.err and str(vscode) in run.err
    assert vscode.read_text() == '{"servers": []}'


def test_claude_config_write_refuses_a_file_that_is_not_json(orchestrator, env: dict[str, str]) -> None:
    path = Path(env["CLAUDE_CONFIG_PATH"])
    path.parent.mkdir(parents=True)
    path.write_text('{"mcpServers": {,}')
    run = orchestrator("claude-config", "--write")
    assert run.code == 2
    assert run.err.startswith("orchestrator: error: ") and "not valid JSON" in run.err
    assert path.read_text() == '{"mcpServers": {,}'
    assert not path.with_name(path.name + ".bak").exists()
