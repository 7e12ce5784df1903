"""LangGraph's checkpoints read back as our data only: no pickle, no type that is not ours.

LangGraph's `JsonPlusSerializer` is permissive by default: a checkpoint value may name any
importable callable (a msgpack extension holding module, name and arguments), and reading it
calls that callable. A row forged in PostgreSQL (`--state`) or in the home's state.sqlite would
run code in the process that resumes the run. Both checkpointers (`saver`) get `serializer()`:

- only the encodings LangGraph writes for us (`msgpack`, and `null`/`bytes`): a `pickle` or a
  legacy `json` row is refused;
- every msgpack extension, nested ones too, is checked before anything is built: only the types
  in `ALLOWED` (plain data, and LangGraph's `Send` that carries each loop item), only the method
  in `ALLOWED_METHODS`; anything else refuses the whole value with `RefusedData` (LangGraph's
  strict mode would quietly put the raw arguments in its place; a run must not go on from a
  forged state).

Construction of what passed is left to LangGraph, strict with the same list.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio

from ..errors import RefusedData

__all__ = ["ALLOWED", "ALLOWED_METHODS", "saver", "serializer"]

ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        ("langgraph.types", "Send"),  # a parallel loop's item (`_loops.fan_router`)
        ("datetime", "datetime"),
        ("datetime", "date"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("zoneinfo", "ZoneInfo"),
        ("uuid", "UUID"),
        ("decimal", "Decimal"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("collections", "deque"),
        ("pathlib", "Path"),
        ("pathlib", "PosixPath"),
        ("pathlib", "WindowsPath"),
        ("pathlib._local", "Path"),
        ("pathlib._local", "PosixPath"),
        ("pathlib._local", "WindowsPath"),
    }
)
"""The (module, name) pairs a checkpoint of ours may hold: data a step's output can carry, and
LangGraph's `Send`. No callable, no class of a library we do not store."""
ALLOWED_METHODS: frozenset[tuple[str, str, str]] = frozenset({("datetime", "datetime", "fromisoformat")})
_ENCODINGS = frozenset({"null", "bytes", "bytearray", "msgpack"})
_DELTA, _METHOD = 7, 3  # LangGraph's msgpack extension codes (jsonplus: EXT_DELTA_SNAPSHOT, EXT_METHOD_SINGLE_ARG)
_BUILDS = frozenset({0, 1, 2, 4, 5})  # constructor with one, positional, keyword args; pydantic v1, v2


def serializer() -> Any:
    """The checkpoint serializer of both checkpointers (LangGraph imported on first use)."""
    import ormsgpack
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    class OursOnly(JsonPlusSerializer):
        """LangGraph's serializer, strict, behind a check that refuses instead of substituting."""

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            encoding, blob = data
            if encoding not in _ENCODINGS:
                raise _refused(f"a value stored as {encoding!r}")
            if encoding == "msgpack":
                _check(ormsgpack, blob)
            return super().loads_typed(data)

    return OursOnly(pickle_fallback=False, allowed_json_modules=None, allowed_msgpack_modules=ALLOWED)


def _check(ormsgpack: Any, blob: bytes) -> None:
    """Walk a msgpack value's extensions (nested ones too) without building any; refuse one not ours."""
    found: list[str] = []

    def hook(code: int, data: bytes) -> None:
        if code == _DELTA:
            ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            return
        if code not in _BUILDS and code != _METHOD:
            found.append(f"msgpack extension {code}")
            raise ValueError
        parts: Any = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        items = cast("list[Any]", parts) if isinstance(parts, list | tuple) else []
        # the names only (module, name, and a method's name): never the arguments, which may be large
        named = [str(items[i])[:80] if i < len(items) else "?" for i in (0, 1, 3)]
        if len(items) < 3 or (named[0], named[1]) not in ALLOWED:
            found.append(f"a value of {named[0]}.{named[1]}")
            raise ValueError
        if code == _METHOD and (named[0], named[1], named[2]) not in ALLOWED_METHODS:
            found.append(f"a call of {named[0]}.{named[1]}.{named[2]}")
            raise ValueError

    try:
        ormsgpack.unpackb(blob, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
    except ValueError:  # (ormsgpack replaces the hook's error with its own)
        raise _refused(found[0] if found else "a value that is not msgpack") from None


def _refused(what: str) -> RefusedData:
    return RefusedData(
        f"a checkpoint holds {what}, which the orchestrator never stores: refused, not loaded",
        hint="something other than the orchestrator wrote to the state database; start the run again "
        "(`orchestrator runs show` names its inputs) and see the trust model: docs/distributed.md#trust-model",
    )


@asynccontextmanager
async def saver(state_url: str | None, sqlite_path: Path) -> AsyncGenerator[Any]:
    """The run's checkpointer: PostgreSQL's for `--state`, else the home's state.sqlite; both
    reading with `serializer()`."""
    if state_url:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        # tables made by `_pg.migrate`
        async with AsyncPostgresSaver.from_conn_string(state_url, serde=serializer()) as found:
            yield found
        return
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with aiosqlite.connect(str(sqlite_path)) as conn:  # (what `from_conn_string` does, with our serde)
        yield AsyncSqliteSaver(conn, serde=serializer())


class SharedSaver:
    """One checkpointer shared by the runs under way (a pipeline calling another pipeline runs
    inside its parent's run; two SQLite connections would lock each other out): opened by the
    first user, closed when the last one leaves."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._saver: Any = None
        self._stack: AsyncExitStack | None = None
        self._users = 0
        self._lock = anyio.Lock()

    @asynccontextmanager
    async def use(self) -> AsyncGenerator[Any]:
        """The shared checkpointer, for as long as the caller's run needs it."""
        async with self._lock:
            if self._users == 0:
                self._stack = AsyncExitStack()
                self._saver = await self._stack.enter_async_context(self._factory())
            self._users += 1
        try:
            yield self._saver
        finally:
            with anyio.CancelScope(shield=True):
                async with self._lock:
                    self._users -= 1
                    if self._users == 0 and self._stack is not None:
                        await self._stack.aclose()
                        self._saver = self._stack = None
