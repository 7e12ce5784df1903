"""What crosses the queue is JSON data, never code: pydocket's pickles replaced, failing closed.

pydocket carries a task's arguments, its result, the exception it raised and the value of a
strike as cloudpickle, and unpickles whatever it reads from Redis: one `XADD` of a pickled
`os.system` call to `orchestrator-runs:stream` ran a command on every worker. pydocket has no
serializer hook, so `install` puts this module's codec where its modules call `cloudpickle`
(`docket.execution`, `docket.worker`, `docket.strikelist`) and wraps the two places that read
messages from Redis (`Execution.from_message`, `StrikeList._read_strikes`):

- a task message is checked before Docket builds anything from it: the fields of Docket's
  layout, a task we registered, and arguments of that task's shape (`install`'s `shapes`). A
  message that fails is logged with its origin (stream, message id, worker) and replaced by a
  harmless one that Docket acknowledges and deletes as superseded: it never runs, and the
  worker goes on;
- this orchestrator sends no strikes, so every strike read is logged and dropped;
- `Docket.get_execution` (which unpickles with its own import) is replaced by a refusal: we never
  call it.

It fails closed: `install` refuses (and so no server or worker opens the queue) unless pydocket
is the version these places were checked in (`PYDOCKET`) and each place is where it is
expected. `uncovered` lists every use of a pickle module in a pydocket source tree that this
module does not cover; a test holds it empty for the installed pydocket, so moving to a new
release means reading its code again, never silently reopening the hole.
"""

from __future__ import annotations

import ast
import inspect
import json
import logging
import os
import socket
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from ..errors import PipelineError, RefusedData

__all__ = [
    "MAGIC",
    "PYDOCKET",
    "Shape",
    "TaskFailed",
    "dumps",
    "install",
    "loads",
    "outcome_problem",
    "serving",
    "uncovered",
]

log = logging.getLogger("pipelines.queue")

PYDOCKET = "0.27.0"
"""The pydocket release whose uses of cloudpickle this module was checked against."""
MAGIC = b"orchestrator-json/1\n"
"""How every payload we write starts: anything else (a pickle: b"\\x80...") is refused unread."""

Shape = Callable[[tuple[Any, ...], dict[str, Any]], str | None]
"""A task's argument check: what is wrong with (args, kwargs), or None when they are its own."""

COVERED: Mapping[str, frozenset[str]] = {
    "docket.py": frozenset({"Docket.get_execution"}),
    "execution.py": frozenset({"<module>", "Execution.as_message", "Execution.from_message", "Execution.get_result"}),
    "strikelist.py": frozenset({"<module>", "StrikeInstruction.as_message", "StrikeInstruction.from_message"}),
    "worker.py": frozenset({"<module>", "Worker._execute"}),
}
"""Where pydocket uses a pickle module (file: functions), every one covered by `install`."""
_PICKLERS = frozenset({"pickle", "_pickle", "cloudpickle", "dill", "marshal", "shelve", "jsonpickle"})
_REFUSED_TASK = "orchestrator-refused"


class TaskFailed(Exception):
    """A queued task that raised: its type and message, as text (never the exception object)."""


# -- the codec (stands in for the `cloudpickle` module inside pydocket) -------------------------------
def dumps(obj: Any, protocol: int | None = None, **_: Any) -> bytes:
    """`obj` as our JSON: a tuple (a task's arguments), an exception (type and message), or plain
    data. A value JSON has no type for (a date, a set) goes as its text, as the run and item
    records of the shared state keep it (`json.dumps(..., default=str)`)."""
    if isinstance(obj, tuple):
        body: dict[str, Any] = {"tuple": list(cast("tuple[Any, ...]", obj))}
    elif isinstance(obj, BaseException):
        body = {"error": {"type": type(obj).__name__, "message": str(obj)}}
    else:
        body = {"value": obj}
    return MAGIC + json.dumps(body, separators=(",", ":"), default=str).encode()


def loads(data: Any, **_: Any) -> Any:
    """What `dumps` wrote; anything else raises `RefusedData` before a byte of it is interpreted."""
    raw = bytes(cast("bytes", data)) if isinstance(data, bytes | bytearray | memoryview) else b""
    if not raw.startswith(MAGIC):
        kind = "a pickle" if raw[:1] == b"\x80" else "not the orchestrator's JSON"
        raise RefusedData(f"a payload that is {kind}: refused unread")
    try:
        body: Any = json.loads(raw[len(MAGIC) :])
    except ValueError:
        raise RefusedData("a payload whose JSON does not parse") from None
    if isinstance(body, dict) and len(cast("dict[str, Any]", body)) == 1:
        (kind, value), *_rest = cast("dict[str, Any]", body).items()
        if kind == "tuple" and isinstance(value, list):
            return tuple(cast("list[Any]", value))
        if kind == "value":
            return value
        if kind == "error" and isinstance(value, dict):
            error = cast("dict[str, Any]", value)
            return TaskFailed(f"{error.get('type', 'Exception')}: {error.get('message', '')}")
    raise RefusedData("a payload of an unknown shape")


class _Codec:
    """The object pydocket's modules find under the name `cloudpickle`."""

    dumps = staticmethod(dumps)
    loads = staticmethod(loads)


CODEC = _Codec()


# -- where a refused message came from ----------------------------------------------------------------
_WORKERS: dict[str, str] = {}
"""The worker taking tasks from each docket of this process (by docket name)."""


def serving(docket_name: str, worker: str) -> None:
    """Name the worker of `docket_name` in the lines that say a message was refused."""
    _WORKERS[docket_name] = worker


def _refuse(stream: str, message_id: Any, docket_name: str, problem: str) -> None:
    worker = _WORKERS.get(docket_name) or f"{socket.gethostname()}:{os.getpid()}"
    log.warning(
        "refused a message on %s (id %s, worker %s): %s; dropped, not run", stream, _text(message_id), worker, problem
    )


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# -- task messages --------------------------------------------------------------------------------------
_SHAPES: dict[str, Shape] = {}


def _problem(docket: Any, message: Mapping[bytes, bytes]) -> str | None:
    """What is wrong with a task message (None: it is one of ours, of its task's shape)."""
    try:
        missing = [f for f in (b"key", b"when", b"function", b"args", b"kwargs", b"attempt") if f not in message]
        if missing:
            return f"not a task message (no {', '.join(f.decode() for f in missing)})"
        message[b"key"].decode()
        datetime.fromisoformat(message[b"when"].decode())
        int(message[b"attempt"].decode())
        int(message.get(b"generation", b"0").decode())
        function = message[b"function"].decode()
        shape = _SHAPES.get(function)
        if shape is None or function not in docket.tasks:
            return f"a task this orchestrator does not have ({function[:80]!r})"
        args, kwargs = loads(message[b"args"]), loads(message[b"kwargs"])
    except RefusedData as exc:
        return exc.message
    except (ValueError, TypeError, AttributeError):
        return "a task message whose fields do not parse"
    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
        return "a task message whose arguments are not a list and a mapping"
    return shape(cast("tuple[Any, ...]", args), cast("dict[str, Any]", kwargs))


def _harmless(message_id: Any) -> dict[bytes, bytes]:
    """A message in place of a refused one: a key nobody uses, at generation 1 with no run record,
    so Docket's claim finds it superseded, acknowledges and deletes it, and runs nothing."""
    return {
        b"key": f"{_REFUSED_TASK}:{_text(message_id)}".encode(),
        b"when": datetime.now(UTC).isoformat().encode(),
        b"function": _REFUSED_TASK.encode(),
        b"args": dumps(()),
        b"kwargs": dumps({}),
        b"attempt": b"1",
        b"generation": b"1",
    }


async def _never(*_: Any, **__: Any) -> None:
    """Stands for a refused task (Docket drops it before it would run; nothing to do if it did)."""


def outcome_problem(outcome: Any) -> str | None:
    """What is wrong with an outcome read from the queue (None: it has the shape of `_queue.Outcome`)."""
    if not isinstance(outcome, dict):
        return "not a mapping"
    found = cast("dict[str, Any]", outcome)
    if found.get("status") not in ("succeeded", "failed", "cancelled", "done"):
        return "an unknown status"
    if any(not isinstance(found.get(k, {}), dict) for k in ("result", "update", "error")):
        return "a result, update or error that is not a mapping"
    error = cast("dict[str, Any]", found.get("error", {}))
    if any(not isinstance(error.get(k, ""), str) for k in ("type", "message", "hint", "where", "limit", "step")):
        return "an error whose fields are not text"
    return None


# -- installing into pydocket ---------------------------------------------------------------------------
_installed = False


def install(shapes: Mapping[str, Shape]) -> None:
    """Make pydocket carry our JSON and check every task message it reads (once per process).

    Raises `PipelineError` when pydocket is not the release checked (`PYDOCKET`) or a place this
    relies on moved: the queue is not opened at all rather than opened unsafe.
    """
    global _installed
    _SHAPES.update(shapes)
    if _installed:
        return
    import cloudpickle  # pyright: ignore[reportMissingTypeStubs]  # (compared by identity only)
    import docket
    import docket.docket
    import docket.execution
    import docket.strikelist
    import docket.worker

    hint = (
        f"install pydocket=={PYDOCKET} (the version this orchestrator checked), or review pipelines/distributed/wire.py"
    )
    if docket.__version__ != PYDOCKET:
        raise PipelineError(
            f"pydocket {docket.__version__} is not the release whose unpickling this orchestrator replaces "
            f"({PYDOCKET}); refusing to use the queue",
            hint=hint,
        )
    Execution, StrikeList = docket.execution.Execution, docket.strikelist.StrikeList
    expected: list[tuple[Any, str, list[str]]] = [
        (Execution, "from_message", ["docket", "message", "redelivered", "fallback_task", "message_id", "sync"]),
        (StrikeList, "_read_strikes", ["self", "r", "last_id", "initial_load_complete", "strikes_in_effect"]),
        (docket.docket.Docket, "get_execution", ["self", "key"]),
    ]
    for owner, name, params in expected:
        found = getattr(owner, name, None)
        if found is None or list(inspect.signature(found).parameters) != params:
            raise PipelineError(
                f"pydocket's {owner.__name__}.{name} is not as expected; refusing to use the queue", hint=hint
            )
    modules = (docket.execution, docket.worker, docket.strikelist)
    for module in modules:
        if getattr(module, "cloudpickle", None) is not cloudpickle:
            raise PipelineError(f"{module.__name__} no longer unpickles through `cloudpickle`; refusing", hint=hint)

    original = Execution.__dict__["from_message"].__func__

    async def from_message(
        cls: Any,
        docket: Any,
        message: Any,
        redelivered: bool = False,
        fallback_task: Any = None,
        message_id: Any = None,
        sync: bool = True,
    ) -> Any:
        problem = _problem(docket, message)
        if problem is not None:
            _refuse(docket.stream_key, message_id, docket.name, problem)
            message, fallback_task = _harmless(message_id), _never
        return await original(cls, docket, message, redelivered, fallback_task, message_id, sync)

    async def read_strikes(self: Any, r: Any, last_id: Any, initial_load_complete: bool, strikes_in_effect: Any) -> Any:
        with self._maybe_suppress_instrumentation():
            streams = await r.xread(
                {self.strike_key: last_id}, count=100, block=60_000 if initial_load_complete else None
            )
        if not streams:
            if not initial_load_complete and self._strikes_loaded is not None:
                self._strikes_loaded.set()  # (the worker waits for this before it takes tasks)
            return last_id, True
        for _, messages in streams:
            for message_id, _message in messages:
                last_id = message_id
                _refuse(self.strike_key, message_id, self.name, "a strike (this orchestrator sends none)")
        return last_id, initial_load_complete

    async def get_execution(self: Any, key: str) -> Any:
        raise RefusedData("Docket.get_execution unpickles; the orchestrator never reads a task that way")

    for module in modules:
        module.cloudpickle = CODEC  # pyright: ignore[reportAttributeAccessIssue]
    Execution.from_message = classmethod(from_message)  # pyright: ignore[reportAttributeAccessIssue]
    StrikeList._read_strikes = read_strikes  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
    docket.docket.Docket.get_execution = get_execution  # pyright: ignore[reportAttributeAccessIssue]
    _installed = True


def uncovered(root: Path | None = None) -> dict[str, set[str]]:
    """The uses of a pickle module in pydocket's sources (`root`: its package folder) that `install`
    does not cover (file: functions). Empty for the release checked."""
    if root is None:
        import docket

        root = Path(docket.__file__).parent
    found: dict[str, set[str]] = {}
    for file in sorted(root.rglob("*.py")):
        name = file.relative_to(root).as_posix()
        for scope in _pickling_scopes(ast.parse(file.read_text(encoding="utf-8"))):
            if scope not in COVERED.get(name, frozenset()):
                found.setdefault(name, set()).add(scope)
    return found


def _pickling_scopes(tree: ast.AST) -> set[str]:
    scopes: set[str] = set()

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = f"{scope}.{child.name}" if scope else child.name
            names: list[str] = []
            if isinstance(child, ast.Name):
                names = [child.id]
            elif isinstance(child, ast.Import):
                names = [alias.name.split(".")[0] for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                names = [(child.module or "").split(".")[0]]
            if _PICKLERS.intersection(names):
                scopes.add(scope or "<module>")
            visit(child, inner)

    visit(tree, "")
    return scopes
