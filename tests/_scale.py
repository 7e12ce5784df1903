"""Real PostgreSQL and Redis servers for the distributed mode's tests, on free loopback ports.

PostgreSQL: `initdb` once per test session into a temporary folder (trust authentication,
loopback only, no Unix socket), one server per session, and a fresh database per test. As root
(CI), initdb and postgres refuse to run, so they run as the `postgres` user (the Debian package
creates it) or `nobody`. Redis: one `redis-server` per test (it starts in milliseconds), no
persistence. Everything is stopped and removed afterwards.

Where the servers are not installed the tests are skipped, saying which package is missing and
that `.ci/run` installs it; never silently.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT = 60.0
_databases = itertools.count(1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postgres_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def _wait(check: object, what: str, process: subprocess.Popen[bytes], log: Path | None = None) -> None:
    """Poll `check` (a callable) until it is true; fail when the process died or time ran out."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            detail = log.read_text(errors="replace")[-2000:] if log is not None and log.is_file() else ""
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{detail}")
        try:
            if check():  # type: ignore[operator]
                return
        except OSError:
            pass
        time.sleep(0.05)  # a poll of a server starting in another process: no event to wait on
    raise RuntimeError(f"{what} did not start within {START_TIMEOUT:g}s")


def _unprivileged() -> dict[str, object]:
    """subprocess options that drop root (initdb and postgres refuse it); nothing when not root."""
    if os.geteuid() != 0:
        return {}
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return {"user": entry.pw_uid, "group": entry.pw_gid}
    pytest.skip("running as root with neither a 'postgres' nor a 'nobody' user to run PostgreSQL as")


class PostgresServer:
    """One PostgreSQL server for the session; `database()` makes a fresh database for a test."""

    def __init__(self) -> None:
        bindir = _postgres_bin()
        if bindir is None:
            pytest.skip(
                "PostgreSQL is not installed (initdb/postgres not found): `apt-get install postgresql` "
                "(.ci/run installs it)"
            )
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="orchestrator-pg-"))
        self.port = free_port()
        drop = _unprivileged()
        if drop:
            os.chown(self.root, int(drop["user"]), int(drop["group"]))  # type: ignore[call-overload]
        data = self.root / "data"
        log = self.root / "initdb.log"
        with open(log, "wb") as out:
            done = subprocess.run(
                [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
                **drop,  # type: ignore[arg-type]
            )
        if done.returncode:
            raise RuntimeError("initdb failed:\n" + log.read_text(errors="replace"))
        self.log = self.root / "postgres.log"
        self._out = open(self.log, "wb")  # closed in stop
        self.process = subprocess.Popen(
            [
                str(bindir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=300",
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            **drop,  # type: ignore[arg-type]
        )
        _wait(self._ready, "postgres", self.process, self.log)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def database(self) -> str:
        """A new, empty database; its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(_databases)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        import signal

        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._out.close()
        shutil.rmtree(self.root, ignore_errors=True)


class RedisServer:
    """One `redis-server` on a free loopback port, without persistence."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip(
                "Redis is not installed (redis-server not found): `apt-get install redis-server` (.ci/run installs it)"
            )
        self.root = Path(tempfile.mkdtemp(prefix="orchestrator-redis-"))
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait(self._ready, "redis-server", self.process)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _ready(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> str:
    """A fresh PostgreSQL database of the session's server."""
    return postgres_server.database()


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis server of this test's own."""
    server = RedisServer()
    try:
        yield server.url
    finally:
        server.stop()


# -- `orchestrator worker` processes --------------------------------------------------------------
ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
REDELIVERY = 15.0
"""Seconds after which a dead worker's task goes to another worker (the tests' setting)."""


def _env(home: Path) -> dict[str, str]:
    drop = ("ORCHESTRATOR_TOKEN", "ORCHESTRATOR_STATE", "ORCHESTRATOR_QUEUE")
    return {k: v for k, v in os.environ.items() if k not in drop} | {"ORCHESTRATOR_HOME": str(home)}


class Workers:
    """`orchestrator worker` subprocesses on one state and queue."""

    def __init__(self, root: Path, skills: Path, state: str, queue: str, concurrency: int = 8) -> None:
        self.root, self.skills, self.state, self.queue = root, skills, state, queue
        self.concurrency = concurrency
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, env: dict[str, str] | None = None) -> None:
        log = open(self.root / f"{name}.log", "wb")  # the child has its own copy: closed below
        self.procs[name] = subprocess.Popen(
            [
                *(str(ORCHESTRATOR), "worker", "--state", self.state, "--queue", self.queue, "--name", name),
                *("--skills", str(self.skills), "--concurrency", str(self.concurrency)),
                *("--redelivery-timeout", str(REDELIVERY)),
            ],
            env=_env(self.root / name) | (env or {}),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        _until(lambda: b"takes runs and items" in (self.root / f"{name}.log").read_bytes(), f"worker {name} ready")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def _until(check: object, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(0.05)  # polls another process's progress: there is no event to wait on


@contextlib.contextmanager
def two_workers(root: Path, skills: Path, state: str, queue: str) -> Iterator[Workers]:
    """Workers `w1` and `w2` on `state` and `queue`, stopped when left."""
    group = Workers(root, skills, state, queue)
    try:
        group.start("w1")
        group.start("w2")
        yield group
    finally:
        group.stop()
