"""The sandboxed Jinja2 environment behind `pipelines.language.expressions` (private).

A pipeline expression is a security boundary: pipelines come from files and from the
`register_pipeline` tool, so an expression must not reach Python internals, load files, call
arbitrary code, or burn unbounded time or memory. The policy here is an allow-list, not a
deny-list: only listed helpers, filters and methods of plain data can be called; attributes are
read key-first on mappings and only as plain data elsewhere; every amplifying operation (`*`,
`**`, `+`, `range`, padding and joining filters) is checked against a size limit before it runs;
loops, calls and operators check a per-render deadline.
"""

from __future__ import annotations

import json
import os.path
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any, cast

from jinja2 import Undefined, filters, pass_environment
from jinja2.runtime import Context, LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import ExpressionError, is_failure_record
from ._bounds import MAX_FILES as MAX_FILES
from ._bounds import MAX_INT_BITS as MAX_INT_BITS
from ._bounds import MAX_ITEMS as MAX_ITEMS
from ._bounds import MAX_RANGE as MAX_RANGE
from ._bounds import MAX_SIZE as MAX_SIZE
from ._bounds import TIME_LIMIT as TIME_LIMIT
from ._bounds import Missing as Missing
from ._bounds import UndefinedUse as UndefinedUse
from ._bounds import check_deadline as check_deadline
from ._bounds import check_size as check_size
from ._bounds import defined as defined
from ._bounds import forbidden as forbidden
from ._bounds import measure as measure
from ._bounds import start_clock as start_clock
from ._bounds import stop_clock as stop_clock
from ._bounds import too_large as too_large


def native(value: Any) -> Any:
    """A rendered value as plain data: iterators and views become lists; strict undefined raises."""
    if isinstance(value, Undefined):
        if isinstance(value, Missing):
            value._fail_with_undefined_error()  # pyright: ignore[reportPrivateUsage]  # jinja2's only way to raise it
        return None  # `{{ x if false }}`: Jinja's plain undefined for a missing else branch
    if isinstance(value, str):
        return str(value)  # Markup -> str
    if isinstance(value, Iterator | range) or type(value) in _VIEWS:
        items: list[Any] = []
        for item in cast(Iterator[Any], value):
            items.append(item)
            if len(items) > MAX_ITEMS:
                raise too_large("the list")
        return items
    if callable(value):
        raise ExpressionError(f"{describe(value)} is a function, not a value", hint="call it: name(...)")
    return value


_EMPTY: dict[object, object] = {}
_VIEWS = (type(_EMPTY.keys()), type(_EMPTY.values()), type(_EMPTY.items()))


def _json_default(value: Any) -> Any:
    if isinstance(value, Undefined):  # inside a value written into text (`defined`)
        if isinstance(value, Missing):
            value._fail_with_undefined_error()  # pyright: ignore[reportPrivateUsage]  # jinja2's only way to raise it
        return None
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return dict(cast(Mapping[Any, Any], value))
    if isinstance(value, set | frozenset):
        return sorted(cast(set[Any], value), key=str)
    raise TypeError(f"a {type(value).__name__} value cannot be turned into JSON")


def to_json(value: Any, indent: int | None = None) -> str:
    """JSON text of a value (plain JSON: no HTML escaping as in Jinja's `tojson`)."""
    value = native(value)
    if measure(value, indent=indent or 0) > MAX_SIZE:
        raise too_large("the JSON text")
    return json.dumps(value, ensure_ascii=False, indent=indent, default=_json_default)


def to_text(value: Any) -> str:
    """How a value is written into text: strings as they are, numbers as numbers, the rest as JSON."""
    if isinstance(value, str):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, Undefined) and not isinstance(value, Missing):
        return ""
    return to_json(value)


def from_json(text: str) -> Any:
    """Parse JSON text."""
    return json.loads(text)


def list_files(directory: str = ".", pattern: str = "*") -> list[str]:
    """Sorted paths of the files under `directory` matching `pattern` (`**/` recurses).

    Only inside the allowed roots of the run (as the file built-ins), never a secret.
    """
    from skills.core.roots import PathNotAllowedError, roots_of

    roots = roots_of(None)
    try:
        roots.check(directory, field="list_files")
    except PathNotAllowedError as exc:
        raise ExpressionError(f"list_files: {exc.message}", hint=exc.hint) from None
    if not Path(directory).is_dir():
        raise ExpressionError(f"list_files: '{directory}' is not a directory", hint="paths are relative to the server")
    found: list[str] = []
    for path in Path(directory).glob(pattern):
        check_deadline()
        if path.is_file() and roots.allows(Path(os.path.realpath(path))):
            found.append(str(path))
            if len(found) > MAX_FILES:
                raise ExpressionError(
                    f"list_files: more than {MAX_FILES:,} files match '{pattern}' in '{directory}'",
                    hint="use a narrower directory or pattern",
                )
    return sorted(found)


def basename(path: str) -> str:
    """Last component of a path: `basename('a/b.py')` is `'b.py'`."""
    return os.path.basename(str(path))


def dirname(path: str) -> str:
    """Everything but the last component: `dirname('a/b.py')` is `'a'`."""
    return os.path.dirname(str(path))


def join_path(*parts: str) -> str:
    """Join path components: `join_path('a', 'b.py')` is `'a/b.py'`."""
    return os.path.join(*(str(p) for p in parts))


def now() -> str:
    """The current local time as ISO 8601 with its UTC offset, to the second."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def length(value: Any) -> int:
    """Number of items (or characters)."""
    return len(value)


def bounded_range(*args: int) -> list[int]:
    """`range()` as a list, at most `MAX_RANGE` items."""
    numbers = range(*args)
    try:
        size = len(numbers)
    except OverflowError:
        size = MAX_RANGE + 1
    if size > MAX_RANGE:
        raise too_large(f"range() of more than {MAX_RANGE:,} items")
    return list(numbers)


def make_dict(*args: Any, **kwargs: Any) -> dict[Any, Any]:
    """`dict(a=1, b=2)`: a new mapping."""
    return dict(*args, **kwargs)


HELPERS: dict[str, Callable[..., Any]] = {
    "list_files": list_files,
    "basename": basename,
    "dirname": dirname,
    "join_path": join_path,
    "now": now,
    "to_json": to_json,
    "from_json": from_json,
    "length": length,
    "range": bounded_range,
    "dict": make_dict,
}
_HELPER_IDS = {id(f): name for name, f in HELPERS.items()}


# -- filters: Jinja built-ins that cannot leak or amplify, bounded versions of the ones that can.

_KEPT_FILTERS = (
    "abs capitalize count d default dictsort filesizeformat first float groupby int items last length list "
    "lower map max min reject rejectattr reverse round select selectattr sort striptags title trim truncate "
    "unique upper urlencode wordcount"
).split()


def _check_width(width: int) -> None:
    if width > MAX_SIZE:
        raise too_large(f"a width of {width:,}")


def _center(value: str, width: int = 80) -> str:
    _check_width(width)
    return str(value).center(width)


def _replace(value: str, old: str, new: str, count: int | None = None) -> str:
    text, old, new = str(value), str(old), str(new)
    hits = text.count(old) if old else len(text) + 1
    if count is not None and count >= 0:
        hits = min(hits, count)
    if len(text) + hits * (len(new) - len(old)) > MAX_SIZE:
        raise too_large("the result of replace")
    return text.replace(old, new, -1 if count is None else count)


def _check_fill(count: int, fill_with: Any, limit: int) -> None:
    if count > limit or (fill_with is not None and count * measure(fill_with) > MAX_SIZE):
        raise too_large(f"filling {count:,} places")


def _batch(value: Any, linecount: int, fill_with: Any = None) -> Any:
    _check_fill(linecount, fill_with, MAX_ITEMS)
    return filters.do_batch(value, linecount, fill_with)


def _slice(value: Any, slices: int, fill_with: Any = None) -> Any:
    _check_fill(slices, fill_with, MAX_RANGE)
    return filters.sync_do_slice(value, slices, fill_with)


@pass_environment
def _sum(environment: Any, iterable: Any, attribute: str | int | None = None, start: Any = 0) -> Any:
    items = native(iterable)
    check_size(items, "the input of sum")
    return filters.sync_do_sum(environment, items, attribute, start)


@pass_environment
def _join(environment: Any, value: Any, d: str = "", attribute: str | int | None = None) -> str:
    items = native(value)
    if measure(items) + len(str(d)) * len(items) > MAX_SIZE:
        raise too_large("the result of join")
    if attribute is not None:
        items = map(filters.make_attrgetter(environment, attribute), items)
    return str(d).join(to_text(item) for item in items)


@pass_environment
def _attr(environment: Any, obj: Any, name: str) -> Any:
    if str(name).startswith("__"):
        raise forbidden(f"access to '{name}'", hint="names starting with '_' are internal")
    return environment.getattr(obj, name)


def _iter_guard(value: Any) -> Iterator[Any]:
    """Wraps the iterable of every `{% for %}` (inserted by the compiler) to check the deadline."""
    for item in value:
        check_deadline()
        yield item


FILTERS: dict[str, Callable[..., Any]] = {
    **{name: filters.FILTERS[name] for name in _KEPT_FILTERS},
    "attr": _attr,
    "batch": _batch,
    "center": _center,
    "join": _join,
    "replace": _replace,
    "slice": _slice,
    "string": to_text,
    "sum": _sum,
    "tojson": to_json,
    "fromjson": from_json,
    "basename": basename,
    "dirname": dirname,
}
ITER_FILTER, TEXT_FILTER = "_iter", "_text"


# -- what may be read and called.

_STR_METHODS = frozenset(
    "capitalize casefold count endswith find isalnum isalpha isdigit islower isnumeric isspace istitle isupper "
    "lower lstrip partition removeprefix removesuffix rfind rpartition rsplit rstrip split splitlines startswith "
    "strip swapcase title upper".split()
)
_SEQ_METHODS = frozenset({"count", "index"})
_MAP_METHODS = frozenset({"get", "items", "keys", "values"})
_LOOP_ATTRS = frozenset(
    "index index0 revindex revindex0 first last length depth depth0 previtem nextitem cycle changed".split()
)
_OPAQUE = (
    type,
    types.ModuleType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.FrameType,
    types.CodeType,
    types.TracebackType,
    Iterator,
)


def _methods_of(obj: Any) -> frozenset[str] | None:
    if isinstance(obj, str):
        return _STR_METHODS
    if isinstance(obj, Mapping):
        return _MAP_METHODS
    if isinstance(obj, list | tuple):
        return _SEQ_METHODS
    if isinstance(obj, LoopContext):
        return _LOOP_ATTRS
    return None


def describe(obj: Any) -> str:
    """A short name of a callable or value for error messages."""
    if id(obj) in _HELPER_IDS:
        return f"'{_HELPER_IDS[id(obj)]}'"
    if isinstance(obj, types.MethodType | types.BuiltinMethodType) and not isinstance(obj.__self__, types.ModuleType):
        return f"the '{obj.__name__}' method of a {type(obj.__self__).__name__} value"
    return f"a {type(obj).__name__} value"


class PipelineEnvironment(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox narrowed to pipeline data: key-first access, allow-listed calls."""

    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self) -> None:
        super().__init__(
            undefined=Missing,
            finalize=to_text,
            autoescape=False,
            keep_trailing_newline=True,
            trim_blocks=True,
            cache_size=0,
        )
        self.globals.clear()
        self.globals.update(HELPERS)
        self.filters = dict(FILTERS)
        self.filters[ITER_FILTER] = _iter_guard
        self.filters[TEXT_FILTER] = to_text
        self.tests["failed"] = is_failure_record  # `{{ x is failed }}`: x is an on_error: continue failure

    def getattr(self, obj: Any, attribute: str) -> Any:
        """`a.b`: the key `b` of a mapping first, then a safe attribute."""
        if obj.__class__ is dict:  # not `type(obj)`: that narrows it to a dict of Unknowns, and a cast costs a call
            try:
                return obj[attribute]
            except KeyError:
                return self._missing_key(cast(dict[Any, Any], obj), attribute)
        if isinstance(obj, Undefined):
            return obj
        if isinstance(obj, Mapping):
            try:
                return cast(Mapping[Any, Any], obj)[attribute]
            except (KeyError, TypeError):
                return self._missing_key(cast(Mapping[Any, Any], obj), attribute)
        return self._attribute(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        """`a['b']`, `a[0]`: keys and indexes of data; a string key falls back to `getattr` elsewhere."""
        if isinstance(obj, Undefined):
            return obj
        if isinstance(obj, Mapping | list | tuple | str):
            try:
                return obj[argument]  # pyright: ignore[reportUnknownVariableType, reportIndexIssue]
            except (KeyError, IndexError, TypeError):
                return self.undefined(obj=obj, name=argument)
        if isinstance(argument, str):
            return self._attribute(obj, argument)
        return self.undefined(obj=obj, name=argument)

    def _missing_key(self, obj: Mapping[Any, Any], name: str) -> Any:
        if name in _MAP_METHODS:
            return getattr(obj, name)
        return self.undefined(obj=obj, name=name)

    def _attribute(self, obj: object, name: str) -> Any:
        if name.startswith("_"):
            raise forbidden(f"access to '{name}'", hint="names starting with '_' are internal")
        if _is_field(obj, name):
            return getattr(obj, name)  # a named tuple, such as the groups of `groupby`
        allowed = _methods_of(obj)
        if allowed is not None:
            if name in allowed:
                return getattr(obj, name)
            if hasattr(type(obj), name):
                raise forbidden(f"the '{name}' method of a {type(obj).__name__} value", hint=_method_hint(obj))
            return self.undefined(obj=obj, name=name)
        if obj is None or isinstance(obj, int | float):
            return self.undefined(obj=obj, name=name)
        if callable(obj) or isinstance(obj, _OPAQUE) or type(obj).__module__.startswith("jinja2"):
            raise forbidden(f"access to '{name}' of {describe(obj)}")
        try:
            value = getattr(obj, name)
        except AttributeError:
            return self.undefined(obj=obj, name=name)
        if callable(value) or isinstance(value, _OPAQUE):
            raise forbidden(f"access to '{name}' of {describe(obj)}", hint="only data attributes can be read")
        return value

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Call a helper or an allow-listed method of plain data; refuse everything else."""
        check_deadline()
        if id(obj) in _HELPER_IDS:
            return context.call(obj, *args, **kwargs)
        if isinstance(obj, Undefined):
            obj._fail_with_undefined_error()  # pyright: ignore[reportPrivateUsage]  # jinja2's only way to raise it
        if isinstance(obj, types.MethodType | types.BuiltinMethodType):
            owner = obj.__self__
            allowed = _methods_of(owner)
            if allowed is not None and obj.__name__ in allowed:
                return context.call(obj, *args, **kwargs)
        raise forbidden(f"calling {describe(obj)}", hint=f"callable helpers: {', '.join(HELPERS)}")

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        """`*`, `**`, `+` and `%` with their results bounded before they are computed."""
        check_deadline()
        if operator == "*":
            _check_repeat(left, right)
        elif operator == "**":
            _check_power(left, right)
        elif operator == "+":
            _check_concat(left, right)
        elif isinstance(left, str):
            raise forbidden("'%' string formatting", hint="join text with '~' and format numbers with round()")
        return self.binop_table[operator](left, right)


def _method_hint(obj: Any) -> str:
    allowed = _methods_of(obj) or frozenset()
    return f"methods of a {type(obj).__name__} value that can be called: {', '.join(sorted(allowed))}"


def _is_field(obj: object, name: str) -> bool:
    """Whether `name` is a field of the named tuple `obj`."""
    kind = type(obj)
    return isinstance(obj, tuple) and name in getattr(kind, "_fields", ())


def _check_repeat(left: Any, right: Any) -> None:
    if isinstance(left, int) and isinstance(right, str | list | tuple):
        left, right = cast(Any, right), left
    if isinstance(left, str | list | tuple) and isinstance(right, int):
        sequence = cast("Sequence[Any]", left)
        times = max(right, 0)
        if len(sequence) * times > MAX_ITEMS or measure(sequence) * times > MAX_SIZE:
            raise too_large(f"repeating a {type(sequence).__name__} {times:,} times")
    elif isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
        raise too_large("the product")


def _check_power(left: Any, right: Any) -> None:
    if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
        if left.bit_length() * right > MAX_INT_BITS:
            raise too_large("the power")


def _check_concat(left: Any, right: Any) -> None:
    if isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
        limit = MAX_SIZE if isinstance(left, str) else MAX_ITEMS
        if len(cast(Sequence[Any], left)) + len(cast(Sequence[Any], right)) > limit:
            raise too_large("the sum")


class TemplateEnvironment(PipelineEnvironment):
    """The pipeline sandbox for whole documents a client sends (markdown-report's `template`).

    Same allow-list, size limits and deadline (`expressions.render_template` applies them);
    blocks on lines of their own leave no indentation; `extra_filters` and `extra_tests` add the
    document's own helpers; `list_files` is not offered (a report renders the data it is given).
    """

    def __init__(self, extra_filters: Mapping[str, Callable[..., Any]], extra_tests: Mapping[str, Any]) -> None:
        super().__init__()
        self.lstrip_blocks = True
        self.globals.pop("list_files", None)
        self.filters.update(extra_filters)
        self.tests.update(extra_tests)


ENVIRONMENT = PipelineEnvironment()
GLOBALS: Mapping[str, Any] = ENVIRONMENT.globals
