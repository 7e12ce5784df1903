"""What `orchestrator serve` says when it starts: the waiting line in a terminal, and pipelines
that wait for an upstream server reported as pending, then published (never as a false error).

The server runs as the installed console script; its stderr is read line by line with a
deadline (a reader thread feeds a queue), its stdin held open or given a pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import pty
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.fixtures.adapter_support import FIXTURE

ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
SHOUT = """\
id: shout
steps:
  - id: echoed
    skill: fixture_echo
    parameters: {text: "hi"}
"""


class Lines:
    """The lines a process writes to one stream, readable with a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stream = stream
        self._reader = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._reader.start()

    def close(self) -> None:
        """After the process ended: the reader has seen the end of the stream; close it."""
        self._reader.join(timeout=30)
        self._stream.close()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, found: Callable[[list[str]], bool], timeout: float = 60) -> list[str]:
        deadline = time.monotonic() + timeout
        while not found(self.seen):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail("not seen in time; the lines so far:\n" + "\n".join(self.seen))
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                pytest.fail("the stream ended; its lines:\n" + "\n".join(self.seen))
            self.seen.append(line)
        return self.seen


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    return {**os.environ, "ORCHESTRATOR_HOME": str(home)}


@pytest.fixture
def serving(env: dict[str, str], home: Path, tmp_path: Path) -> Iterator[Lines]:
    """`serve --log-level INFO` with an upstream and two pipelines calling its tools (one misspelt)."""
    servers = tmp_path / "servers.json"
    entry = {"command": sys.executable, "args": [str(FIXTURE), "stdio"], "include": ["echo"]}
    servers.write_text(json.dumps({"mcpServers": {"fixture": entry}}))
    (home / "pipelines").mkdir(parents=True)
    (home / "pipelines" / "shout.yaml").write_text(SHOUT)
    (home / "pipelines" / "typo.yaml").write_text(SHOUT.replace("shout", "typo").replace("_echo", "_ecko"))
    args = [str(ORCHESTRATOR), "serve", "--servers", str(servers), "--log-level", "INFO"]
    process = subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    assert process.stderr is not None and process.stdin is not None
    lines = Lines(process.stderr)
    try:
        yield lines
    finally:
        process.stdin.close()  # end of input: the server stops and its upstream with it
        process.wait(timeout=30)
        lines.close()


def _index(lines: list[str], *parts: str) -> int:
    return next((i for i, line in enumerate(lines) if all(p in line for p in parts)), -1)


def test_a_pipeline_waiting_for_its_upstream_is_pending_then_published(serving: Lines) -> None:
    lines = serving.wait_for(lambda seen: _index(seen, "pipeline 'shout' published") >= 0)
    pending = _index(lines, "INFO", "pipeline 'shout' is pending", "'fixture'")
    assert 0 <= pending < _index(lines, "pipeline 'shout' published: upstream server(s) 'fixture' connected")
    assert not [line for line in lines if "ERROR" in line and "shout" in line]


def test_a_misspelt_imported_tool_is_an_error_once_its_upstream_has_connected(serving: Lines) -> None:
    lines = serving.wait_for(lambda seen: _index(seen, "ERROR", "typo.yaml") >= 0)
    error = lines[_index(lines, "ERROR", "typo.yaml")]
    assert "not published" in error and "unknown skill 'fixture_ecko'" in error and "fixture_echo" in error
    assert 0 <= _index(lines, "pipeline 'typo' is pending") < _index(lines, "ERROR", "typo.yaml")
    assert 0 <= _index(lines, "upstream 'fixture' connected") < _index(lines, "ERROR", "typo.yaml")


def test_stdio_serve_in_a_terminal_says_it_waits_for_a_client_and_how_to_attach_one(
    env: dict[str, str], tmp_path: Path
) -> None:
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [str(ORCHESTRATOR), "serve"], stdin=terminal, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    os.close(terminal)
    assert process.stderr is not None
    stderr = Lines(process.stderr)
    try:
        lines = stderr.wait_for(lambda seen: bool(seen))
        assert "waiting for a client on stdin" in lines[0] and "Ctrl-C stops" in lines[0]
        assert f"npx -y @modelcontextprotocol/inspector {ORCHESTRATOR} serve" in lines[0]
        assert f"{ORCHESTRATOR} claude-config --write" in lines[0]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        stderr.close()
        os.close(controller)


def test_stdio_serve_without_a_terminal_prints_no_such_line(env: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run(
        [str(ORCHESTRATOR), "serve"], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == ""
