"""Disk: a confined call writes into a size-capped work directory, and a run's artifacts have a cap.

The attacker of issue 26 wrote 2 GB in 7 s from a script skill (each file under the 100 MB file
limit, no bound on the total) and it all stayed on the server's disk. Now the jail's work
directory is a tmpfs of `disk_mb` MiB (1024 unless skill.yaml or the home's config says):
writing past it fails inside the skill (ENOSPC), the call fails with a `limit_exceeded`
envelope, and nothing it wrote reaches the host. What a call leaves within the cap is brought
back to the host's directory afterwards, without following a link on either side.

Through a real MCP client and the real bubblewrap (skipped, with the reason, where it does not
work here); the run cap is the pipelines' own and runs everywhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client

from mcp_server import create_server
from pipelines.storage.runs import RunStore
from skills.executors._workdir import WorkdirFull
from skills.executors.isolation import probe
from skills.executors.script import run_script
from tests.fixtures.run_skills import publish, text_of
from tests.helpers import envelope, write_skill

ISOLATION = probe()
confined = pytest.mark.skipif(
    not ISOLATION.available, reason=f"confinement (bubblewrap) does not work here: {ISOLATION.reason}"
)

FILL = """\
import errno, json, os, sys

args = json.load(sys.stdin)
block, written = b"\\0" * 2**20, 0
try:
    for i in range(args["files"]):
        with open(f"big-{i}.bin", "wb") as handle:
            for _ in range(args["mb_each"]):
                handle.write(block)
                written += 1
except OSError as exc:
    print(f"stopped after {written} MiB: {errno.errorcode[exc.errno]}", file=sys.stderr)
    sys.exit(1)
print(json.dumps({"written_mb": written}))
"""


def filler(root: Path, name: str, **contract: Any) -> Path:
    return write_skill(
        root,
        name,
        contract={"run": {"script": "scripts/fill.py"}, "timeout": 60, **contract},
        files={"scripts/fill.py": FILL},
    )


def bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


@confined
async def test_a_script_writing_two_gigabytes_is_stopped_at_the_cap_and_leaves_nothing_behind(tmp_path: Path) -> None:
    home = tmp_path / "home"
    filler(tmp_path / "skills", "filler")  # no disk_mb: the default, 1024 MiB
    logged: list[str] = []

    async def on_log(params: Any) -> None:
        logged.append(str(params.data))

    server = create_server(home=home, skill_dirs=[tmp_path / "skills"], builtin=False, pipelines=False)
    async with Client(server, logging_callback=on_log, log_level="info") as client:
        with anyio.fail_after(120):
            result = await client.call_tool("filler", {"files": 20, "mb_each": 100})  # 2,000 MiB
        error = envelope(result)
        assert error["type"] == "limit_exceeded"
        assert "filled its work directory (1024 MiB, `disk_mb`)" in error["message"]
        assert "nothing it wrote there was kept" in error["message"] and "disk_mb" in error["hint"]
        assert any("stopped after" in line and "ENOSPC" in line for line in logged), logged  # inside the skill
        assert bytes_under(home / "runs") == 0  # nothing reached the host's disk (a call's work directory)
        still = await client.call_tool("filler", {"files": 1, "mb_each": 1})
        assert not still.is_error and still.structured_content == {"written_mb": 1}
    [kept] = [p for p in (home / "runs").rglob("*") if p.is_file()]
    assert kept.name == "big-0.bin" and kept.stat().st_size == 2**20  # what a call leaves within the cap is kept


@confined
async def test_disk_mb_in_skill_yaml_or_the_home_config_sets_the_cap(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(yaml.safe_dump({"isolation": {"disk_mb": 4}}))
    filler(tmp_path / "skills", "home-capped")
    filler(tmp_path / "skills", "own-cap", disk_mb=16)
    server = create_server(home=home, skill_dirs=[tmp_path / "skills"], builtin=False, pipelines=False)
    async with Client(server) as client:
        with anyio.fail_after(60):
            small = await client.call_tool("home-capped", {"files": 1, "mb_each": 8})
            larger = await client.call_tool("own-cap", {"files": 1, "mb_each": 8})
            over = await client.call_tool("own-cap", {"files": 2, "mb_each": 10})
    assert "filled its work directory (4 MiB" in envelope(small)["message"]
    assert not larger.is_error and larger.structured_content == {"written_mb": 8}
    assert "filled its work directory (16 MiB" in envelope(over)["message"]


TOUCH = """\
import json, os, sys

args = json.load(sys.stdin)
seen = sorted(os.listdir("."))
with open("started.txt") as handle:
    started = handle.read()
with open("started.txt", "a") as handle:
    handle.write(" and changed")
os.makedirs("sub/deeper", exist_ok=True)
with open("sub/deeper/result.json", "w") as handle:
    json.dump({"ok": True}, handle)
os.symlink("/etc/hostname", "link")
os.unlink("planted")  # a link the host's directory holds, copied in as a link
with open("planted", "w") as handle:
    handle.write("a file now")
print(json.dumps({"seen": seen, "started": started}))
"""


@confined
async def test_a_call_starts_with_the_files_of_its_directory_and_what_it_leaves_reaches_the_host(
    tmp_path: Path,
) -> None:
    program = tmp_path / "skill" / "touch.py"
    program.parent.mkdir()
    program.write_text(TOUCH)
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    work.mkdir()
    outside.write_text("not yours")
    (work / "started.txt").write_text("from an earlier step")
    (work / "planted").symlink_to(outside)  # a link into the host's files, planted before the call
    with anyio.fail_after(30):
        out = await run_script(
            program,
            {},
            skill="touch",
            workdir=work,
            timeout=20,
            memory_mb=256,
            max_output_bytes=10_000,
            isolation=ISOLATION,
        )
    assert out == {"seen": ["planted", "started.txt"], "started": "from an earlier step"}
    assert (work / "started.txt").read_text() == "from an earlier step and changed"
    result = work / "sub" / "deeper" / "result.json"
    assert json.loads(result.read_text()) == {"ok": True}
    if ISOLATION.mode == "root":  # as the jail wrote it: its sandbox user's, for the next jail to change
        assert result.stat().st_uid == result.parent.stat().st_uid == 65534
    assert not (work / "link").exists() and not (work / "link").is_symlink()  # links are not brought back
    assert not (work / "planted").is_symlink() and (work / "planted").read_text() == "a file now"
    assert outside.read_text() == "not yours"  # the planted link was replaced, never followed


@confined
async def test_sparse_files_beyond_the_cap_are_refused_whole(tmp_path: Path) -> None:
    program = tmp_path / "skill" / "sparse.py"
    program.parent.mkdir()
    program.write_text(
        "import json\nfor i in range(30):\n    with open(f'hole-{i}', 'wb') as f:\n        f.truncate(50 * 2**20)\n"
        "print(json.dumps({'ok': True}))\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    with anyio.fail_after(30), pytest.raises(WorkdirFull) as raised:
        await run_script(
            program,
            {},
            skill="sparse",
            workdir=work,
            timeout=20,
            memory_mb=256,
            max_output_bytes=10_000,
            isolation=ISOLATION,
            disk_mb=1024,
        )
    assert "left files of more than 1024 MiB" in raised.value.message and raised.value.limit == "disk_mb"
    assert os.listdir(work) == []  # 1.5 GB of holes would have been 1.5 GB written on the host


WRITE = """\
from pathlib import Path


def write(name, kb, ctx):
    (ctx.artifacts() / name).write_bytes(b"x" * kb * 1000)
    return {"wrote": name}
"""


async def test_a_run_whose_steps_write_more_artifacts_than_its_cap_fails_at_that_step(tmp_path: Path) -> None:
    home, skills = tmp_path / "home", tmp_path / "skills"
    home.mkdir()
    (home / "config.yaml").write_text(yaml.safe_dump({"runs": {"max_artifact_bytes": "1MB"}}))
    write_skill(skills, "write", contract={"inputs": {"type": "object"}, "run": {"python": "impl:write"}}, impl=WRITE)
    publish(
        home,
        """
        id: artifacts
        description: Three steps of 400 kB of artifacts each.
        steps:
          - {id: one, skill: write, parameters: {name: one.bin, kb: 400}}
          - {id: two, skill: write, parameters: {name: two.bin, kb: 400}}
          - {id: three, skill: write, parameters: {name: three.bin, kb: 400}}
          - {id: four, skill: write, parameters: {name: four.bin, kb: 400}}
        """,
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        with anyio.fail_after(60):
            result = await client.call_tool("artifacts", {})
        error = envelope(result)
        assert error["type"] == "limit_exceeded" and "(max_artifact_bytes)" in error["message"]
        assert "step 'three'" in error["message"] and "passed its limit of 1 MB" in text_of(result)
        assert "config.yaml" in error["hint"]
        assert (await client.list_tools()).tools  # still serving
    [record] = RunStore(home / "state.sqlite").list()
    assert record.status == "failed" and record.failed_step == "three"
    assert record.artifacts is not None
    assert sorted(os.listdir(record.artifacts)) == ["one.bin", "three.bin", "two.bin"]  # step four never ran
